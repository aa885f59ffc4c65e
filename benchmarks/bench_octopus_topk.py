"""octopus_topk: the fused two-pass kernels vs the straightforward torch implementation
(matmuls, elementwise, topk over [Q, K, N] and [Q, N]); time, peak extra memory, and the
top-10 agreement of half-precision galleries with the float32 result. For a single query the
read bounds too: a numpy sum over the images and captions once, and over the bytes the two
passes read (images twice: the weight pass, then the fusion pass with the captions)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from _data import as_kind, forced, lazy, octopus_inputs, torch_octopus
from conftest import as_numpy_ids, round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "octopus_topk"
BASELINE = "torch-naive-f32"
ROUNDS = 11
#: providers timed only for a single query (they read the galleries; they rank nothing)
BOUNDS = ("numpy-sum-read", "numpy-sum-read-2pass")


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    x = octopus_inputs(size["Q"], size["K"], size["N"], size["d"])
    x["k"] = size["k"]
    x["t"] = {key: torch.from_numpy(x[key]) for key in ("ref", "P", "qt", "qv", "I", "C", "exclude")}
    if with_reference:
        x["ref_ids"] = PROVIDERS[BASELINE](x).indices.numpy()
    return x


def _kernel(x, kind, backend):
    I = lazy(x, f"I-{kind}", lambda: as_kind(x["I"], kind))
    C = lazy(x, f"C-{kind}", lambda: as_kind(x["C"], kind))
    return K.octopus_topk(
        x["ref"], x["P"], x["qt"], I, x["k"], visual=x["qv"], captions=C, exclude=x["exclude"], backend=backend
    )


def _int8(x, rerank: bool):
    I = lazy(x, "I-int8", lambda: K.quantize_int8(x["I"]))
    C = lazy(x, "C-int8", lambda: K.quantize_int8(x["C"]))
    kw = dict(rerank_images=x["I"], rerank_captions=x["C"]) if rerank else {}
    return K.octopus_topk(
        x["ref"], x["P"], x["qt"], I, x["k"], visual=x["qv"], captions=C, exclude=x["exclude"], backend="numba", **kw
    )


def _torch_backend(x):
    t = x["t"]
    return K.octopus_topk(
        t["ref"],
        t["P"],
        t["qt"],
        t["I"],
        x["k"],
        visual=t["qv"],
        captions=t["C"],
        exclude=x["exclude"],
        backend="torch",
    )


PROVIDERS = {
    "numpy-sum-read": lambda x: x["I"].sum() + x["C"].sum(),
    "numpy-sum-read-2pass": lambda x: x["I"].sum() + x["I"].sum() + x["C"].sum(),
    "torch-naive-f32": lambda x: torch_octopus(
        *(x["t"][key] for key in ("ref", "P", "qt", "qv", "I", "C", "exclude")), k=x["k"]
    ),
    "torch-f32": _torch_backend,
    "numba-f32": lambda x: _kernel(x, "float32", "numba"),
    "numba-f16": lambda x: _kernel(x, "float16", "numba"),
    "numba-bf16": lambda x: _kernel(x, "bfloat16", "numba"),
    "numba-int8": lambda x: _int8(x, False),
    "numba-int8-rerank": lambda x: _int8(x, True),
}
#: the two product paths of the numba backend, forced (numba-f32 takes the autotuned one)
PROVIDERS["numba-loop-f32"] = forced("loop", PROVIDERS["numba-f32"])
PROVIDERS["numba-blas-f32"] = forced("blas", PROVIDERS["numba-f32"])


def result_ids(out):
    return None if isinstance(out, (float, np.floating)) else as_numpy_ids(out)


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_octopus_topk(benchmark, inputs, provider, round_):
    size, x = inputs
    if provider in BOUNDS and size["Q"] != 1:
        pytest.skip("read bound: single-query sizes only")
    run_provider(
        benchmark, sys.modules[__name__], size, provider, x, round_, memory=size["Q"] > 1 and provider not in BOUNDS
    )
