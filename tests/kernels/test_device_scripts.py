"""The scripts a lent GPU machine runs (``benchmarks/gpu_host.sh``) still run: device time is scarce, so a
script broken by a change to the kernels must fail here, not there. ``gpu_check.py --smoke`` checks both
GPU product paths under the Triton interpreter; the CPU scripts run on tiny shapes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentcir.kernels.dispatch import why_unavailable

ROOT = Path(__file__).parents[2]


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTCIR_KERNELS_AUTOTUNE": "0", **env}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=600)


def test_gpu_host_script_parses():
    r = subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_host.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
@pytest.mark.skipif(why_unavailable("triton") is not None, reason="triton cannot run here")
def test_gpu_check_smoke_checks_both_paths():
    r = _run("benchmarks/gpu_check.py", "--smoke", TRITON_INTERPRET="1")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [x for x in r.stdout.splitlines() if x.startswith("correctness")]
    assert lines and all(x.endswith(": ok") for x in lines)
    for path in ("loop", "blas"):  # every op, dtype and shape on each path
        assert sum(f" {path} " in x for x in lines) == len(lines) // 2


def test_cpu_scripts_run_on_tiny_shapes():
    pytest.importorskip("torch")
    r = _run("benchmarks/torch_selection.py", "--rounds", "1", "--items", "3000")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("float first") == 3
    r = _run("benchmarks/thread_scaling.py", "--threads", "1", "--rows", "600", "--rounds", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("threads   1") == 8
    for name in ("octopus loop", "octopus blas", "weights loop", "weights blas"):
        assert f"threads   1  {name}" in r.stdout
