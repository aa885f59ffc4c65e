"""Sweeps: ``agentcir run -m`` runs every combination of the swept overrides, in one process.

Sweep syntax is Hydra's (parsed by Hydra's own override grammar)::

    agentcir run -m method.lam=0.1,0.2,0.3 method.num_proxies=range(5,15,5)
    agentcir run -m method=cirevl,octopus,xr dataset=fashion_cir
    agentcir run -m +experiment=octopus_no_creator,octopus_v2v

``key=a,b,c`` and ``key=choice(a,b)`` list values, ``key=range(start,stop[,step])`` counts
(ints or floats, stop excluded, as Python's range); a group (``method=a,b``) and an
experiment bundle (``+experiment=a,b``) sweep like a field. The jobs are the cartesian
product, the first swept override varying slowest (Hydra's order).

The jobs run one after the other in this process and share what is identical between
them: components are built once per (kind, config, dependencies) (:class:`SharedComponents`),
gallery embeddings and captions are the shared ones under ``<run.root>/_galleries``, and
every model call goes through the one call cache, so no model call is made twice across
jobs. The sweep directory ``<run.root>/sweeps/<name>/`` holds::

    manifest.json       the sweep (overrides, axes) and every job's status, overrides and metrics
    000/, 001/, ...     one ordinary run directory per job (recipe.yaml, stages/, metrics.json, ...)
    summary.md          every job's metrics, the swept values as columns (also .csv and .json)
    sensitivity_<field>.png / .json   per swept numeric field: metric against value, one line
                        per combination of the other swept values (the series in the .json)

The same command resumes the sweep as a whole: finished jobs are read from their run
directories, an interrupted job resumes its own run directory, failed jobs are retried.

The manifest records what each job is and its status (with a blake2b sidecar,
``manifest.json.b2``); the metrics in the summary are always read from each job's own
``metrics.json`` (checked against its sidecar), never from the manifest. A damaged manifest is
set aside with a warning (every job then resumes from its run directory); a damaged
``metrics.json`` makes its job run again (its stages are reused).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
import time
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any, Callable, Sequence

from ..registry import REGISTRIES
from .errors import AgentcirError, InputError
from .files import atomic_write_text
from .hashing import stable_hash
from .integrity import Damaged, read_json_checked, recompute_warning, write_text_checked
from .recipe import ComponentPool, compose, parse_override

log = logging.getLogger(__name__)

#: metrics a sensitivity plot shows when the dataset reports them (in this order), else its first ones
PLOT_METRICS = ("mAP@10", "R@10", "R@50", "R@1", "mAP@50", "Recall@1")
MAX_PLOT_METRICS = 4


class SweepError(AgentcirError):
    """Some jobs of a sweep failed; the others are saved and a rerun retries the failed ones."""


# -- expansion ----------------------------------------------------------------------------
@dataclass
class Axis:
    """One swept override: ``key`` (the summary column: ``method.lam``, ``method``,
    ``experiment``), the override's key as written (``+experiment``) and its values."""

    override: str
    key: str
    element: str
    values: list[str]


@dataclass
class Job:
    index: int
    overrides: list[str]
    swept: dict[str, str]

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.swept.items()) or "(no swept values)"


def _fmt_number(x: float) -> str:
    if float(x).is_integer() and not isinstance(x, float):
        return str(int(x))
    return repr(round(float(x), 10))


def _range_values(text: str, r) -> list[str]:
    """Python's range semantics for Hydra's ``range(start, stop, step)``, floats included
    (values rounded to 10 digits, so ``range(0.1,0.4,0.1)`` is 0.1, 0.2, 0.3)."""
    start, stop, step = r.start, r.stop, r.step
    if step == 0:
        raise InputError(f"override '{text}': range step must not be 0")
    if all(isinstance(v, int) for v in (start, stop, step)):
        return [str(v) for v in range(start, stop, step)]
    n = max(0, math.ceil((stop - start) / step - 1e-9))
    return [_fmt_number(round(start + i * step, 10)) for i in range(n)]


def parse_sweep(overrides: Sequence[str]) -> tuple[list[str | Axis], list[Axis]]:
    """Split ``overrides`` into the fixed ones and the swept :class:`Axis` (in order).

    Returns ``(items, axes)``: ``items`` is the override list with each swept override
    replaced by its axis. Bad syntax, an ``interval(...)`` or ``glob(...)``, an empty range
    or a key swept twice is an :class:`InputError` naming the override.
    """
    from hydra.core.override_parser.types import OverrideType, ValueType

    items: list[str | Axis] = []
    axes: list[Axis] = []
    for text in overrides:
        o = parse_override(text)
        if not o.is_sweep_override():
            items.append(text)
            continue
        if o.type == OverrideType.DEL:
            raise InputError(f"override '{text}': a deletion (~) cannot sweep")
        if o.value_type == ValueType.INTERVAL_SWEEP:
            raise InputError(
                f"override '{text}': interval(...) is for optimisers, not a sweep; "
                f"list the values (a,b,c) or count them with range(start,stop,step)"
            )
        if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
            raise InputError(f"override '{text}': glob(...) is not supported; list the options (a,b,c)")
        if o.value_type == ValueType.RANGE_SWEEP:
            values = _range_values(text, o.value())
        else:
            values = list(o.sweep_string_iterator())
        if not values:
            raise InputError(f"override '{text}': the sweep has no values")
        if len(set(values)) != len(values):
            raise InputError(f"override '{text}': a value is listed twice")
        key = o.key_or_group + (f"@{o.package}" if o.package else "")
        if any(a.key == key for a in axes):
            raise InputError(f"override '{text}': '{key}' is swept twice (merge the values into one override)")
        axis = Axis(text, key, o.get_key_element(), values)
        axes.append(axis)
        items.append(axis)
    return items, axes


def expand(overrides: Sequence[str]) -> list[Job]:
    """The jobs of a sweep: the cartesian product of its axes (first axis slowest)."""
    items, axes = parse_sweep(overrides)
    jobs = []
    for i, combo in enumerate(product(*(a.values for a in axes))):
        chosen = dict(zip((a.key for a in axes), combo))
        ov = [x if isinstance(x, str) else f"{x.element}={chosen[x.key]}" for x in items]
        jobs.append(Job(i, ov, chosen))
    return jobs


def default_name(overrides: Sequence[str], config_name: str = "config", extra_dirs: Sequence[str] = ()) -> str:
    """``<swept keys>-<hash of the command>``: the same command names (and resumes) the same sweep."""
    _, axes = parse_sweep(overrides)
    keys = "_".join(re.sub(r"[^A-Za-z0-9_.-]+", "", a.key) for a in axes) or "single"
    return f"{keys[:80]}-{stable_hash(list(overrides), config_name, [str(d) for d in extra_dirs], n=8)}"


# -- shared components ----------------------------------------------------------------------
class SharedComponents:
    """Components built once for many recipes: one instance per (kind, config node, the
    keys of the components it is built with). ``pool(recipe)`` is a :class:`ComponentPool`
    that takes what an earlier recipe built identically."""

    def __init__(self):
        self.built: dict[str, Any] = {}

    def pool(self, recipe: dict[str, Any]) -> ComponentPool:
        return _SharedPool(recipe, self)

    def close(self) -> None:
        for comp in self.built.values():
            close = getattr(comp, "close", None)
            if callable(close):
                close()
        self.built.clear()


class _SharedPool(ComponentPool):
    def __init__(self, recipe: dict[str, Any], shared: SharedComponents):
        super().__init__(recipe)
        self._shared = shared

    def _key(self, kind: str, seen: tuple[str, ...] = ()) -> str | None:
        if kind in seen or not self.has(kind) or kind not in REGISTRIES:
            return None  # a cycle or a missing component: ComponentPool.get reports it
        node = self.recipe[kind]
        cls = REGISTRIES[kind].get(node["name"]).obj
        deps = [*getattr(cls, "requires", ()), *(k for k in getattr(cls, "optional", ()) if self.has(k))]
        keys = [self._key(d, (*seen, kind)) for d in deps]
        return None if None in keys else stable_hash(kind, node, dict(zip(deps, keys)))

    def get(self, kind: str) -> Any:
        if kind in self._built:
            return self._built[kind]
        key = self._key(kind)
        if key is not None and key in self._shared.built:
            self._built[kind] = self._shared.built[key]
            return self._built[kind]
        comp = super().get(kind)
        if key is not None:
            self._shared.built[key] = comp
        return comp


# -- running ------------------------------------------------------------------------------
@dataclass
class SweepResult:
    dir: Path
    jobs: list[dict[str, Any]]
    axes: list[Axis]
    plots: list[Path] = field(default_factory=list)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [j for j in self.jobs if j["status"] != "done"]


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, default=str))


def _write_manifest(path: Path, data: Any) -> None:
    write_text_checked(path, json.dumps(data, indent=1, default=str))


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of an earlier invocation, checked; ``None`` (with a warning) when it is damaged."""
    try:
        old = read_json_checked(path)
        if not (
            isinstance(old, dict)
            and isinstance(old.get("jobs"), list)
            and all(isinstance(j, dict) and isinstance(j.get("overrides"), list) for j in old["jobs"])
        ):
            raise Damaged(path, "is not a sweep manifest")
        return old
    except Damaged as e:
        recompute_warning(e, "it is written again; every job resumes from its run directory")
        return None


def job_metrics(rec: dict[str, Any]) -> dict[str, Any] | None:
    """A finished job's figures from its own ``metrics.json`` (checked): final and per-stage metrics,
    model calls and cache hits; ``None`` (with a warning) when it is missing or damaged."""
    f = Path(rec["dir"]) / "metrics.json"
    if not f.is_file():
        return None
    try:
        m = read_json_checked(f)
        if not isinstance(m, dict) or not isinstance(m.get("final"), dict):
            raise Damaged(f, "is not a run's metrics")
    except Damaged as e:
        recompute_warning(e, f"sweep job {rec['index']} runs again (its finished stages are reused)")
        return None
    cost = m.get("cost") if isinstance(m.get("cost"), dict) else {}
    return {
        "metrics": m["final"],
        "stages": m.get("stages") or {},
        "calls": sum(int(v.get("calls", 0)) for v in cost.values() if isinstance(v, dict)),
        "cache_hits": sum(int(v.get("cache_hits", 0)) for v in cost.values() if isinstance(v, dict)),
    }


def compose_jobs(
    overrides: Sequence[str], *, config_name: str = "config", extra_dirs: Sequence[str] = ()
) -> tuple[list[Job], list[dict[str, Any]]]:
    """Every job of the sweep and its resolved recipe (all composed before anything runs,
    so a bad value in the last job fails at once, naming the job)."""
    jobs = expand(overrides)
    recipes = []
    for job in jobs:
        try:
            recipes.append(compose(job.overrides, config_name=config_name, extra_dirs=extra_dirs))
        except (AgentcirError, ValueError) as e:
            raise type(e)(f"sweep job {job.index} ({job.label}): {e}") from None
    return jobs, recipes


def plan(jobs: list[Job], recipes: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """What each job is: index, swept values, overrides and run directory."""
    root = Path(recipes[0]["run"]["root"]) if recipes else Path("runs")
    return [
        {
            "index": j.index,
            "label": j.label,
            "swept": j.swept,
            "overrides": j.overrides,
            "dir": str(root / "sweeps" / name / f"{j.index:03d}"),
        }
        for j in jobs
    ]


def run_sweep(
    overrides: Sequence[str],
    *,
    config_name: str = "config",
    extra_dirs: Sequence[str] = (),
    name: str | None = None,
    progress: bool | None = None,
    extra: Callable[[Any], dict[str, Any]] | None = None,
    on_job: Callable[[dict[str, Any], bool], None] | None = None,
    shared: SharedComponents | None = None,
) -> SweepResult:
    """Run (or resume) the sweep of ``overrides`` and write its summary and plots.

    ``extra(result)`` adds a finished job's own figures (stored in the manifest, so a
    resumed sweep has them without rerunning the job); ``on_job(record, earlier)`` is told of
    every job as it finishes (``earlier``: found finished by a previous invocation).
    ``shared`` lends components to (and takes them from) other sweeps of the caller; by
    default the sweep has its own, closed at its end. Failed jobs are recorded and the others go on;
    a :class:`SweepError` at the end names them (the summary is written first).
    """
    from .runner import run_recipe

    jobs, recipes = compose_jobs(overrides, config_name=config_name, extra_dirs=extra_dirs)
    _, axes = parse_sweep(overrides)
    roots = {r["run"]["root"] for r in recipes}
    if len(roots) > 1:
        raise InputError(f"the jobs of a sweep share one run.root, got {', '.join(sorted(roots))}")
    named = [j for j, r in zip(jobs, recipes) if r["run"]["name"]]
    if named:
        raise InputError(
            f"run.name names one run directory; a sweep names its jobs' directories "
            f"(job {named[0].index} sets run.name): choose the sweep's name with --sweep-name"
        )
    name = name or default_name(overrides, config_name, extra_dirs)
    if not re.fullmatch(r"[A-Za-z0-9_.,=+@-]+", name) or name in (".", ".."):
        raise InputError(f"sweep name '{name}': use letters, digits and _.,=+@- only")
    root = Path(recipes[0]["run"]["root"])
    sdir = root / "sweeps" / name
    mfile = sdir / "manifest.json"
    fresh = any(r["run"]["fresh"] for r in recipes)
    old = _read_manifest(mfile) if mfile.is_file() and not fresh else None
    if old is not None and [j["overrides"] for j in old["jobs"]] != [j.overrides for j in jobs]:
        raise InputError(
            f"sweep directory '{sdir}' holds another sweep (other jobs); choose another --sweep-name, "
            f"or pass run.fresh=true to start it over"
        )
    sdir.mkdir(parents=True, exist_ok=True)
    records = []
    for job, recipe, rec in zip(jobs, recipes, plan(jobs, recipes, name)):
        prev = old["jobs"][job.index] if old else {}
        prev = prev if prev.get("status") in ("pending", "running", "done", "failed") else {}
        recipe["run"]["name"] = f"sweeps/{name}/{job.index:03d}"
        records.append(
            {
                **rec,
                "status": prev.get("status", "pending"),
                **{
                    k: prev[k]
                    for k in ("metrics", "stages", "wall_s", "calls", "cache_hits", "error", "extra")
                    if k in prev
                },
            }
        )
    manifest = {
        "name": name,
        "config": config_name,
        "extra_dirs": [str(d) for d in extra_dirs],
        "overrides": list(overrides),
        "axes": [{"key": a.key, "override": a.override, "values": a.values} for a in axes],
        "jobs": records,
    }
    _write_manifest(mfile, manifest)
    own = shared is None
    shared = shared or SharedComponents()
    tracking = None
    if recipes and recipes[0]["run"]["loggers"]:  # a parent for the jobs' runs (agentcir/framework/tracking.py)
        from .tracking import SweepTracking

        tracking = SweepTracking(recipes[0], sdir, manifest)
    try:
        for rec, recipe in zip(records, recipes):
            figures = job_metrics(rec) if rec["status"] == "done" and not fresh else None
            if figures is not None and (extra is None or "extra" in rec):
                rec.update(figures)
                log.info("sweep job %d (%s): finished earlier, read from %s", rec["index"], rec["label"], rec["dir"])
                if on_job:
                    on_job(rec, True)
                continue
            rec.update(status="running")
            rec.pop("error", None)
            _write_manifest(mfile, manifest)
            log.info("sweep job %d/%d: %s", rec["index"] + 1, len(records), rec["label"])
            t0 = time.perf_counter()
            try:
                res = run_recipe(
                    recipe,
                    pool=shared.pool(recipe),
                    progress=progress,
                    tracking_parent=tracking.parent(rec) if tracking is not None else None,
                )
                rec.update(
                    status="done",
                    metrics=res.metrics["final"],
                    stages=res.metrics["stages"],
                    wall_s=round(time.perf_counter() - t0, 2),
                    calls=sum(s.calls for s in res.stats.values()),
                    cache_hits=sum(s.cache_hits for s in res.stats.values()),
                )
                if extra is not None:
                    rec["extra"] = extra(res)
            except (AgentcirError, ValueError, OSError) as e:
                rec.update(status="failed", error=f"{type(e).__name__}: {e}")
                log.warning("sweep job %d (%s) failed: %s", rec["index"], rec["label"], e)
            if rec["status"] == "done":  # the summary shows what the job's own metrics.json says
                rec.update(job_metrics(rec) or {})
            _write_manifest(mfile, manifest)
            if tracking is not None:
                tracking.job(rec, records)
            if on_job:
                on_job(rec, False)
    finally:
        if own:
            shared.close()
    _write_manifest(mfile, manifest)
    result = SweepResult(sdir, records, axes)
    write_summary(result)
    try:
        result.plots = write_sensitivity_plots(result)
    except AgentcirError as e:  # matplotlib missing: the tables are written
        log.warning("no sensitivity plots: %s", e)
    if tracking is not None:
        tracking.finish(records, "FAILED" if result.failed else "FINISHED")
    if result.failed:
        first = result.failed[0]
        raise SweepError(
            f"{len(result.failed)} of {len(records)} sweep jobs failed (first: job {first['index']} "
            f"({first['label']}): {first.get('error')}); the finished ones are saved in '{sdir}', "
            f"rerun the same command to retry the failed ones"
        )
    return result


# -- summary ------------------------------------------------------------------------------
def _metric_names(jobs: list[dict[str, Any]], *, per_aspect: bool) -> list[str]:
    names: list[str] = []
    for j in jobs:
        names += [
            k
            for k, v in (j.get("metrics") or {}).items()
            if isinstance(v, (int, float)) and k not in names and (per_aspect or "/" not in k)
        ]
    return names


def summary_rows(result: SweepResult, *, per_aspect: bool = True) -> tuple[list[str], list[list[Any]]]:
    """The summary table: header and one row per job (swept values, metrics, cost, run dir)."""
    metrics = _metric_names(result.jobs, per_aspect=per_aspect)
    header = ["job", *(a.key for a in result.axes), *metrics, "wall s", "model calls", "cache hits", "status", "run"]
    rows = []
    for j in result.jobs:
        m = j.get("metrics") or {}
        rows.append(
            [
                j["index"],
                *(j["swept"].get(a.key, "") for a in result.axes),
                *(m.get(k, "") for k in metrics),
                j.get("wall_s", ""),
                j.get("calls", ""),
                j.get("cache_hits", ""),
                j["status"],
                j["dir"],
            ]
        )
    return header, rows


def write_summary(result: SweepResult) -> dict[str, Path]:
    """``summary.md`` (per-aspect metrics left out), ``summary.csv`` and ``summary.json``."""
    d = result.dir
    header, rows = summary_rows(result, per_aspect=False)

    def cell(v: Any) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = [
        f"# Sweep `{d.name}`",
        "",
        f"{len(result.jobs)} job(s); swept: "
        + (", ".join(f"{a.key} = {', '.join(a.values)}" for a in result.axes) or "nothing")
        + ".",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for r in rows:
        r = [*r[:-1], f"`{Path(r[-1]).name}`"]
        lines.append("| " + " | ".join(cell(v) for v in r) + " |")
    for j in result.jobs:
        if j.get("error"):
            lines += ["", f"job {j['index']} ({j['label']}) failed: {j['error']}"]
    (d / "summary.md").write_text("\n".join(lines) + "\n")
    header, rows = summary_rows(result, per_aspect=True)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    (d / "summary.csv").write_text(buf.getvalue())
    _write_json(
        d / "summary.json", {"axes": [{"key": a.key, "values": a.values} for a in result.axes], "jobs": result.jobs}
    )
    return {"md": d / "summary.md", "csv": d / "summary.csv", "json": d / "summary.json"}


def _number(v: str) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def sensitivity_series(result: SweepResult, key: str, metric: str) -> dict[str, list[tuple[float, float]]]:
    """For swept field ``key``: one series per combination of the other swept values
    (named ``"k=v, ..."``, or ``metric`` when nothing else is swept), points (value, metric)."""
    others = [a.key for a in result.axes if a.key != key]
    series: dict[str, list[tuple[float, float]]] = {}
    for j in result.jobs:
        m = (j.get("metrics") or {}).get(metric)
        if j["status"] != "done" or not isinstance(m, (int, float)):
            continue
        name = ", ".join(f"{k}={j['swept'][k]}" for k in others) or metric
        series.setdefault(name, []).append((float(j["swept"][key]), float(m)))
    return {n: sorted(pts) for n, pts in series.items()}


def write_sensitivity_plots(result: SweepResult) -> list[Path]:
    """One PNG per swept numeric field (all its values numbers, at least two): a panel per
    headline metric, the metric against the value, one line per combination of the other
    swept values; the plotted series are written next to it as JSON. Needs matplotlib."""
    from .errors import require

    fields = [a for a in result.axes if len(a.values) > 1 and all(_number(v) is not None for v in a.values)]
    if not fields:
        return []
    names = _metric_names(result.jobs, per_aspect=False)
    metrics = [m for m in PLOT_METRICS if m in names][:MAX_PLOT_METRICS] or names[:MAX_PLOT_METRICS]
    if not metrics:
        return []
    require("matplotlib", "plot", feature="the sensitivity plots of a sweep")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = []
    for axis in fields:
        data = {m: sensitivity_series(result, axis.key, m) for m in metrics}
        fig = Figure(figsize=(3.3 * len(metrics) + 0.4, 3.2), dpi=130)
        FigureCanvasAgg(fig)
        axs = fig.subplots(1, len(metrics), squeeze=False)[0]
        markers = "osD^vP*X"
        ticks = sorted(axis.values, key=_number)
        for ax, metric in zip(axs, metrics):
            for i, (label, pts) in enumerate(data[metric].items()):
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker=markers[i % len(markers)],
                    markersize=5,
                    linewidth=1.6,
                    label=label,
                )
            ax.set_xticks([_number(v) for v in ticks])
            ax.set_xticklabels(ticks, fontsize=8)
            ax.tick_params(axis="y", labelsize=8)
            ax.set_xlabel(axis.key, fontsize=9)
            ax.set_ylabel(f"{metric} (%)", fontsize=9)
            ax.grid(alpha=0.3, linestyle="--")
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
        handles, labels = axs[0].get_legend_handles_labels()
        if len(labels) > 1:
            fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False)
            fig.subplots_adjust(
                bottom=0.24 + 0.06 * ((len(labels) - 1) // 4), wspace=0.35, left=0.07, right=0.98, top=0.88
            )
        else:
            fig.subplots_adjust(bottom=0.18, wspace=0.35, left=0.07, right=0.98, top=0.88)
        fig.suptitle(f"Sensitivity to {axis.key}", fontsize=10)
        stem = "sensitivity_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", axis.key)
        png = result.dir / f"{stem}.png"
        fig.savefig(png, format="png")
        _write_json(
            result.dir / f"{stem}.json",
            {
                "field": axis.key,
                "metrics": metrics,
                "series": {m: {n: [list(p) for p in pts] for n, pts in s.items()} for m, s in data.items()},
            },
        )
        out.append(png)
    return out
