"""Inter-process locks on run directories and gallery builds.

A lock is an ``flock`` on a file (``.lock`` in the run directory, ``.build.lock`` beside a
gallery); the kernel releases it when its process ends, however it ends (SIGKILL included),
so a lock is never left stale. The file holds the holder's pid, host and start time, which
the error of a second process names.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import AgentcirError

log = logging.getLogger(__name__)


class LockedError(AgentcirError):
    """Another process holds the lock (the message names it: pid, host, since)."""


def _holder(fd: int, tries: int = 20) -> str:
    """Who holds the lock, from its record; a holder that has just taken the lock writes its
    record a moment later, so an empty or partial record is read again for up to ~0.2 s."""
    for i in range(tries):
        try:
            h = json.loads(os.pread(fd, 4096, 0) or b"{}")
            since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(h["since"])))
            return f"pid {h['pid']} on host {h['host']} since {since}"
        except (OSError, ValueError, KeyError, TypeError):
            if i + 1 < tries:
                time.sleep(0.01)
    return "another process (its pid is not recorded yet)"


@contextmanager
def hold_lock(lock_file: Path, what: str, *, wait: bool = False, hint: str = "") -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` for the block.

    Held by another process: raise :class:`LockedError` naming the holder, or with ``wait``
    block until it is released (logging who holds it).
    """
    import fcntl

    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if not wait:
                raise LockedError(f"{what} is in use by {holder}; wait for that process to finish{hint}") from None
            log.warning("%s is in use by %s; waiting for it", what, holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}).encode()
        os.pwrite(fd, record, 0)  # one write, then cut what a longer old record left
        os.ftruncate(fd, len(record))
        try:
            yield
        finally:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
