"""The page, its static files and the offline API docs (``/``, ``/static``, ``/docs``)."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import logging
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parents[1] / "static"

#: the page runs only its own files: no inline scripts, no other origins
PAGE_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; "
    "script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
#: Swagger UI: its own files only; its widgets set inline styles
DOCS_HEADERS = {
    **PAGE_HEADERS,
    "content-security-policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; script-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
}

router = APIRouter()


@router.get("/", include_in_schema=False)
def index():
    return FileResponse(STATIC / "index.html", headers=PAGE_HEADERS)


@router.get("/docs", include_in_schema=False)
def docs():  # Swagger UI from local files, started by static/docs.js (no inline script)
    return FileResponse(STATIC / "docs.html", headers=DOCS_HEADERS)


def mount(app) -> None:
    """The page's files at ``/static`` and Swagger UI's at ``/docs-assets``."""
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    try:  # the Swagger UI 5 files (OpenAPI 3.1), bundled by fastapi-offline: /docs works offline
        import fastapi_offline

        app.mount(
            "/docs-assets",
            StaticFiles(directory=Path(fastapi_offline.__file__).with_name("static")),
            name="docs-assets",
        )
    except ImportError:  # pragma: no cover - part of the serve extra
        log.warning("fastapi-offline is not installed: /docs has no Swagger UI files (pip install 'agentcir[serve]')")
