"""Run outputs: rankings.jsonl, metrics.json and report.md."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .runner import RunResult


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def metrics_table(rows: dict[str, dict[str, Any]]) -> str:
    """A markdown table, one row per entry of ``rows`` (name -> metric -> value)."""
    cols: list[str] = []
    for m in rows.values():
        cols += [c for c in m if c not in cols and isinstance(m[c], (int, float))]
    if not cols:
        return "(no metrics)\n"
    out = ["| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, m in rows.items():
        out.append(f"| {name} | " + " | ".join(_fmt(m.get(c, "")) for c in cols) + " |")
    return "\n".join(out) + "\n"


def ranking_rows(result: "RunResult", k: int) -> list[dict[str, Any]]:
    g = result.gallery
    rows = []
    for qi, q in enumerate(result.queries):
        ids = result.candidates.ids[qi]
        sc = result.candidates.scores[qi]
        keep = ids >= 0
        rows.append({"query": q.id, "ids": [g.ids[i] for i in ids[keep][:k]], "scores": [round(float(s), 6) for s in sc[keep][:k]]})
    return rows


def write_report(result: "RunResult") -> None:
    d = result.dir
    if d is None:
        return
    with open(d / "rankings.jsonl.tmp", "w") as f:
        for row in ranking_rows(result, k=result.candidates.k):
            f.write(json.dumps(row) + "\n")
    (d / "rankings.jsonl.tmp").replace(d / "rankings.jsonl")
    stats = {name: asdict(s) for name, s in result.stats.items()}
    (d / "metrics.json").write_text(json.dumps({**result.metrics, "cost": stats}, indent=1))
    r = result.recipe
    comps = "\n".join(f"- {k}: `{r[k]['name']}`" for k in ("method", "dataset", "encoder", "llm", "captioner", "generator",
                                                            "detector", "verifier") if k in r)
    cost = ["| stage | model calls | cache hits | failures | wall s | resumed queries |", "|---|---|---|---|---|---|"]
    for name, s in result.stats.items():
        cost.append(f"| {name} | {s.calls} | {s.cache_hits} | {s.failures} | {s.wall_s:.2f} | {s.resumed_queries} |")
    stage_rows = {f"after {name}": m for name, m in result.metrics.get("stages", {}).items()}
    text = (f"# Run `{d.name}`\n\n"
            f"{result.metrics.get('subset', '')}\n\n"
            f"Queries: {result.metrics['num_queries']}; gallery: {result.metrics['gallery_size']} items "
            f"({result.metrics['gallery_skipped']} skipped as unreadable); wall time {result.metrics['wall_s']:.1f} s.\n\n"
            f"## Metrics\n\n{metrics_table({'final': result.metrics['final'], **stage_rows})}\n"
            f"## Components\n\n{comps}\n\n"
            f"## Cost per stage\n\n" + "\n".join(cost) + "\n")
    (d / "report.md").write_text(text)
