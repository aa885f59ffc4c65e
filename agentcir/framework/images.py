"""Image files: listing a folder, decoding robustly, video keyframes."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .errors import InputError

log = logging.getLogger("agentcir")

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".heic", ".heif", ".avif"}
_HEIF_READY: bool | None = None


class ImageDecodeError(InputError):
    """A file could not be decoded as an image."""


def _enable_heif() -> None:
    global _HEIF_READY
    if _HEIF_READY is None:
        try:
            import pillow_heif  # type: ignore

            pillow_heif.register_heif_opener()
            _HEIF_READY = True
        except Exception:  # optional: HEIC/AVIF simply fail to decode without it
            _HEIF_READY = False


def load_rgb(path: str | os.PathLike | "Image.Image"):  # noqa: F821
    """Decode ``path`` (or pass through a PIL image) as an RGB PIL image.

    Raises :class:`ImageDecodeError` naming the path and the reason.
    """
    from PIL import Image

    if isinstance(path, Image.Image):
        return path.convert("RGB")
    _enable_heif()
    try:
        with Image.open(path) as im:
            im.load()
            if getattr(im, "n_frames", 1) > 1:
                im.seek(0)
            return im.convert("RGB")
    except FileNotFoundError:
        raise ImageDecodeError(f"image '{path}': file not found") from None
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


def decode_many(items: Iterable) -> tuple[list, list[int], list[Skipped]]:
    """Decode images, keeping going past failures: (images, kept indices, skipped)."""
    images, kept, skipped = [], [], []
    for i, item in enumerate(items):
        try:
            images.append(load_rgb(item))
            kept.append(i)
        except ImageDecodeError as e:
            skipped.append(Skipped(i, str(item), str(e).split(": ", 1)[-1]))
    return images, kept, skipped
