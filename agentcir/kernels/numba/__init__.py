"""numba backend (the CPU default): gallery-tile products (the process's BLAS sgemm or register-tiled
numba kernels, chosen per CPU, dtype and shape class by :mod:`agentcir.kernels.tune`), then numba passes
that aggregate, fuse and keep a running top-k; memory-bound direct kernels for a few queries.

One op per module: cosine (cosine_topk), proxy (proxy_scores_topk), weights
(octopus_weights), ldre (ldre_weights), octopus (octopus_topk), rank_fusion (rrf), score_fusion (fuse_scores),
xr (xr_rerank), promote (promote_first_accepted), gate (uncertainty). Kernels are compiled
on first use and cached on disk (``cache=True``), stamped with the digest of every module of this
folder (:mod:`._cache`): an edit to any of them recompiles them all.
"""

from . import _cache

_cache.install()  # before any kernel below is decorated

NATIVE = "numpy"

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
from .. import tune as _tune  # noqa: E402
from . import _measure  # noqa: E402

_tune._measure = _measure.measure  # the product-path measurement of agentcir.kernels.tune
_cache.compile_each_once(__name__)  # processes sharing the cache compile a kernel once, not each

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
