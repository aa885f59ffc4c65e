"""Torch building blocks for the torch (and triton) ops: gallery tiles, a running top-k with
the lower-id tie rule, exclusion patches and the streamed softmax entropy.

Everything runs on the gallery tensor's device (CPU or CUDA). Tie rule: a float32 score
and an id are packed into one int64 key, ``(monotone_int32(score) << 32) | (2^31-1-id)``,
so ``torch.topk`` on keys orders by score, then by lower id, exactly.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from .._inputs import Gallery
from .._tiling import tile_rows

INT64_MIN = torch.iinfo(torch.int64).min


def as_device(x: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if x is None else x.to(device=device, dtype=torch.float32)


def device_tile_rows(n_scored: int, d: int, N: int, device: torch.device) -> int:
    """Gallery rows per tile on ``device`` (:func:`agentcir.kernels._tiling.tile_rows`; a CUDA
    device takes the GPU budgets: few, large cuBLAS products)."""
    return tile_rows(n_scored, d, N, gpu=device.type == "cuda")


def tiles(gallery: Gallery, tile: int) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Yield ``(start, stop, float32 gallery rows)``; half-precision tiles are widened exactly, int8
    tiles dequantised (codes times the row scales)."""
    G = gallery.data
    for start in range(0, G.shape[0], tile):
        stop = min(G.shape[0], start + tile)
        if gallery.kind == "int8":
            yield start, stop, G[start:stop].float() * gallery.scales[start:stop, None]
        else:
            yield start, stop, G[start:stop].float()


def pack(scores: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """int64 keys ordering by score descending then id ascending; ``-inf`` (removed) -> INT64_MIN."""
    s = scores.float() + 0.0  # -0.0 -> +0.0
    b = s.view(torch.int32)
    m = b ^ ((b >> 31) & 0x7FFFFFFF)
    key = (m.to(torch.int64) << 32) | (0x7FFFFFFF - ids.to(torch.int64))
    return torch.where(s == float("-inf"), torch.full_like(key, INT64_MIN), key)


def _packed_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``k`` of each row of a tile (scores, column positions), ordered by packed keys."""
    Q, T = scores.shape
    pos = pack(scores, torch.arange(T, device=scores.device).expand(Q, T)).topk(k, dim=1).indices
    return scores.gather(1, pos), pos


class RunningTopK:
    """The best ``k`` (score, id) of each of Q rows, fed tile by tile; ties keep the lower id, exactly.

    A tile's candidates are selected one of two ways (``float_first``, by default on a CPU):

    * float first: ``torch.topk`` on the float scores (what a plain top-k costs), the tile then
      selected on packed keys (:func:`pack`) only when a finite k-th score is shared with an item left
      out (one check per tile, a host sync); on a CPU selecting on packed keys throughout ran 1.3-5.4x
      slower (``benchmarks/torch_selection.py``);
    * packed: ``torch.topk`` on the packed keys of the whole tile, no host sync (on a GPU the sync of
      the check cost more than the packing at Q <= 64: ``triton/README.md``).

    The candidates merge with the running best on packed keys."""

    def __init__(self, Q: int, k: int, device: torch.device, float_first: bool | None = None):
        self.k = k
        self.float_first = torch.device(device).type != "cuda" if float_first is None else float_first
        self.s = torch.empty(Q, 0, dtype=torch.float32, device=device)
        self.i = torch.empty(Q, 0, dtype=torch.int64, device=device)

    def push(self, scores: torch.Tensor, start: int) -> None:
        """Offer ``scores[q, j]`` as item ``start + j`` (``-inf`` = removed)."""
        Q, T = scores.shape
        kk = min(self.k, T)
        if self.float_first:
            s, pos = scores.topk(kk, dim=1)
            if kk < T:
                kth = s[:, -1:]
                cut = (scores == kth).sum(dim=1) > (s == kth).sum(dim=1)  # k-th score shared with an item left out
                if bool((cut & (kth[:, 0] != float("-inf"))).any()):
                    s, pos = _packed_topk(scores, kk)
        else:
            s, pos = _packed_topk(scores, kk)
        cs = torch.cat([self.s, s], dim=1)
        ci = torch.cat([self.i, pos + start], dim=1)
        keep = pack(cs, ci).topk(min(self.k, cs.shape[1]), dim=1).indices
        self.s = cs.gather(1, keep)
        self.i = ci.gather(1, keep)

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 scores and int32 ids ``[Q, k]``, padded with ``(-inf, -1)``."""
        Q, n = self.s.shape
        s = torch.full((Q, self.k), float("-inf"), dtype=torch.float32, device=self.s.device)
        i = torch.full((Q, self.k), -1, dtype=torch.int32, device=self.s.device)
        s[:, :n] = self.s
        i[:, :n] = torch.where(self.s == float("-inf"), -1, self.i).to(torch.int32)
        return s, i


def patch_excluded(scores: torch.Tensor, start: int, exclude: torch.Tensor | None, value: float) -> torch.Tensor:
    """Set excluded items of this tile (items ``start..start+T``) to ``value`` (in place)."""
    if exclude is None:
        return scores
    T = scores.shape[1]
    local = exclude.to(scores.device).long() - start
    hit = (local >= 0) & (local < T)
    if bool(hit.any()):
        rows = torch.arange(scores.shape[0], device=scores.device)[:, None].expand_as(local)
        scores[rows[hit], local[hit]] = value
    return scores


def exclusion_value(exclude_score: float | None) -> float:
    return float("-inf") if exclude_score is None else float(exclude_score)


class RunningEntropy:
    """Entropy of ``softmax(S / tau)`` over every non-``-inf`` entry of each row, streamed."""

    def __init__(self, Q: int, tau: float, device: torch.device):
        self.tau = tau
        self.m = torch.full((Q,), float("-inf"), dtype=torch.float64, device=device)
        self.z = torch.zeros(Q, dtype=torch.float64, device=device)
        self.a = torch.zeros(Q, dtype=torch.float64, device=device)

    def push(self, scores: torch.Tensor) -> None:
        valid = scores != float("-inf")
        x = torch.where(
            valid, scores.double() / self.tau, torch.tensor(float("-inf"), dtype=torch.float64, device=scores.device)
        )
        new_m = torch.maximum(self.m, x.max(dim=1).values)
        seen = self.m != float("-inf")
        shift = torch.where(seen, self.m - new_m, torch.zeros_like(self.m))
        scale = torch.exp(shift)
        self.a = torch.where(seen, scale * (self.a + shift * self.z), self.a)
        self.z = torch.where(seen, scale * self.z, self.z)
        self.m = new_m
        has = new_m != float("-inf")
        xs = torch.where(valid & has[:, None], x - torch.where(has, new_m, 0.0)[:, None], torch.zeros_like(x))
        e = torch.where(valid & has[:, None], torch.exp(xs), torch.zeros_like(x))
        self.z = self.z + e.sum(dim=1)
        self.a = self.a + (e * xs).sum(dim=1)

    def result(self) -> torch.Tensor:
        z = torch.where(self.z > 0, self.z, torch.ones_like(self.z))
        return torch.where(self.z > 0, torch.log(z) - self.a / z, torch.zeros_like(z)).float()

    def log_partition(self) -> torch.Tensor:
        """``log sum exp(S / tau)`` per row (``-inf`` for a row with no entries)."""
        z = torch.where(self.z > 0, self.z, torch.ones_like(self.z))
        return torch.where(self.z > 0, self.m + torch.log(z), torch.full_like(z, float("-inf"))).float()


def to_t(a: np.ndarray | None, device: torch.device | str = "cpu") -> torch.Tensor | None:
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(device)


def minmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Min-max along ``dim``; constant slices become ones (README "Conventions")."""
    lo = x.amin(dim=dim, keepdim=True)
    span = x.amax(dim=dim, keepdim=True) - lo
    return torch.where(span > 0, (x - lo) / torch.where(span > 0, span, torch.ones_like(span)), torch.ones_like(x))


def topk_sorted_f64(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of float64 rows (column = id): stable sort, so ties keep the lower id; ``-inf`` = removed."""
    Q, N = scores.shape
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
    s = torch.full((Q, k), float("-inf"), dtype=torch.float32)
    i = torch.full((Q, k), -1, dtype=torch.int32)
    top = scores.gather(1, order)
    s[:, : order.shape[1]] = top.float()
    i[:, : order.shape[1]] = torch.where(top == float("-inf"), -1, order).to(torch.int32)
    return s, i
