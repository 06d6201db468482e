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
from tessel.binary import TslProgram, load_tsl, read_tsl, write_tsl
from tessel.binary.metadata import host_part_keys
from tessel.display import plural, short_repr, summary_html
from tessel.errors import TesselConfigError, TesselError, TesselFormatError
from tessel.fileio import write_atomic
from tessel.ir import Graph, parse_graph, run_graph
from tessel.runtime.cengine import CEngine, Engine, engine_of
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
        return tuple(self._host_graph(k) if texts.get(k) else None for k in keys)

    def _host_graph(self, key: str) -> Graph:
        """Host part `key`'s graph: the reader's (it parsed the text to check it) while the
        program still holds that text, else parsed here."""
        text = self.program.host_graphs[key]
        text_graph = (self.program.parsed_host or {}).get(key)
        if text_graph is not None and text_graph[0] == text:  # identity first: the same str
            return text_graph[1]
        return parse_graph(text, key)

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

    def run(self, *inputs: np.ndarray, timing: bool = False, allow_nonfinite: bool = False,
            engine: Engine | str = Engine.PYTHON) -> list[np.ndarray]:
        """Outputs for one set of inputs (numpy or torch tensors, in the model's order).

        The inputs are checked first (count, shape, dtype, integer range, and NaN / inf unless
        ``allow_nonfinite``, with which NaN quantises as 0.0 and +-inf to the ends of the range):
        TesselConfigError naming the input. ``timing`` is accepted for
        compatibility; cycles and energy are data-independent, see ``profile``.
        ``engine="c"`` runs the binary with the C runtime on the C NPU model (built with the
        system C compiler on first use; docs/runtime.md), bit-exact with the simulator.
        """
        if engine_of(engine) is Engine.C:
            from tessel.runtime.inputs import check_inputs

            arrays = check_inputs(self, [_numpy(x) for x in inputs],
                                  allow_nonfinite=allow_nonfinite)
            return self._run_c(arrays)
        return self._run(inputs, None, allow_nonfinite)

    @cached_property
    def c_engine(self) -> CEngine:
        """The binary loaded by the C runtime on the C NPU model of `arch` (built on first use;
        TesselConfigError in one line when no C compiler is available)."""
        return CEngine(self.binary, self.arch)

    def _run_c(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        t0 = time.perf_counter()
        outputs = self.c_engine.run(*arrays)
        self.last_run = RunStats(npu_seconds=time.perf_counter() - t0)
        return outputs

    def run_batch(self, *inputs: np.ndarray, allow_nonfinite: bool = False,
                  max_batch: int = 64, engine: Engine | str = Engine.PYTHON
                  ) -> list[np.ndarray]:
        """Outputs for N samples at once: every input has a leading batch axis of N samples
        stacked (``inputs[i][k]`` is sample k's input i, shaped as ``run`` takes it), every
        output gets the same leading axis. Equal, bit for bit, to calling ``run`` on each
        sample and stacking the results; the NPU regions simulate the samples together
        (``tessel.sim.state.BatchState``), host parts run sample by sample. Runs at most
        ``max_batch`` samples at a time, fewer if that many would exceed the simulator's
        memory budget (``tessel.sim.budget``: 1 GiB by default, the batch included).
        ``engine="c"``: the C runtime, one sample after the other.
        """
        from tessel.runtime.inputs import check_inputs

        arrays = check_inputs(self, [_numpy(x) for x in inputs],
                              allow_nonfinite=allow_nonfinite, batch=True)
        n = arrays[0].shape[0] if arrays else 0
        if engine_of(engine) is Engine.C and n:
            t0 = time.perf_counter()
            runs = [self.c_engine.run(*(a[k] for a in arrays)) for k in range(n)]
            self.last_run = RunStats(npu_seconds=time.perf_counter() - t0)
            return [np.stack(v) for v in zip(*runs, strict=True)]
        if max_batch < 1:
            raise TesselConfigError(f"run_batch: max_batch must be >= 1, got {max_batch}")
        if n == 0:
            raise TesselConfigError("run_batch: the batch is empty (leading axis of 0 samples)")
        from tessel.sim.budget import check_budget, samples_within_budget
        from tessel.sim.prepare import prepared

        prep = prepared(self.program, self.arch)
        check_budget(prep)  # one sample must fit; a batch is split into chunks that fit
        step = min(max_batch, samples_within_budget(prep))
        parts, stats = [], RunStats()
        for lo in range(0, n, step):
            parts.append(self._run([a[lo:lo + step] for a in arrays], True, True))
            stats.npu_seconds += self.last_run.npu_seconds
            stats.host_seconds += self.last_run.host_seconds
        self.last_run = stats
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))]

    def _run(self, inputs, batch: bool | None, allow_nonfinite: bool) -> list[np.ndarray]:
        from tessel.runtime.inputs import check_inputs
        from tessel.sim.api import NpuSession

        arrays = [_numpy(x) for x in inputs]
        if batch is None:  # run(): one sample, checked here (run_batch has checked the batch)
            arrays = check_inputs(self, arrays, allow_nonfinite=allow_nonfinite)
        n = arrays[0].shape[0] if batch and arrays else None
        names = self.input_names
        # one sample: the memories of the previous run, reset (no new 100s-of-MiB mappings)
        npu = NpuSession(self.program, self.arch, batch=n, reuse=n is None)
        try:
            return self._run_parts(npu, envs_of(names, arrays, n), n)
        finally:
            npu.release()

    def _run_parts(self, npu, envs: list[dict[str, np.ndarray]], n: int | None
                   ) -> list[np.ndarray]:
        """Host parts and NPU regions in order (``_run``)."""
        from tessel.threads import single_threaded

        hosts, regions = self.host_parts, self.regions
        stats = RunStats()
        for k, host in enumerate(hosts):
            t0 = time.perf_counter()
            if host is not None:
                for env in envs:
                    env.update(_host_values(host, env))
            t1 = time.perf_counter()
            stats.host_seconds += t1 - t0
            if k < len(regions):
                r = regions[k]
                if n is None:
                    feed = {name: _get(envs[0], name) for name in r.inputs}
                else:
                    feed = {name: np.stack([_get(env, name) for env in envs])
                            for name in r.inputs}
                with single_threaded():  # small tiles: one BLAS thread is several times faster
                    out = npu.run_region(feed, r.ends, list(r.outputs))
                if n is None:
                    envs[0].update(out)
                else:
                    for j, env in enumerate(envs):
                        env.update({name: v[j] for name, v in out.items()})
                stats.npu_seconds += time.perf_counter() - t1
        self.last_run = stats
        if n is None:
            return [_get(envs[0], name) for name in self.output_names]
        return [np.stack([_get(env, name) for env in envs]) for name in self.output_names]

    @cached_property
    def profile(self) -> Profile:
        """Cycles, energy, traffic and per-layer figures (the timing model is data-independent).
        A DMA naming an off-chip memory the target lacks (a run traps on it) is refused."""
        from tessel.binary.memory import check_dma_memories

        check_dma_memories(self.program, len(self.arch.offchip))
        return build_profile(self.program, self.arch)

    def save(self, path: str | Path) -> None:
        """Write the binary to `path` atomically (the bytes `binary` serialised once: the
        compiler has already serialised it to validate it)."""
        write_atomic(path, self.binary)

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
                f"{plural(len(meta.get('layers', ())), 'NPU layer')}, "
                f"{plural(len(meta.get('host_ops', ())), 'host op')}"]
        return summary_html(f"CompiledModel {meta.get('model', '?')}", head) + \
            self.profile._repr_html_()


def envs_of(names: list[str], arrays: list[np.ndarray], n: int | None
            ) -> list[dict[str, np.ndarray]]:
    """One environment per sample for the host parts (they run sample by sample); the NPU
    regions get the samples stacked."""
    if n is None:
        return [dict(zip(names, arrays, strict=True))]
    return [dict(zip(names, [a[k] for a in arrays], strict=True)) for k in range(n)]


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


__all__ = ["CompiledModel", "Engine", "RunStats", "load", "load_preset"]
