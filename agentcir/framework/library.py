"""A photo library that changes: index a folder into a gallery again, paying only for what changed.

:func:`index_into` is what ``agentcir index FOLDER --out G`` runs. On an empty ``G`` (or an
unfinished build) it is a plain build. On a finished gallery it compares the folder with what
the gallery holds, keyed by **content** (sha256 of each file's bytes):

- a new file, or a file whose bytes changed, is embedded;
- a renamed or moved file (same bytes, new path) reuses its embedding: nothing is embedded;
- a deleted file's row is dropped;
- every row's metadata is the one just read from the folder (an EXIF or XMP sidecar edit, a
  rotation tag), so a metadata change costs no embedding either.

Rows follow the folder's order, so row numbers change when files come and go; every artefact
keyed by row is rewritten in the new order: embeddings, ``items.jsonl`` (ids, paths,
metadata), stored captions and their embeddings (kept when every row's photo had one, else
left to the next search that needs them). Thumbnails of ``agentcir serve`` are keyed by file,
not row, so they stay valid. The approximate (faiss) indexes of a sharded gallery are made for
its old rows: an update builds each again over the new rows with the settings its folder records
(one that records none is dropped), and the shards are rewritten with the reused embeddings.

**Kill-safe.** The new gallery is built beside the old one (``.G.update``, resumable like any
build) and swapped in by one atomic rename (Linux ``renameat2(RENAME_EXCHANGE)``; elsewhere two
renames, and the next run finishes a swap a kill interrupted). Until the swap, ``G`` is the
previous gallery, whole; a SIGKILLed update is completed by running the same command again.

A gallery indexed with another encoder is never mixed with this one: the update refuses with
the two encoders named.

``content.json`` in the gallery records each file's (size, mtime, sha256), so an update hashes
only files whose size or mtime moved. A gallery made before this file existed is hashed once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError
from .files import atomic_path, atomic_write_text, storage_errors
from .integrity import write_sidecar
from .galleries import open_gallery
from .gallery import Gallery, GalleryItem
from .hashing import file_digest, stable_hash
from .images import Skipped
from .locks import hold_lock

log = logging.getLogger(__name__)

#: per gallery file: its size, mtime and content hash (``{"files": {path: [size, mtime_ns, sha256]}}``)
CONTENT = "content.json"
#: in the folder an update is built in: which update it is (a different one starts afresh)
UPDATE_KEY = "update.json"
#: files of a gallery folder that do not depend on its rows, carried into the updated gallery
#: (the domain check's reference embeddings, :mod:`agentcir.framework.domain`)
KEPT_FILES = ("domain_reference.npz",)


def staging_dir(out: Path) -> Path:
    """Where the update of gallery ``out`` is built before it is swapped in."""
    return out.parent / f".{out.name}.update"


def _previous_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.previous"


@dataclass
class Change:
    """What an update found and did."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: same id and bytes at another absolute path (the folder itself was moved)
    relocated: list[str] = field(default_factory=list)
    #: items whose metadata differs from the stored one (re-read from the files)
    metadata: list[str] = field(default_factory=list)
    #: images embedded / embeddings reused
    embedded: int = 0
    reused: int = 0
    #: artefacts dropped because they were made for the old rows (rebuilt on demand)
    dropped: list[str] = field(default_factory=list)
    #: approximate indexes built again over the new rows, with the settings they were built with
    rebuilt: list[str] = field(default_factory=list)

    @property
    def rows_changed(self) -> bool:
        return bool(self.added or self.changed or self.renamed or self.removed or self.relocated)

    def line(self) -> str:
        s = (
            f"update: {len(self.added)} new, {len(self.changed)} changed, {len(self.renamed)} renamed or moved, "
            f"{len(self.removed)} deleted, {len(self.metadata)} with new metadata"
            + (f", {len(self.relocated)} at a new location (the folder moved)" if self.relocated else "")
            + "; "
            f"embedded {self.embedded} image(s), reused {self.reused} embedding(s)"
        )
        if self.rebuilt:
            s += f"; built again over the new rows: {', '.join(self.rebuilt)}"
        if self.dropped:
            s += f"; dropped (made for the old rows): {', '.join(self.dropped)}"
        return s

    def to_json(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "changed": self.changed,
            "renamed": [list(r) for r in self.renamed],
            "removed": self.removed,
            "relocated": self.relocated,
            "metadata": self.metadata,
            "embedded": self.embedded,
            "reused": self.reused,
            "dropped": self.dropped,
            "rebuilt": self.rebuilt,
        }


# -- content hashes -------------------------------------------------------------------------
def _read_content(root: Path) -> dict[str, list]:
    f = root / CONTENT
    if not f.is_file():
        return {}
    try:
        return dict(json.loads(f.read_text()).get("files") or {})
    except (OSError, ValueError):
        return {}


def digests(paths: Sequence[str], known: dict[str, list] | None = None) -> dict[str, list]:
    """``{path: [size, mtime_ns, sha256]}`` of the readable ``paths``; a path whose size and
    mtime match ``known`` keeps its recorded hash (no read)."""
    known = known or {}
    out: dict[str, list] = {}
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        k = known.get(p)
        if k and k[0] == st.st_size and k[1] == st.st_mtime_ns:
            out[p] = list(k)
            continue
        try:
            out[p] = [st.st_size, st.st_mtime_ns, file_digest(p)]
        except OSError:
            continue
    return out


def _write_content(root: Path, files: dict[str, list]) -> None:
    atomic_write_text(root / CONTENT, json.dumps({"files": files}))


# -- the encoder that reuses embeddings -----------------------------------------------------
class ReusingEncoder:
    """``encoder`` whose ``encode_images`` takes an image's embedding from the old gallery when
    a row there has the same bytes, and embeds only the others (everything else delegated)."""

    def __init__(self, encoder, old: Gallery, old_rows_by_sha: dict[str, int], sha_of: dict[str, str]):
        self._encoder = encoder
        self._old = old
        self._rows = old_rows_by_sha
        self._sha = sha_of
        self.embedded = 0
        self.reused = 0

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode_images(
        self,
        images: Sequence,
        batch_size: int | None = None,
        *,
        progress: bool | None = None,
        skipped: list[Skipped] | None = None,
    ) -> np.ndarray:
        paths = [str(p) for p in images]
        old_row = [self._rows.get(self._sha.get(p, ""), -1) for p in paths]
        todo = [i for i, r in enumerate(old_row) if r < 0]
        vecs: dict[int, np.ndarray] = {}
        if todo:
            sk: list[Skipped] = []
            emb = self._encoder.encode_images([paths[i] for i in todo], batch_size, progress=False, skipped=sk)
            bad = {s.index for s in sk}
            for s in sk:
                if skipped is not None:
                    skipped.append(Skipped(todo[s.index], s.path, s.reason))
            for j, e in zip([i for n, i in enumerate(todo) if n not in bad], emb):
                vecs[j] = e
            self.embedded += len(todo)
        reuse = [i for i, r in enumerate(old_row) if r >= 0]
        if reuse:
            got = np.asarray(self._old.image_emb[np.array([old_row[i] for i in reuse])], np.float32)
            for i, e in zip(reuse, got):
                vecs[i] = e
            self.reused += len(reuse)
        order = sorted(vecs)
        if not order:
            return np.zeros((0, self._encoder.dim), np.float32)
        return np.stack([vecs[i] for i in order]).astype(np.float32)


# -- the swap -------------------------------------------------------------------------------
def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (Linux renameat2 RENAME_EXCHANGE); False when unavailable."""
    if os.name != "posix":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, exchange = -100, 2
    # nonzero: e.g. a file system without RENAME_EXCHANGE (the two-rename swap then)
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), exchange) == 0


def swap_in(out: Path, staged: Path) -> None:
    """Make the finished gallery ``staged`` the gallery ``out``; the previous one is deleted."""
    if _exchange(staged, out):
        shutil.rmtree(staged, ignore_errors=True)  # now the previous gallery
        return
    prev = _previous_dir(out)
    shutil.rmtree(prev, ignore_errors=True)
    os.rename(out, prev)
    os.rename(staged, out)  # a kill between the two renames is finished by recover()
    shutil.rmtree(prev, ignore_errors=True)


def _complete(d: Path) -> bool:
    return (d / "gallery.json").is_file() and (d / CONTENT).is_file() and (d / UPDATE_KEY).is_file()


def recover(out: Path) -> None:
    """Finish a swap that a kill interrupted between its two renames (no-op otherwise)."""
    prev, staged = _previous_dir(out), staging_dir(out)
    if out.exists():
        if prev.exists():
            shutil.rmtree(prev, ignore_errors=True)
        return
    if staged.is_dir() and _complete(staged):
        os.rename(staged, out)
        shutil.rmtree(prev, ignore_errors=True)
    elif prev.is_dir():
        os.rename(prev, out)


# -- the update -----------------------------------------------------------------------------
def _build(
    root: Path,
    items: Sequence[GalleryItem],
    encoder,
    *,
    scale: dict | None,
    dtype: str,
    recipe: dict | None,
    progress: bool,
    source: str,
):
    if scale is None:
        return Gallery.build(root, items, encoder, dtype=dtype, progress=progress, source=source)
    from .scale.embed import build_sharded

    return build_sharded(
        root, items, encoder, scale, dtype=dtype, recipe=recipe, progress=progress, source=source, domain_check=True
    )


def _shards(g: Gallery) -> int:
    return len(g.info["shards"]) if "shards" in g.info else 0


def index_into(
    out: str | Path,
    items: Sequence[GalleryItem],
    encoder,
    *,
    scale: dict | None = None,
    dtype: str = "float32",
    recipe: dict | None = None,
    progress: bool = True,
    source: str = "",
) -> tuple[Gallery, Change | None]:
    """Index ``items`` into gallery folder ``out``: a build when it holds no finished gallery,
    else an update that embeds only new and changed files (see the module's text).

    ``scale``: a sharded gallery's settings (``None``: unsharded). Returns the opened gallery and
    what the update did (``None`` for a build)."""
    out = Path(out)
    with (
        hold_lock(out.parent / f".{out.name}.update.lock", f"gallery update '{out}'", wait=True),
        storage_errors(out, f"gallery '{out}'"),
    ):
        recover(out)
        if not (out / "gallery.json").is_file():  # a first build, or one left unfinished
            g = _build(out, items, encoder, scale=scale, dtype=dtype, recipe=recipe, progress=progress, source=source)
            _write_content(out, digests(g.paths))
            return g, None
        return _update(out, items, encoder, scale=scale, dtype=dtype, recipe=recipe, progress=progress, source=source)


def _update(out: Path, items: Sequence[GalleryItem], encoder, *, scale, dtype, recipe, progress, source):
    old = open_gallery(out, scale=None if scale is None else {**scale, "engine": "local"})  # read here, rows only
    enc = old.info["encoder"]
    if enc["identity"] != encoder.identity:
        raise InputError(
            f"gallery '{out}' was indexed with encoder '{enc.get('key') or '?'}' (identity {enc['identity']}); this "
            f"update uses encoder '{getattr(encoder, 'registry_key', '?')}' (identity {encoder.identity}): embeddings of "
            f"two encoders cannot be mixed in one gallery. Index into another --out folder, or select "
            f"encoder={enc.get('key') or '?'} with its original config to update this one"
        )
    staged = staging_dir(out)
    known = _read_content(out)
    new_files = digests([it.path for it in items], known)
    new_sha = {p: v[2] for p, v in new_files.items()}
    # what each old row's file held when it was embedded: its recorded hash; a gallery made
    # before content.json: the file's hash now, unless it was modified after the gallery was built
    old_sha = {p: known[p][2] for p in old.paths if p in known}
    legacy = [p for p in old.paths if p not in known]
    if legacy:
        built = (out / "gallery.json").stat().st_mtime_ns
        for p, v in digests(legacy, new_files).items():
            if v[1] <= built:
                old_sha[p] = v[2]

    change = _diff(old, items, old_sha, new_sha)
    same_layout = dtype == old.info["dtype"] and (scale or {}).get("shards", 0) == _shards(old)
    if not change.rows_changed and same_layout:
        shutil.rmtree(staged, ignore_errors=True)  # a leftover of an earlier swap
        _write_content(out, {p: new_files[p] for p in old.paths if p in new_files})
        change.metadata = [it.id for it in items if it.meta != old.items[old.index_of(it.id)].meta]
        old.set_meta({it.id: it.meta for it in items})  # re-read metadata: stored, no embedding
        return old, change

    key = {
        "items": stable_hash([[it.id, it.path, new_sha.get(it.path, "")] for it in items]),
        "encoder": encoder.identity,
        "dtype": dtype,
        "shards": (scale or {}).get("shards", 0),
        "from": stable_hash(old.info.get("plan")),
    }
    if staged.exists():
        try:
            same = json.loads((staged / UPDATE_KEY).read_text()) == key
        except (OSError, ValueError):
            same = False
        if not same:
            shutil.rmtree(staged)
    staged.mkdir(parents=True, exist_ok=True)
    atomic_write_text(staged / UPDATE_KEY, json.dumps(key))

    rows_by_sha: dict[str, int] = {}
    for r, p in enumerate(old.paths):
        if p in old_sha:
            rows_by_sha.setdefault(old_sha[p], r)
    reusing = ReusingEncoder(encoder, old, rows_by_sha, new_sha)
    local = None if scale is None else {**scale, "engine": "local"}  # the few new photos: embedded here
    g = _build(staged, items, reusing, scale=local, dtype=dtype, recipe=recipe, progress=progress, source=source)
    change.embedded, change.reused = reusing.embedded, reusing.reused
    if scale is None:
        change.dropped += _carry_captions(old, g, old_sha, new_sha, encoder)
    else:
        change.dropped += [p.name for p in (out.iterdir()) if p.name in ("captions", "caption_emb")]
        rebuilt, dropped = _rebuild_indexes(out, g, progress=bool(progress))
        change.rebuilt += rebuilt
        change.dropped += dropped
    for name in KEPT_FILES:  # not row-keyed: the new gallery keeps them
        if (out / name).is_file() and not (staged / name).exists():
            shutil.copy2(out / name, staged / name)
    _write_content(staged, {p: new_files[p] for p in g.paths if p in new_files})  # last: the new gallery is whole
    change.metadata = [
        it.id for it in items if old.index_of(it.id) >= 0 and it.meta != old.items[old.index_of(it.id)].meta
    ]
    if getattr(old, "close", None):
        old.close()
    swap_in(out, staged)
    return open_gallery(out, encoder=encoder, scale=scale), change


def _diff(old: Gallery, items: Sequence[GalleryItem], old_sha: dict[str, str], new_sha: dict[str, str]) -> Change:
    c = Change()
    old_by_id = {i: p for i, p in zip(old.ids, old.paths)}
    old_ids_by_sha: dict[str, list[str]] = {}
    for i, p in old_by_id.items():
        if p in old_sha:
            old_ids_by_sha.setdefault(old_sha[p], []).append(i)
    new_ids = {it.id for it in items}
    for it in items:
        sha = new_sha.get(it.path)
        if it.id in old_by_id:
            op = old_by_id[it.id]
            if not sha or old_sha.get(op) != sha:
                c.changed.append(it.id)
            elif op != it.path:
                c.relocated.append(it.id)
            continue
        was = [i for i in old_ids_by_sha.get(sha or "", []) if i not in new_ids]
        if sha and was:
            c.renamed.append((was[0], it.id))
        else:
            c.added.append(it.id)
    moved = {a for a, _ in c.renamed}
    c.removed = [i for i in old.ids if i not in new_ids and i not in moved]
    return c


def _rebuild_indexes(old_root: Path, new, *, progress: bool) -> tuple[list[str], list[str]]:
    """The approximate indexes of the gallery at ``old_root`` built again over the rows of ``new``
    (the staged sharded gallery), each folder with the settings it records; a folder that records
    none (or unreadable ones) is dropped. Returns (rebuilt, dropped) folder names."""
    from .scale import scale_settings
    from .scale.ann import SETTINGS_FILE, build_indexes

    rebuilt: list[str] = []
    dropped: list[str] = []
    ann = old_root / "ann"
    if not ann.is_dir():
        return rebuilt, dropped
    folders = sorted(p for p in ann.iterdir() if p.is_dir())
    for d in folders:
        try:
            scale = scale_settings(json.loads((d / SETTINGS_FILE).read_text()), where=f"'{d / SETTINGS_FILE}'")
        except (OSError, ValueError, InputError) as e:
            log.warning("approximate index '%s' is dropped: its settings cannot be read (%s)", d, e)
            dropped.append(f"ann/{d.name}")
            continue
        build_indexes(new, scale, progress=progress)
        rebuilt.append(f"ann/{d.name}")
    if not folders:
        dropped.append("ann")
    return rebuilt, dropped


def _carry_captions(old: Gallery, new: Gallery, old_sha: dict[str, str], new_sha: dict[str, str], encoder) -> list[str]:
    """Stored captions (and their embeddings) of the old gallery in the new rows' order, when
    every new row's photo had one; the names of those dropped otherwise."""
    cap_dir = old.root / "captions"
    if not cap_dir.is_dir():
        return []
    old_row = {sha: r for r, p in enumerate(old.paths) if (sha := old_sha.get(p))}
    rows = [old_row.get(new_sha.get(p, ""), -1) for p in new.paths]
    dropped = []
    for f in sorted(cap_dir.glob("*.jsonl")):
        key = f.stem
        caps = old.captions(key)
        if caps is None or len(caps) != len(old) or min(rows, default=0) < 0:
            dropped.append(f"captions {key}")
            continue
        new.save_captions(key, [caps[r] for r in rows])
        src = old._caption_emb_file(key, encoder)
        if src.is_file():
            emb = np.load(src, mmap_mode="r")
            dst = new._caption_emb_file(key, encoder)
            dst.parent.mkdir(exist_ok=True)
            with atomic_path(dst) as tmp:
                np.save(tmp, np.ascontiguousarray(emb[np.array(rows, dtype=np.int64)]))
            write_sidecar(dst, rows=len(rows))
    return dropped
