"""``agentcir serve``: a single-page web app and typed JSON API over an indexed gallery (extra ``serve``).

The page (``static/index.html``, ``app.js``, ``app.css``: plain files, no build step, nothing
from other origins) does composed search (upload, drop or paste a reference, type a text,
click a result to refine from it, with a breadcrumb), text search with any method, history
questions (ImageSeeker: answer set, steps as a timeline, photo metadata) and readable traces.

Routes (OpenAPI at ``/openapi.json``, Swagger UI at ``/docs`` from local files):
    GET  /                     the page              GET  /api/info       gallery, method, limits
    POST /api/search           multipart ``image`` (optional), ``text``, ``k``, ``reference_row``
    POST /api/ask              form ``question``: a history question (ImageSeeker)
    GET  /api/progress         the running search's stage and counts (the page polls it)
    GET  /image/{row}          a gallery file      GET /thumb/{row}?size=   its JPEG thumbnail
    GET  /upload/{name}/thumb  a stored upload     GET /proxy/{key}/thumb   a generated visual proxy
    GET  /view/{row}           the full photo as a browser shows it (``/image/{row}?download=true``: the file)
    POST /api/groups           near-duplicate groups of a result set (:mod:`agentcir.serve.groups`)
    POST /api/export           a result set as CSV, JSON or a zip of the photos (:mod:`agentcir.serve.export`)
    POST /api/album            copy a result set into an album folder (``--album-root``)

Both search routes answer :class:`~agentcir.serve.models.SearchResponse`, the shape of
``agentcir search --json``. Limits and the token: :class:`~agentcir.serve.state.ServeConfig`;
files: :mod:`agentcir.serve.files`; routes by concern: :mod:`agentcir.serve.routes`. Bad input is a 4xx with a one-line ``detail``.
"""

from .app import ServeConfig, create_app

__all__ = ["ServeConfig", "create_app"]
