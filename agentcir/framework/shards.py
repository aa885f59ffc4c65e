"""Sharded galleries: the on-disk format and the coordinator that searches the shards.

Each shard is scored by a :class:`~agentcir.framework.scale.worker.ShardWorker`; the per-shard
top-k lists are merged by :func:`~agentcir.framework.scale.merge.merge_topk`.

A sharded gallery is a directory::

    gallery.json        format, size, dim, dtype, encoder identity, skipped files, and
                        "shards": [{"dir": "shard-00000", "n": rows, "offset": first global row}, ...]
    shard-00000/        a regular gallery folder (gallery.json, items.jsonl, image_emb.npy)
    shard-00001/ ...
    captions/ caption_emb/ derived/   as in an unsharded gallery (global rows)
    ann/<kind>-<hash>/shard-00000.faiss   per-shard approximate indexes (``agentcir build-index``)

Global row ``r`` is row ``r - offset`` of the shard whose range holds it, so the rows, ids
and paths are those of the unsharded gallery built from the same items. :func:`open_sharded`
(reached through :func:`~agentcir.framework.galleries.open_gallery`) gives a
:class:`ShardedGallery` whose ``image_emb`` is a :class:`ShardedArray`: row access reads the
shard files, and the scoring-core functions (``cosine_topk``, ``proxy_scores_topk``,
``octopus_weights``, ``ldre_weights``, ``octopus_topk``) called on it are routed
(``__agentcir_kernel__``) to :class:`ShardSearch`, which runs them on every shard — in this
process (``engine=local``) or on Ray actors (``engine=ray``, :mod:`.scale.ray_search`) — and
merges the per-shard results exactly (top-k by score then lower global id; sums, top-m
lists and softmax partition functions for the whole-gallery statistics).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import InputError
from .gallery import FORMAT, Gallery, GalleryItem, rebuild_hint
from .integrity import IntegrityError, write_text_checked
from .scale.merge import merge_topk
from .scale.worker import ShardError, ShardWorker, source_rows  # noqa: F401  (ShardError: its public name here)

log = logging.getLogger(__name__)

SHARD_DIR = "shard-{:05d}"


def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` ranges of ``n`` items over ``shards`` shards (sizes differ by at most 1)."""
    if shards < 1:
        raise InputError(f"shards must be at least 1, got {shards}")
    if shards > n:
        raise InputError(f"cannot split {n} item(s) into {shards} shards (at most one shard per item)")
    base, extra = divmod(n, shards)
    out, start = [], 0
    for s in range(shards):
        stop = start + base + (s < extra)
        out.append((start, stop))
        start = stop
    return out


def write_manifest(root: Path, shard_galleries: Sequence[Gallery], *, plan: dict, source: str = "") -> dict:
    """Write the top-level ``gallery.json`` of a sharded gallery from its finished shards."""
    first = shard_galleries[0].info
    shards, offset, skipped = [], 0, []
    for g in shard_galleries:
        if g.info["encoder"]["identity"] != first["encoder"]["identity"] or g.dim != first["dim"]:
            raise InputError(f"shard '{g.root}' was embedded with another encoder than '{shard_galleries[0].root}'")
        shards.append({"dir": g.root.name, "n": len(g), "offset": offset})
        offset += len(g)
        skipped += [{**s, "shard": g.root.name} for s in g.skipped]
    info = {
        "format": FORMAT,
        "n": offset,
        "dim": first["dim"],
        "dtype": first["dtype"],
        "encoder": first["encoder"],
        "source": source,
        "skipped": skipped,
        "plan": plan,
        "shards": shards,
    }
    write_text_checked(root / "gallery.json", json.dumps(info, indent=1))
    return info


def is_sharded(info: dict) -> bool:
    return "shards" in info


# -- the gallery and its embeddings ------------------------------------------------------------
class ShardedGallery(Gallery):
    """A sharded gallery directory, opened: the items of every shard in global row order.

    ``image_emb`` (and ``caption_emb``) are :class:`ShardedArray` views; the search engine is
    chosen by ``scale`` (a recipe's ``scale`` section, :class:`~.scale.ScaleConfig`).
    """

    def __init__(self, root: Path, info: dict, items: list[GalleryItem], scale: dict | None = None):
        super().__init__(root, info, items)
        from .scale import scale_settings

        self.scale = scale_settings(scale)
        self.shards = info["shards"]
        self.offsets = np.array([s["offset"] for s in self.shards] + [info["n"]], np.int64)
        self._search: ShardSearch | None = None

    @property
    def search_engine(self) -> "ShardSearch":
        if self._search is None:
            self._search = ShardSearch(self, self.scale)
        return self._search

    def shard_dir(self, s: int) -> Path:
        return self.root / self.shards[s]["dir"]

    @property
    def image_emb(self) -> "ShardedArray":
        if self._image_emb is None:
            self._image_emb = ShardedArray(self, "image")
        return self._image_emb

    def caption_emb(self, key: str, encoder, *, dtype: str | None = None) -> "ShardedArray":
        """As :meth:`Gallery.caption_emb` (one file of global rows), viewed shard by shard."""
        super().caption_emb(key, encoder, dtype=dtype)
        return ShardedArray(self, str(self._caption_emb_file(key, encoder)))

    def derived_emb(self, kind: str, key: str) -> "ShardedArray | None":
        """As :meth:`Gallery.derived_emb` (one file of global rows), viewed shard by shard."""
        if super().derived_emb(kind, key) is None:
            return None
        return ShardedArray(self, str(self._derived_file(kind, key)))

    def set_meta(self, meta_by_id: dict[str, dict[str, Any]]) -> int:
        """Replace items' ``meta`` in the shard that holds each (see :meth:`Gallery.set_meta`)."""
        changed = 0
        for s in range(len(self.shards)):
            changed += Gallery.open(self.shard_dir(s)).set_meta(meta_by_id)
        for it in self.items:
            if it.id in meta_by_id:
                it.meta = dict(meta_by_id[it.id])
        return changed

    def close(self) -> None:
        if self._search is not None:
            self._search.close()
            self._search = None


def open_sharded(root: Path, info: dict, scale: dict | None = None) -> ShardedGallery:
    items: list[GalleryItem] = []
    for s in info["shards"]:
        try:
            g = Gallery.open(root / s["dir"])
        except IntegrityError as e:
            raise IntegrityError(
                f"sharded gallery '{root}': {str(e).split('; rebuild')[0].split('; rerun')[0]}; "
                f"{rebuild_hint(root, info)}"
            ) from None
        if len(g) != s["n"]:
            raise InputError(
                f"sharded gallery '{root}': shard '{s['dir']}' holds {len(g)} items, "
                f"the manifest says {s['n']}; rebuild it"
            )
        items += g.items
    return ShardedGallery(root, info, items, scale)


class ShardedArray:
    """A read-only ``[N, d]`` view over the shards of one embedding source.

    Indexing reads rows from the shard files (memory-mapped); ``np.asarray`` materialises
    the whole array (logged: the methods that need it do not scale past memory); the
    scoring-core functions given this object run on the shards (``__agentcir_kernel__``).
    """

    ndim = 2

    def __init__(self, gallery: ShardedGallery, source: str):
        self.gallery = gallery
        self.source = source
        self._parts: list[np.ndarray] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.gallery.info["n"]), int(self.gallery.info["dim"]))

    @property
    def dtype(self) -> np.dtype:
        return self.parts[0].dtype

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def parts(self) -> list[np.ndarray]:
        if self._parts is None:
            g = self.gallery
            self._parts = [source_rows(g.root, s, self.source) for s in g.shards]
        return self._parts

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        n = self.shape[0]
        rows = np.where(rows < 0, rows + n, rows)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise IndexError(f"row index out of range for a sharded gallery of {n} rows")
        shard = np.searchsorted(self.gallery.offsets, rows, side="right") - 1
        out = np.empty((len(rows), self.shape[1]), self.dtype)
        for s in np.unique(shard):
            m = shard == s
            out[m] = self.parts[s][rows[m] - self.gallery.offsets[s]]
        return out

    def __getitem__(self, idx):
        cols = slice(None)
        if isinstance(idx, tuple):
            idx, cols = idx[0], idx[1:] if len(idx) > 2 else idx[1]
        if isinstance(idx, (int, np.integer)):
            return self._rows(np.array([int(idx)]))[0][cols]
        if isinstance(idx, slice):
            rows = np.arange(*idx.indices(self.shape[0]))
        else:
            rows = np.asarray(idx)
            if rows.dtype == bool:
                rows = np.flatnonzero(rows)
        return self._rows(rows.astype(np.int64).ravel())[:, cols]

    def __array__(self, dtype=None, copy=None):
        log.info("materialising the sharded gallery '%s' (%d x %d) in memory", self.gallery.root, *self.shape)
        a = np.concatenate(self.parts)
        return a if dtype is None else a.astype(dtype)

    def __agentcir_kernel__(self, name: str, args: dict[str, Any]):
        return self.gallery.search_engine.call(name, args)


# -- one shard's work ---------------------------------------------------------------------------
# -- the coordinator ------------------------------------------------------------------------
def _softmax(x: np.ndarray) -> np.ndarray:
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return (x / x.sum(axis=-1, keepdims=True)).astype(np.float32)


class ShardSearch:
    """Runs the scoring-core calls of a sharded gallery on its shards and merges them exactly.

    ``scale["engine"]``: ``local`` (a :class:`ShardWorker` per shard in this process) or ``ray``
    (one Ray actor per shard, :mod:`.scale.ray_search`); ``scale["search"]``: ``exact`` or an
    approximate index kind built by ``agentcir build-index`` (used by ``cosine_topk``; the
    whole-gallery statistics of OCTOPUS and LDRE stay exact scans).
    """

    def __init__(self, gallery: ShardedGallery, scale: dict):
        from .scale import ann_paths

        self.gallery, self.scale = gallery, scale
        paths = ann_paths(gallery, scale) if scale["search"] != "exact" else [None] * len(gallery.shards)
        specs = [
            dict(
                root=str(gallery.root),
                shard=s,
                ann=None if p is None else str(p),
                nprobe=scale["nprobe"],
                ef_search=scale["ef_search"],
                refine=scale["refine"],
            )
            for s, p in zip(gallery.shards, paths)
        ]
        if scale["engine"] == "ray":
            from .scale.ray_search import RayShards

            self.workers = RayShards(specs, scale)
        else:
            self.workers = LocalShards(specs)

    def close(self) -> None:
        self.workers.close()

    def call(self, name: str, a: dict[str, Any]):
        from .. import kernels

        g = self.gallery
        fn = getattr(self, "_" + name, None)
        if fn is None:
            raise InputError(f"scoring-core function '{name}' has no sharded implementation")
        a = dict(a)  # its ``backend`` (the call's, ``auto`` by default) is the one the shards use
        N = len(g)
        if a.get("exclude") is not None:
            from ..kernels._inputs import check_exclude

            Q = next(len(a[x]) for x in ("queries", "proxies", "reference") if a.get(x) is not None)
            a["exclude"] = check_exclude(a["exclude"], Q, N)
        return fn(kernels, a)

    def _topk(self, op: str, source: str, a: dict, k: int):
        res = self.workers.run("topk", op, source, a)
        return merge_topk([r[0] for r in res], [r[1] for r in res], k)

    def _cosine_topk(self, kernels, a):
        g = a.pop("gallery")
        q = np.ascontiguousarray(np.asarray(a["queries"], np.float32))
        return kernels.TopK(*self._topk("cosine_topk", g.source, dict(a, queries=q), a["k"]))

    def _proxy_scores_topk(self, kernels, a):
        g = a.pop("gallery")
        p = np.asarray(a["proxies"], np.float32)
        if a["agg"] != "octopus":
            return kernels.TopK(*self._topk("proxy_scores_topk", g.source, dict(a, proxies=p), a["k"]))
        w = self._octopus_weights(kernels, dict(reference=a["reference"], proxies=p, gallery=g, tau=a["tau"]))
        e = _octopus_query(p, w)
        return kernels.TopK(
            *self._topk(
                "cosine_topk",
                g.source,
                dict(
                    queries=e,
                    k=a["k"],
                    exclude=a["exclude"],
                    exclude_score=a["exclude_score"],
                    backend=a.get("backend"),
                ),
                a["k"],
            )
        )

    def _octopus_gap_sums(self, kernels, a):
        ref, p = np.asarray(a["reference"], np.float32), np.asarray(a["proxies"], np.float32)
        return sum(self.workers.run("gap_sums", ref, p, a.get("backend")))

    def _octopus_weights(self, kernels, a):
        s = self._octopus_gap_sums(kernels, a) / len(self.gallery)
        return _softmax(s / a["tau"])

    def _ldre_weights(self, kernels, a):
        b, p, m = np.asarray(a["before"], np.float32), np.asarray(a["proxies"], np.float32), int(a["topk"])
        res = self.workers.run("drops", b, p, m, a.get("backend"))
        top = np.concatenate(res, axis=-1).astype(np.float64)
        s = -np.sort(-top, axis=-1)[..., :m].sum(axis=-1)
        mx = s.max(axis=-1, keepdims=True)
        return _softmax(np.where(mx > 0, s / np.where(mx > 0, mx, 1.0) / a["tau"], 0.0))

    def _octopus_topk(self, kernels, a):
        C = a.get("captions")  # each shard scores its own image rows
        ref, p = np.asarray(a["reference"], np.float32), np.asarray(a["proxies"], np.float32)
        target = np.asarray(a["target"], np.float32)
        visual = None if a.get("visual") is None else np.asarray(a["visual"], np.float32)
        if C is not None and not isinstance(C, ShardedArray):
            raise InputError(
                "octopus_topk on a sharded gallery: captions must be the gallery's caption_emb "
                "(or its image_emb), not an in-memory array"
            )
        w = self._octopus_weights(kernels, dict(reference=ref, proxies=p, tau=a["tau"]))
        e = _octopus_query(p, w)
        res = self.workers.run(
            "octopus",
            e,
            target,
            visual,
            None if C is None else C.source,
            a["k"],
            a["lam"],
            a["entropy_tau"],
            a["exclude"],
            a["exclude_score"],
            a.get("backend"),
        )
        scores, ids = merge_topk([r[0] for r in res], [r[1] for r in res], a["k"])
        H = np.stack([r[2] for r in res], axis=1)  # [Q, S] shard entropies
        L = np.stack([r[3] for r in res], axis=1)  # [Q, S] shard log partition functions
        top = L.max(axis=1, keepdims=True)
        wts = np.exp(L - np.where(np.isfinite(top), top, 0.0))
        wts = wts / np.maximum(wts.sum(axis=1, keepdims=True), 1e-300)
        # H = log Z - E[x]; per shard E_s[x] = log Z_s - H_s; E[x] = sum_s (Z_s / Z) E_s[x]
        logz = top[:, 0] + np.log(np.maximum(np.exp(L - top).sum(axis=1), 1e-300))
        ex = np.where(wts > 0, L - H, 0.0)
        entropy = (logz - (wts * ex).sum(axis=1)).astype(np.float32)
        return kernels.OctopusTopK(scores, ids, w, entropy, logz.astype(np.float32))


def _octopus_query(proxies: np.ndarray, w: np.ndarray) -> np.ndarray:
    e = np.einsum("qk,qkd->qd", w.astype(np.float64), proxies.astype(np.float64))
    return (e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)).astype(np.float32)


class LocalShards:
    """The shard workers in this process (``engine=local``)."""

    def __init__(self, specs: Sequence[dict]):
        self.workers = [ShardWorker(**s) for s in specs]

    def run(self, method: str, *args) -> list:
        return [getattr(w, method)(*args) for w in self.workers]

    def close(self) -> None:
        self.workers = []
