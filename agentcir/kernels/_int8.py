"""int8 galleries (symmetric per-row scale) and the exact float32 re-rank of a shortlist.

:class:`Int8Gallery` holds ``codes`` (int8 ``[N, d]``) and ``scales`` (float32 ``[N]``): row
``r`` stands for ``scales[r] * codes[r]``. :func:`quantize_int8` makes one from a float gallery
(``scale = max|row| / 127``, ``codes = round(row / scale)``, so ``|row - scale * codes| <=
scale / 2`` per element). The gallery ops that accept it (``cosine_topk``, ``octopus_topk``,
``octopus_weights``, ``octopus_gap_sums``) score ``x . (scale * codes)``: a quarter of the bytes
of float32 rows, an approximation of their scores.

The re-rank (:func:`rerank_topk`, :func:`rerank_octopus`) takes the int8 scan's best
``shortlist`` ids per query and scores them again, in float64, against the float32 rows they
were quantised from; the final top-k keeps the usual rules (score descending, lower id on ties,
``(-inf, -1)`` padding, exclusions as the op's). It returns the float32 top-k whenever the true
top-k lies inside the int8 shortlist: :data:`DEFAULT_SHORTLIST` ``max(4k, k + 64)`` (tested on
random normalised galleries with near-ties and on real CLIP embeddings; README.md "Precision").
numpy only (torch inputs are read through numpy on the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._inputs import (
    Gallery,
    KernelInputError,
    _numpy_of,
    _shape,
    bits_to_float32,
    check_gallery,
    check_gallery_shape,
    dtype_name,
    is_torch,
)

#: rows quantised per step of :func:`quantize_int8` (bounds its temporary float32 memory)
QUANTIZE_CHUNK_ROWS = 65536


def default_shortlist(k: int) -> int:
    """The shortlist of the re-rank when none is given: ``max(4 k, k + 64)``."""
    return max(4 * k, k + 64)


#: described by :func:`default_shortlist`
DEFAULT_SHORTLIST = "max(4k, k + 64)"


@dataclass(frozen=True)
class Int8Gallery:
    """An int8 gallery: ``codes`` int8 ``[N, d]`` and float32 per-row ``scales`` ``[N]``.

    Row ``r`` stands for ``scales[r] * codes[r]``. Both arrays are numpy arrays (memory maps
    included) or torch tensors (the torch / triton backends score on the codes' device).
    Checked when an op receives it.
    """

    codes: Any
    scales: Any

    @property
    def shape(self) -> tuple[int, int]:
        return _shape(self.codes)  # type: ignore[return-value]

    def __len__(self) -> int:
        return int(self.shape[0])

    def dequantize(self) -> np.ndarray:
        """float32 ``[N, d]``: ``scales[:, None] * codes`` (materialised: for tests and small galleries)."""
        c = _numpy_of(self.codes)
        s = _numpy_of(self.scales).astype(np.float32)
        return c.astype(np.float32) * s[:, None]


def quantize_int8(gallery: Any, *, out: Int8Gallery | None = None) -> Int8Gallery:
    """Symmetric per-row int8 quantisation of a float ``[N, d]`` gallery (numpy, memory map or torch).

    ``scale = max|row| / 127`` (float32), ``codes = round(row / scale)`` (the row times the float32
    reciprocal of the scale, rounded half to even, within ``[-127, 127]``); an all-zero row gets scale 0 and zero codes. Rows are read
    ``QUANTIZE_CHUNK_ROWS`` at a time; ``out`` (e.g. memory maps opened for writing) receives
    the result instead of new arrays.
    """
    g = check_gallery(gallery, "gallery")
    bf16 = dtype_name(g) == "bfloat16"
    if is_torch(g):
        g = _numpy_of(g)  # bfloat16: its uint16 bits
    elif bf16:
        g = np.asarray(g).view(np.uint16)
    N, d = _shape(g)
    if out is None:
        codes = np.empty((N, d), dtype=np.int8)
        scales = np.empty(N, dtype=np.float32)
    else:
        codes, scales = out.codes, out.scales
        if _shape(codes) != (N, d) or codes.dtype != np.int8:
            raise KernelInputError(f"out.codes: expected int8 {(N, d)}, got {codes.dtype} {_shape(codes)}")
        if _shape(scales) != (N,) or scales.dtype != np.float32:
            raise KernelInputError(f"out.scales: expected float32 ({N},), got {scales.dtype} {_shape(scales)}")
    for a in range(0, N, QUANTIZE_CHUNK_ROWS):
        b = min(N, a + QUANTIZE_CHUNK_ROWS)
        x = bits_to_float32(np.asarray(g[a:b]), "bfloat16") if bf16 else np.asarray(g[a:b], dtype=np.float32)
        if not np.isfinite(x).all():
            raise KernelInputError("gallery: contains NaN or infinite values (cannot be quantised)")
        s = (np.abs(x).max(axis=1) / np.float32(127.0)).astype(np.float32)
        inv = np.divide(np.float32(1.0), s, out=np.zeros_like(s), where=s > 0)
        codes[a:b] = np.clip(np.rint(x * inv[:, None]), -127, 127).astype(np.int8)
        scales[a:b] = s
    return Int8Gallery(codes, scales) if out is None else out


def check_int8(g: Int8Gallery, name: str, *, dim: int | None = None, rows: int | None = None) -> Gallery:
    """An :class:`Int8Gallery` -> the :class:`Gallery` view ``kind="int8"`` (codes not scanned;
    the ``N`` scales are: finite and ``>= 0``)."""
    codes, scales = g.codes, g.scales
    if codes is None or scales is None:
        raise KernelInputError(f"{name}: an Int8Gallery needs codes and scales, got None")
    if not (is_torch(codes) or isinstance(codes, np.ndarray)):
        codes = np.asarray(codes)
    if not (is_torch(scales) or isinstance(scales, np.ndarray)):
        scales = np.asarray(scales)
    shape = _shape(codes)
    if len(shape) != 2:
        raise KernelInputError(f"{name}.codes: expected a 2-d [N, d] matrix, got shape {shape}")
    if dtype_name(codes) != "int8":
        raise KernelInputError(f"{name}.codes: expected dtype int8, got {dtype_name(codes)}")
    check_gallery_shape(shape, name, dim, rows, part=".codes")
    if _shape(scales) != (shape[0],):
        raise KernelInputError(f"{name}.scales: expected shape ({shape[0]},) (one per row), got {_shape(scales)}")
    if dtype_name(scales) != "float32":
        raise KernelInputError(f"{name}.scales: expected dtype float32, got {dtype_name(scales)}")
    s = _numpy_of(scales)
    if s.size and not (np.isfinite(s).all() and (s >= 0).all()):
        raise KernelInputError(f"{name}.scales: must be finite and >= 0")
    if is_torch(codes) != is_torch(scales) or (is_torch(codes) and codes.device != scales.device):
        raise KernelInputError(f"{name}: codes and scales must be both numpy or both torch tensors on one device")
    return Gallery(codes, "int8", scales)


def check_rerank(x: Any, name: str, shape: tuple[int, int]) -> np.ndarray:
    """The float32 ``[N, d]`` rows a re-rank reads (numpy or memory map; a CPU torch tensor is viewed)."""
    if x is None:
        raise KernelInputError(f"{name}: an array is required, got None")
    a = _numpy_of(x) if is_torch(x) else x
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except Exception as e:
            raise KernelInputError(f"{name}: cannot be read as an array ({e})") from None
    if a.ndim != 2 or _shape(a) != tuple(shape):
        raise KernelInputError(f"{name}: expected shape {tuple(shape)} (the int8 gallery's), got {_shape(a)}")
    if a.dtype != np.float32:
        raise KernelInputError(f"{name}: expected float32 rows (the exact re-rank), got dtype {a.dtype}")
    return a


def check_shortlist(shortlist: Any, k: int) -> int:
    if shortlist is None:
        return default_shortlist(k)
    if isinstance(shortlist, bool) or not isinstance(shortlist, (int, np.integer)):
        raise KernelInputError(f"shortlist: must be an integer >= k ({k}), got {shortlist!r}")
    if int(shortlist) < k:
        raise KernelInputError(f"shortlist: must be >= k ({k}), got {shortlist}")
    return int(shortlist)


#: float64 elements of the gathered candidate rows per block of queries (bounds the re-rank's memory)
RERANK_BLOCK_ELEMENTS = 1 << 22


def _blocks(Q: int, L: int, d: int):
    step = max(1, RERANK_BLOCK_ELEMENTS // max(1, L * d))
    for a in range(0, Q, step):
        yield a, min(Q, a + step)


def _candidates(short_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's candidate ids in increasing order (padding ``-1`` last) and their validity."""
    big = np.iinfo(np.int64).max
    key = np.where(short_ids >= 0, short_ids.astype(np.int64), big)
    ids = np.sort(key, axis=1)
    valid = ids != big
    return np.where(valid, ids, 0), valid


def _gathered(rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float64 ``[B, L, d]`` rows of the candidates (one fancy-index read of a memory map)."""
    B, L = ids.shape
    return np.asarray(rows[ids.reshape(-1)], dtype=np.float64).reshape(B, L, -1)


def _finish(ids, valid, s64, exclude, exclude_score, k, out_s, out_i) -> None:
    """Exclusions, then the best ``k`` per row (score desc; the ids are ascending, so a stable sort
    keeps the lower id first among equal scores), padded with ``(-inf, -1)``."""
    s64 = np.where(valid, s64, -np.inf)
    if exclude is not None:
        hit = (ids[:, :, None] == exclude[:, None, :]).any(axis=2) & valid
        s64 = np.where(hit, -np.inf if exclude_score is None else float(np.float32(exclude_score)), s64)
    order = np.argsort(-s64, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(s64, order, axis=1)
    n = top.shape[1]
    out_s[:, :n] = top.astype(np.float32)
    out_i[:, :n] = np.where(top == -np.inf, -1, np.take_along_axis(ids, order, axis=1))
    out_s[:, n:], out_i[:, n:] = -np.inf, -1


def rerank_topk(
    queries: np.ndarray,
    short_ids: np.ndarray,
    rows: np.ndarray,
    k: int,
    exclude: np.ndarray | None,
    exclude_score: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact re-rank of a cosine shortlist: ``float64(x) . float64(rows[id])`` per candidate,
    exclusions as in the scan, then the top ``k`` (float32 scores, int32 ids)."""
    Q, L = short_ids.shape
    out_s = np.empty((Q, k), dtype=np.float32)
    out_i = np.empty((Q, k), dtype=np.int32)
    ids, valid = _candidates(short_ids)
    for a, b in _blocks(Q, L, queries.shape[1]):
        s64 = np.einsum("qld,qd->ql", _gathered(rows, ids[a:b]), queries[a:b].astype(np.float64))
        ex = None if exclude is None else exclude[a:b]
        _finish(ids[a:b], valid[a:b], s64, ex, exclude_score, k, out_s[a:b], out_i[a:b])
    return out_s, out_i


def octopus_t(proxies: np.ndarray, weights: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``t = (norm(sum_i w_i P_i) + q_t) / 2`` as float64 (what the fused OCTOPUS score dots with the images)."""
    e = np.einsum("qk,qkd->qd", weights.astype(np.float64), proxies.astype(np.float64))
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    return (e.astype(np.float32).astype(np.float64) + target.astype(np.float64)) / 2.0


def rerank_octopus(
    t: np.ndarray,
    visual: np.ndarray | None,
    short_ids: np.ndarray,
    images: np.ndarray,
    captions: np.ndarray | None,
    k: int,
    lam: float,
    exclude: np.ndarray | None,
    exclude_score: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact re-rank of an OCTOPUS shortlist: ``S = lam t.I + (1 - lam) (v.C)(t.I)`` in float64
    from the float32 rows, exclusions as in the scan, then the top ``k``."""
    Q, L = short_ids.shape
    out_s = np.empty((Q, k), dtype=np.float32)
    out_i = np.empty((Q, k), dtype=np.int32)
    ids, valid = _candidates(short_ids)
    for a, b in _blocks(Q, L, t.shape[1]):
        st = np.einsum("qld,qd->ql", _gathered(images, ids[a:b]), t[a:b])
        if visual is not None:
            sv = np.einsum("qld,qd->ql", _gathered(captions, ids[a:b]), visual[a:b].astype(np.float64))
            st = lam * st + (1.0 - lam) * (sv * st)
        ex = None if exclude is None else exclude[a:b]
        _finish(ids[a:b], valid[a:b], st, ex, exclude_score, k, out_s[a:b], out_i[a:b])
    return out_s, out_i
