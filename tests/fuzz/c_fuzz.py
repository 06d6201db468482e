"""Sanitizer fuzzing of the C runtime's loader (``make fuzz``; a short seeded run in ``make test``).

    PYTHONPATH=src python tests/fuzz/c_fuzz.py --cases 100000 [--seed 1] [--differential 2000]

Builds tessel/runtime/c/fuzz/fuzz_load.c with libtessel and the C NPU model under
AddressSanitizer and UndefinedBehaviorSanitizer (any finding aborts the process), runs it on the
seed binaries of tests/fuzz/corpus, corpus/wdecoder (weights in DMA_LOAD_W streams, run with
the weight decoder on) and corpus/sparse (2:4 sparse CONV weights, run with sparsity on):
hostile variants of each (structured mutations that keep the checksums valid, raw ones); it runs
every binary the loader accepts on the C NPU model under a work budget and counts the traps on
malformed weight streams and on malformed 2:4 indices. --differential N also writes N cases and reads
each with the Python reader: a binary the C loader accepts must be one the Python reader
accepts, and the C loader refuses one the Python reader accepts only for a reason of its own (a
host op without a C kernel, a limit of the build, a type mismatch between host parts, a memory
index beyond its 8). Exit status 1 on a
sanitizer finding or a differential disagreement.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
# codes the C loader alone refuses (tessel/tessel.h): unsupported host op, host type mismatch,
# memory index beyond TSL_MEMORIES, a TSL_MAX_* limit of the build
C_ONLY_REFUSALS = {113, 114, 120, 130}


def seeds() -> list[Path]:
    """The seed binaries: the shared corpus, binaries whose weights are DMA_LOAD_W streams
    (run with the weight decoder on) and binaries with 2:4 sparse CONV weights (run with
    sparsity on)."""
    return sorted(CORPUS.glob("*.tsl")) + sorted((CORPUS / "wdecoder").glob("*.tsl")) + sorted(
        (CORPUS / "sparse").glob("*.tsl"))


def build(folder: Path | None = None) -> Path:
    """The sanitized fuzzer, built once per source hash (in `folder`, default a temp dir)."""
    from tessel.runtime.cbuild import C_ROOT, compiler, headers, sources

    files = sources(("src", "npu")) + [C_ROOT / "fuzz" / "fuzz_load.c"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in files + headers())).hexdigest()[:16]
    folder = folder or Path(tempfile.gettempdir())
    exe = folder / f"tessel-fuzz-load-{digest}"
    if not exe.exists():
        tmp = exe.with_suffix(".tmp")
        cmd = [*compiler().split(), "-std=c99", "-O1", "-g", *SANITIZE, "-Wall", "-Wextra",
               f"-I{C_ROOT / 'include'}", *map(str, files), "-o", str(tmp), "-lm"]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        tmp.replace(exe)
    return exe


def run(exe: Path, cases: int, seed: int, execute: bool = True, emit: Path | None = None,
        timeout: float = 3600) -> dict:
    """One fuzzer run: {"cases", "accepted", "ran", "trapped", "stream_traps" (malformed weight
    streams), "index_traps" (malformed 2:4 indices), "slowest_s", "refused": {code: n},
    "seconds", "returncode", "stderr"} (a sanitizer finding: returncode != 0, its report in
    stderr)."""
    cmd = [str(exe), "--cases", str(cases), "--seed", str(seed), "--quiet"]
    if execute:
        cmd.append("--run")
    if emit is not None:
        cmd += ["--emit", str(emit)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd + [str(p) for p in seeds()], capture_output=True, text=True,
                          timeout=timeout)
    out = {"seconds": time.perf_counter() - t0, "returncode": done.returncode,
           "stderr": done.stderr[-4000:], "refused": {}}
    head = re.search(r"cases (\d+), accepted (\d+), ran (\d+) \(trapped (\d+), on weight streams "
                     r"(\d+), on 2:4 indices (\d+)\), slowest ([\d.]+) s", done.stdout)
    if head:
        out.update(cases=int(head[1]), accepted=int(head[2]), ran=int(head[3]),
                   trapped=int(head[4]), stream_traps=int(head[5]), index_traps=int(head[6]),
                   slowest_s=float(head[7]))
    for code, n in re.findall(r"refused +(\d+) x(\d+):", done.stdout):
        out["refused"][int(code)] = int(n)
    return out


def differential(exe: Path, cases: int, seed: int) -> tuple[dict[str, int], list[str]]:
    """(outcome counts, disagreements) of the C loader vs the Python reader on `cases` cases."""
    from tessel.binary import read_tsl
    from tessel.errors import TesselError
    from tessel.runtime import cengine

    counts = {"both accept": 0, "both refuse": 0, "C alone refuses": 0}
    bad: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        result = run(exe, cases, seed, execute=False, emit=Path(tmp))
        if result["returncode"]:
            return counts, [f"sanitizer finding: {result['stderr']}"]
        for path in sorted(Path(tmp).glob("case_*.tsl")):
            data = path.read_bytes()
            try:
                read_tsl(data)
                python_ok = True
            except TesselError:
                python_ok = False
            code, err, _ = cengine.check(data)
            if code == 0 and python_ok:
                counts["both accept"] += 1
            elif code and not python_ok:
                counts["both refuse"] += 1
            elif code in C_ONLY_REFUSALS:
                counts["C alone refuses"] += 1
            else:
                why = cengine.describe(err) if code else "C accepts"
                bad.append(f"{path.name} (seed {seed}): Python {'accepts' if python_ok else 'refuses'}"
                           f", {why}")
    return counts, bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--differential", type=int, default=2000, metavar="N",
                   help="cases also read by the Python reader (0: none)")
    args = p.parse_args(argv)
    exe = build()
    r = run(exe, args.cases, args.seed)
    if r["returncode"]:
        print(f"SANITIZER FINDING (exit {r['returncode']}):\n{r['stderr']}")
        return 1
    print(f"C loader under ASan + UBSan: {r['cases']:,} hostile binaries (seed {args.seed}) in "
          f"{r['seconds']:.0f} s: 0 findings; accepted {r['accepted']:,}, run on the C NPU model "
          f"{r['ran']:,} (trapped {r['trapped']:,}, {r['stream_traps']:,} on malformed weight "
          f"streams, {r['index_traps']:,} on malformed 2:4 indices); slowest case "
          f"{r['slowest_s'] * 1000:.1f} ms; {len(r['refused'])} distinct refusal codes")
    for code, n in sorted(r["refused"].items()):
        print(f"  refused with code {code}: {n:,}")
    if args.differential:
        counts, bad = differential(exe, args.differential, args.seed + 1)
        print(f"differential, {args.differential:,} cases vs the Python reader: "
              + ", ".join(f"{k} {v:,}" for k, v in counts.items())
              + f", disagreements {len(bad)}")
        for line in bad[:20]:
            print("  " + line)
        if bad:
            return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    sys.exit(main())
