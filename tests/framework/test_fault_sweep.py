"""The fast subset of ``benchmarks/fault_sweep.py``: real SIGKILLs of ``agentcir run`` processes
talking to the scripted server as a slow OpenAI-compatible endpoint (the toy encoder keeps each
process quick), and bad 200 replies at a 30% rate with ``run.concurrency`` 4."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sweep_module():
    spec = importlib.util.spec_from_file_location("fault_sweep", ROOT / "benchmarks" / "fault_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fault_sweep"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("fault_sweep", None)


@pytest.fixture(scope="module")
def sweep(sweep_module, plugin_path, tmp_path_factory):
    sw = sweep_module.Sweep(
        tmp_path_factory.mktemp("sweep"),
        limit=4,
        concurrency=2,
        delay=0.05,
        seed=0,
        extra=("encoder=toy",),
        pythonpath=(str(plugin_path),),
    )
    yield sw
    sw.close()


@pytest.mark.slow
def test_xr_killed_after_gallery_captions_and_inside_an_llm_stage(sweep):
    """The XR run resumes after a SIGKILL right after gallery_captions (it
    failed with "'NoneType' object is not subscriptable" before), and a kill inside an LLM stage repeats
    no more model calls than run.concurrency (counted at the server)."""
    sweep.kills("xr", inside=1, boundaries=1)
    rows = list(sweep.done.values())
    assert [r["scenario"].split()[2] for r in rows] == ["after", "call"]
    for r in rows:
        assert r["tried"] == 1 and r["identical"] == 1, r
        assert r["tracebacks"] == 0 and r["failed_queries"] == 0, r
        assert 0 <= r["repeated_calls"] <= sweep.concurrency, r
    assert not rows[1]["notes"]  # the kill landed inside the run


@pytest.mark.slow
def test_bad_200_replies_at_30_percent_lose_no_query(sweep):
    """With 30% of the replies truncated, prose or without choices (drawn
    per request, seeded), every query finishes with the metrics of a run against a healthy endpoint."""
    sweep.faults("xr", [0.3], kinds=("bad200",))
    (row,) = [r for r in sweep.done.values() if r["group"] == "fault bad200"]
    assert row["identical"] == 1 and row["failed_queries"] == 0 and row["tracebacks"] == 0, row
    assert row["repeated_calls"] > 0  # the faulted requests were retried
