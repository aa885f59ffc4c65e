"""ImageSeeker (offline planner) versus plain embedding retrieval on a built photo-history benchmark.

One command builds the DISBench-format benchmark from a labelled photo set (default: the
clothing set of ../shared, contributors as users, synthetic events), runs the offline agent
and the ``history_topk`` baseline at several k with the same encoder, and prints EM / F1
(overall, intra-event, inter-event) and, for the baseline, Best@4 over its four k::

    python benchmarks/history_search.py encoder=catalog            # the offline catalog encoder
    PYTHONPATH=<test plugin> python benchmarks/history_search.py encoder=toy   # main without a default encoder

Any further ``group.field=value`` recipe override is passed to every run. Runs resume and
reuse the call cache, so rerunning is cheap.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KS = (1, 3, 5, 10)
COLS = ("EM", "F1", "EM_intra", "F1_intra", "EM_inter", "F1_inter")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="recipe overrides for every run (select the encoder here)")
    ap.add_argument("--csv", default=str(ROOT.parent / "shared" / "data" / "clothing" / "images.csv"))
    ap.add_argument("--images", default=str(ROOT.parent / "shared" / "data" / "clothing" / "images"))
    ap.add_argument("--out", default="runs/_bench/clothing-history", help="benchmark folder")
    ap.add_argument("--root", default="runs", help="run.root of the runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from agentcir.framework.datasets.disbench import DISBench
    from agentcir.framework.datasets.history_builder import HistorySpec, build_history_benchmark
    from agentcir.framework.eval.metrics import best_at_k
    from agentcir.framework.recipe import compose
    from agentcir.framework.report import read_rankings
    from agentcir.framework.runner import run_recipe

    summary = build_history_benchmark(
        HistorySpec(
            out=args.out,
            csv_path=args.csv,
            images_dir=args.images,
            seed=args.seed,
            attribution="clothing dataset by Alexey Grigorev, CC0",
        )
    )
    common = [
        "dataset=disbench",
        f"dataset.root={args.out}",
        f"run.root={args.root}",
        "run.progress=false",
        *args.overrides,
    ]
    rows: dict[str, dict] = {}
    res = run_recipe(compose(["method=imageseeker", *common]), progress=False)
    rows["imageseeker (offline planner)"] = res.metrics["final"]
    encoder = res.recipe.get("encoder", {}).get("name")
    base_dirs = []
    for k in KS:
        r = run_recipe(compose(["method=history_topk", f"method.top_k={k}", *common]), progress=False)
        rows[f"history_topk k={k}"] = r.metrics["final"]
        base_dirs.append(r.dir)
    ds = DISBench(DISBench.Config(root=args.out))
    queries = ds.queries()
    runs = [read_rankings(d) for d in base_dirs]
    best = best_at_k(
        [ds.answers([run[q.id] for q in queries], queries) for run in runs],
        [q.targets for q in queries],
        [q.meta["event_type"] for q in queries],
    )
    rows[f"history_topk Best@{len(KS)} (k in {','.join(map(str, KS))})"] = {c: best[f"{c}@{len(KS)}"] for c in COLS}
    print(f"benchmark: {summary}; encoder: {encoder}\n")
    print("| method | " + " | ".join(COLS) + " |")
    print("|---|" + "---:|" * len(COLS))
    for name, m in rows.items():
        print(f"| {name} | " + " | ".join(f"{m[c]:.1f}" for c in COLS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
