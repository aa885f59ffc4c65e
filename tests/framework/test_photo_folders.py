"""Photo folders as phones and disks leave them: Pillow's bomb guard stays in force, same-stem files get
distinct ids, symlinked albums are followed once or reported, and a full disk is a StorageError."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from agentcir.framework import gallery as gallery_module
from agentcir.framework.errors import AgentcirError, StorageError
from agentcir.framework.gallery import Gallery, GalleryItem, folder_ids, items_from_folder
from agentcir.framework.images import ImageTooLargeError, list_images, load_rgb

from tests.conftest import ROOT, make_image
from tests.framework.test_images_limits import bomb_png


# -- Pillow's guard -------------------------------------------------------------------------------
def test_pillow_guard_stays_in_force_after_loading_photos(tmp_path):
    """In a fresh process: load a gallery photo, then a 196-megapixel PNG of 0.3 MB is still refused by
    the generators' png_bytes and by Pillow itself, and load_rgb reads its size past Pillow's guard."""
    photo = make_image(tmp_path / "photo.jpg", 1)
    bomb = bomb_png(tmp_path / "bomb.png", 14000, 14000)
    assert bomb.stat().st_size < 400_000
    code = f"""
from PIL import Image
from agentcir.framework.images import load_rgb, ImageTooLargeError
from agentcir.components.generators.files import png_bytes
from agentcir.framework.images import ImageDecodeError
guard = Image.MAX_IMAGE_PIXELS
load_rgb({str(photo)!r})
assert Image.MAX_IMAGE_PIXELS == guard, Image.MAX_IMAGE_PIXELS
try:
    png_bytes(open({str(bomb)!r}, 'rb').read(), what='reply')
    print('png_bytes decoded it')
except ImageDecodeError as e:
    print('png_bytes refused:', e)
try:
    Image.open({str(bomb)!r}).load()
    print('Image.open decoded it')
except Image.DecompressionBombError as e:
    print('Image.open refused')
try:
    load_rgb({str(bomb)!r}, max_pixels=150_000_000)
except ImageTooLargeError as e:
    print('load_rgb refused:', e)
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]
print(int(hwm.split()[1]) // 1024)
"""
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("png_bytes refused: reply: the returned data is not an image (DecompressionBombError"), out
    assert out[1] == "Image.open refused"
    # this call's own limit decides for it, with the size read from the header past Pillow's guard
    assert "14000x14000 (196,000,000 pixels) is above the limit of 150,000,000 pixels" in out[2]
    assert int(out[3]) < 400  # MB: nothing of the 196 MP was decoded


def test_the_per_call_limit(tmp_path):
    p = make_image(tmp_path / "a.png", 1, size=40)
    with pytest.raises(ImageTooLargeError, match=r"40x40 \(1,600 pixels\) is above the limit of 1,000"):
        load_rgb(p, max_pixels=1000)
    assert load_rgb(p, max_pixels=0).size == (40, 40)  # 0: no limit for this call
    assert Image.MAX_IMAGE_PIXELS and Image.MAX_IMAGE_PIXELS > 0


# -- same-stem ids ----------------------------------------------------------------------------------
def test_same_stem_files_get_distinct_stable_ids(tmp_path):
    d = tmp_path / "export"
    make_image(d / "IMG_0001.jpg", 1)
    make_image(d / "IMG_0001.png", 2)
    make_image(d / "IMG_0002.jpg", 3)
    make_image(d / "album" / "x.jpg.png", 4)  # its stem is the suffixed name of the next file
    make_image(d / "album" / "x.jpg", 5)
    make_image(d / "album" / "x.png", 6)
    items, _ = items_from_folder(d)
    ids = [it.id for it in items]
    assert sorted(ids) == ["IMG_0001.jpg", "IMG_0001.png", "IMG_0002", "album/x.jpg", "album/x.jpg.png", "album/x.png"]
    assert [it.id for it in items_from_folder(d)[0]] == ids  # stable
    by_id = {it.id: it.path for it in items}
    assert by_id["IMG_0001.png"].endswith("IMG_0001.png") and by_id["IMG_0002"].endswith("IMG_0002.jpg")
    # an index of the phone export builds instead of aborting on "duplicate item id"
    from tests.framework.test_photos_upright import PixelNet

    g = Gallery.build(tmp_path / "g", items, PixelNet(), progress=False)
    assert len(g) == 6 and g.index_of("IMG_0001.png") >= 0


def test_folder_ids_without_clashes_keep_the_stem(tmp_path):
    paths = [tmp_path / "a.jpg", tmp_path / "b" / "a.png"]
    assert folder_ids(tmp_path, paths) == ["a", "b/a"]


def test_programmatic_duplicate_ids_are_still_refused(tmp_path):
    from tests.framework.test_photos_upright import PixelNet

    p = str(make_image(tmp_path / "a.png", 1))
    with pytest.raises(AgentcirError, match="duplicate item id 'x'"):
        Gallery.build(tmp_path / "g", [GalleryItem("x", p), GalleryItem("x", p)], PixelNet(), progress=False)


# -- symlinked folders ------------------------------------------------------------------------------
@pytest.fixture
def linked(tmp_path):
    """photos/ with a real album, a symlinked album (outside), a second link to it, and a loop."""
    root = tmp_path / "photos"
    make_image(root / "a.jpg", 1)
    make_image(root / "real" / "b.jpg", 2)
    outside = tmp_path / "trip"
    make_image(outside / "c.jpg", 3)
    make_image(outside / "d.png", 4)
    (root / "trip").symlink_to(outside, target_is_directory=True)
    (root / "trip_again").symlink_to(outside, target_is_directory=True)
    (root / "real" / "loop").symlink_to(root, target_is_directory=True)
    return root


def test_symlinked_folders_are_skipped_and_counted(linked):
    links = []
    images, _ = list_images(linked, links=links)
    assert [p.relative_to(linked).as_posix() for p in images] == ["a.jpg", "real/b.jpg"]
    assert sorted(os.path.basename(s.path) for s in links) == ["loop", "trip", "trip_again"]
    assert all("--follow-links" in s.reason for s in links)


def test_symlinked_folders_are_followed_once(linked):
    links = []
    items, _ = items_from_folder(linked, follow_links=True, links=links)
    ids = [it.id for it in items]
    assert sorted(ids) in (["a", "real/b", "trip/c", "trip/d"], ["a", "real/b", "trip_again/c", "trip_again/d"])
    refused = {os.path.basename(s.path): s.reason for s in links}
    assert set(refused) == {"loop", "trip", "trip_again"} - {ids[-1].split("/")[0]}
    assert "walked already (a loop or a second link)" in refused["loop"]


def test_index_reports_skipped_links_and_follows_them_on_request(plugin_path, linked, tmp_path, capsys):
    from agentcir.cli import main

    assert main(["index", str(linked), "--out", str(tmp_path / "g1"), "--no-metadata", "-q", "encoder=toy"]) == 0
    out = capsys.readouterr().out
    assert "indexed 2 image(s)" in out and "and 3 folder(s) not walked" in out
    assert (
        main(
            [
                "index",
                str(linked),
                "--out",
                str(tmp_path / "g2"),
                "--no-metadata",
                "-q",
                "--follow-links",
                "encoder=toy",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "indexed 4 image(s)" in out and "and 2 folder(s) not walked" in out


# -- a full disk --------------------------------------------------------------------------------------
def short_write(monkeypatch, after: int = 0):
    """Make numpy's save fail as on a full disk: part of the file written, then numpy's short-write
    OSError, which has no errno ("16512 requested and 5088 written")."""
    real = np.save
    calls = {"n": 0}

    def save(file, arr, *a, **k):
        calls["n"] += 1
        if calls["n"] <= after:
            return real(file, arr, *a, **k)
        with open(file if str(file).endswith(".npy") else f"{file}.npy", "wb") as f:
            f.write(b"\x93NUMPY" + b"\0" * 5082)
        raise OSError(f"{np.asarray(arr).nbytes} requested and 5088 written")

    monkeypatch.setattr(gallery_module.np, "save", save)


def test_a_short_write_is_a_storage_error_naming_the_path(monkeypatch, image_folder, tmp_path):
    from tests.framework.test_photos_upright import PixelNet

    short_write(monkeypatch)
    items, _ = items_from_folder(image_folder)
    with pytest.raises(StorageError) as e:
        Gallery.build(tmp_path / "g", items, PixelNet(), progress=False)
    msg = str(e.value)
    assert f"cannot write the gallery '{tmp_path / 'g'}'" in msg
    assert "the disk is full (a short write: 5088 of 1536 bytes written)" in msg and "free some space" in msg
    assert not (tmp_path / "g" / "image_emb.npy").exists()  # the torn temporary file is removed
    assert not list((tmp_path / "g").glob(".image_emb*"))
    from agentcir.framework import files

    assert files.StorageError is StorageError and isinstance(e.value, AgentcirError) and isinstance(e.value, OSError)


def test_agentcir_index_on_a_full_disk_says_so(plugin_path, monkeypatch, image_folder, tmp_path, capsys):
    from agentcir.cli import main

    short_write(monkeypatch)
    rc = main(["index", str(image_folder), "--out", str(tmp_path / "g"), "--no-metadata", "-q", "encoder=toy"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"agentcir index: error: cannot write the gallery '{tmp_path / 'g'}': the disk is full (a short write" in err
    assert "Traceback" not in err
    monkeypatch.undo()  # space freed: the same command finishes
    assert main(["index", str(image_folder), "--out", str(tmp_path / "g"), "--no-metadata", "-q", "encoder=toy"]) == 0


def test_a_folder_reached_by_a_link_and_by_its_own_path_is_walked_once(tmp_path):
    root = tmp_path / "photos"
    make_image(root / "real" / "sub" / "e.jpg", 5)
    (root / "a_link").symlink_to(root / "real" / "sub", target_is_directory=True)
    links = []
    images, _ = list_images(root, follow_links=True, links=links)
    assert len(images) == 1 and images[0].name == "e.jpg"
    assert len(links) == 1 and "walked already" in links[0].reason
