"""``agentcir serve``: a search web page and JSON API over an indexed gallery (extra ``serve``).

Routes:
    GET  /                 the page: upload a reference image and/or type a text
    POST /api/search       multipart form: ``image`` (file, optional), ``text`` (optional), ``k``
                           -> ``{"hits": [{rank, id, score, row}], "trace": {...}}``
    GET  /api/info         the gallery and recipe in use
    GET  /image/{row}      a gallery image (for the result thumbnails)

Uploaded images are stored under ``uploads`` by content hash (so the call cache recognises a
photo uploaded twice). Bad input is a 400 with a one-line ``detail``.
"""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import hashlib
import html
from pathlib import Path

from .framework.errors import AgentcirError, require
from .framework.search import Searcher

MAX_UPLOAD = 20 * 1024 * 1024

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>agentcir search</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}
form{display:flex;gap:.6em;flex-wrap:wrap;align-items:center;margin-bottom:1em}
input[type=text]{flex:1;min-width:20em;padding:.4em}
#hits{display:grid;grid-template-columns:repeat(auto-fill,minmax(140px,1fr));gap:.8em}
figure{margin:0;font-size:.8em;word-break:break-all} img{width:100%;border-radius:4px}
#err{color:#b00} #trace{font-size:.85em;color:#444;white-space:pre-wrap}
</style></head><body>
<h1>agentcir</h1>
<p>Gallery <b>{gallery}</b> ({size} images) &middot; method <b>{method}</b> &middot; encoder <b>{encoder}</b></p>
<form id="f"><input type="file" name="image" accept="image/*">
<input type="text" name="text" placeholder="modification or query text, e.g. 'make it red'">
<input type="number" name="k" value="20" min="1" max="200" style="width:5em"><button>search</button></form>
<div id="err"></div><div id="trace"></div><div id="hits"></div>
<script>
document.getElementById('f').onsubmit = async (e) => {
  e.preventDefault();
  const err = document.getElementById('err'), hits = document.getElementById('hits');
  err.textContent = ''; hits.innerHTML = 'searching...';
  const r = await fetch('/api/search', {method: 'POST', body: new FormData(e.target)});
  const data = await r.json();
  if (!r.ok) { err.textContent = data.detail; hits.innerHTML = ''; return; }
  document.getElementById('trace').textContent = Object.entries(data.trace).map(
      ([stage, rec]) => stage + ': ' + JSON.stringify(rec)).join('\\n').slice(0, 2000);
  hits.innerHTML = data.hits.map(h => `<figure><img src="/image/${h.row}" loading="lazy">
      <figcaption>${h.rank}. ${h.id} (${h.score.toFixed(3)})</figcaption></figure>`).join('');
};
</script></body></html>"""


def create_app(searcher: Searcher, *, uploads: str | Path | None = None):
    """The FastAPI app serving ``searcher``."""
    fastapi = require("fastapi", "serve", feature="agentcir serve")
    require("multipart", "serve", feature="agentcir serve (file uploads)")
    from fastapi import File, Form, HTTPException, UploadFile
    from fastapi.responses import FileResponse, HTMLResponse

    up_dir = Path(uploads or Path(searcher.recipe["run"]["root"]) / "_uploads")
    g = searcher.gallery
    app = fastapi.FastAPI(title="agentcir", description="composed / text image search over an indexed gallery")
    page = (PAGE.replace("{gallery}", html.escape(str(g.root))).replace("{size}", str(len(g)))
            .replace("{method}", html.escape(searcher.recipe["method"]["name"]))
            .replace("{encoder}", html.escape(searcher.recipe["encoder"]["name"])))

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return page

    @app.get("/api/info")
    def info() -> dict:
        return {"gallery": str(g.root), "size": len(g), "dim": g.dim, "method": searcher.recipe["method"],
                "encoder": searcher.recipe["encoder"]["name"]}

    @app.get("/image/{row}")
    def image(row: int):
        if not 0 <= row < len(g):
            raise HTTPException(404, f"no gallery row {row} (the gallery has {len(g)} items)")
        return FileResponse(g.paths[row])

    @app.post("/api/search")
    def search(image: UploadFile | None = File(None), text: str = Form(""), k: int = Form(20)) -> dict:
        path = None
        if image is not None and image.filename:
            data = image.file.read(MAX_UPLOAD + 1)
            if len(data) > MAX_UPLOAD:
                raise HTTPException(400, f"image '{image.filename}' is larger than {MAX_UPLOAD // 2**20} MB")
            if data:
                up_dir.mkdir(parents=True, exist_ok=True)
                path = up_dir / (hashlib.sha256(data).hexdigest()[:32] + Path(image.filename).suffix.lower()[:8])
                if not path.exists():
                    path.write_bytes(data)
        try:
            result = searcher.search(image=path, text=text, k=min(max(k, 1), 1000))
        except AgentcirError as e:
            raise HTTPException(400, str(e).replace(str(path), str(image.filename)) if path else str(e)) from None
        return {"hits": [{"rank": h.rank, "id": h.id, "score": h.score, "row": h.row} for h in result.hits],
                "trace": result.trace}

    return app
