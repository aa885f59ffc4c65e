"""Follow a photo folder and hand over settled batches of changed files (watch mode).

:class:`FolderWatch` is what ``agentcir index FOLDER --out G --watch`` and ``agentcir serve
--watch`` follow a folder with. It listens to the file system's events (``watchdog``: inotify,
FSEvents, ReadDirectoryChangesW; its polling observer where none works, or when asked) and
turns them into **batches**:

- **bursts are debounced**: a batch is handed over once no event came for ``debounce_s``
  seconds (a copy of 500 photos is one batch, not 500 updates);
- **partial writes are skipped**: a file is ready once its size and modification time have
  not moved for ``settle_s`` seconds, and an image file is ready once it also decodes (a
  photo still being written by a slow copy or a camera import is retried every ``retry_s``;
  after ``give_up_s`` it is handed over anyway, and the index reports it as unreadable);
- **ignored**: hidden files and folders (a name starting with ``.``, so macOS AppleDouble
  ``._IMG_0001.jpg`` files too), and files that are neither images nor XMP sidecars.

A deleted or renamed file is ready at once. :func:`follow` runs the loop: each batch goes to a
callback (an incremental update of the gallery, :mod:`agentcir.framework.library`) until
stopped; a failing update is logged and the batch retried with the next one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError, require
from .images import IMAGE_SUFFIXES

log = logging.getLogger(__name__)

#: files besides images whose change matters: metadata sidecars
SIDECAR_SUFFIXES = frozenset({".xmp"})
OBSERVERS = ("auto", "native", "polling")


def ignored(path: str | os.PathLike, root: str | os.PathLike) -> bool:
    """Whether a change of ``path`` under ``root`` is ignored: a hidden file or folder (AppleDouble
    ``._*`` included), or a file that is neither an image nor an XMP sidecar."""
    p = Path(path)
    try:
        rel = p.relative_to(root)
    except ValueError:
        return True
    if any(part.startswith(".") for part in rel.parts):
        return True
    return p.suffix.lower() not in IMAGE_SUFFIXES | SIDECAR_SUFFIXES


@dataclass
class Batch:
    """Settled changes: the files created or modified (and decodable), and those gone."""

    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: files handed over although they still do not decode (``give_up_s`` passed)
    undecodable: list[str] = field(default_factory=list)
    #: seconds from the batch's first event to its hand-over
    waited_s: float = 0.0

    def __len__(self) -> int:
        return len(self.changed) + len(self.removed)

    def line(self) -> str:
        s = f"{len(self.changed)} file(s) added or changed, {len(self.removed)} removed"
        if self.undecodable:
            s += f" ({len(self.undecodable)} still not decodable: {Path(self.undecodable[0]).name})"
        return s


@dataclass
class _Pending:
    first: float  # when the first event of this path came
    seen: tuple | None  # (size, mtime_ns) last seen; None: gone
    since: float  # when ``seen`` last changed
    retry_at: float = 0.0  # an undecodable image: when to try it again


def _stat(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns) if not os.path.isdir(path) else ("dir",)


def _decodes(path: str) -> bool:
    if Path(path).suffix.lower() not in IMAGE_SUFFIXES:
        return True
    from .images import ImageDecodeError, load_rgb

    try:
        load_rgb(path, min_side=32)  # a JPEG decoded at a reduced scale: cheap
        return True
    except ImageDecodeError:
        return False
    except OSError:
        return False


class FolderWatch:
    """Events under ``folder`` turned into settled batches (see the module's text).

    Args:
        folder: the folder followed, recursively.
        debounce_s: a batch is handed over once no event came for this long.
        settle_s: a file is ready once its size and mtime held for this long.
        observer: ``auto`` (the platform's file events, else polling), ``native`` or ``polling``.
        poll_s: the polling observer's interval.
        retry_s: an image that does not decode yet is tried again after this long.
        give_up_s: ... and handed over anyway after this long.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        debounce_s: float = 1.0,
        settle_s: float = 0.5,
        observer: str = "auto",
        poll_s: float = 1.0,
        retry_s: float = 1.0,
        give_up_s: float = 60.0,
    ):
        self.folder = Path(folder).resolve()
        if not self.folder.is_dir():
            raise InputError(f"watched folder '{folder}' does not exist or is not a folder")
        if observer not in OBSERVERS:
            raise InputError(f"observer must be one of {', '.join(OBSERVERS)}, got '{observer}'")
        for name, v in (("debounce_s", debounce_s), ("settle_s", settle_s), ("poll_s", poll_s), ("retry_s", retry_s)):
            if not v >= 0:
                raise InputError(f"{name} must be >= 0, got {v}")
        self.debounce_s, self.settle_s, self.poll_s = debounce_s, settle_s, poll_s
        self.retry_s, self.give_up_s = retry_s, give_up_s
        self.observer_kind = observer
        self._pending: dict[str, _Pending] = {}
        self._last_event = 0.0
        self._cv = threading.Condition()
        self._observer = None
        self.stopped = threading.Event()
        #: the observer in use: ``native`` or ``polling`` (after :meth:`start`)
        self.kind = ""

    # -- events ---------------------------------------------------------------------------
    def _note(self, path: str) -> None:
        if not path:
            return
        p = os.fsdecode(path)
        if os.path.isdir(p):
            return  # a folder's files have their own events (a folder moved or deleted: each file's)
        if ignored(p, self.folder):
            return
        now = time.monotonic()
        with self._cv:
            cur = _stat(p)
            old = self._pending.get(p)
            if old is None:
                self._pending[p] = _Pending(first=now, seen=cur, since=now)
            elif old.seen != cur:
                old.seen, old.since = cur, now
            self._last_event = now
            self._cv.notify_all()

    def _handler(self):
        from watchdog.events import FileSystemEventHandler

        watch = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write"):
                    return
                if event.is_directory and event.event_type in ("deleted", "moved"):
                    watch._note_folder(os.fsdecode(event.src_path))
                    if event.event_type == "moved":
                        watch._note_tree(os.fsdecode(event.dest_path))
                    return
                if event.is_directory and event.event_type == "created":
                    watch._note_tree(os.fsdecode(event.src_path))  # a folder moved in: its files
                    return
                watch._note(event.src_path)
                if getattr(event, "dest_path", ""):
                    watch._note(event.dest_path)

        return Handler()

    def _note_tree(self, folder: str) -> None:
        for top, _dirs, files in os.walk(folder):
            for f in files:
                self._note(os.path.join(top, f))

    def _note_folder(self, folder: str) -> None:
        """A folder deleted or moved away: every pending or known file under it is gone."""
        now = time.monotonic()
        with self._cv:
            self._pending.setdefault(folder.rstrip(os.sep) + os.sep, _Pending(first=now, seen=None, since=now))
            self._last_event = now
            self._cv.notify_all()

    # -- life -----------------------------------------------------------------------------
    def start(self) -> "FolderWatch":
        """Start following the folder (events from now on)."""
        require("watchdog", "watch", feature="watching a folder (--watch)")
        from watchdog.observers.polling import PollingObserver

        obs = None
        if self.observer_kind in ("auto", "native"):
            from watchdog.observers import Observer

            try:
                obs = Observer()
                obs.schedule(self._handler(), str(self.folder), recursive=True)
                obs.start()
                self.kind = "native"
            except OSError as e:  # e.g. inotify watches exhausted: poll instead
                if self.observer_kind == "native":
                    raise InputError(f"cannot watch '{self.folder}' with the platform's file events ({e})") from None
                log.warning(
                    "the platform's file events are unavailable for '%s' (%s): polling every %.1f s",
                    self.folder,
                    e,
                    self.poll_s,
                )
                obs = None
        if obs is None:
            obs = PollingObserver(timeout=self.poll_s)
            obs.schedule(self._handler(), str(self.folder), recursive=True)
            obs.start()
            self.kind = "polling"
        self._observer = obs
        return self

    def stop(self) -> None:
        """Stop following (a :meth:`next_batch` waiting returns ``None``)."""
        self.stopped.set()
        with self._cv:
            self._cv.notify_all()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    def __enter__(self) -> "FolderWatch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- batches --------------------------------------------------------------------------
    def next_batch(self, timeout: float | None = None) -> Batch | None:
        """The next settled batch; ``None`` when stopped or after ``timeout`` seconds with none."""
        end = None if timeout is None else time.monotonic() + timeout
        tick = max(0.02, min(0.2, self.settle_s / 2 or 0.05, self.debounce_s / 2 or 0.05))
        while not self.stopped.is_set():
            batch = self._take()
            if batch is not None:
                return batch
            if end is not None and time.monotonic() >= end:
                return None
            with self._cv:
                self._cv.wait(tick)
        return None

    def _take(self) -> Batch | None:
        now = time.monotonic()
        with self._cv:
            if not self._pending or now - self._last_event < self.debounce_s:
                return None
            items = list(self._pending.items())
        ready: list[tuple[str, _Pending, tuple | None]] = []
        for path, p in items:
            cur = _stat(path) if not path.endswith(os.sep) else None
            if cur != p.seen:  # moved since the last event (a write with no event, e.g. polling)
                with self._cv:
                    p.seen, p.since = cur, now
                continue
            if cur is not None and now - p.since < self.settle_s:
                continue
            ready.append((path, p, cur))
        batch = Batch()
        firsts = []
        for path, p, cur in ready:
            if cur is None:
                batch.removed.append(path)
            elif now < p.retry_at:
                continue
            elif _decodes(path):
                batch.changed.append(path)
            elif now - p.since >= self.give_up_s:
                batch.changed.append(path)
                batch.undecodable.append(path)
            else:
                p.retry_at = now + self.retry_s
                log.info("'%s' does not decode yet (still being written?): retried in %.1f s", path, self.retry_s)
                continue
            firsts.append(p.first)
        if not len(batch):
            return None
        with self._cv:
            for path in batch.changed + batch.removed:
                p = self._pending.get(path)
                if p is not None and p.seen == _stat(path if not path.endswith(os.sep) else ""):
                    del self._pending[path]
        batch.waited_s = round(now - min(firsts), 3)
        return batch


def follow(
    watch: FolderWatch,
    update: Callable[[Batch], object],
    *,
    stop: threading.Event | None = None,
    on_error: Callable[[Batch, BaseException], None] | None = None,
    retry_s: float = 5.0,
) -> None:
    """Hand each batch of ``watch`` to ``update`` until ``stop`` is set (or the watch stops).

    A failing ``update`` (an :class:`~agentcir.framework.errors.AgentcirError`, an ``OSError``)
    is logged (and given to ``on_error``), and the batch is handed over again with the next
    one, or after ``retry_s`` seconds: nothing that changed is lost."""
    from .errors import AgentcirError

    stop = stop or watch.stopped
    failed: Batch | None = None
    failed_at = 0.0
    while not stop.is_set() and not watch.stopped.is_set():
        batch = watch.next_batch(timeout=0.5)
        if failed is not None and (batch is not None or time.monotonic() - failed_at >= retry_s):
            batch = batch or Batch()
            batch.changed = list(dict.fromkeys(failed.changed + batch.changed))
            batch.removed = list(dict.fromkeys(failed.removed + batch.removed))
            failed = None
        if batch is None:
            continue
        try:
            update(batch)
        except (AgentcirError, OSError) as e:
            log.warning(
                "watch: the update after %s failed: %s (tried again in %.0f s or with the next change)",
                batch.line(),
                e,
                retry_s,
            )
            failed, failed_at = batch, time.monotonic()
            if on_error is not None:
                on_error(batch, e)
