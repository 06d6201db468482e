"""The search of tessel.analysis.precision on synthetic measurements: where the bytes-per-noise
prefix and its fill stop short, an exchange finds more bytes within the same goal, keeps only
what measures within it, and measures a bounded number of candidates."""

from __future__ import annotations

from collections.abc import Sequence

from tessel.analysis.precision_search import (
    EXCHANGE_TRIES,
    FILL_TRIES,
    exchange,
    fill,
    longest_prefix,
)


class Measured:
    """value_of for the search: minus the sum of the chosen layers' noises (plus ``extra``
    for some sets), counting the distinct sets measured."""

    def __init__(self, noises: Sequence[float], extra: dict[frozenset[int], float] | None = None
                 ) -> None:
        self.noises, self.extra = noises, extra or {}
        self.sets: dict[frozenset[int], float] = {}  # every set measured: its value

    def __call__(self, chosen: Sequence[int]) -> float:
        key = frozenset(chosen)
        self.sets[key] = -sum(self.noises[i] for i in key) - self.extra.get(key, 0.0)
        return self.sets[key]


def _search(saved, noises, value_of, goal):
    order = sorted(range(len(saved)), key=lambda i: (-saved[i] / noises[i], i))
    k = longest_prefix(order, value_of, goal, len(order))
    picked = fill(order[:k], order[k:], noises, value_of, goal)
    return picked, exchange(picked, saved, noises, value_of, goal, 0.0, value_of.sets)


def test_an_exchange_finds_the_bytes_the_greedy_order_leaves():
    # three small layers with the best bytes per noise fill 3 of the budget's 5; the large
    # one (4.6) no longer fits beside them, though alone it saves more than the three
    saved, noises = [10, 10, 10, 45], [1.0, 1.0, 1.0, 4.6]
    value_of = Measured(noises)
    greedy, best = _search(saved, noises, value_of, -5.0)
    assert sorted(greedy) == [0, 1, 2]
    assert sorted(best) == [3] and value_of(best) >= -5.0
    assert sum(saved[i] for i in best) == 45 > sum(saved[i] for i in greedy)


def test_an_exchange_keeps_only_what_measures_within_the_goal():
    # the noise model predicts the exchange fits, the measurement says it does not
    saved, noises = [10, 10, 10, 45], [1.0, 1.0, 1.0, 4.6]
    value_of = Measured(noises, {frozenset({3}): 1.0})
    greedy, best = _search(saved, noises, value_of, -5.0)
    assert sorted(best) == sorted(greedy) == [0, 1, 2]
    assert frozenset({3}) in value_of.sets  # measured, then refused


def test_the_exchange_gives_back_as_few_bytes_as_the_noise_needs():
    # a large noisy layer in for one small one, not for all of them
    saved, noises = [10, 10, 10, 10, 60], [1.0, 1.0, 1.0, 1.0, 7.0]
    value_of = Measured(noises)
    greedy, best = _search(saved, noises, value_of, -8.0)
    assert sorted(greedy) == [0, 1, 2, 3]
    assert len(best) == 2 and 4 in best and value_of(best) >= -8.0


def test_the_measurements_are_bounded():
    # every set with a layer past the prefix measures far out of the goal: the fill and the
    # exchange each measure a bounded number of candidates, all refused
    n = 40
    saved = [100 + 10 * i for i in range(n)]
    noises = [1.0 + 0.2 * i for i in range(n)]
    order = sorted(range(n), key=lambda i: (-saved[i] / noises[i], i))

    class Refusing(Measured):
        def __call__(self, chosen):
            key = frozenset(chosen)
            late = any(order.index(i) >= 8 for i in key)
            self.sets[key] = super().__call__(chosen) - (100.0 if late else 0.0)
            return self.sets[key]

    value_of = Refusing(noises)
    goal = -sum(noises[i] for i in order[:8]) - 10.0  # the noise model: room for one more of any
    k = longest_prefix(order, value_of, goal, n)
    assert k == 8
    before = len(value_of.sets)
    picked = fill(order[:k], order[k:], noises, value_of, goal)
    assert picked == order[:8] and 0 < len(value_of.sets) - before <= FILL_TRIES
    before = len(value_of.sets)
    assert exchange(picked, saved, noises, value_of, goal, 0.0, value_of.sets) == picked
    assert len(value_of.sets) - before == EXCHANGE_TRIES
