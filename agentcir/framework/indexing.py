"""Index a folder of images into a gallery directory (``agentcir index`` and ``agentcir.index``).

:func:`index_folder` is the one code path behind both: it lists the images under a folder,
reads each photo's metadata (EXIF/XMP date, GPS and place, camera, album = folder, people,
keywords: :mod:`agentcir.framework.methods.imageseeker.exif`) into the item's ``meta``, embeds
the images with the recipe's encoder (unsharded, or sharded and possibly by a Ray Data job,
``docs/scale.md``), stores the metadata in the gallery (a re-index refreshes it without
re-embedding) and measures how far the photos lie from the encoder's domain
(:mod:`agentcir.framework.domain`). It returns an :class:`IndexReport`; printing is the
caller's business.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError


@dataclass
class IndexReport:
    """What :func:`index_folder` did.

    Attributes:
        gallery: the opened gallery (a ``Gallery``, or a sharded one).
        out: the gallery directory.
        folder: the indexed folder.
        encoder: the encoder's registry key.
        images: the image files found under the folder.
        indexed: images in the gallery.
        skipped: the images that could not be decoded, ``{"path", "reason"}`` each.
        non_images: the files under the folder that are not images.
        seconds: the embedding's wall time (the encoder's loading, or the Ray job's start, included).
        fresh: the gallery directory was empty before (else a build resumed, or done already).
        shards: the number of shards (0: an unsharded gallery).
        engine: the sharded build's engine (``local`` or ``ray``), ``""`` unsharded.
        metadata: the metadata scan's summary line, ``""`` when metadata was not read.
        domain: the domain check's line, ``""`` when the encoder names no domain.
        change: what an update of an existing gallery did (added, changed, renamed, removed;
            :mod:`agentcir.framework.library`), ``""`` for a first build.
        links: the folders not walked (symlinked ones without ``follow_links``, loops, unreadable),
            each with its ``path`` and ``reason``.
    """

    gallery: Any
    out: Path
    folder: Path
    encoder: str
    images: int
    indexed: int
    skipped: list[dict[str, str]] = field(default_factory=list)
    non_images: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    fresh: bool = True
    shards: int = 0
    engine: str = ""
    metadata: str = ""
    domain: str = ""
    links: list = field(default_factory=list)
    change: str = ""


def scale_for(
    recipe: dict[str, Any], *, engine: str | None = None, address: str | None = None, shards: int | None = None
) -> dict[str, Any] | None:
    """The recipe's ``scale`` section with ``engine`` / ``address`` / ``shards`` applied (each
    when not None), validated and with every default filled; None: an unsharded gallery."""
    from .scale import scale_settings

    scale = dict(recipe.get("scale") or {})
    for name, value in (("engine", engine), ("address", address), ("shards", shards)):
        if value is not None:
            scale[name] = value
    if scale.get("engine") == "ray" and not scale.get("shards"):
        scale["shards"] = 1
    return scale_settings(scale) if scale.get("shards") else None


def index_folder(
    recipe: dict[str, Any],
    folder: str | Path,
    out: str | Path,
    *,
    dtype: str = "float32",
    user: str | None = None,
    metadata: bool = True,
    scale: dict[str, Any] | None = None,
    progress: bool = False,
    encoder=None,
    follow_links: bool = False,
    meta_cache: dict | None = None,
) -> IndexReport:
    """Embed every image under ``folder`` (recursively) with ``recipe``'s encoder into ``out``.

    Args:
        recipe: a resolved recipe (:func:`agentcir.framework.recipe.compose`); its ``encoder``.
        folder: the photo folder; unreadable images and non-image files are skipped and counted.
        out: the gallery directory (an unfinished build there resumes; a finished one is reused).
        dtype: embedding storage, ``float32``, ``float16`` or ``int8`` (float32 rows plus int8 codes:
            int8 scans with an exact float32 re-rank).
        user: a user id stored in every item's metadata (photo histories of several users).
        metadata: read each photo's EXIF/XMP metadata into its item's ``meta``.
        scale: a sharded build's settings (:func:`scale_for`); None: unsharded.
        progress: progress bars on stderr.
        encoder: an encoder already built from ``recipe`` (else it is built here).
        follow_links: walk symlinked folders (each real folder once; loops refused); else they
            are skipped and reported in :attr:`IndexReport.links`.
        meta_cache: metadata records read by an earlier call, kept up to date here (a dict the
            caller keeps between calls, e.g. watch mode): a photo whose file and XMP sidecars have
            the same size and mtime is not read again.

    A full disk (numpy's short write included) is a ``StorageError`` naming the gallery's path.
    """
    from .files import storage_errors

    with storage_errors(out, "the gallery"):
        return _index_folder(
            recipe,
            folder,
            out,
            dtype=dtype,
            user=user,
            metadata=metadata,
            scale=scale,
            progress=progress,
            encoder=encoder,
            follow_links=follow_links,
            meta_cache=meta_cache,
        )


def _sidecars(path: str) -> list[Path]:
    p = Path(path)
    return [p.with_suffix(".xmp"), p.with_suffix(".XMP"), p.with_name(p.name + ".xmp")]


def _signature(path: str) -> tuple:
    """(size, mtime_ns) of a photo and of each XMP sidecar it may have (None: absent)."""
    out = []
    for f in (Path(path), *_sidecars(path)):
        try:
            st = f.stat()
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def _metadata(paths: list[str], folder: Path, progress: bool, cache: dict | None):
    """Metadata records of ``paths``; with ``cache``, only the photos whose file or sidecars moved
    are read (the scan's summary then counts those)."""
    from .methods.imageseeker.exif import scan_folder

    if cache is None:
        return scan_folder(paths, folder, progress=progress)
    sigs = {p: _signature(p) for p in paths}
    todo = [p for p in paths if p not in cache or cache[p][0] != sigs[p]]
    records, scan = scan_folder(todo, folder, progress=progress)
    for p, rec in zip(todo, records):
        cache[p] = (sigs[p], rec)
    for p in set(cache) - set(paths):
        del cache[p]
    return [dict(cache[p][1]) for p in paths], scan


def _index_folder(
    recipe, folder, out, *, dtype, user, metadata, scale, progress, encoder, follow_links, meta_cache=None
) -> IndexReport:
    from .gallery import items_from_folder
    from .library import index_into

    if dtype not in ("float32", "float16", "int8"):
        raise InputError(f"dtype must be float32, float16 or int8, got '{dtype}'")
    if recipe.get("encoder", {}).get("name") in (None, "none"):
        raise InputError("indexing needs an encoder: the recipe selects none")
    folder = Path(folder)
    links: list = []
    items, others = items_from_folder(folder, follow_links=follow_links, links=links)
    scan = None
    if metadata:
        records, scan = _metadata([it.path for it in items], folder, progress, meta_cache)
        for it, rec in zip(items, records):
            it.meta = {**rec, **({"user": user} if user else {})}
    elif user:
        for it in items:
            it.meta = {"user": user}
    if encoder is None:
        from .recipe import ComponentPool

        encoder = ComponentPool(recipe).get("encoder")
    out = Path(out)
    fresh = not out.is_dir() or not any(out.iterdir())
    source = str(folder.resolve())
    t0 = time.perf_counter()
    # a first build, or an update of the gallery already there: only new and changed files are
    # embedded, renamed ones reuse their rows, deleted ones are dropped (docs/library.md)
    g, change = index_into(
        out, items, encoder, scale=scale, dtype=dtype, recipe=recipe, progress=progress, source=source
    )
    took = time.perf_counter() - t0
    g.set_meta({it.id: it.meta for it in items})
    from .domain import domain_check

    name = recipe["encoder"]["name"]
    check = domain_check(encoder, g.image_emb, name=name, folder=out)
    return IndexReport(
        gallery=g,
        out=out,
        folder=folder,
        encoder=name,
        images=len(items),
        indexed=len(g),
        skipped=list(g.skipped),
        non_images=list(others),
        seconds=took,
        fresh=fresh,
        shards=len(getattr(g, "shards", ())) if scale is not None else 0,
        engine=scale["engine"] if scale is not None else "",
        metadata=scan.line() + (f"; user '{user}'" if user else "") if scan is not None else "",
        domain=check.line() if check is not None else "",
        links=links,
        change=change.line() if change is not None else "",
    )


class FolderFollower:
    """Keeps gallery ``out`` in step with ``folder`` (watch mode): each :meth:`update` is an
    incremental :func:`index_folder` with the encoder built once and the photos' metadata read
    again only where a file or its sidecar moved. ``agentcir index --watch`` and ``agentcir
    serve --watch`` hand it each settled batch of :class:`~agentcir.framework.watch.FolderWatch`.

    Args:
        recipe, folder, out, dtype, user, metadata, scale, follow_links: as :func:`index_folder`.
        encoder: the encoder (else built from ``recipe``, once).
    """

    def __init__(
        self,
        recipe: dict[str, Any],
        folder: str | Path,
        out: str | Path,
        *,
        encoder=None,
        scale: dict[str, Any] | None = None,
        dtype: str = "float32",
        user: str | None = None,
        metadata: bool = True,
        follow_links: bool = False,
    ):
        if encoder is None:
            from .recipe import ComponentPool

            if recipe.get("encoder", {}).get("name") in (None, "none"):
                raise InputError("indexing needs an encoder: the recipe selects none")
            encoder = ComponentPool(recipe).get("encoder")
        self.recipe, self.folder, self.out = recipe, Path(folder), Path(out)
        self.encoder, self.scale, self.dtype, self.user = encoder, scale, dtype, user
        self.metadata, self.follow_links = metadata, follow_links
        self.meta_cache: dict = {}
        #: updates made, and the last one's report
        self.updates = 0
        self.last: IndexReport | None = None

    def update(self, batch=None, *, progress: bool = False) -> IndexReport:
        """Compare the folder with the gallery and apply what changed (``batch``, the watch's
        settled changes, is only reported: the whole folder is compared, so nothing is missed)."""
        r = index_folder(
            self.recipe,
            self.folder,
            self.out,
            dtype=self.dtype,
            user=self.user,
            metadata=self.metadata,
            scale=self.scale,
            progress=progress,
            encoder=self.encoder,
            follow_links=self.follow_links,
            meta_cache=self.meta_cache if self.metadata else None,
        )
        self.updates += 1
        self.last = r
        return r

    def follow(self, watch, *, stop=None, on_update=None) -> None:
        """Apply each settled batch of ``watch`` (a started
        :class:`~agentcir.framework.watch.FolderWatch`) until ``stop`` (a ``threading.Event``) is
        set or the watch stops; ``on_update(batch, report, seconds)`` after each update, where
        ``seconds`` is the time from the batch's first event to the updated gallery in place."""
        from .watch import follow

        def one(batch):
            t0 = time.perf_counter()
            r = self.update(batch)
            took = time.perf_counter() - t0
            if on_update is not None:
                on_update(batch, r, batch.waited_s + took)

        follow(watch, one, stop=stop)


def watch_line(batch, report: IndexReport, seconds: float) -> str:
    """One log line of a watch update: what came, what the update did, and how long it took."""
    change = report.change.removeprefix("update: ") if report.change else "gallery built"
    return (
        f"watch: {batch.line()} -> {change}; {report.indexed} image(s) in the gallery, searchable "
        f"{seconds:.1f} s after the first change"
    )
