"""AutoCIR and ImageScope beside the authors' released code (``benchmarks/upstream_autocir.py``,
``benchmarks/upstream_imagescope.py``): equal outputs under ``upstream_compat`` on the same inputs
and replies. The checkouts are never vendored: point ``AGENTCIR_AUTOCIR_CHECKOUT`` /
``AGENTCIR_IMAGESCOPE_CHECKOUT`` at checkouts of coloreyes/AutoCIR and pengfei-luo/ImageScope."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from agentcir.framework.prompts import load_prompt
from agentcir.framework.tasks import TASKS

ROOT = Path(__file__).resolve().parents[3]
AUTOCIR = os.environ.get("AGENTCIR_AUTOCIR_CHECKOUT", "")
IMAGESCOPE = os.environ.get("AGENTCIR_IMAGESCOPE_CHECKOUT", "")


def bench(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.skipif(
    not AUTOCIR, reason="no AutoCIR checkout: set AGENTCIR_AUTOCIR_CHECKOUT to a checkout of coloreyes/AutoCIR"
)
def test_autocir_equals_the_released_loop():
    pytest.importorskip("torch")
    res = bench("upstream_autocir").check(Path(AUTOCIR), max_check_num=2)
    assert res["upstream_compat"] == {"descriptions": 0, "active": 0, "suggestions": 0, "top": 0}, res
    assert res["stopped"] > 0 and all(res["correct"].values())  # the quirks are exercised


@pytest.mark.skipif(
    not AUTOCIR, reason="no AutoCIR checkout: set AGENTCIR_AUTOCIR_CHECKOUT to a checkout of coloreyes/AutoCIR"
)
def test_autocir_exported_prompts_have_the_task_variables(tmp_path):
    files = bench("upstream_autocir").export_prompts(
        Path(AUTOCIR), tmp_path / "p", "structural_modifier_prompt_fashion"
    )
    for f, task in zip(files, ("autocir_plan", "autocir_check", "autocir_replan")):
        assert load_prompt(f).variables == set(TASKS[task].variables), f


@pytest.mark.skipif(
    not IMAGESCOPE,
    reason="no ImageScope checkout: set AGENTCIR_IMAGESCOPE_CHECKOUT to a checkout of pengfei-luo/ImageScope",
)
def test_imagescope_equals_the_released_stages():
    pytest.importorskip("torch")
    pytest.importorskip("json_repair", reason="the released code reads replies with json_repair (agentcir[upstream])")
    res = bench("upstream_imagescope").check(Path(IMAGESCOPE))
    assert not any(res["upstream_compat"].values()), res
    assert res["stage3_moved"] > 0 and res["correct"]["rerank"] > 0


@pytest.mark.skipif(
    not IMAGESCOPE,
    reason="no ImageScope checkout: set AGENTCIR_IMAGESCOPE_CHECKOUT to a checkout of pengfei-luo/ImageScope",
)
def test_imagescope_reads_the_released_prompt_folders():
    for d in sorted((Path(IMAGESCOPE) / "prompts").iterdir()):
        assert load_prompt(d / "prompt1_stage1_reasoner.txt").variables == {"instruction", "ref_image_desc"}, d
        assert load_prompt(d / "prompt2_stage2_reasoner.txt").variables == {"instruction", "atomic_inst"}, d
