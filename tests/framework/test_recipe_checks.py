"""Paths, ranges and devices are checked when the recipe is composed, before
any component is built."""

from __future__ import annotations

import pytest

from agentcir.framework.recipe import compose
from agentcir.framework.recipe_checks import device_problem
from agentcir.registry import ConfigError


def base(tmp_path, *extra):
    return ["dataset=demo", f"run.root={tmp_path / 'runs'}", *extra]


@pytest.mark.parametrize("name", ["../..", "../escape", "a/../../b", "/etc", ".", "a/./b", "C:\\\\x"])
def test_run_name_cannot_leave_run_root(tmp_path, name):
    with pytest.raises(ConfigError, match=r"run: field 'name': must be a folder name .* inside run.root"):
        compose(base(tmp_path, f"run.name='{name}'"))


def test_run_name_may_be_a_relative_path(tmp_path):
    assert compose(base(tmp_path, "run.name=exp1/xr"))["run"]["name"] == "exp1/xr"


@pytest.mark.parametrize(
    "override,msg",
    [
        ("method.gate=2.5", r"method 'octopus': field 'gate': must be within 0..1, got 2.5"),
        ("method.gate=-0.1", r"field 'gate': must be within 0..1, got -0.1"),
        ("method.lam=1.5", r"field 'lam': must be within 0..1, got 1.5"),
        ("method.top_k=0", r"field 'top_k': must be at least 1, got 0"),
    ],
)
def test_method_ranges(tmp_path, override, msg):
    with pytest.raises(ConfigError, match=msg):
        compose(base(tmp_path, override))


def test_gate_bounds_are_accepted(tmp_path):
    assert compose(base(tmp_path, "method.gate=1"))["method"]["gate"] == 1
    assert compose(base(tmp_path, "method.gate=0"))["method"]["gate"] == 0


def test_unavailable_device_fails_at_compose(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    built = []
    from agentcir.framework import recipe as recipe_mod

    monkeypatch.setattr(recipe_mod.ComponentPool, "get", lambda self, kind: built.append(kind))
    with pytest.raises(
        ConfigError,
        match=r"encoder 'catalog': field 'device': device 'cuda' is not available "
        r"\(.*torch 2.*\); use device=cpu",
    ):
        compose(base(tmp_path, "encoder.device=cuda"))
    assert built == []  # nothing was built
    assert device_problem("tpu").startswith("unknown device 'tpu'")
    assert device_problem("cuda:x").startswith("device 'cuda:x' has a bad index")
    assert device_problem("cpu") is None
