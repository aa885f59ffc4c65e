"""Reading pickles that arrive with released data (features, captions) without running code.

``pickle.load`` calls whatever a file names (``os.system`` included). :func:`safe_load`
reads a pickle with an unpickler that resolves only the globals needed to rebuild plain
data: lists, dicts, strings, numbers, numpy arrays and torch tensors. Any other global
is refused before it is called (:class:`UnsafePickleError`, an :class:`InputError`).

Every pickle protocol is read. Protocols 0-2 write bytes (an array's data) as a call of
``_codecs.encode(text, "latin1")``: allowed with that encoding only. Protocol 5 rebuilds an
array with numpy's ``_frombuffer`` from in-band bytes: allowed for plain (non-object) dtypes.

A pickled dtype's state can lie about its flags (an object dtype marked as holding no
objects would have raw bytes from the file read as object pointers): every array is
rebuilt with a clean copy of its dtype, made from the dtype's description, before its data
is read.

Torch tensors pickled with plain ``pickle.dump`` (the OCTOPUS/CoVR ``preload/*.pkl``
files) name ``torch._utils._rebuild_tensor_v2`` and ``torch.storage._load_from_bytes``;
torch's own ``_load_from_bytes`` calls ``torch.load(weights_only=False)`` on the embedded
bytes, so it is replaced here by ``torch.load(weights_only=True)`` (torch's restricted
unpickler), which refuses code in the embedded payload too. torch is imported only when
a file holds tensors.
"""

from __future__ import annotations

import importlib
import io
import pickle
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = ["UnsafePickleError", "safe_load", "safe_loads", "ALLOWED"]


class UnsafePickleError(InputError):
    """A pickle names a global outside the allow-list (it would run code)."""


def _torch():
    try:
        import torch
    except ImportError:
        raise InputError("this pickle holds torch tensors: reading it needs torch (pip install torch)") from None
    return torch


def _load_storage_from_bytes(b: bytes):
    torch = _torch()
    try:
        return torch.load(io.BytesIO(b), weights_only=True)
    except pickle.UnpicklingError as e:
        raise UnsafePickleError(
            f"a tensor's embedded payload was refused by torch's weights-only loader: {str(e).splitlines()[0]}"
        ) from None


def _rebuild_tensor_v2(*args):
    return _torch()._utils._rebuild_tensor_v2(*args)


def _attr(module: str, name: str):
    """A function returning ``module.name`` (imported on first use)."""
    return lambda: getattr(importlib.import_module(module), name)


def _multiarray(name: str):
    """A function returning ``numpy``'s ``multiarray.<name>`` (``numpy._core``, or ``numpy.core`` before numpy 2)."""

    def get():
        try:
            from numpy._core import multiarray
        except ImportError:  # numpy < 2
            from numpy.core import multiarray
        return getattr(multiarray, name)

    return get


def _latin1(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as protocols 0-2 use it for bytes: text to latin-1 bytes, nothing else."""
    if not isinstance(obj, str) or str(encoding).lower().replace("_", "-") not in ("latin1", "latin-1", "iso-8859-1"):
        raise UnsafePickleError(
            f"refused '_codecs.encode' with encoding {encoding!r}: a pickle's bytes are latin-1 text"
        )
    return obj.encode("latin-1", errors="strict")


def _clean_dtype(dt):
    """``dt`` made again from its description: flags computed by numpy, not read from a pickle."""
    import numpy as np

    if dt.fields is not None:
        names = list(dt.names)
        return np.dtype(
            {
                "names": names,
                "formats": [_clean_dtype(dt.fields[n][0]) for n in names],
                "offsets": [dt.fields[n][1] for n in names],
                "itemsize": dt.itemsize,
            }
        )
    if dt.subdtype is not None:
        return np.dtype((_clean_dtype(dt.subdtype[0]), dt.subdtype[1]))
    return np.dtype(dt.str)


def _array_class():
    """``numpy.ndarray`` for the unpickler: arrays whose ``__setstate__`` takes a clean dtype."""
    import numpy as np

    global _SafeArray
    if _SafeArray is None:

        class SafeArray(np.ndarray):
            def __setstate__(self, state):
                if not isinstance(state, tuple) or len(state) not in (4, 5):
                    raise UnsafePickleError("refused an array state that is not numpy's")
                state = list(state)
                i = len(state) - 3  # (version?, shape, dtype, is_fortran, data)
                if not isinstance(state[i], np.dtype):
                    raise UnsafePickleError(f"refused an array whose dtype is {type(state[i]).__name__}")
                state[i] = _clean_dtype(state[i])
                if state[i].hasobject and not isinstance(state[-1], list):
                    raise UnsafePickleError("refused an object array whose data are raw bytes")
                super().__setstate__(tuple(state))

        _SafeArray = SafeArray
    return _SafeArray


_SafeArray = None


def _plain(obj: Any, seen: dict | None = None) -> Any:
    """``obj`` with every array of the unpickler's class turned back into a plain ``numpy.ndarray``."""
    seen = {} if seen is None else seen
    if id(obj) in seen:
        return seen[id(obj)]
    if _SafeArray is not None and isinstance(obj, _SafeArray):
        import numpy as np

        out = obj.view(np.ndarray)
        seen[id(obj)] = out
        if out.dtype.hasobject:
            flat = out.reshape(-1) if out.flags.c_contiguous or out.flags.f_contiguous else out.ravel()
            for j, v in enumerate(flat):
                flat[j] = _plain(v, seen)
        return out
    if isinstance(obj, dict):
        seen[id(obj)] = obj
        for k in list(obj):
            obj[k] = _plain(obj[k], seen)
        return obj
    if isinstance(obj, list):
        seen[id(obj)] = obj
        obj[:] = [_plain(v, seen) for v in obj]
        return obj
    if isinstance(obj, tuple):
        out = tuple(_plain(v, seen) for v in obj)
        seen[id(obj)] = out
        return out
    return obj


def _scalar():
    """numpy's ``multiarray.scalar(dtype, data)``, given a clean dtype (see :func:`_clean_dtype`)."""
    import numpy as np

    real = _multiarray("scalar")()

    def scalar(dtype, *args):
        if not isinstance(dtype, np.dtype):
            raise UnsafePickleError(f"refused a numpy scalar with dtype {type(dtype).__name__}")
        return real(_clean_dtype(dtype), *args)

    return scalar


def _frombuffer(name: str):
    """numpy's ``_frombuffer(buffer, dtype, shape, order)`` (protocol 5 arrays), refusing object dtypes."""

    def get():
        try:
            from numpy._core import numeric
        except ImportError:  # numpy < 2
            from numpy.core import numeric
        real = getattr(numeric, name)

        def frombuffer(buf, dtype, shape, order):
            import numpy as np

            if not isinstance(dtype, np.dtype):
                raise UnsafePickleError(f"refused an array from a buffer with dtype {type(dtype).__name__}")
            clean = _clean_dtype(dtype)
            if clean.hasobject:
                raise UnsafePickleError(f"refused an array of dtype {dtype!r} from a buffer: not plain data")
            return real(buf, clean, shape, order)

        return frombuffer

    return get


#: (module, name) -> a function returning the object the unpickler may use for it
ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): lambda: _rebuild_tensor_v2,
    ("torch.storage", "_load_from_bytes"): lambda: _load_storage_from_bytes,
    ("collections", "OrderedDict"): _attr("collections", "OrderedDict"),
    ("_codecs", "encode"): lambda: _latin1,
    **{(m, "_frombuffer"): _frombuffer("_frombuffer") for m in ("numpy.core.numeric", "numpy._core.numeric")},
    **{(m, "_reconstruct"): _multiarray("_reconstruct") for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "scalar"): _scalar for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    ("numpy", "ndarray"): _array_class,
    **{
        ("numpy", t): _attr("numpy", t)
        for t in (
            "dtype",
            "float16",
            "float32",
            "float64",
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "uint16",
            "uint32",
            "uint64",
            "bool_",
            "complex64",
            "complex128",
        )
    },
    **{
        ("numpy.dtypes", f"{t}DType"): _attr("numpy.dtypes", f"{t}DType")
        for t in ("Float16", "Float32", "Float64", "Int32", "Int64", "UInt8", "Bool")
    },
}


class _Restricted(pickle.Unpickler):
    def __init__(self, f, where: str):
        super().__init__(f)
        self.where = where

    def find_class(self, module: str, name: str):
        get = ALLOWED.get((module, name))
        if get is None:
            raise UnsafePickleError(
                f"{self.where}: refused to load '{module}.{name}': release pickles may only hold "
                f"tensors, arrays, lists, dicts, strings and numbers (a pickle naming other "
                f"objects could run code)"
            )
        return get()

    def persistent_load(self, pid):
        raise UnsafePickleError(f"{self.where}: refused a persistent id ({type(pid).__name__}): not plain data")


def safe_loads(data: bytes, where: str = "pickle") -> Any:
    """Unpickle ``data`` allowing plain data, numpy arrays and torch tensors only."""
    try:
        return _plain(_Restricted(io.BytesIO(data), where).load())
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise InputError(f"{where}: not a readable pickle ({type(e).__name__}: {e})") from None


def safe_load(path: str | Path) -> Any:
    """:func:`safe_loads` of a file (errors name the file)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"pickle '{p}' not found")
    return safe_loads(p.read_bytes(), where=f"pickle '{p}'")
