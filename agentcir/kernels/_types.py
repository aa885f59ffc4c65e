"""Result types of the scoring core (plain NamedTuples of dense arrays)."""

from __future__ import annotations

from typing import Any, NamedTuple


class TopK(NamedTuple):
    """A ranked candidate list per query.

    Attributes:
        scores: float32 ``[Q, k]``, best first; padding slots hold ``-inf``.
        ids: int32 ``[Q, k]`` gallery row ids; padding slots hold ``-1``.
    """

    scores: Any
    ids: Any


class OctopusTopK(NamedTuple):
    """:func:`agentcir.kernels.octopus_topk` result.

    Attributes:
        scores: float32 ``[Q, k]`` fused OCTOPUS scores, best first (``-inf`` padding).
        ids: int32 ``[Q, k]`` gallery ids (``-1`` padding).
        weights: float32 ``[Q, K]`` adaptive proxy weights ``softmax(s / tau)``.
        entropy: float32 ``[Q]`` entropy of ``softmax(S / entropy_tau)`` over every
            gallery item left after exclusion (the input of the uncertainty gate).
        log_partition: float32 ``[Q]`` ``log sum_j exp(S_j / entropy_tau)`` over the same items
            (``-inf`` when none is left): with ``entropy``, what merges the entropies of the
            shards of a sharded gallery without another pass.
    """

    scores: Any
    ids: Any
    weights: Any
    entropy: Any
    log_partition: Any
