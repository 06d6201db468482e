"""A small Vision Transformer (Dosovitskiy et al., ICLR 2021) at 224x224, 1000 classes.

Patch 16 (a strided conv embeds the 196 patches), width 192, 4 pre-norm encoder layers with 3
heads and an MLP of 768 with (erf) GELU, LayerNorm, a class token and a learned position
embedding; the class token's final state feeds the head. Attention uses
F.scaled_dot_product_attention. Laid out like timm's VisionTransformer.

Weights are initialised deterministically (no download) with Xavier-uniform linears, so
attention logits have about unit spread (a 0.02-std init would make every softmax nearly
uniform, which hides the numerics that matter), and LayerNorm affine parameters around (1, 0)
so they are not the identity.
"""

from __future__ import annotations

import copy
import functools

import torch
import torch.nn.functional as F
from torch import nn

from tessel.models.calibration import smooth_image, smooth_images
from tessel.models.weights import calibrate_head, seeded

SEED = 16
IMAGE = 224
PATCH = 16
DIM = 192
DEPTH = 4
HEADS = 3
MLP = 768


class Attention(nn.Module):
    """Multi-head self-attention with one fused qkv projection."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """ViT: patch embedding + class token + position embedding, encoder, LayerNorm, head."""

    def __init__(self, image: int = IMAGE, patch: int = PATCH, dim: int = DIM,
                 depth: int = DEPTH, heads: int = HEADS, mlp: int = MLP,
                 num_classes: int = 1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # [B, patches, dim]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def _init(model: VisionTransformer) -> None:
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.normal_(m.bias, 0.0, 0.02)
        elif isinstance(m, nn.LayerNorm):
            nn.init.uniform_(m.weight, 0.8, 1.2)
            nn.init.normal_(m.bias, 0.0, 0.05)
    nn.init.kaiming_normal_(model.patch_embed.weight, mode="fan_in", nonlinearity="linear")
    nn.init.normal_(model.cls_token, 0.0, 0.5)
    nn.init.normal_(model.pos_embed, 0.0, 0.5)


def calibration_data(n: int) -> list[tuple[torch.Tensor, ...]]:
    """n smooth ImageNet-normalised [1, 3, 224, 224] images."""
    return smooth_images(n, seed=SEED, size=IMAGE)


@functools.lru_cache(maxsize=1)
def _build() -> VisionTransformer:
    with seeded(SEED):
        model = VisionTransformer()
        _init(model)
    calibrate_head(model, model.head, torch.cat([smooth_image(SEED + 1000, i) for i in range(8)]))
    return model.eval()


def vit_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Zoo factory: (the small ViT in eval mode, (one [1, 3, 224, 224] image,))."""
    return copy.deepcopy(_build()).eval(), example_inputs()


def example_inputs() -> tuple[torch.Tensor, ...]:
    """The factory's example inputs: (one [1, 3, IMAGE, IMAGE] image,)."""
    return (smooth_image(SEED + 2000, 0, size=IMAGE),)
