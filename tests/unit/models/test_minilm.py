"""MiniLM: tokenizer, sentences, mask handling, and embeddings vs sentence-transformers' (its
embeddings of five sentences are committed: tests/data/make_minilm_golden.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from tessel.models import minilm


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return minilm.minilm()[0]


def test_tokenize_pads_to_a_fixed_length() -> None:
    ids, mask = minilm.tokenize(["Hello world!", "A somewhat longer sentence, with commas."], 16)
    assert ids.dtype == mask.dtype == torch.int64
    assert ids.shape == mask.shape == (2, 16)
    assert ids[0, 0] == 101 and ids[0, int(mask[0].sum()) - 1] == 102  # [CLS] ... [SEP]
    assert (ids[mask == 0] == 0).all() and mask[0, -1] == 0
    ids, mask = minilm.tokenize("word " * 100, 8)
    assert ids.shape == (1, 8) and mask.all() and ids[0, -1] == 102  # truncated, still [SEP]


def test_sentences_are_many_varied_and_fit_the_default_length() -> None:
    assert len(minilm.SENTENCES) >= 60
    assert len(set(minilm.SENTENCES)) == len(minilm.SENTENCES)
    _, mask = minilm.tokenize(list(minilm.SENTENCES), 64)
    lengths = mask.sum(dim=1)
    assert int(lengths.max()) <= minilm.SEQ_LEN
    assert int(lengths.min()) <= 5 and int(lengths.max()) >= 18  # short and long ones
    assert sum("?" in s for s in minilm.SENTENCES) >= 3


def test_calibration_data_is_the_tokenised_sentences() -> None:
    calib = minilm.calibration_data(len(minilm.SENTENCES) + 1)
    ids, mask = minilm.tokenize([minilm.SENTENCES[1]])
    assert torch.equal(calib[1][0], ids) and torch.equal(calib[1][1], mask)
    assert torch.equal(calib[-1][0], calib[0][0])  # cycles


def test_padding_does_not_change_the_embedding(model: torch.nn.Module) -> None:
    with torch.no_grad():
        short = model(*minilm.tokenize(["The cat sat on the mat."], 16))
        long = model(*minilm.tokenize(["The cat sat on the mat."], 48))
    torch.testing.assert_close(short, long, rtol=0, atol=1e-5)
    assert torch.allclose(short.norm(dim=1), torch.ones(1))


def test_weights_come_from_the_shipped_file(model: torch.nn.Module) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(minilm.model_dir() / "model.safetensors"))
    assert torch.equal(model.layers[5].norm.bias, tensors["encoder.layer.5.output.LayerNorm.bias"])
    assert torch.equal(model.token_type_embedding,
                       tensors["embeddings.token_type_embeddings.weight"][0])


# sentence-transformers' embeddings of a few sentences, written by tests/data/make_minilm_golden.py
GOLDEN = Path(__file__).resolve().parents[2] / "data" / "minilm_sentence_transformers.json"


def test_embeddings_match_sentence_transformers(model: torch.nn.Module) -> None:
    golden = json.loads(GOLDEN.read_text())
    regenerate = "regenerate it: python tests/data/make_minilm_golden.py"
    weights = (minilm.model_dir() / "model.safetensors").read_bytes()
    assert hashlib.sha256(weights).hexdigest() == golden["weights_sha256"], \
        f"{GOLDEN.name} was made from other weights: {regenerate}"
    sentences = golden["sentences"]
    assert all(s in minilm.SENTENCES for s in sentences), f"sentences changed: {regenerate}"
    reference = torch.tensor(golden["embeddings"])
    assert reference.shape == (len(sentences), 384)
    ids, mask = minilm.tokenize(sentences)
    with torch.no_grad():
        ours = torch.cat([model(ids[i : i + 1], mask[i : i + 1]) for i in range(len(sentences))])
    cosine = torch.nn.functional.cosine_similarity(ours, reference, dim=1)
    print(f"minilm vs sentence-transformers cosine: min {float(cosine.min()):.7f}")
    assert float(cosine.min()) >= 0.9999
