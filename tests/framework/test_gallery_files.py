"""The path and size rules shared by ``agentcir serve`` and ``agentcir mcp``: a client's path is
accepted only when it is an image inside a served folder; an image over the pixel limit is
refused from its header."""

from __future__ import annotations

import os

import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.gallery_files import Decoder, TooLarge, within_roots
from agentcir.testing.data import make_image


@pytest.fixture
def folders(tmp_path):
    photos, extra, elsewhere = tmp_path / "photos", tmp_path / "extra", tmp_path / "elsewhere"
    make_image(photos / "a" / "one.jpg", 1)
    make_image(extra / "two.png", 2)
    make_image(elsewhere / "secret.jpg", 3)
    (photos / "notes.txt").write_text("not a photo")
    os.symlink(elsewhere / "secret.jpg", photos / "link.jpg")
    return photos, extra, elsewhere


def test_an_image_inside_a_served_folder_is_accepted(folders):
    photos, extra, _ = folders
    assert within_roots(photos / "a" / "one.jpg", [photos]) == (photos / "a" / "one.jpg").resolve()
    assert within_roots(str(extra / "two.png"), [photos, extra]).name == "two.png"


@pytest.mark.parametrize(
    "given",
    ["elsewhere/secret.jpg", "photos/../elsewhere/secret.jpg", "photos/link.jpg", "extra/two.png", "/etc/passwd"],
)
def test_a_path_outside_the_served_folders_is_refused(folders, given):
    photos = folders[0]
    path = given if given.startswith("/") else photos.parent / given
    with pytest.raises(InputError, match="outside the photo folders served here"):
        within_roots(path, [photos], "reference_path")


@pytest.mark.parametrize(
    "name,words", [("notes.txt", "not an image file"), ("missing.jpg", "is not a file"), ("a", "is not a file")]
)
def test_what_is_not_an_image_file_is_refused(folders, name, words):
    with pytest.raises(InputError, match=words):
        within_roots(folders[0] / name, [folders[0]])


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(folders):
    photo = folders[0] / "a" / "one.jpg"  # 24 x 24
    Decoder(max_pixels=24 * 24, concurrency=1).check_file(photo)
    with pytest.raises(TooLarge, match="more than the limit"):
        Decoder(max_pixels=24 * 24 - 1, concurrency=1).check_file(photo)
