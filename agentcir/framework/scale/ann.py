"""Per-shard approximate indexes (inner product): faiss IVF-Flat, IVF-SQ, IVF-PQ and HNSW, and
hnswlib's HNSW graph (``hnswlib``).

``build_indexes`` writes one index file per shard under ``<gallery>/ann/<kind>-<settings hash>/``
(atomically; finished shards are kept when a build is interrupted). faiss indexes are
memory-mapped when searched (``IO_FLAG_MMAP``): a shard worker maps its file as it maps its
embeddings, so workers on one node share the pages and a 10 GB index opens at once; an hnswlib
graph is read into the worker's memory (benchmarks/ann_crossmodal.py compares the kinds on text
queries against image embeddings). Search
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


def _hnswlib():
    return require("hnswlib", "hnswlib", feature="the hnswlib index (scale.search=hnswlib)")


def index_suffix(kind: str) -> str:
    """The file suffix of a shard's index of ``kind``."""
    return ".hnswlib" if kind == "hnswlib" else ".faiss"


class HnswlibIndex:
    """An hnswlib graph (space ``ip``) answering as a faiss index does: ``ntotal``,
    ``search(q, k) -> (inner products, int64 ids)`` with ``-1`` padding."""

    def __init__(self, index, ef_search: int):
        self.index, self.ef_search = index, ef_search
        self.ntotal = index.get_current_count()

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        kk = min(k, self.ntotal)
        s = np.full((len(q), k), -np.inf, np.float32)
        i = np.full((len(q), k), -1, np.int64)
        ef = max(self.ef_search, kk)  # hnswlib needs ef >= k
        todo = np.arange(len(q))
        while len(todo):
            self.index.set_ef(ef)
            try:
                ids, dist = self.index.knn_query(q[todo], k=kk)
            except RuntimeError:  # a query reaching fewer than k rows fails its batch: one by one
                if len(todo) > 1:
                    for r in todo:
                        s[r : r + 1], i[r : r + 1] = self._one(q[r : r + 1], k, kk, ef)
                    return s, i
                if ef >= self.ntotal:
                    raise
                ef = min(4 * ef, self.ntotal)  # the graph's walk ended early: search wider
                continue
            s[todo, :kk], i[todo, :kk] = 1.0 - dist, ids.astype(np.int64)  # space 'ip' answers 1 - q.x
            todo = todo[:0]
        return s, i

    def _one(self, q: np.ndarray, k: int, kk: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
        sub = HnswlibIndex(self.index, ef)
        sub.ntotal = self.ntotal
        return sub.search(q, k)


def _build_hnswlib(emb: np.ndarray, scale: dict, out: Path, seed: int) -> None:
    hnswlib = _hnswlib()
    n, d = emb.shape
    index = hnswlib.Index(space="ip", dim=d)
    index.init_index(max_elements=n, M=scale["hnsw_m"], ef_construction=scale["ef_construction"], random_seed=seed)
    for start in range(0, n, ADD_ROWS):
        rows = np.ascontiguousarray(emb[start : start + ADD_ROWS], np.float32)
        index.add_items(rows, np.arange(start, start + len(rows)))
    with atomic_path(out) as tmp:
        index.save_index(str(tmp))


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
    t0 = time.perf_counter()
    n, d = emb.shape
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "hnswlib":
        _build_hnswlib(emb, scale, out, seed)
        return _record(out, kind, n, d, t0)
    faiss = _faiss()
    index = make_index(kind, d, n, scale)
    if not index.is_trained:
        rng = np.random.default_rng(seed)
        want = max(40 * getattr(index, "nlist", 1), 10000)  # faiss asks 39 points per IVF list, 9984 per PQ codebook
        sample = np.sort(rng.choice(n, size=min(n, TRAIN_MAX, want), replace=False))
        index.train(np.ascontiguousarray(emb[sample], np.float32))
    for start in range(0, n, ADD_ROWS):
        index.add(np.ascontiguousarray(emb[start : start + ADD_ROWS], np.float32))
    with atomic_path(out) as tmp:
        faiss.write_index(index, str(tmp))
    return _record(out, kind, n, d, t0)


def _record(out: Path, kind: str, n: int, d: int, t0: float) -> dict:
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
    """Index file ``path`` memory-mapped (an hnswlib graph: read), checked first against its recorded
    digest (a damaged index is an :class:`~agentcir.framework.integrity.IntegrityError` naming the
    rebuilding command)."""
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
    if path.suffix == ".hnswlib":
        graph = _hnswlib().Index(space="ip", dim=int(info["dim"]))
        graph.load_index(str(path), max_elements=int(info["n"]))
        index = HnswlibIndex(graph, ef_search)
    else:
        faiss = _faiss()
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
        raise InputError(
            "build-index needs an approximate kind: scale.search=ivf_flat, ivf_sq, ivf_pq, hnsw or hnswlib"
        )
    d = ann_dir(gallery, scale)
    d.mkdir(parents=True, exist_ok=True)
    kind = scale["search"]
    atomic_write_text(d / SETTINGS_FILE, json.dumps({"search": kind, **{p: scale[p] for p in BUILD_PARAMS[kind]}}))
    out = []
    for s, shard in enumerate(gallery.shards):
        f = d / f"{shard['dir']}{index_suffix(kind)}"
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
