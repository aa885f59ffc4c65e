"""The gallery: item ids, image paths, memory-mapped embeddings, captions, metadata.

A gallery lives in a directory::

    gallery.json            format, size, dim, dtype, encoder identity, skipped files
    items.jsonl             one row per item: id, path, caption (optional), meta
    image_emb.npy           [N, dim] float32 or float16, opened memory-mapped
    captions/<hash>.jsonl   captions made by a captioner (identity-keyed)
    caption_emb/<hash>.npy  their embeddings by the gallery's encoder

Embeddings are computed once, in resumable chunks (an interrupted build keeps every
finished chunk), and opening a gallery with a different encoder is an error.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .errors import InputError
from .files import atomic_path, atomic_write_text, storage_errors
from .hashing import stable_hash
from .images import Skipped, list_images
from .locks import hold_lock

log = logging.getLogger("agentcir")

FORMAT = 1
CHUNK = 2048
#: the images embedded per call within a chunk: the progress bar moves after each such batch
PROGRESS_BATCH = 64


def progress_step(encoder) -> int:
    """Images per embedding call of a build: about :data:`PROGRESS_BATCH`, a whole number of the
    encoder's batches (so the encoder sees the same batches as one call per chunk)."""
    bs = int(getattr(getattr(encoder, "cfg", None), "batch_size", 0) or getattr(encoder, "default_batch_size", 0) or 0)
    return PROGRESS_BATCH if bs <= 0 else bs * max(1, -(-PROGRESS_BATCH // bs))


@dataclass
class GalleryItem:
    id: str
    path: str
    caption: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def items_from_folder(folder: str | Path) -> tuple[list[GalleryItem], list[Path]]:
    """Gallery items for every image under ``folder`` (id = path relative to it, no suffix).

    Returns the items and the non-image files that were skipped.
    """
    root = Path(folder)
    images, others = list_images(root)
    items = [GalleryItem(str(p.relative_to(root).with_suffix("")), str(p.resolve())) for p in images]
    if others:
        log.warning("skipped %d non-image file(s) in '%s' (e.g. %s)", len(others), folder, others[0].name)
    return items, others


class Gallery:
    """An opened gallery directory (embeddings memory-mapped)."""

    def __init__(self, root: Path, info: dict, items: list[GalleryItem]):
        self.root = root
        self.info = info
        self.items = items
        self.ids = [it.id for it in items]
        self.paths = [it.path for it in items]
        self._index = {i: n for n, i in enumerate(self.ids)}
        self._image_emb: np.ndarray | None = None
        self._captions: dict[str, list[str]] = {}

    # -- construction -----------------------------------------------------------------
    @classmethod
    def build(cls, root: str | Path, items: Sequence[GalleryItem], encoder, *, dtype: str = "float32",
              progress: bool | None = None, source: str = "", embed: Callable | None = None) -> "Gallery":
        """Embed ``items`` with ``encoder`` into ``root`` (resuming a build left unfinished).

        Items whose image cannot be decoded are skipped and counted in ``gallery.json``.
        ``embed`` replaces ``encoder.encode_images`` (same signature; the Ray job passes the
        embeddings it computed, :mod:`agentcir.framework.scale.embed`).
        """
        root = Path(root)
        if not items:
            raise InputError(f"cannot build gallery '{root}': no items")
        if dtype not in ("float32", "float16"):
            raise InputError(f"gallery dtype must be 'float32' or 'float16', got '{dtype}'")
        ids = [it.id for it in items]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InputError(f"gallery '{root}': duplicate item id '{dup}'")
        enc_id = encoder.identity
        plan = {"items": stable_hash([[it.id, it.path] for it in items]), "encoder": enc_id, "dtype": dtype}
        # one builder at a time (another process building the same gallery is waited for, then its
        # gallery is opened); a full disk or a read-only folder is a StorageError naming the path
        with hold_lock(root.parent / f".{root.name}.build.lock", f"gallery build '{root}'", wait=True), \
                storage_errors(root, f"gallery '{root}'"):
            return cls._build_locked(root, items, encoder, dtype, progress, source, plan, embed)

    @classmethod
    def _build_locked(cls, root: Path, items: Sequence[GalleryItem], encoder, dtype: str, progress: bool | None,
                      source: str, plan: dict, embed: Callable | None = None) -> "Gallery":
        enc_id = plan["encoder"]
        if (root / "gallery.json").is_file():
            old = json.loads((root / "gallery.json").read_text())
            if old.get("plan") == plan:
                return cls.open(root, encoder=encoder)
            raise InputError(f"gallery folder '{root}' already holds a different gallery "
                             f"(encoder or items differ); choose another output folder or delete it")
        root.mkdir(parents=True, exist_ok=True)
        parts = root / "_chunks"
        parts.mkdir(exist_ok=True)
        marker = parts / "plan.json"
        if marker.is_file() and json.loads(marker.read_text()) != plan:
            shutil.rmtree(parts)
            parts.mkdir()
        atomic_write_text(marker, json.dumps(plan))

        from tqdm.auto import tqdm

        n_chunks = (len(items) + CHUNK - 1) // CHUNK
        show = progress if progress is not None else len(items) > CHUNK // 4
        step = progress_step(encoder)
        with tqdm(total=len(items), desc=f"indexing {root.name}", unit="img", disable=not show) as bar:
            for c in range(n_chunks):
                done = parts / f"{c:05d}.npz"
                chunk = items[c * CHUNK:(c + 1) * CHUNK]
                if not done.is_file():
                    skipped: list[Skipped] = []
                    parts_emb = []
                    for b in range(0, len(chunk), step):  # the bar moves every `step` images
                        part: list[Skipped] = []
                        sub = chunk[b:b + step]
                        parts_emb.append((embed or encoder.encode_images)([it.path for it in sub], progress=False, skipped=part))
                        skipped += [Skipped(s.index + b, s.path, s.reason) for s in part]
                        bar.update(len(sub))
                    emb = np.concatenate(parts_emb) if parts_emb else np.zeros((0, encoder.dim), np.float32)
                    bad = {s.index for s in skipped}
                    kept = np.array([i for i in range(len(chunk)) if i not in bad], dtype=np.int64) + c * CHUNK
                    with atomic_path(done) as tmp:
                        np.savez(tmp, emb=emb.astype(dtype), kept=kept,
                                 skipped=np.array(json.dumps([[s.index + c * CHUNK, s.path, s.reason] for s in skipped])))
                else:
                    bar.update(len(chunk))

        embs, kept_all, skipped_all = [], [], []
        for c in range(n_chunks):
            with np.load(parts / f"{c:05d}.npz") as z:
                embs.append(z["emb"])
                kept_all.extend(int(i) for i in z["kept"])
                skipped_all.extend(json.loads(str(z["skipped"])))
        if not kept_all:
            raise InputError(f"cannot build gallery '{root}': none of the {len(items)} image(s) could be decoded "
                             f"(first: {skipped_all[0][1]}: {skipped_all[0][2]})")
        emb = np.concatenate(embs)
        with atomic_path(root / "image_emb.npy") as tmp:
            np.save(tmp, emb)
        with atomic_path(root / "items.jsonl") as tmp, open(tmp, "w") as f:
            for i in kept_all:
                it = items[i]
                f.write(json.dumps({"id": it.id, "path": it.path, "caption": it.caption, "meta": it.meta}, ensure_ascii=False) + "\n")
        info = {"format": FORMAT, "n": len(kept_all), "dim": int(emb.shape[1]), "dtype": dtype,
                "encoder": {"key": getattr(encoder, "registry_key", ""), "identity": enc_id},
                "source": source, "skipped": [{"path": p, "reason": r} for _, p, r in skipped_all], "plan": plan}
        atomic_write_text(root / "gallery.json", json.dumps(info, indent=1))  # last: marks the gallery complete
        shutil.rmtree(parts)
        if skipped_all:
            log.warning("gallery '%s': %d item(s) indexed, %d skipped (unreadable)", root, len(kept_all), len(skipped_all))
        return cls.open(root, encoder=encoder)

    @classmethod
    def open(cls, root: str | Path, encoder=None, *, scale: dict | None = None) -> "Gallery":
        """Open a gallery directory; with ``encoder``, check it is the one that indexed it.

        A sharded gallery (``gallery.json`` lists ``shards``) opens as a
        :class:`~agentcir.framework.shards.ShardedGallery` searched as ``scale`` (a recipe's
        ``scale`` section) says."""
        root = Path(root)
        meta = root / "gallery.json"
        if not meta.is_file():
            raise InputError(f"'{root}' is not a gallery folder (no gallery.json); build one with `agentcir index`")
        info = json.loads(meta.read_text())
        if info.get("format") != FORMAT:
            raise InputError(f"gallery '{root}' has format {info.get('format')}, this agentcir reads format {FORMAT}")
        if encoder is not None and info["encoder"]["identity"] != encoder.identity:
            raise InputError(
                f"gallery '{root}' was indexed with encoder '{info['encoder']['key']}' "
                f"(identity {info['encoder']['identity']}), but encoder '{getattr(encoder, 'registry_key', '?')}' "
                f"(identity {encoder.identity}) was given: re-index the gallery with this encoder or select "
                f"encoder={info['encoder']['key']} with its original config")
        if "shards" in info:
            from .shards import open_sharded

            return open_sharded(root, info, scale)
        items = []
        with open(root / "items.jsonl") as f:
            for line in f:
                d = json.loads(line)
                items.append(GalleryItem(d["id"], d["path"], d.get("caption"), d.get("meta") or {}))
        return cls(root, info, items)

    # -- access -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.info["dim"])

    @property
    def encoder_identity(self) -> str:
        return self.info["encoder"]["identity"]

    @property
    def skipped(self) -> list[dict]:
        return list(self.info.get("skipped", []))

    @property
    def image_emb(self) -> np.ndarray:
        """``[N, dim]`` embeddings, memory-mapped read-only."""
        if self._image_emb is None:
            self._image_emb = np.load(self.root / "image_emb.npy", mmap_mode="r")
        return self._image_emb

    def index_of(self, item_id: str) -> int:
        """Row of ``item_id``, or -1 when the gallery does not hold it."""
        return self._index.get(item_id, -1)

    def path_of(self, row: int) -> Path:
        return Path(self.paths[row])

    def set_meta(self, meta_by_id: dict[str, dict[str, Any]]) -> int:
        """Replace the ``meta`` of the given items (e.g. re-extracted photo metadata) and rewrite
        ``items.jsonl`` atomically; embeddings are untouched. Returns how many items changed."""
        changed = 0
        for it in self.items:
            new = meta_by_id.get(it.id)
            if new is not None and new != it.meta:
                it.meta = dict(new)
                changed += 1
        if changed:
            with storage_errors(self.root, f"gallery '{self.root}'"), atomic_path(self.root / "items.jsonl") as tmp, \
                    open(tmp, "w") as f:
                for it in self.items:
                    f.write(json.dumps({"id": it.id, "path": it.path, "caption": it.caption, "meta": it.meta}, ensure_ascii=False) + "\n")
        return changed

    # -- captions ---------------------------------------------------------------------
    def captions(self, key: str = "dataset") -> list[str] | None:
        """Captions of every item: ``"dataset"`` ones from items.jsonl, or a captioner's by identity."""
        if key == "dataset":
            caps = [it.caption for it in self.items]
            return None if any(c is None for c in caps) else caps
        if key not in self._captions:
            f = self.root / "captions" / f"{key}.jsonl"
            if not f.is_file():
                return None
            self._captions[key] = [json.loads(line)["caption"] for line in f.open()]
        return self._captions[key]

    def save_captions(self, key: str, captions: Sequence[str]) -> None:
        if len(captions) != len(self):
            raise ValueError(f"gallery '{self.root}' has {len(self)} items, got {len(captions)} captions")
        d = self.root / "captions"
        with storage_errors(d, f"captions of gallery '{self.root}'"):
            d.mkdir(exist_ok=True)
            with atomic_path(d / f"{key}.jsonl") as tmp, open(tmp, "w") as f:
                for i, c in zip(self.ids, captions):
                    f.write(json.dumps({"id": i, "caption": c}, ensure_ascii=False) + "\n")
        self._captions[key] = list(captions)

    def _caption_emb_file(self, key: str, encoder) -> Path:
        return self.root / "caption_emb" / f"{stable_hash(key, encoder.identity, n=20)}.npy"

    def has_caption_emb(self, key: str, encoder) -> bool:
        """Whether the embeddings of captions ``key`` by ``encoder`` are stored already."""
        return self._caption_emb_file(key, encoder).is_file()

    def caption_emb(self, key: str, encoder, *, dtype: str | None = None) -> np.ndarray:
        """Embeddings of captions ``key`` by ``encoder`` (computed once, stored, memory-mapped)."""
        caps = self.captions(key)
        if caps is None:
            raise InputError(f"gallery '{self.root}' has no captions '{key}'")
        f = self._caption_emb_file(key, encoder)
        d = f.parent
        if not f.is_file():
            emb = encoder.encode_texts(caps).astype(dtype or self.info["dtype"])
            with storage_errors(d, f"caption embeddings of gallery '{self.root}'"):
                d.mkdir(exist_ok=True)
                with atomic_path(f) as tmp:
                    np.save(tmp, emb)
        return np.load(f, mmap_mode="r")

    def ensure_captions(self, key: str, make: Callable[[list[int]], list[str]]) -> list[str]:
        """Captions ``key``, calling ``make(rows)`` for them when not stored yet."""
        caps = self.captions(key)
        if caps is None:
            caps = make(list(range(len(self))))
            self.save_captions(key, caps)
        return caps
