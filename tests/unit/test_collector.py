"""tessel.collector.few_collections: the collector's settings are put back on exit (also on an
error and when nested), a caller's own frozen objects stay frozen, and garbage made inside is
still collected."""

from __future__ import annotations

import gc

import pytest

from tessel.collector import few_collections


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
