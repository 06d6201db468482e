"""The per-layer CSV: one row per layer, values equal to the profile's, quoting survives
commas, the optional SRAM column."""

from __future__ import annotations

import csv
import io

import pytest

from tessel.analysis.csv import csv_text, write_csv
from tessel.analysis.timeline import build_timeline


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_one_row_per_layer_with_the_profile_figures(compiled, tmp_path):
    prof = compiled.profile
    path = write_csv(prof, tmp_path / "layers.csv")
    got = rows(path.read_text())
    assert [r["layer"] for r in got] == [lay.label for lay in prof.layers]
    assert [r["ir_name"] for r in got] == [lay.name for lay in prof.layers]
    for r, lay in zip(got, prof.layers, strict=True):
        assert (r["op"], r["loc"], r["mapping"], r["bound"]) == (lay.op, lay.loc, lay.mapping,
                                                                 lay.bound)
        assert int(r["cycles"]) == lay.cycles and int(r["macs"]) == lay.macs
        assert int(r["estimated_cycles"]) == lay.estimated_cycles
        assert float(r["mac_utilisation_pct"]) == pytest.approx(100 * lay.mac_utilisation,
                                                                abs=0.01)
        assert float(r["cycles_share_pct"]) == pytest.approx(100 * lay.cycles / prof.cycles,
                                                             abs=0.01)
        assert float(r["energy_pj"]) == pytest.approx(lay.energy_pj, abs=0.1)
        for m in prof.bytes_read:
            assert int(r[f"{m}_read_bytes"]) == lay.bytes_read[m]
            assert int(r[f"{m}_written_bytes"]) == lay.bytes_written[m]
        err = 100 * (lay.estimated_cycles - lay.cycles) / lay.cycles
        assert float(r["estimate_error_pct"]) == pytest.approx(err, abs=0.01)
    assert "sram_working_set_bytes" not in got[0]


def test_sram_column_and_quoting(compiled):
    prof = compiled.profile
    peaks = build_timeline(compiled).sram_peaks.per_layer_working_set
    weird = type(prof.layers[0])(**{**prof.layers[0].__dict__, "loc": 'a.py:1, "x"'})
    prof2 = type(prof)(**{**prof.__dict__, "layers": (weird, *prof.layers[1:])})
    got = rows(csv_text(prof2, peaks))
    assert got[0]["loc"] == 'a.py:1, "x"'
    assert [int(r["sram_working_set_bytes"]) for r in got] == list(peaks)
    assert all(0 < p <= compiled.arch.onchip.sram_bytes for p in peaks)
    with pytest.raises(ValueError):
        csv_text(prof, peaks[:1])
