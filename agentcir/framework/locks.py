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

log = logging.getLogger("agentcir")


class LockedError(AgentcirError):
    """Another process holds the lock (the message names it: pid, host, since)."""


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        h = json.loads(os.read(fd, 4096) or b"{}")
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(h["since"])))
        return f"pid {h['pid']} on host {h['host']} since {since}"
    except (OSError, ValueError, KeyError, TypeError):
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
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}).encode())
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
