"""Gallery files handed to people and agents: confined to the gallery's folders, images checked
under a pixel limit before they are decoded, thumbnails, and bounded on-disk stores. The web app
(``agentcir serve``) and the MCP server (``agentcir mcp``) both serve photos through these.

- :class:`GalleryFiles`: a gallery row's file, only when its path, symlinks resolved, lies
  inside the gallery root (the indexed folder; for a dataset gallery, the folder holding all
  its items).
- :class:`Decoder`: every decode (an upload's check, a thumbnail) holds one of ``concurrency``
  slots and first reads only the header: an image over ``max_pixels`` is refused before its
  pixels are decoded.
- :class:`BoundedDir`: a folder of files kept under a byte and a file budget (oldest use
  evicted first); uploads and thumbnails live in two of them.
- :func:`within_roots`: a path given by a client, accepted only when it is an image file whose
  resolved path lies inside one of the served folders.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path

from .errors import InputError, StorageError
from .images import IMAGE_SUFFIXES, _enable_heif
from .plain import ACCEPTED, unreadable_image

#: thumbnail edge lengths served (a closed set, so the cache stays bounded by item count)
THUMB_SIZES = (128, 256, 512)
#: the default limits of the servers over a gallery (``agentcir serve`` and ``agentcir mcp``): the
#: largest upload (MB), the largest image decoded (pixels), decodes at once, the stored uploads'
#: bounds (MB, files) and the thumbnail cache's (MB)
MAX_UPLOAD_MB, MAX_PIXELS, DECODE_CONCURRENCY = 20.0, 50_000_000, 2
UPLOADS_MB, UPLOADS_FILES, THUMBS_MB = 200.0, 500, 256.0
UPLOAD_NAME = re.compile(r"^[0-9a-f]{32}\.(jpg|png|webp|gif|bmp|tif|heic|avif)$")
_FORMAT_SUFFIX = {
    "JPEG": "jpg",
    "MPO": "jpg",
    "PNG": "png",
    "WEBP": "webp",
    "GIF": "gif",
    "BMP": "bmp",
    "TIFF": "tif",
    "HEIF": "heic",
    "AVIF": "avif",
}


class TooLarge(InputError):
    """An image over the pixel limit (or an upload over the byte limit)."""


class BoundedDir:
    """Files in ``root`` kept under ``max_bytes`` and ``max_files``: after each ``put`` the
    least recently used files are deleted until both hold. The folder's files, sizes and use
    order are kept in memory (a ``put`` costs no listing of a folder of thousands of
    thumbnails) and listed again every ``RELIST_S`` seconds, so that another process sharing
    the folder keeps the bounds too."""

    #: seconds after which a ``put`` lists the folder again (other processes' files and deletions)
    RELIST_S = 30.0

    def __init__(self, root: str | Path, *, max_bytes: int, max_files: int, what: str = "folder"):
        self.root = Path(root)
        self.what = what  # how errors name the folder
        self.max_bytes, self.max_files = int(max_bytes), int(max_files)
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] | None = None  # name -> bytes, least recently used first
        self._bytes = 0
        self._listed_at = 0.0

    def get(self, name: str) -> Path | None:
        p = self.root / name
        if p.is_file():
            try:
                os.utime(p)  # recently used: evicted last (also by the next process's listing)
            except OSError:
                pass
            with self._lock:
                if self._files is not None and name in self._files:
                    self._files.move_to_end(name)
            return p
        return None

    def put(self, name: str, data: bytes) -> Path:
        """Store ``data`` as ``name``; :class:`StorageError` (naming the folder) when it cannot be written."""
        with self._lock:
            p = self.root / name
            tmp = self.root / f".{name}.{threading.get_ident()}.tmp"
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                if self._files is None or time.monotonic() - self._listed_at > self.RELIST_S:
                    self._files = self._listing()
                    self._bytes = sum(self._files.values())
                    self._listed_at = time.monotonic()
                tmp.write_bytes(data)
                tmp.replace(p)
            except OSError as e:
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
                raise storage_error(self.root, e, self.what) from e
            self._bytes += len(data) - self._files.pop(name, 0)
            self._files[name] = len(data)
            while (self._bytes > self.max_bytes or len(self._files) > self.max_files) and len(self._files) > 1:
                old, size = self._files.popitem(last=False)  # never the file just put: it is the last
                (self.root / old).unlink(missing_ok=True)
                self._bytes -= size
            return p

    def _listing(self) -> OrderedDict[str, int]:
        entries = []
        for f in self.root.iterdir():
            if f.is_file() and not f.name.startswith("."):
                st = f.stat()
                entries.append((st.st_mtime, f.name, st.st_size))
        return OrderedDict((name, size) for _, name, size in sorted(entries))


#: errno values of a full disk or quota
NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


class NoSpace(StorageError):
    """A folder's disk (or quota) is full."""


def storage_error(folder: Path, e: OSError, what: str = "folder") -> StorageError:
    """The :class:`StorageError` (:class:`NoSpace` for a full disk) of failing to write into ``folder``."""
    if e.errno in NO_SPACE:
        return NoSpace(
            f"the disk holding the {what} '{folder}' is full ({e.strerror or e}): free some space, or give "
            f"another folder"
        )
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        why = "it is on a read-only file system" if e.errno == errno.EROFS else "permission denied"
        return StorageError(f"the {what} '{folder}' cannot be written ({why}): give a writable folder")
    return StorageError(f"the {what} '{folder}' cannot be written ({e.strerror or e})")


class Decoder:
    """Bounded, pixel-limited decoding (see the module docstring)."""

    def __init__(self, *, max_pixels: int, concurrency: int):
        self.max_pixels = int(max_pixels)
        self._slots = threading.BoundedSemaphore(max(1, int(concurrency)))

    def _open(self, src, name: str):
        from PIL import Image

        _enable_heif()
        try:
            im = Image.open(src)
        except Exception as e:
            raise InputError(unreadable_image(name, e)) from None
        w, h = im.size
        if w * h > self.max_pixels:
            im.close()
            raise TooLarge(
                f"image '{name}' has {w}x{h} = {w * h / 1e6:.1f} megapixels, more than the limit of "
                f"{self.max_pixels / 1e6:.1f}"
            )
        return im

    @contextlib.contextmanager
    def _decoding(self, src, name: str):
        """An opened image under the limits, in a decode slot; decode errors named by ``name``."""
        with self._slots:
            im = self._open(src, name)
            try:
                yield im
            except TooLarge:
                raise
            except Exception as e:
                raise InputError(unreadable_image(name, e)) from None
            finally:
                im.close()

    def check_file(self, path: str | Path, name: str | None = None) -> None:
        """Refuse ``path`` when it cannot be opened as an image or is over the pixel limit
        (only its header is read)."""
        with self._decoding(path, name or Path(path).name):
            pass

    def check_upload(self, data: bytes, name: str) -> str:
        """Decode ``data`` fully (under the limits); return the file suffix of its real format."""
        with self._decoding(io.BytesIO(data), name) as im:
            fmt = im.format or ""
            im.load()
        if fmt not in _FORMAT_SUFFIX:
            raise InputError(
                f"This image is in a format agentcir does not accept ('{name}': {fmt or 'unknown'}; "
                f"accepted: {ACCEPTED})"
            )
        return _FORMAT_SUFFIX[fmt]

    def thumbnail(self, path: str | Path, size: int) -> bytes:
        """A JPEG of at most ``size`` x ``size`` pixels (EXIF orientation applied)."""
        from PIL import ImageOps

        with self._decoding(path, Path(path).name) as im:
            if im.format == "JPEG":
                im.draft("RGB", (size, size))  # decode at a reduced scale: much faster for big JPEGs
            out_im = ImageOps.exif_transpose(im)
            out_im.thumbnail((size, size))
            out = io.BytesIO()
            out_im.convert("RGB").save(out, "JPEG", quality=82, optimize=True)
            return out.getvalue()


class GalleryFiles:
    """A gallery's files, confined to its root (see the module docstring)."""

    def __init__(self, gallery):
        self.gallery = gallery
        src = Path(str(gallery.info.get("source") or ""))
        if src.is_dir():
            self.root = src.resolve()
        else:
            parents = [str(Path(p).parent) for p in gallery.paths]
            self.root = Path(os.path.commonpath(parents)).resolve() if parents else Path("/nonexistent")

    def path(self, row: int) -> Path:
        """The resolved file of ``row``; :class:`InputError` when it is missing or outside the root."""
        g = self.gallery
        if not 0 <= row < len(g):
            raise LookupError(f"no gallery row {row} (the gallery has {len(g)} items)")
        p = Path(g.paths[row]).resolve()
        if not p.is_relative_to(self.root) or not p.is_file():
            raise LookupError(f"gallery row {row}: its file is missing or outside the gallery folder")
        if p.suffix.lower() not in IMAGE_SUFFIXES:
            raise LookupError(f"gallery row {row}: not an image file")
        return p

    def thumb_key(self, p: Path, size: int) -> str:
        """The thumbnail cache name of the gallery file ``p`` (as :meth:`path` gave it) at ``size``."""
        st = p.stat()
        return hashlib.sha256(f"{p}|{st.st_mtime_ns}|{st.st_size}|{size}".encode()).hexdigest()[:32] + ".jpg"


def within_roots(path: str | Path, roots, what: str = "path") -> Path:
    """``path`` resolved (symlinks followed), when it is an image file inside one of ``roots``;
    else an :class:`InputError` naming the path and the served folders."""
    shown = str(path)[:300]
    try:
        p = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as e:
        raise InputError(f"{what} '{shown}' cannot be resolved ({e})") from None
    folders = [Path(r).resolve() for r in roots]
    if not any(p.is_relative_to(r) for r in folders):
        raise InputError(
            f"{what} '{shown}' is outside the photo folders served here "
            f"({', '.join(str(r) for r in folders) or 'none'}): give a photo inside them"
        )
    if not p.is_file():
        raise InputError(f"{what} '{shown}' is not a file")
    if p.suffix.lower() not in IMAGE_SUFFIXES:
        raise InputError(f"{what} '{shown}' is not an image file ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return p
