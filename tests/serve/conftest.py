"""Fixtures of the web app's tests: a small real gallery (demo product photos with the catalog
encoder, a HEIC and a TIFF, a file named like an HTML tag, photos with EXIF written here), the
app over it with the default recipe (OCTOPUS, offline components)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="agentcir[serve] is not installed")
pytest.importorskip("multipart", reason="agentcir[serve] is not installed")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "agentcir" / "data" / "demo" / "images"
XSS_NAME = "<img src=x onerror=alert(1)>"
#: the photos with EXIF: (album, name, taken, (lat, lon), make, model)
EXIF_PHOTOS = [
    ("Trip 2019", "rome1", datetime(2019, 5, 3, 10, 0), (41.9028, 12.4964), "NIKON CORPORATION", "NIKON D750"),
    ("Trip 2019", "rome2", datetime(2019, 5, 4, 15, 30), (41.8986, 12.4769), "NIKON CORPORATION", "NIKON D750"),
    ("Trip 2019", "florence", datetime(2019, 5, 7, 9, 15), (43.7696, 11.2558), "NIKON CORPORATION", "NIKON D750"),
    ("Home", "garden1", datetime(2021, 8, 1, 18, 0), (48.8566, 2.3522), "Apple", "iPhone 12"),
    ("Home", "garden2", datetime(2021, 8, 2, 19, 0), (48.8606, 2.3376), "Apple", "iPhone 12"),
    ("Home", "winter", datetime(2022, 1, 15, 12, 0), (48.8530, 2.3499), "Apple", "iPhone 12"),
]


def _rational(x: float):
    d = int(x)
    m = int((x - d) * 60)
    s = round(((x - d) * 60 - m) * 60, 2)
    return (float(d), float(m), float(s))


def write_exif_photo(path: Path, seed: int, taken: datetime, gps, make: str, model: str) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    arr = (rng.random((48, 64, 3)) * 255).astype("uint8")
    im = Image.fromarray(arr)
    exif = Image.Exif()
    exif[0x010F], exif[0x0110] = make, model
    exif.get_ifd(0x8769)[0x9003] = taken.strftime("%Y:%m:%d %H:%M:%S")
    gps_ifd = exif.get_ifd(0x8825)
    gps_ifd.update(
        {
            1: "N" if gps[0] >= 0 else "S",
            2: _rational(abs(gps[0])),
            3: "E" if gps[1] >= 0 else "W",
            4: _rational(abs(gps[1])),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, "JPEG", exif=exif, quality=90)
    return path


def make_photo_folder(folder: Path, n_products: int = 30) -> dict:
    """Demo product photos, a TIFF, a HEIC (when pillow-heif can write one), the HTML-named file, EXIF photos."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    products = sorted(DEMO.iterdir())[:n_products]
    for p in products:
        shutil.copy(p, folder / p.name)
    Image.open(products[0]).save(folder / "tiff_copy.tif")
    extra = {"tiff": "tiff_copy"}
    try:
        import pillow_heif

        pillow_heif.register_heif_opener()
        Image.open(products[1]).save(folder / "heic_copy.heic")
        extra["heic"] = "heic_copy"
    except Exception:  # no HEIF encoder in this build: the HEIC thumbnail test skips
        pass
    shutil.copy(sorted(DEMO.iterdir())[n_products], folder / f"{XSS_NAME}.jpg")
    for i, (album, name, taken, gps, make, model) in enumerate(EXIF_PHOTOS):
        write_exif_photo(folder / "albums" / album / f"{name}.jpg", 100 + i, taken, gps, make, model)
    return {"products": [p.stem for p in products], **extra}


def index_folder(folder: Path, out: Path, root: Path) -> None:
    from agentcir.cli import main

    assert main(["index", str(folder), "--out", str(out), "-q", f"run.root={root}", "run.progress=false"]) == 0


@pytest.fixture(scope="package")
def gallery(tmp_path_factory):
    """(photo folder, gallery dir, run root, what is where)."""
    base = tmp_path_factory.mktemp("serve")
    facts = make_photo_folder(base / "photos")
    index_folder(base / "photos", base / "gallery", base / "runs")
    return base / "photos", base / "gallery", base / "runs", facts


@pytest.fixture(scope="package")
def searcher(gallery):
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher

    _, gdir, root, _ = gallery
    s = Searcher(compose([f"run.root={root}", "run.progress=false"]), gdir)
    s.prepare()
    return s


@pytest.fixture(scope="package")
def ask_factory(gallery):
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher

    _, gdir, root, _ = gallery
    made = []

    def make():
        if not made:
            made.append(Searcher(compose([f"run.root={root}", "run.progress=false", "method=imageseeker"]), gdir))
        return made[0]

    return make


def make_client(searcher, ask_factory, tmp_path, **cfg):
    from fastapi.testclient import TestClient

    from agentcir.serve import ServeConfig, create_app

    cfg.setdefault("warm_up", False)  # the package's searcher is warm already
    app = create_app(
        searcher, uploads=tmp_path / "up", thumbs=tmp_path / "thumbs", config=ServeConfig(**cfg), ask=ask_factory
    )
    return TestClient(app, base_url="http://127.0.0.1")


@contextmanager
def running_app(app):
    """``app`` under uvicorn on a free local port, in a thread: yields the port; stopped after."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    deadline = time.time() + 20
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    try:
        yield port
    finally:
        srv.should_exit = True
        t.join(5)
