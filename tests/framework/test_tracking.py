"""Experiment tracking: run.loggers=[csv,mlflow,tensorboard] read back from their files and a local
MLflow file store; sweeps log a run per job under a parent; a resumed run logs each stage once."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from agentcir.errors import MissingExtraError
from agentcir.framework import tracking
from agentcir.framework.recipe import compose
from agentcir.framework.runner import resolve_run_dir, run_recipe
from agentcir.registry import ConfigError


@pytest.fixture
def extras():
    """The mlflow and tensorboard extras (agentcir[mlflow], agentcir[tensorboard]; both in agentcir[dev])."""
    pytest.importorskip("mlflow")
    pytest.importorskip("torch.utils.tensorboard")


def recipe(tmp_path, *extra, loggers="[csv,mlflow,tensorboard]"):
    return compose(
        [
            "method=llm_then_rank",
            "encoder=toy",
            "llm=counting",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            f"run.loggers={loggers}",
            f"run.tracking.mlflow.uri={tmp_path / 'mlruns'}",
            *extra,
        ]
    )


def client(tmp_path):
    from mlflow.tracking import MlflowClient

    return MlflowClient((tmp_path / "mlruns").resolve().as_uri())


def runs_of(tmp_path):
    c = client(tmp_path)
    exp = c.get_experiment_by_name("agentcir")
    return c, c.search_runs([exp.experiment_id])


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_run_logs_its_recipe_stage_metrics_cost_and_artefacts(plugin_path, tmp_path, extras):
    r = recipe(tmp_path)
    res = run_recipe(r)
    m = json.loads((res.dir / "metrics.json").read_text())
    logs = res.dir / "logs"
    # CSV: the resolved recipe, a row per stage with its cost, stage and final metrics
    assert yaml.safe_load((logs / "hparams.yaml").read_text()) == r
    stages = rows(logs / "stages.csv")
    assert [s["stage"] for s in stages] == ["rewrite", "rank"] and [s["step"] for s in stages] == ["0", "1"]
    assert int(stages[0]["calls"]) == m["cost"]["rewrite"]["calls"] > 0
    assert int(stages[0]["cache_hits"]) == m["cost"]["rewrite"]["cache_hits"]
    assert json.loads(stages[0]["by_component"]) == m["cost"]["rewrite"]["by_component"]
    metrics = rows(logs / "metrics.csv")
    final = {x["metric"]: float(x["value"]) for x in metrics if x["stage"] == "final"}
    assert final == pytest.approx(m["final"]) and final["R@10"] > 0
    assert {x["metric"]: float(x["value"]) for x in metrics if x["stage"] == "rank"} == pytest.approx(
        m["stages"]["rank"]
    )
    assert not [x for x in metrics if x["stage"] == "rewrite"]  # the rewrite stage ranks nothing

    # MLflow (local file store): params from the recipe, per-stage metrics at the stage's step, cost, artefacts
    c, runs = runs_of(tmp_path)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == res.dir.name
    assert run.data.params["method.name"] == "llm_then_rank" and run.data.params["encoder.name"] == "toy"
    assert run.data.params["method.top_k"] == "10" and "run.concurrency" not in run.data.params
    assert run.data.tags["run.concurrency"] == "8"  # settings that do not change results: tags
    hist = c.get_metric_history(run.info.run_id, "stage/R_at_10")
    assert [(h.step, h.value) for h in hist] == [(1, pytest.approx(m["stages"]["rank"]["R@10"]))]
    assert run.data.metrics["final/mAP_at_10"] == pytest.approx(m["final"]["mAP@10"])
    assert run.data.metrics["cost/rewrite/calls"] == m["cost"]["rewrite"]["calls"]
    assert run.data.metrics["cost/rank/calls"] == m["cost"]["rank"]["calls"]
    arts = {a.path for a in c.list_artifacts(run.info.run_id)}
    assert arts == {"metrics.json", "report.md", "rankings.jsonl", "recipe.yaml"}
    local = c.download_artifacts(run.info.run_id, "metrics.json", str(tmp_path / "dl"))
    assert json.loads(open(local).read())["final"] == m["final"]

    # TensorBoard: the event file read back
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_mod.EventAccumulator(str(logs / "tensorboard"))
    ea.Reload()
    tags = ea.Tags()["scalars"]
    assert {"stage/R@10", "final/R@10", "cost/rewrite/calls", "cost/rank/wall_s"} <= set(tags)
    assert [(e.step, e.value) for e in ea.Scalars("stage/R@10")] == [(1, pytest.approx(m["stages"]["rank"]["R@10"]))]
    assert ea.Scalars("cost/rewrite/calls")[0].value == m["cost"]["rewrite"]["calls"]

    # the same command again: every stage is loaded, none logged twice; the end is logged again
    run_recipe(r)
    assert len(rows(logs / "stages.csv")) == 2
    assert {x["invocation"] for x in rows(logs / "metrics.csv") if x["stage"] == "final"} == {"1", "2"}
    c, runs = runs_of(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"  # the same MLflow run, continued
    assert len(c.get_metric_history(runs[0].info.run_id, "cost/rewrite/calls")) == 1
    assert len(c.get_metric_history(runs[0].info.run_id, "final/R_at_10")) == 2


class Killed(BaseException):
    """Stands for a kill: nothing after it runs (the loggers are not finished either)."""


def test_a_run_resumed_after_a_kill_logs_each_stage_once(plugin_path, tmp_path, monkeypatch, extras):
    from agentcir_testplugin.components import LLMThenRank

    rank = LLMThenRank._rank

    async def killed(self, ctx, state):
        raise Killed()

    monkeypatch.setattr(LLMThenRank, "_rank", killed)
    monkeypatch.setattr(tracking.Tracking, "finish", lambda self, status: None)
    r = recipe(tmp_path)
    with pytest.raises(Killed):
        run_recipe(r)
    d = resolve_run_dir(r)
    assert [s["stage"] for s in rows(d / "logs" / "stages.csv")] == ["rewrite"]
    c, runs = runs_of(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "RUNNING"
    monkeypatch.setattr(LLMThenRank, "_rank", rank)
    monkeypatch.undo()
    run_recipe(r)
    assert [s["stage"] for s in rows(d / "logs" / "stages.csv")] == ["rewrite", "rank"]
    c, runs = runs_of(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    rid = runs[0].info.run_id
    assert len(c.get_metric_history(rid, "cost/rewrite/calls")) == 1
    assert len(c.get_metric_history(rid, "cost/rank/calls")) == 1


def test_a_sweep_logs_a_run_per_job_under_a_parent(plugin_path, tmp_path, extras):
    from agentcir.framework.sweep import run_sweep

    res = run_sweep(
        [
            "method=llm_then_rank",
            "encoder=toy",
            "llm=counting",
            "method.top_k=5,10",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            "run.loggers=[csv,mlflow,tensorboard]",
            f"run.tracking.mlflow.uri={tmp_path / 'mlruns'}",
        ],
        name="k",
    )
    c, runs = runs_of(tmp_path)
    parents = [x for x in runs if "mlflow.parentRunId" not in x.data.tags]
    children = [x for x in runs if "mlflow.parentRunId" in x.data.tags]
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.params["sweep.method.top_k"] == "5,10"
    assert {x.data.tags["mlflow.parentRunId"] for x in children} == {parent.info.run_id}
    assert sorted(x.data.tags["swept.method.top_k"] for x in children) == ["10", "5"]
    assert sorted(x.data.params["method.top_k"] for x in children) == ["10", "5"]
    assert {"summary.csv", "summary.md"} <= {a.path for a in c.list_artifacts(parent.info.run_id)}
    hist = c.get_metric_history(parent.info.run_id, "job/R_at_10")  # one point per job, at its index
    assert [(h.step, h.value) for h in hist] == [(j["index"], pytest.approx(j["metrics"]["R@10"])) for j in res.jobs]
    jobs = rows(res.dir / "logs" / "jobs.csv")
    assert [(j["job"], j["method.top_k"], j["status"]) for j in jobs] == [("0", "5", "done"), ("1", "10", "done")]
    assert float(jobs[1]["R@10"]) == pytest.approx(res.jobs[1]["metrics"]["R@10"])
    for j in res.jobs:  # each job is an ordinary logged run
        assert len(rows(f"{j['dir']}/logs/stages.csv")) == 2
    assert any((res.dir / "logs" / "tensorboard").rglob("events.out.tfevents.*"))  # the HParams table


def test_loggers_are_checked_when_the_recipe_is_composed(plugin_path, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="unknown logger 'mlfow'.*did you mean 'mlflow'"):
        recipe(tmp_path, loggers="[csv,mlfow]")
    with pytest.raises(ConfigError, match="run.tracking.mlflow: unknown field 'urii'"):
        recipe(tmp_path, "run.tracking.mlflow.urii=x", loggers="[csv]")
    with pytest.raises(ConfigError, match="listed twice"):
        recipe(tmp_path, loggers="[csv,csv]")
    assert recipe(tmp_path, loggers="csv")["run"]["loggers"] == ["csv"]  # one name
    # loggers do not change results: the same run directory with or without them
    assert resolve_run_dir(recipe(tmp_path, loggers="[]")) == resolve_run_dir(recipe(tmp_path, loggers="[csv]"))
    monkeypatch.setattr(tracking.MLflowLogger, "modules", ("agentcir_no_such_module",))
    with pytest.raises(MissingExtraError, match=r"run.loggers=\[mlflow\].*pip install 'agentcir\[mlflow\]'"):
        recipe(tmp_path, loggers="[mlflow]")


def test_a_logger_failing_mid_run_is_dropped_with_a_warning(plugin_path, tmp_path, monkeypatch, caplog, extras):
    def broken(self, *a, **k):
        raise OSError("disk gone")

    monkeypatch.setattr(tracking.CSVLogger, "log_stage", broken)
    res = run_recipe(recipe(tmp_path, loggers="[csv,mlflow]"))
    assert (res.dir / "metrics.json").is_file()
    assert "logger 'csv' failed to log a stage (OSError: disk gone)" in caplog.text
    _, runs = runs_of(tmp_path)
    assert runs[0].info.status == "FINISHED"  # the other logger goes on
