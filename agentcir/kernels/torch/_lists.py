"""Grouping of scored id lists ``[V, Q, L]`` for the torch list fusions (rrf, fuse_scores)."""

from __future__ import annotations

import torch


class ListEntries:
    """The valid entries of id lists, sorted by (query, item, list, position).

    Attributes (1-d, one per entry): ``q``, ``item``, ``v``, ``pos``, ``first`` (the first
    occurrence of the item in its list), ``group`` (index of the entry's (query, item)
    pair in ``pair_q`` / ``pair_item``, which are sorted by query then item).
    """

    def __init__(self, ids: torch.Tensor):
        V, Q, L = ids.shape
        ids = ids.long()
        v, q, p = torch.meshgrid(torch.arange(V), torch.arange(Q), torch.arange(L), indexing="ij")
        valid = ids >= 0
        item = ids[valid]
        width = int(item.max()) + 1 if item.numel() else 1
        key = ((q[valid] * width + item) * V + v[valid]) * L + p[valid]
        key = torch.sort(key).values
        self.pos = key % L
        self.v = (key // L) % V
        pair = key // (V * L)
        self.first = torch.ones_like(key, dtype=torch.bool)
        self.first[1:] = (key[1:] // L) != (key[:-1] // L)
        uniq, self.group, counts = torch.unique_consecutive(pair, return_inverse=True, return_counts=True)
        # the first entry of a pair has its smallest list * L + position: its first appearance
        self.pair_first = (key % (V * L))[torch.cumsum(counts, 0) - counts]
        self.pair_q = uniq // width
        self.pair_item = uniq % width
        self.Q = Q

    def sum_per_pair(self, values: torch.Tensor) -> torch.Tensor:
        """float64 sum of ``values`` (first occurrences only) per (query, item), in list order."""
        vals = torch.where(self.first, values.double(), torch.zeros_like(values, dtype=torch.float64))
        return torch.zeros(len(self.pair_q), dtype=torch.float64).index_add_(0, self.group, vals)

    def topk(self, totals: torch.Tensor, k: int, first_appearance: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k (query, item) pairs per query by total (ties: lower item, or the item's first
        appearance in the lists read in order), padded."""
        o0 = torch.sort(self.pair_first, stable=True).indices if first_appearance else torch.arange(len(totals))
        o1 = o0[torch.sort(totals[o0], descending=True, stable=True).indices]  # ties keep o0's order
        o2 = o1[torch.sort(self.pair_q[o1], stable=True).indices]  # group by query
        q = self.pair_q[o2]
        starts = torch.searchsorted(q, torch.arange(self.Q))
        rank = torch.arange(len(q)) - starts[q]
        keep = rank < k
        s = torch.full((self.Q, k), float("-inf"), dtype=torch.float32)
        i = torch.full((self.Q, k), -1, dtype=torch.int32)
        s[q[keep], rank[keep]] = totals[o2][keep].float()
        i[q[keep], rank[keep]] = self.pair_item[o2][keep].to(torch.int32)
        return s, i
