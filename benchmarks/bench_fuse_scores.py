"""fuse_scores: min-max weighted fusion of 3 scored id lists per query."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "fuse_scores"
BASELINE = "reference"
ROUNDS = 15


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    rng = np.random.default_rng(8)
    V, Q, L = size["V"], size["Q"], size["L"]
    idx = np.stack([np.stack([rng.choice(size["N"], L, replace=False) for _ in range(Q)]) for _ in range(V)])
    sc = -np.sort(-rng.random((V, Q, L)), axis=-1).astype(np.float32)
    return dict(ids=idx.astype(np.int32), scores=sc, k=size["k"], w=np.array([1.0, 0.5, 2.0]))


PROVIDERS = {
    b: (lambda x, b=b: K.fuse_scores(x["scores"], x["k"], ids=x["ids"], weights=x["w"], backend=b))
    for b in ("reference", "numba", "torch")
}


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_fuse_scores(benchmark, inputs, provider, round_):
    size, x = inputs
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_)
