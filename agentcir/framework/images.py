"""Image files: listing a folder, decoding robustly, video keyframes."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .errors import InputError

log = logging.getLogger(__name__)

#: images above this many pixels are refused before decoding (``run.max_image_pixels``; 0 = no limit).
#: A small file can hold a huge image (a 128 KB PNG of 132 megapixels decodes to 400 MB and more).
#: The limit is checked per call by :func:`load_rgb`; Pillow's own process-wide decompression-bomb
#: guard (``PIL.Image.MAX_IMAGE_PIXELS``) is never changed, so every other decoder keeps it.
DEFAULT_MAX_PIXELS = 100_000_000
_max_pixels = DEFAULT_MAX_PIXELS

#: version of the pixels :func:`load_rgb` makes of a file; part of every gallery's plan, so a gallery
#: embedded by an older decoder is recognised and re-embedded. 1: EXIF orientation ignored (portrait
#: photos decoded sideways); 2: EXIF orientation applied (photos upright, as every viewer shows them).
DECODE_VERSION = 2

#: the EXIF tag holding the orientation (1: upright; 2..8: mirrored and/or rotated)
_ORIENTATION = 0x0112

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".heic", ".heif", ".avif"}
_HEIF_READY: bool | None = None


class ImageDecodeError(InputError):
    """A file could not be decoded as an image."""


class ImageTooLargeError(ImageDecodeError):
    """An image has more pixels than ``run.max_image_pixels`` (refused before it is decoded)."""


def set_max_pixels(limit: int) -> None:
    """Set the pixel limit of :func:`load_rgb` for this process (0: no limit)."""
    global _max_pixels
    if int(limit) < 0:
        raise InputError(f"run.max_image_pixels must be 0 (no limit) or positive, got {limit}")
    _max_pixels = int(limit)


def max_pixels() -> int:
    return _max_pixels


def _enable_heif() -> None:
    global _HEIF_READY
    if _HEIF_READY is None:
        try:
            import pillow_heif  # type: ignore

            pillow_heif.register_heif_opener()
            _HEIF_READY = True
        except Exception:  # optional: HEIC/AVIF simply fail to decode without it
            _HEIF_READY = False


def _open_beyond_guard(path: str | os.PathLike):
    """Open ``path`` (its header only) without Pillow's decompression-bomb check, for a call whose own
    limit (checked by the caller before any pixel is decoded) allows more pixels than Pillow's guard.
    Pillow's process-wide setting is left untouched (other threads and decoders keep it)."""
    import struct

    from PIL import Image, UnidentifiedImageError

    Image.init()
    fp = open(path, "rb")
    try:
        prefix = fp.read(16)
        for fmt in Image.ID:
            factory, accept = Image.OPEN[fmt]
            ok = accept(prefix) if accept else True
            if not ok or isinstance(ok, str):
                continue
            fp.seek(0)
            try:
                im = factory(fp, os.fspath(path))
            except (SyntaxError, IndexError, TypeError, struct.error):
                continue
            im._exclusive_fp = True  # closing the image closes the file
            return im
    except BaseException:
        fp.close()
        raise
    fp.close()
    raise UnidentifiedImageError(f"cannot identify image file {os.fspath(path)!r}")


def orientation(im) -> int:
    """The EXIF orientation of PIL image ``im`` (1: upright, 2..8: mirrored and/or rotated)."""
    try:
        o = int(im.getexif().get(_ORIENTATION, 1))
    except Exception:  # a damaged EXIF block: the pixels are used as stored
        return 1
    return o if 1 <= o <= 8 else 1


def upright(im):
    """``im`` turned as its EXIF orientation says (the pixels every photo viewer shows); ``im``
    itself when it is upright already."""
    if orientation(im) == 1:
        return im
    from PIL import ImageOps

    return ImageOps.exif_transpose(im)


def load_rgb(
    path: str | os.PathLike | "Image.Image",  # noqa: F821
    *,
    min_side: int | None = None,
    max_pixels: int | None = None,
):
    """Decode ``path`` (or pass through a PIL image) as an upright RGB PIL image.

    The one decode path of every component (encoders, captioners, VLM calls, detectors): the
    image is turned as its EXIF orientation says (a portrait phone photo is stored sideways with
    orientation 6 or 8), so every component sees the photo as a viewer shows it
    (:data:`DECODE_VERSION`).

    An image above the pixel limit (``max_pixels``, else :func:`set_max_pixels`,
    ``run.max_image_pixels``; 0: no limit) is refused from its header, before any pixel is decoded.
    Pillow's own decompression-bomb guard stays in force for the process; this call's limit
    decides alone for this call. With ``min_side``, a JPEG is decoded at the smallest DCT scale
    (1/2, 1/4, 1/8) whose both sides stay at least ``min_side`` pixels: far less memory and time
    for a caller that shrinks the image anyway.

    Raises :class:`ImageDecodeError` (:class:`ImageTooLargeError`) naming the path and the reason.
    """
    from PIL import Image

    if isinstance(path, Image.Image):
        return upright(path).convert("RGB")
    _enable_heif()
    limit = _max_pixels if max_pixels is None else int(max_pixels)
    try:
        try:
            opened = Image.open(path)
        except Image.DecompressionBombError:  # above Pillow's guard: this call's limit decides
            opened = _open_beyond_guard(path)
        with opened as im:
            w, h = im.size
            if limit and w * h > limit:
                raise ImageTooLargeError(
                    f"image '{path}': {w}x{h} ({w * h:,} pixels) is above the limit of "
                    f"{limit:,} pixels (run.max_image_pixels); shrink the image or raise the limit"
                )
            if min_side and im.format == "JPEG":
                im.draft("RGB", (int(min_side), int(min_side)))
            im.load()
            if getattr(im, "n_frames", 1) > 1:
                im.seek(0)
            return upright(im).convert("RGB")
    except FileNotFoundError:
        raise ImageDecodeError(f"image '{path}': file not found") from None
    except ImageDecodeError:
        raise
    except Exception as e:  # PIL raises many types for broken files
        raise ImageDecodeError(f"image '{path}': cannot decode ({type(e).__name__}: {e})") from None


def _walk(root: Path, recursive: bool, follow_links: bool, links: list | None) -> list[Path]:
    """Every file under ``root`` (a symlinked file is listed as found). A symlinked folder is
    followed once with ``follow_links`` (a link back into a folder already walked, a loop, is
    refused), else skipped; each refused or skipped link is appended to ``links`` as a
    :class:`Skipped` naming it and why."""

    def ident(p: str) -> tuple[int, int]:
        st = os.stat(p)
        return st.st_dev, st.st_ino

    seen = {ident(str(root))}
    files: list[Path] = []
    pending = [str(root)]
    while pending:
        top = pending.pop()
        try:
            entries = sorted(os.scandir(top), key=lambda e: e.name)
        except OSError as e:
            if links is not None:
                links.append(Skipped(len(links), top, f"folder cannot be read ({e.strerror or e})"))
            continue
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows a link
            except OSError:
                is_dir = False
            if not is_dir:
                if entry.is_file():
                    files.append(Path(entry.path))
                continue
            if not recursive:
                continue
            link = entry.is_symlink()
            if link and not follow_links:
                if links is not None:
                    links.append(
                        Skipped(len(links), entry.path, "symlinked folder not followed (--follow-links follows it)")
                    )
                continue
            try:
                key = ident(entry.path)
            except OSError as e:
                if links is not None:
                    links.append(Skipped(len(links), entry.path, f"folder cannot be read ({e.strerror or e})"))
                continue
            if key in seen:  # only through a link: a loop, or a folder reached twice
                if links is not None:
                    links.append(
                        Skipped(
                            len(links),
                            entry.path,
                            f"{'symlinked ' if link else ''}folder leads to "
                            f"'{os.path.realpath(entry.path)}', a folder walked already (a loop or a "
                            "second link): not followed twice",
                        )
                    )
                continue
            seen.add(key)
            pending.append(entry.path)
    return files


def list_images(
    folder: str | os.PathLike, recursive: bool = True, *, follow_links: bool = False, links: list | None = None
) -> tuple[list[Path], list[Path]]:
    """Files under ``folder`` with an image suffix, sorted; and the other files (skipped).

    A symlinked folder (an album linked in) is followed once with ``follow_links`` (a loop is
    refused), else skipped; either way each folder not walked is appended to ``links`` (a
    :class:`Skipped` naming it and why), so the caller can report it.

    Raises :class:`InputError` if the folder does not exist or holds no file at all.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"gallery folder '{folder}' does not exist or is not a folder")
    files = sorted(p for p in _walk(root, recursive, follow_links, links) if not p.name.startswith("."))
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    others = [p for p in files if p.suffix.lower() not in IMAGE_SUFFIXES]
    if not images:
        raise InputError(
            f"gallery folder '{folder}' holds no image files ({len(others)} other file(s); "
            f"image suffixes: {', '.join(sorted(IMAGE_SUFFIXES))})"
        )
    return images, others


@dataclass
class Skipped:
    """An input that was skipped, with why."""

    index: int
    path: str
    reason: str


def report_skipped(skipped: Sequence[Skipped], what: str = "image(s)") -> None:
    if skipped:
        shown = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:5])
        more = f" (and {len(skipped) - 5} more)" if len(skipped) > 5 else ""
        log.warning("skipped %d %s that could not be decoded: %s%s", len(skipped), what, shown, more)


def decode_many(items: Iterable, *, min_side: int | None = None) -> tuple[list, list[int], list[Skipped]]:
    """Decode images, keeping going past failures: (images, kept indices, skipped).
    ``min_side``: see :func:`load_rgb`."""
    images, kept, skipped = [], [], []
    for i, item in enumerate(items):
        try:
            images.append(load_rgb(item, min_side=min_side))
            kept.append(i)
        except ImageDecodeError as e:
            skipped.append(Skipped(i, str(item), str(e).split(": ", 1)[-1]))
    return images, kept, skipped
