"""torch backend (any device): the same streamed algorithms in plain torch ops.

Runs on the gallery tensor's device: pass CUDA tensors to score on a GPU (numpy inputs
run on the CPU). Gallery ops stream tiles with a running top-k (packed int64 keys give
the lower-id tie rule exactly); list ops (rrf, fuse_scores, re-ranks, uncertainty) run
on CPU tensors. One op per module, named as in the numba backend.
"""

NATIVE = "torch"

from .cosine import cosine_topk  # noqa: E402
from .gate import uncertainty  # noqa: E402
from .ldre import ldre_top_drops, ldre_weights  # noqa: E402
from .octopus import octopus_topk  # noqa: E402
from .promote import promote_first_accepted  # noqa: E402
from .proxy import proxy_scores_topk  # noqa: E402
from .rank_fusion import rrf_lists, rrf_scores  # noqa: E402
from .score_fusion import fuse_dense, fuse_lists  # noqa: E402
from .weights import octopus_gap_sums, octopus_weights  # noqa: E402
from .xr import xr_rerank  # noqa: E402

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
