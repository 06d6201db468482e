"""The suite's collection order (tests/conftest.py): files with a `slow` test come first, each
file's tests together and in their order, the other files after them in their order."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


@dataclass
class FakeItem:
    path: Path
    name: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None


def _hook():
    spec = importlib.util.spec_from_file_location("suite_conftest", TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.pytest_collection_modifyitems


def test_files_with_slow_tests_come_first_and_stay_together() -> None:
    a, b, c, d = (Path(f"tests/{x}.py") for x in "abcd")
    items = [FakeItem(a, "a1"), FakeItem(a, "a2"), FakeItem(b, "b1"), FakeItem(b, "b2", True),
             FakeItem(b, "b3"), FakeItem(c, "c1"), FakeItem(d, "d1", True), FakeItem(d, "d2")]
    _hook()(None, items)
    assert [i.name for i in items] == ["b1", "b2", "b3", "d1", "d2", "a1", "a2", "c1"]
