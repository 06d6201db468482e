"""`CompiledModel`: a loaded .tsl program that runs on the simulator, with its host parts.

    cm = tessel.compile(model, (x,), target="tnpu-s")
    y, = cm.run(x)              # host prologue -> NPU (bit-exact simulator) -> host epilogue
    print(cm.profile.summary())
    cm.save("model.tsl"); cm2 = tessel.load("model.tsl")
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from tessel.arch import NpuArch, arch_from_dict, load_preset  # noqa: F401
from tessel.binary import TslProgram, load_tsl, read_tsl, save_tsl, write_tsl
from tessel.binary.metadata import host_part_keys
from tessel.display import short_repr, summary_html
from tessel.errors import TesselError, TesselFormatError
from tessel.ir import Graph, parse_graph, run_graph
from tessel.runtime.profile import Profile, build_profile
from tessel.runtime.regions import Region, regions_of


@dataclass
class RunStats:
    """Wall time of the last run, split NPU simulation vs host ops."""

    npu_seconds: float = 0.0
    host_seconds: float = 0.0


@dataclass
class CompiledModel:
    program: TslProgram
    arch: NpuArch
    last_run: RunStats = field(default_factory=RunStats)

    @classmethod
    def from_bytes(cls, data: bytes, arch: NpuArch | None = None) -> CompiledModel:
        program = read_tsl(data)
        return cls(program, arch or _arch_of(program))

    @cached_property
    def binary(self) -> bytes:
        return write_tsl(self.program)

    @cached_property
    def regions(self) -> tuple[Region, ...]:
        """The NPU regions, in order (one with every descriptor for a format 1.0 file)."""
        return regions_of(self.program)

    @cached_property
    def host_parts(self) -> tuple[Graph | None, ...]:
        """Host part k runs before NPU region k+1 (prologue, host_1, ..., epilogue)."""
        keys = host_part_keys(len(self.regions))
        texts = self.program.host_graphs
        extra = sorted(set(texts) - set(keys))
        if extra:
            raise TesselFormatError(f"host graphs {extra} do not fit {len(self.regions)} NPU "
                                    "region(s)")
        return tuple(parse_graph(texts[k], k) if texts.get(k) else None for k in keys)

    @property
    def prologue(self) -> Graph | None:
        return self.host_parts[0]

    @property
    def epilogue(self) -> Graph | None:
        return self.host_parts[-1]

    @property
    def input_names(self) -> list[str]:
        """The model's inputs (metadata, checked by the reader; else the NPU inputs)."""
        default = [d.name for d in self.program.inputs]
        return list(self.program.metadata.get("model_inputs", default))

    @property
    def output_names(self) -> list[str]:
        default = [d.name for d in self.program.outputs]
        return list(self.program.metadata.get("model_outputs", default))

    def run(self, *inputs: np.ndarray, timing: bool = False) -> list[np.ndarray]:
        """Outputs for one set of inputs (numpy or torch tensors, in the model's order)."""
        from tessel.sim.api import NpuSession

        arrays = [_numpy(x) for x in inputs]
        names = self.input_names
        if len(arrays) != len(names):
            raise TesselError(f"the model takes {len(names)} input(s) {names}, got {len(arrays)}")
        env = dict(zip(names, arrays, strict=True))
        hosts, regions = self.host_parts, self.regions
        npu = NpuSession(self.program, self.arch)
        stats = RunStats()
        for k, host in enumerate(hosts):
            t0 = time.perf_counter()
            if host is not None:
                env.update(_host_values(host, env))
            t1 = time.perf_counter()
            stats.host_seconds += t1 - t0
            if k < len(regions):
                r = regions[k]
                env.update(npu.run_region({n: _get(env, n) for n in r.inputs}, r.ends,
                                          list(r.outputs)))
                stats.npu_seconds += time.perf_counter() - t1
        self.last_run = stats
        return [_get(env, n) for n in self.output_names]

    @cached_property
    def profile(self) -> Profile:
        """Cycles, energy, traffic and per-layer figures (the timing model is data-independent)."""
        return build_profile(self.program, self.arch)

    def save(self, path: str | Path) -> None:
        save_tsl(path, self.program)

    def __repr__(self) -> str:  # short: the program is megabytes (never dump it)
        meta = self.program.metadata
        return short_repr("CompiledModel", [
            ("model", repr(meta.get("model", "?"))), ("target", repr(self.arch.name)),
            ("inputs", self.input_names), ("outputs", self.output_names),
            ("layers", len(meta.get("layers", ()))),
            ("host_ops", len(meta.get("host_ops", ())))])

    def _repr_html_(self) -> str:
        """Notebook view: the binary, the profile summary and the slowest layers."""
        meta = self.program.metadata
        head = [f"target {self.arch.name}: {self.arch.description}",
                f"inputs {self.input_names}, outputs {self.output_names}; "
                f"{len(meta.get('layers', ()))} NPU layers, "
                f"{len(meta.get('host_ops', ()))} host ops"]
        return summary_html(f"CompiledModel {meta.get('model', '?')}", head) + \
            self.profile._repr_html_()


def load(path: str | Path, arch: NpuArch | None = None) -> CompiledModel:
    """Load and validate a .tsl file; the architecture comes from its metadata unless given."""
    program = load_tsl(path)
    return CompiledModel(program, arch or _arch_of(program))


def _arch_of(program: TslProgram) -> NpuArch:
    spec = program.metadata.get("arch")
    if not isinstance(spec, dict):
        raise TesselFormatError("metadata has no 'arch' description; pass arch= to load")
    try:
        arch = arch_from_dict(spec)
    except (TesselError, TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
        raise TesselFormatError(f"metadata 'arch' is not a valid architecture: {exc}") from None
    if arch.arch_hash_bytes != program.arch_hash:
        raise TesselFormatError("metadata 'arch' does not match the header's arch hash")
    return arch


def _host_values(graph: Graph, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of a host graph (prologue / epilogue) run by the golden kernels."""
    from tessel.quant.golden import GOLDEN_KERNELS

    values = run_graph(graph, _bind(graph, env), kernels=GOLDEN_KERNELS, keep_all=True)
    assert isinstance(values, dict)  # keep_all=True: name -> value
    return values


def _bind(graph: Graph, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {v.name: _get(env, v.name) for v in graph.inputs}


def _get(env: dict[str, np.ndarray], name: str) -> np.ndarray:
    if name not in env:
        raise TesselFormatError(f"value {name!r} is read before any part of the program "
                                "computes it")
    return env[name]




def _numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


__all__ = ["CompiledModel", "RunStats", "load", "load_preset"]
