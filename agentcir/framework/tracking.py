"""Experiment tracking: run and sweep loggers selected by recipe (``run.loggers=[csv,mlflow]``).

A logger is a registry key of :data:`agentcir.registry.LOGGERS` (``csv`` built in, ``tensorboard``
and ``mlflow`` with their extras; a plugin registers its own through the entry-point group
``agentcir.loggers``), with a typed ``Config`` whose fields are set under ``run.tracking.<key>``
(``run.tracking.mlflow.uri=file:///tmp/mlruns``). Loggers do not change results: ``run.loggers``
and ``run.tracking`` are not part of a run's identity.

What a run logs (:class:`Tracking` calls every selected logger):

- at the start: the resolved recipe (``start``);
- after each stage, in run order (``step`` = the stage's position): the metrics of the ranking the
  stage produced, if it produced one, and its model-call cost (calls, cache hits, failures, wall,
  model-call, queueing and CPU seconds, calls per component: :class:`~agentcir.framework.state.StageStats`);
- at the end: the final metrics, then ``metrics.json``, ``report.md``, ``rankings.jsonl`` and
  ``recipe.yaml`` as artefacts, and the status (``FINISHED``, or ``FAILED`` when the run raised).

A resumed run (after a kill, or the same command again) logs each stage once: the loggers keep,
in ``<run_dir>/logs/tracking.json``, the digest of every stage marker they logged, so a stage
loaded from a previous invocation is logged only by a logger that has not logged it (one added
since); a stage recomputed (its inputs changed) is logged again. Every invocation that reaches
the end logs the final metrics and artefacts once more (``invocation`` column / step).

A sweep (:mod:`agentcir.framework.sweep`) logs each job as a run, plus a parent: MLflow a parent
run with every job nested under it, TensorBoard the HParams table of the swept values and final
metrics, CSV ``<sweep>/logs/jobs.csv`` (one row per job, rewritten as each job finishes).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import require
from ..registry import LOGGERS, make_config
from .files import atomic_write_text
from .recipe import VOLATILE_RUN_FIELDS

log = logging.getLogger(__name__)

#: the artefacts of a finished run, logged by every logger that stores files
RUN_ARTEFACTS = ("metrics.json", "report.md", "rankings.jsonl", "recipe.yaml")
#: the artefacts of a finished sweep (those present)
SWEEP_ARTEFACTS = ("summary.md", "summary.csv", "summary.json", "manifest.json")
#: the cost fields of a stage logged as numbers (the rest of StageStats: ``by_component``, a mapping)
COST_FIELDS = (
    "calls",
    "cache_hits",
    "failures",
    "wall_s",
    "call_s",
    "call_wall_s",
    "queue_s",
    "cpu_s",
    "loading_s",
    "max_in_flight",
    "resumed_queries",
)


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def numbers(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """The numeric entries of a metrics mapping (flattened; booleans and text left out)."""
    return {
        k: float(v)
        for k, v in flatten(metrics or {}).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class RunLogger:
    """A run logger: what a run (or a sweep) reports, where a tracking tool keeps it.

    Subclasses register with ``@LOGGERS.register(key)`` and a ``Config`` dataclass (its fields are
    set under ``run.tracking.<key>``). ``extra``/``modules``: the pip extra and the modules the
    logger needs, checked when the recipe is composed (:func:`agentcir.framework.recipe_checks.check_loggers`).
    """

    extra: str = ""
    modules: tuple[str, ...] = ()

    @dataclass
    class Config:
        pass

    def __init__(self, config: Any = None):
        self.config = config if config is not None else self.Config()

    @classmethod
    def require(cls, key: str) -> None:
        """Fail with :class:`~agentcir.errors.MissingExtraError` when a needed module is missing."""
        for module in cls.modules:
            require(module, cls.extra, feature=f"run.loggers=[{key}]")

    # -- a run -----------------------------------------------------------------------------
    def start(self, recipe: dict[str, Any], run_dir: Path, parent: dict[str, Any] | None = None) -> None:
        """A run starts (or resumes) in ``run_dir``; ``parent`` is the sweep's, for a sweep job
        (:meth:`start_sweep`'s return value, with ``job`` and ``swept``)."""

    def log_stage(self, stage: str, metrics: Mapping[str, Any] | None, cost: Mapping[str, Any], *, step: int) -> None:
        """A stage finished: the metrics of its ranking (None: it ranked nothing) and its cost."""

    def log_metrics(self, metrics: Mapping[str, Any], *, step: int | None = None) -> None:
        """Metrics of the run (the final ones, ``final/<name>``)."""

    def log_artifact(self, path: Path) -> None:
        """A file of the run (kept by the tracking tool)."""

    def finish(self, status: str) -> None:
        """The run ends: ``FINISHED`` or ``FAILED``."""

    # -- a sweep ---------------------------------------------------------------------------
    def start_sweep(self, recipe: dict[str, Any], sweep_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
        """A sweep starts; returns what its jobs' :meth:`start` gets as ``parent``."""
        return {}

    def log_job(self, sweep_dir: Path, job: dict[str, Any], jobs: Sequence[dict[str, Any]]) -> None:
        """Job ``job`` of the sweep ended (``done`` or ``failed``; ``jobs``: every job's record, as the
        manifest has it)."""

    def finish_sweep(self, sweep_dir: Path, jobs: Sequence[dict[str, Any]], status: str) -> None:
        """The sweep ends (its summary files are written)."""


# -- the built-in loggers -------------------------------------------------------------------
def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]], *, append: bool) -> None:
    new = not path.is_file() or path.stat().st_size == 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if append else "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        if new or not append:
            w.writerow(header)
        w.writerows(rows)


@LOGGERS.register("csv")
class CSVLogger(RunLogger):
    """Plain files under ``<run_dir>/logs/`` (no extra needed):

    - ``hparams.yaml``: the resolved recipe;
    - ``stages.csv``: one row per stage logged: its position, model-call cost and calls per component;
    - ``metrics.csv``: one row per metric value: ``invocation, step, stage, metric, value, time``
      (stage metrics at the stage's step; the final ones with ``stage`` = ``final``).

    The artefacts are the run directory's own files (nothing is copied). A sweep gets
    ``<sweep>/logs/jobs.csv``: per job its status, swept values, final metrics and run directory.
    """

    @dataclass
    class Config:
        """Attributes:
        folder: sub-folder of the run (and sweep) directory the files go to.
        """

        folder: str = "logs"

    def start(self, recipe, run_dir, parent=None):
        import yaml

        self.dir = Path(run_dir) / self.config.folder
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.dir / "hparams.yaml", yaml.safe_dump(recipe, sort_keys=False))
        state = self.dir / "csv_invocations.txt"
        try:
            self.invocation = int(state.read_text()) + 1
        except (OSError, ValueError):  # none yet (or unreadable): the first
            self.invocation = 1
        atomic_write_text(state, str(self.invocation))

    def log_stage(self, stage, metrics, cost, *, step):
        _write_csv(
            self.dir / "stages.csv",
            ["invocation", "step", "stage", *COST_FIELDS, "by_component", "time"],
            [
                [
                    self.invocation,
                    step,
                    stage,
                    *(cost.get(k, "") for k in COST_FIELDS),
                    json.dumps(cost.get("by_component") or {}, sort_keys=True),
                    round(time.time(), 3),
                ]
            ],
            append=True,
        )
        if metrics:
            self._metrics(numbers(metrics), step, stage)

    def log_metrics(self, metrics, *, step=None):
        self._metrics(numbers(metrics), "" if step is None else step, "final")

    def _metrics(self, values: dict[str, float], step: Any, stage: str) -> None:
        now = round(time.time(), 3)
        _write_csv(
            self.dir / "metrics.csv",
            ["invocation", "step", "stage", "metric", "value", "time"],
            [[self.invocation, step, stage, k, v, now] for k, v in values.items()],
            append=True,
        )

    def log_job(self, sweep_dir, job, jobs):
        keys = sorted({k for j in jobs for k in (j.get("swept") or {})})
        metrics = sorted({k for j in jobs for k in numbers(j.get("metrics"))})
        rows = [
            [
                j["index"],
                j["status"],
                *((j.get("swept") or {}).get(k, "") for k in keys),
                *(numbers(j.get("metrics")).get(m, "") for m in metrics),
                j.get("calls", ""),
                j.get("cache_hits", ""),
                j.get("wall_s", ""),
                j["dir"],
            ]
            for j in jobs
        ]
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["job", "status", *keys, *metrics, "model calls", "cache hits", "wall_s", "run"])
        w.writerows(rows)
        atomic_write_text(Path(sweep_dir) / self.config.folder / "jobs.csv", buf.getvalue())

    def finish_sweep(self, sweep_dir, jobs, status):
        self.log_job(sweep_dir, None, jobs)


@LOGGERS.register("tensorboard")
class TensorBoardLogger(RunLogger):
    """TensorBoard event files under ``<run_dir>/logs/tensorboard`` (``tensorboard --logdir runs``):
    per stage ``stage/<metric>`` (step: the stage's position, so a metric is a curve over the
    stages) and ``cost/<stage>/<field>``; ``final/<metric>``; the recipe as text. A sweep adds the
    HParams table (swept values against final metrics) under ``<sweep>/logs/tensorboard``.
    Needs ``pip install 'agentcir[tensorboard]'`` (torch's SummaryWriter and tensorboard)."""

    extra = "tensorboard"
    modules = ("tensorboard", "torch.utils.tensorboard")

    @dataclass
    class Config:
        """Attributes:
        folder: sub-folder of the run (and sweep) directory the event files go to.
        """

        folder: str = "logs/tensorboard"

    def start(self, recipe, run_dir, parent=None):
        import yaml
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / self.config.folder))
        self.writer.add_text("recipe", "```yaml\n" + yaml.safe_dump(recipe, sort_keys=False) + "```")

    def log_stage(self, stage, metrics, cost, *, step):
        for k, v in numbers(metrics).items():
            self.writer.add_scalar(f"stage/{k}", v, step)
        for k in COST_FIELDS:
            if isinstance(cost.get(k), (int, float)):
                self.writer.add_scalar(f"cost/{stage}/{k}", cost[k], step)
        self.writer.flush()

    def log_metrics(self, metrics, *, step=None):
        for k, v in numbers(metrics).items():
            self.writer.add_scalar(f"final/{k}", v, step or 0)
        self.writer.flush()

    def finish(self, status):
        self.writer.add_text("status", status)
        self.writer.close()

    def start_sweep(self, recipe, sweep_dir, info):
        self._logged: set[int] = set()
        return {}

    def log_job(self, sweep_dir, job, jobs):
        from torch.utils.tensorboard import SummaryWriter

        new = [j for j in jobs if j["status"] == "done" and j["index"] not in self._logged]
        if not new:
            return
        writer = SummaryWriter(log_dir=str(Path(sweep_dir) / self.config.folder))
        try:
            for j in new:
                hp = {k: _hparam(v) for k, v in (j.get("swept") or {}).items()}
                writer.add_hparams(
                    hp or {"job": j["index"]},
                    {f"final/{k}": v for k, v in numbers(j.get("metrics")).items()},
                    run_name=f"{j['index']:03d}",
                )
                self._logged.add(j["index"])
        finally:
            writer.close()

    def finish_sweep(self, sweep_dir, jobs, status):
        self.log_job(sweep_dir, None, jobs)


def _hparam(v: Any) -> Any:
    try:
        return float(v) if not isinstance(v, bool) and re.fullmatch(r"-?[0-9.eE+-]+", str(v)) else str(v)
    except ValueError:
        return str(v)


def mlflow_name(name: str) -> str:
    """A metric name as MLflow accepts it (letters, digits, ``_-. /:``): ``R@10`` -> ``R_at_10``."""
    return re.sub(r"[^\w\-. /:]", "_", name.replace("@", "_at_"))


@LOGGERS.register("mlflow")
class MLflowLogger(RunLogger):
    """An MLflow run per agentcir run: the resolved recipe as params (``method.lam``, ...; the run
    settings that do not change results as tags), per stage ``stage/<metric>`` (step: the stage's
    position) and ``cost/<stage>/<field>``, ``final/<metric>``, the run's files as artefacts.
    Metric names keep letters, digits and ``_-. /:`` (``R@10`` is ``R_at_10``).

    The tracking URI is ``run.tracking.mlflow.uri``, else ``MLFLOW_TRACKING_URI``, else the file
    store ``<run.root>/mlruns``. A resumed run continues its MLflow run (the id is kept in
    ``<run_dir>/logs/mlflow.json``). A sweep is a parent run with its jobs nested under it.
    Needs ``pip install 'agentcir[mlflow]'`` (mlflow-skinny suffices).
    """

    extra = "mlflow"
    modules = ("mlflow",)

    @dataclass
    class Config:
        """Attributes:
        uri: tracking URI (``file:///path``, a folder, ``http://host:5000``, ``sqlite:///f.db``).
        experiment: the MLflow experiment runs are logged to (created when missing).
        """

        uri: str | None = None
        experiment: str = "agentcir"

    def _client(self, root: str | os.PathLike):
        from mlflow.tracking import MlflowClient

        uri = self.config.uri or os.environ.get("MLFLOW_TRACKING_URI") or str(Path(root) / "mlruns")
        if "://" not in uri and not uri.startswith(("sqlite:", "databricks")):
            uri = Path(uri).resolve().as_uri()
        if uri.startswith("file:"):  # MLflow 3 asks for an opt-in to its file store
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(self.config.experiment)
        self.experiment_id = (
            exp.experiment_id if exp is not None else self.client.create_experiment(self.config.experiment)
        )
        return self.client

    def start(self, recipe, run_dir, parent=None):
        client = self._client(recipe["run"]["root"])
        run_dir = Path(run_dir)
        state = run_dir / "logs" / "mlflow.json"
        old = _read_json(state)
        self.run_id = None
        if old.get("uri") == self.uri and old.get("experiment") == self.config.experiment:
            try:
                client.get_run(old["run_id"])
                self.run_id = old["run_id"]
                client.update_run(self.run_id, status="RUNNING")
            except Exception:  # noqa: BLE001 -- deleted on the server: a new run
                self.run_id = None
        tags = {
            "agentcir.run_dir": str(run_dir.resolve()),
            "agentcir.method": recipe["method"]["name"],
            "agentcir.dataset": recipe["dataset"]["name"],
        }
        if parent and parent.get("mlflow_parent"):
            tags.update(
                {
                    "mlflow.parentRunId": parent["mlflow_parent"],
                    "agentcir.sweep": parent.get("sweep", ""),
                    "agentcir.job": str(parent.get("job", "")),
                }
            )
            tags.update({f"swept.{k}": str(v) for k, v in (parent.get("swept") or {}).items()})
        if self.run_id is None:
            self.run_id = client.create_run(self.experiment_id, run_name=run_dir.name, tags=tags).info.run_id
            state.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(
                state, json.dumps({"uri": self.uri, "experiment": self.config.experiment, "run_id": self.run_id})
            )
        flat = flatten({k: v for k, v in recipe.items() if not k.startswith("_")})
        params = {
            k: v for k, v in flat.items() if not (k.startswith("run.") and k.split(".")[1] in VOLATILE_RUN_FIELDS)
        }
        have = client.get_run(self.run_id).data.params
        self._batch(
            params={
                k: json.dumps(v) if isinstance(v, (list, dict)) else str(v)
                for k, v in params.items()
                if mlflow_name(k) not in have
            },
            tags={**tags, **{k: str(v) for k, v in flat.items() if k not in params}},
        )

    def _batch(
        self,
        *,
        metrics: Mapping[str, float] | None = None,
        step: int = 0,
        params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        items = (
            [("m", Metric(mlflow_name(k), v, now, step)) for k, v in (metrics or {}).items()]
            + [("p", Param(mlflow_name(k), v[:6000])) for k, v in (params or {}).items()]
            + [("t", RunTag(k, v[:5000])) for k, v in (tags or {}).items()]
        )
        for i in range(0, len(items), 100):  # MLflow's batch limits
            chunk = items[i : i + 100]
            self.client.log_batch(
                self.run_id,
                metrics=[x for t, x in chunk if t == "m"],
                params=[x for t, x in chunk if t == "p"],
                tags=[x for t, x in chunk if t == "t"],
            )

    def log_stage(self, stage, metrics, cost, *, step):
        values = {f"stage/{k}": v for k, v in numbers(metrics).items()}
        values.update(
            {f"cost/{stage}/{k}": float(cost[k]) for k in COST_FIELDS if isinstance(cost.get(k), (int, float))}
        )
        self._batch(metrics=values, step=step)

    def log_metrics(self, metrics, *, step=None):
        self._batch(metrics={f"final/{k}": v for k, v in numbers(metrics).items()}, step=step or 0)

    def log_artifact(self, path):
        self.client.log_artifact(self.run_id, str(path))

    def finish(self, status):
        self.client.set_terminated(self.run_id, status)

    def start_sweep(self, recipe, sweep_dir, info):
        client = self._client(recipe["run"]["root"])
        state = Path(sweep_dir) / "logs" / "mlflow.json"
        old = _read_json(state)
        run_id = None
        if old.get("uri") == self.uri and old.get("experiment") == self.config.experiment:
            try:
                client.get_run(old["run_id"])
                run_id = old["run_id"]
                client.update_run(run_id, status="RUNNING")
            except Exception:  # noqa: BLE001 -- deleted on the server: a new parent run
                run_id = None
        if run_id is None:
            run_id = client.create_run(
                self.experiment_id,
                run_name=f"sweep {info['name']}",
                tags={"agentcir.sweep": info["name"], "agentcir.sweep_dir": str(Path(sweep_dir).resolve())},
            ).info.run_id
            state.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(
                state, json.dumps({"uri": self.uri, "experiment": self.config.experiment, "run_id": run_id})
            )
        self.run_id = run_id
        have = client.get_run(run_id).data.params
        params = {f"sweep.{a['key']}": ",".join(a["values"]) for a in info.get("axes", [])}
        self._batch(
            params={k: v for k, v in params.items() if mlflow_name(k) not in have},
            tags={"agentcir.overrides": " ".join(info.get("overrides", []))},
        )
        return {"mlflow_parent": run_id, "sweep": info["name"]}

    def log_job(self, sweep_dir, job, jobs):
        if job is not None and job["status"] == "done":
            self._batch(metrics={f"job/{k}": v for k, v in numbers(job.get("metrics")).items()}, step=job["index"])

    def finish_sweep(self, sweep_dir, jobs, status):
        for name in SWEEP_ARTEFACTS:
            if (Path(sweep_dir) / name).is_file():
                self.client.log_artifact(self.run_id, str(Path(sweep_dir) / name))
        self.client.set_terminated(self.run_id, status)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


# -- selection -------------------------------------------------------------------------------
def build_loggers(run: dict[str, Any]) -> list[tuple[str, RunLogger]]:
    """The loggers ``run.loggers`` selects, each with its ``run.tracking.<key>`` settings."""
    settings = run.get("tracking") or {}
    out = []
    for name in run.get("loggers") or []:
        entry = LOGGERS.get(name)
        out.append((name, entry.obj(make_config(entry.config, settings.get(name) or {}, where=f"run.tracking.{name}"))))
    return out


class Tracking:
    """The selected loggers of one run, called together. A logger that fails after its start is
    reported once (a warning naming it) and dropped: the run's own files are complete anyway."""

    def __init__(self, loggers: Sequence[tuple[str, RunLogger]]):
        self.loggers = list(loggers)
        self.run_dir: Path | None = None
        self.logged: dict[str, list[str]] = {}

    @classmethod
    def for_recipe(cls, recipe: dict[str, Any]) -> "Tracking | None":
        """The loggers ``recipe``'s ``run.loggers`` selects; None when it selects none."""
        loggers = build_loggers(recipe["run"])
        return cls(loggers) if loggers else None

    def _each(self, what: str, fn) -> None:
        for name, lg in list(self.loggers):
            self._each_one(name, lg, what, lambda name=name, lg=lg: fn(name, lg))

    def start(self, recipe: dict[str, Any], run_dir: Path, parent: Mapping[str, Any] | None = None) -> None:
        """Start every logger; a logger that cannot start (a tracking server that does not answer)
        fails the run, naming it, before any gallery or query work."""
        from .errors import InputError

        self.run_dir = Path(run_dir)
        self.logged = _read_json(self.run_dir / "logs" / "tracking.json").get("stages", {})
        parent = parent or {}
        for name, lg in self.loggers:
            mine = (
                {**(parent.get(name) or {}), "job": parent["job"], "swept": parent.get("swept") or {}}
                if "job" in parent
                else None
            )
            try:
                lg.start(recipe, self.run_dir, mine)
            except Exception as e:  # noqa: BLE001
                raise InputError(f"run.loggers: logger '{name}' cannot start ({type(e).__name__}: {e})") from e

    def stage(
        self, stage: str, step: int, metrics: Mapping[str, Any] | None, cost: Mapping[str, Any], key: str
    ) -> None:
        """Log a finished stage with every logger that has not logged this computation of it (``key``:
        the digest of its marker)."""
        for name, lg in list(self.loggers):
            if key in self.logged.get(name, []):
                continue
            self._each_one(name, lg, "log a stage", lambda lg=lg: lg.log_stage(stage, metrics, cost, step=step))
            self.logged.setdefault(name, []).append(key)
        if self.run_dir is not None:
            (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.run_dir / "logs" / "tracking.json", json.dumps({"stages": self.logged}, indent=1))

    def _each_one(self, name: str, lg: RunLogger, what: str, fn) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 -- tracking never fails a run after its start
            log.warning(
                "logger '%s' failed to %s (%s: %s); it logs nothing more for this run", name, what, type(e).__name__, e
            )
            self.loggers.remove((name, lg))

    def end(self, metrics: Mapping[str, Any], *, step: int) -> None:
        """The final metrics, then the run's files as artefacts, then ``FINISHED``."""
        self._each("log the final metrics", lambda n, lg: lg.log_metrics(metrics, step=step))
        for f in RUN_ARTEFACTS:
            path = (self.run_dir or Path()) / f
            if path.is_file():
                self._each(f"log {f}", lambda n, lg, path=path: lg.log_artifact(path))
        self.finish("FINISHED")

    def finish(self, status: str) -> None:
        """End every logger's run with ``status`` (``FINISHED``, ``FAILED``)."""
        self._each("finish", lambda n, lg: lg.finish(status))
        self.loggers = []


class SweepTracking:
    """The selected loggers of a sweep: a parent (:meth:`RunLogger.start_sweep`), told of each job."""

    def __init__(self, recipe: dict[str, Any], sweep_dir: Path, info: dict[str, Any]):
        self.sweep_dir = Path(sweep_dir)
        self.loggers = build_loggers(recipe["run"])
        self.parents: dict[str, dict[str, Any]] = {}
        for name, lg in self.loggers:
            try:
                self.parents[name] = lg.start_sweep(recipe, self.sweep_dir, info)
            except Exception as e:  # noqa: BLE001
                from .errors import InputError

                raise InputError(
                    f"run.loggers: logger '{name}' cannot start the sweep ({type(e).__name__}: {e})"
                ) from e

    def parent(self, job: dict[str, Any]) -> dict[str, Any]:
        """What job ``job``'s :meth:`Tracking.start` gets: per logger its sweep parent, the job's index and swept values."""
        return {**self.parents, "job": job["index"], "swept": job.get("swept") or {}}

    def job(self, job: dict[str, Any], jobs: Sequence[dict[str, Any]]) -> None:
        """Job ``job`` ended (``jobs``: every job's record)."""
        for name, lg in list(self.loggers):
            try:
                lg.log_job(self.sweep_dir, job, jobs)
            except Exception as e:  # noqa: BLE001
                log.warning("logger '%s' failed to log a sweep job (%s: %s)", name, type(e).__name__, e)

    def finish(self, jobs: Sequence[dict[str, Any]], status: str) -> None:
        """The sweep ends with ``status`` (its summary written)."""
        for name, lg in self.loggers:
            try:
                lg.finish_sweep(self.sweep_dir, jobs, status)
            except Exception as e:  # noqa: BLE001
                log.warning("logger '%s' failed to finish the sweep (%s: %s)", name, type(e).__name__, e)
