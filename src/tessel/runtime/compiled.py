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
from tessel.display import short_repr, summary_html
from tessel.errors import TesselError, TesselFormatError
from tessel.ir import Graph, parse_graph, run_graph
from tessel.runtime.profile import Profile, build_profile


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
    def prologue(self) -> Graph | None:
        text = self.program.host_graphs.get("prologue")
        return parse_graph(text, "prologue") if text else None

    @cached_property
    def epilogue(self) -> Graph | None:
        text = self.program.host_graphs.get("epilogue")
        return parse_graph(text, "epilogue") if text else None

    @property
    def input_names(self) -> list[str]:
        return list(self.program.metadata["model_inputs"])

    @property
    def output_names(self) -> list[str]:
        return list(self.program.metadata["model_outputs"])

    def run(self, *inputs: np.ndarray, timing: bool = False) -> list[np.ndarray]:
        """Outputs for one set of inputs (numpy or torch tensors, in the model's order)."""
        from tessel.sim import simulate

        arrays = [_numpy(x) for x in inputs]
        names = self.input_names
        if len(arrays) != len(names):
            raise TesselError(f"the model takes {len(names)} input(s) {names}, got {len(arrays)}")
        env = dict(zip(names, arrays, strict=True))
        t0 = time.perf_counter()
        if self.prologue is not None:
            env.update(_host_values(self.prologue, env))
        t1 = time.perf_counter()
        npu_in = {d.name: env[d.name] for d in self.program.inputs}
        result = simulate(self.program, self.arch, npu_in, timing=timing)
        env.update(result.outputs)
        t2 = time.perf_counter()
        if self.epilogue is not None:
            env.update(_host_values(self.epilogue, env))
        t3 = time.perf_counter()
        self.last_run = RunStats(t2 - t1, (t1 - t0) + (t3 - t2))
        return [env[n] for n in self.output_names]

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
    except TesselError as exc:
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
    return {v.name: env[v.name] for v in graph.inputs}


def _numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


__all__ = ["CompiledModel", "RunStats", "load", "load_preset"]
