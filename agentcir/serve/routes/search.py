"""Searches and history questions (``/api/info``, ``/api/search``, ``/api/ask``)."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import asyncio
import hashlib
from typing import Annotated, Optional

from fastapi import APIRouter, File, Form, HTTPException, UploadFile

from ...framework.errors import AgentcirError
from ...framework.search import Searcher
from .. import models as M
from ..files import THUMB_SIZES
from ..state import ServeState
from . import State
from ...framework.plain import plain
from .images import lookup
from .results import group_hits
from .uploads import store_upload

router = APIRouter()


@router.get("/api/info", response_model=M.Info, summary="the gallery, method and limits in use")
def info(st: State):
    s, g, cfg = st.searcher, st.gallery, st.cfg
    m = s.method
    asking = st.ask_searcher or (None if st.ask is None else True)
    return M.Info(
        gallery=str(g.root),
        size=len(g),
        dim=g.dim,
        method=s.method_name,
        encoder=s.recipe["encoder"]["name"],
        needs_reference=bool(getattr(m, "needs_reference", True)),
        answers_set=bool(getattr(m, "answers_set", False)),
        questions=bool(asking),
        with_metadata=st.with_metadata(),
        max_upload_mb=cfg.max_upload_mb,
        max_pixels=cfg.max_pixels,
        thumb_sizes=list(THUMB_SIZES),
        auth=bool(st.token),
        dup_threshold=cfg.dup_threshold,
        album=bool(cfg.album_root),
    )


def run_search(
    st: ServeState,
    s: Searcher,
    *,
    image_path,
    text: str,
    k: int,
    shown: str,
    upload: str | None,
    ref_row: int | None,
    dup_threshold: float | None = -1.0,
):
    """One search by ``s``, its progress shown; the trace's reference and visual proxy made servable;
    the hits grouped as near-duplicates at
    ``dup_threshold`` (negative: the server's default; None: not grouped)."""
    progress = st.progress
    progress.begin()
    try:
        result = s.search(image=image_path, text=text, k=k, progress=progress.hook)
    except AgentcirError as e:
        msg = plain(str(e).replace(str(image_path), shown) if image_path else str(e))
        progress.end(error=msg)
        raise HTTPException(400, msg) from None
    except BaseException:
        progress.end(error="internal error")
        raise
    progress.end()
    out = result.to_json()
    extra = out["trace"]["search"]
    if extra.get("reference"):
        extra["reference"].update(upload=upload, row=ref_row, path=shown)
    vp = next(
        (
            rec.get(key)
            for stage, key in PROXY_FIELDS
            if isinstance(rec := out["trace"].get(stage) or {}, dict) and rec.get(key)
        ),
        None,
    )
    if vp:
        row = s.row_of(vp)
        if row >= 0:
            extra["visual_proxy"] = {"row": row, "url": f"/thumb/{row}"}
        else:
            key = hashlib.sha256(str(vp).encode()).hexdigest()[:16]
            st.proxies[key] = str(vp)
            extra["visual_proxy"] = {"row": None, "url": f"/proxy/{key}/thumb"}
    if dup_threshold is not None:
        rows = [h["row"] for h in out["hits"]]
        out["groups"] = group_hits(st, rows, None if dup_threshold < 0 else dup_threshold)[0]
    return out


#: where a method's trace names the image it made of the target (shown beside the results):
#: OCTOPUS' visual proxy, Paracosm's mental image, WISER's first edited reference
PROXY_FIELDS = (("create", "visual_proxy"), ("imagine", "mental_image"), ("round0", "edited_image"))


@router.post(
    "/api/search",
    response_model=M.SearchResponse,
    summary="composed, image or text search",
    responses={400: {"model": M.Error}, 404: {"model": M.Error}, 413: {"model": M.Error}, 422: {"model": M.Error}},
)
async def search(
    st: State,
    image: Annotated[Optional[UploadFile], File(description="reference image (any format the gallery accepts)")] = None,
    text: Annotated[str, Form(max_length=2000, description="modification text, or a text query")] = "",
    k: Annotated[int, Form(ge=1, le=1000, description="results")] = 20,
    reference_row: Annotated[
        Optional[int], Form(ge=0, description="a gallery row as the reference (refine by click)")
    ] = None,
    dup_threshold: Annotated[
        Optional[float],
        Form(
            ge=0,
            le=1,
            description="near-duplicate grouping: image-embedding "
            "cosine (0 = no grouping; default: the server's --dup-threshold)",
        ),
    ] = None,
):
    """Rank the gallery for a reference (an upload, or a gallery row) and/or a text. With a
    text and no reference, any method works: a composed method is replaced by text retrieval
    (``trace.search.mode``/``note`` say so)."""
    path, upload, shown = None, None, ""
    if image is not None and image.filename:
        if reference_row is not None:
            raise HTTPException(400, "give either an uploaded image or reference_row, not both")
        path, upload = await store_upload(st, image)
        shown = image.filename
    elif reference_row is not None:
        path = lookup(st, reference_row)
        shown = st.gallery.ids[reference_row]
    if dup_threshold is not None and 0 < dup_threshold < 0.5:
        raise HTTPException(422, f"dup_threshold: {dup_threshold} is not 0 (off) or a cosine between 0.5 and 1")
    if path is None and not text.strip():
        raise HTTPException(400, "a search needs a reference image, a text, or both")
    return await asyncio.to_thread(
        run_search,
        st,
        st.searcher,
        image_path=path,
        text=text,
        k=k,
        shown=shown,
        upload=upload,
        ref_row=reference_row,
        dup_threshold=-1.0 if dup_threshold is None else dup_threshold,
    )


@router.post(
    "/api/ask",
    response_model=M.SearchResponse,
    summary="a question about the photo history (ImageSeeker)",
    responses={400: {"model": M.Error}, 404: {"model": M.Error}, 422: {"model": M.Error}},
)
async def ask_question(
    st: State,
    question: Annotated[str, Form(min_length=1, max_length=2000, description="e.g. 'photos from Paris in 2019'")],
):
    """The answer set of an ImageSeeker agent over the gallery's photos, with its steps in the trace."""
    if not question.strip():
        raise HTTPException(400, "the question is empty")
    s = st.ask_searcher
    if s is None:
        if st.ask is None:
            raise HTTPException(
                404,
                "this server answers no history questions (its method is not a set-answering "
                "one, and question answering was turned off)",
            )
        if not st.ask_lock:
            st.ask_lock.append(asyncio.Lock())
        async with st.ask_lock[0]:
            if st.ask_searcher is None:
                try:
                    st.ask_searcher = await asyncio.to_thread(st.ask)
                except AgentcirError as e:
                    raise HTTPException(400, f"cannot answer questions on this gallery: {plain(str(e))}") from None
            s = st.ask_searcher
    return await asyncio.to_thread(
        run_search, st, s, image_path=None, text=question, k=1000, shown="", upload=None, ref_row=None
    )
