"""cosine_topk batch sweep: Q = 1, 4, 16, ..., 4096 queries over one 20k x 512 gallery, so that the
report shows where each path and peer takes over (``report.py`` "batch sweep": the crossover
points). Providers: the numba backend with its autotuned product path (fp32, fp16, bf16) and with
each path forced, faiss ``IndexFlatIP`` with the BLAS threshold lowered, torch matmul + topk."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from _data import FaissFlatIP, as_kind, forced, gallery, lazy, torch_topk, unit
from conftest import as_numpy_ids, round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "cosine_sweep"
BASELINE = "torch-naive-f32"
ROUNDS = 3
_SHARED: dict = {}


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    key = (size["N"], size["d"])
    if key not in _SHARED:  # one gallery (and one faiss index) for every Q of the sweep
        _SHARED.clear()
        G = gallery(size["N"], size["d"])
        _SHARED[key] = {"G": G, "tG": torch.from_numpy(G)}
    x = dict(_SHARED[key])
    x["lazy"] = _SHARED[key].setdefault("lazy", {})
    q = unit(np.random.default_rng(5), size["Q"], size["d"])
    x.update(q=q, tq=torch.from_numpy(q), k=size["k"])
    if with_reference:
        x["ref_ids"] = torch_topk(x["tq"], x["tG"], x["k"]).indices.numpy()
    return x


def _numba(kind):
    return lambda x: K.cosine_topk(x["q"], lazy(x, kind, lambda: as_kind(x["G"], kind)), x["k"], backend="numba")


PROVIDERS = {
    "torch-naive-f32": lambda x: torch_topk(x["tq"], x["tG"], x["k"]),
    "faiss-flatip-blas-f32": lambda x: lazy(x, "faiss", lambda: FaissFlatIP(x["G"])).search(
        x["q"], x["k"], blas_threshold=1
    ),
    "numba-f32": _numba("float32"),
    "numba-f16": _numba("float16"),
    "numba-bf16": _numba("bfloat16"),
    "numba-loop-f32": forced("loop", _numba("float32")),
    "numba-blas-f32": forced("blas", _numba("float32")),
}


def result_ids(out):
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], np.ndarray) and out[1].dtype != np.int32:
        return out[1]
    return as_numpy_ids(out)


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_cosine_sweep(benchmark, inputs, provider, round_):
    size, x = inputs
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_)
