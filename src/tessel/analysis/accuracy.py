"""Accuracy of a quantised model: the golden (integer) model against float PyTorch.

Figures (defined in docs/figures.md, "Quantisation"):

* SQNR (dB) per output = 10 log10(sum y_float^2 / sum (y_float - y_golden)^2) over the
  evaluation inputs;
* classifiers: top-1 agreement with float, and accuracy where labels exist (digits: the whole
  held-out test split, float and int8 both reported);
* embeddings (MiniLM): cosine similarity of golden vs float embeddings, mean over sentences;
* the calibration set size, the evaluation set size, the host ops, the golden model's wall
  time per inference.

Evaluation inputs are never the calibration inputs (out of sample): the zoo's held-out data
(digits: its test split; MiniLM: the sentences not used for calibration; the others: the next
inputs of the calibration generator), a spec's `evaluation_data`, or - for a user model whose
calibration repeats its example input - seeded random inputs drawn from N(mean, std) of each
example input, stated in the report. The same figures on the calibration inputs themselves
(in sample) are reported beside them, and the golden model against PyTorch's own fake-quantised
(QDQ) model on the evaluation inputs, which separates the integer lowering's error from the
quantisation's.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.models import ModelSpec, Task, load, resolve
from tessel.progress import track
from tessel.quant.api import QuantizedModel, quantize
from tessel.quant.config import QuantConfig, default_config

Sample = tuple[torch.Tensor, ...]

@dataclass(frozen=True)
class AccuracyReport:
    """What `tessel accuracy` prints (`--json`: `to_json()`)."""

    model: str
    task: str
    calibration_samples: int
    eval_samples: int
    sqnr_db: tuple[float, ...]
    top1_agreement: float | None
    float_accuracy: float | None
    int_accuracy: float | None
    cosine_mean: float | None
    cosine_min: float | None
    host_ops: tuple[str, ...]
    golden_seconds_per_inference: float
    eval_inputs: str = ""  # what the evaluation inputs are (out of sample)
    in_sample_sqnr_db: tuple[float, ...] = ()  # the same on the calibration inputs
    in_sample_top1_agreement: float | None = None
    qdq_sqnr_db: tuple[float, ...] = ()  # golden vs PyTorch's QDQ model, evaluation inputs
    low_range_outputs: tuple[int, ...] = ()  # outputs spanning < 4 quantisation steps
    simulated_target: str | None = None  # --target: the evaluation inputs also simulated
    simulated_bit_exact: int | None = None  # evaluation inputs whose simulated outputs equal
    simulated_seconds_per_inference: float | None = None  # the golden model's (run_batch)

    def to_json(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    def text(self) -> str:
        lines = [f"model {self.model} ({self.task}): calibration {self.calibration_samples} "
                 f"samples, evaluation {self.eval_samples} held-out inputs ({self.eval_inputs})"]
        for i, s in enumerate(self.sqnr_db):
            ins = (f"; in sample (calibration inputs) {self.in_sample_sqnr_db[i]:.2f} dB"
                   if i < len(self.in_sample_sqnr_db) else "")
            qdq = (f"; golden vs PyTorch QDQ {self.qdq_sqnr_db[i]:.2f} dB"
                   if i < len(self.qdq_sqnr_db) else "")
            lines.append(f"  SQNR output {i}: out of sample {s:.2f} dB{ins}{qdq}")
        if self.top1_agreement is not None:
            ins = ("" if self.in_sample_top1_agreement is None else
                   f" (in sample {100 * self.in_sample_top1_agreement:.2f}%)")
            lines.append(f"  top-1 agreement with float: {100 * self.top1_agreement:.2f}%{ins}")
        if self.float_accuracy is not None:
            lines.append(f"  accuracy: float {100 * self.float_accuracy:.2f}%, "
                         f"int (golden) {100 * self.int_accuracy:.2f}%")
        if self.cosine_mean is not None:
            lines.append(f"  cosine golden vs float: mean {self.cosine_mean:.4f}, "
                         f"min {self.cosine_min:.4f}")
        for i in self.low_range_outputs:
            lines.append(f"  WARNING: output {i} spans fewer than 4 quantisation steps on the "
                         "evaluation inputs (its scale is far too coarse for its values)")
        lines.append(f"  golden model: {1e3 * self.golden_seconds_per_inference:.1f} ms/inference")
        if self.simulated_target is not None:
            ok = self.simulated_bit_exact == self.eval_samples
            lines.append(f"  simulator on {self.simulated_target}: {self.simulated_bit_exact}/"
                         f"{self.eval_samples} evaluation inputs bit-exact with the golden model"
                         f"{'' if ok else ' (MISMATCH)'}, "
                         f"{1e3 * self.simulated_seconds_per_inference:.1f} ms/inference "
                         "(batched)")
        lines.append(f"  host ops ({len(self.host_ops)}): "
                     + ("none" if not self.host_ops else ""))
        lines.extend(f"    {h}" for h in self.host_ops)
        return "\n".join(lines)


def sqnr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """10 log10(signal / noise) of `test` against `reference` (inf when equal)."""
    ref = np.asarray(reference, np.float64)
    noise = float(np.sum((ref - np.asarray(test, np.float64)) ** 2))
    signal = float(np.sum(ref**2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of the rows of a and b."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    num = np.sum(a * b, axis=-1)
    return num / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-30)


def random_like(example: Sample, count: int, seed: int = 1234) -> list[Sample]:
    """`count` seeded inputs shaped like `example`: each float tensor drawn from N(mean, std)
    of the example tensor (std 1 if it is constant), integer tensors repeated."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        sample = []
        for x in example:
            if not x.is_floating_point():
                sample.append(x.clone())
                continue
            std = float(x.std()) if x.numel() > 1 and float(x.std()) > 0 else 1.0
            sample.append(torch.randn(x.shape, generator=g, dtype=x.dtype) * std + float(x.mean()))
        out.append(tuple(sample))
    return out


def eval_set(spec: ModelSpec, calibration: int, count: int, example: Sample
              ) -> tuple[list[Sample], np.ndarray | None, str]:
    """Evaluation inputs (and labels where they exist), disjoint from calibration, and what
    they are."""
    if spec.name == "digits_cnn":
        from tessel.models import digits

        _, _, x_test, y_test = digits.load_split()
        return ([(x_test[i:i + 1],) for i in range(len(x_test))], y_test.numpy(),
                "the digits test split")
    if spec.name == "minilm":
        from tessel.models import minilm

        return (minilm.calibration_data(len(minilm.SENTENCES))[calibration:], None,
                "sentences not used for calibration")
    if spec.evaluation_data is not None:
        return list(spec.evaluation_data(count)), None, "the model's evaluation data"
    if spec.task is Task.GENERIC:  # a user model: calibration repeats its example input
        return (random_like(example, count), None,
                "random: N(mean, std) of each example input, seed 1234")
    return (spec.calibration_data(calibration + count)[calibration:], None,
            "the next inputs of the calibration generator")


def _run_all(qm: QuantizedModel, model: torch.nn.Module, inputs: Sequence[Sample]
             ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Stacked float and golden outputs (per output index) and golden seconds per input."""
    floats, goldens, seconds = [], [], 0.0
    for sample in track(inputs, "accuracy: float vs golden"):
        with torch.no_grad():
            f = model(*sample)
        f = (f,) if isinstance(f, torch.Tensor) else tuple(f)
        floats.append([t.detach().numpy() for t in f])
        start = time.perf_counter()
        goldens.append(qm.run(*sample))
        seconds += time.perf_counter() - start
    n_out = len(floats[0])
    stack = lambda rows, k: np.concatenate([r[k] for r in rows])  # noqa: E731
    return ([stack(floats, k) for k in range(n_out)], [stack(goldens, k) for k in range(n_out)],
            seconds / max(len(inputs), 1))


def _low_range(qm: QuantizedModel, goldens: list[np.ndarray]) -> tuple[int, ...]:
    """Indices of outputs spanning fewer than 4 quantisation steps (also warned about)."""
    from tessel.runtime.check import low_range_outputs

    low = low_range_outputs(qm.graph, goldens)
    if low:
        warnings.warn(f"outputs {low} span fewer than 4 quantisation steps", stacklevel=3)
    return tuple(i for i, o in enumerate(qm.graph.outputs) if o in low)


def _qdq_outputs(qm: QuantizedModel, inputs: Sequence[Sample]) -> list[np.ndarray]:
    """PyTorch's fake-quantised model (the imported QDQ graph, float interpreter), stacked."""
    from tessel.ir import run_graph

    rows = [run_graph(qm.qdq_graph, [x.numpy() for x in sample]) for sample in inputs]
    return [np.concatenate([r[k] for r in rows]) for k in range(len(rows[0]))]


def simulate_eval(qm: QuantizedModel, target: str, inputs: Sequence[Sample],
                  goldens: list[np.ndarray], name: str) -> tuple[int, float]:
    """Compile ``qm`` for ``target``, simulate every evaluation input in batches
    (``CompiledModel.run_batch``) and count the inputs whose outputs equal the golden model's
    bit for bit; returns (that count, simulated seconds per input)."""
    from tessel.arch import load_target
    from tessel.driver import compile_graph
    from tessel.runtime.check import same

    cm = compile_graph(qm.graph, load_target(target), name=name)
    arity = len(inputs[0])
    batch = [np.stack([np.asarray(s[i].numpy()) for s in inputs]) for i in range(arity)]
    start = time.perf_counter()
    outs = cm.run_batch(*batch)
    seconds = (time.perf_counter() - start) / len(inputs)
    per = [g.shape[0] // len(inputs) for g in goldens]  # rows of one input's output
    exact = sum(all(same(o[k], g[k * p:(k + 1) * p]) for o, g, p in zip(outs, goldens, per,
                                                                        strict=True))
                for k in range(len(inputs)))
    return exact, seconds


def evaluate(model_spec: str, calibration: int = DEFAULT_CALIBRATION_SAMPLES,
             eval_samples: int = 16,
             quant_config: QuantConfig | None = None, target: str | None = None) -> AccuracyReport:
    """Quantise a zoo model (or path/to/file.py:factory) and measure it against float.
    ``target``: also compile it for that preset and simulate every evaluation input (batched),
    reporting how many are bit-exact with the golden model."""
    spec = resolve(model_spec)
    model, example = load(model_spec)
    config = quant_config if quant_config is not None else default_config(spec.name)
    calib = list(spec.calibration_data(calibration))
    qm = quantize(model, example, calib, config, calibration_samples=calibration)
    inputs, labels, described = eval_set(spec, calibration, eval_samples, example)
    floats, goldens, per_inf = _run_all(qm, model, inputs)
    in_f, in_g, _ = _run_all(qm, model, calib[:max(1, min(len(calib), eval_samples))])
    qdq = _qdq_outputs(qm, inputs)
    report = dict(model=spec.name, task=spec.task.value, calibration_samples=qm.calibration_samples,
                  eval_samples=len(inputs),
                  sqnr_db=tuple(sqnr_db(f, g) for f, g in zip(floats, goldens, strict=True)),
                  top1_agreement=None, float_accuracy=None, int_accuracy=None,
                  cosine_mean=None, cosine_min=None,
                  host_ops=tuple(str(h) for h in qm.host_ops),
                  golden_seconds_per_inference=per_inf, eval_inputs=described,
                  in_sample_sqnr_db=tuple(sqnr_db(f, g) for f, g in zip(in_f, in_g, strict=True)),
                  qdq_sqnr_db=tuple(sqnr_db(q, g) for q, g in zip(qdq, goldens, strict=True)),
                  low_range_outputs=_low_range(qm, goldens))
    if target is not None:
        exact, sim_seconds = simulate_eval(qm, target, inputs, goldens, spec.name)
        report.update(simulated_target=target, simulated_bit_exact=exact,
                      simulated_seconds_per_inference=sim_seconds)
    f0, g0 = floats[0], goldens[0]
    if spec.task is Task.CLASSIFIER:
        report["top1_agreement"] = float(np.mean(f0.argmax(-1) == g0.argmax(-1)))
        report["in_sample_top1_agreement"] = float(np.mean(in_f[0].argmax(-1) ==
                                                           in_g[0].argmax(-1)))
        if labels is not None:
            report["float_accuracy"] = float(np.mean(f0.argmax(-1) == labels))
            report["int_accuracy"] = float(np.mean(g0.argmax(-1) == labels))
    elif spec.task is Task.EMBEDDING:
        cos = cosine(f0, g0)
        report["cosine_mean"], report["cosine_min"] = float(cos.mean()), float(cos.min())
    return AccuracyReport(**report)
