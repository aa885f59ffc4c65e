"""proxy_scores_topk (mean and logsumexp): fused tiles vs one [Q, K, N] torch tensor."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from _data import gallery, torch_proxy, unit
from conftest import as_numpy_ids, round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "proxy_scores_topk"
BASELINE = "torch-naive-mean"
ROUNDS = 5


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    G = gallery(size["N"], size["d"])
    P = unit(np.random.default_rng(3), size["Q"], size["K"], size["d"])
    return dict(G=G, P=P, k=size["k"], tG=torch.from_numpy(G), tP=torch.from_numpy(P))


PROVIDERS = {}
for _agg in ("mean", "logsumexp"):
    PROVIDERS[f"torch-naive-{_agg}"] = lambda x, a=_agg: torch_proxy(x["tP"], x["tG"], x["k"], a)
    PROVIDERS[f"torch-{_agg}"] = lambda x, a=_agg: K.proxy_scores_topk(x["tP"], x["tG"], x["k"], agg=a, backend="torch")
    PROVIDERS[f"numba-{_agg}"] = lambda x, a=_agg: K.proxy_scores_topk(x["P"], x["G"], x["k"], agg=a, backend="numba")


def result_ids(out):
    return as_numpy_ids(out)


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_proxy_scores_topk(benchmark, inputs, provider, round_):
    size, x = inputs
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_, memory=provider.endswith("mean"))
