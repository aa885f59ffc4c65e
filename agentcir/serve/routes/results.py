"""What a result set becomes: near-duplicate groups (``/api/groups``), an export
(``/api/export``: CSV, JSON, zip) and an album folder (``/api/album``)."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import asyncio
import io
import logging
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask

from ...framework.errors import InputError, StorageError
from .. import export as X
from .. import models as M
from ..files import NoSpace, storage_error
from ..groups import check_threshold, dhash, group_rows
from ..state import ServeState
from . import State

log = logging.getLogger(__name__)

router = APIRouter()

#: the thumbnail edge the perceptual hash is computed from
HASH_SIZE = 128


def hash_of(st: ServeState, row: int) -> Optional[int]:
    """The perceptual hash of gallery ``row`` (from its 128 px thumbnail, made if missing); None
    when its file cannot be read."""
    from PIL import Image

    try:
        p = st.files.path(row)
        key = st.files.thumb_key(p, HASH_SIZE)
    except (LookupError, OSError):
        return None
    if key in st.dhashes:
        return st.dhashes[key]
    try:
        hit = st.thumbs.get(key)
        data = hit.read_bytes() if hit is not None else st.decoder.thumbnail(p, HASH_SIZE)
        if hit is None:
            try:
                st.thumbs.put(key, data)
            except StorageError as e:
                log.warning("thumbnail not cached: %s", e)
        with Image.open(io.BytesIO(data)) as im:
            h = dhash(im)
    except (InputError, OSError) as e:
        log.info("no perceptual hash of row %d: %s", row, e)
        return None
    st.dhashes[key] = h
    return h


def group_hits(
    st: ServeState, rows: list[int], threshold: Optional[float] = None, hash_distance: Optional[int] = None
) -> tuple[list[list[int]], float, int]:
    """(groups of positions into ``rows``, the threshold, the hash distance used)."""
    t = st.cfg.dup_threshold if threshold is None else threshold
    d = st.cfg.dup_hash_distance if hash_distance is None else hash_distance
    try:
        t = check_threshold(t)
    except ValueError as e:
        raise HTTPException(422, str(e)) from None
    g = st.gallery
    bad = [r for r in rows if not 0 <= r < len(g)]
    if bad:
        raise HTTPException(404, f"no gallery row {bad[0]} (the gallery has {len(g)} items)")
    vectors = np.asarray(g.image_emb[np.asarray(rows, dtype=np.int64)], dtype=np.float32) if rows else np.zeros((0, 1))
    groups = group_rows(rows, vectors, threshold=t, hash_of=lambda r: hash_of(st, r), hash_distance=d)
    return groups, t, d


@router.post(
    "/api/groups",
    response_model=M.Groups,
    summary="near-duplicate groups of a result set",
    responses={404: {"model": M.Error}, 422: {"model": M.Error}},
)
async def groups(req: M.GroupsRequest, st: State):
    """Group the hits (gallery rows, best first) that show one picture: image-embedding cosine
    at least ``threshold`` and perceptual hashes within ``hash_distance`` bits."""
    out, t, d = await asyncio.to_thread(group_hits, st, req.rows, req.threshold, req.hash_distance)
    return M.Groups(groups=out, threshold=t, hash_distance=d)


@router.post(
    "/api/export",
    summary="a result set as CSV, JSON or a zip of the photos",
    response_class=Response,
    responses={
        200: {"content": {"text/csv": {}, "application/json": {}, "application/zip": {}}},
        404: {"model": M.Error},
        413: {"model": M.Error},
        422: {"model": M.Error},
    },
)
async def export(req: M.ExportRequest, st: State):
    """CSV (one row per hit: rank, id, path, score, verified, group, then its metadata), JSON
    (the same with the query and the hits whose file is missing) or a zip (``photos/`` in rank
    order, ``results.csv``, ``results.json``). Files only from inside the gallery folder."""
    try:
        records, missing = X.rows_of(st, req.hits)
    except LookupError as e:
        raise HTTPException(404, str(e)) from None
    name = "agentcir-results"
    if req.format == "csv":
        return Response(
            X.to_csv(records),
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": f'attachment; filename="{name}.csv"'},
        )
    if req.format == "json":
        return Response(
            X.to_json(st, records, missing, req.query),
            media_type="application/json",
            headers={"content-disposition": f'attachment; filename="{name}.json"'},
        )
    if not records:
        raise HTTPException(404, "none of these photos' files can be read: nothing to put in a zip")
    try:
        path = await asyncio.to_thread(X.to_zip, st, records, missing, req.query, int(st.cfg.export_max_mb * 2**20))
    except X.ExportTooLarge as e:
        raise HTTPException(413, str(e)) from None
    except OSError as e:
        err = storage_error(Path(tempfile.gettempdir()), e, "temporary folder")
        raise HTTPException(507 if isinstance(err, NoSpace) else 500, f"the zip cannot be written: {err}") from None
    return FileResponse(
        path,
        media_type="application/zip",
        filename=f"{name}.zip",
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


@router.post(
    "/api/album",
    response_model=M.Album,
    summary="copy a result set's photos into an album folder",
    responses={
        400: {"model": M.Error},
        404: {"model": M.Error},
        422: {"model": M.Error},
        500: {"model": M.Error},
        507: {"model": M.Error},
    },
)
async def album(req: M.AlbumRequest, st: State):
    """Copy the photos into ``ALBUM_ROOT/name/`` (``--album-root``; off without it). Files already
    there with the same bytes are kept; another file of the same name gets a numbered suffix."""
    root = st.cfg.album_root
    if not root:
        raise HTTPException(404, "copying into an album folder is off on this server (start it with --album-root DIR)")
    try:
        folder = X.album_folder(root, req.name)
        records, missing = X.rows_of(st, req.hits)
    except ValueError as e:
        raise HTTPException(422, str(e)) from None
    except LookupError as e:
        raise HTTPException(404, str(e)) from None
    try:
        out = await asyncio.to_thread(X.copy_album, records, folder)
    except OSError as e:
        err = storage_error(folder, e, "album folder")
        raise HTTPException(507 if isinstance(err, NoSpace) else 500, str(err)) from None
    return M.Album(**out, missing=[r["id"] for r in missing])
