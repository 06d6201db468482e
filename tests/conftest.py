"""Suite-wide settings: one torch thread per xdist worker (two workers share two cores)."""

from __future__ import annotations

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
