"""Fixtures of the MCP server's tests: a small real gallery (demo product photos with the offline
catalog encoder, two albums of photos with EXIF dates), and a scripted session of the SDK's own
client against ``agentcir mcp`` in a subprocess (one server per test module)."""

from __future__ import annotations

import os
import shutil
import sys
from datetime import datetime
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="agentcir[mcp] is not installed")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "agentcir" / "data" / "demo" / "images"
#: the photos with an EXIF date: (album, name, taken)
DATED = [
    ("Trip 2019", "rome1", datetime(2019, 5, 3, 10, 0)),
    ("Trip 2019", "rome2", datetime(2019, 5, 4, 15, 30)),
    ("Home", "garden", datetime(2021, 8, 1, 18, 0)),
]


def write_dated_photo(path: Path, seed: int, taken: datetime) -> Path:
    """A small JPEG of random pixels whose EXIF DateTimeOriginal is ``taken``."""
    import numpy as np
    from PIL import Image

    arr = (np.random.default_rng(seed).random((40, 56, 3)) * 255).astype("uint8")
    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = taken.strftime("%Y:%m:%d %H:%M:%S")
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, "JPEG", exif=exif, quality=90)
    return path


@pytest.fixture(scope="package")
def gallery(tmp_path_factory):
    """(photo folder, gallery dir, run root, a demo photo left out of the folder)."""
    from agentcir.cli import main

    base = tmp_path_factory.mktemp("mcp")
    photos = base / "photos"
    photos.mkdir()
    demo = sorted(DEMO.iterdir())
    for p in demo[:8]:
        shutil.copy(p, photos / p.name)
    for i, (album, name, taken) in enumerate(DATED):
        write_dated_photo(photos / album / f"{name}.jpg", 10 + i, taken)
    assert (
        main(
            [
                "index",
                str(photos),
                "--out",
                str(base / "gallery"),
                "-q",
                f"run.root={base / 'runs'}",
                "run.progress=false",
            ]
        )
        == 0
    )
    return photos, base / "gallery", base / "runs", demo[8]


def server_command(gallery, *extra: str) -> tuple[str, list[str], dict]:
    """(executable, arguments, environment) of ``python -m agentcir mcp`` over ``gallery``."""
    _, gdir, runs, _ = gallery
    env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "AGENTCIR_TOKEN": "",
    }
    return (
        sys.executable,
        ["-m", "agentcir", "mcp", "--gallery", str(gdir), *extra, f"run.root={runs}", "run.progress=false"],
        env,
    )


def text_of(result) -> str:
    """The text content of a tool result (its first text block)."""
    return next(c.text for c in result.content if c.type == "text")
