"""The ``blas`` product path's BLAS calls from numba threads (:mod:`agentcir.kernels.numba._sgemm`):
the library numpy loaded is found and checked, both integer widths (ILP64 and LP64 builds) multiply
correctly on strided views, every fused op takes its products from the function it is given, the
library runs on one thread meanwhile, and a library that does not reproduce numpy's product is refused."""

from __future__ import annotations

import dataclasses
import os
import threading

import numpy as np
import pytest
from kernel_checks import TOL, as_kind, unit_rows

pytest.importorskip("numba")
pytest.importorskip("threadpoolctl")

from numba import carray, cfunc, njit, types  # noqa: E402

from agentcir import kernels as K  # noqa: E402
from agentcir.kernels import tune  # noqa: E402
from agentcir.kernels.numba import _sgemm  # noqa: E402


@pytest.fixture(scope="module")
def library():
    lib = _sgemm.find()
    if lib is None:
        pytest.skip("numpy's BLAS has no cblas_sgemm that numba threads can call here")
    return lib


@njit(cache=False)
def _into(sgemm, A, B, C, m, n):
    _sgemm.sgemm_nt(sgemm, A, B, C, m, n)


def _products_match(sgemm):
    """``C[:m, :n] = A[:m] @ B[:n].T`` on row views of larger arrays (leading dimensions != widths), odd sizes."""
    rng = np.random.default_rng(7)
    A = rng.standard_normal((37, 70), dtype=np.float32)
    B = rng.standard_normal((300, 70), dtype=np.float32)
    for m, n, lo in ((1, 1, 0), (5, 17, 3), (37, 283, 17)):
        C = np.full((40, 400), np.nan, dtype=np.float32)
        _into(sgemm, A, B[lo : lo + n], C[:, 50:], m, n)
        np.testing.assert_allclose(C[:m, 50 : 50 + n], A[:m] @ B[lo : lo + n].T, rtol=2e-5, atol=2e-5)
        assert np.isnan(C[:, :50]).all() and np.isnan(C[:, 50 + n :]).all() and np.isnan(C[m:]).all()
    one = np.lib.stride_tricks.as_strided(A[3], (1, 70), (0, 4))  # one row whose row stride numpy leaves at 0
    C = np.zeros((1, 5), dtype=np.float32)
    _into(sgemm, one, B[:5], C, 1, 5)
    np.testing.assert_allclose(C, A[3:4] @ B[:5].T, rtol=2e-5, atol=2e-5)


def test_numpys_blas_is_found_and_multiplies(library):
    assert library.symbol in _sgemm.SYMBOLS and os.path.isfile(library.path)
    assert library.sgemm.ints.dtype in (np.int32, np.int64)
    _products_match(library.sgemm)


def test_a_32_bit_integer_build_multiplies():
    """An LP64 OpenBLAS (scipy-openblas32, named ``scipy_cblas_sgemm``) is read as 32-bit and multiplies."""
    s32 = pytest.importorskip("scipy_openblas32")
    path = os.path.join(s32.get_lib_dir(), "libscipy_openblas.so")
    if not os.path.isfile(path):
        pytest.skip(f"no {path}")
    lib = _sgemm.library_at(path, "openblas")
    assert lib is not None and lib.symbol == "scipy_cblas_sgemm" and lib.sgemm.ints.dtype == np.int32
    assert "32-bit integers" in repr(lib)
    _products_match(lib.sgemm)


def _plus_one(ints):
    """A ``cblas_sgemm`` stand-in (row-major, B transposed) that adds 1 to every product."""
    i, f = types.int64 if ints == np.int64 else types.int32, types.CPointer(types.float32)
    sig = types.void(types.int32, types.int32, types.int32, i, i, i, types.float32, f, i, f, i, types.float32, f, i)

    @cfunc(sig)
    def plus_one(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        A, B, C = carray(a, (m, lda)), carray(b, (n, ldb)), carray(c, (m, ldc))
        for r in range(m):
            for j in range(n):
                s = np.float32(1.0)
                for t in range(k):
                    s += A[r, t] * B[j, t]
                C[r, j] = s

    return plus_one


def test_every_fused_op_takes_its_products_from_the_library(library, monkeypatch, kind):
    """With ``blas`` forced and a library whose sgemm adds 1, cosine's top-k scores are the reference's + 1
    and every other op moves off the reference: each op's products come from the function it is given."""
    fake = _plus_one(library.sgemm.ints.dtype)
    sgemm = _sgemm.Sgemm(np.int64(fake.address), library.sgemm.ints)
    monkeypatch.setattr(_sgemm, "find", lambda: dataclasses.replace(library, sgemm=sgemm))
    monkeypatch.setenv(tune.ENV_PRODUCT, "blas")
    rng = np.random.default_rng(11)
    G = as_kind(unit_rows(rng, 700, 24), kind)
    X, P, C = unit_rows(rng, 9, 24), unit_rows(rng, 9, 3, 24), as_kind(unit_rows(rng, 700, 24), kind)
    ref = K.cosine_topk(X, G, 5, backend="reference")
    got = K.cosine_topk(X, G, 5, backend="numba")
    np.testing.assert_allclose(got.scores, ref.scores + 1, atol=TOL[kind])
    for op in (
        lambda b: K.octopus_topk(X, P, X, G, 5, visual=X, captions=C, backend=b).scores,
        lambda b: K.octopus_weights(X, P, G, backend=b),
        lambda b: K.proxy_scores_topk(P, G, 5, agg="max", backend=b).scores,
    ):
        assert not np.allclose(op("numba"), op("reference"), atol=1e-3)
    monkeypatch.setattr(_sgemm, "find", lambda: library)
    np.testing.assert_allclose(K.cosine_topk(X, G, 5, backend="numba").scores, ref.scores, atol=TOL[kind])


def test_the_library_runs_on_one_thread_while_numba_calls_it(library, monkeypatch):
    before = library.get_threads()
    seen = []
    real = _sgemm.one_thread

    def spy(lib):
        cm = real(lib)

        class Watch:
            def __enter__(self):
                cm.__enter__()
                seen.append(lib.get_threads() if lib else None)

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

        return Watch()

    monkeypatch.setattr(_sgemm, "one_thread", spy)
    monkeypatch.setenv(tune.ENV_PRODUCT, "blas")
    rng = np.random.default_rng(2)
    K.cosine_topk(unit_rows(rng, 20, 16), unit_rows(rng, 500, 16), 3, backend="numba")
    assert seen == [1]
    assert library.get_threads() == before
    monkeypatch.setenv(tune.ENV_PRODUCT, "loop")
    K.cosine_topk(unit_rows(rng, 20, 16), unit_rows(rng, 500, 16), 3, backend="numba")
    assert seen == [1, None]  # the loop path leaves the library alone


def test_overlapping_calls_from_two_python_threads_restore_the_count_once(library):
    """The count goes to 1 when the first call enters and back when the last one leaves, however the
    calls of two Python threads overlap, whichever thread enters first (the library's own setter: the
    process-wide count, from any thread)."""
    before = library.get_threads()
    first_in, second_out = threading.Event(), threading.Event()
    seen = []

    def first():
        with _sgemm.one_thread(library):
            first_in.set()
            second_out.wait(10)
            seen.append(library.get_threads())  # the other call has left: still 1

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(10)
    with _sgemm.one_thread(library):
        seen.append(library.get_threads())
    second_out.set()
    t.join(10)
    assert seen == [1, 1]
    assert library.get_threads() == before


def test_a_library_that_does_not_reproduce_numpy_is_refused(library, caplog):
    wrong = _plus_one(library.sgemm.ints.dtype)
    assert _sgemm.reproduces_numpy(library.sgemm)
    assert not _sgemm.reproduces_numpy(_sgemm.Sgemm(np.int64(wrong.address), library.sgemm.ints))
