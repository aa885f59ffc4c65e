"""The FastAPI app of ``agentcir serve`` (see the package docstring for routes and limits)."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import functools
import hashlib
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

from ..framework.errors import AgentcirError, InputError, require
from ..framework.search import Searcher
from .files import THUMB_SIZES, UPLOAD_NAME, BoundedDir, Decoder, GalleryFiles, TooLarge

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
TOKEN_ENV = "AGENTCIR_TOKEN"
COOKIE = "agentcir_token"


@dataclass
class ServeConfig:
    """Limits and options of the web app.

    Attributes:
        token: a bearer token every route requires (``Authorization: Bearer``, or the cookie
            the page sets after being opened once as ``/?token=...``); empty = no token.
        max_upload_mb: an upload larger than this is refused while it streams in (HTTP 413).
        max_pixels: an image (upload or gallery file) larger than this is refused before decoding.
        decode_concurrency: decodes (upload checks, thumbnails) running at once.
        uploads_mb, uploads_files: the stored uploads are kept under both (oldest evicted).
        thumbs_mb: the thumbnail cache is kept under this.
        prepare: make the gallery captions in the background at start (shown on the page).
        warm_up: then load the models and compile the kernels a search uses (one throw-away
            search), so that the first person's search does not wait for them.
    """

    token: str = ""
    max_upload_mb: float = 20.0
    max_pixels: int = 50_000_000
    decode_concurrency: int = 2
    uploads_mb: float = 200.0
    uploads_files: int = 500
    thumbs_mb: float = 256.0
    prepare: bool = True
    warm_up: bool = True


class Progress:
    """What the running search (or the gallery preparation) is doing, for ``/api/progress``."""

    def __init__(self):
        self._lock = threading.Lock()
        self.state: dict[str, Any] = {"busy": False, "stage": "", "done": 0, "total": 0, "stages": [], "elapsed_s": 0.0,
                                      "preparing": False, "prepared": True, "error": ""}
        self._t0 = 0.0

    def begin(self, preparing: bool = False) -> None:
        with self._lock:
            self._t0 = time.perf_counter()
            self.state.update(busy=True, stage="", done=0, total=0, stages=[], elapsed_s=0.0, error="")
            if preparing:
                self.state.update(preparing=True, prepared=False)

    def hook(self, stage: str, done: int, total: int) -> None:
        with self._lock:
            if not self.state["stages"] or self.state["stages"][-1] != stage:
                self.state["stages"].append(stage)
            self.state.update(stage=stage, done=done, total=total)

    def end(self, error: str = "", prepared: bool | None = None) -> None:
        with self._lock:
            self.state.update(busy=False, elapsed_s=round(time.perf_counter() - self._t0, 3), error=error)
            if prepared is not None:
                self.state.update(preparing=False, prepared=prepared)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            out = dict(self.state, stages=list(self.state["stages"]))
            if out["busy"]:
                out["elapsed_s"] = round(time.perf_counter() - self._t0, 3)
            return out


def create_app(searcher: Searcher, *, uploads: str | Path | None = None, thumbs: str | Path | None = None,
               config: ServeConfig | None = None, ask: Optional[Callable[[], Searcher]] = None):
    """The FastAPI app serving ``searcher``.

    Args:
        searcher: the recipe's method over the gallery (``/api/search``).
        uploads, thumbs: folders of stored uploads and cached thumbnails (default under ``run.root``).
        config: limits and the token.
        ask: makes the searcher answering history questions (``/api/ask``), on first use; default:
            ``searcher`` when its method answers sets (ImageSeeker), else none (the route says so).
    """
    fastapi = require("fastapi", "serve", feature="agentcir serve")
    require("multipart", "serve", feature="agentcir serve (file uploads)")
    from fastapi import File, Form, HTTPException, Query, UploadFile
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import FileResponse, JSONResponse, Response
    from fastapi.staticfiles import StaticFiles

    from . import models as M

    cfg = config or ServeConfig()
    token = cfg.token or os.environ.get(TOKEN_ENV, "")
    g = searcher.gallery
    run_root = Path(searcher.recipe["run"]["root"])
    upload_store = BoundedDir(uploads or run_root / "_uploads", max_bytes=int(cfg.uploads_mb * 2**20), max_files=cfg.uploads_files)
    gid = hashlib.sha256(str(g.root.resolve()).encode()).hexdigest()[:12]
    thumb_store = BoundedDir(Path(thumbs or run_root / "_thumbs") / gid, max_bytes=int(cfg.thumbs_mb * 2**20),
                             max_files=10**9)
    files = GalleryFiles(g)
    decoder = Decoder(max_pixels=cfg.max_pixels, concurrency=cfg.decode_concurrency)
    max_upload = int(cfg.max_upload_mb * 2**20)
    progress = Progress()
    ask_state: dict[str, Any] = {"searcher": searcher if getattr(searcher.method, "answers_set", False) else None}
    ask_lock: list = []  # an asyncio.Lock, made in the event loop
    #: generated visual proxies (files outside the gallery) the traces point at, by key
    proxies: dict[str, str] = {}

    app = fastapi.FastAPI(
        title="agentcir", version="1", docs_url=None, redoc_url=None,
        description="Composed (reference image + text), text and history-question search over an indexed gallery. "
                    "Search responses have one shape, the same as `agentcir search --json`.",
        responses={401: {"model": M.Error, "description": "missing or wrong bearer token"}})

    # -- auth and body limits (pure ASGI: before anything reads the body) ------------------------
    class Guard:
        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                return await self.inner(scope, receive, send)
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if token and not _authorized(scope, headers):
                return await _plain(send, 401, "missing or wrong bearer token (Authorization: Bearer TOKEN, "
                                               "or open the page once as /?token=TOKEN)", {"www-authenticate": "Bearer"})
            length = headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > max_upload + 65536):
                return await _plain(send, 413, f"request body larger than the upload limit of {cfg.max_upload_mb:g} MB")
            seen = [0]
            started = [False]
            refused = [False]

            async def limited():
                if refused[0]:
                    return {"type": "http.disconnect"}
                msg = await receive()
                if msg["type"] == "http.request":
                    seen[0] += len(msg.get("body", b""))
                    if seen[0] > max_upload + 65536:  # answer 413 now; the app sees the client gone
                        refused[0] = True
                        if not started[0]:
                            started[0] = True
                            await _plain(send, 413, f"upload larger than the limit of {cfg.max_upload_mb:g} MB")
                        return {"type": "http.disconnect"}
                return msg

            async def tracking(msg):
                if refused[0]:
                    return  # the 413 is sent: whatever the app answers to the disconnect is dropped
                if msg["type"] == "http.response.start":
                    started[0] = True
                    if token and _query_token(scope) and not _cookie_token(headers):  # the page opened with ?token=
                        msg = dict(msg, headers=[*msg.get("headers", []), (b"set-cookie", f"{COOKIE}={token}; HttpOnly; "
                                                                                      f"SameSite=Strict; Path=/".encode())])
                await send(msg)

            await self.inner(scope, limited, tracking)

    def _query_token(scope) -> str:
        from urllib.parse import parse_qs

        return (parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token") or [""])[0]

    def _cookie_token(headers) -> str:
        for part in headers.get("cookie", "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == COOKIE:
                return v
        return ""

    def _authorized(scope, headers) -> bool:
        auth = headers.get("authorization", "")
        given = [auth[7:].strip() if auth.lower().startswith("bearer ") else "", _cookie_token(headers), _query_token(scope)]
        return any(t and secrets.compare_digest(t.encode(), token.encode()) for t in given)

    async def _plain(send, status: int, detail: str, extra: dict | None = None) -> None:
        import json

        body = json.dumps({"detail": detail}).encode()
        hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        hdrs += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": hdrs})
        await send({"type": "http.response.body", "body": body})

    app.add_middleware(Guard)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc):  # one readable line, like every other 4xx here
        parts = []
        for e in exc.errors()[:3]:
            where = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
            parts.append(f"{where or 'request'}: {e.get('msg')}")
        return JSONResponse({"detail": "; ".join(parts)}, status_code=422)

    # -- the page and its files ----------------------------------------------------------------
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(STATIC / "index.html", headers=_PAGE_HEADERS)

    @app.get("/docs", include_in_schema=False)
    def docs():
        from fastapi.openapi.docs import get_swagger_ui_html

        return get_swagger_ui_html(openapi_url="/openapi.json", title="agentcir API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon.png")

    try:  # the Swagger UI 5 files (OpenAPI 3.1), bundled by fastapi-offline: /docs works offline
        import fastapi_offline

        app.mount("/docs-assets", StaticFiles(directory=Path(fastapi_offline.__file__).with_name("static")), name="docs-assets")
    except ImportError:  # pragma: no cover - part of the serve extra
        log.warning("fastapi-offline is not installed: /docs has no Swagger UI files (pip install 'agentcir[serve]')")

    # -- API -----------------------------------------------------------------------------------
    @functools.cache
    def _with_metadata() -> int:  # the gallery's items do not change while it is served: counted once
        return sum(1 for it in g.items if it.meta.get("taken_time") or it.meta.get("city"))

    def _info() -> "M.Info":
        m = searcher.method
        asking = ask_state["searcher"] or (None if ask is None else True)
        return M.Info(gallery=str(g.root), size=len(g), dim=g.dim, method=searcher.method_name,
                      encoder=searcher.recipe["encoder"]["name"], needs_reference=bool(getattr(m, "needs_reference", True)),
                      answers_set=bool(getattr(m, "answers_set", False)), questions=bool(asking),
                      with_metadata=_with_metadata(),
                      max_upload_mb=cfg.max_upload_mb, max_pixels=cfg.max_pixels, thumb_sizes=list(THUMB_SIZES),
                      auth=bool(token))

    @app.get("/api/info", response_model=M.Info, summary="the gallery, method and limits in use")
    def info():
        return _info()

    @app.get("/api/progress", response_model=M.ProgressState, summary="what the running search is doing")
    def get_progress():
        return progress.snapshot()

    def _lookup(row: int) -> Path:
        try:
            return files.path(row)
        except LookupError as e:
            raise HTTPException(404, str(e)) from None

    @app.get("/image/{row}", summary="a gallery image, as stored", response_class=Response,
             responses={200: {"content": {"image/*": {}}}, 404: {"model": M.Error}})
    def image(row: int):
        return FileResponse(_lookup(row))

    def _thumb(key: str, src: Path, size: int):
        if size not in THUMB_SIZES:
            raise HTTPException(422, f"size: must be one of {', '.join(map(str, THUMB_SIZES))}")
        hit = thumb_store.get(key)
        if hit is None:
            try:
                hit = thumb_store.put(key, decoder.thumbnail(src, size))
            except InputError as e:
                raise HTTPException(415, str(e)) from None
        return FileResponse(hit, media_type="image/jpeg", headers={"cache-control": "private, max-age=3600"})

    _thumb_doc = dict(response_class=Response, responses={200: {"content": {"image/jpeg": {}}}, 404: {"model": M.Error},
                                                          415: {"model": M.Error}, 422: {"model": M.Error}})

    @app.get("/thumb/{row}", summary="a gallery image as a JPEG thumbnail (any gallery format)", **_thumb_doc)
    def thumb(row: int, size: Annotated[int, Query(description=f"edge length, one of {THUMB_SIZES}")] = 256):
        p = _lookup(row)
        return _thumb(files.thumb_key(p, size), p, size)

    @app.get("/upload/{name}/thumb", summary="a stored upload as a JPEG thumbnail", **_thumb_doc)
    def upload_thumb(name: str, size: int = 256):
        p = upload_store.get(name) if UPLOAD_NAME.match(name) else None
        if p is None:
            raise HTTPException(404, f"no stored upload '{name}'")
        return _thumb(f"u-{name}-{size}.jpg", p, size)

    @app.get("/proxy/{key}/thumb", summary="a generated visual proxy as a JPEG thumbnail", **_thumb_doc)
    def proxy_thumb(key: str, size: int = 256):
        p = proxies.get(key)
        if p is None or not Path(p).is_file():
            raise HTTPException(404, f"no visual proxy '{key}'")
        return _thumb(f"p-{key}-{size}.jpg", Path(p), size)

    async def _store_upload(image: UploadFile) -> tuple[Path, str]:
        data = bytearray()
        while True:  # streamed: refused as soon as it passes the limit
            chunk = await image.read(1 << 20)
            if not chunk:
                break
            data += chunk
            if len(data) > max_upload:
                raise HTTPException(413, f"image '{image.filename}' is larger than {cfg.max_upload_mb:g} MB")
        if not data:
            raise HTTPException(400, f"image '{image.filename}' is empty")
        import asyncio

        data = bytes(data)  # one copy, checked, hashed and stored
        try:  # decoded (under the pixel limit, bounded concurrency) before anything is stored
            suffix = await asyncio.to_thread(decoder.check_upload, data, image.filename or "upload")
        except TooLarge as e:
            raise HTTPException(413, str(e)) from None
        except InputError as e:
            raise HTTPException(400, str(e)) from None
        name = hashlib.sha256(data).hexdigest()[:32] + "." + suffix
        return upload_store.get(name) or upload_store.put(name, data), name

    def _run(s: Searcher, *, image_path, text: str, k: int, shown: str, upload: str | None, ref_row: int | None):
        progress.begin()
        try:
            result = s.search(image=image_path, text=text, k=k, progress=progress.hook)
        except AgentcirError as e:
            msg = str(e).replace(str(image_path), shown) if image_path else str(e)
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
        vp = (out["trace"].get("create") or {}).get("visual_proxy")
        if vp:
            row = s.row_of(vp)
            if row >= 0:
                extra["visual_proxy"] = {"row": row, "url": f"/thumb/{row}"}
            else:
                key = hashlib.sha256(str(vp).encode()).hexdigest()[:16]
                proxies[key] = str(vp)
                extra["visual_proxy"] = {"row": None, "url": f"/proxy/{key}/thumb"}
        return out

    @app.post("/api/search", response_model=M.SearchResponse, summary="composed, image or text search",
              responses={400: {"model": M.Error}, 404: {"model": M.Error}, 413: {"model": M.Error}, 422: {"model": M.Error}})
    async def search(
        image: Annotated[Optional[UploadFile], File(description="reference image (any format the gallery accepts)")] = None,
        text: Annotated[str, Form(max_length=2000, description="modification text, or a text query")] = "",
        k: Annotated[int, Form(ge=1, le=1000, description="results")] = 20,
        reference_row: Annotated[Optional[int], Form(ge=0, description="a gallery row as the reference (refine by click)")] = None,
    ):
        """Rank the gallery for a reference (an upload, or a gallery row) and/or a text. With a
        text and no reference, any method works: a composed method is replaced by text retrieval
        (``trace.search.mode``/``note`` say so)."""
        import asyncio

        path, upload, shown = None, None, ""
        if image is not None and image.filename:
            if reference_row is not None:
                raise HTTPException(400, "give either an uploaded image or reference_row, not both")
            path, upload = await _store_upload(image)
            shown = image.filename
        elif reference_row is not None:
            path = _lookup(reference_row)
            shown = g.ids[reference_row]
        if path is None and not text.strip():
            raise HTTPException(400, "a search needs a reference image, a text, or both")
        return await asyncio.to_thread(_run, searcher, image_path=path, text=text, k=k, shown=shown, upload=upload,
                                       ref_row=reference_row)

    @app.post("/api/ask", response_model=M.SearchResponse, summary="a question about the photo history (ImageSeeker)",
              responses={400: {"model": M.Error}, 404: {"model": M.Error}, 422: {"model": M.Error}})
    async def ask_question(
        question: Annotated[str, Form(min_length=1, max_length=2000, description="e.g. 'photos from Paris in 2019'")],
    ):
        """The answer set of an ImageSeeker agent over the gallery's photos, with its steps in the trace."""
        import asyncio

        if not question.strip():
            raise HTTPException(400, "the question is empty")
        s = ask_state["searcher"]
        if s is None:
            if ask is None:
                raise HTTPException(404, "this server answers no history questions (its method is not a set-answering "
                                         "one, and question answering was turned off)")
            if not ask_lock:
                ask_lock.append(asyncio.Lock())
            async with ask_lock[0]:
                if ask_state["searcher"] is None:
                    try:
                        ask_state["searcher"] = await asyncio.to_thread(ask)
                    except AgentcirError as e:
                        raise HTTPException(400, f"cannot answer questions on this gallery: {e}") from None
                s = ask_state["searcher"]
        return await asyncio.to_thread(_run, s, image_path=None, text=question, k=1000, shown="", upload=None, ref_row=None)

    if token:  # the spec says so: Swagger UI's "Authorize" sends the header
        def openapi_with_bearer():
            if app.openapi_schema is None:
                from fastapi.openapi.utils import get_openapi

                spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
                spec.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {"type": "http", "scheme": "bearer"}
                spec["security"] = [{"bearer": []}]
                app.openapi_schema = spec
            return app.openapi_schema

        app.openapi = openapi_with_bearer

    if (cfg.prepare and not searcher.prepared) or cfg.warm_up:
        def prep():
            progress.begin(preparing=True)
            try:
                if cfg.prepare:
                    searcher.prepare(progress.hook)
                if cfg.warm_up:
                    took = searcher.warm_up(progress.hook)
                    log.info("warmed up in %.1f s (models loaded, kernels compiled)", took)
                progress.end(prepared=True)
            except Exception as e:  # shown on the page; a search retries it
                log.warning("gallery preparation failed: %s", e)
                progress.end(error=f"gallery preparation failed: {e}", prepared=False)

        threading.Thread(target=prep, name="agentcir-prepare", daemon=True).start()

    return app


#: the page runs only its own files: no inline scripts, no other origins
_PAGE_HEADERS = {"content-security-policy": "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; "
                                            "script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
                 "x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}
