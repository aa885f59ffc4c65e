"""Safe writes: unique temporary files renamed atomically, and clear errors for a full disk or a
read-only folder.

A file is first written to a temporary name unique to the writing process and call (two
processes never share one), then renamed over its destination with :func:`os.replace`, so a
reader sees the old file or the new one, never a part; a kill or a full disk leaves at most a
stray temporary file, never a torn destination. :func:`storage_errors` turns the operating
system's "no space left" / "read-only file system" / "permission denied" into a
:class:`StorageError` naming the path and what to do.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import StorageError

#: errno values that mean "this folder cannot be written", with what to do about each
_FIXES = {
    errno.ENOSPC: ("no space left on the device", "free some space (or choose another folder)"),
    errno.EDQUOT: ("the disk quota is exceeded", "free some space (or choose another folder)"),
    errno.EROFS: ("the file system is read-only", "choose a writable folder"),
    errno.EACCES: ("permission denied", "make the folder writable or choose another one"),
    errno.EPERM: ("operation not permitted", "make the folder writable or choose another one"),
}

#: the message of a short write without an errno (numpy's ``tofile``, used by ``np.save``)
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


def unique_tmp(dest: Path) -> Path:
    """A temporary path beside ``dest``, unique to this process and call, keeping ``dest``'s suffix
    (numpy's ``save``/``savez`` append ``.npy``/``.npz`` to names lacking it)."""
    dest = Path(dest)
    return dest.with_name(f".{dest.stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp{dest.suffix}")


@contextmanager
def atomic_path(dest: Path) -> Iterator[Path]:
    """Yield a unique temporary path; when the block succeeds it replaces ``dest`` atomically,
    when it fails the temporary file is removed and ``dest`` is untouched."""
    dest = Path(dest)
    tmp = unique_tmp(dest)
    try:
        yield tmp
        os.replace(tmp, dest)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


def atomic_write_text(dest: Path, text: str) -> None:
    """Write ``text`` to ``dest`` through a unique temporary file and an atomic rename."""
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")


def storage_error(e: BaseException, path: str | os.PathLike, what: str) -> StorageError | None:
    """The :class:`StorageError` for ``e`` when it means ``path`` cannot be written, else ``None``."""
    if isinstance(e, StorageError):
        return e
    why = None
    if isinstance(e, OSError) and e.errno in _FIXES:
        why, fix = _FIXES[e.errno]
        path = e.filename or path
    elif isinstance(e, OSError) and e.errno is None and _SHORT_WRITE.search(str(e)):
        # numpy's ``tofile``/``save`` on a full disk: "16512 requested and 5088 written", no errno
        asked, wrote = _SHORT_WRITE.search(str(e)).groups()
        why = f"the disk is full (a short write: {wrote} of {asked} bytes written)"
        fix = "free some space (or choose another folder)"
    elif isinstance(e, sqlite3.OperationalError):
        msg = str(e).lower()
        if "disk is full" in msg or "disk i/o error" in msg:
            why, fix = (
                "no space left on the device (sqlite: " + str(e) + ")",
                "free some space (or choose another folder)",
            )
        elif "readonly" in msg or "read-only" in msg or "unable to open database" in msg:
            why, fix = f"it cannot be written (sqlite: {e})", "make it writable or choose another file"
    if why is None:
        return None
    return StorageError(
        f"cannot write {what} '{path}': {why}; {fix} and rerun the same command: "
        f"everything finished before is kept and the run resumes"
    )


@contextmanager
def storage_errors(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn "disk full", "read-only" and "permission denied" errors in the block into a :class:`StorageError`."""
    try:
        yield
    except (OSError, sqlite3.OperationalError) as e:
        err = storage_error(e, path, what)
        if err is None or err is e:
            raise
        raise err from e
