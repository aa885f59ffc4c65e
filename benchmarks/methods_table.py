"""The composed-retrieval table: every method and every ablation row, as two sweeps.

The rows are two sweeps (``agentcir run -m``, :mod:`agentcir.framework.sweep`) over the method
group and the experiment group, run in this process with shared components, galleries,
captions and call cache::

    agentcir run -m method=image_only,text_only,image_text_sum,cirevl,ldre,octopus,xr,autocir,imagescope,wiser,paracosm \
        dataset=fashion_cir
    agentcir run -m +experiment=octopus_no_reasoning,...,xr_visual_qa dataset=fashion_cir

with the recipe's components (by default the offline ones: encoder=catalog, llm=rules,
captioner=tagger, generator=retrieval, detector=crop_tagger, verifier=contrast). Each row is a
run directory of its sweep (``runs/sweeps/<name>/NNN``, with the sweep's own summary.md); this
script then prints one markdown table (mAP@10, R@10, mAP@50, R@50, model calls, wall time) and,
for every agentic run, the metrics after each of its stages and mAP@10 by edit kind after each
ranking stage (where the gains and losses come from). Writes ``<out>/table.md``,
``<out>/table.json`` and ``<out>/table.png``.

Usage (build the benchmark first, see ``agentcir/recipes/dataset/fashion_cir.yaml``)::

    python benchmarks/methods_table.py                       # dataset=fashion_cir, all rows
    python benchmarks/methods_table.py --rows cirevl octopus --set run.concurrency=4
    python benchmarks/methods_table.py --set dataset=demo --out runs/methods_table_demo

The sweeps resume as a whole: a second invocation reads the finished jobs from their sweep
directories (their figures, by-edit-kind ones included, are in each sweep's manifest).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

#: the sweeps: (group override key, its options); the agentic rows' ablations are the experiment bundles
METHODS = [
    "image_only",
    "text_only",
    "image_text_sum",
    "cirevl",
    "ldre",
    "octopus",
    "xr",
    "autocir",
    "imagescope",
    "wiser",
    "paracosm",
]
EXPERIMENTS = [
    *(
        f"octopus_{r}"
        for r in (
            "no_reasoning",
            "no_refinement",
            "no_textual_proxies",
            "no_visual_proxy",
            "no_creator",
            "v2v",
            "no_verification",
        )
    ),
    *(f"xr_{r}" for r in ("visual_sim", "text_sim", "text_qa", "visual_qa")),
]
#: the table's row order: each method, then its ablation rows
ROWS = [*METHODS[:6], *EXPERIMENTS[:7], METHODS[6], *EXPERIMENTS[7:], *METHODS[7:]]
#: the component groups listed in the table
COMPONENTS = ("encoder", "llm", "captioner", "generator", "editor", "detector", "verifier")


def by_edit_kind(res) -> dict[str, dict[str, float]]:
    """mAP@10 per edit kind (``query.meta["edit"]["kind"]``: article, colour, gender, usage) of the
    ranking after every stage that ranked: where a stage gains or loses."""
    from agentcir.framework.eval.metrics import map_at_k

    kinds: dict[str, list[int]] = {}
    for i, q in enumerate(res.queries):
        kind = (q.meta.get("edit") or {}).get("kind")
        if kind:
            kinds.setdefault(kind, []).append(i)
    out: dict[str, dict[str, float]] = {}
    ids = res.gallery.ids
    for stage, cands in res.state.stage_candidates.items():
        out[stage] = {}
        for kind, rows in kinds.items():
            rankings = [[ids[r] for r in cands.row(i) if ids[r] != res.queries[i].reference_id] for i in rows]
            out[stage][kind] = map_at_k(rankings, [res.queries[i].targets for i in rows], (10,))["mAP@10"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="*", help=f"rows to run (default all): {', '.join(ROWS)}")
    ap.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="OVERRIDE",
        help="recipe overrides for every row (default: dataset=fashion_cir)",
    )
    ap.add_argument("--out", default="runs/methods_table", help="folder of table.md / table.json / table.png")
    args = ap.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")  # the rows' own progress bars (encoders) would flood the table
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from agentcir.framework.hashing import stable_hash
    from agentcir.framework.sweep import SharedComponents, run_sweep

    names = args.rows or ROWS
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        ap.error(f"unknown row(s) {', '.join(unknown)}; rows: {', '.join(ROWS)}")
    common = ["dataset=fashion_cir", "run.progress=false", *args.set]
    sweeps = [
        (key, [n for n in options if n in names])
        for key, options in (("method", METHODS), ("+experiment", EXPERIMENTS))
    ]

    def extra(res) -> dict:
        return {
            "by_edit": by_edit_kind(res),
            "components": {k: res.recipe[k]["name"] for k in COMPONENTS if k in res.recipe},
            "method": res.recipe["method"],
            "dataset": res.recipe["dataset"]["name"],
        }

    def told(rec: dict, earlier: bool) -> None:
        m = rec.get("metrics") or {}
        if m:
            print(
                f"{rec['label']:40s} mAP@10={m['mAP@10']:6.2f}  R@10={m['R@10']:6.2f}  ({rec['wall_s']:6.1f} s"
                f"{', finished earlier' if earlier else ''}, {rec['dir']})",
                file=sys.stderr,
                flush=True,
            )

    t_all = time.perf_counter()
    shared = SharedComponents()  # one encoder, captioner, ... for both sweeps where their configs agree
    jobs: dict[str, dict] = {}
    try:
        for key, options in sweeps:
            if options:
                overrides = [f"{key}={','.join(options)}", *common]
                name = f"methods_table-{key.lstrip('+')}-{stable_hash(overrides, n=8)}"  # the same command resumes it
                res = run_sweep(overrides, name=name, extra=extra, on_job=told, shared=shared)
                jobs.update(zip(options, res.jobs))  # one job per option, in order
    finally:
        shared.close()
    total = time.perf_counter() - t_all
    results = {}
    for name in (n for n in ROWS if n in jobs):
        j = jobs[name]
        results[name] = {
            "run": j["dir"],
            "overrides": j["overrides"],
            "metrics": j["metrics"],
            "stages": j["stages"],
            "by_edit": j["extra"]["by_edit"],
            "wall_s": j["wall_s"],
            "calls": j["calls"],
            "cache_hits": j["cache_hits"],
            "components": j["extra"]["components"],
            "method": j["extra"]["method"],
            "dataset": j["extra"].get("dataset", "?"),
        }

    first = next(iter(results.values()), {})
    comps = first.get("components", {})
    lines = [
        f"# Composed retrieval: every method and ablation row ({first.get('dataset', '?')})",
        "",
        "Components: " + ", ".join(f"{k}={v}" for k, v in comps.items()) + ".",
        "",
        "| row | mAP@10 | R@10 | mAP@50 | R@50 | model calls | cache hits | wall s | run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        m = r["metrics"]
        run = Path(r["run"])
        lines.append(
            f"| {name} | {m['mAP@10']:.2f} | {m['R@10']:.2f} | {m['mAP@50']:.2f} | {m['R@50']:.2f} | "
            f"{r['calls']} | {r['cache_hits']} | {r['wall_s']:.1f} | `{run.parent.name}/{run.name}` |"
        )
    lines += [
        "",
        "Model calls, cache hits and wall time are those of the invocation that ran each job (a job "
        "finished earlier is read from its sweep directory).",
        f"Total wall time of this invocation: {total:.1f} s.",
        "",
        "## After each stage (mAP@10 / R@10)",
        "",
    ]
    for name, r in results.items():
        if len(r["stages"]) > 1:
            lines.append(
                f"**{name}**: "
                + " -> ".join(f"{s} {v['mAP@10']:.2f} / {v['R@10']:.2f}" for s, v in r["stages"].items())
            )
            lines.append("")
    kinds = sorted({k for r in results.values() for st in r["by_edit"].values() for k in st})
    if kinds:
        lines += [
            "## mAP@10 by edit kind, after each ranking stage",
            "",
            "| row | stage | " + " | ".join(kinds) + " |",
            "|---|---|" + "---|" * len(kinds),
        ]
        for name, r in results.items():
            for stage, per in r["by_edit"].items():
                lines.append(
                    f"| {name} | {stage} | " + " | ".join(f"{per.get(k, float('nan')):.1f}" for k in kinds) + " |"
                )
        lines.append("")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    (out / "table.json").write_text(json.dumps({"total_wall_s": round(total, 1), "rows": results}, indent=1))
    try:
        from agentcir.framework.report import plot_comparison

        plot_comparison(
            {n: {k: r["metrics"][k] for k in ("mAP@10", "R@10", "mAP@50", "R@50")} for n, r in results.items()},
            out / "table.png",
            title="Composed retrieval, offline components",
        )
    except Exception as e:  # matplotlib missing: the table is still written
        print(f"(no plot: {e})", file=sys.stderr)
    print(text)
    return 0


if __name__ == "__main__":
    from agentcir.framework.errors import AgentcirError

    try:
        sys.exit(main())
    except AgentcirError as e:  # a missing benchmark, a bad override: one line, as the CLI does
        print(f"methods_table.py: error: {e}", file=sys.stderr)
        sys.exit(2)
