"""cosine_topk: numba (autotuned product path, and each path forced; float32, half and int8 galleries,
int8 with and without the exact float32 re-rank) / torch backends vs straightforward numpy and torch, the exact-search peers
(faiss IndexFlatIP at its default and with the BLAS threshold lowered, its best setting; usearch
exact search; hnswlib BFIndex) and the memory-bandwidth bound (numpy reading the gallery).

faiss and hnswlib hold a copy of the gallery; at the 1M-row size they are skipped to keep the
run's memory within a few GB (usearch searches the array itself and runs at every size)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from _data import FaissFlatIP, HnswlibBF, UsearchExact, as_kind, forced, gallery, lazy, numpy_topk, torch_topk, unit
from conftest import as_numpy_ids, round_robin, run_provider
from sizes import ids, sizes

from agentcir import kernels as K

OP = "cosine_topk"
BASELINE = "torch-naive-f32"
ROUNDS = 15
#: providers timed only for a single query (they read the gallery once; they rank nothing)
BOUNDS = ("numpy-sum-read", "numpy-gemv-read")
#: peers that copy the gallery into their own index: run up to this many gallery rows
COPYING_PEERS, COPY_MAX_N = ("faiss-flatip-f32", "faiss-flatip-blas-f32", "hnswlib-bf-f32"), 200_000


def make_inputs(size: dict, with_reference: bool = True) -> dict:
    G = gallery(size["N"], size["d"])
    q = unit(np.random.default_rng(5), size["Q"], size["d"])
    x = dict(q=q, G=G, k=size["k"], tq=torch.from_numpy(q), tG=torch.from_numpy(G))
    if with_reference:
        x["ref_ids"] = K.cosine_topk(q, G, size["k"], backend="reference" if size["N"] < 5000 else "numba").ids
    return x


def _half(x, kind):
    return lazy(x, kind, lambda: as_kind(x["G"], kind))


def _int8(x):
    return lazy(x, "int8", lambda: K.quantize_int8(x["G"]))


def _faiss(x):
    return lazy(x, "faiss", lambda: FaissFlatIP(x["G"]))


PROVIDERS = {
    "numpy-sum-read": lambda x: x["G"].sum(),
    "numpy-gemv-read": lambda x: x["G"] @ x["q"][0],
    "numpy-naive-f32": lambda x: numpy_topk(x["q"], x["G"], x["k"]),
    "torch-naive-f32": lambda x: torch_topk(x["tq"], x["tG"], x["k"]),
    "faiss-flatip-f32": lambda x: _faiss(x).search(x["q"], x["k"]),
    "faiss-flatip-blas-f32": lambda x: _faiss(x).search(x["q"], x["k"], blas_threshold=1),
    "usearch-exact-f32": lambda x: lazy(x, "usearch", lambda: UsearchExact(x["G"])).search(x["q"], x["k"]),
    "hnswlib-bf-f32": lambda x: lazy(x, "hnswlib", lambda: HnswlibBF(x["G"])).search(x["q"], x["k"]),
    "torch-f32": lambda x: K.cosine_topk(x["tq"], x["tG"], x["k"], backend="torch"),
    "numba-f32": lambda x: K.cosine_topk(x["q"], x["G"], x["k"], backend="numba"),
    "numba-f16": lambda x: K.cosine_topk(x["q"], _half(x, "float16"), x["k"], backend="numba"),
    "numba-bf16": lambda x: K.cosine_topk(x["q"], _half(x, "bfloat16"), x["k"], backend="numba"),
    # int8 gallery (per-row scales): the scan alone, and with the exact fp32 re-rank of the
    # default shortlist max(4k, k + 64)
    "numba-int8": lambda x: K.cosine_topk(x["q"], _int8(x), x["k"], backend="numba"),
    "numba-int8-rerank": lambda x: K.cosine_topk(x["q"], _int8(x), x["k"], rerank=x["G"], backend="numba"),
}
#: the two product paths of the numba backend, forced (numba-f32 takes the autotuned one)
PROVIDERS["numba-loop-f32"] = forced("loop", PROVIDERS["numba-f32"])
PROVIDERS["numba-blas-f32"] = forced("blas", PROVIDERS["numba-f32"])


def result_ids(out):
    if not isinstance(out, tuple) and not hasattr(out, "indices") and not hasattr(out, "ids"):
        return None  # the bandwidth probes
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], np.ndarray) and out[1].dtype != np.int32:
        return out[1]  # the peers' (distances, int64 / uint64 labels)
    return as_numpy_ids(out)


@pytest.fixture(scope="module", params=sizes(OP), ids=ids(OP))
def inputs(request):
    return request.param, make_inputs(request.param)


@pytest.mark.parametrize("provider,round_", round_robin(PROVIDERS, ROUNDS))
def test_cosine_topk(benchmark, inputs, provider, round_):
    size, x = inputs
    if provider in BOUNDS and size["Q"] != 1:
        pytest.skip("bandwidth bound: single-query sizes only")
    if provider in COPYING_PEERS and size["N"] > COPY_MAX_N:
        pytest.skip(f"{provider} copies the gallery: sizes up to N={COPY_MAX_N} only")
    run_provider(benchmark, sys.modules[__name__], size, provider, x, round_)
