"""What every route of the web app shares: the searcher, the limits, the file stores, the
running search's progress (:class:`ServeState`, one per app, at ``app.state.serve``)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..framework.http_guard import COOKIE  # noqa: F401  (re-exported: serve.app, serve.guard)
from ..framework.search import Searcher
from .files import BoundedDir, Decoder, GalleryFiles

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
        warm_up: then load the models and compile the kernels a search uses (one throw-away
            search), so that the first person's search does not wait for them.
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
    max_upload_mb: float = 20.0
    max_pixels: int = 50_000_000
    decode_concurrency: int = 2
    uploads_mb: float = 200.0
    uploads_files: int = 500
    thumbs_mb: float = 256.0
    prepare: bool = True
    warm_up: bool = True
    dup_threshold: float = 0.97
    dup_hash_distance: int = 10
    export_max_mb: float = 2048.0
    album_root: str = ""


class Progress:
    """What the running search (or the gallery preparation) is doing, for ``/api/progress``."""

    def __init__(self):
        self._lock = threading.Lock()
        self.state: dict[str, Any] = {"busy": False, "stage": "", "done": 0, "total": 0, "stages": [], "elapsed_s": 0.0,
                                      "preparing": False, "prepared": True, "error": ""}
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


class ServeState:
    """The app's shared state (see the module docstring).

    Args:
        searcher: the recipe's method over the gallery.
        uploads, thumbs: folders of stored uploads and cached thumbnails (default under ``run.root``).
        config: limits and the token.
        ask: makes the searcher answering history questions, on first use.
    """

    def __init__(self, searcher: Searcher, *, uploads: str | Path | None = None, thumbs: str | Path | None = None,
                 config: ServeConfig | None = None, ask: Optional[Callable[[], Searcher]] = None):
        self.searcher = searcher
        self.cfg = cfg = config or ServeConfig()
        self.token = cfg.token or os.environ.get(TOKEN_ENV, "")
        self.gallery = g = searcher.gallery
        run_root = Path(searcher.recipe["run"]["root"])
        self.uploads = BoundedDir(uploads or run_root / "_uploads", max_bytes=int(cfg.uploads_mb * 2**20),
                                  max_files=cfg.uploads_files, what="upload folder")
        gid = hashlib.sha256(str(g.root.resolve()).encode()).hexdigest()[:12]
        self.thumbs = BoundedDir(Path(thumbs or run_root / "_thumbs") / gid, max_bytes=int(cfg.thumbs_mb * 2**20),
                                 max_files=10**9, what="thumbnail folder")
        self.files = GalleryFiles(g)
        self.decoder = Decoder(max_pixels=cfg.max_pixels, concurrency=cfg.decode_concurrency)
        self.max_upload = int(cfg.max_upload_mb * 2**20)
        self.progress = Progress()
        self.ask = ask
        #: the searcher answering history questions (made by ``ask`` on the first question)
        self.ask_searcher: Searcher | None = searcher if getattr(searcher.method, "answers_set", False) else None
        self.ask_lock: list = []  # an asyncio.Lock, made in the event loop
        #: generated visual proxies (files outside the gallery) the traces point at, by key
        self.proxies: dict[str, str] = {}
        self._with_metadata: int | None = None
        #: perceptual hashes of gallery files, by thumbnail key (file, mtime, size): never stale
        self.dhashes: dict[str, int] = {}

    def with_metadata(self) -> int:
        """Gallery items with a date or a place (the items do not change while served: counted once)."""
        if self._with_metadata is None:
            self._with_metadata = sum(1 for it in self.gallery.items if it.meta.get("taken_time") or it.meta.get("city"))
        return self._with_metadata


def state_of(request) -> ServeState:
    """The :class:`ServeState` of the app answering ``request`` (a FastAPI dependency)."""
    return request.app.state.serve
