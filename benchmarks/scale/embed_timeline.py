"""Where the Ray Data embedding job's time goes (docs/scale.md): the job of ``agentcir index
--engine ray`` (:func:`agentcir.framework.scale.embed.embedding_job`, its own rows, blocks and
actors) with each encoder call timed inside its actor, next to the local engine's build of the
same photos, in interleaved rounds on one local Ray:

    python benchmarks/scale/embed_timeline.py --rounds 3 --out benchmarks/results/embed-timeline.json

Per round and actor: when its constructor ran and finished, when its first encoder call began
(the first one imports torch), when its last one ended, its calls and the seconds they took, and
the idle seconds between them, and its process's CPU seconds (its start and imports included). Per
job: its wall time, the start (its first call's start), the tail (the spread of the actors' last
ends: one actor idle while another finishes its last block), the machine's busy core-seconds and
what of them was not the actors' (Ray's processes, the driver), and the local engine's time over
the same photos. Each is timed on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from _data import machine_busy_s, quiet  # noqa: E402

from agentcir.framework.files import atomic_write_text  # noqa: E402
from agentcir.framework.scale import scale_settings  # noqa: E402
from agentcir.framework.scale.embed import EncodeBatch, embedding_job  # noqa: E402


class TimedEncodeBatch(EncodeBatch):
    """The job's encoder actor, its calls stamped with wall-clock times (one host, one clock)."""

    def __init__(self, **kw):
        self.born = time.time()
        super().__init__(**kw)
        self.ready = time.time()

    def __call__(self, batch):
        t0 = time.time()
        out = super().__call__(batch)
        n, cpu = len(out["row"]), os.times()
        for k, v in (
            ("t0", t0),
            ("t1", time.time()),
            ("born", self.born),
            ("ready", self.ready),
            ("cpu", cpu.user + cpu.system),
        ):  # the process's CPU seconds so far, its start included
            out[k] = np.full(n, v)
        out["pid"] = np.full(n, os.getpid())
        return out


def timed_job(ray, items, encoder, recipe, scale) -> dict:
    T, busy = time.time(), machine_busy_s()
    ds, actors = embedding_job(ray, items, [(0, len(items))], [0], encoder, recipe, scale, udf=TimedEncodeBatch)
    calls: dict[int, dict[float, tuple]] = {}
    for b in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for pid, t0, t1, born, ready, cpu in zip(b["pid"], b["t0"], b["t1"], b["born"], b["ready"], b["cpu"]):
            calls.setdefault(int(pid), {})[float(t0)] = (t1 - T, born - T, ready - T, float(cpu))
    wall = time.time() - T
    busy = machine_busy_s() - busy if busy is not None else None
    per = []
    for pid, cs in sorted(calls.items()):
        spans = sorted((t0 - T, t1) for t0, (t1, *_) in cs.items())
        _, born, ready, _ = next(iter(cs.values()))
        per.append(
            {
                "pid": pid,
                "born_s": round(born, 2),
                "ready_s": round(ready, 2),
                "first_call_s": round(spans[0][0], 2),
                "first_call_took_s": round(spans[0][1] - spans[0][0], 2),
                "last_end_s": round(spans[-1][1], 2),
                "calls": len(spans),
                "busy_s": round(sum(b - a for a, b in spans), 2),
                "cpu_s": round(max(c[3] for c in cs.values()), 2),
                "idle_between_calls_s": round(sum(n[0] - p[1] for p, n in zip(spans, spans[1:])), 2),
            }
        )
    ends = [a["last_end_s"] for a in per]
    out = {
        "wall_s": round(wall, 2),
        "actors": actors,
        "start_s": min(a["first_call_s"] for a in per),
        "tail_s": round(max(ends) - min(ends), 2),
        "per_actor": per,
    }
    if busy is not None:  # the machine's busy core-seconds over the job: the actors', and the rest (Ray, the driver)
        out |= {"machine_cpu_s": round(busy, 2), "others_cpu_s": round(busy - sum(a["cpu_s"] for a in per), 2)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--photos", default=str(ROOT.parent / "shared" / "data" / "fashion-products" / "images"))
    p.add_argument("--n", type=int, default=0, help="first N photos only (0: all)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=0, help="the encoder's batch size (0: the recipe's, 64)")
    p.add_argument(
        "--encoder",
        nargs="+",
        default=["encoder=catalog"],
        help="recipe overrides choosing the encoder (e.g. encoder=onnx encoder.path=DIR)",
    )
    p.add_argument("--out", required=True, help="results JSON")
    p.add_argument(
        "--quiet-limit",
        type=float,
        default=15.0,
        help="seconds to wait at most for an idle machine before each timed part (0: start at once)",
    )
    args = p.parse_args(argv)

    import ray

    from agentcir.framework.gallery import Gallery, items_from_folder
    from agentcir.framework.recipe import ComponentPool, compose

    items, _ = items_from_folder(args.photos)
    items = items[: args.n] if args.n else items
    recipe = compose(args.encoder + ([f"encoder.batch_size={args.batch_size}"] if args.batch_size else []))
    scale = scale_settings({"engine": "ray"})  # the command's defaults: one 1-CPU actor per core
    ray.init(
        address="local",
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    work = Path(tempfile.mkdtemp(prefix="embed-timeline-"))
    out = {"images": len(items), "encoder": " ".join(args.encoder), "rounds": []}
    try:
        t = time.perf_counter()
        timed_job(ray, items[:64], ComponentPool(recipe).get("encoder"), recipe, scale)  # the cluster's helper actors
        out["first_job_s"] = round(time.perf_counter() - t, 2)
        for r in range(args.rounds):
            quiet(
                limit=args.quiet_limit
            )  # each timed on an idle machine: the last job's actors unload torch as they exit
            t = time.perf_counter()
            Gallery.build(work / f"local-{r}", items, ComponentPool(recipe).get("encoder"), progress=False)
            local = time.perf_counter() - t
            quiet(limit=args.quiet_limit)
            job = timed_job(ray, items, ComponentPool(recipe).get("encoder"), recipe, scale)
            job["local_s"] = round(local, 2)
            out["rounds"].append(job)
            print(
                f"round {r + 1}/{args.rounds}: local {local:.2f} s, job {job['wall_s']:.2f} s (start "
                f"{job['start_s']:.2f} s, tail {job['tail_s']:.2f} s, others' CPU {job.get('others_cpu_s')} s); "
                f"actors: "
                + "; ".join(
                    f"ready {a['ready_s']:.2f} s, first call {a['first_call_took_s']:.2f} s, {a['calls']} calls "
                    f"busy {a['busy_s']:.2f} s, CPU {a['cpu_s']:.2f} s, idle {a['idle_between_calls_s']:.2f} s"
                    for a in job["per_actor"]
                ),
                flush=True,
            )
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    for k in ("wall_s", "local_s", "start_s", "tail_s"):
        out[f"median_{k}"] = round(float(np.median([j[k] for j in out["rounds"]])), 2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.out), json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
