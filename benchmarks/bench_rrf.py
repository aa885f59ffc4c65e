"""rrf: reciprocal rank fusion of 3 ranked lists (XR's variants) or 3 dense score matrices per query."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "rrf"
BASELINE = "reference"
ROUNDS = 15


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    rng = np.random.default_rng(7)
    if "L" in size:  # ranked id lists [V, Q, L], each a sample without repetition from N items
        data = np.stack(
            [
                np.stack([rng.choice(size["N"], size["L"], replace=False) for _ in range(size["Q"])])
                for _ in range(size["V"])
            ]
        ).astype(np.int32)
    else:  # dense score matrices [V, Q, N]
        data = rng.standard_normal((size["V"], size["Q"], size["N"]), dtype=np.float32)
    return dict(data=data, k=size["k"])


PROVIDERS = {b: (lambda x, b=b: K.rrf(x["data"], x["k"], backend=b)) for b in ("reference", "numba", "torch")}


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_rrf(benchmark, inputs, provider, round_):
    size, x = inputs
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_)
