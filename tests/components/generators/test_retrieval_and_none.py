"""generator=retrieval (retrieval-as-imagination) and generator=none."""

from pathlib import Path

import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.gallery import Gallery, GalleryItem
from agentcir.framework.recipe import compose
from agentcir.registry import GENERATORS


@pytest.fixture
def gallery(tmp_path, images, word_encoder):
    items = [GalleryItem(name, str(p)) for name, p in images.items()]
    return Gallery.build(tmp_path / "gallery", items, word_encoder)


def test_nearest_gallery_item_is_the_proxy(gallery, word_encoder, images):
    gen = GENERATORS.build("retrieval", {}, encoder=word_encoder).bind(gallery)
    assert gen.generate("a photo of a yellow dress") == Path(str(images["yellow_dress"]))
    assert gen.generate("green shoes for running") == Path(str(images["green_shoes"]))
    row, score = gen.nearest("a blue t-shirt")
    assert gallery.ids[row] == "blue_tshirt" and 0 < score <= 1


def test_the_reference_is_never_returned(gallery, word_encoder, images):
    gen = GENERATORS.build("retrieval", {}, encoder=word_encoder).bind(gallery)
    assert gen.generate("a red t-shirt") == Path(str(images["red_tshirt"]))
    other = gen.generate("a red t-shirt", reference=images["red_tshirt"])
    assert other != Path(str(images["red_tshirt"]))
    keep = GENERATORS.build("retrieval", {"exclude_reference": False}, encoder=word_encoder).bind(gallery)
    assert keep.generate("a red t-shirt", reference=images["red_tshirt"]) == Path(str(images["red_tshirt"]))


def test_binding_changes_the_identity(gallery, word_encoder, tmp_path, images):
    gen = GENERATORS.build("retrieval", {}, encoder=word_encoder)
    bound = gen.bind(gallery)
    assert bound is not gen and gen.gallery is None and bound.identity != gen.identity
    smaller = Gallery.build(tmp_path / "g2", [GalleryItem("r", str(images["red_tshirt"]))], word_encoder)
    assert gen.bind(smaller).identity not in (bound.identity, gen.identity)
    assert gen.bind(gallery).identity == bound.identity  # same gallery, same identity


def test_unbound_and_bad_inputs(gallery, word_encoder, toy_encoder, images):
    gen = GENERATORS.build("retrieval", {}, encoder=word_encoder)
    with pytest.raises(InputError, match=r"needs the gallery: call generator.bind\(gallery\) first"):
        gen.generate("a red t-shirt")
    with pytest.raises(InputError, match="description must be a non-empty text"):
        gen.bind(gallery).generate("  ")
    with pytest.raises(InputError, match="was indexed by another encoder"):
        GENERATORS.build("retrieval", {}, encoder=toy_encoder).bind(gallery)


def test_none_generator_and_recipe(word_encoder):
    assert GENERATORS.build("none", {}).generate("anything", reference=Path("x.jpg")) is None
    assert GENERATORS.build("none", {}).bind(object()).generate("x") is None
    # in a recipe, `generator=none` means "no generator" (methods take it as optional)
    assert compose(["generator=none"])["generator"] == {"name": "none"}
