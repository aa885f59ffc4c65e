"""uncertainty: the OCTOPUS gate (softmax entropy + top-2/top-1 margin, min-max over queries)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "uncertainty"
BASELINE = "reference"
ROUNDS = 20


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    rng = np.random.default_rng(11)
    return dict(scores=rng.standard_normal((size["Q"], size["L"]), dtype=np.float32) * 0.1)


PROVIDERS = {b: (lambda x, b=b: K.uncertainty(x["scores"], backend=b)) for b in ("reference", "numba", "torch")}


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_uncertainty(benchmark, inputs, provider, round_):
    size, x = inputs
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_)
