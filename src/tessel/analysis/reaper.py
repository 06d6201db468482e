"""A watcher process that kills a process's descendants when that process dies (even by
SIGKILL, when none of its cleanup code runs).

Used for the local Ray cluster ``explore --ray auto`` starts: Ray's raylet, GCS and workers
die with the driver, but the agents the raylet starts (``ray::DashboardAgent``,
``ray::RuntimeEnvAgent``) outlive it. The watcher is a child of the driver; every
``period_s`` it records the driver's process tree from ``/proc`` (pid and start time, so a
reused pid is never killed), and once its own parent pid changes (the driver is gone) it
sends SIGKILL to every recorded process still alive, then exits. Linux only (``/proc``);
elsewhere it is not started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PROC = Path("/proc")


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time in clock ticks) of a live process, or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live descendant of ``root``."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            children.setdefault(st[0], []).append(int(entry.name))
            starts[int(entry.name)] = st[1]
    found: dict[int, int] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found[pid] = starts[pid]
            stack.extend(children.get(pid, ()))
    return found


def watch(parent: int, period_s: float = 0.2) -> None:
    """Record ``parent``'s tree until it is gone, then SIGKILL what is left of it."""
    me = os.getpid()
    tree: dict[int, int] = {}
    while os.getppid() == parent:
        tree.update(descendants(parent))
        tree = {p: s for p, s in tree.items() if p != me and (st := _stat(p)) and st[1] == s}
        time.sleep(period_s)
    for pid, start in tree.items():
        st = _stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def start_reaper() -> subprocess.Popen | None:
    """Start the watcher for this process (None where ``/proc`` is missing)."""
    if not (PROC / str(os.getpid()) / "stat").exists():
        return None
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"  # this process's tessel, not another
            f"from tessel.analysis.reaper import watch; watch({os.getpid()})")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
