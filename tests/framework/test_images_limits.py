"""Images above the pixel limit are refused from their header (a small file can
hold a huge image), with a clear skip reason; JPEGs decode at a reduced scale when asked."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework import images
from agentcir.framework.images import ImageTooLargeError, load_rgb, set_max_pixels


def bomb_png(path: Path, w: int = 12000, h: int = 11000) -> Path:
    """A valid grayscale PNG of ``w x h`` black pixels, written in a stream (~130 KB for 132 MP)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    comp = zlib.compressobj(9)
    row = b"\0" * (w + 1)  # filter byte + w gray pixels
    idat = bytearray()
    for _ in range(h):
        idat += comp.compress(row)
    idat += comp.flush()
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", bytes(idat))
        + chunk(b"IEND", b"")
    )
    return path


@pytest.fixture
def limit():
    before = images.max_pixels()
    yield set_max_pixels
    set_max_pixels(before)


def test_huge_png_is_refused_before_decoding(tmp_path, limit):
    p = bomb_png(tmp_path / "bomb.png")
    assert p.stat().st_size < 200_000
    # in a fresh process, so the peak memory is this call's alone
    # VmHWM, not ru_maxrss: Linux carries a forking parent's peak across exec into ru_maxrss
    code = (
        "from agentcir.framework.images import load_rgb, ImageTooLargeError\n"
        f"try:\n    load_rgb({str(p)!r})\nexcept ImageTooLargeError as e:\n    print(e)\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print(int(hwm.split()[1]) // 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "12000x11000 (132,000,000 pixels) is above the limit of 100,000,000 pixels (run.max_image_pixels)" in out[0]
    assert int(out[1]) < 400  # MB peak: the 132 MP image was never decoded
    limit(0)  # no limit: the header check is off (not decoded here: 132 MB)
    limit(1000)
    with pytest.raises(ImageTooLargeError, match=r"above the limit of 1,000 pixels"):
        load_rgb(p)


def test_pixel_limit_is_a_recipe_setting_and_a_gallery_skip_reason(plugin_path, tmp_path, limit):
    from agentcir.framework.gallery import Gallery, items_from_folder
    from agentcir.framework.recipe import ComponentPool, compose

    from tests.conftest import make_image

    d = tmp_path / "photos"
    make_image(d / "small.png", 1, size=24)
    make_image(d / "big.png", 2, size=40)
    r = compose(["encoder=toy", "run.max_image_pixels=1000", f"run.root={tmp_path}"])
    assert r["run"]["max_image_pixels"] == 1000
    enc = ComponentPool(r).get("encoder")
    items, _ = items_from_folder(d)
    g = Gallery.build(tmp_path / "g", items, enc, progress=False)
    assert g.ids == ["small"]
    assert "40x40 (1,600 pixels) is above the limit of 1,000 pixels" in g.skipped[0]["reason"]
    # the limit does not enter the run's identity (it does not change what a run of readable images computes)
    from agentcir.framework.runner import resolve_run_dir

    assert resolve_run_dir(r) == resolve_run_dir(compose(["encoder=toy", f"run.root={tmp_path}"]))
    with pytest.raises(Exception, match="must be 0 \\(no limit\\) or positive"):
        set_max_pixels(-1)


def test_jpeg_draft_decodes_at_a_reduced_scale(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    p = tmp_path / "photo.jpg"
    Image.fromarray((rng.random((1600, 2400, 3)) * 255).astype(np.uint8)).save(p, quality=90)
    assert load_rgb(p).size == (2400, 1600)
    small = load_rgb(p, min_side=300)
    assert small.size == (600, 400)  # 1/4 scale: both sides still >= 300
    assert min(load_rgb(p, min_side=900).size) >= 900
    png = tmp_path / "photo.png"
    Image.open(p).save(png)
    assert load_rgb(png, min_side=300).size == (2400, 1600)  # only JPEGs have DCT scales
