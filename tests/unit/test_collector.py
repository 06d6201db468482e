"""tessel.collector: few_collections' settings are put back on exit (also on an error and when
nested), a caller's own frozen objects stay frozen, and garbage made inside is still collected;
no_collections turns the collector off and back on, and the backend it runs (compile_graph,
the schedule stage, explore's design points) leaves no cyclic garbage, which is what makes
turning the collector off there free."""

from __future__ import annotations

import gc

import pytest

from tessel.analysis.explore import quantised_graphs
from tessel.analysis.explore_run import evaluate_point
from tessel.arch import load_preset
from tessel.collector import few_collections, no_collections
from tessel.driver import compile_graph


def test_settings_are_restored_and_nesting_is_a_no_op() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with few_collections(young=12_345):
        assert gc.get_threshold()[0] == 12_345
        assert gc.get_freeze_count() > frozen  # what was alive on entry
        inner = gc.get_freeze_count()
        with few_collections(young=99):  # (frozen objects may still be freed: count falls)
            assert gc.get_threshold()[0] == 12_345 and gc.get_freeze_count() <= inner
        assert gc.get_threshold()[0] == 12_345
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_restored_after_an_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError), few_collections():
        raise ValueError("boom")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_callers_frozen_objects_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with few_collections():  # not frozen again (frozen objects may still be freed)
            assert 0.9 * frozen < gc.get_freeze_count() <= frozen
        assert 0.9 * frozen < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_cyclic_garbage_made_inside_is_collected() -> None:
    class Node:
        pass

    with few_collections(young=100):
        for _ in range(5_000):  # each a reference cycle: only the collector frees them
            a, b = Node(), Node()
            a.other, b.other = b, a
        del a, b
        live = sum(isinstance(o, Node) for o in gc.get_objects())
    assert live < 5_000  # collections still ran inside the block


def test_no_collections_turns_the_collector_off_and_back_on() -> None:
    before = gc.get_threshold()
    with no_collections():
        assert not gc.isenabled()
        with few_collections(young=99):  # nested: nothing more
            assert not gc.isenabled() and gc.get_threshold() == before
    assert gc.isenabled() and gc.get_threshold() == before and gc.get_freeze_count() == 0
    with few_collections(young=12_345), no_collections():  # nested the other way round
        assert gc.isenabled() and gc.get_threshold()[0] == 12_345
    with pytest.raises(ValueError), no_collections():
        raise ValueError("boom")
    assert gc.isenabled()


def test_no_collections_makes_what_it_made_old_and_still_collectable() -> None:
    class Node:
        pass

    with no_collections():
        kept = Node()
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only a collection frees it
        gone = id(a)
        del a, b
    assert gc.get_freeze_count() == 0
    assert all(o is not kept for o in gc.get_objects(generation=0))  # not walked when young
    assert any(o is kept for o in gc.get_objects(generation=2))
    gc.collect()
    assert all(id(o) != gone for o in gc.get_objects() if type(o) is Node)


def test_no_collections_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with no_collections():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def _cyclic_garbage_of(*runs) -> list[int]:
    """Objects the collector finds unreachable after each run ran with the collector off: one
    full collection before the first run and one after each (which is also the one before the
    next; a full collection of a test worker's heap takes seconds)."""
    gc.collect()
    found = []
    for run in runs:
        gc.disable()
        try:
            run()
        finally:
            gc.enable()
        found.append(gc.collect())
    return found


@pytest.mark.slow
@pytest.mark.parametrize("model", ["ds_cnn", "mobilenet_v2"])
def test_the_backend_makes_no_cyclic_garbage(model: str) -> None:
    """A compile with chains, residency and prefetch (tnpu-s), one that spills (u55-256), and
    a design point: everything they drop is freed by reference counting."""
    graph = quantised_graphs([model], 2, None)[model]
    point = {"matrix.rows": 8, "matrix.cols": 16, "vector.lanes": 32}
    assert _cyclic_garbage_of(
        lambda: compile_graph(graph, load_preset("tnpu-s")).binary,
        lambda: compile_graph(graph, load_preset("u55-256")).binary,
        lambda: evaluate_point(point, {model: graph}, load_preset("tnpu-s"))) == [0, 0, 0]


def test_the_garbage_check_sees_cycles() -> None:
    """_cyclic_garbage_of counts cycles a run drops (so the test above could fail)."""
    class Node:
        pass

    def run() -> None:
        a, b = Node(), Node()
        a.other, b.other = b, a

    first, second = _cyclic_garbage_of(run, run)  # the first run and one after another
    assert first >= 2 and second >= 2
