"""tessel.fileio under faults: a write that fails (full disk, signal) leaves the previous file
intact and no temporary file; new files follow the umask; destinations are checked up front;
SIGTERM during a write removes the temporary file and exits with 143."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tessel import fileio
from tessel.binary import read_tsl, save_tsl
from tessel.binary.text import program_from_text
from tessel.cli import main
from tessel.errors import TesselConfigError

HERE = Path(__file__).parent


def _full_disk(fd: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    fileio.write_atomic(path, "old\n")
    monkeypatch.setattr(fileio.os, "fsync", _full_disk)
    with pytest.raises(TesselConfigError, match="No space left on device"):
        fileio.write_atomic(path, "new " * 1000)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_interrupted_write_removes_its_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "out.txt"
    fileio.write_atomic(path, "old\n")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fileio.write_atomic(path, "new\n")
    assert path.read_text() == "old\n" and len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_files_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        written = fileio.write_atomic(tmp_path / "f.txt", "x")
    finally:
        os.umask(old)
    assert written.stat().st_mode & 0o777 == 0o666 & ~umask


def test_check_writable(tmp_path):
    (tmp_path / "file").write_text("x")
    fileio.check_writable(tmp_path / "new.tsl")
    fileio.check_writable(tmp_path / "a" / "b", directory=True)  # created later
    for bad, why in [(tmp_path / "nope" / "x.tsl", "does not exist"),
                     (tmp_path / "file" / "x.tsl", "not a directory"),
                     (tmp_path, "is a directory"), (Path("/proc/x.tsl"), "cannot write")]:
        with pytest.raises(TesselConfigError, match=why):
            fileio.check_writable(bad)
    with pytest.raises(TesselConfigError, match="not a directory"):
        fileio.check_writable(tmp_path / "file", directory=True)


def test_save_tsl_goes_through_the_atomic_writer(tmp_path, monkeypatch):
    program = program_from_text((HERE / "copy16.tasm").read_text())
    path = tmp_path / "p.tsl"
    save_tsl(path, program)
    before = path.read_bytes()
    monkeypatch.setattr(fileio.os, "fsync", _full_disk)
    with pytest.raises(TesselConfigError, match="No space left"):
        save_tsl(path, program)
    assert path.read_bytes() == before and read_tsl(before)
    with pytest.raises(TesselConfigError, match="cannot write"):
        save_tsl(tmp_path / "missing" / "p.tsl", program)


def test_opt_on_a_full_disk_keeps_the_old_output(tmp_path, monkeypatch, capsys):
    src = tmp_path / "in.tir"
    src.write_text(_small_ir())
    out = tmp_path / "out.tir"
    assert main(["opt", str(src), "-o", str(out)]) == 0
    before = out.read_text()
    monkeypatch.setattr(fileio.os, "fsync", _full_disk)
    assert main(["opt", str(src), "-o", str(out)]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert out.read_text() == before and not list(tmp_path.glob("*.tmp"))


SLOW_WRITE = ("import sys, time\n"
              "from tessel import fileio\n"
              "real = fileio.os.fsync\n"
              "def slow(fd):\n"
              "    print('writing', flush=True); time.sleep(30); real(fd)\n"
              "fileio.os.fsync = slow\n"
              "from tessel.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")


def test_sigterm_during_a_write_leaves_no_temporary_file(tmp_path):
    src = tmp_path / "in.tir"
    src.write_text(_small_ir())
    out = tmp_path / "out.tir"
    out.write_text("previous\n")
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, "opt", str(src), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        assert list(tmp_path.glob(".out.tir.*.tmp")), "the write window was not reached"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143 and "tessel opt: terminated" in err
    assert "Traceback" not in err
    assert out.read_text() == "previous\n" and not list(tmp_path.glob("*.tmp"))


def test_destination_is_checked_before_the_work(tmp_path, capfd):
    """compile of an unwritable destination fails before quantising anything (the time this
    takes is measured in docs/benchmarks.md, not asserted here)."""
    assert main(["compile", "mobilenet_v2", "-o", str(tmp_path / "missing" / "x.tsl")]) == 1
    err = capfd.readouterr().err
    assert "does not exist" in err and "quantising" not in err


def _small_ir() -> str:
    return ("graph @small(%x: tensor<2x2xf32>) {\n"
            "  %a = sigmoid(%x) : tensor<2x2xf32>\n"
            "  %b = neg(%a) : tensor<2x2xf32>\n"
            "  return %b\n"
            "}\n")


def test_leftover_of_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = tmp_path / f".out.tsl.{dead.pid}.abc123.tmp"  # as a SIGKILLed writer leaves it
    leftover.write_bytes(b"half")
    live = tmp_path / f".out.tsl.{os.getpid()}.def456.tmp"  # a concurrent writer: kept
    live.write_bytes(b"busy")
    fileio.write_atomic(tmp_path / "out.tsl", b"data")
    assert not leftover.exists() and live.exists()
    assert (tmp_path / "out.tsl").read_bytes() == b"data"
