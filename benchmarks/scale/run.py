"""The scale benchmarks (docs/scale.md), one command, resumable:

    python benchmarks/scale/run.py --n 1000000 --data /tmp/agentcir-scale --out benchmarks/results/scale-1m.json
    python benchmarks/scale/run.py --n 10000000 ...            # the issue's 10M x 512 (about 10 GB on disk)
    python benchmarks/scale/run.py ... --clean                 # delete the synthetic files afterwards

Parts (each one's result is written to ``--out`` as soon as it is done; a rerun skips the
parts already there, ``--redo PART`` repeats one):

* ``exact``: a synthetic fp16 ``N x 512`` gallery memory-mapped from disk, split into 1, 2, 4
  and 8 shards, each an actor of a local Ray (``num_cpus`` = the machine's cores) scanning its
  rows of the same file with the numba kernel (the actors reniced to the driver's priority: Ray
  starts workers at nice 15); Q=1 and Q=64 latency p50/p99 and throughput
  against the single-process numba scan of the same bytes (interleaved rounds, one run), the
  Ray round trip of an empty call, and each shard actor's resident / peak memory.
* ``ann``: clustered vectors (``--ann-n`` x 512, 1000 Gaussian clusters), split into
  ``--ann-shards`` shards; per shard faiss IVF-Flat (skipped when its fp32 lists would not fit in
  memory), IVF-SQ fp16 and 8bit, IVF-PQ (nprobe sweeps) and HNSW (efSearch sweep, ``--hnsw-n``
  rows), each memory-mapped as the shard workers map them: recall@10 against the exact top-10, Q=64 and Q=1 time against the exact per-shard
  scan of the same shards (in one process), the speed-up at the first setting with
  recall@10 >= 0.95, build time.
* ``embed``: the catalog encoder (or ``--embed-encoder``'s) over the fashion photos, ``engine=local`` (one process,
  torch's threads) against the Ray Data job (encoder actors of 1 CPU each, one per core unless
  ``--embed-actors``) on a local Ray started once before the rounds, interleaved rounds (the
  variants in a seeded shuffled order in each): the jobs in this process (each including its
  encoder loading), and the whole ``agentcir index`` commands (local; Ray joining that running
  cluster with ``--address``; Ray starting its own) with the embedding inside each, as the
  command prints it (``build_*``: both engines from a process without the encoder loaded): images/s. Each variant starts on an idle
  machine (what the previous one left running, such as Ray actors unloading torch as they exit,
  is waited out, not timed). The local engine's work at 1
  torch thread and at every core's, before and after the rounds, records the host's state.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _data import quiet  # noqa: E402

from agentcir import kernels  # noqa: E402
from agentcir.framework.files import atomic_write_text  # noqa: E402
from agentcir.framework.shards import LocalShards, merge_topk, shard_ranges  # noqa: E402

D = 512
K = 10


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def write_gallery(path: Path, n: int, *, clusters: int = 0, seed: int = 0, chunk: int = 500_000) -> Path:
    """``n x 512`` unit rows in fp16 (random, or around ``clusters`` centres) written chunk by chunk."""
    if path.is_file():
        return path
    tmp = path.with_suffix(".tmp.npy")
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(n, D))
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, D)).astype(np.float32) if clusters else None
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        x = rng.standard_normal((m, D), dtype=np.float32)
        if clusters:
            x = centres[rng.integers(0, clusters, m)] + 0.6 * x
        out[start : start + m] = unit(x).astype(np.float16)
        log(f"  wrote {start + m:,} / {n:,} rows of {path.name}")
    out.flush()
    del out
    tmp.replace(path)
    return path


def specs_for(path: Path, n: int, shards: int, backend: str = "numba", ann: list | None = None, **kw) -> list[dict]:
    return [
        dict(
            root=str(path.parent),
            shard={"dir": f"shard-{s:05d}", "n": b - a, "offset": a},
            backend=backend,
            ann=None if ann is None else str(ann[s]),
            **kw,
        )
        for s, (a, b) in enumerate(shard_ranges(n, shards))
    ]


def sharded_topk(workers, source: str, q: np.ndarray, k: int = K):
    res = workers.run("topk", "cosine_topk", source, {"queries": q, "k": k, "exclude": None, "exclude_score": None})
    return merge_topk([r[0] for r in res], [r[1] for r in res], k)


def pct(xs, p):
    return float(np.percentile(np.asarray(xs) * 1000, p))


def summary(times: list[float], q: int) -> dict:
    return {
        "p50_ms": round(pct(times, 50), 2),
        "p99_ms": round(pct(times, 99), 2),
        "qps": round(q / float(np.median(times)), 1),
        "rounds": len(times),
    }


# -- exact --------------------------------------------------------------------------------------
def part_exact(args, data: Path) -> dict:
    import ray

    from agentcir.framework.scale.ray_search import RayShards

    n = args.n
    path = write_gallery(data / f"random-{n}.npy", n)
    G = np.load(path, mmap_mode="r")
    cores = os.cpu_count() or 1
    t0 = time.perf_counter()
    s = 0.0
    for start in range(0, n, 1_000_000):  # page the file in; the bandwidth probe
        s += float(np.asarray(G[start : start + 1_000_000], np.float32).sum())
    sum_s = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    Qs = {1: unit(rng.standard_normal((1, D))), 64: unit(rng.standard_normal((64, D)))}
    single = lambda q: kernels.cosine_topk(q, G, K, backend="numba")  # noqa: E731
    for q in Qs.values():
        single(q)
    ray.init(
        address="local",
        num_cpus=cores,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=args.object_store_mb * 2**20,
    )
    out = {
        "n": n,
        "dim": D,
        "dtype": "float16",
        "gallery_gb": round(n * D * 2 / 1e9, 2),
        "cores": cores,
        "numpy_sum_pass_s": round(sum_s, 3),
        "shards": {},
    }
    try:
        groups = {}
        for S in args.shards:
            scale = {"restarts": 0, "shard_threads": max(1, cores // S)}
            groups[S] = RayShards(specs_for(path, n, S), scale)
            for m in groups[S].run("memory"):  # Ray starts workers at nice 15: back to the driver's priority
                try:
                    os.setpriority(os.PRIO_PROCESS, m["pid"], os.getpriority(os.PRIO_PROCESS, 0))
                except PermissionError:
                    log("  cannot renice the shard actors (not root): on a loaded machine they run at nice 15")
            for q in Qs.values():  # warm: mmap, numba compile/cache load
                sharded_topk(groups[S], str(path), q)
        times = {(name, Q): [] for name in ["single", *groups] for Q in Qs}
        ping = {S: [] for S in groups}
        for r in range(args.rounds):  # interleaved rounds: one run, side by side
            for Q, q in Qs.items():
                t = time.perf_counter()
                want = single(q)
                times[("single", Q)].append(time.perf_counter() - t)
                for S, w in groups.items():
                    t = time.perf_counter()
                    got = sharded_topk(w, str(path), q)
                    times[(S, Q)].append(time.perf_counter() - t)
                    if r == 0:
                        assert np.array_equal(got[1], np.asarray(want.ids)), f"{S} shards: ranking differs"
            for S, w in groups.items():
                t = time.perf_counter()
                w.run("ping")
                ping[S].append(time.perf_counter() - t)
            log(f"  round {r + 1}/{args.rounds}")
        out["single"] = {f"Q{Q}": summary(times[("single", Q)], Q) for Q in Qs}
        for S, w in groups.items():
            mem = w.run("memory")
            row = {f"Q{Q}": summary(times[(S, Q)], Q) for Q in Qs}
            for Q in Qs:
                row[f"Q{Q}"]["vs_single"] = round(float(np.median(times[(S, Q)]) / np.median(times[("single", Q)])), 3)
            row["ray_roundtrip_ms_p50"] = round(pct(ping[S], 50), 3)
            row["shard_rss_mb"] = [round(m["rss_mb"]) for m in mem]
            row["shard_peak_mb"] = [round(m["peak_mb"]) for m in mem]
            row["threads_per_shard"] = max(1, cores // S)
            out["shards"][str(S)] = row
            w.close()
    finally:
        ray.shutdown()
    return out


# -- approximate --------------------------------------------------------------------------------
def part_ann(args, data: Path) -> dict:
    from agentcir.framework.scale.ann import build_index

    n, S = args.ann_n, args.ann_shards
    path = write_gallery(data / f"clustered-{n}.npy", n, clusters=1000, seed=2)
    G = np.load(path, mmap_mode="r")
    centres = np.random.default_rng(2).standard_normal((1000, D)).astype(np.float32)  # write_gallery's, same seed
    rng = np.random.default_rng(3)  # held-out queries
    q64 = unit(centres[rng.integers(0, 1000, 64)] + 0.6 * rng.standard_normal((64, D), dtype=np.float32))
    exact = LocalShards(specs_for(path, n, S))
    sharded_topk(exact, str(path), q64)

    def timed(workers, q, reps):
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            r = sharded_topk(workers, str(path), q)
            ts.append(time.perf_counter() - t)
        return r, float(np.median(ts))

    truth, t_exact64 = timed(exact, q64, args.ann_reps)
    _, t_exact1 = timed(exact, q64[:1], args.ann_reps)
    out = {
        "n": n,
        "shards": S,
        "dim": D,
        "dtype": "float16",
        "clusters": 1000,
        "exact_Q64_ms": round(t_exact64 * 1000, 2),
        "exact_Q1_ms": round(t_exact1 * 1000, 2),
        "indexes": {},
    }
    probes = [1, 2, 4, 8, 16, 32, 64]
    kinds = [
        ("ivf_flat", {"nlist": args.nlist}, "nprobe", probes, 0),
        ("ivf_sq", {"nlist": args.nlist, "sq": "fp16"}, "nprobe", probes, 0),
        ("ivf_sq", {"nlist": args.nlist, "sq": "8bit"}, "nprobe", probes, 0),
        ("ivf_pq", {"nlist": args.nlist, "pq_m": 64}, "nprobe", probes, 10),
        ("hnsw", {"hnsw_m": 16}, "ef_search", [16, 32, 64, 128, 256], 0),
    ]
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for kind, params, knob, sweep, refine in kinds:
        name = kind + (f"_{params['sq']}" if "sq" in params else "")
        if kind == "ivf_flat" and n * (4 * D + 8) > ram / 3:  # its fp32 lists are built in memory, per shard
            out["indexes"][name] = {
                "skipped": f"IVF-Flat keeps fp32 vectors: {n * (4 * D + 8) / 1e9:.1f} GB for "
                f"{n:,} rows does not fit beside the gallery in {ram / 1e9:.0f} GB of "
                f"memory (ivf_sq fp16 holds the same values in half the bytes)"
            }
            log(f"  {name}: skipped ({out['indexes'][name]['skipped']})")
            continue
        rows = n if kind != "hnsw" else min(n, args.hnsw_n)
        src = path
        if rows != n:
            src = data / f"clustered-{n}-head{rows}.npy"
            if not src.is_file():
                np.save(src, np.asarray(G[:rows]))
        scale = {"nlist": 0, "sq": "fp16", "pq_m": 64, "hnsw_m": 32, **params}
        files, build_s = [], []
        A = np.load(src, mmap_mode="r")
        settings = "-".join(f"{k}{v}" for k, v in params.items() if k != "sq")  # a rerun with others builds anew
        for s, (a, b) in enumerate(shard_ranges(rows, S)):
            f = data / "ann" / f"{name}-{rows}-{settings}-shard{s}of{S}.faiss"
            if not f.is_file():
                log(f"  building {kind} for shard {s} ({b - a:,} rows)")
                info = build_index(A[a:b], kind, scale, f)
                log(f"  built in {info['build_s']} s")
            else:
                info = json.loads(f.with_suffix(".json").read_text())
            files.append(f)
            build_s.append(info["build_s"])
        ex = LocalShards(specs_for(src, rows, S))
        tr, te64 = timed(ex, q64, args.ann_reps) if rows != n else (truth, t_exact64)
        _, te1 = timed(ex, q64[:1], args.ann_reps) if rows != n else (None, t_exact1)
        res = {
            "rows": rows,
            "build_s_per_shard": build_s,
            "exact_Q64_ms": round(te64 * 1000, 2),
            "exact_Q1_ms": round(te1 * 1000, 2),
            "refine": refine,
            "params": params,
            "sweep": [],
        }
        for v in sweep:
            w = LocalShards(specs_for(src, rows, S, ann=files, nprobe=v, ef_search=v, refine=refine))
            got, t64 = timed(w, q64, args.ann_reps)
            _, t1 = timed(w, q64[:1], args.ann_reps)
            recall = float(np.mean([len(set(a) & set(b)) / K for a, b in zip(got[1].tolist(), tr[1].tolist())]))
            res["sweep"].append(
                {
                    knob: v,
                    "recall@10": round(recall, 4),
                    "Q64_ms": round(t64 * 1000, 2),
                    "Q1_ms": round(t1 * 1000, 3),
                    "speedup_Q64": round(te64 / t64, 1),
                    "speedup_Q1": round(te1 / t1, 1),
                }
            )
            log(f"  {name} {knob}={v}: recall@10 {recall:.3f}, Q64 {t64 * 1000:.1f} ms (exact {te64 * 1000:.1f})")
        ok = [r for r in res["sweep"] if r["recall@10"] >= 0.95]
        res["at_recall_0.95"] = ok[0] if ok else None
        res["index_gb"] = round(sum(f.stat().st_size for f in files) / 1e9, 2)
        out["indexes"][name] = res
    return out


# -- embedding ----------------------------------------------------------------------------------
def tower_rates(recipe, paths) -> dict:
    """The local engine's work (read, decode, embed) over ``paths`` in this process, with the
    encoder's threads at 1 (one encoder actor's share) and at every core (the local engine):
    images/s, the host's state, which moves the engines' speeds (docs/scale.md)."""
    import torch

    from agentcir.framework.recipe import ComponentPool

    before, rates = torch.get_num_threads(), {}
    try:
        for threads in (1, os.cpu_count() or 1):
            encoder = ComponentPool({"encoder": {**recipe["encoder"], "num_threads": threads}}).get("encoder")
            encoder.encode_images(paths[:64], progress=False)  # warm
            t = time.perf_counter()
            encoder.encode_images(paths, progress=False)
            rates[f"threads_{threads}_img_s"] = round(len(paths) / (time.perf_counter() - t), 1)
    finally:
        torch.set_num_threads(before)  # a torch encoder sets the process's threads
    return rates


def part_embed(args, data: Path) -> dict:
    import subprocess

    import ray

    from agentcir.framework.gallery import Gallery, items_from_folder
    from agentcir.framework.recipe import ComponentPool, compose
    from agentcir.framework.scale.embed import build_sharded

    items, _ = items_from_folder(args.photos)
    items = items[: args.embed_n] if args.embed_n else items
    if args.embed_repeat > 1:  # a longer job over the same files: what the fixed costs amount to
        items = [dataclasses.replace(it, id=f"{it.id}#{r}") for r in range(args.embed_repeat) for it in items]
    commands = args.embed_commands and not args.embed_n and args.embed_repeat == 1  # a command takes the folder
    recipe = compose(args.embed_encoder)
    scale = {"engine": "ray", "shards": args.embed_shards, "concurrency": args.embed_actors, "num_cpus": 1}
    out = {
        "images": len(items),
        "encoder": " ".join(args.embed_encoder),
        "actors": args.embed_actors or "cluster's CPUs",
        "rounds": args.embed_rounds,
        "repeat": args.embed_repeat,
    }
    cores = os.cpu_count() or 1
    t = time.perf_counter()
    ray.init(
        address="local",
        num_cpus=cores,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=args.object_store_mb * 2**20,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    out["ray_init_s"] = round(time.perf_counter() - t, 2)
    address = ray.get_runtime_context().gcs_address
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("RAY_ADDRESS", None)
    index = [sys.executable, "-m", "agentcir.cli", "index", args.photos, "--no-metadata", "-q", *args.embed_encoder]
    ray_flags = ["--engine", "ray", "--shards", str(args.embed_shards)] + (
        [f"scale.concurrency={args.embed_actors}"] if args.embed_actors else []
    )

    def job_local(d):  # as `agentcir index --engine local` does: load the encoder, embed
        Gallery.build(d, items, ComponentPool(recipe).get("encoder"), progress=False)

    def job_ray(d):  # the job on the running cluster: actors load the encoder, embed
        build_sharded(d, items, ComponentPool(recipe).get("encoder"), scale, recipe=recipe, progress=False)

    def command(*extra):
        def run(d):  # -> the seconds of the command's embedding, as it prints them
            r = subprocess.run(index + ["--out", str(d), *extra], env=env, check=True, capture_output=True, text=True)
            return float(re.search(r"embedding took ([0-9.]+) s", r.stdout).group(1))

        return run

    variants = {"job_local": job_local, "job_ray": job_ray}
    if commands:  # whole commands, as a user types them (each a fresh process)
        variants |= {
            "cmd_local": command(),
            "cmd_ray_join": command(*ray_flags, "--address", address),
            "cmd_ray_own": command(*ray_flags, f"scale.object_store_mb={args.object_store_mb}"),
        }
    if args.embed_variants:
        unknown = sorted(set(args.embed_variants) - set(variants))
        if unknown:
            raise SystemExit(f"--embed-variants: {', '.join(unknown)} not among {', '.join(variants)}")
        variants = {k: v for k, v in variants.items() if k in args.embed_variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    builds: dict[str, list[float]] = {v: [] for v in variants if v.startswith("cmd_")}  # each command's embedding
    waits: list[float] = []
    order = random.Random(0)
    out["tower_before"] = tower_rates(recipe, [it.path for it in items[:512]])
    try:
        for r in range(args.embed_rounds):  # interleaved: one run, side by side, the same page cache
            names = list(variants)
            order.shuffle(names)  # no variant always runs after the same one
            for name in names:
                fn = variants[name]
                d = data / f"embed-{name}"
                shutil.rmtree(d, ignore_errors=True)
                waits.append(quiet(limit=args.quiet_limit))  # the previous variant's leftovers are not timed here
                t = time.perf_counter()
                took = fn(d)
                times[name].append(time.perf_counter() - t)
                if name in builds:
                    builds[name].append(took)
            log(f"  round {r + 1}/{args.embed_rounds}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()))
    finally:
        ray.shutdown()
    out["tower_after"] = tower_rates(recipe, [it.path for it in items[:512]])
    out["quiet_wait_s"] = {"median": round(float(np.median(waits)), 2), "max": max(waits)}
    times |= {f"build_{name[4:]}": ts for name, ts in builds.items()}
    for name, ts in times.items():
        out[f"{name}_s"] = round(float(np.median(ts)), 2)
        out[f"{name}_img_s"] = round(len(items) / out[f"{name}_s"], 1)
    pairs = [("job_ray", "job_local")] + (
        [(f"{k}_ray_{how}", f"{k}_local") for k in ("build", "cmd") for how in ("join", "own")] if commands else []
    )
    for ray_v, local_v in [(a, b) for a, b in pairs if a in times and b in times]:
        out[f"{ray_v}_vs_local"] = round(out[f"{local_v}_s"] / out[f"{ray_v}_s"], 3)
        out[f"{ray_v}_ratios"] = [round(a / b, 3) for a, b in zip(times[local_v], times[ray_v])]
    out["includes"] = {
        "job_*": "in this process (torch imported already): the encoder's loading, Ray Data's start-up "
        "and the actors' start (importing torch) for Ray, the embedding, the shards' writing",
        "cmd_*": "the whole `agentcir index --no-metadata` command in a fresh process (imports, the "
        "domain check); cmd_ray_join joins the running local Ray, cmd_ray_own starts its own",
        "build_*": "the embedding inside each cmd_* command, as the command prints it ('embedding took'): "
        "the encoder's loading with its imports (local), or joining / starting Ray and the "
        "Ray Data job with its actors' start (ray), the embedding, the shards' writing",
    }
    return out


PARTS = {"exact": part_exact, "ann": part_ann, "embed": part_embed}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000, help="rows of the exact-search gallery")
    p.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--ann-n", type=int, default=1_000_000)
    p.add_argument("--ann-shards", type=int, default=2)
    p.add_argument("--hnsw-n", type=int, default=200_000)
    p.add_argument("--nlist", type=int, default=1024)
    p.add_argument("--ann-reps", type=int, default=5)
    p.add_argument("--photos", default=str(ROOT.parent / "shared" / "data" / "fashion-products" / "images"))
    p.add_argument("--embed-n", type=int, default=0, help="first N photos only (0: all)")
    p.add_argument(
        "--embed-encoder",
        nargs="+",
        default=["encoder=catalog"],
        help="recipe overrides choosing the encoder of both engines (e.g. encoder=onnx encoder.path=DIR, "
        "the catalog encoder exported by `agentcir export-onnx`)",
    )
    p.add_argument("--embed-actors", type=int, default=0, help="encoder actors (0: the recipe default, one per CPU)")
    p.add_argument("--embed-shards", type=int, default=4)
    p.add_argument("--embed-rounds", type=int, default=3)
    p.add_argument("--embed-repeat", type=int, default=1, help="list the photos this many times (a longer job)")
    p.add_argument(
        "--no-embed-commands",
        dest="embed_commands",
        action="store_false",
        help="time only the jobs in this process, not the `agentcir index` commands too",
    )
    p.add_argument(
        "--embed-variants",
        nargs="+",
        default=[],
        help="time only these variants (job_local job_ray cmd_local cmd_ray_join cmd_ray_own; default: all)",
    )
    p.add_argument("--object-store-mb", type=int, default=300)
    p.add_argument(
        "--quiet-limit",
        type=float,
        default=15.0,
        help="seconds to wait at most for an idle machine before each embedding variant (0: start at once)",
    )
    p.add_argument("--data", default="/tmp/agentcir-scale", help="folder of the synthetic files")
    p.add_argument("--out", required=True, help="results JSON (parts already in it are skipped)")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    p.add_argument("--redo", nargs="*", default=[], choices=list(PARTS))
    p.add_argument("--clean", action="store_true", help="delete --data when done")
    args = p.parse_args(argv)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    import platform
    import subprocess

    cpu = (
        subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True)
        .stdout.split(":")[-1]
        .strip()
    )
    results.setdefault(
        "machine",
        {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "amx": "amx_tile" in Path("/proc/cpuinfo").read_text(),
            "load_at_start": os.getloadavg(),
        },
    )
    for name in args.parts:
        if name in results and name not in args.redo:
            log(f"{name}: done already (in {out}); --redo {name} repeats it")
            continue
        log(f"{name}: running")
        t, load = time.perf_counter(), os.getloadavg()
        results[name] = PARTS[name](args, data)
        results[name]["load_before"] = load
        results[name]["part_wall_s"] = round(time.perf_counter() - t, 1)
        results[name]["load_after"] = os.getloadavg()
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, json.dumps(results, indent=1))
        log(f"{name}: {json.dumps(results[name])[:2000]}")
    if args.clean:
        shutil.rmtree(data, ignore_errors=True)
        log(f"deleted {data}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
