"""The Triton kernels compile for a real GPU target (H100/H200, sm_90) on this CPU machine.

The interpreter tests check what the kernels compute; this checks that the same launches,
with the exact specialisation and constexprs the ops use, go through Triton's CUDA compiler
down to cubin and fit the device's shared memory (``agentcir.kernels.triton.aot``). It runs
in a subprocess because the test session has ``TRITON_INTERPRET=1`` set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

KERNELS = {"_cosine_kernel", "_proxy_kernel", "_octopus_kernel", "_gap_kernel"}


def _compile(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = ["-c", code] if code else ["-m", "agentcir.kernels.triton.aot", *args]
    return subprocess.run([sys.executable, *cmd], env=env, capture_output=True, text=True, timeout=900)


def test_every_kernel_compiles_for_sm90_within_shared_memory():
    r = _compile("--arch", "90", "--kinds", "float32,bfloat16")
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    res = json.loads(r.stdout)["sm_90"]
    rows = res["kernels"]
    assert {x["kernel"] for x in rows} == KERNELS
    assert all(x["target"] == "cuda:90" and x["cubin_bytes"] > 0 for x in rows)
    assert max(x["shared_bytes"] for x in rows) <= res["shared_limit"]
    # both exclusion variants, every aggregation, OCTOPUS with and without the caption channel
    const = [x["constexprs"] for x in rows]
    assert {c.get("HAS_EXCL") for c in const if "HAS_EXCL" in c} == {True, False}
    assert {c["AGG"] for c in const if "AGG" in c} == {0, 1, 2}
    assert {c["HAS_V"] for c in const if "HAS_V" in c} == {True, False}
    # the largest k done on the device compiles too (larger k goes to the torch backend)
    from agentcir.kernels.triton._common import MAX_DEVICE_K

    assert max(c.get("KP", 0) for c in const) == MAX_DEVICE_K


def test_aot_refuses_the_interpreter_and_unknown_dtypes():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "agentcir.kernels.triton.aot"], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 2
    assert "error: agentcir.kernels.triton.aot compiles real kernels: unset TRITON_INTERPRET" in r.stderr
    r = _compile("--kinds", "float64")
    assert r.returncode == 2 and "error: aot: unknown gallery dtype(s) ['float64']" in r.stderr


def test_aot_fails_when_a_kernel_needs_more_shared_memory_than_the_device_has():
    code = (
        "import sys; from agentcir.kernels.triton import aot; aot.SHARED_LIMIT[90] = 1024; "
        "sys.exit(aot.main(['--arch', '90', '--kinds', 'float32']))"
    )
    r = _compile(code=code)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "error: sm_90 _cosine_kernel" in r.stderr and "bytes of shared memory, over the device's 1024" in r.stderr
