"""OCTOPUS's fused scoring and LDRE's weights on a sharded gallery against the single-process calls
on the same rows (docs/scale.md): OCTOPUS's proxy weights merged from the shards' gap sums, one
fused pass per shard, the entropy merged from the shards' log partition functions; LDRE's top
drops merged from the shards' top drops.

    python benchmarks/scale/octopus_shards.py [--n 400000] [--shards 4] [--q 16] [--proxies 10] [--engine ray]

``--engine ray`` also times the shards as Ray actors (a local Ray of the machine's cores).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _data import cpu_summary, unit  # noqa: E402

from agentcir import kernels  # noqa: E402
from agentcir.framework.galleries import open_gallery  # noqa: E402
from agentcir.framework.gallery import GalleryItem  # noqa: E402
from agentcir.framework.scale.embed import build_sharded  # noqa: E402

D = 512


class RowEncoder:
    """Image ``/rows/<r>.png`` -> a seeded unit vector (no files: the rows are synthetic)."""

    registry_key, identity, dim = "rows", "rows-v1", D

    def encode_images(self, paths, progress=False, skipped=None):
        rows = [int(str(p).rsplit("/", 1)[-1].split(".")[0]) for p in paths]
        return unit(np.random.default_rng(rows[0]), len(rows), D)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--q", type=int, default=16)
    ap.add_argument("--proxies", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--engine", choices=["local", "ray"], default="local", help="ray: also Ray shard actors")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="agentcir-octopus-shards-"))
    try:
        items = [GalleryItem(f"i{r}", f"/rows/{r}.png") for r in range(args.n)]
        build_sharded(tmp / "g", items, RowEncoder(), {"shards": args.shards}, dtype="float16", progress=False)
        sharded = open_gallery(tmp / "g", scale={"shards": args.shards}).image_emb
        single = np.asarray(sharded)
        where = [("single process", single), (f"{args.shards} local shards", sharded)]
        if args.engine == "ray":
            where.append(
                (
                    f"{args.shards} Ray actors",
                    open_gallery(
                        tmp / "g",
                        scale={"shards": args.shards, "engine": "ray", "object_store_mb": 300, "shard_threads": 1},
                    ).image_emb,
                )
            )
        rng = np.random.default_rng(1)
        ref, target, visual = (unit(rng, args.q, D) for _ in range(3))
        proxies = unit(rng, args.q, args.proxies, D)
        ops = {
            "octopus_topk bidirectional": {
                name: (
                    lambda G=G: (
                        kernels.octopus_topk(
                            ref, proxies, target, G, 10, visual=visual, captions=G, backend="numba"
                        ).ids
                    )
                )
                for name, G in where
            },
            "ldre_weights": {
                name: (lambda G=G: kernels.ldre_weights(ref, proxies, G, backend="numba")) for name, G in where
            },
        }
        print(f"CPU: {cpu_summary()}")
        print(
            f"Q={args.q} K={args.proxies} N={args.n:,} x {D} fp16, numba, medians of {args.rounds} interleaved rounds"
        )
        for op, calls in ops.items():
            a, *rest = (np.asarray(f()) for f in calls.values())
            assert all(np.allclose(a, b, atol=1e-5) for b in rest), f"{op}: the shards' result differs"
            times = {name: [] for name in calls}
            for _ in range(args.rounds):  # interleaved rounds
                for name, f in calls.items():
                    t = time.perf_counter()
                    f()
                    times[name].append(time.perf_counter() - t)
            base = float(np.median(times["single process"]))
            print(f"{op} (same result on shards):")
            for name, ts in times.items():
                print(f"  {name:18s} {1000 * float(np.median(ts)):8.1f} ms  ({float(np.median(ts)) / base:.2f}x)")
    finally:
        if args.engine == "ray":
            import ray

            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
