"""Every zoo model: factory contract, output shape, determinism, sane activations, torch.export."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tessel.models import ZOO, ModelSpec, Task, digits, ds_cnn, mobilenet_v2, resnet, vit, xr
from tessel.threads import single_threaded

OUTPUT_SHAPES = {
    "mobilenet_v2": (1, 1000),
    "resnet18": (1, 1000),
    "ds_cnn": (1, 12),
    "vit_small": (1, 1000),
    "minilm": (1, 384),
    "digits_cnn": (1, 10),
    "eye_seg": (1, 4, 64, 96),
    "gaze": (1, 2),
    "hand_det": ((1, 1, 32, 32), (1, 2, 32, 32), (1, 2, 32, 32)),
    "hand_pose": (1, 21, 48, 48),
    "depth": (1, 1, 96, 128),
    "kws_res8": (1, 12),
}
INPUT_SHAPES = {
    "mobilenet_v2": [(1, 3, 224, 224)],
    "resnet18": [(1, 3, 224, 224)],
    "ds_cnn": [(1, 1, 49, 10)],
    "vit_small": [(1, 3, 224, 224)],
    "minilm": [(1, 32), (1, 32)],
    "digits_cnn": [(1, 1, 8, 8)],
    "eye_seg": [(1, 1, 64, 96)],
    "gaze": [(1, 1, 36, 60), (1, 2)],
    "hand_det": [(1, 3, 128, 128)],
    "hand_pose": [(1, 3, 96, 96)],
    "depth": [(1, 3, 96, 128)],
    "kws_res8": [(1, 1, 101, 40)],
}
# one xdist group per model, so a model's cached build is shared by its tests under -n 2
BY_MODEL = [pytest.param(n, marks=pytest.mark.xdist_group(f"zoo-{n}")) for n in OUTPUT_SHAPES]
RANDOM_WEIGHT_MODULES = {"mobilenet_v2": mobilenet_v2, "resnet18": resnet, "ds_cnn": ds_cnn,
                         "vit_small": vit}


def test_zoo_lists_every_model_with_a_complete_spec() -> None:
    assert set(ZOO) == set(OUTPUT_SHAPES)
    for name, spec in ZOO.items():
        assert isinstance(spec, ModelSpec) and spec.name == name
        assert spec.description and spec.input_description
        assert spec.task is (Task.EMBEDDING if name == "minilm" else Task.DENSE
                             if name in xr.NAMES and name != "kws_res8" else Task.CLASSIFIER)
    with pytest.raises(AttributeError):
        ZOO["ds_cnn"].name = "x"  # type: ignore[misc]


@pytest.mark.slow
@pytest.mark.parametrize("name", BY_MODEL)
def test_model(name: str) -> None:
    """One test per model, so each 224x224 model is built and run once."""
    model, inputs = ZOO[name].factory()
    assert isinstance(model, nn.Module) and isinstance(inputs, tuple)
    assert not any(m.training for m in model.modules()), "factory must return eval mode"
    assert [tuple(x.shape) for x in inputs] == INPUT_SHAPES[name]
    with torch.no_grad():
        out = model(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    shapes = tuple(tuple(o.shape) for o in outs)
    assert shapes == (OUTPUT_SHAPES[name] if isinstance(out, tuple) else (OUTPUT_SHAPES[name],))
    assert all(torch.isfinite(o).all() for o in outs)

    # `tessel run` without --input makes the same inputs without building the model
    assert ZOO[name].example is not None
    assert all(torch.equal(a, b) for a, b in zip(inputs, ZOO[name].example_inputs(),
                                                 strict=True))

    model2, inputs2 = ZOO[name].factory()
    assert model2 is not model
    for a, b in zip(inputs, inputs2, strict=True):
        assert torch.equal(a, b)
    with torch.no_grad():
        again = model2(*inputs2)
    assert all(torch.equal(a, b) for a, b in zip(
        again if isinstance(again, tuple) else (again,), outs, strict=True))

    exported = torch.export.export(model, inputs, strict=False)
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(*inputs), out, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", list(ZOO))
def test_calibration_data_is_deterministic_and_shaped_like_the_inputs(name: str) -> None:
    spec = ZOO[name]
    first, second = spec.calibration_data(3), spec.calibration_data(3)
    assert len(first) == 3
    for a, b in zip(first, second, strict=True):
        assert len(a) == len(INPUT_SHAPES[name])
        assert [tuple(x.shape) for x in a] == INPUT_SHAPES[name]
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(first[0][0], first[1][0]), "calibration samples must differ"
    assert all(torch.equal(x, y) for x, y in zip(spec.calibration_data(1)[0], first[0],
                                                  strict=True)), "n samples = prefix of more"


@pytest.mark.slow
@pytest.mark.parametrize("name", [p for p in BY_MODEL if p.values[0] in RANDOM_WEIGHT_MODULES])
def test_random_weights_are_reproducible_and_keep_activations_sane(name: str) -> None:
    module = RANDOM_WEIGHT_MODULES[name]
    ZOO[name].factory()  # the per-process cache filled as the zoo builds
    cached = module._build()
    with single_threaded():  # as the zoo builds (its factories run on one thread)
        rebuilt = module._build.__wrapped__()  # bypass the per-process cache
    for (k, a), (_, b) in zip(cached.state_dict().items(), rebuilt.state_dict().items(),
                              strict=True):
        assert torch.equal(a, b), f"{name}: {k} differs between two builds"
    with torch.no_grad():
        logits = torch.cat([cached(*x) for x in ZOO[name].calibration_data(6)])
    assert 0.5 < float(logits.std()) < 10.0, "logits collapsed or exploded"
    assert len(set(logits.argmax(dim=1).tolist())) >= 3, "top-1 barely depends on the input"


def test_batchnorm_statistics_are_non_trivial() -> None:
    bns = [m for m in ds_cnn._build().modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 9
    for bn in bns:
        assert bn.running_mean.abs().max() > 1e-3
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
        assert not torch.allclose(bn.weight, torch.ones_like(bn.weight))


def test_factories_leave_the_callers_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    ZOO["ds_cnn"].factory()
    ZOO["digits_cnn"].factory()
    assert torch.equal(torch.rand(4), expected)


def test_model_structure_matches_the_reference_architectures() -> None:
    convs = [m for m in ds_cnn._build().modules() if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride, c.groups) for c in convs[:2]] == [
        (64, (10, 4), (2, 2), 1), (64, (3, 3), (1, 1), 64)]
    assert len(convs) == 9
    n_params = sum(p.numel() for p in resnet._build().parameters())
    assert n_params == 11_689_512  # torchvision resnet18
    n_params = sum(p.numel() for p in mobilenet_v2._build().parameters())
    assert n_params == 3_504_872  # torchvision mobilenet_v2
    blocks = vit._build().blocks
    assert len(blocks) == 4 and blocks[0].attn.heads == 3
    assert blocks[0].mlp[0].out_features == 768
    assert isinstance(digits.DigitsCNN().fc, nn.Linear)
