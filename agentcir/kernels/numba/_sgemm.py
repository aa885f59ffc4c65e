"""The process BLAS's ``cblas_sgemm``, called by numba's own threads: the ``blas`` product path.

The ``blas`` path multiplies gallery tiles with the BLAS numpy uses (OpenBLAS or MKL: their
kernels are chosen per ISA at run time, AVX2, AVX-512, AMX, NEON/SVE) while every pass after the
product (selection, aggregation, fusion) stays in the fused numba kernels. Each numba thread calls
``sgemm`` on its own sub-tile and folds the scores while they are in its cache; for the duration
of the kernel the library runs on one thread (:func:`one_thread`), so no second thread pool
competes with numba's and no pass waits for a serial fold after a parallel product. The thread
count is the library's, process-wide: a numpy product another Python thread runs meanwhile runs
on one thread too.

:func:`find` takes the library numpy loaded (threadpoolctl lists it with its path), resolves its
``cblas_sgemm`` and its own thread-count entry points (OpenBLAS builds may prefix and suffix the
names: numpy's wheels ship ``scipy_cblas_sgemm64_``), reads its integer width (ILP64: 64-bit
``blasint``) and checks one small product against numpy's before anything uses it. Where that fails (Accelerate,
BLIS, a library it cannot check) :func:`find` gives ``None`` and the ``blas`` path multiplies
whole tiles with numpy's ``matmul`` and runs the passes serially (:mod:`._blas`).

The kernels receive the function as :class:`Sgemm` ``(address, ints)``: ``address`` 0 selects the
numba microkernels (``loop``); ``ints`` is an empty array whose dtype is the library's integer, so
a kernel compiled (and cached) for one integer width is never called with the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

log = logging.getLogger(__name__)

#: what the fused kernels call: ``address`` of ``cblas_sgemm`` (0: the ``loop`` microkernels) and
#: ``ints``, an empty array of the library's integer type
Sgemm = namedtuple("Sgemm", "address ints")
#: the ``loop`` path's value: no BLAS call
LOOP = Sgemm(np.int64(0), np.empty(0, dtype=np.int64))
#: CBLAS constants (cblas.h): row-major storage, no transpose, transpose
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


@intrinsic
def sgemm_nt(typingctx, blas, A, B, C, m, n):
    """``C[:m, :n] = A[:m] @ B[:n].T`` by the library's ``cblas_sgemm`` (float32, 2-d arrays with unit
    stride along their rows; the leading dimensions are their row strides)."""
    if not (
        isinstance(blas, types.BaseTuple)
        and all(isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.float32 for a in (A, B, C))
    ):
        return None

    def codegen(context, builder, sig, args):
        bits = sig.args[0].types[1].dtype.bitwidth
        i32, blasint, f32 = ir.IntType(32), ir.IntType(bits), ir.FloatType()
        fp = f32.as_pointer()
        fnty = ir.FunctionType(
            ir.VoidType(),
            [i32, i32, i32, blasint, blasint, blasint, f32, fp, blasint, fp, blasint, f32, fp, blasint],
        )
        address = builder.extract_value(args[0], 0)
        fn = builder.inttoptr(address, fnty.as_pointer())
        a, b, c = (context.make_array(t)(context, builder, v) for t, v in zip(sig.args[1:4], args[1:4]))

        def as_blasint(v):  # an int64 value as the library's integer
            return builder.trunc(v, blasint) if bits != 64 else v

        def ld(x):  # leading dimension: the row stride in elements, at least the row length (BLAS
            # refuses a smaller one, which numpy may give a single row)
            rows = builder.udiv(builder.extract_value(x.strides, 0), ir.IntType(64)(4))
            width = builder.extract_value(x.shape, 1)
            return as_blasint(builder.select(builder.icmp_signed("<", rows, width), width, rows))

        m, n = (as_blasint(context.cast(builder, v, t, types.int64)) for v, t in zip(args[4:6], sig.args[4:6]))
        k = as_blasint(builder.extract_value(a.shape, 1))
        builder.call(
            fn,
            [
                i32(_ROW_MAJOR),
                i32(_NO_TRANS),
                i32(_TRANS),
                m,
                n,
                k,
                f32(1.0),
                a.data,
                ld(a),
                b.data,
                ld(b),
                f32(0.0),
                c.data,
                ld(c),
            ],
        )
        return context.get_dummy_value()

    return types.void(blas, A, B, C, m, n), codegen


@njit(cache=True)
def _check(blas, A, B, C):
    sgemm_nt(blas, A, B, C, A.shape[0], B.shape[0])


@dataclass(frozen=True)
class Library:
    """A loaded BLAS (``api`` ``openblas`` or ``mkl``, the file at ``path``): its ``cblas_sgemm``
    (:attr:`sgemm`, exported as :attr:`symbol`) and its own entry points that read and set its thread
    count for the whole process (threadpoolctl's setter acts only in the first Python thread that used it)."""

    api: str
    path: str
    sgemm: Sgemm
    symbol: str
    get_threads: Callable[[], int]
    set_threads: Callable[[int], object]

    def __repr__(self) -> str:
        bits = self.sgemm.ints.dtype.itemsize * 8
        return f"{self.api} {self.symbol} ({bits}-bit integers) in {self.path}"


def _integer_dtype(api: str, lib: ctypes.CDLL, prefix: str, suffix: str) -> np.dtype:
    """The library's BLAS integer: int64 for an ILP64 build, else int32."""
    if api == "openblas":
        if suffix.startswith("64"):
            return np.dtype(np.int64)
        config = getattr(lib, f"{prefix}openblas_get_config{suffix}", None)
        if config is not None:
            config.restype = ctypes.c_char_p
            return np.dtype(np.int64 if b"USE64BITINT" in (config() or b"") else np.int32)
        return np.dtype(np.int32)
    # MKL's single dynamic library: LP64 unless the interface layer is switched to ILP64
    return np.dtype(np.int64 if os.environ.get("MKL_INTERFACE_LAYER", "").upper().startswith("ILP64") else np.int32)


def _thread_functions(api: str, lib: ctypes.CDLL, prefix: str, suffix: str):
    """The library's own get / set of its process-wide thread count, or None."""
    names = (
        (f"{prefix}openblas_get_num_threads{suffix}", f"{prefix}openblas_set_num_threads{suffix}")
        if api == "openblas"
        else ("MKL_Get_Max_Threads", "MKL_Set_Num_Threads")
    )
    get, put = (getattr(lib, n, None) for n in names)
    if get is None or put is None:
        return None
    get.restype, get.argtypes = ctypes.c_int, []
    put.restype, put.argtypes = None, [ctypes.c_int]
    return get, put


def _numpy_blas(controllers):
    """The BLAS controller of numpy's own library among those loaded (the first one otherwise)."""
    own = [c for c in controllers if "numpy" in os.path.dirname(c.filepath).lower()]
    return (own or controllers or [None])[0]


#: the names ``cblas_sgemm`` has in the builds numpy uses (numpy's wheels: scipy-openblas, ILP64 / LP64)
SYMBOLS = ("scipy_cblas_sgemm64_", "scipy_cblas_sgemm", "cblas_sgemm64_", "cblas_sgemm")


def library_at(path: str, api: str) -> Library | None:
    """The :class:`Library` in the loaded file ``path`` (``api`` ``openblas`` or ``mkl``), its product
    checked against numpy's; None when it lacks ``cblas_sgemm`` or its thread count, or fails the check
    (logged)."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    symbol = next((name for name in SYMBOLS if hasattr(lib, name)), None)
    if symbol is None:
        return None
    prefix, suffix = symbol.split("cblas_sgemm")  # the build's decoration of every exported name
    threads = _thread_functions(api, lib, prefix, suffix)
    if threads is None:
        return None
    address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
    ints = np.empty(0, _integer_dtype(api, lib, prefix, suffix))
    library = Library(api, path, Sgemm(np.int64(address), ints), symbol, *threads)
    if not reproduces_numpy(library.sgemm):
        log.warning("the blas product path multiplies serially: %r did not reproduce numpy's product", library)
        return None
    return library


def reproduces_numpy(sgemm: Sgemm) -> bool:
    """Whether ``sgemm`` computes a small product (odd sizes, a strided output) as numpy does."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((5, 7), dtype=np.float32), rng.standard_normal((3, 7), dtype=np.float32)
    C = np.full((5, 4), np.nan, dtype=np.float32)
    _check(sgemm, A, B, C[:, 1:])
    return bool(np.allclose(C[:, 1:], A @ B.T, rtol=1e-5, atol=1e-6) and np.isnan(C[:, 0]).all())


@lru_cache(maxsize=1)
def find() -> Library | None:
    """numpy's BLAS with a ``cblas_sgemm`` that numba threads can call, checked; None where there is none."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    controllers = [
        c
        for c in ThreadpoolController().lib_controllers
        if c.user_api == "blas" and c.internal_api in ("openblas", "mkl")
    ]
    controller = _numpy_blas(controllers)
    return None if controller is None else library_at(controller.filepath, controller.internal_api)


_held = {"calls": 0, "before": 1}
_held_lock = threading.Lock()


@contextlib.contextmanager
def one_thread(library: Library | None) -> Iterator[None]:
    """The library on one thread inside (the numba threads that call it are the parallelism); its own
    count is restored when the last of the calls inside such a block in any Python thread ends."""
    if library is None:
        yield
        return
    with _held_lock:
        if _held["calls"] == 0:
            _held["before"] = library.get_threads()
            if _held["before"] != 1:
                library.set_threads(1)
        _held["calls"] += 1
    try:
        yield
    finally:
        with _held_lock:
            _held["calls"] -= 1
            if _held["calls"] == 0 and _held["before"] != 1:
                library.set_threads(_held["before"])


def for_path(path: str) -> Sgemm | None:
    """What the fused kernels receive for the product ``path`` (:func:`agentcir.kernels.tune.choose`):
    :data:`LOOP` for ``loop``, the library's :class:`Sgemm` for ``blas``, None for ``blas`` without a
    callable library (the caller multiplies whole tiles with numpy, :mod:`._blas`)."""
    if path != "blas":
        return LOOP
    library = find()
    return None if library is None else library.sgemm


@contextlib.contextmanager
def calling(sgemm: Sgemm) -> Iterator[None]:
    """The context a fused kernel called with ``sgemm`` runs in: the library on one thread when the
    kernel calls it, nothing otherwise."""
    with one_thread(find() if sgemm.address else None):
        yield
