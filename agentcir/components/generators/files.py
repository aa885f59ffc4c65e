"""Content-addressed image files for the generators that make images."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

from ...framework.images import ImageDecodeError

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_bytes(image: Any, *, what: str) -> bytes:
    """PNG bytes of a PIL image or of encoded image bytes (PNG kept as is, others converted).

    Raises :class:`ImageDecodeError` naming ``what`` when the bytes are not an image.
    """
    from PIL import Image

    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
        try:
            with Image.open(io.BytesIO(data)) as im:
                im.load()
                if data.startswith(_PNG_MAGIC):
                    return data
                image = im.convert("RGBA" if "A" in im.getbands() else "RGB")
        except Exception as e:
            raise ImageDecodeError(f"{what}: the returned data is not an image ({type(e).__name__}: {e})") from None
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def save_content_addressed(image: Any, folder: str | os.PathLike, *, what: str) -> Path:
    """Save ``image`` as ``<folder>/<sha256 of its PNG bytes>[:32].png`` (atomically; an
    identical file already there is reused) and return the path."""
    data = png_bytes(image, what=what)
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.png"
    if not path.is_file():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path.resolve()
