"""Fixtures shared by the simulator tests."""

from __future__ import annotations
