"""Reads what an exported C program prints: each output as a `name: shape [..] dtype` line
followed by its values."""

from __future__ import annotations

import re

import numpy as np


def read_outputs(text: str) -> dict[str, np.ndarray]:
    """{output name: its values} from the exported program's output."""
    out: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        head = re.match(r"^(\S+): shape \[([0-9, ]*)\] (\w+)$", line)
        if head:
            name = head.group(1)
            out[name] = []
        elif name is not None:
            out[name].extend(line.split())
    return {k: np.array(v, np.float64) for k, v in out.items()}
