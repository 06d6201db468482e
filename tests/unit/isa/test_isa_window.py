"""tessel.isa.window: the window group is the same ten fields in CONV, DWCONV and POOL, and
``Window`` reads them, sweeps the frame of footprint's rule 5, and gives the input rows of a
band of output rows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from isa_samples import SAMPLES

from tessel.isa import SPECS, Opcode
from tessel.isa.footprint import window_frame
from tessel.isa.window import FIELD_OF, Window

WINDOWED = (Opcode.CONV, Opcode.DWCONV, Opcode.POOL)


def test_the_window_group_is_ten_consecutive_fields_of_every_windowed_opcode() -> None:
    names = list(FIELD_OF.values())
    for op in WINDOWED:
        row = [f.name for f in SPECS[op].fields]
        at = row.index(names[0])
        assert row[at:at + len(names)] == names, op.name


def test_window_of_an_instruction_and_back() -> None:
    for op in WINDOWED:
        ins = SAMPLES[op]
        w = Window.of(ins)
        assert w == Window.from_fields(ins.as_dict())
        assert ins.replace(**w.fields()) == ins
        assert w.frame() == window_frame(ins)


windows = st.builds(Window, *(st.integers(1, 9) for _ in range(6)), st.integers(0, 4),
                    st.integers(0, 4), st.integers(1, 12), st.integers(1, 12))


@given(windows, st.integers(0, 11), st.integers(1, 12), st.integers(1, 40))
def test_rows_for_are_the_rows_the_windows_read(w: Window, oy0: int, rows: int, h: int) -> None:
    rows = min(rows, w.oh - oy0) if oy0 < w.oh else 1
    r0, n, pad = w.rows_for(oy0, rows, h)
    read = {(oy0 + y) * w.sh - w.pt + ky * w.dh for y in range(rows) for ky in range(w.kh)}
    if any(0 <= r < h for r in read):  # the input rows from the first to the last one read
        assert (r0, r0 + n - 1) == (max(0, min(read)), min(h - 1, max(read)))
    assert r0 - pad == oy0 * w.sh - w.pt  # the tile's row 0 is the band's first window row
    assert n <= w.max_rows(rows, h) <= h
