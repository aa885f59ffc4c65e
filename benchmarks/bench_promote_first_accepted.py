"""promote_first_accepted: verification re-rank of each query's ranking."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "promote_first_accepted"
BASELINE = "reference"
ROUNDS = 20


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    rng = np.random.default_rng(10)
    Q, L, A = size["Q"], size["L"], size["A"]
    return dict(
        ids=np.stack([rng.permutation(10 * L)[:L] for _ in range(Q)]).astype(np.int32),
        scores=-np.sort(-rng.random((Q, L)), axis=1).astype(np.float32),
        accepted=rng.random((Q, A)) < 0.1,
    )


PROVIDERS = {
    b: (lambda x, b=b: K.promote_first_accepted(x["ids"], x["scores"], x["accepted"], backend=b))
    for b in ("reference", "numba", "torch")
}


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_promote_first_accepted(benchmark, inputs, provider, round_):
    size, x = inputs
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_)
