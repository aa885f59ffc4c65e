"""The FastAPI app of ``agentcir serve`` (see the package docstring for routes and limits).

The routes live in :mod:`agentcir.serve.routes` (one module per concern), the state they
share in :mod:`agentcir.serve.state`, the token and body limit in :mod:`agentcir.serve.guard`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..framework.errors import require
from ..framework.search import Searcher
from .state import COOKIE, TOKEN_ENV, Progress, ServeConfig, ServeState

__all__ = ["COOKIE", "TOKEN_ENV", "Progress", "ServeConfig", "create_app"]


def create_app(
    searcher: Searcher,
    *,
    uploads: str | Path | None = None,
    thumbs: str | Path | None = None,
    config: ServeConfig | None = None,
    ask: Optional[Callable[[], Searcher]] = None,
):
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
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    from . import models as M
    from .guard import Guard
    from .routes import images, jobs, pages, results, search, status
    from .routes import uploads as upload_routes

    st = ServeState(searcher, uploads=uploads, thumbs=thumbs, config=config, ask=ask)
    app = fastapi.FastAPI(
        title="agentcir",
        version="1",
        docs_url=None,
        redoc_url=None,
        description="Composed (reference image + text), text and history-question search over an indexed gallery. "
        "Search responses have one shape, the same as `agentcir search --json`.",
        responses={401: {"model": M.Error, "description": "missing or wrong bearer token"}},
    )
    app.state.serve = st
    app.add_middleware(Guard, state=st)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc):  # one readable line, like every other 4xx here
        parts = []
        for e in exc.errors()[:3]:
            where = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
            parts.append(f"{where or 'request'}: {e.get('msg')}")
        return JSONResponse({"detail": "; ".join(parts)}, status_code=422)

    pages.mount(app)

    @app.exception_handler(Exception)
    async def _unexpected(request, exc):  # in words, never a traceback (the log has it)
        import logging

        logging.getLogger(__name__).exception("unexpected error answering %s", request.url.path)
        return JSONResponse(
            {"detail": "Something went wrong on the server while answering this request; its log has the details."},
            status_code=500,
        )

    for module in (pages, search, jobs, images, results, upload_routes, status):
        app.include_router(module.router)

    if st.token:  # the spec says so: Swagger UI's "Authorize" sends the header

        def openapi_with_bearer():
            if app.openapi_schema is None:
                from fastapi.openapi.utils import get_openapi

                spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
                spec.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                    "type": "http",
                    "scheme": "bearer",
                }
                spec["security"] = [{"bearer": []}]
                app.openapi_schema = spec
            return app.openapi_schema

        app.openapi = openapi_with_bearer

    jobs.start_preparation(st)
    return app
