"""Which half-precision type does this CPU run fastest? (the micro-benchmark behind the
kernels' dtype choices; README "Precision")

    .venv/bin/python benchmarks/half_dtypes.py

Interleaved medians of: torch ``mm`` of 640 query rows with a 100k x 512 gallery (the
OCTOPUS weight pass) and of 64 rows, in float32 / float16 / bfloat16 (bf16 uses AMX or
AVX512-BF16 where the CPU has them); the numba single-query scan loop (4 rows per
iteration, one thread) on a cache-resident block, in values per nanosecond, which shows
whether the few-query scan can be memory-bound; and the top-10 agreement of the two half
storages with float32 on random unit vectors (the storage alone: queries stay float32).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import gallery, unit  # noqa: E402


def main(rounds: int = 5) -> None:
    G = torch.from_numpy(gallery(100_000, 512))
    rng = np.random.default_rng(0)
    X = {rows: torch.from_numpy(unit(rng, rows, 512)) for rows in (64, 640)}
    gals = {dt: G.to(getattr(torch, dt)) for dt in ("float32", "float16", "bfloat16")}
    cases = {
        f"mm {rows:3d} rows x 100k x 512 {dt:8s}": (lambda r=rows, d=dt: X[r].to(gals[d].dtype) @ gals[d].T)
        for rows in X
        for dt in gals
    }
    times = {name: [] for name in cases}
    for fn in cases.values():
        fn()
    for _ in range(rounds):
        for name, fn in cases.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    for name, ts in times.items():
        print(f"{name}  median {statistics.median(ts) * 1e3:8.1f} ms")
    scan_throughput(rounds)
    q = X[64]
    top = (q @ G.T).topk(10).indices
    for dt in ("float16", "bfloat16"):
        other = (q @ gals[dt].float().T).topk(10).indices
        agree = np.mean([set(a.tolist()) == set(b.tolist()) for a, b in zip(top, other)])
        print(f"top-10 agreement of a {dt} gallery with float32 (64 random queries): {agree:.3f}")


def scan_throughput(rounds: int) -> None:
    """Values per ns of the numba 4-row scan loop, one thread, 2,000 x 512 rows (in cache)."""
    from numba import njit

    from agentcir.kernels.numba._common import _dot4_bf16, _dot4_f16, _dot4_f32

    def kernel(dot4):
        @njit
        def scan(x, G, out):
            for b in range(G.shape[0] // 4):
                s0, s1, s2, s3 = dot4(x, G[4 * b], G[4 * b + 1], G[4 * b + 2], G[4 * b + 3])
                out[4 * b], out[4 * b + 1], out[4 * b + 2], out[4 * b + 3] = s0, s1, s2, s3

        return scan

    rng = np.random.default_rng(1)
    block = unit(rng, 2000, 512)
    data = {
        "float32": (_dot4_f32, block),
        "float16": (_dot4_f16, block.astype(np.float16).view(np.uint16)),
        "bfloat16": (_dot4_bf16, (block.view(np.uint32) >> 16).astype(np.uint16)),
    }
    x, out = unit(rng, 512), np.empty(2000, dtype=np.float32)
    for name, (dot4, G) in data.items():
        scan = kernel(dot4)
        scan(x, G, out)
        ts = []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(100):
                scan(x, G, out)
            ts.append(time.perf_counter() - t)
        rate = 100 * G.size / statistics.median(ts) / 1e9
        print(f"numba scan loop {name:8s}: {rate:6.2f} values/ns (one thread, cached)")


if __name__ == "__main__":
    main()
