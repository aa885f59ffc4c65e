"""The gallery: item ids, image paths, memory-mapped embeddings, captions, metadata.

A gallery lives in a directory::

    gallery.json            format, size, dim, dtype, encoder identity, skipped files
    items.jsonl             one row per item: id, path, caption (optional), meta
    image_emb.npy           [N, dim] float32 or float16, opened memory-mapped
    image_codes.npy         int8 galleries (dtype ``int8``): [N, dim] int8 codes and
    image_scales.npy        [N] float32 per-row scales of image_emb.npy (float32 there, for the
                            exact re-rank; :mod:`.int8_rows`)
    captions/<hash>.jsonl   captions made by a captioner (identity-keyed)
    caption_emb/<hash>.npy  their embeddings by the gallery's encoder
    derived/<kind>/<key>.npy  [N, d] arrays a method derives from every item (identity-keyed,
                            e.g. Paracosm's image + synthetic-counterpart index)

Embeddings are computed once, in resumable chunks (an interrupted build keeps every
finished chunk), and opening a gallery with a different encoder is an error.

Integrity: ``gallery.json``, ``items.jsonl`` (with its row count), ``image_emb.npy``, the caption
files and caption embeddings carry blake2b sidecars (``<name>.b2``, :mod:`.integrity`), checked
when the gallery is opened (the arrays' shapes too). A damaged gallery is rebuilt by
:meth:`Gallery.build` (a run, ``agentcir index``) and is an :class:`~.integrity.IntegrityError`
naming the file and the rebuilding command when only opened (``search``, ``serve``, ``eval``);
damaged captions and caption embeddings are recomputed. A gallery written before the sidecars
existed is checked for its row counts and shapes, and its sidecars are written on first open
(when its folder is writable), so later damage is caught.
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
from .images import DECODE_VERSION, Skipped, list_images
from .integrity import (
    Damaged,
    IntegrityError,
    check_sidecar,
    read_json_checked,
    read_sidecar,
    recompute_warning,
    remove_with_sidecar,
    warn_once,
    write_sidecar,
)
from .locks import hold_lock

log = logging.getLogger(__name__)

FORMAT = 1
CHUNK = 2048
#: the files of a built gallery, each with a checksum sidecar
GALLERY_FILES = ("gallery.json", "items.jsonl", "image_emb.npy", "image_codes.npy", "image_scales.npy")
#: storage dtypes of the image embeddings; ``int8`` stores float32 rows plus their int8 codes and scales
GALLERY_DTYPES = ("float32", "float16", "int8")


def float_dtype(dtype: str) -> str:
    """The dtype of a gallery's float arrays (image rows, caption and derived embeddings): ``float32`` for int8."""
    return "float32" if dtype == "int8" else dtype


def rebuild_hint(root: Path, info: dict | None = None) -> str:
    """The command that rebuilds the gallery at ``root`` (from what ``gallery.json`` says of its source)."""
    info = info if isinstance(info, dict) else {}
    src = str(info.get("source") or "")
    enc = (info.get("encoder") or {}).get("key") if isinstance(info.get("encoder"), dict) else None
    if src.startswith("dataset "):
        return f"rerun the `agentcir run` command of {src}: it rebuilds the gallery"
    if src:
        return f"rebuild it with: agentcir index '{src}' --out '{root}'" + (f" encoder={enc}" if enc else "")
    return f"rebuild it with: agentcir index FOLDER --out '{root}' (FOLDER: the photos it was built from)"


def _lenient_info(root: Path) -> dict:
    """``gallery.json`` parsed without its checksum (for the rebuild hint of a damaged gallery)."""
    try:
        info = json.loads((root / "gallery.json").read_bytes())
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def remove_gallery_files(root: Path) -> None:
    """Remove a built gallery's own files (their sidecars too); captions and caption embeddings stay."""
    for name in GALLERY_FILES:
        remove_with_sidecar(root / name)


def _write_int8(root: Path, emb: np.ndarray) -> None:
    """``image_codes.npy`` and ``image_scales.npy`` of the float32 rows ``emb`` (sealed like image_emb.npy)."""
    from ..kernels import Int8Gallery, quantize_int8

    N, d = emb.shape
    with atomic_path(root / "image_codes.npy") as codes_tmp, atomic_path(root / "image_scales.npy") as scales_tmp:
        codes = np.lib.format.open_memmap(codes_tmp, mode="w+", dtype=np.int8, shape=(N, d))
        scales = np.lib.format.open_memmap(scales_tmp, mode="w+", dtype=np.float32, shape=(N,))
        quantize_int8(emb, out=Int8Gallery(codes, scales))
        codes.flush()
        scales.flush()
        del codes, scales
    write_sidecar(root / "image_codes.npy", rows=N)
    write_sidecar(root / "image_scales.npy", rows=N)


def _with_int8(root: Path, emb: np.ndarray) -> np.ndarray:
    """The float32 rows ``emb`` carrying their checked int8 codes and scales (:class:`.int8_rows.Int8Rows`)."""
    from ..kernels import Int8Gallery
    from .int8_rows import Int8Rows

    N, d = emb.shape
    codes = _check_emb(root / "image_codes.npy", N, d)
    f = root / "image_scales.npy"
    rec = check_sidecar(f)
    try:
        scales = np.load(f, mmap_mode="r")
    except (ValueError, OSError, EOFError) as e:
        raise Damaged(f, f"cannot be read ({e})") from None
    if rec is None:
        raise Damaged(f, "has no checksum sidecar")
    if codes.dtype != np.int8 or scales.shape != (N,) or scales.dtype != np.float32:
        raise Damaged(
            f, f"codes {codes.dtype} {codes.shape} / scales {scales.dtype} {scales.shape} do not fit ({N}, {d})"
        )
    return Int8Rows.wrap(emb, Int8Gallery(codes, scales))


def _seal_legacy(root: Path, path: Path, **extra) -> None:
    """Write the sidecar of a file from before checksums existed (when the folder is writable)."""
    warn_once(
        f"legacy:{root}",
        "gallery '%s' was built before its files carried checksums: they are written now, from the files as they are",
        root,
    )
    try:
        write_sidecar(path, **extra)
    except OSError:
        pass


def _check_emb(path: Path, n: int, dim: int) -> np.ndarray:
    """An embeddings file checked against its sidecar and the expected shape, memory-mapped."""
    rec = check_sidecar(path)
    try:
        a = np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as e:
        raise Damaged(path, f"cannot be read ({e})") from None
    if a.ndim != 2 or a.shape[0] != n or (dim and a.shape[1] != dim):
        raise Damaged(path, f"holds an array of shape {tuple(a.shape)}, expected ({n}, {dim})")
    if rec is None:
        _seal_legacy(path.parent, path, rows=n)
    return a


@dataclass
class GalleryItem:
    id: str
    path: str
    caption: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def folder_ids(root: Path, paths: Sequence[Path]) -> list[str]:
    """Item ids of image files under ``root``: the path relative to it without its suffix
    (``album/IMG_0001``), or with its suffix where two files share a stem (``IMG_0001.jpg`` beside
    ``IMG_0001.png``, a common phone export): distinct, and the same for the same folder."""
    full = [p.relative_to(root).as_posix() for p in paths]
    ids = [p.relative_to(root).with_suffix("").as_posix() for p in paths]
    while True:
        seen: dict[str, list[int]] = {}
        for n, i in enumerate(ids):
            seen.setdefault(i, []).append(n)
        clashes = [ns for ns in seen.values() if len(ns) > 1]
        if not clashes:
            return ids
        for ns in clashes:
            for n in ns:
                ids[n] = full[n]  # distinct: two files never share a relative path


def items_from_folder(
    folder: str | Path, *, follow_links: bool = False, links: list | None = None
) -> tuple[list[GalleryItem], list[Path]]:
    """Gallery items for every image under ``folder`` (ids: :func:`folder_ids`).

    Returns the items and the non-image files that were skipped. A symlinked folder is followed
    once with ``follow_links`` (loops refused), else skipped; the folders not walked are appended
    to ``links`` (see :func:`~agentcir.framework.images.list_images`) and logged.
    """
    root = Path(folder)
    links = [] if links is None else links
    images, others = list_images(root, follow_links=follow_links, links=links)
    items = [GalleryItem(i, str(p.resolve())) for i, p in zip(folder_ids(root, images), images)]
    if others:
        log.warning("skipped %d non-image file(s) in '%s' (e.g. %s)", len(others), folder, others[0].name)
    if links:
        log.warning(
            "did not walk %d folder(s) in '%s': %s",
            len(links),
            folder,
            "; ".join(f"{s.path}: {s.reason}" for s in links[:3]) + (" ..." if len(links) > 3 else ""),
        )
    return items, others


def decode_version(plan: dict | None) -> int:
    """The :data:`~agentcir.framework.images.DECODE_VERSION` a gallery's plan was embedded with (1 when it
    predates the field)."""
    return int((plan or {}).get("decode", 1))


def decode_note(plan: dict | None) -> str:
    v = decode_version(plan)
    return (
        f"decode version {v}, EXIF orientation ignored: portrait photos embedded sideways"
        if v < 2
        else f"decode version {v}; this agentcir decodes with version {DECODE_VERSION}"
    )


def stale_decode(old_plan: dict | None, plan: dict) -> bool:
    """Whether a gallery built with ``old_plan`` is the one ``plan`` asks for, but embedded by another
    image decoder (so it is re-embedded rather than refused)."""
    if not isinstance(old_plan, dict) or decode_version(old_plan) == plan.get("decode", DECODE_VERSION):
        return False
    strip = lambda d: {k: v for k, v in d.items() if k != "decode"}  # noqa: E731
    return strip(old_plan) == strip(plan)


def clear_built(root: Path) -> None:
    """Remove what a gallery build wrote into ``root`` (embeddings, items, captions made from its
    images), so that it is built again; ``gallery.json`` first, so a kill leaves no half gallery."""
    for name in ("gallery.json", "image_emb.npy", "items.jsonl"):
        (root / name).unlink(missing_ok=True)
    for name in ("captions", "caption_emb", "derived", "_chunks"):
        if (root / name).is_dir():
            shutil.rmtree(root / name)


def read_gallery_info(root: Path, encoder=None) -> dict:
    """The checked ``gallery.json`` of gallery directory ``root`` (sharded or not); with ``encoder``,
    check it is the one that indexed the gallery. Raises :class:`InputError` (no gallery, another
    format, an older image decoder, another encoder) or :class:`IntegrityError` (a damaged file)."""
    meta = root / "gallery.json"
    if not meta.is_file():
        raise InputError(f"'{root}' is not a gallery folder (no gallery.json); build one with `agentcir index`")
    try:
        info = read_json_checked(meta)
        if not isinstance(info, dict) or not isinstance(info.get("encoder"), dict):
            raise Damaged(meta, "is not a gallery description")
    except Damaged as e:
        raise IntegrityError(f"gallery file {e}; {rebuild_hint(root, _lenient_info(root))}") from None
    if read_sidecar(meta) is None:
        _seal_legacy(root, meta)
    if info.get("format") != FORMAT:
        raise InputError(f"gallery '{root}' has format {info.get('format')}, this agentcir reads format {FORMAT}")
    if decode_version(info.get("plan")) != DECODE_VERSION:
        how = (
            f"`agentcir index {info['source']} --out {root}`"
            if str(info.get("source", "")).startswith("/")
            else "the command that built it (`agentcir index FOLDER --out GALLERY`, or the run)"
        )
        raise InputError(
            f"gallery '{root}' was embedded by an older image decoder ({decode_note(info.get('plan'))}); "
            f"its embeddings do not match the photos as they are decoded now: re-embed it by rerunning {how}"
        )
    if encoder is not None and info["encoder"]["identity"] != encoder.identity:
        raise InputError(
            f"gallery '{root}' was indexed with encoder '{info['encoder']['key']}' "
            f"(identity {info['encoder']['identity']}), but encoder '{getattr(encoder, 'registry_key', '?')}' "
            f"(identity {encoder.identity}) was given: re-index the gallery with this encoder or select "
            f"encoder={info['encoder']['key']} with its original config"
        )
    return info


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
    def build(
        cls,
        root: str | Path,
        items: Sequence[GalleryItem],
        encoder,
        *,
        dtype: str = "float32",
        progress: bool | None = None,
        source: str = "",
        embed: Callable | None = None,
    ) -> "Gallery":
        """Embed ``items`` with ``encoder`` into ``root`` (resuming a build left unfinished).

        Items whose image cannot be decoded are skipped and counted in ``gallery.json``.
        ``embed`` replaces ``encoder.encode_images`` (same signature; the Ray job passes the
        embeddings it computed, :mod:`agentcir.framework.scale.embed`).
        """
        root = Path(root)
        if not items:
            raise InputError(f"cannot build gallery '{root}': no items")
        if dtype not in GALLERY_DTYPES:
            raise InputError(f"gallery dtype must be one of {', '.join(GALLERY_DTYPES)}, got '{dtype}'")
        ids = [it.id for it in items]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InputError(f"gallery '{root}': duplicate item id '{dup}'")
        enc_id = encoder.identity
        plan = {
            "items": stable_hash([[it.id, it.path] for it in items]),
            "encoder": enc_id,
            "dtype": dtype,
            "decode": DECODE_VERSION,
        }
        # one builder at a time (another process building the same gallery is waited for, then its
        # gallery is opened); a full disk or a read-only folder is a StorageError naming the path
        with (
            hold_lock(root.parent / f".{root.name}.build.lock", f"gallery build '{root}'", wait=True),
            storage_errors(root, "the gallery"),
        ):
            return cls._build_locked(root, items, encoder, dtype, progress, source, plan, embed)

    @classmethod
    def _build_locked(
        cls,
        root: Path,
        items: Sequence[GalleryItem],
        encoder,
        dtype: str,
        progress: bool | None,
        source: str,
        plan: dict,
        embed: Callable | None = None,
    ) -> "Gallery":
        enc_id = plan["encoder"]
        if (root / "gallery.json").is_file():
            try:
                old = read_json_checked(root / "gallery.json")
                if not isinstance(old, dict):
                    raise Damaged(root / "gallery.json", "is not a gallery description")
            except Damaged as e:  # rebuilt below
                recompute_warning(e, "the gallery is rebuilt")
                remove_gallery_files(root)
                old = None
            if old is not None and old.get("plan") != plan:
                if not stale_decode(old.get("plan"), plan):
                    raise InputError(
                        f"gallery folder '{root}' already holds a different gallery "
                        f"(encoder or items differ); choose another output folder or delete it"
                    )
                log.warning(
                    "gallery '%s' was embedded by an older image decoder (%s); re-embedding it",
                    root,
                    decode_note(old.get("plan")),
                )
                remove_gallery_files(root)
                clear_built(root)
                old = None
            if old is not None:
                try:
                    return cls.open(root, encoder=encoder)
                except IntegrityError as e:
                    warn_once(
                        f"rebuild:{root}", "%s; it is rebuilt now", str(e).split("; rebuild")[0].split("; rerun")[0]
                    )
                    remove_gallery_files(root)
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
        with tqdm(total=len(items), desc=f"indexing {root.name}", unit="img", disable=not show) as bar:
            for c in range(n_chunks):
                done = parts / f"{c:05d}.npz"
                chunk = items[c * CHUNK : (c + 1) * CHUNK]
                if done.is_file() and not _chunk_ok(done):
                    remove_with_sidecar(done)
                if not done.is_file():
                    skipped: list[Skipped] = []
                    moved = [0]

                    def tick(n: int, moved=moved) -> None:  # the bar moves after each encoder batch
                        moved[0] += n
                        bar.update(n)

                    paths = [it.path for it in chunk]
                    emb = (
                        embed(paths, progress=False, skipped=skipped)
                        if embed is not None
                        else encoder.encode_images(paths, progress=tick, skipped=skipped)
                    )
                    if moved[0] < len(chunk):  # an encoder that reports no batches: the chunk at once
                        bar.update(len(chunk) - moved[0])
                    bad = {s.index for s in skipped}
                    kept = np.array([i for i in range(len(chunk)) if i not in bad], dtype=np.int64) + c * CHUNK
                    with atomic_path(done) as tmp:
                        np.savez(
                            tmp,
                            emb=emb.astype(float_dtype(dtype)),
                            kept=kept,
                            skipped=np.array(json.dumps([[s.index + c * CHUNK, s.path, s.reason] for s in skipped])),
                        )
                    write_sidecar(done)
                else:
                    bar.update(len(chunk))

        embs, kept_all, skipped_all = [], [], []
        for c in range(n_chunks):
            with np.load(parts / f"{c:05d}.npz") as z:
                embs.append(z["emb"])
                kept_all.extend(int(i) for i in z["kept"])
                skipped_all.extend(json.loads(str(z["skipped"])))
        if not kept_all:
            raise InputError(
                f"cannot build gallery '{root}': none of the {len(items)} image(s) could be decoded "
                f"(first: {skipped_all[0][1]}: {skipped_all[0][2]})"
            )
        emb = np.concatenate(embs)
        with atomic_path(root / "image_emb.npy") as tmp:
            np.save(tmp, emb)
        write_sidecar(root / "image_emb.npy", rows=len(kept_all))
        if dtype == "int8":
            _write_int8(root, np.load(root / "image_emb.npy", mmap_mode="r"))
        _write_items(root, [items[i] for i in kept_all])
        info = {
            "format": FORMAT,
            "n": len(kept_all),
            "dim": int(emb.shape[1]),
            "dtype": dtype,
            "encoder": {"key": getattr(encoder, "registry_key", ""), "identity": enc_id},
            "source": source,
            "skipped": [{"path": p, "reason": r} for _, p, r in skipped_all],
            "plan": plan,
        }
        atomic_write_text(root / "gallery.json", json.dumps(info, indent=1))  # last: marks the gallery complete
        write_sidecar(root / "gallery.json")
        shutil.rmtree(parts)
        if skipped_all:
            log.warning(
                "gallery '%s': %d item(s) indexed, %d skipped (unreadable)", root, len(kept_all), len(skipped_all)
            )
        return cls.open(root, encoder=encoder)

    @classmethod
    def open(cls, root: str | Path, encoder=None) -> "Gallery":
        """Open an unsharded gallery directory; with ``encoder``, check it is the one that indexed it.

        A sharded gallery (``gallery.json`` lists ``shards``) is an :class:`InputError` here: open a
        gallery directory of either kind with :func:`agentcir.framework.galleries.open_gallery`."""
        root = Path(root)
        info = read_gallery_info(root, encoder)
        if "shards" in info:
            raise InputError(
                f"gallery '{root}' is sharded ({len(info['shards'])} shards): open it with "
                f"agentcir.framework.galleries.open_gallery, which opens both kinds"
            )
        return cls.from_info(root, info)

    @classmethod
    def from_info(cls, root: Path, info: dict) -> "Gallery":
        """The unsharded gallery in ``root`` whose checked description is ``info`` (:func:`read_gallery_info`)."""
        try:
            items = _read_items(root / "items.jsonl", int(info.get("n", -1)))
            g = cls(root, info, items)
            g._image_emb = _check_emb(root / "image_emb.npy", len(items), int(info.get("dim") or 0))
            if info.get("dtype") == "int8":
                g._image_emb = _with_int8(root, g._image_emb)
        except Damaged as e:
            raise IntegrityError(f"gallery file {e}; {rebuild_hint(root, info)}") from None
        return g

    # -- access -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        """The embedding dimension."""
        return int(self.info["dim"])

    @property
    def encoder_identity(self) -> str:
        """The identity of the encoder that embedded the gallery."""
        return self.info["encoder"]["identity"]

    @property
    def skipped(self) -> list[dict]:
        """The files left out of the gallery, each with the reason."""
        return list(self.info.get("skipped", []))

    @property
    def image_emb(self) -> np.ndarray:
        """``[N, dim]`` embeddings, memory-mapped read-only (an int8 gallery: the float32 rows as an
        :class:`~.int8_rows.Int8Rows`, whose gallery ops scan the int8 codes and re-rank exactly)."""
        if self._image_emb is None:
            try:
                emb = _check_emb(self.root / "image_emb.npy", len(self), self.dim)
                self._image_emb = _with_int8(self.root, emb) if self.info.get("dtype") == "int8" else emb
            except Damaged as e:
                raise IntegrityError(f"gallery file {e}; {rebuild_hint(self.root, self.info)}") from None
        return self._image_emb

    def index_of(self, item_id: str) -> int:
        """Row of ``item_id``, or -1 when the gallery does not hold it."""
        return self._index.get(item_id, -1)

    def path_of(self, row: int) -> Path:
        """The image file of gallery row ``row``."""
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
            with storage_errors(self.root, "the gallery"):
                _write_items(self.root, self.items)
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
            try:
                check_sidecar(f)
                caps = [json.loads(line)["caption"] for line in f.read_bytes().splitlines() if line.strip()]
                if len(caps) != len(self) or not all(isinstance(c, str) for c in caps):
                    raise Damaged(f, f"holds {len(caps)} captions for {len(self)} items")
            except (Damaged, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                damage = e if isinstance(e, Damaged) else Damaged(f, "is not a caption file")
                recompute_warning(damage, "the captions are recomputed (captioner calls come from the call cache)")
                remove_with_sidecar(f)
                return None
            self._captions[key] = caps
        return self._captions[key]

    def save_captions(self, key: str, captions: Sequence[str]) -> None:
        """Store one caption per item under ``key`` (a captioner's identity), beside the gallery."""
        if len(captions) != len(self):
            raise ValueError(f"gallery '{self.root}' has {len(self)} items, got {len(captions)} captions")
        d = self.root / "captions"
        with storage_errors(d, "the gallery's captions"):
            d.mkdir(exist_ok=True)
            with atomic_path(d / f"{key}.jsonl") as tmp, open(tmp, "w") as f:
                for i, c in zip(self.ids, captions):
                    f.write(json.dumps({"id": i, "caption": c}, ensure_ascii=False) + "\n")
            write_sidecar(d / f"{key}.jsonl", rows=len(captions))
        self._captions[key] = list(captions)

    def _caption_emb_file(self, key: str, encoder) -> Path:
        return self.root / "caption_emb" / f"{stable_hash(key, encoder.identity, n=20)}.npy"

    def has_caption_emb(self, key: str, encoder) -> bool:
        """Whether the embeddings of captions ``key`` by ``encoder`` are stored already (and sound:
        a damaged file is removed, to be recomputed, with a warning)."""
        f = self._caption_emb_file(key, encoder)
        if not f.is_file():
            return False
        try:
            _check_emb(f, len(self), 0)
            return True
        except Damaged as e:
            recompute_warning(e, "the caption embeddings are recomputed")
            remove_with_sidecar(f)
            return False

    def caption_emb(self, key: str, encoder, *, dtype: str | None = None) -> np.ndarray:
        """Embeddings of captions ``key`` by ``encoder`` (computed once, stored, memory-mapped)."""
        caps = self.captions(key)
        if caps is None:
            raise InputError(f"gallery '{self.root}' has no captions '{key}'")
        f = self._caption_emb_file(key, encoder)
        d = f.parent
        if not self.has_caption_emb(key, encoder):
            emb = encoder.encode_texts(caps).astype(dtype or float_dtype(self.info["dtype"]))
            with storage_errors(d, "the gallery's caption embeddings"):
                d.mkdir(exist_ok=True)
                with atomic_path(f) as tmp:
                    np.save(tmp, emb)
                write_sidecar(f, rows=len(caps))
        return np.load(f, mmap_mode="r")

    # -- derived arrays ---------------------------------------------------------------
    def _derived_file(self, kind: str, key: str) -> Path:
        for what, name in (("kind", kind), ("key", key)):
            if not name or not all(c.isalnum() or c in "_-." for c in name) or name.startswith("."):
                raise InputError(
                    f"gallery '{self.root}': a derived array's {what} must be a plain name "
                    f"(letters, digits, _ - .), got {name!r}"
                )
        return self.root / "derived" / kind / f"{key}.npy"

    def derived_emb(self, kind: str, key: str) -> np.ndarray | None:
        """The stored ``[N, d]`` array ``key`` of ``kind`` (one row per item, derived by a method from
        the items, e.g. Paracosm's index of images and their synthetic counterparts), memory-mapped;
        ``None`` when it is not stored (a damaged file is removed, to be recomputed, with a warning)."""
        f = self._derived_file(kind, key)
        if not f.is_file():
            return None
        try:
            return _check_emb(f, len(self), self.dim)
        except Damaged as e:
            recompute_warning(e, "the derived array is recomputed")
            remove_with_sidecar(f)
            return None

    def save_derived_emb(self, kind: str, key: str, emb: np.ndarray) -> np.ndarray:
        """Store ``emb`` (``[N, d]``, one row per item) as array ``key`` of ``kind`` beside the gallery
        (atomically, with its checksum sidecar); returns it memory-mapped."""
        emb = np.asarray(emb)
        if emb.shape != (len(self), self.dim):
            raise ValueError(
                f"gallery '{self.root}' has {len(self)} items of dimension {self.dim}, got an array "
                f"of shape {tuple(emb.shape)}"
            )
        f = self._derived_file(kind, key)
        with storage_errors(f.parent, "the gallery's derived arrays"):
            f.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(f) as tmp:
                np.save(tmp, emb.astype(float_dtype(self.info["dtype"])))
            write_sidecar(f, rows=len(self))
        return self.derived_emb(kind, key)

    def ensure_captions(self, key: str, make: Callable[[list[int]], list[str]]) -> list[str]:
        """Captions ``key``, calling ``make(rows)`` for them when not stored yet."""
        caps = self.captions(key)
        if caps is None:
            caps = make(list(range(len(self))))
            self.save_captions(key, caps)
        return caps


def _write_items(root: Path, items: Sequence[GalleryItem]) -> None:
    """``items.jsonl`` (atomically) and its sidecar with the row count."""
    with atomic_path(root / "items.jsonl") as tmp, open(tmp, "w") as f:
        for it in items:
            f.write(
                json.dumps({"id": it.id, "path": it.path, "caption": it.caption, "meta": it.meta}, ensure_ascii=False)
                + "\n"
            )
    write_sidecar(root / "items.jsonl", rows=len(items))


def _read_items(path: Path, n: int) -> list[GalleryItem]:
    """The rows of ``items.jsonl``, checked against its sidecar and the gallery's size ``n``."""
    rec = check_sidecar(path) if path.is_file() else None
    if not path.is_file():
        raise Damaged(path, "is missing")
    items = []
    try:
        for line in path.read_bytes().splitlines():
            if line.strip():
                d = json.loads(line)
                items.append(GalleryItem(d["id"], d["path"], d.get("caption"), d.get("meta") or {}))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise Damaged(path, f"is not a list of items (row {len(items) + 1}: {e})") from None
    if n >= 0 and len(items) != n:
        raise Damaged(path, f"holds {len(items)} rows, the gallery has {n} items")
    if rec is not None and rec.get("rows") not in (None, len(items)):
        raise Damaged(path, f"holds {len(items)} rows, {rec['rows']} were written")
    if len({it.id for it in items}) != len(items):
        raise Damaged(path, "lists an item id twice")
    if rec is None:
        _seal_legacy(path.parent, path, rows=len(items))
    return items


def _chunk_ok(path: Path) -> bool:
    """Whether a finished build chunk passes its checksum and reads; a damaged one is recomputed."""
    try:
        check_sidecar(path)
        with np.load(path) as z:
            z["emb"], z["kept"], z["skipped"]
        return True
    except Damaged as e:
        recompute_warning(e, "the chunk is embedded again")
    except Exception as e:  # noqa: BLE001 -- a chunk from before checksums that no longer reads
        recompute_warning(Damaged(path, f"cannot be read ({type(e).__name__})"), "the chunk is embedded again")
    return False
