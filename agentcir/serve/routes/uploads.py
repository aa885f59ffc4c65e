"""Uploaded reference images: checked, then stored (``/upload/{name}/thumb`` shows one)."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import asyncio
import hashlib
from pathlib import Path

from fastapi import APIRouter, HTTPException, UploadFile

from ...framework.errors import InputError, StorageError
from ..files import UPLOAD_NAME, NoSpace, TooLarge, storage_error
from ..state import ServeState
from . import State
from .images import THUMB_DOC, thumb_response

router = APIRouter()


async def store_upload(st: ServeState, image: UploadFile) -> tuple[Path, str]:
    """Read ``image`` (refused past the byte limit), decode-check it, store it: (its path, its name)."""
    data = bytearray()
    while True:  # streamed: refused as soon as it passes the limit
        chunk = await image.read(1 << 20)
        if not chunk:
            break
        data += chunk
        if len(data) > st.max_upload:
            raise HTTPException(413, f"image '{image.filename}' is larger than {st.cfg.max_upload_mb:g} MB")
    if not data:
        raise HTTPException(400, f"image '{image.filename}' is empty")
    data = bytes(data)  # one copy, checked, hashed and stored
    try:  # decoded (under the pixel limit, bounded concurrency) before anything is stored
        suffix = await asyncio.to_thread(st.decoder.check_upload, data, image.filename or "upload")
    except TooLarge as e:
        raise HTTPException(413, str(e)) from None
    except InputError as e:
        raise HTTPException(400, str(e)) from None
    name = hashlib.sha256(data).hexdigest()[:32] + "." + suffix
    try:
        return st.uploads.get(name) or await asyncio.to_thread(st.uploads.put, name, data), name
    except StorageError as e:
        err: StorageError = e
    except OSError as e:  # anything the store did not name itself
        err = storage_error(st.uploads.root, e, "upload folder")
    # 507 Insufficient Storage for a full disk, else 500: in words, never a traceback
    raise HTTPException(507 if isinstance(err, NoSpace) else 500, f"the upload cannot be stored: {err}") from None


@router.get("/upload/{name}/thumb", summary="a stored upload as a JPEG thumbnail", **THUMB_DOC)
def upload_thumb(name: str, st: State, size: int = 256):
    p = st.uploads.get(name) if UPLOAD_NAME.match(name) else None
    if p is None:
        raise HTTPException(404, f"no stored upload '{name}'")
    return thumb_response(st, f"u-{name}-{size}.jpg", p, size)
