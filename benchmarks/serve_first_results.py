"""Time to first results of ``agentcir serve`` on a warm gallery, offline (issue 17).

    python benchmarks/serve_first_results.py --images ../shared/data/fashion-products/images --n 5000

1. builds (once) a gallery of the first ``n`` photos with the catalog encoder, and prepares it for
   the default method (OCTOPUS with the offline components: the gallery captions, once);
2. in a fresh process (the gallery warm on disk, the call cache empty for the queries): builds the
   app and warms it up as ``agentcir serve`` does at start (``--no-warm-up``: not), then times each search request through the ASGI app from request to JSON reply: the first
   composed search (upload + text), the next ones, a text-only search, a refine-by-click search;
3. the page weight: the bytes of the page and its files, and of the 20 thumbnails of a results grid.

``--phase start`` (after a build): the time from the server's start to the first result of a
search sent at once, while the warm-up runs in the background (the search goes first and waits
only for the models it needs), the warm-up's per-model state then, its steps, and the background
thumbnails.

Prints one JSON line per figure; the medians are over ``--repeat`` distinct queries.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(args) -> None:
    from agentcir.cli import main
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher

    photos = Path(args.out) / "photos"
    if not photos.is_dir():
        photos.mkdir(parents=True)
        for p in sorted(Path(args.images).glob("*.jpg"))[: args.n]:  # copies: the app serves no file outside the folder
            shutil.copyfile(p, photos / p.name)
    gdir = Path(args.out) / "gallery"
    if not (gdir / "gallery.json").is_file():
        t0 = time.perf_counter()
        main(["index", str(photos), "--out", str(gdir), "--no-metadata", "-q", f"run.root={args.out}/runs"])
        print(json.dumps({"figure": "index_s", "value": round(time.perf_counter() - t0, 1), "n": args.n}), flush=True)
    t0 = time.perf_counter()
    s = Searcher(compose([f"run.root={args.out}/runs", "run.progress=false"]), gdir)
    was = s.prepared
    s.prepare()
    if not was:
        print(json.dumps({"figure": "prepare_captions_s", "value": round(time.perf_counter() - t0, 1)}), flush=True)


def serve(args) -> None:
    from fastapi.testclient import TestClient

    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher
    from agentcir.serve import ServeConfig, create_app

    gdir = Path(args.out) / "gallery"
    cache = Path(args.out) / f"cache-{os.getpid()}.sqlite"  # a fresh call cache: no query is a cache hit
    t0 = time.perf_counter()
    s = Searcher(compose([f"run.root={args.out}/runs", "run.progress=false", f"run.cache={cache}"]), gdir)
    c = TestClient(
        create_app(
            s, uploads=Path(args.out) / "up", thumbs=Path(args.out) / "thumbs", config=ServeConfig(warm_up=False)
        ),
        base_url="http://127.0.0.1",
    )
    startup = time.perf_counter() - t0
    warm = s.warm_up() if args.warm_up else 0.0  # what `agentcir serve` does in the background at start
    photos = sorted((Path(args.out) / "photos").iterdir())
    texts = [
        "in red",
        "in blue",
        "in black",
        "for women",
        "in white",
        "in green",
        "striped",
        "in yellow",
        "for men",
        "in grey",
        "in pink",
    ]

    def timed(**kw):
        t = time.perf_counter()
        r = c.post("/api/search", **kw)
        assert r.status_code == 200, r.text
        return time.perf_counter() - t, r.json()

    first, body = timed(
        files={"image": ("q.jpg", photos[7].read_bytes(), "image/jpeg")}, data={"text": texts[0], "k": "20"}
    )
    composed = [
        timed(
            files={"image": ("q.jpg", photos[100 + 37 * i].read_bytes(), "image/jpeg")},
            data={"text": texts[1 + i % 10], "k": "20"},
        )[0]
        for i in range(args.repeat)
    ]
    text_only = [timed(data={"text": f"a {t.split()[-1]} shirt", "k": "20"})[0] for t in texts[: args.repeat]]
    refine = [
        timed(data={"reference_row": str(h["row"]), "text": texts[(i + 3) % 10], "k": "20"})[0]
        for i, h in enumerate(body["hits"][: args.repeat])
    ]
    page = sum(len(c.get(u).content) for u in ("/", "/static/app.js", "/static/app.css"))
    thumbs_cold = time.perf_counter()
    thumbs = sum(len(c.get(f"/thumb/{h['row']}?size=256").content) for h in body["hits"])
    thumbs_cold = time.perf_counter() - thumbs_cold
    out = {
        "startup_s": startup,
        "warm_up_s": warm,
        "first_search_s": first,
        "composed_median_s": statistics.median(composed),
        "text_only_median_s": statistics.median(text_only),
        "refine_median_s": statistics.median(refine),
        "page_bytes": page,
        "grid_thumbnails_bytes": thumbs,
        "grid_thumbnails_cold_s": thumbs_cold,
        "gallery": len(s.gallery),
        "method": s.method_name,
    }
    for k, v in out.items():
        print(json.dumps({"figure": k, "value": round(v, 3) if isinstance(v, float) else v}), flush=True)
    cache.unlink(missing_ok=True)


def at_start(args) -> None:
    """Time to the first results after the server starts, as `agentcir serve` starts: the app made,
    its warm-up running in the background, and a search sent at once (a composed one, then a text
    one, as two fresh servers); the warm-up's per-model state at that moment and its steps."""
    from fastapi.testclient import TestClient

    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher
    from agentcir.serve import ServeConfig, create_app

    gdir = Path(args.out) / "gallery"
    photos = sorted((Path(args.out) / "photos").iterdir())
    cache = Path(args.out) / f"cache-{os.getpid()}.sqlite"  # a fresh call cache: no query is a cache hit
    t0 = time.perf_counter()
    s = Searcher(compose([f"run.root={args.out}/runs", "run.progress=false", f"run.cache={cache}"]), gdir)
    c = TestClient(
        create_app(
            s,
            uploads=Path(args.out) / "up",
            thumbs=Path(args.out) / f"thumbs-{os.getpid()}",
            config=ServeConfig(warm_up=args.warm_up),
        ),
        base_url="http://127.0.0.1",
    )
    made = time.perf_counter() - t0
    if args.first == "composed":
        r = c.post(
            "/api/search",
            files={"image": ("q.jpg", photos[7].read_bytes(), "image/jpeg")},
            data={"text": "in red", "k": "20"},
        )
    else:
        r = c.post("/api/search", data={"text": "a red shirt", "k": "20"})
    first = time.perf_counter() - t0
    assert r.status_code == 200, r.text
    at_first = c.get("/api/status").json()["warm_up"]
    deadline = time.time() + 1800
    while c.get("/api/status").json()["warm_up"]["state"] == "running" and time.time() < deadline:
        time.sleep(0.2)
    w = c.get("/api/status").json()["warm_up"]
    out = {
        "app_made_s": made,
        f"first_{args.first}_result_after_start_s": first,
        "warm_up_state_at_first_result": at_first["state"],
        "ready_for_at_first_result": at_first["ready_for"],
        "warm_up_s": w["elapsed_s"],
        "warm_up_steps": {x["name"]: x["seconds"] for x in w["steps"]},
        "gallery": len(s.gallery),
        "method": s.method_name,
    }
    for k, v in out.items():
        print(json.dumps({"figure": k, "value": round(v, 3) if isinstance(v, float) else v}), flush=True)
    while c.get("/api/status").json()["thumbnails"]["state"] in ("waiting", "running") and time.time() < deadline:
        time.sleep(0.5)
    t = c.get("/api/status").json()["thumbnails"]
    print(json.dumps({"figure": "background_thumbnails", "value": t}), flush=True)
    app_state = c.app.state.serve
    app_state.close()
    shutil.rmtree(Path(args.out) / f"thumbs-{os.getpid()}", ignore_errors=True)
    cache.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", default=str(ROOT.parent / "shared" / "data" / "fashion-products" / "images"))
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--out", default=str(ROOT / "runs" / "_bench" / "serve5k"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--phase",
        choices=["all", "build", "serve", "start"],
        default="all",
        help="start: time the first result of a search sent as the server starts (--first)",
    )
    ap.add_argument("--first", choices=["composed", "text"], default="composed", help="--phase start: the first search")
    ap.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="time the first search of a server started without the warm-up",
    )
    args = ap.parse_args()
    if args.phase in ("all", "build"):
        build(args)
    if args.phase == "all":  # a fresh process: nothing of the build is in memory
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--phase",
                "serve",
                "--out",
                args.out,
                "--repeat",
                str(args.repeat),
                *([] if args.warm_up else ["--no-warm-up"]),
            ],
            check=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
        )
    elif args.phase == "serve":
        serve(args)
    elif args.phase == "start":
        at_start(args)


if __name__ == "__main__":
    main()
