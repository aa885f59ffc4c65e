"""Dispatch: explicit setting > AGENTCIR_KERNELS > capability probe > reference; fallbacks."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from agentcir import kernels as K
from agentcir.framework.recipe import compose
from agentcir.kernels import dispatch
from agentcir.registry import ConfigError


@pytest.fixture
def fresh_probe(monkeypatch):
    dispatch._probe.cache_clear()
    monkeypatch.setattr(dispatch, "_logged", set())
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    yield
    getattr(dispatch._probe, "cache_clear", lambda: None)()  # runs before monkeypatch restores _probe


def test_import_is_light():
    code = (
        "import sys, agentcir.kernels, agentcir.kernels.reference\n"
        "print(','.join(m for m in ('torch', 'numba', 'triton', 'faiss') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_explicit_setting_wins_over_the_env_var(monkeypatch, fresh_probe):
    monkeypatch.setenv(dispatch.ENV_VAR, "torch")
    assert dispatch.resolve("reference") == "reference"
    assert dispatch.resolve("auto") == "torch"


def test_env_var_names_a_bad_backend(monkeypatch, fresh_probe):
    monkeypatch.setenv(dispatch.ENV_VAR, "cuda")
    with pytest.raises(K.KernelInputError, match=r"\$AGENTCIR_KERNELS: unknown kernel backend 'cuda'; choose one of"):
        dispatch.resolve("auto")


def test_unknown_backend_name():
    with pytest.raises(K.KernelInputError, match="backend: unknown kernel backend 'gpu'"):
        K.cosine_topk(np.ones((1, 2)), np.ones((3, 2), dtype=np.float32), 1, backend="gpu")


def test_probe_prefers_triton_only_with_cuda(monkeypatch, fresh_probe):
    """The interpreter never counts for the automatic choice (it is ~1000x slower)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if not torch.cuda.is_available():
        assert dispatch.resolve("auto") != "triton"
        assert dispatch.why_unavailable("triton") is None  # explicit: the interpreter is fine


def test_probe_without_gpu_device_nodes_does_not_import_torch(tmp_path):
    """Linux without /dev/nvidia*, /dev/kfd or /dev/dxg: the probe answers numba without importing
    torch; with a device node it asks torch (here: torch stubbed to report no CUDA device)."""
    if dispatch.gpu_device_nodes() != []:
        pytest.skip("needs Linux without a GPU device node")
    code = (
        "import sys\n"
        "from agentcir.kernels import dispatch\n"
        "print(dispatch.resolve('auto'), 'torch' in sys.modules, dispatch.why_unavailable('triton', probing=True))"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop(dispatch.ENV_VAR, None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    backend, torch_imported, reason = out.strip().split(" ", 2)
    assert backend == "numba" and torch_imported == "False"
    if importlib.util.find_spec("triton") and importlib.util.find_spec("torch"):
        assert reason.startswith("no GPU device (/dev/nvidia[0-9]*, /dev/kfd, /dev/dxg absent)")
    fake = tmp_path / "torch"  # a device node present: torch is asked
    fake.mkdir()
    (fake / "__init__.py").write_text("class cuda:\n    is_available = staticmethod(lambda: False)\n")
    code = (
        "import sys\n"
        "from agentcir.kernels import dispatch\n"
        "dispatch.gpu_device_nodes = lambda: ['/dev/nvidia0']\n"
        "print(dispatch.why_unavailable('triton', probing=True), 'torch' in sys.modules)"
    )
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    if importlib.util.find_spec("triton"):
        assert (
            out.strip()
            == "no CUDA device is visible (TRITON_INTERPRET=1 runs the kernels in the slow interpreter) True"
        )


def test_auto_fallback_is_logged_once(monkeypatch, fresh_probe, caplog):
    real = dispatch.why_unavailable

    def fake(name, probing=False):
        return "pretend it is missing" if name in ("triton", "numba") else real(name, probing=probing)

    monkeypatch.setattr(dispatch, "why_unavailable", fake)
    with caplog.at_level(logging.INFO, logger="agentcir.kernels"):
        assert dispatch.resolve("auto") == ("torch" if real("torch") is None else "reference")
        dispatch.resolve("auto")
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "numba: pretend it is missing" in msgs[0] and msgs[0].startswith("kernels: auto ->")


def test_explicit_choice_that_cannot_run_raises(monkeypatch, fresh_probe):
    monkeypatch.setattr(
        dispatch, "why_unavailable", lambda n, probing=False: "no CUDA device is visible" if n == "triton" else None
    )
    with pytest.raises(
        K.BackendUnavailableError, match=r"kernel backend 'triton' \(from backend\) cannot run: no CUDA"
    ):
        K.cosine_topk(np.ones((1, 2)), np.ones((3, 2), dtype=np.float32), 1, backend="triton")
    monkeypatch.setenv(dispatch.ENV_VAR, "triton")
    with pytest.raises(K.BackendUnavailableError, match=r"\(from \$AGENTCIR_KERNELS\)"):
        dispatch.resolve("auto")


def test_import_failure_raises_when_explicit_and_falls_back_when_auto(monkeypatch, fresh_probe, caplog):
    real_load = dispatch.load

    def broken(name):
        if name == "numba":
            raise ImportError("llvmlite is broken")
        return real_load(name)

    monkeypatch.setattr(dispatch, "load", broken)
    monkeypatch.setattr(dispatch, "_probe", lambda: "numba")
    with pytest.raises(K.BackendUnavailableError, match="kernel backend 'numba' failed to import: llvmlite is broken"):
        dispatch.backend_module("numba")
    with caplog.at_level(logging.INFO, logger="agentcir.kernels"):
        mod = dispatch.backend_module("auto")
    assert mod.__name__ in ("agentcir.kernels.torch", "agentcir.kernels.reference")
    assert "numba failed to import: llvmlite is broken" in caplog.records[-1].getMessage()


def test_every_backend_name_composes_and_a_bad_one_fails_at_compose_time():
    for name in dispatch.BACKENDS:
        assert compose([f"kernels.backend={name}"])["kernels"]["backend"] == name
    with pytest.raises(
        ConfigError, match="kernels: field 'backend': unknown kernel backend 'cuda'; choose one of auto"
    ):
        compose(["kernels.backend=cuda"])
