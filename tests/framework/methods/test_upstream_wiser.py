"""WISER beside the authors' released code (``benchmarks/upstream_wiser.py``): equal descriptions,
pseudo targets, open paths, refinement decisions and instructions, edits and fused rankings under
``upstream_compat`` on the same inputs and replies. The checkout is never vendored: point
``AGENTCIR_WISER_CHECKOUT`` at a checkout of Physicsmile/WISER."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.framework.methods.test_upstream_released import bench

WISER = os.environ.get("AGENTCIR_WISER_CHECKOUT", "")


@pytest.mark.skipif(
    not WISER, reason="no WISER checkout: set AGENTCIR_WISER_CHECKOUT to a checkout of Physicsmile/WISER"
)
def test_wiser_equals_the_released_functions():
    pytest.importorskip("torch")
    res = bench("upstream_wiser").check(Path(WISER))
    assert not any(res["upstream_compat"].values()), res
    assert res["refined_t2i"] > 0 and res["refined_i2i"] > 0 and res["settled"] > 0  # every branch is exercised
    assert res["correct"]["suggestion_i2i"] > 0 and res["correct"]["descriptions"] > 0  # the quirks are exercised


@pytest.mark.skipif(
    not WISER, reason="no WISER checkout: set AGENTCIR_WISER_CHECKOUT to a checkout of Physicsmile/WISER"
)
def test_wiser_exported_prompts_fill_the_method_prompts(tmp_path):
    from agentcir.framework.prompts import load_prompt
    from agentcir.framework.tasks import find_task
    from agentcir.registry import METHODS

    files = bench("upstream_wiser").export_prompts(Path(WISER), tmp_path / "p")
    m = METHODS.build("wiser", {"prompts": str(tmp_path / "p")}, encoder=object(), llm=object(), captioner=object())
    for field, task in (
        ("describe_prompt", "wiser_describe"),
        ("redescribe_prompt", "wiser_redescribe"),
        ("check_t2i_prompt", "wiser_check_t2i"),
        ("check_i2i_prompt", "wiser_check_i2i"),
        ("verify_prompt", "wiser_verify"),
    ):
        p = load_prompt(getattr(m.cfg, field))
        assert Path(getattr(m.cfg, field)) in files and p.variables <= set(find_task(task).variables), field
        assert p.variables, field
