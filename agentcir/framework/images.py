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
DEFAULT_MAX_PIXELS = 100_000_000
_max_pixels = DEFAULT_MAX_PIXELS

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


def load_rgb(path: str | os.PathLike | "Image.Image", *, min_side: int | None = None):  # noqa: F821
    """Decode ``path`` (or pass through a PIL image) as an RGB PIL image.

    An image above the pixel limit (:func:`set_max_pixels`, ``run.max_image_pixels``) is refused
    from its header, before any pixel is decoded. With ``min_side``, a JPEG is decoded at the
    smallest DCT scale (1/2, 1/4, 1/8) whose both sides stay at least ``min_side`` pixels: far
    less memory and time for a caller that shrinks the image anyway.

    Raises :class:`ImageDecodeError` (:class:`ImageTooLargeError`) naming the path and the reason.
    """
    from PIL import Image

    if isinstance(path, Image.Image):
        return path.convert("RGB")
    _enable_heif()
    Image.MAX_IMAGE_PIXELS = None  # the limit is ours (checked below with a clear reason), not PIL's warning
    try:
        with Image.open(path) as im:
            w, h = im.size
            if _max_pixels and w * h > _max_pixels:
                raise ImageTooLargeError(f"image '{path}': {w}x{h} ({w * h:,} pixels) is above the limit of "
                                         f"{_max_pixels:,} pixels (run.max_image_pixels); shrink the image or raise the limit")
            if min_side and im.format == "JPEG":
                im.draft("RGB", (int(min_side), int(min_side)))
            im.load()
            if getattr(im, "n_frames", 1) > 1:
                im.seek(0)
            return im.convert("RGB")
    except FileNotFoundError:
        raise ImageDecodeError(f"image '{path}': file not found") from None
    except ImageDecodeError:
        raise
    except Exception as e:  # PIL raises many types for broken files
        raise ImageDecodeError(f"image '{path}': cannot decode ({type(e).__name__}: {e})") from None


def list_images(folder: str | os.PathLike, recursive: bool = True) -> tuple[list[Path], list[Path]]:
    """Files under ``folder`` with an image suffix, sorted; and the other files (skipped).

    Raises :class:`InputError` if the folder does not exist or holds no file at all.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"gallery folder '{folder}' does not exist or is not a folder")
    files = sorted(p for p in (root.rglob("*") if recursive else root.iterdir()) if p.is_file() and not p.name.startswith("."))
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    others = [p for p in files if p.suffix.lower() not in IMAGE_SUFFIXES]
    if not images:
        raise InputError(f"gallery folder '{folder}' holds no image files ({len(others)} other file(s); "
                         f"image suffixes: {', '.join(sorted(IMAGE_SUFFIXES))})")
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
