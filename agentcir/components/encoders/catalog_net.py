"""The image tower of the catalog encoder: a small ResNet-style CNN (torch).

Kept apart from :mod:`.catalog` so that the encoder, the trainer
(:mod:`.catalog_train`) and the ONNX exporter (:mod:`.onnx`) build the exact same
network from a checkpoint's ``arch`` dict. Imports torch.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, stride: int = 1, k: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (projected when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(_conv_bn(cin, cout, stride), nn.ReLU(inplace=True), _conv_bn(cout, cout))
        self.skip = nn.Identity() if stride == 1 and cin == cout else _conv_bn(cin, cout, stride, k=1)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + self.skip(x))


class ImageTower(nn.Module):
    """Stem + one or more basic blocks per stage (each stage halves the resolution) ->
    global average pooling -> linear projection into the text tower's space.

    Args:
        widths: channels of each stage.
        blocks: basic blocks per stage.
        dim: output dimension (the locked text tower's, 384 for MiniLM).
        stem: channels of the stride-2 stem convolution.
    """

    def __init__(
        self,
        widths: Sequence[int] = (32, 64, 128, 256),
        blocks: Sequence[int] = (1, 1, 1, 1),
        dim: int = 384,
        stem: int = 32,
    ):
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, stem, 2), nn.ReLU(inplace=True)]
        cin = stem
        for i, (w, n) in enumerate(zip(widths, blocks)):
            for j in range(n):
                layers.append(BasicBlock(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.proj = nn.Linear(cin, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.flatten(self.pool(self.features(x)), 1))


class TowerEnsemble(nn.Module):
    """Several towers trained apart (``train-encoder members=N``); the embedding is the mean
    of their unit-length outputs, so one module serves (and exports to ONNX) as one tower."""

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([nn.functional.normalize(m(x).float(), dim=-1) for m in self.members]).mean(0)


def build_tower(arch: dict[str, Any]) -> nn.Module:
    """The network described by a checkpoint's ``arch`` dict: a ResNet-style tower (``widths``,
    ``blocks``, ``dim``, ``stem``) or ``{"name": "ensemble", "members": [arch, ...]}``."""
    if arch.get("name") == "ensemble":
        return TowerEnsemble([build_tower(a) for a in arch["members"]])
    return ImageTower(tuple(arch["widths"]), tuple(arch["blocks"]), int(arch["dim"]), int(arch.get("stem", 32)))


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
