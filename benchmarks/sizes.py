"""The one size table of the kernel benchmarks (every bench_*.py file takes its sizes from here).

``AGENTCIR_BENCH_SCALE`` (default 1) scales the gallery size N and the list length L,
e.g. ``AGENTCIR_BENCH_SCALE=0.01`` for a quick smoke run of the whole suite.
"""

from __future__ import annotations

import os

SCALE = float(os.environ.get("AGENTCIR_BENCH_SCALE", "1"))


def _n(n: int) -> int:
    return max(64, int(n * SCALE))


#: op -> list of sizes; ``name`` is the benchmark group suffix
SIZES: dict[str, list[dict]] = {
    "cosine_topk": [
        dict(name="Q1-N1M-d512", Q=1, N=_n(1_000_000), d=512, k=10),
        dict(name="Q64-N100k-d512", Q=64, N=_n(100_000), d=512, k=10),
    ],
    #: the batch sweep (bench_cosine_sweep.py): Q = 1..4096 on one gallery, for the crossover points
    "cosine_sweep": [
        dict(name=f"Q{q}-N20k-d512", Q=q, N=_n(20_000), d=512, k=10) for q in (1, 4, 16, 64, 256, 1024, 4096)
    ],
    "proxy_scores_topk": [dict(name="Q64-K10-N100k-d512", Q=64, K=10, N=_n(100_000), d=512, k=10)],
    "octopus_weights": [dict(name="Q64-K10-N100k-d512", Q=64, K=10, N=_n(100_000), d=512)],
    "octopus_topk": [
        dict(name="Q64-K10-N100k-d512", Q=64, K=10, N=_n(100_000), d=512, k=10),
        dict(name="Q1-K10-N200k-d512", Q=1, K=10, N=_n(200_000), d=512, k=10),
    ],
    "rrf": [
        dict(name="Q64-V3-L1000-lists", Q=64, V=3, L=_n(1000), N=_n(100_000), k=100),
        dict(name="Q64-V3-N10k-scores", Q=64, V=3, N=_n(10_000), k=100),
    ],
    "fuse_scores": [dict(name="Q64-V3-L1000-lists", Q=64, V=3, L=_n(1000), N=_n(100_000), k=100)],
    "xr_rerank": [dict(name="Q64-L1000-H100", Q=64, L=_n(1000), H=min(100, _n(1000)))],
    "promote_first_accepted": [dict(name="Q64-L1000-A20", Q=64, L=_n(1000), A=20)],
    "uncertainty": [dict(name="Q64-L1000", Q=64, L=_n(1000))],
}


def sizes(op: str) -> list[dict]:
    return SIZES[op]


def ids(op: str) -> list[str]:
    return [s["name"] for s in SIZES[op]]
