"""Triton backend (CUDA GPUs): fused tile kernels for the gallery ops.

cosine_topk, proxy_scores_topk (mean / max / logsumexp; octopus = weights kernel + cosine
kernel), octopus_weights and octopus_topk are Triton kernels (one per module). ldre_weights and ldre_top_drops (LDRE's
ensemble weights, a few texts per query) are the torch backend's functions. The list
ops (rrf, fuse_scores, xr_rerank, promote_first_accepted, uncertainty) are gathers and
sorts over a few hundred candidates per query, where a custom kernel buys nothing: they
are the torch backend's functions. On a machine without CUDA the kernels run under
``TRITON_INTERPRET=1`` (about 1000x slower: tests use tiny shapes).
"""

NATIVE = "torch"

from ..torch import (  # noqa: E402,F401
    fuse_dense,
    fuse_lists,
    ldre_top_drops,
    ldre_weights,
    promote_first_accepted,
    rrf_lists,
    rrf_scores,
    uncertainty,
    xr_rerank,
)
from .cosine import cosine_topk  # noqa: E402
from .octopus import octopus_topk  # noqa: E402
from .proxy import proxy_scores_topk  # noqa: E402
from .weights import octopus_gap_sums, octopus_weights  # noqa: E402

__all__ = [
    "NATIVE",
    "cosine_topk",
    "fuse_dense",
    "fuse_lists",
    "ldre_top_drops",
    "ldre_weights",
    "octopus_gap_sums",
    "octopus_topk",
    "octopus_weights",
    "promote_first_accepted",
    "proxy_scores_topk",
    "rrf_lists",
    "rrf_scores",
    "uncertainty",
    "xr_rerank",
]
