"""GFLOP/s of the numba ``loop`` product (``agentcir/kernels/numba/_gemm.py``) next to the process's BLAS.

Times ``S = X @ G.T`` for 64 query rows (d = 512) three ways, interleaved, medians of ``--rounds``:

* ``microkernel, L2-resident``: each thread sweeps its own sub-tile again and again (the tile's
  own rate: no gallery read from memory);
* ``microkernel, streamed``: one pass over an ``--rows`` gallery in L2-sized sub-tiles, in parallel
  (what a fused kernel's product costs, memory reads included);
* ``numpy matmul (BLAS)``: ``X @ G.T`` into a preallocated ``[64, rows]`` block.

The ISA is the one numba compiles for (force a lower one as in ``benchmarks/README.md``)::

    PYTHONPATH=$PWD python benchmarks/microkernel_rate.py [--rows 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numba
import numpy as np
from numba import njit, prange

from agentcir.kernels.numba import _gemm


@njit(parallel=True)
def _resident(Xp, G, reps, sub, S):
    for c in prange(numba.get_num_threads()):
        W = np.empty((0, G.shape[1]), dtype=np.float32)
        lo = c * sub
        for _ in range(reps):
            _gemm.sweep(Xp, G, 0, lo, lo + sub, S[c], W)


@njit(parallel=True)
def _streamed(Xp, G, sub):
    n = G.shape[0] // sub
    for b in prange(n):
        S = np.empty((Xp.shape[0] * Xp.shape[2], sub), dtype=np.float32)
        W = np.empty((0, G.shape[1]), dtype=np.float32)
        _gemm.sweep(Xp, G, 0, b * sub, (b + 1) * sub, S, W)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    Q, d = 64, 512
    rng = np.random.default_rng(0)
    X = rng.standard_normal((Q, d), dtype=np.float32)
    G = rng.standard_normal((a.rows, d), dtype=np.float32)
    Xp = _gemm.pack_rows(X)
    sub = _gemm.sub_rows(d)
    threads = numba.get_num_threads()
    S = np.empty((threads, Xp.shape[0] * Xp.shape[2], sub), np.float32)
    reps = max(1, a.rows // (threads * sub))
    out = np.empty((Q, a.rows), dtype=np.float32)
    runs = {
        "microkernel, L2-resident": (lambda: _resident(Xp, G, reps, sub, S), reps * threads * sub),
        "microkernel, streamed": (lambda: _streamed(Xp, G, sub), a.rows // sub * sub),
        "numpy matmul (BLAS)": (lambda: np.matmul(X, G.T, out=out), a.rows),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for fn, _ in runs.values():
        fn()
    for _ in range(a.rounds):
        for name, (fn, _) in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    print(f"numba target: {numba.config.CPU_NAME or 'host'}; 16-row tile {_gemm.TILES[16]} (lanes, rows, vectors)")
    for name, (_, rows) in runs.items():
        m = statistics.median(times[name])
        print(f"{name:26s} {m * 1e3:8.1f} ms  {2 * Q * d * rows / m / 1e9:6.1f} GFLOP/s")


if __name__ == "__main__":
    main()
