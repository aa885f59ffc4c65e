"""Input checks and array conversions shared by every op (numpy only; torch is never imported here).

The public functions in :mod:`agentcir.kernels.api` accept numpy arrays (anything
``np.asarray`` takes) or torch tensors. They check shapes, dtypes and small value
ranges here, once, for every backend, and hand each backend its native arrays:
numpy (``reference``, ``numba``) or torch tensors (``torch``, ``triton``).

Half-precision galleries travel as :class:`Gallery`: for numpy backends the data is
float32 or the raw ``uint16`` bits of a float16 / bfloat16 array, with ``kind`` naming
the format, so no backend needs ``ml_dtypes`` to handle bfloat16. An int8 gallery
(:class:`agentcir.kernels.Int8Gallery`) travels as ``kind="int8"``: the ``int8`` codes as
``data`` and the float32 per-row ``scales`` (row ``r`` = ``scales[r] * data[r]``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError

GALLERY_KINDS = ("float32", "float16", "bfloat16")
#: ids are int32: galleries up to this many items
MAX_ITEMS = 2**31 - 2


class KernelInputError(InputError):
    """Bad input to a scoring-core op; the message names the argument and the problem."""


@dataclass(frozen=True)
class Gallery:
    """A gallery matrix ``[N, d]`` as a backend sees it.

    Attributes:
        data: numpy float32 or uint16 bits (numpy backends), or a torch tensor of
            dtype float32 / float16 / bfloat16 (torch backends).
        kind: ``float32``, ``float16``, ``bfloat16`` or ``int8``.
        scales: for ``int8``: float32 ``[N]`` per-row scales (numpy or torch, like ``data``);
            row ``r`` is ``scales[r] * data[r]``. None otherwise.

    numpy arrays are held read-only (:func:`read_only`, a view): the kernels only read them, and
    numba compiles one variant per argument types, in which a writable and a read-only array (a
    memory-mapped gallery) differ.
    """

    data: Any
    kind: str
    scales: Any = None

    def __post_init__(self) -> None:
        for name in ("data", "scales"):
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                object.__setattr__(self, name, read_only(value))

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.data.shape)  # type: ignore[return-value]


def is_torch(x: Any) -> bool:
    """True for a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "device")


def dtype_name(x: Any) -> str:
    """``float32``, ``bfloat16``, ``int64``... for numpy arrays and torch tensors alike."""
    return str(x.dtype).removeprefix("torch.")


def _numpy_of(x: Any) -> np.ndarray:
    """A numpy view/copy of a torch tensor (bfloat16 as its uint16 bits), or np.asarray."""
    if is_torch(x):
        import torch

        t = x.detach().cpu()
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    return np.asarray(x)


def to_numpy_out(x: Any) -> np.ndarray:
    """Backend output -> numpy (torch tensors are moved to the CPU)."""
    return x.detach().cpu().numpy() if is_torch(x) else np.asarray(x)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def _as_array(x: Any, name: str) -> Any:
    if x is None:
        raise KernelInputError(f"{name}: an array is required, got None")
    if is_torch(x):
        return x
    try:
        return np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise KernelInputError(f"{name}: cannot be read as an array ({e})") from None


def _all_finite(x: Any) -> bool:
    if is_torch(x):
        import torch

        return bool(torch.isfinite(x).all())
    return bool(np.isfinite(x).all())


def check_float(x: Any, name: str, ndim: int, *, dim: int | None = None, rows: int | None = None) -> Any:
    """A float matrix/tensor of ``ndim`` dims, finite, last dim ``dim``, first dim ``rows``.

    Returned as float32 (numpy: C-contiguous; torch: unchanged device).
    """
    x = _as_array(x, name)
    shape = _shape(x)
    if len(shape) != ndim:
        raise KernelInputError(f"{name}: expected {ndim} dimensions, got shape {shape}")
    kind = dtype_name(x)
    if not (kind.startswith(("float", "int", "uint", "bool")) or kind == "bfloat16"):
        raise KernelInputError(f"{name}: expected a numeric array, got dtype {kind}")
    if dim is not None and shape[-1] != dim:
        raise KernelInputError(f"{name}: last dimension is {shape[-1]}, expected {dim} (the gallery's)")
    if rows is not None and shape[0] != rows:
        raise KernelInputError(f"{name}: first dimension is {shape[0]}, expected {rows} (one row per query)")
    if is_torch(x):
        import torch

        x = x.to(torch.float32)
    else:
        x = np.ascontiguousarray(x, dtype=np.float32)
    if not _all_finite(x):
        raise KernelInputError(f"{name}: contains NaN or infinite values")
    return x


def check_gallery(g: Any, name: str = "gallery", *, dim: int | None = None, rows: int | None = None) -> Any:
    """A gallery ``[N, d]`` of float32, float16 or bfloat16 (not copied; values not scanned).

    Finite values are the caller's contract: scanning the gallery would cost as much
    as scoring it.
    """
    if type(g).__name__ == "Int8Gallery":
        raise KernelInputError(
            f"{name}: an int8 gallery is accepted by cosine_topk, octopus_topk, octopus_weights and "
            "octopus_gap_sums only; pass the float rows here"
        )
    g = _as_array(g, name)
    shape = _shape(g)
    if len(shape) != 2:
        raise KernelInputError(f"{name}: expected a 2-d [N, d] matrix, got shape {shape}")
    kind = dtype_name(g)
    if kind not in GALLERY_KINDS:
        raise KernelInputError(f"{name}: dtype {kind} is not supported; use one of {', '.join(GALLERY_KINDS)}")
    check_gallery_shape(shape, name, dim, rows)
    return g


def check_gallery_shape(shape: tuple, name: str, dim: int | None, rows: int | None, *, part: str = "") -> None:
    """The limits every gallery matrix meets: ids fit int32, ``d > 0``, and the expected ``d`` and
    row count when given (``part`` names the matrix inside ``name``, e.g. ``.codes``)."""
    if shape[0] > MAX_ITEMS:
        raise KernelInputError(f"{name}{part}: {shape[0]} rows exceed the int32 id range")
    if shape[1] == 0:
        raise KernelInputError(f"{name}{part}: embedding dimension is 0")
    if dim is not None and shape[1] != dim:
        raise KernelInputError(f"{name}: has dimension {shape[1]}, expected {dim}")
    if rows is not None and shape[0] != rows:
        raise KernelInputError(f"{name}: has {shape[0]} rows, expected {rows} (one per gallery item)")


def check_k(k: Any, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
        raise KernelInputError(f"{name}: must be a positive integer, got {k!r}")
    return int(k)


def check_positive(x: Any, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise KernelInputError(f"{name}: must be a number, got {x!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise KernelInputError(f"{name}: must be a finite number > 0, got {x!r}")
    return v


def check_finite_number(x: Any, name: str, *, lo: float | None = None, hi: float | None = None) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise KernelInputError(f"{name}: must be a number, got {x!r}") from None
    if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f" in [{lo}, {hi}]" if lo is not None and hi is not None else ""
        raise KernelInputError(f"{name}: must be a finite number{rng}, got {x!r}")
    return v


def check_ids(
    ids: Any, name: str, *, shape: tuple[int, ...] | None = None, ndim: int | None = None, n_items: int | None = None
) -> np.ndarray:
    """Integer ids (``-1`` = padding, else ``0 <= id < n_items``) -> int32 numpy."""
    a = _numpy_of(_as_array(ids, name))
    if ndim is not None and a.ndim != ndim:
        raise KernelInputError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    if shape is not None and a.shape != shape:
        raise KernelInputError(f"{name}: expected shape {shape}, got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise KernelInputError(f"{name}: expected integer ids, got dtype {a.dtype}")
    if a.size:
        lo = int(a.min())
        hi = int(a.max())
        if lo < -1:
            raise KernelInputError(f"{name}: ids must be >= 0 (or -1 for padding), found {lo}")
        limit = MAX_ITEMS if n_items is None else n_items - 1
        if hi > limit:
            raise KernelInputError(
                f"{name}: id {hi} is out of range for {n_items} gallery items"
                if n_items is not None
                else f"{name}: id {hi} exceeds the int32 range"
            )
    return np.ascontiguousarray(a, dtype=np.int32)


def check_exclude(exclude: Any, n_queries: int, n_items: int) -> np.ndarray | None:
    """``None``, ``[Q]`` or ``[Q, m]`` ids to exclude per query -> int32 ``[Q, m]`` (``-1`` padded) or None."""
    if exclude is None:
        return None
    a = _numpy_of(_as_array(exclude, "exclude"))
    shape = a.shape
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] != n_queries:
        raise KernelInputError(f"exclude: expected shape [Q] or [Q, m] with Q = {n_queries}, got {shape}")
    a = check_ids(a, "exclude", n_items=n_items)
    if a.shape[1] == 0 or not (a >= 0).any():
        return None
    return a


def check_bool_mask(x: Any, name: str, *, rows: int, max_cols: int) -> np.ndarray:
    a = _numpy_of(_as_array(x, name))
    if a.ndim != 2 or a.shape[0] != rows or a.shape[1] > max_cols:
        raise KernelInputError(f"{name}: expected shape [{rows}, A] with A <= {max_cols}, got {a.shape}")
    if a.dtype != np.bool_:
        if not (np.issubdtype(a.dtype, np.integer) and ((a == 0) | (a == 1)).all()):
            raise KernelInputError(f"{name}: expected booleans (or 0/1), got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.bool_)


def check_choice(x: Any, name: str, choices: tuple[str, ...]) -> str:
    if x not in choices:
        raise KernelInputError(f"{name}: must be one of {', '.join(choices)}, got {x!r}")
    return str(x)


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only view (no copy). The kernels only read their inputs, and numba compiles
    one variant per writable / read-only array type: galleries opened from disk are read-only
    memory maps, so every input goes in read-only and one compiled variant serves both."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def to_backend_float(x: Any, native: str) -> Any:
    """A checked float32 array/tensor -> the backend's native type (numpy, read-only; or torch)."""
    if native == "numpy":
        return read_only(np.ascontiguousarray(_numpy_of(x), dtype=np.float32))
    import torch

    return x if is_torch(x) else torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def to_backend_gallery(g: Any, native: str) -> Gallery:
    """A checked gallery -> :class:`Gallery` in the backend's native type."""
    if isinstance(g, Gallery):  # an int8 gallery (agentcir.kernels.Int8Gallery.view)
        if native == "numpy":
            return Gallery(np.ascontiguousarray(_numpy_of(g.data)), g.kind, np.ascontiguousarray(_numpy_of(g.scales)))
        import torch

        t = lambda a: a.contiguous() if is_torch(a) else torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only memory maps: the kernels only read them
            codes = t(g.data)
            return Gallery(codes, g.kind, t(g.scales).to(codes.device))
    kind = dtype_name(g)
    if native == "numpy":
        a = _numpy_of(g)
        if kind == "float32":
            return Gallery(np.ascontiguousarray(a, dtype=np.float32), kind)
        return Gallery(np.ascontiguousarray(a).view(np.uint16), kind)
    import torch

    if is_torch(g):
        return Gallery(g.contiguous(), kind)
    a = np.ascontiguousarray(np.asarray(g))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only memory maps: the kernels only read them
        if kind == "bfloat16":
            return Gallery(torch.from_numpy(a.view(np.int16)).view(torch.bfloat16), kind)
        return Gallery(torch.from_numpy(a), kind)


def to_backend_ids(a: np.ndarray | None, native: str, device: Any = None) -> Any:
    if a is None or native == "numpy":
        return a
    import torch

    return torch.from_numpy(a).to(device) if device is not None else torch.from_numpy(a)


def bits_to_float32(bits: np.ndarray, kind: str) -> np.ndarray:
    """float32 values of a numpy gallery in :class:`Gallery` form (exact; not for ``int8``,
    whose values need the scales: :func:`gallery_float64`)."""
    if kind == "float32":
        return bits
    if kind == "float16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def gallery_float64(g: Gallery) -> np.ndarray:
    """float64 values of a numpy :class:`Gallery` (``int8``: codes times the row scales)."""
    if g.kind == "int8":
        return g.data.astype(np.float64) * g.scales.astype(np.float64)[:, None]
    return bits_to_float32(g.data, g.kind).astype(np.float64)


def float32_to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (round-to-nearest-even) and return the uint16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16
    return rounded.astype(np.uint16)
