"""Photos are decoded upright (EXIF orientation applied) by the one decode path every component uses,
and galleries embedded by the older decoder are recognised and re-embedded."""

from __future__ import annotations

import ast
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agentcir.framework import images
from agentcir.framework.errors import InputError
from agentcir.framework.gallery import Gallery, items_from_folder
from agentcir.framework.images import DECODE_VERSION, load_rgb
from agentcir.framework.interfaces import Encoder

AGENTCIR = Path(images.__file__).resolve().parent.parent

#: orientation -> how a camera stores the upright picture (the inverse of what a viewer applies):
#: 2 mirrored, 3 turned 180, 4 flipped, 5 transposed, 6 stored turned left (shown turned right), 7
#: transversed, 8 stored turned right
STORED = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def landscape(w: int = 96, h: int = 64) -> Image.Image:
    """A smooth, asymmetric picture: sky above, ground below, a sun top left, a tree right."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.zeros((h, w, 3), np.float32)
    sky = y < h * 0.55
    a[sky] = np.stack([60 + x * 0.5, 120 + y, 230 - y], -1)[sky]
    a[~sky] = np.stack([40 + y * 0.5, 150 - x * 0.4, 40 + x * 0.2], -1)[~sky]
    sun = (x - w * 0.2) ** 2 + (y - h * 0.2) ** 2 < (h * 0.13) ** 2
    a[sun] = (250, 220, 60)
    tree = (abs(x - w * 0.8) < w * 0.04) & (y > h * 0.35)
    a[tree] = (90, 50, 20)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def write_oriented(path: Path, upright: Image.Image, orientation: int) -> Path:
    """A JPEG holding ``upright`` as a camera stores it with EXIF ``orientation``."""
    t = STORED[orientation]
    stored = upright if t is None else upright.transpose(t)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path.parent.mkdir(parents=True, exist_ok=True)
    stored.save(path, "JPEG", quality=95, exif=exif.tobytes())
    return path


class PixelNet(Encoder):
    """A tiny torch image tower (fixed random weights over a 16x16 thumbnail, centred), as sensitive to
    a turned or mirrored photo as a real encoder is; it decodes through the framework like every encoder."""

    @dataclass
    class Config:
        batch_size: int = 8

    dim = 32

    def __init__(self, cfg=None, **deps):
        import torch

        super().__init__(cfg, **deps)
        g = torch.Generator().manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(16 * 16 * 3, 64), torch.nn.Tanh(), torch.nn.Linear(64, self.dim)
        )
        for p in self.net.parameters():
            p.data = torch.randn(p.shape, generator=g) * 0.1

    def _embed_images(self, ims):
        import torch

        x = np.stack([np.asarray(im.resize((16, 16), Image.BILINEAR), np.float32) / 255.0 for im in ims])
        x = x - x.mean(axis=(1, 2, 3), keepdims=True)
        with torch.no_grad():
            return self.net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()

    def _embed_texts(self, texts):  # pragma: no cover - images only
        return np.zeros((len(texts), self.dim), np.float32)


def catalog_encoder():
    try:
        from agentcir.framework.recipe import ComponentPool, compose

        enc = ComponentPool(compose(["encoder=catalog"], check_devices=False)).get("encoder")
        enc.encode_images([landscape()])
        return enc
    except Exception as e:  # the catalog extra or its bundled checkpoint missing: the torch tower still tests
        pytest.skip(f"catalog encoder unavailable here ({type(e).__name__}: {e})")


@pytest.fixture(scope="module")
def oriented(tmp_path_factory) -> dict[int, Path]:
    d = tmp_path_factory.mktemp("oriented")
    up = landscape()
    return {o: write_oriented(d / f"landscape_{o}.jpg", up, o) for o in STORED}


def test_load_rgb_turns_every_orientation_upright(oriented):
    up = np.asarray(landscape(), np.float32)
    for o, path in oriented.items():
        with Image.open(path) as raw:
            assert raw.getexif()[0x0112] == o
        got = np.asarray(load_rgb(path), np.float32)
        assert got.shape == up.shape, f"orientation {o}: decoded {got.shape[:2]}, upright is {up.shape[:2]}"
        assert np.abs(got - up).mean() < 4, f"orientation {o}: pixels differ from the upright photo"
        small = load_rgb(path, min_side=16)  # the reduced-scale decode of the VLM path is upright too
        assert (small.width > small.height) == (up.shape[1] > up.shape[0])


@pytest.mark.parametrize("which", ["torch", "catalog"])
def test_every_orientation_embeds_like_the_upright_photo(oriented, which):
    enc = PixelNet() if which == "torch" else catalog_encoder()
    ref = enc.encode_images([landscape()])[0]  # the upright pixels, no EXIF
    # the encoder tells a turned photo apart (else this test could not fail)
    turned = enc.encode_images([landscape().transpose(Image.Transpose.ROTATE_90)])[0]
    assert float(ref @ turned) < 0.95
    emb = enc.encode_images([str(p) for p in oriented.values()])
    cos = {o: float(e @ ref) for o, e in zip(oriented, emb)}
    assert min(cos.values()) >= 0.99, f"cosine with the upright pixels per EXIF orientation: {cos}"


def test_a_pil_image_carrying_an_orientation_is_turned_too(oriented):
    with Image.open(oriented[6]) as im:
        im.load()
        assert load_rgb(im).size == landscape().size


def test_every_decode_of_a_photo_goes_through_load_rgb():
    """No component opens images itself: Image.open outside images.py only where no pixel reaches a
    model (metadata, returned generator bytes, the web thumbnails, which apply the orientation too, the
    perceptual hash read from such a thumbnail, the scripted test server's image edits)."""
    allowed = {
        "framework/images.py",
        "framework/methods/imageseeker/exif.py",
        "components/generators/files.py",
        "framework/gallery_files.py",
        "serve/routes/results.py",
        "testing/wire.py",
    }
    found = set()
    for p in AGENTCIR.rglob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "open"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "Image"
            ):
                found.add(p.relative_to(AGENTCIR).as_posix())
    assert found - allowed == set(), f"modules decoding images without load_rgb: {sorted(found - allowed)}"


def test_a_gallery_of_the_older_decoder_is_recognised_and_re_embedded(oriented, tmp_path, caplog):
    folder = tmp_path / "photos"
    folder.mkdir()
    for o in (1, 6, 8):
        (folder / oriented[o].name).write_bytes(oriented[o].read_bytes())
    items, _ = items_from_folder(folder)
    enc = PixelNet()
    root = tmp_path / "g"
    g = Gallery.build(root, items, enc, progress=False, source=str(folder))
    info = json.loads((root / "gallery.json").read_text())
    assert info["plan"]["decode"] == DECODE_VERSION == 2
    fresh = np.asarray(g.image_emb).copy()
    assert np.min(fresh @ fresh[0]) >= 0.99  # the three photos are one picture, upright

    # the gallery as the older decoder left it: no decode version, sideways embeddings, and
    # (older than the checksums too) no checksum sidecars
    for sidecar in root.glob("*.b2"):
        sidecar.unlink()
    del info["plan"]["decode"]
    (root / "gallery.json").write_text(json.dumps(info))
    np.save(root / "image_emb.npy", np.roll(fresh, 1, axis=1))
    (root / "captions").mkdir()
    (root / "captions" / "x.jsonl").write_text('{"id": "a", "caption": "a sideways caption"}\n')
    with pytest.raises(
        InputError,
        match=r"embedded by an older image decoder \(decode version 1, EXIF orientation "
        r"ignored.*re-embed it by rerunning `agentcir index .*photos --out",
    ):
        Gallery.open(root, encoder=enc)
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        g2 = Gallery.build(root, items, enc, progress=False, source=str(folder))
    assert "older image decoder" in caplog.text
    np.testing.assert_allclose(np.asarray(g2.image_emb), fresh, atol=1e-6)
    assert not (root / "captions").exists()  # captions made from the sideways pixels are gone
    assert json.loads((root / "gallery.json").read_text())["plan"]["decode"] == DECODE_VERSION
    # a gallery of other items is still refused, not rebuilt
    with pytest.raises(InputError, match="already holds a different gallery"):
        Gallery.build(root, items[:2], enc, progress=False)


def test_run_galleries_are_named_by_the_decoder(monkeypatch, tmp_path):
    from agentcir.framework.runner import gallery_dir

    now = gallery_dir(tmp_path, "demo", "items", "enc", "float32")
    monkeypatch.setattr(images, "DECODE_VERSION", 1)
    assert gallery_dir(tmp_path, "demo", "items", "enc", "float32") != now  # new stage results follow
