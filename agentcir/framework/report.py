"""Run outputs (rankings.jsonl, metrics.json, report.md) and comparisons of finished runs
(one table, FashionIQ category averages, a PNG bar chart: ``agentcir eval``)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .state import RunResult

log = logging.getLogger(__name__)


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
        rows.append(
            {
                "query": q.id,
                "ids": [g.ids[i] for i in ids[keep][:k]],
                "scores": [round(float(s), 6) for s in sc[keep][:k]],
            }
        )
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
    from .integrity import write_text_checked

    write_text_checked(d / "metrics.json", json.dumps({**result.metrics, "cost": stats}, indent=1))
    r = result.recipe
    comps = "\n".join(component_facts(r))
    cost = cost_table(result.stats)
    imported = "".join(
        f"Stage `{st}` imported for {v['queries']} queries ({', '.join(v['fields'])}) from "
        f"{', '.join(f'`{f}`' for f in v['files']) or 'the queries'}.\n\n"
        for st, v in result.metrics.get("imports", {}).items()
    )
    stage_rows = {f"after {name}": m for name, m in result.metrics.get("stages", {}).items()}
    text = (
        f"# Run `{d.name}`\n\n"
        f"{result.metrics.get('subset', '')}\n\n{imported}"
        f"Queries: {result.metrics['num_queries']}; gallery: {result.metrics['gallery_size']} items "
        f"({result.metrics['gallery_skipped']} skipped as unreadable); wall time {result.metrics['wall_s']:.1f} s "
        f"(from the process start).\n\n"
        f"## Metrics\n\n{metrics_table({'final': result.metrics['final'], **stage_rows})}\n"
        f"## Components\n\n{comps}\n\n{concurrency_note(result.metrics.get('concurrency') or {})}"
        f"## Cost per stage\n\n" + "\n".join(cost) + "\n\n"
        f"## Where the time went\n\n{phases_table(result.metrics)}"
    )
    (d / "report.md").write_text(text)


#: the config fields that say which model (or data) a component is, in the order the report lists them
FACT_FIELDS = (
    "model",
    "arch",
    "pretrained",
    "revision",
    "model_config",
    "weights",
    "checkpoint",
    "path",
    "base_url",
    "dtype",
    "precision",
    "category",
    "split",
    "root",
)
REPORT_KINDS = ("method", "dataset", "encoder", "llm", "captioner", "generator", "editor", "detector", "verifier")


def _facts(node: dict[str, Any]) -> str:
    """``key`` (field `value`, ...; sub-component: ``key`` (...)) of one recipe node, as its config says."""
    facts = [f"{f} `{node[f]}`" for f in FACT_FIELDS if node.get(f) not in (None, "", [], {})]
    facts += [f"{f}: {_facts(v)}" for f, v in node.items() if isinstance(v, dict) and v.get("name")]
    return f"`{node.get('name')}`" + (f" ({'; '.join(facts)})" if facts else "")


def component_facts(recipe: dict[str, Any]) -> list[str]:
    """The report's Components lines: per component of the resolved recipe, its registry key and
    the fields that name its model, weights and data (``model``, ``arch``, ``pretrained``,
    ``revision``, ``path``, ...) exactly as the recipe sets them, nested components included
    (``encoder.text``). Components set to ``none`` are left out."""
    return [
        f"- {k}: {_facts(recipe[k])}"
        for k in REPORT_KINDS
        if isinstance(recipe.get(k), dict) and recipe[k].get("name") not in (None, "none")
    ]


def cost_table(stats: dict[str, Any]) -> list[str]:
    """The report's cost lines: per stage, calls, cache hits, failures, wall, model-call
    (sum and wall), queueing and CPU time (:mod:`agentcir.framework.accounting`)."""
    from .accounting import stage_time_columns

    cols = stage_time_columns()
    out = [
        "| stage | model calls | cache hits | failures | "
        + " | ".join(t for _, t in cols)
        + " | max in flight | resumed queries |",
        "|---|---|---|---|" + "---|" * len(cols) + "---|---|",
    ]
    for name, s in stats.items():
        out.append(
            f"| {name} | {s.calls} | {s.cache_hits} | {s.failures} | "
            + " | ".join(f"{getattr(s, f):.2f}" for f, _ in cols)
            + f" | {s.max_in_flight} | {s.resumed_queries} |"
        )
    return out


def phases_table(metrics: dict[str, Any]) -> str:
    """One line per phase of the run (``metrics['time']``) and the total ``wall_s``."""
    t = metrics.get("time") or {}
    if not t:
        return "(not recorded)\n"
    names = {
        "startup_s": "startup (process start to the run: imports, recipe)",
        "model_loading_s": "model loading",
        "gallery_s": "gallery embedding (or opening the stored one)",
        "stages_s": "stages (see the cost table)",
        "evaluation_s": "evaluation",
        "unattributed_s": "unattributed",
    }
    out = ["| phase | s |", "|---|---|"] + [f"| {names.get(k, k)} | {v:.2f} |" for k, v in t.items()]
    out.append(f"| **wall time** | {metrics.get('wall_s', 0.0):.2f} |")
    return "\n".join(out) + "\n"


def concurrency_note(limits: dict[str, Any]) -> str:
    """How many model calls ran at once: ``run.concurrency`` and each component's own cap."""
    if not limits:
        return ""
    lines = [
        f"Model calls in flight: at most {limits.get('run')} (`run.concurrency`)"
        + (
            f"; blocking offline work: {limits['cpu_workers']} worker thread(s) (the cores)."
            if "cpu_workers" in limits
            else "."
        )
    ]
    for kind, info in limits.items():
        if kind != "run" and isinstance(info, dict):
            how = f"capped by `{info['capped_by']}`" if info.get("capped_by") else "follows `run.concurrency`"
            lines.append(f"- {kind}: at most {info.get('limit')} requests in flight ({how})")
    return "\n".join(lines) + "\n\n"


# -- comparing finished runs (`agentcir eval`) ---------------------------------------------
@dataclass
class RunInfo:
    """A finished run directory: its metrics.json and resolved recipe."""

    dir: Path
    metrics: dict[str, Any]
    recipe: dict[str, Any]

    @property
    def name(self) -> str:
        return self.dir.name


def load_run(run_dir: str | os.PathLike) -> RunInfo:
    """Read a finished run directory (``metrics.json`` and ``recipe.yaml``)."""
    import yaml

    from .errors import InputError

    d = Path(run_dir)
    f = d / "metrics.json"
    if not f.is_file():
        raise InputError(f"'{d}' is not a finished run directory (no metrics.json)")
    from .integrity import Damaged, read_json_checked

    try:
        metrics = read_json_checked(f)
    except Damaged as e:
        raise InputError(
            f"{e}; rerun the run's command (`agentcir run` with the recipe in '{d / 'recipe.yaml'}') "
            f"to recompute it from its stages"
        ) from None
    r = d / "recipe.yaml"
    recipe = (yaml.safe_load(r.read_text()) or {}) if r.is_file() else {}
    return RunInfo(d, metrics, recipe)


def read_rankings(run_dir: str | os.PathLike) -> dict[str, list[str]]:
    """Ranked item ids per query id from a run's ``rankings.jsonl``."""
    from .errors import InputError

    f = Path(run_dir) / "rankings.jsonl"
    if not f.is_file():
        raise InputError(f"'{run_dir}' has no rankings.jsonl (not a finished run)")
    out = {}
    for n, line in enumerate(f.read_text().splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                out[str(row["query"])] = [str(x) for x in row["ids"]]
            except (json.JSONDecodeError, KeyError) as e:
                raise InputError(f"'{f}' line {n}: not a ranking row ({type(e).__name__}: {e})") from None
    return out


def run_labels(runs: list[RunInfo]) -> list[str]:
    """Unique, readable row names: the directory name (with its parent when names repeat)."""
    names = [r.name for r in runs]
    return [f"{r.dir.parent.name}/{r.name}" if names.count(r.name) > 1 else r.name for r in runs]


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def override_labels(runs: list[RunInfo]) -> list[str]:
    """Row names by what differs between the runs' recipes, written as overrides
    (``method=ldre method.num_captions=3``); settings that cannot change results (run.name,
    concurrency, ...) are left out, and so are the fields of a group whose option differs
    unless they also differ between runs of one option. Runs of one recipe get their
    :func:`run_labels` name appended; without recipes, the labels are those names."""
    from .recipe import VOLATILE_RUN_FIELDS

    fallback = run_labels(runs)
    if len(runs) < 2 or not all(r.recipe for r in runs):
        return fallback
    flats = [
        {k: v for k, v in _flat(r.recipe).items() if not (k.startswith("run.") and k[4:] in VOLATILE_RUN_FIELDS)}
        for r in runs
    ]
    keys = sorted({k for f in flats for k in f}, key=lambda k: (k.split(".")[0], k.partition(".")[2] != "name", k))
    missing = object()
    differ = [k for k in keys if len({json.dumps(f.get(k, missing), default=str, sort_keys=True) for f in flats}) > 1]
    groups = {k.split(".")[0] for k in differ if k.endswith(".name") and k.count(".") == 1}
    keep = []
    for k in differ:
        g, _, rest = k.partition(".")
        if rest == "name":
            keep.append(k)
        elif g in groups:  # a field of a group whose option differs: kept when it differs within one option
            by_option: dict[Any, set[str]] = {}
            for f in flats:
                by_option.setdefault(str(f.get(f"{g}.name")), set()).add(json.dumps(f.get(k, None), default=str))
            if any(len(v) > 1 for v in by_option.values()):
                keep.append(k)
        else:
            keep.append(k)

    def show(k: str, v: Any) -> str:
        key = k[: -len(".name")] if k.endswith(".name") and k.count(".") == 1 else k
        return f"{key}={json.dumps(v) if isinstance(v, (list, dict)) else v}"

    labels = [" ".join(show(k, f[k]) for k in keep if k in f) for f in flats]
    # a run with nothing of its own, or runs of one recipe: their directory names tell them apart
    return [f"{lab} ({fb})" if lab and labels.count(lab) > 1 else lab or fb for lab, fb in zip(labels, fallback)]


def fashioniq_groups(runs: list[RunInfo]) -> dict[str, dict[str, dict[str, Any]]]:
    """FashionIQ average rows: runs whose recipes differ only in ``dataset.category`` and
    cover dress, shirt and toptee give one row (plain mean of the three categories)."""
    from .eval.metrics import FASHIONIQ_CATEGORIES, fashioniq_average
    from .hashing import stable_hash

    groups: dict[str, dict[str, RunInfo]] = {}
    clashing: set[str] = set()
    for r in runs:
        ds = r.recipe.get("dataset") or {}
        if ds.get("name") != "fashioniq":
            continue
        key = stable_hash(
            {
                **{k: v for k, v in r.recipe.items() if k not in ("run", "dataset")},
                "dataset": {k: v for k, v in ds.items() if k != "category"},
            },
            n=8,
        )
        g = groups.setdefault(key, {})
        if ds.get("category") in g:
            log.warning(
                "two FashionIQ runs of one recipe for category '%s' (%s, %s): no average for them",
                ds.get("category"),
                g[ds["category"]].name,
                r.name,
            )
            clashing.add(key)
        g[ds.get("category")] = r
    out = {}
    for key, g in groups.items():
        if key in clashing or sorted(g) != sorted(FASHIONIQ_CATEGORIES):
            continue
        method = (g["dress"].recipe.get("method") or {}).get("name", "?")
        avg = fashioniq_average({c: g[c].metrics.get("final", {}) for c in FASHIONIQ_CATEGORIES})
        out[f"FashionIQ average ({method}, {key})"] = {
            "metrics": avg,
            "runs": {c: g[c].name for c in FASHIONIQ_CATEGORIES},
        }
    return out


def comparison_rows(runs: list[RunInfo]) -> dict[str, dict[str, Any]]:
    """One row per run (its final metrics, labelled by :func:`override_labels`) plus the
    FashionIQ average rows."""
    rows = {label: r.metrics.get("final", {}) for label, r in zip(override_labels(runs), runs)}
    for name, g in fashioniq_groups(runs).items():
        rows[name] = g["metrics"]
    return rows


def plot_comparison(
    rows: dict[str, dict[str, Any]], path: str | os.PathLike, *, title: str = "", max_metrics: int = 12
) -> Path:
    """A grouped bar chart (PNG) of the metrics shared by the rows: one group per metric,
    one bar per run. Per-aspect metrics (names with ``/``) are left out for readability.
    Needs matplotlib (``pip install 'agentcir[plot]'``)."""
    from .errors import InputError, require

    require("matplotlib", "plot", feature="the comparison plot of `agentcir eval --compare`")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metrics: list[str] = []
    for m in rows.values():
        metrics += [k for k, v in m.items() if isinstance(v, (int, float)) and "/" not in k and k not in metrics]
    metrics = [k for k in metrics if sum(k in m for m in rows.values()) > 0][:max_metrics]
    if not rows or not metrics:
        raise InputError("nothing to plot: the runs have no numeric metrics")
    names = list(rows)
    width = 0.8 / len(names)
    fig = Figure(figsize=(max(6.0, 0.9 * len(metrics) * max(1, len(names)) ** 0.5 + 2), 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(metrics))]
        ys = [float(rows[name].get(k, float("nan"))) for k in metrics]
        ax.bar(xs, ys, width=width, label=name)
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels(metrics, rotation=30, ha="right")
    ax.set_ylabel("score (%)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title or f"{len(names)} run(s) compared")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
