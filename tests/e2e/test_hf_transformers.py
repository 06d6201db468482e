"""A Hugging Face transformer built from its config (random weights, nothing downloaded):
BERT-tiny with its attention mask compiles, runs bit-exact with the golden model and keeps its
MACs on the NPU; the mask's int64 index arithmetic stays on the host, each op with its reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tessel

transformers = pytest.importorskip("transformers")  # a declared test dependency (pyproject dev)


class _LastHidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


def test_bert_tiny_compiles_with_its_mask_and_runs_bit_exact():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=128,
                                  max_position_embeddings=64)
    model = _LastHidden(transformers.BertModel(cfg).eval()).eval()
    ids = torch.randint(0, 1000, (1, 16))
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[0, 12:] = 0
    cm = tessel.compile(model, (ids, mask), target="tnpu-s")
    qm = tessel.quantize(model, (ids, mask))
    host = cm.program.metadata["host_ops"]
    index_ops = [line for line in host if "i64 result" in line]
    assert index_ops and all("the NPU holds i8, i16, i32 tensors" in line for line in index_ops)
    got, = cm.run(ids, mask)
    np.testing.assert_array_equal(got, qm.run(ids, mask)[0])
    with torch.no_grad():
        ref = model(ids, mask).numpy()
    sqnr = 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))
    assert sqnr > 20, sqnr
