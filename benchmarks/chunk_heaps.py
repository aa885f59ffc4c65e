"""What the selection of the numba ``loop`` top-k costs per gallery chunk: the fused blocked
``cosine_topk`` (``agentcir/kernels/numba/cosine.py``) with 8 chunks per thread (the default:
dynamic scheduling evens out a busy core) against 1, interleaved, medians of ``--rounds``.

The running top-k of a parallel pass is kept per (thread, query) (``_common.thread_heaps``): a heap
fills and warms up once per thread, so the chunk count costs nothing beyond the scheduling. Kept
per (chunk, query), each of the ``8 x threads`` chunks warmed up its own heaps, which at several
hundred queries cost more than their selection (``benchmarks/results/``)::

    PYTHONPATH=$PWD python benchmarks/chunk_heaps.py [--queries 513] [--rows 4096,32768] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=513)
    ap.add_argument("--rows", default="4096,32768", help="gallery sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    os.environ["AGENTCIR_KERNELS_PRODUCT"] = "loop"  # the fused numba pass, whatever the tune says
    from agentcir import kernels as K
    from agentcir.kernels.numba import _gemm

    rng = np.random.default_rng(0)
    d = 512
    X = rng.standard_normal((args.queries, d), dtype=np.float32)
    for n in (int(r) for r in args.rows.split(",")):
        G = rng.standard_normal((n, d), dtype=np.float32)
        times: dict[int, list[float]] = {8: [], 1: []}
        for per in times:  # compile and warm up
            _gemm.CHUNKS_PER_THREAD = per
            K.cosine_topk(X, G, 10, backend="numba")
        for _ in range(args.rounds):
            for per in times:
                _gemm.CHUNKS_PER_THREAD = per
                t = time.perf_counter()
                K.cosine_topk(X, G, 10, backend="numba")
                times[per].append(time.perf_counter() - t)
        m = {per: statistics.median(ts) * 1e3 for per, ts in times.items()}
        print(
            f"Q={args.queries} N={n}: 8 chunks/thread {m[8]:.1f} ms, 1 chunk/thread {m[1]:.1f} ms ({m[8] / m[1]:.2f}x)"
        )


if __name__ == "__main__":
    main()
