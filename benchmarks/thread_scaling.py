"""Thread scaling of the fused OCTOPUS top-k: numba against the torch backend and the BLAS products.

For each thread count (``numba.set_num_threads`` and ``torch.set_num_threads`` alike), the medians
of ``--rounds`` interleaved calls of:

* ``octopus_topk`` (Q=64, K=10 proxies, N gallery rows, d=512, bidirectional, k=10) and its weights
  pass alone (``octopus_weights``), on the torch backend and on the numba backend with each product
  path forced (``loop``: its microkernels; ``blas``: ``cblas_sgemm`` per sub-tile from numba's threads);
* the bare products of the weights pass, ``[Q*K, d] @ G.T`` into a preallocated block, by numpy's
  BLAS and by torch's (the rate a BLAS-fed kernel could reach at most).

Each line gives the time and the product rate in GFLOP/s per thread, so a kernel whose per-thread
rate falls as threads are added shows where it stops scaling. numpy's BLAS is set to the same
thread count through its own entry point (``agentcir.kernels.numba._sgemm``); where none is found
its line says so and gives the rate per thread of the whole machine::

    PYTHONPATH=$PWD python benchmarks/thread_scaling.py [--threads 1,4,16] [--rows 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numba
import numpy as np

from agentcir import kernels as K
from agentcir.kernels import tune
from agentcir.kernels.numba import _sgemm


def unit(rng, *shape):
    x = rng.standard_normal(shape, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def main(argv: list[str] | None = None) -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default=f"1,{numba.config.NUMBA_NUM_THREADS}")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    Q, Kp, d, N = 64, 10, 512, a.rows
    rng = np.random.default_rng(0)
    I, C = unit(rng, N, d), unit(rng, N, d)
    ref, P, qt, qv = unit(rng, Q, d), unit(rng, Q, Kp, d), unit(rng, Q, d), unit(rng, Q, d)
    tI, tC, tref, tP, tqt, tqv = (torch.from_numpy(x) for x in (I, C, ref, P, qt, qv))
    D = (ref[:, None, :] - P).reshape(Q * Kp, d)
    S = np.empty((Q * Kp, N), dtype=np.float32)
    tD, tS = torch.from_numpy(D), torch.from_numpy(S)
    w_flops = 2.0 * Q * Kp * N * d

    def numba_on(path, fn):
        def run():
            with tune.path_forced(path):
                return fn()

        return run

    octopus = lambda: K.octopus_topk(ref, P, qt, I, 10, visual=qv, captions=C, backend="numba")  # noqa: E731
    weights = lambda: K.octopus_weights(ref, P, I, backend="numba")  # noqa: E731
    calls = {
        "octopus loop": (numba_on("loop", octopus), 1),
        "octopus blas": (numba_on("blas", octopus), 1),
        "octopus torch": (lambda: K.octopus_topk(tref, tP, tqt, tI, 10, visual=tqv, captions=tC, backend="torch"), 1),
        "weights loop": (numba_on("loop", weights), 0),
        "weights blas": (numba_on("blas", weights), 0),
        "weights torch": (lambda: K.octopus_weights(tref, tP, tI, backend="torch"), 0),
        "product numpy": (lambda: np.matmul(D, I.T, out=S), 0),
        "product torch": (lambda: torch.mm(tD, tI.T, out=tS), 0),
    }
    blas = _sgemm.find()  # numpy's BLAS, whose thread count follows numba's below
    cores = os.cpu_count() or 1
    print(f"Q={Q} K={Kp} N={N} d={d}; numba {numba.__version__}, torch {torch.__version__}")
    if blas is None:
        print(f"numpy's BLAS thread count cannot be set here: 'product numpy' runs on its own pool ({cores} cores)")
    for n in (int(t) for t in a.threads.split(",")):
        numba.set_num_threads(n)
        torch.set_num_threads(n)
        if blas is not None:
            blas.set_threads(n)
        for fn, _ in calls.values():
            fn()
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(a.rounds):
            for name, (fn, _) in calls.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        for name, (_, fused) in calls.items():
            ms = statistics.median(times[name]) * 1e3
            flops = w_flops + (2 * 2.0 * Q * N * d if fused else 0.0)
            used = cores if name == "product numpy" and blas is None else n
            print(f"threads {n:3d}  {name:14s} {ms:9.2f} ms  {flops / ms / 1e6 / used:7.1f} GFLOP/s per thread")


if __name__ == "__main__":
    main()
