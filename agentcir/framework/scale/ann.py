"""Per-shard approximate indexes (faiss, inner product): IVF-Flat, IVF-SQ, IVF-PQ and HNSW.

``build_indexes`` writes one index file per shard under ``<gallery>/ann/<kind>-<settings hash>/``
(atomically; finished shards are kept when a build is interrupted). Indexes are
memory-mapped when searched (``IO_FLAG_MMAP``): a shard worker maps its file as it maps its
embeddings, so workers on one node share the pages and a 10 GB index opens at once. Search
returns the scoring core's ranking rule (score descending, ties by the lower id, ``(-inf, -1)`` padding)
over the candidates the index finds, with ``exclude`` applied as in ``cosine_topk``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from ..errors import InputError, require
from ..files import atomic_path, atomic_write_text
from ..integrity import (
    Damaged,
    IntegrityError,
    check_record,
    file_record,
    recompute_warning,
    seal,
    unseal,
)
from .merge import merge_topk

#: rows converted to float32 at a time while adding to an index
ADD_ROWS = 262144
#: ``scale.sq`` -> faiss scalar quantizer of ``ivf_sq``: fp16 keeps a half gallery's values
#: exactly (IVF-Flat's lists at half its bytes), 8bit a quarter of them
SQ_TYPES = {"fp16": "QT_fp16", "8bit": "QT_8bit"}
#: the settings an index folder was built with (``{"search": kind, <BUILD_PARAMS>}``): an update of
#: the gallery builds the folder's indexes again over the new rows with them
SETTINGS_FILE = "settings.json"
#: training sample per shard: 40 vectors per IVF list (at least 10,000), at most this many
TRAIN_MAX = 262144


def _faiss():
    return require("faiss", "scale", feature="approximate search (scale.search)")


def nlist_for(n: int, nlist: int) -> int:
    return max(1, min(nlist or int(round(4 * math.sqrt(n))), n // 39 or 1))


def make_index(kind: str, d: int, n: int, scale: dict):
    faiss = _faiss()
    if kind == "hnsw":
        return faiss.IndexHNSWFlat(d, scale["hnsw_m"], faiss.METRIC_INNER_PRODUCT)
    quantizer = faiss.IndexFlatIP(d)
    nl = nlist_for(n, scale["nlist"])
    if kind == "ivf_flat":
        return faiss.IndexIVFFlat(quantizer, d, nl, faiss.METRIC_INNER_PRODUCT)
    if kind == "ivf_sq":
        index = faiss.IndexIVFScalarQuantizer(
            quantizer, d, nl, getattr(faiss.ScalarQuantizer, SQ_TYPES[scale["sq"]]), faiss.METRIC_INNER_PRODUCT
        )
        index.by_residual = scale["sq"] != "fp16"  # fp16 codes are the rows themselves, not residuals
        return index
    if kind == "ivf_pq":
        if d % scale["pq_m"]:
            raise InputError(f"scale.pq_m={scale['pq_m']} must divide the embedding dim {d}")
        return faiss.IndexIVFPQ(quantizer, d, nl, scale["pq_m"], 8, faiss.METRIC_INNER_PRODUCT)
    raise InputError(f"unknown approximate index kind '{kind}'")


def build_index(emb: np.ndarray, kind: str, scale: dict, out: Path, *, seed: int = 0) -> dict:
    """Train and fill one index over ``emb`` (any float dtype, memory-mapped is fine) into ``out``."""
    faiss = _faiss()
    t0 = time.perf_counter()
    n, d = emb.shape
    index = make_index(kind, d, n, scale)
    if not index.is_trained:
        rng = np.random.default_rng(seed)
        want = max(40 * getattr(index, "nlist", 1), 10000)  # faiss asks 39 points per IVF list, 9984 per PQ codebook
        sample = np.sort(rng.choice(n, size=min(n, TRAIN_MAX, want), replace=False))
        index.train(np.ascontiguousarray(emb[sample], np.float32))
    for start in range(0, n, ADD_ROWS):
        index.add(np.ascontiguousarray(emb[start : start + ADD_ROWS], np.float32))
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        faiss.write_index(index, str(tmp))
    info = {"kind": kind, "n": n, "dim": d, "build_s": round(time.perf_counter() - t0, 3)}
    atomic_write_text(out.with_suffix(".json"), seal({**info, "file": file_record(out)}))
    return info


def check_index(path: str | Path) -> dict:
    """The build record of index file ``path`` (its ``.json``), the file checked against the digest
    it records; :class:`~agentcir.framework.integrity.Damaged` when either is damaged."""
    path = Path(path)
    meta = path.with_suffix(".json")
    if not meta.is_file():
        raise Damaged(meta, "is missing")
    info = unseal(meta, meta.read_bytes())
    if "file" in info:  # (an index built before checksums records none)
        check_record(path, info["file"])
    return info


def load_index(path: str | Path, nprobe: int, ef_search: int):
    """Index file ``path`` memory-mapped, checked first against its recorded digest (a damaged index
    is an :class:`~agentcir.framework.integrity.IntegrityError` naming the rebuilding command)."""
    faiss = _faiss()
    path = Path(path)
    try:
        info = check_index(path)
    except Damaged as e:
        gallery = path.parent.parent.parent
        kind = path.parent.name.split("-")[0]
        raise IntegrityError(
            f"approximate index {e}; delete it and rebuild with: agentcir build-index '{gallery}' "
            f"--kind {kind} (with the same settings)"
        ) from None
    index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    if int(info.get("n", index.ntotal)) != index.ntotal:
        raise IntegrityError(
            f"approximate index '{path}' holds {index.ntotal} rows, {info['n']} were built; "
            f"delete it and rebuild it with agentcir build-index"
        )
    if hasattr(index, "nprobe"):
        index.nprobe = nprobe
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = ef_search
    return index


def search_index(
    index,
    queries: np.ndarray,
    k: int,
    exclude: np.ndarray | None,
    exclude_score: float | None,
    *,
    refine: int = 0,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of ``queries`` from ``index`` (local row ids), ``exclude`` as in ``cosine_topk``.

    With ``refine`` = R > 0 the index proposes ``R * k`` candidates whose scores are recomputed
    exactly from ``rows`` (the shard's embeddings) before the top k are kept (IVF-PQ's codes
    rank coarsely; exact re-scoring of a short list recovers the recall).
    """
    extra = 0 if exclude is None else exclude.shape[1]
    kk = min(index.ntotal, k * max(1, refine) + extra)
    q = np.ascontiguousarray(queries, np.float32)
    s, i = index.search(q, max(kk, 1))
    if refine:
        x = np.asarray(rows[np.where(i >= 0, i, 0).ravel()], np.float32).reshape(*i.shape, -1)
        s = np.einsum("qd,qkd->qk", q, x)
    s = np.where(i >= 0, s, -np.inf).astype(np.float32)
    if exclude is not None:  # [Q, kk, m] comparison, all queries at once (-1 padding never hits: i >= 0)
        hit = (i[:, :, None] == exclude[:, None, :]).any(axis=-1) & (i >= 0)
        if exclude_score is None:
            i[hit] = -1
            s[hit] = -np.inf
        else:
            s[hit] = exclude_score
    return merge_topk([s], [i], k)


def build_indexes(gallery, scale: dict, *, progress: bool = True) -> list[dict]:
    """Build the ``scale['search']`` index of every shard of a sharded gallery not built yet."""
    from . import BUILD_PARAMS, ann_dir

    if scale["search"] == "exact":
        raise InputError("build-index needs an approximate kind: scale.search=ivf_flat, ivf_sq, ivf_pq or hnsw")
    d = ann_dir(gallery, scale)
    d.mkdir(parents=True, exist_ok=True)
    kind = scale["search"]
    atomic_write_text(d / SETTINGS_FILE, json.dumps({"search": kind, **{p: scale[p] for p in BUILD_PARAMS[kind]}}))
    out = []
    for s, shard in enumerate(gallery.shards):
        f = d / f"{shard['dir']}.faiss"
        if f.is_file() and f.with_suffix(".json").is_file():
            try:
                info = check_index(f)
                info.pop("file", None)
                out.append({**info, "reused": True})
                continue
            except Damaged as e:  # rebuilt below
                recompute_warning(e, "the index is rebuilt")
        info = build_index(np.load(gallery.shard_dir(s) / "image_emb.npy", mmap_mode="r"), scale["search"], scale, f)
        out.append(info)
        if progress:
            print(f"  {shard['dir']}: {info['kind']} over {info['n']} rows in {info['build_s']} s")
    return out
