"""octopus_weights: the streamed gap pass vs the straightforward torch one ([Q, K, N] buffer)."""

from __future__ import annotations

import sys

import pytest
import torch
from _data import as_kind, lazy, octopus_inputs, torch_octopus_weights
from conftest import round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "octopus_weights"
BASELINE = "torch-naive-f32"
ROUNDS = 5


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    x = octopus_inputs(size["Q"], size["K"], size["N"], size["d"])
    x["t"] = {key: torch.from_numpy(x[key]) for key in ("ref", "P", "I")}
    return x


def _kernel(x, kind):
    I = lazy(x, f"I-{kind}", lambda: as_kind(x["I"], kind))
    return K.octopus_weights(x["ref"], x["P"], I, backend="numba")


PROVIDERS = {
    "torch-naive-f32": lambda x: torch_octopus_weights(x["t"]["ref"], x["t"]["P"], x["t"]["I"]),
    "torch-f32": lambda x: K.octopus_weights(x["t"]["ref"], x["t"]["P"], x["t"]["I"], backend="torch"),
    "numba-f32": lambda x: _kernel(x, "float32"),
    "numba-f16": lambda x: _kernel(x, "float16"),
}


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_octopus_weights(benchmark, inputs, provider, round_):
    size, x = inputs
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_)
