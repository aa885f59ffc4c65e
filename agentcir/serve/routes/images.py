"""Gallery files and JPEG thumbnails (``/image/{row}``, ``/thumb/{row}``, ``/proxy/{key}/thumb``)."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import logging
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import FileResponse, Response

from ...framework.errors import InputError, StorageError
from .. import models as M
from ..files import THUMB_SIZES
from ..state import ServeState
from . import State

log = logging.getLogger(__name__)

router = APIRouter()


def lookup(st: ServeState, row: int) -> Path:
    """The file of gallery ``row`` (404 when there is none, or it lies outside the gallery folder)."""
    try:
        return st.files.path(row)
    except LookupError as e:
        raise HTTPException(404, str(e)) from None


def thumb_response(st: ServeState, key: str, src: Path, size: int, sizes=THUMB_SIZES):
    """The cached thumbnail ``key`` of ``src`` at ``size``, made on first use."""
    if size not in sizes:
        raise HTTPException(422, f"size: must be one of {', '.join(map(str, THUMB_SIZES))}")
    hit = st.thumbs.get(key)
    if hit is None:
        try:
            data = st.decoder.thumbnail(src, size)
        except InputError as e:
            raise HTTPException(415, str(e)) from None
        try:
            hit = st.thumbs.put(key, data)
        except StorageError as e:  # the cache is a convenience: the thumbnail is sent without it
            log.warning("thumbnail not cached: %s", e)
            return Response(data, media_type="image/jpeg", headers={"cache-control": "private, max-age=3600"})
    return FileResponse(hit, media_type="image/jpeg", headers={"cache-control": "private, max-age=3600"})


THUMB_DOC = dict(
    response_class=Response,
    responses={
        200: {"content": {"image/jpeg": {}}},
        404: {"model": M.Error},
        415: {"model": M.Error},
        422: {"model": M.Error},
    },
)


@router.get(
    "/image/{row}",
    summary="a gallery image, as stored",
    response_class=Response,
    responses={200: {"content": {"image/*": {}}}, 404: {"model": M.Error}},
)
def image(
    row: int,
    st: State,
    download: Annotated[bool, Query(description="as a file to save (Content-Disposition: attachment)")] = False,
):
    p = lookup(st, row)
    if download:
        return FileResponse(p, filename=p.name, content_disposition_type="attachment")
    return FileResponse(p)


#: formats every browser shows as they are; others (TIFF, HEIC) are viewed as a large JPEG
BROWSER_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".avif"}
#: the longest edge of that JPEG
VIEW_SIZE = 2048


@router.get(
    "/view/{row}",
    summary="a gallery image as a browser can show it (the full photo)",
    response_class=Response,
    responses={200: {"content": {"image/*": {}}}, 404: {"model": M.Error}, 415: {"model": M.Error}},
)
def view(row: int, st: State):
    """The stored file when browsers show its format, else a JPEG of it at most 2048 px (cached)."""
    p = lookup(st, row)
    if p.suffix.lower() in BROWSER_SUFFIXES:
        return FileResponse(p, headers={"cache-control": "private, max-age=3600"})
    return thumb_response(st, st.files.thumb_key(p, VIEW_SIZE), p, VIEW_SIZE, sizes=(VIEW_SIZE,))


@router.get("/thumb/{row}", summary="a gallery image as a JPEG thumbnail (any gallery format)", **THUMB_DOC)
def thumb(row: int, st: State, size: Annotated[int, Query(description=f"edge length, one of {THUMB_SIZES}")] = 256):
    p = lookup(st, row)
    return thumb_response(st, st.files.thumb_key(p, size), p, size)


@router.get("/proxy/{key}/thumb", summary="a generated visual proxy as a JPEG thumbnail", **THUMB_DOC)
def proxy_thumb(key: str, st: State, size: int = 256):
    p = st.proxies.get(key)
    if p is None or not Path(p).is_file():
        raise HTTPException(404, f"no visual proxy '{key}'")
    return thumb_response(st, f"p-{key}-{size}.jpg", Path(p), size)
