"""What every route of the web app shares: the searcher, the limits, the file stores, the
running search's progress (:class:`ServeState`, one per app, at ``app.state.serve``), and the
work started with the app (:meth:`ServeState.start_background`):

- the **warm-up**: the gallery captions the method needs, then the models loaded and kernels
  compiled step by step (:meth:`~agentcir.framework.search.Searcher.warm_up`); a search that
  comes meanwhile goes first and waits only for the models it needs;
- the **thumbnails** of every gallery photo made in the background once the warm-up is done
  (and again for the new photos after each gallery update), pausing while a search runs;
- the **gallery followed**: an update swapped into the gallery folder (``agentcir index``, its
  ``--watch``, or this server's own :meth:`ServeState.watch`) is opened without a restart;
- ``/api/status`` reports the three (:meth:`ServeState.status`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..framework.errors import InputError, StorageError
from ..framework.gallery_files import (
    DECODE_CONCURRENCY,
    MAX_PIXELS,
    MAX_UPLOAD_MB,
    THUMBS_MB,
    UPLOADS_FILES,
    UPLOADS_MB,
)
from ..framework.http_guard import COOKIE  # noqa: F401  (re-exported: serve.app, serve.guard)
from ..framework.plain import plain
from ..framework.search import Searcher, WarmUp
from .files import BoundedDir, Decoder, GalleryFiles

log = logging.getLogger(__name__)

TOKEN_ENV = "AGENTCIR_TOKEN"


@dataclass
class ServeConfig:
    """Limits and options of the web app.

    Attributes:
        token: a bearer token every route requires (``Authorization: Bearer``, or the cookie
            set by opening the page once as ``/?token=...``, which redirects to ``/``); empty = no token.
        host: the address the server is bound to (one of the names the Host header may give).
        allow_hosts: more names the Host header may give (besides ``localhost``, ``127.0.0.1``,
            ``[::1]``, ``host`` and ``$AGENTCIR_ALLOW_HOSTS``); see :mod:`agentcir.serve.guard`.
        max_upload_mb: an upload larger than this is refused while it streams in (HTTP 413).
        max_pixels: an image (upload or gallery file) larger than this is refused before decoding.
        decode_concurrency: decodes (upload checks, thumbnails) running at once.
        uploads_mb, uploads_files: the stored uploads are kept under both (oldest evicted).
        thumbs_mb: the thumbnail cache is kept under this.
        prepare: make the gallery captions in the background at start (shown on the page).
        warm_up: then load the models and compile the kernels a search uses (a throw-away
            search per mode), so that the first person's search does not wait for them.
        thumbnails: then make the thumbnail (``thumb_size``) of every gallery photo in the
            background, and of the new ones after each gallery update.
        reload_s: look this often for an update swapped into the gallery folder, and open it
            (0: never).
        dup_threshold: near-duplicate grouping of results: the image-embedding cosine at or
            above which two hits may be copies of one picture (0: no grouping); see
            :mod:`agentcir.serve.groups`. A request may give its own.
        dup_hash_distance: most differing bits (of 64) of two copies' perceptual hashes (-1: no hash check).
        export_max_mb: a zip export whose photos add up to more than this is refused (413).
        album_root: the folder under which "copy into an album" makes album folders; empty = off.
    """

    token: str = ""
    host: str = "127.0.0.1"
    allow_hosts: tuple[str, ...] = ()
    max_upload_mb: float = MAX_UPLOAD_MB
    max_pixels: int = MAX_PIXELS
    decode_concurrency: int = DECODE_CONCURRENCY
    uploads_mb: float = UPLOADS_MB
    uploads_files: int = UPLOADS_FILES
    thumbs_mb: float = THUMBS_MB
    prepare: bool = True
    warm_up: bool = True
    dup_threshold: float = 0.97
    dup_hash_distance: int = 10
    export_max_mb: float = 2048.0
    album_root: str = ""
    thumbnails: bool = True
    thumb_size: int = 256
    reload_s: float = 1.0


class Progress:
    """What the running search (or the gallery preparation) is doing, for ``/api/progress``."""

    def __init__(self):
        self._lock = threading.Lock()
        self.state: dict[str, Any] = {
            "busy": False,
            "stage": "",
            "done": 0,
            "total": 0,
            "stages": [],
            "elapsed_s": 0.0,
            "preparing": False,
            "prepared": True,
            "error": "",
        }
        self._t0 = 0.0

    def begin(self, preparing: bool = False) -> None:
        with self._lock:
            self._t0 = time.perf_counter()
            self.state.update(busy=True, stage="", done=0, total=0, stages=[], elapsed_s=0.0, error="")
            if preparing:
                self.state.update(preparing=True, prepared=False)

    def hook(self, stage: str, done: int, total: int) -> None:
        with self._lock:
            if not self.state["stages"] or self.state["stages"][-1] != stage:
                self.state["stages"].append(stage)
            self.state.update(stage=stage, done=done, total=total)

    def end(self, error: str = "", prepared: bool | None = None) -> None:
        with self._lock:
            self.state.update(busy=False, elapsed_s=round(time.perf_counter() - self._t0, 3), error=error)
            if prepared is not None:
                self.state.update(preparing=False, prepared=prepared)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            out = dict(self.state, stages=list(self.state["stages"]))
            if out["busy"]:
                out["elapsed_s"] = round(time.perf_counter() - self._t0, 3)
            return out


class Thumbnails:
    """The background thumbnails' progress: ``state`` (``waiting``, ``running``, ``done``,
    ``off``), photos ``done`` of ``total``, ``made`` (not cached before), the edge ``size``."""

    def __init__(self, size: int):
        self._lock = threading.Lock()
        self.state = {"state": "waiting", "done": 0, "total": 0, "made": 0, "size": size, "seconds": 0.0, "note": ""}

    def update(self, **kw) -> None:
        with self._lock:
            self.state.update(kw)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.state)


class SharedEncoder:
    """The searcher's encoder for a gallery update running beside the searches: each of its
    calls holds the search lock (components need not be thread-safe), so searches interleave
    with the update's batches."""

    def __init__(self, searcher: Searcher):
        self._encoder = searcher.pool.get("encoder")
        self._searcher = searcher

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode_images(self, *a, **kw):
        with self._searcher._lock:
            return self._encoder.encode_images(*a, **kw)

    def encode_texts(self, *a, **kw):
        with self._searcher._lock:
            return self._encoder.encode_texts(*a, **kw)


class ServeState:
    """The app's shared state (see the module docstring).

    Args:
        searcher: the recipe's method over the gallery.
        uploads, thumbs: folders of stored uploads and cached thumbnails (default under ``run.root``).
        config: limits and the token.
        ask: makes the searcher answering history questions, on first use.
    """

    def __init__(
        self,
        searcher: Searcher,
        *,
        uploads: str | Path | None = None,
        thumbs: str | Path | None = None,
        config: ServeConfig | None = None,
        ask: Optional[Callable[[], Searcher]] = None,
    ):
        self.searcher = searcher
        self.cfg = cfg = config or ServeConfig()
        self.token = cfg.token or os.environ.get(TOKEN_ENV, "")
        g = searcher.gallery
        run_root = Path(searcher.recipe["run"]["root"])
        self.uploads = BoundedDir(
            uploads or run_root / "_uploads",
            max_bytes=int(cfg.uploads_mb * 2**20),
            max_files=cfg.uploads_files,
            what="upload folder",
        )
        gid = hashlib.sha256(str(g.root.resolve()).encode()).hexdigest()[:12]
        self.thumbs = BoundedDir(
            Path(thumbs or run_root / "_thumbs") / gid,
            max_bytes=int(cfg.thumbs_mb * 2**20),
            max_files=10**9,
            what="thumbnail folder",
        )
        self._files: tuple[Any, GalleryFiles] | None = None
        self.decoder = Decoder(max_pixels=cfg.max_pixels, concurrency=cfg.decode_concurrency)
        self.max_upload = int(cfg.max_upload_mb * 2**20)
        self.progress = Progress()
        self.ask = ask
        #: the searcher answering history questions (made by ``ask`` on the first question)
        self.ask_searcher: Searcher | None = searcher if getattr(searcher.method, "answers_set", False) else None
        self.ask_lock: list = []  # an asyncio.Lock, made in the event loop
        #: generated visual proxies (files outside the gallery) the traces point at, by key
        self.proxies: dict[str, str] = {}
        self._with_metadata: tuple[Any, int] | None = None
        #: perceptual hashes of gallery files, by thumbnail key (file, mtime, size): never stale
        self.dhashes: dict[str, int] = {}
        self.warm = WarmUp()
        self.thumbnails = Thumbnails(cfg.thumb_size)
        self.library: dict[str, Any] = {
            "watching": None,
            "observer": "",
            "following": False,
            "updates": 0,
            "last_update": "",
            "last_update_s": None,
            "error": "",
            "loaded_at": time.time(),
        }
        self._stop = threading.Event()
        self._thumbs_wanted = threading.Event()
        self._reload_lock = threading.Lock()
        self._started = False

    @property
    def gallery(self):
        """The gallery searched now (another object after an update was opened)."""
        return self.searcher.gallery

    @property
    def files(self) -> GalleryFiles:
        """The gallery's files, confined to its root (made again for each opened gallery)."""
        g = self.gallery
        if self._files is None or self._files[0] is not g:
            self._files = (g, GalleryFiles(g))
        return self._files[1]

    def with_metadata(self) -> int:
        """Gallery items with a date or a place (counted once per opened gallery)."""
        g = self.gallery
        if self._with_metadata is None or self._with_metadata[0] is not g:
            self._with_metadata = (g, sum(1 for it in g.items if it.meta.get("taken_time") or it.meta.get("city")))
        return self._with_metadata[1]

    # -- the gallery followed ---------------------------------------------------------------
    def reload(self, force: bool = False) -> bool:
        """Open the gallery again if an update was swapped in (waits for the running search);
        the new photos' thumbnails are then made in the background."""
        with self._reload_lock:
            done = self.searcher.reload(force=force)
            if self.ask_searcher is not None and self.ask_searcher is not self.searcher:
                self.ask_searcher.reload(force=force)
        if done:
            self.library["loaded_at"] = time.time()
            log.info(
                "gallery '%s' opened again: %d photos (generation %d)",
                self.searcher.gallery_dir,
                len(self.gallery),
                self.searcher.generation,
            )
            self._thumbs_wanted.set()
        return done

    def _follow_gallery(self) -> None:
        while not self._stop.wait(self.cfg.reload_s):
            try:
                if self.searcher.changed_on_disk():
                    self.reload()
            except Exception as e:  # a damaged update: keep serving the gallery open now
                self.library["error"] = f"the updated gallery could not be opened: {e}"
                log.warning("%s", self.library["error"])

    def watch(
        self,
        folder: str | Path,
        *,
        debounce_s: float = 1.0,
        observer: str = "auto",
        poll_s: float = 1.0,
        settle_s: float = 0.5,
    ) -> threading.Thread:
        """Follow ``folder`` (the photo folder of the gallery): each settled batch of changes is an
        incremental update of the gallery, embedded with the searcher's encoder between searches,
        swapped in and opened (``agentcir serve --watch``). Returns the thread doing it."""
        from ..framework.indexing import FolderFollower, scale_for, watch_line
        from ..framework.watch import FolderWatch

        s, g = self.searcher, self.gallery
        scale = scale_for(s.recipe, shards=len(g.shards)) if hasattr(g, "shards") else None
        follower = FolderFollower(
            s.recipe, folder, s.gallery_dir, encoder=SharedEncoder(s), scale=scale, dtype=g.info.get("dtype", "float32")
        )
        w = FolderWatch(folder, debounce_s=debounce_s, settle_s=settle_s, observer=observer, poll_s=poll_s)
        self.library.update(watching=str(Path(folder).resolve()))

        def updated(batch, report, seconds):
            self.reload()
            line = watch_line(batch, report, seconds)
            self.library.update(
                updates=self.library["updates"] + 1, last_update=line, last_update_s=round(seconds, 3), error=""
            )
            log.info("%s", line)

        def run():
            try:
                with w:
                    self.library["observer"] = w.kind
                    follower.update()  # what changed since the gallery was indexed
                    self.reload()
                    self.library["following"] = True
                    follower.follow(w, stop=self._stop, on_update=updated)
            except (InputError, StorageError, OSError) as e:
                self.library["error"] = f"watching '{folder}' stopped: {e}"
                log.warning("%s", self.library["error"])

        t = threading.Thread(target=run, name="agentcir-watch", daemon=True)
        t.start()
        return t

    # -- the background work ----------------------------------------------------------------
    def start_background(self) -> None:
        """Start the warm-up (captions, models), the thumbnails after it, and the gallery follower."""
        if self._started:
            return
        self._started = True
        if self.cfg.reload_s > 0:
            threading.Thread(target=self._follow_gallery, name="agentcir-reload", daemon=True).start()
        if self.cfg.thumbnails:
            threading.Thread(target=self._thumbnail_worker, name="agentcir-thumbs", daemon=True).start()
        else:
            self.thumbnails.update(state="off")
        cfg, searcher, progress = self.cfg, self.searcher, self.progress
        if not ((cfg.prepare and not searcher.prepared) or cfg.warm_up):
            self.warm.off()
            self._thumbs_wanted.set()
            return

        def prep():
            progress.begin(preparing=True)
            try:
                if cfg.warm_up:
                    took = searcher.warm_up(progress.hook, status=self.warm)
                    log.info("warmed up in %.1f s (models loaded, kernels compiled)", took)
                else:
                    self.warm.off()
                    searcher.prepare(progress.hook)
                progress.end(prepared=True)
            except Exception as e:  # shown on the page; a search retries it
                log.warning("gallery preparation failed: %s", e)
                progress.end(error=f"The gallery could not be prepared: {plain(str(e))}", prepared=False)
            finally:
                self._thumbs_wanted.set()

        threading.Thread(target=prep, name="agentcir-prepare", daemon=True).start()

    def _thumbnail_worker(self) -> None:
        while not self._stop.is_set():
            if not self._thumbs_wanted.wait(0.5):
                continue
            self._thumbs_wanted.clear()
            try:
                self._make_thumbnails()
            except Exception as e:  # a convenience: a thumbnail is also made when first asked for
                log.warning("background thumbnails stopped: %s", e)
                self.thumbnails.update(state="done", note=f"stopped: {e}")

    def _make_thumbnails(self) -> None:
        size, t0 = self.cfg.thumb_size, time.perf_counter()
        g, files = self.gallery, self.files
        n = len(g)
        self.thumbnails.update(state="running", done=0, total=n, made=0, note="")
        made = made_bytes = 0
        budget = 0.8 * self.thumbs.max_bytes  # a cache that cannot hold them all: the first ones only
        for row in range(n):
            if self._stop.is_set() or self.gallery is not g:
                return  # the gallery changed: started again for the new one
            while self.searcher.busy() and not self._stop.is_set():
                time.sleep(0.05)  # a search runs: it goes first
            try:
                p = files.path(row)
                key = files.thumb_key(p, size)
            except (LookupError, OSError):
                continue
            if self.thumbs.get(key) is None:
                try:
                    data = self.decoder.thumbnail(p, size)
                    self.thumbs.put(key, data)
                except InputError:
                    continue  # an undecodable photo: its /thumb answers why
                made += 1
                made_bytes += len(data)
                if made_bytes > budget:
                    self.thumbnails.update(
                        note=f"the thumbnail cache (thumbs_mb={self.cfg.thumbs_mb:g}) holds only the "
                        f"first {row + 1} photos' thumbnails"
                    )
                    break
            self.thumbnails.update(done=row + 1, made=made)
        self.thumbnails.update(state="done", seconds=round(time.perf_counter() - t0, 3))

    def close(self) -> None:
        """Stop the background threads (the follower, the thumbnails)."""
        self._stop.set()

    def status(self) -> dict[str, Any]:
        """The warm-up, the background thumbnails and the gallery (``/api/status``)."""
        s = self.searcher
        return {
            "warm_up": self.warm.snapshot(),
            "thumbnails": self.thumbnails.snapshot(),
            "gallery": {
                "path": str(s.gallery_dir),
                "size": len(self.gallery),
                "generation": s.generation,
                **self.library,
            },
        }


def state_of(request) -> ServeState:
    """The :class:`ServeState` of the app answering ``request`` (a FastAPI dependency)."""
    return request.app.state.serve
