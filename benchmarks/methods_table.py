"""The composed-retrieval table: every method and every ablation row, one command.

Runs (or resumes) each row as an ordinary run (``runs/<method>-<dataset>-<hash>``, the same
directory ``agentcir run`` would use), with the recipe's components (by default the offline
ones: encoder=catalog, llm=rules, captioner=tagger, generator=retrieval, detector=crop_tagger,
verifier=contrast), then prints one markdown table (mAP@10, R@10, R@50, wall time, model
calls) and, for every agentic run, the metrics after each of its stages (where the gains and
losses come from). Writes ``<out>/table.md``, ``<out>/table.json`` and ``<out>/table.png``.

Usage (build the benchmark first, see ``agentcir/recipes/dataset/fashion_cir.yaml``)::

    python benchmarks/methods_table.py                       # dataset=fashion_cir, all rows
    python benchmarks/methods_table.py --rows cirevl octopus --set run.concurrency=4
    python benchmarks/methods_table.py --set dataset=demo --out runs/methods_table_demo

Model calls and gallery captions/embeddings are cached across runs and runs resume, so a
second invocation only reads the finished run directories.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

#: (row name, recipe overrides); the agentic rows' ablations are the experiment bundles
ROWS: list[tuple[str, list[str]]] = [
    ("image_only", ["method=image_only"]),
    ("text_only", ["method=text_only"]),
    ("image_text_sum", ["method=image_text_sum"]),
    ("cirevl", ["method=cirevl"]),
    ("ldre", ["method=ldre"]),
    ("octopus", ["method=octopus"]),
    *[(f"octopus_{r}", [f"+experiment=octopus_{r}"]) for r in
      ("no_reasoning", "no_refinement", "no_textual_proxies", "no_visual_proxy", "no_creator", "v2v", "no_verification")],
    ("xr", ["method=xr"]),
    *[(f"xr_{r}", [f"+experiment=xr_{r}"]) for r in ("visual_sim", "text_sim", "text_qa", "visual_qa")],
]
#: the component groups built once and shared by the rows (and listed in the table)
SHARED = COMPONENTS = ("encoder", "llm", "captioner", "generator", "detector", "verifier")


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
    ap.add_argument("--rows", nargs="*", help=f"rows to run (default all): {', '.join(n for n, _ in ROWS)}")
    ap.add_argument("--set", nargs="*", default=[], metavar="OVERRIDE",
                    help="recipe overrides for every row (default: dataset=fashion_cir)")
    ap.add_argument("--out", default="runs/methods_table", help="folder of table.md / table.json / table.png")
    args = ap.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")  # the rows' own progress bars (encoders) would flood the table
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from agentcir.framework.recipe import ComponentPool, compose
    from agentcir.framework.runner import run_recipe

    known = dict(ROWS)
    names = args.rows or [n for n, _ in ROWS]
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"unknown row(s) {', '.join(unknown)}; rows: {', '.join(known)}")
    common = ["dataset=fashion_cir", "run.progress=false", *args.set]
    t_all = time.perf_counter()
    # the components are built once and shared by every row whose recipe selects them identically
    base = compose(common)
    base_pool = ComponentPool(base)
    shared = {k: (base[k], base_pool.get(k)) for k in SHARED if base_pool.has(k)}
    results: dict[str, dict] = {}
    for name in names:
        recipe = compose([*common, *known[name]])
        prebuilt = {k: comp for k, (node, comp) in shared.items() if recipe.get(k) == node}
        t0 = time.perf_counter()
        res = run_recipe(recipe, pool=ComponentPool(recipe, prebuilt=prebuilt), progress=False)
        wall = time.perf_counter() - t0
        cost = {s: {"calls": st.calls, "cache_hits": st.cache_hits, "wall_s": round(st.wall_s, 2)}
                for s, st in res.stats.items()}
        results[name] = {"run": str(res.dir), "overrides": known[name], "metrics": res.metrics["final"],
                         "stages": res.metrics["stages"], "by_edit": by_edit_kind(res), "wall_s": round(wall, 1), "cost": cost,
                         "components": {k: recipe[k]["name"] for k in COMPONENTS if k in recipe},
                         "method": recipe["method"]}
        m = res.metrics["final"]
        print(f"{name:28s} mAP@10={m['mAP@10']:6.2f}  R@10={m['R@10']:6.2f}  ({wall:6.1f} s, {res.dir.name})",
              file=sys.stderr, flush=True)
    total = time.perf_counter() - t_all

    comps = next(iter(results.values()))["components"] if results else {}
    lines = [f"# Composed retrieval: every method and ablation row ({common[0].split('=')[1]})", "",
             "Components: " + ", ".join(f"{k}={v}" for k, v in comps.items()) + ".", "",
             "| row | mAP@10 | R@10 | mAP@50 | R@50 | model calls | cache hits | wall s | run |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        m = r["metrics"]
        calls = sum(c["calls"] for c in r["cost"].values())
        hits = sum(c["cache_hits"] for c in r["cost"].values())
        lines.append(f"| {name} | {m['mAP@10']:.2f} | {m['R@10']:.2f} | {m['mAP@50']:.2f} | {m['R@50']:.2f} | "
                     f"{calls} | {hits} | {r['wall_s']:.1f} | `{Path(r['run']).name}` |")
    lines += ["", "Model calls and cache hits are those recorded when each run's stages ran (a run resumed from its "
              "directory reports them again; its wall time is this invocation's).",
              f"Total wall time of this invocation: {total:.1f} s.", "", "## After each stage (mAP@10 / R@10)", ""]
    for name, r in results.items():
        if len(r["stages"]) > 1:
            lines.append(f"**{name}**: " + " -> ".join(f"{s} {v['mAP@10']:.2f} / {v['R@10']:.2f}"
                                                       for s, v in r["stages"].items()))
            lines.append("")
    kinds = sorted({k for r in results.values() for st in r["by_edit"].values() for k in st})
    if kinds:
        lines += ["## mAP@10 by edit kind, after each ranking stage", "",
                  "| row | stage | " + " | ".join(kinds) + " |", "|---|---|" + "---|" * len(kinds)]
        for name, r in results.items():
            for stage, per in r["by_edit"].items():
                lines.append(f"| {name} | {stage} | " + " | ".join(f"{per.get(k, float('nan')):.1f}" for k in kinds) + " |")
        lines.append("")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    (out / "table.json").write_text(json.dumps({"total_wall_s": round(total, 1), "rows": results}, indent=1))
    try:
        from agentcir.framework.report import plot_comparison

        plot_comparison({n: {k: r["metrics"][k] for k in ("mAP@10", "R@10", "mAP@50", "R@50")} for n, r in results.items()},
                        out / "table.png", title="Composed retrieval, offline components")
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
