"""Reading pickles that arrive with released data (features, captions) without running code.

``pickle.load`` calls whatever a file names (``os.system`` included). :func:`safe_load`
reads a pickle with an unpickler that resolves only the globals needed to rebuild plain
data: lists, dicts, strings, numbers, numpy arrays and torch tensors. Any other global
is refused before it is called (:class:`UnsafePickleError`, an :class:`InputError`).

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
        raise UnsafePickleError(f"a tensor's embedded payload was refused by torch's weights-only loader: "
                                f"{str(e).splitlines()[0]}") from None


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


#: (module, name) -> a function returning the object the unpickler may use for it
ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): lambda: _rebuild_tensor_v2,
    ("torch.storage", "_load_from_bytes"): lambda: _load_storage_from_bytes,
    ("collections", "OrderedDict"): _attr("collections", "OrderedDict"),
    **{(m, n): _multiarray(n) for m in ("numpy.core.multiarray", "numpy._core.multiarray")
       for n in ("_reconstruct", "scalar")},
    **{("numpy", t): _attr("numpy", t) for t in ("ndarray", "dtype", "float16", "float32", "float64", "int8", "int16",
                                                  "int32", "int64", "uint8", "bool_")},
    **{("numpy.dtypes", f"{t}DType"): _attr("numpy.dtypes", f"{t}DType")
       for t in ("Float16", "Float32", "Float64", "Int32", "Int64", "UInt8", "Bool")},
}


class _Restricted(pickle.Unpickler):
    def __init__(self, f, where: str):
        super().__init__(f)
        self.where = where

    def find_class(self, module: str, name: str):
        get = ALLOWED.get((module, name))
        if get is None:
            raise UnsafePickleError(f"{self.where}: refused to load '{module}.{name}': release pickles may only hold "
                                    f"tensors, arrays, lists, dicts, strings and numbers (a pickle naming other "
                                    f"objects could run code)")
        return get()

    def persistent_load(self, pid):
        raise UnsafePickleError(f"{self.where}: refused a persistent id ({type(pid).__name__}): not plain data")


def safe_loads(data: bytes, where: str = "pickle") -> Any:
    """Unpickle ``data`` allowing plain data, numpy arrays and torch tensors only."""
    try:
        return _Restricted(io.BytesIO(data), where).load()
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
