"""The measurement behind :func:`agentcir.kernels.tune.choose`: the ``loop`` and ``blas`` paths of
:mod:`.cosine` timed side by side on a synthetic top-k of one shape class."""

from __future__ import annotations

import statistics
import time

import numpy as np

from .._inputs import Gallery
from .cosine import blas_topk, loop_topk

#: synthetic problem of a measurement: d, gallery rows for few rows (memory-bound: larger than
#: a last-level cache) and the product flops aimed at for many rows
MEASURE_D, MEASURE_SCAN_ROWS, MEASURE_FLOPS, MEASURE_ROUNDS = 512, 65536, 6e8, 5
#: at least this many gallery rows for many rows (at most ``MEASURE_SCAN_ROWS``): every thread's chunks
#: then hold enough rows that the product is timed, not the per-chunk set-up (over 1024 rows the
#: loop tied the BLAS path at 1024 query rows, where it is ahead on a large gallery)
MEASURE_MIN_ROWS = 16384


def _synthetic(kind: str, rows: int) -> tuple[np.ndarray, Gallery]:
    rng = np.random.default_rng(rows)
    d = MEASURE_D
    flops_rows = max(MEASURE_MIN_ROWS, MEASURE_FLOPS / (2 * rows * d))
    n = MEASURE_SCAN_ROWS if rows <= 4 else int(min(MEASURE_SCAN_ROWS, flops_rows))
    G = rng.standard_normal((n, d), dtype=np.float32)
    X = rng.standard_normal((rows, d), dtype=np.float32)
    if kind == "int8":
        s = (np.abs(G).max(axis=1) / 127).astype(np.float32)
        return X, Gallery(np.rint(G / s[:, None]).astype(np.int8), kind, s)
    if kind == "float16":
        data = G.astype(np.float16).view(np.uint16)
    elif kind == "bfloat16":
        data = (G.view(np.uint32) >> 16).astype(np.uint16)
    else:
        data = G
    return X, Gallery(data, kind)


def measure(kind: str, rows: int) -> dict[str, float]:
    """Median seconds of a k=10 top-k of ``rows`` query rows over a synthetic ``kind`` gallery by
    each path (``loop``: the numba backend's own kernels, ``blas``: :func:`.cosine.blas_topk`), interleaved."""
    X, g = _synthetic(kind, rows)
    excl, ex_value = np.empty((rows, 0), dtype=np.int32), np.float32(-np.inf)
    runs = {"loop": lambda: loop_topk(X, g, 10, excl, ex_value), "blas": lambda: blas_topk(X, g, 10, excl, ex_value)}
    for fn in runs.values():  # compile / load the kernels, touch the pages
        fn()
    times: dict[str, list[float]] = {p: [] for p in runs}
    for _ in range(MEASURE_ROUNDS):
        for p, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[p].append(time.perf_counter() - t)
    return {p: statistics.median(ts) for p, ts in times.items()}
