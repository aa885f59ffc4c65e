"""First-call latency of the numba kernels on a cold compile cache.

A fresh process with an empty numba cache (``NUMBA_CACHE_DIR``) and an empty autotune file
(``AGENTCIR_KERNELS_TUNE_FILE``), both in a temporary folder, times the first call of each of:

* cosine top-k, 64 queries, an in-memory float32 gallery (the autotune measures this shape class
  first, then the call runs);
* the same on a memory-mapped (read-only) copy of the gallery;
* OCTOPUS top-k, 8 queries with 4 proxies each, visual queries and caption rows.

``--processes N`` starts N such processes at once on one cold cache (scale workers or test workers
starting together) and prints, besides each one's times, the wall time until all are done and the CPU
time they spent together.

Usage: ``PYTHONPATH=$PWD python benchmarks/first_call.py [--rows 20000] [--dim 64] [--processes 2]``
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--processes", type=int, default=1, help="processes started at once on one cold cache")
    ap.add_argument("--cache", type=Path, help=argparse.SUPPRESS)  # a child of --processes: the shared folder
    args = ap.parse_args()
    if "numba" in sys.modules:
        raise SystemExit("run first_call.py as a script: numba must not be imported before its cache is set")
    if args.cache is not None:
        run(args.cache, args)
        return
    with tempfile.TemporaryDirectory(prefix="agentcir-first-call-") as folder:
        if args.processes <= 1:
            run(Path(folder), args)
            return
        cmd = [sys.executable, __file__, "--rows", str(args.rows), "--dim", str(args.dim), "--cache", folder]
        start = time.perf_counter()
        children = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(args.processes)]
        for i, child in enumerate(children):
            out = child.communicate()[0]
            if child.returncode:
                raise SystemExit(f"process {i} failed ({child.returncode})")
            print(f"process {i}: " + "; ".join(out.strip().splitlines()))
        use = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(
            f"{args.processes} processes: {time.perf_counter() - start:.1f} s wall, {use.ru_utime + use.ru_stime:.1f} s CPU"
        )


def run(tmp: Path, args: argparse.Namespace) -> None:
    os.environ["NUMBA_CACHE_DIR"] = str(tmp / "numba")
    os.environ["AGENTCIR_KERNELS_TUNE_FILE"] = str(tmp / "tune.json")
    os.environ.pop("AGENTCIR_KERNELS_AUTOTUNE", None)

    import numpy as np

    from agentcir import kernels as K

    rng = np.random.default_rng(0)

    def unit(*shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    G, X = unit(args.rows, args.dim), unit(64, args.dim)
    mapped = tmp / f"gallery-{os.getpid()}.npy"
    np.save(mapped, G)
    Gm = np.load(mapped, mmap_mode="r")
    P = unit(8, 4, args.dim)
    calls = {
        "cosine Q=64, in memory": lambda: K.cosine_topk(X, G, 10, backend="numba"),
        "cosine Q=64, memory-mapped": lambda: K.cosine_topk(X, Gm, 10, backend="numba"),
        "octopus Q=8 K=4": lambda: K.octopus_topk(X[:8], P, X[:8], G, 10, visual=X[8:16], captions=G, backend="numba"),
    }
    start = time.perf_counter()
    for name, fn in calls.items():
        t = time.perf_counter()
        fn()
        print(f"{name}: {time.perf_counter() - t:.1f} s", flush=True)
    print(f"total: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
