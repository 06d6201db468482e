"""No ISA limit is re-typed outside tessel.isa: other modules' code names the limits of
tessel.isa.limits (MAX_EXTENT, MAX_KERNEL, NUM_TOKENS, ``LutMode.entries``, ...) instead of
writing 65535, 15 or 513. Only code is read (docstrings and comments may quote a value); a
value spelled in hexadecimal (a 0xFFFF mask) is not a limit."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "tessel"
# the ISA itself
NOT_COVERED = ("isa",)

# decimal values that are an ISA limit wherever they appear
VALUES = {
    65535: "MAX_EXTENT (a 16-bit extent field)",
    4095: "MAX_TILE_HW (a 12-bit tile side)",
    513: "LutMode.I16_513.entries",
    383: "MAX_CENTRED_INT8",
}
# ISA facts in the forms they were re-typed in: what to write instead -> pattern
PATTERNS = {
    "MAX_KERNEL (kernel taps)": r"\b15\s*\*\s*15\b|\bMAX_KERNEL\s*=\s*\d",
    "NUM_TOKENS": r"TOKENS?\s*=\s*\d|TOKEN_IDS\s*=\s*\d",
    "MIN_MATRIX_ZP / MAX_MATRIX_ZP": r"-\s*256\s*<=|<=\s*255\b",
    "MAX_LEFT_SHIFT / MAX_FRAC_BITS / MAX_SHIFT": r"\b0\s*<=\s*[\w.]+\s*<=\s*3[01]\b",
    "LutMode.entries / .centre": r"\b256\s+if\b|\belse\s+256\b|\(\s*256\s*,\s*\)|\b256\s*\+\s*\(",
    "LutMode.dtype": r"\bI(8_256|16_513)\s+else\s+\d",
    "a named row kind": r"\bkind\s*[!=]=\s*\d|\bops\[\w+,\s*0\]\s*[!=]=\s*\d",
    "ALL_ENGINES_MASK": r"\bpending\s*=\s*\d+\s*$",
    "the engines by name": r"\border\s*=\s*\(\s*\d",
    "NUM_ENGINES": r"\*\s*4\s*\+.*NUM_TOKENS|\b4\s*\*\s*4\s*\*\s*NUM_TOKENS",
    "MAX_CENTRED_INT8 (|x - zp|)": r"\b128\s*\+\s*255\b",
    "INTERPOLATION_BITS / LutMode.step": r">>\s*7\b",
    "a position from the field names (GEO.index)": r"\bgeo\[\d+\]",
}
# (module, the value or what to write instead) for uses that are not the ISA's
ALLOWED = {
    # bounds that must sit below the ISA; tests/unit/isa/test_isa_limits.py checks each equals
    # the ISA's
    ("arch/checks.py", "513"),
    ("frontend/tflite_import.py", "a named row kind"),  # a TFLite options kind
    ("quant/fuse_pointwise.py", "LutMode.entries / .centre"),  # the 256 int8 values
    ("frontend/tosa_import.py", "LutMode.entries / .centre"),  # TOSA's int8 TABLE size
}


def _code_lines(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line number, the line with its strings and comments blanked, its NUMBER tokens)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    numbers: dict[int, list[str]] = {}
    blank: dict[int, list[tuple[int, int]]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NUMBER:
            numbers.setdefault(tok.start[0], []).append(tok.string)
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            for row in range(tok.start[0], tok.end[0] + 1):
                lo = tok.start[1] if row == tok.start[0] else 0
                hi = tok.end[1] if row == tok.end[0] else len(lines[row - 1])
                blank.setdefault(row, []).append((lo, hi))
    out = []
    for k, line in enumerate(lines, start=1):
        chars = list(line)
        for lo, hi in blank.get(k, ()):
            chars[lo:hi] = " " * (hi - lo)
        out.append((k, "".join(chars), numbers.get(k, [])))
    return out


def _decimal(token: str) -> int | None:
    t = token.replace("_", "")
    if t[:2].lower() in ("0x", "0o", "0b"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return int(v) if v.is_integer() else None


def violations(path: Path, root: Path = SRC) -> list[str]:
    """Every ISA limit literal in the code of ``path`` (a module under ``root``)."""
    rel = path.relative_to(root).as_posix()
    out = []
    for k, code, numbers in _code_lines(path):
        for token in numbers:
            v = _decimal(token)
            if v in VALUES and (rel, token) not in ALLOWED:
                out.append(f"{rel}:{k}: {token} -> {VALUES[v]}")
        for instead, pattern in PATTERNS.items():
            if re.search(pattern, code) and (rel, instead) not in ALLOWED:
                out.append(f"{rel}:{k}: {code.strip()!r} -> {instead}")
    return out


def _modules() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py"))
            if p.relative_to(SRC).parts[0] not in NOT_COVERED]


def test_no_isa_limit_literal_outside_the_isa() -> None:
    found = [v for p in _modules() for v in violations(p)]
    assert not found, "ISA limits re-typed (use tessel.isa.limits):\n  " + "\n  ".join(found)


def test_the_scan_finds_each_kind_of_literal(tmp_path: Path) -> None:
    pkg = tmp_path / "tessel"
    (pkg / "ops").mkdir(parents=True)
    bad = pkg / "ops" / "bad.py"
    bad.write_text('"""65535 in a docstring is prose."""\n'
                   "MAX_DIM = 65535\nmask = x & 0xFFFF  # 65535 in a comment\n"
                   "ok = 4095.0 > y\nk = 15 * 15\nMAX_TOKEN_IDS = 16\n"
                   "if not -256 <= zp <= 255: pass\nif 0 <= s <= 31: pass\n"
                   "n = 256 if a else 513\nw = 1 if m == LutMode.I8_256 else 2\n"
                   "if kind == 4: pass\npending = 15\norder = (1, 2, 0, 3)\n"
                   "sem = [0] * (4 * 4 * NUM_TOKENS)\nMAX_DIFF = 128 + 255\nk = (v >> 7) + b\n"
                   "sh = geo[15]\n")
    found = violations(bad, pkg)
    lines = sorted({int(v.split(":")[1]) for v in found})
    assert lines == [2, *range(4, 18)], found
