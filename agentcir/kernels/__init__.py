"""The scoring core: cosine top-k, proxy aggregation, OCTOPUS fusion, rank fusion, re-ranks.

Pure kernels (dense arrays in, dense arrays out) behind one dispatch; every public
function takes ``backend="auto"`` or one of :data:`BACKENDS` (a method passes
``backend=ctx.kernels``). Importing this package is light (numpy only): backends are
imported when first used. See README.md in this folder for each op's contract.
"""

from ._inputs import GALLERY_KINDS, KernelInputError
from ._int8 import Int8Gallery, default_shortlist, quantize_int8
from ._types import OctopusTopK, TopK
from .api import (
    cosine_topk,
    fuse_scores,
    ldre_top_drops,
    ldre_weights,
    octopus_topk,
    octopus_visual_query,
    octopus_gap_sums,
    octopus_weights,
    promote_first_accepted,
    proxy_scores_topk,
    rrf,
    uncertainty,
    xr_rerank,
)
from .dispatch import BACKENDS, ENV_VAR, BackendUnavailableError, resolve

__all__ = [
    "BACKENDS",
    "ENV_VAR",
    "GALLERY_KINDS",
    "Int8Gallery",
    "BackendUnavailableError",
    "KernelInputError",
    "OctopusTopK",
    "TopK",
    "cosine_topk",
    "default_shortlist",
    "fuse_scores",
    "ldre_top_drops",
    "ldre_weights",
    "octopus_gap_sums",
    "octopus_topk",
    "octopus_visual_query",
    "octopus_weights",
    "promote_first_accepted",
    "proxy_scores_topk",
    "quantize_int8",
    "resolve",
    "rrf",
    "uncertainty",
    "xr_rerank",
]
