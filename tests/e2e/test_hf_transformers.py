"""Hugging Face transformers built from their configs (random weights, nothing downloaded):
BERT-tiny, DistilBERT, MobileBERT and a 2-layer Llama-style decoder compile with their attention
masks, run bit-exact with the golden model and keep attention, norms and MLPs on the NPU; only
the mask's index arithmetic and the token embedding's table lookup stay on the host."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessel

transformers = pytest.importorskip("transformers")  # a declared test dependency (pyproject dev)

SEQ = 12
VOCAB = 500
# what the host may run: the embedding lookup (MobileBERT's trigram slices and pads of its
# float result too) and the mask's index / bool arithmetic
HOST_OK = {"embedding", "slice", "pad", "cast", "add", "reshape", "aten.ge.Scalar",
           "aten.le.Tensor", "aten.bitwise_and.Tensor", "aten.index.Tensor", "aten.where.self"}


class _LastHidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


def _bert():
    return transformers.BertModel(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64))


def _distilbert():
    return transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=VOCAB, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
        max_position_embeddings=64))


def _mobilebert():
    return transformers.MobileBertModel(transformers.MobileBertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, embedding_size=32, intra_bottleneck_size=32,
        max_position_embeddings=64, num_feedforward_networks=2))


def _llama():
    return transformers.LlamaModel(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


@pytest.mark.slow
@pytest.mark.parametrize("build", [_bert, _distilbert, _mobilebert, _llama],
                         ids=["bert_tiny", "distilbert", "mobilebert", "llama_2layer"])
def test_transformer_compiles_with_its_mask_on_the_npu_and_runs_bit_exact(build):
    torch.manual_seed(0)
    model = _LastHidden(build().eval()).eval()
    ids = torch.randint(0, VOCAB, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.long)
    mask[0, SEQ - 3:] = 0
    calib = [(torch.randint(0, VOCAB, (1, SEQ)), mask) for _ in range(4)]
    cm = tessel.compile(model, (ids, mask), target="tnpu-s", calibration_data=calib)
    fallback = cm.program.metadata["fallback"]
    assert fallback["npu_macs"] >= 0.95 * fallback["total_macs"] > 0
    host = {label for labels in fallback["host_ops"].values() for label in labels}
    assert host <= HOST_OK, host - HOST_OK  # attention, norms, MLPs: none on the host
    index_ops = [line for line in cm.program.metadata["host_ops"] if "i64 result" in line]
    assert all("the NPU holds i8, i16, i32 tensors" in line for line in index_ops)
    qm = tessel.quantize(model, (ids, mask), calibration_data=calib)
    got, = cm.run(ids, mask)
    np.testing.assert_array_equal(got, qm.run(ids, mask)[0])
    with torch.no_grad():
        ref = model(ids, mask).numpy()
    sqnr = 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))
    assert sqnr > 20, sqnr
