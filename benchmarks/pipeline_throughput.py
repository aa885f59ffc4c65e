"""Pipeline throughput: does a run overlap its model calls?

OCTOPUS (and XR) on the bundled demo gallery with every component on one OpenAI-compatible
endpoint (``llm=openai``; captioner, detector and verifier ``vlm``; generator off), served by
the project's scripted server in a separate process, answering every call after a fixed
delay (0.5 s). The demo's 40 queries are repeated with distinct texts (``... (request 17)``)
up to ``--queries``, so their LLM calls do not hit the cache; each run has a fresh call cache
and recaptions the gallery. Per ``run.concurrency`` it prints:

    concurrency | queries | calls/query | wall | throughput | ideal | % of ideal

where ``wall`` is the time of the run's stages (gallery captions and the method's stages;
the gallery embedding is built by the first run and reused; weights loaded lazily during a
stage, e.g. the encoder's text tower in the first run, are not counted), ``calls`` are the endpoint's
(the offline encoder's are not counted), and ``ideal = concurrency / (calls per query x
delay)`` queries/s: every slot busy all the time. ``mean call s`` is the calls' measured
latency (the delay plus the client's and the server's own overhead).

    PYTHONPATH=$PWD python benchmarks/pipeline_throughput.py                    # octopus, 300 queries, 4 16 64
    PYTHONPATH=$PWD python benchmarks/pipeline_throughput.py --methods octopus xr --queries 200 --concurrency 8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from agentcir.framework.datasets.composed import DEMO_ROOT


def make_dataset(folder: Path, n_queries: int, gallery_limit: int = 0) -> Path:
    """A composed benchmark folder: the demo gallery (its first ``gallery_limit`` items, 0 = all)
    and ``n_queries`` queries cycling over the demo's, each with a distinct text."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = (DEMO_ROOT / "gallery.csv").read_text().splitlines()
    rows = lines[1 : gallery_limit + 1] if gallery_limit else lines[1:]
    ids = {r.split(",", 1)[0] for r in rows}
    (folder / "gallery.csv").write_text("\n".join([lines[0], *rows]) + "\n")
    if not (folder / "images").exists():
        (folder / "images").symlink_to(DEMO_ROOT / "images")
    demo = [json.loads(s) for s in (DEMO_ROOT / "queries.jsonl").read_text().splitlines() if s.strip()]
    demo = [q for q in demo if q["reference_id"] in ids and set(q["targets"]) & ids] or demo
    with open(folder / "queries.jsonl", "w") as f:
        for i in range(n_queries):
            q = dict(demo[i % len(demo)])
            q.update(id=f"p{i:05d}", text=f"{q['text']} (request {i})", targets=[t for t in q["targets"] if t in ids])
            f.write(json.dumps(q) + "\n")
    return folder


def _serve(delay: float, accept: float, port_q) -> None:  # pragma: no cover - runs in a child process
    from agentcir.components.llms.scripted_server import ScriptedServer
    from agentcir.components.llms.scripted_tasks import task_replier

    srv = ScriptedServer().start()
    srv.script("/chat/completions", task_replier(delay=delay, accept=accept))
    port_q.put(srv.base_url)
    while True:
        time.sleep(3600)


class EndpointProcess:
    """The scripted server in its own process (its threads do not share this one's GIL)."""

    def __init__(self, delay: float, accept: float = 0.5):
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        self.proc = ctx.Process(target=_serve, args=(delay, accept, q), daemon=True)
        self.proc.start()
        self.base_url = q.get(timeout=60)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.join(5)

    def __enter__(self) -> "EndpointProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def recipe(
    method: str, data: Path, root: Path, base_url: str, concurrency: int, extra: list[str] = (), name: str | None = None
) -> dict:
    from agentcir.framework.recipe import compose

    name = name or f"{method}-c{concurrency}"
    return compose(
        [
            f"method={method}",
            "llm=openai",
            f"llm.base_url={base_url}",
            "llm.model=scripted",
            "llm.retries=0",
            "captioner=vlm",
            "detector=vlm",
            "verifier=vlm",
            "generator=none",
            "dataset=composed",
            f"dataset.root={data}",
            f"run.root={root}",
            f"run.name={name}",
            f"run.cache={root}/cache-{name}.sqlite",
            f"run.concurrency={concurrency}",
            "run.progress=false",
            "run.fresh=true",
            *extra,
        ]
    )


def forget_gallery_captions(root: Path) -> None:
    """Drop the stored gallery captions (kept: the image embeddings), so the next run recaptions."""
    for g in (root / "_galleries").glob("*"):
        for sub in ("captions", "caption_emb"):
            shutil.rmtree(g / sub, ignore_errors=True)


def run_once(
    method: str,
    data: Path,
    root: Path,
    base_url: str,
    concurrency: int,
    delay: float,
    extra: list[str] = (),
    name: str | None = None,
) -> dict:
    """One run; its row of the table (the endpoint's calls, counted from the run's own cost table:
    every call but the offline encoder's)."""
    from agentcir.framework.runner import run_recipe

    forget_gallery_captions(root)
    res = run_recipe(recipe(method, data, root, base_url, concurrency, extra, name), progress=False)
    calls = sum(n for s in res.stats.values() for k, n in s.by_component.items() if not k.startswith("encoder:"))
    wall = sum(s.wall_s - s.loading_s for s in res.stats.values())  # lazy model loads are not the pipeline's
    n = len(res.queries)
    cpq = calls / n
    ideal = concurrency / (cpq * delay)
    thr = n / wall
    mean_call = sum(s.call_s for s in res.stats.values()) / max(1, calls)
    return {
        "method": method,
        "concurrency": concurrency,
        "queries": n,
        "calls": calls,
        "calls_per_query": cpq,
        "mean_call_s": mean_call,
        "wall_s": wall,
        "throughput": thr,
        "ideal": ideal,
        "pct_of_ideal": 100 * thr / ideal,
        "stages": {
            k: {
                f: round(getattr(s, f), 2)
                for f in ("wall_s", "calls", "call_s", "call_wall_s", "queue_s", "cpu_s", "loading_s", "max_in_flight")
            }
            for k, s in res.stats.items()
        },
        "time": res.metrics.get("time"),
        "metrics_wall_s": res.metrics.get("wall_s"),
        "limits": res.metrics.get("concurrency"),
    }


def table(rows: list[dict]) -> str:
    out = [
        "| method | concurrency | queries | calls/query | wall s | throughput q/s | ideal q/s | % of ideal | mean call s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['method']} | {r['concurrency']} | {r['queries']} | {r['calls_per_query']:.2f} | {r['wall_s']:.1f} | "
            f"{r['throughput']:.2f} | {r['ideal']:.2f} | {r['pct_of_ideal']:.0f}% | {r['mean_call_s']:.3f} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=["octopus"])
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--concurrency", type=int, nargs="+", default=[4, 16, 64])
    p.add_argument("--delay", type=float, default=0.5, help="seconds the endpoint takes per call")
    p.add_argument("--accept", type=float, default=0.5, help="share of yes answers of the verifier")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument(
        "--warmup", type=int, default=8, help="queries of an untimed first run (numba JIT, model loads; 0: none)"
    )
    p.add_argument("--workdir", help="keep the dataset, gallery embeddings and runs here (default: a temporary folder)")
    p.add_argument("overrides", nargs="*", help="more recipe overrides (e.g. method.gate=0)")
    a = p.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentcir-pipeline-") as tmp, EndpointProcess(a.delay, a.accept) as ep:
        tmp = a.workdir or tmp
        data = make_dataset(Path(tmp) / "data", a.queries)
        if a.warmup:  # the same gallery: its embeddings are stored for the timed runs
            for method in a.methods:
                run_once(
                    method,
                    make_dataset(Path(tmp) / "warmup", a.warmup),
                    Path(tmp) / "runs",
                    ep.base_url,
                    8,
                    a.delay,
                    a.overrides,
                    name=f"{method}-warmup",
                )
        for method in a.methods:
            for c in a.concurrency:
                rows.append(run_once(method, data, Path(tmp) / "runs", ep.base_url, c, a.delay, a.overrides))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
                print("  ", json.dumps({k: rows[-1][k] for k in ("stages", "time", "limits")}), flush=True)
    from _data import cpu_summary  # benchmarks/, the script's folder

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nCPU: {cpu_summary()} (load average {load:.1f} at the end); endpoint delay "
        f"{a.delay} s per call; overrides: {' '.join(a.overrides) or '(none)'}\n"
    )
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
