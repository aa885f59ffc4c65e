"""xr_rerank: XR stage-2 re-rank of the top-H head of each query's ranking."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "xr_rerank"
BASELINE = "reference"
ROUNDS = 20


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    rng = np.random.default_rng(9)
    Q, L, H = size["Q"], size["L"], size["H"]
    return dict(
        ids=np.stack([rng.permutation(10 * L)[:L] for _ in range(Q)]).astype(np.int32),
        sims=-np.sort(-rng.random((Q, L)), axis=1).astype(np.float32),
        qa=(rng.integers(0, 4, (Q, H)) / 3).astype(np.float32),
        cap=(rng.integers(0, 4, (Q, H)) / 3).astype(np.float32),
    )


PROVIDERS = {
    b: (lambda x, b=b: K.xr_rerank(x["ids"], x["sims"], x["qa"], x["cap"], backend=b))
    for b in ("reference", "numba", "torch")
}


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_xr_rerank(benchmark, inputs, provider, round_):
    size, x = inputs
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_)
