"""The search steps of ``tessel.analysis.precision.choose_weights`` (its module docstring,
steps 3-5), on layer indices and a ``value_of(chosen)`` that measures a set of int4 layers:
the longest measured prefix of an order, the fill of the layers past it, the exchanges. They
know nothing of models: ``saved`` is each layer's bytes saved as int4, ``noises`` its predicted
output noise power."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

FILL_TRIES = 4  # layers past the prefix measured in vain before the plan stops adding
EXCHANGE_TRIES = 6  # exchanges measured (kept or not) after the fill


def longest_prefix(order: Sequence[int], value_of: Callable[[Sequence[int]], float],
                   goal: float, guess: int) -> int:
    """The length of the longest prefix of ``order`` whose measured value meets ``goal``,
    measuring ``guess`` first and bisecting from there (the empty prefix meets it by
    definition)."""
    lo, hi = 0, len(order)  # the prefix of lo layers meets the goal; the answer is <= hi
    if value_of(order[:guess]) >= goal:
        lo = guess
    else:
        hi = guess - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if value_of(order[:mid]) >= goal else (lo, mid - 1)
    return lo


def fill(picked: Sequence[int], rest: Sequence[int], noises: Sequence[float],
         value_of: Callable[[Sequence[int]], float], goal: float) -> list[int]:
    """``picked`` and, of the layers ``rest`` (quietest first), each that still meets ``goal``
    measured with the ones kept before it; stops after FILL_TRIES misses."""
    picked = list(picked)
    misses = 0
    for i in sorted(rest, key=lambda j: (noises[j], j)):
        if misses >= FILL_TRIES:
            break
        if value_of([*picked, i]) >= goal:
            picked.append(i)
        else:
            misses += 1
    return picked


def exchange(picked: Sequence[int], saved: Sequence[int], noises: Sequence[float],
             value_of: Callable[[Sequence[int]], float], goal: float, base: float,
             history: Mapping[frozenset[int], float]) -> list[int]:
    """``picked`` (which meets ``goal``) improved by exchanges: a layer left out comes in for
    chosen layers that save fewer bytes together, when the noise model predicts the budget
    may still hold (:func:`_allowed_noise`, fitted to the measurements in ``history``, which
    ``value_of`` adds to; ``base`` is the all-int8 value). The exchange with the most bytes
    gained is measured first and kept when it meets ``goal``; at most EXCHANGE_TRIES
    exchanges are measured."""
    picked = list(picked)
    tried: set[frozenset[int]] = set()
    for _ in range(EXCHANGE_TRIES):
        value_of(picked)
        allowed = _allowed_noise(history, noises, base, base - goal)
        noise = sum(noises[i] for i in picked)
        best = None
        for r in sorted(set(range(len(saved))) - set(picked)):
            drop = _cover(noise + noises[r] - allowed, picked, saved, noises)
            if drop is None:
                continue
            new = frozenset(picked) - drop | {r}
            gain = saved[r] - sum(saved[i] for i in drop)
            rank = (-gain, sum(noises[i] for i in new), r)
            if gain > 0 and new not in tried and (best is None or rank < best[0]):
                best = (rank, r, drop)
        if best is None:
            break
        _, r, drop = best
        new = [i for i in picked if i not in drop] + [r]
        tried.add(frozenset(new))
        if value_of(new) >= goal:
            picked = new
    return picked


def _allowed_noise(history: Mapping[frozenset[int], float], noises: Sequence[float],
                   base: float, loss: float) -> float:
    """The total noise a set may have and still be worth measuring: the measured losses
    (``base`` less each value in ``history``; those up to twice the budget ``loss``, where the
    plan is chosen) fitted as proportional to the sets' noise, the budget widened by twice the
    fit's RMS error (a prediction within the model's own error of the budget may measure
    within it; the measurement decides)."""
    points = [(sum(noises[i] for i in key), base - value) for key, value in history.items()
              if key and base - value <= 2 * loss]
    nn = sum(n * n for n, _ in points)
    slope = sum(n * x for n, x in points) / nn if nn > 0 else 0.0
    if slope <= 0:
        return math.inf
    rms = math.sqrt(sum((x - slope * n) ** 2 for n, x in points) / len(points))
    return (loss + 2 * rms) / slope


def _cover(need: float, chosen: Sequence[int], saved: Sequence[int], noises: Sequence[float]
           ) -> frozenset[int] | None:
    """Chosen layers whose noise adds up to at least ``need`` for few bytes saved: the most
    noise per byte first, then those the rest still cover without, largest first; or the
    single layer that covers it with the fewest bytes, whichever saves fewer (None: no cover)."""
    if need <= 0:
        return frozenset()
    drop, total = [], 0.0
    for i in sorted(chosen, key=lambda j: (-noises[j] / max(saved[j], 1), j)):
        if total >= need:
            break
        drop.append(i)
        total += noises[i]
    if total < need:
        return None
    for i in sorted(drop, key=lambda j: (-saved[j], j)):
        if total - noises[i] >= need:
            drop.remove(i)
            total -= noises[i]
    singles = [i for i in chosen if noises[i] >= need]
    one = min(singles, key=lambda j: (saved[j], j), default=None)
    if one is not None and saved[one] < sum(saved[i] for i in drop):
        return frozenset({one})
    return frozenset(drop)
