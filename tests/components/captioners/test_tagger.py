"""The offline captioner (captioner=tagger) and the shared zero-shot tagging."""

import numpy as np
import pytest

from agentcir.components.captioners import zeroshot
from agentcir.components.captioners.tagger import tidy
from agentcir.framework.errors import InputError
from agentcir.framework.images import ImageDecodeError
from agentcir.registry import CAPTIONERS, ConfigError


def build(encoder, **cfg):
    return CAPTIONERS.build("tagger", cfg, encoder=encoder)


def test_caption_names_colour_and_article(word_encoder, images):
    cap = build(word_encoder)
    assert cap.caption(images["red_tshirt"]) == "a photo of a red t-shirt"
    assert cap.caption(images["yellow_dress"]) == "a photo of a yellow dress"
    assert cap.caption(images["green_shoes"]) == "a photo of a green casual shoes"


def test_unsure_attributes_are_left_out(word_encoder, images):
    # the word encoder knows nothing of patterns or genders: every term ties, so none is kept
    tags = build(
        word_encoder,
        vocabularies=["colours", "patterns", "genders", "articles"],
        template="a photo of a {colours} {patterns} {genders} {articles}",
    ).tags(images["red_tshirt"])
    assert tags["patterns"] == [] and tags["genders"] == []
    assert tags["colours"][0][0] == "red" and tags["colours"][0][1] > 0.99
    # a per-attribute threshold removes a sure attribute too; the article falls back to "item"
    cap = build(word_encoder, min_prob={"colours": 1.01, "articles": 1.01})
    assert cap.caption(images["red_tshirt"]) == "a photo of a item".replace("a item", "an item")


def test_margin_and_max_values(word_encoder, images):
    # two colours in one image: with max_values 2 and a high temperature both stay, joined by "and"
    emb = word_encoder.encode_texts(["red yellow t-shirt"])  # an "image" that is red and yellow
    cap = build(word_encoder, max_values={"colours": 2}, temperature=1.0, default_min_prob=0.0)
    tags = cap.tags_from_embeddings(emb)[0]
    assert [t for t, _ in tags["colours"]] in (["red", "yellow"], ["yellow", "red"])
    assert cap.render(tags) in ("a photo of a red and yellow t-shirt", "a photo of a yellow and red t-shirt")
    # a margin the leader cannot beat drops the attribute
    cap = build(word_encoder, min_margin={"colours": 0.5}, temperature=1.0, default_min_prob=0.0)
    assert cap.tags_from_embeddings(emb)[0]["colours"] == []


def test_template_forms_and_fallback(word_encoder, images):
    cap = build(
        word_encoder,
        vocabularies=["colours", "articles"],
        template="{articles} in {colours}",
        forms={"t-shirt": "tee"},
        fallback={},
    )
    assert cap.caption(images["blue_tshirt"]) == "tee in blue"


def test_gender_possessive_form_and_a_an(word_encoder):
    cap = build(
        word_encoder,
        vocabularies=["colours", "patterns", "genders", "articles"],
        template="a photo of a {colours} {patterns} {genders} {articles}",
    )
    tags = {"colours": [("olive", 0.9)], "patterns": [], "genders": [("men", 0.8)], "articles": [("t-shirt", 0.9)]}
    assert cap.render(tags) == "a photo of an olive men's t-shirt"
    tags = {"colours": [], "patterns": [("solid", 0.9)], "genders": [("unisex", 0.8)], "articles": [("cap", 0.9)]}
    assert cap.render(tags) == "a photo of a unisex cap"
    assert tidy("a  photo of a off white , item") == "a photo of an off white, item"


def test_caption_many_and_from_embeddings_agree(word_encoder, images):
    cap = build(word_encoder)
    paths = [images["red_tshirt"], images["yellow_dress"]]
    many = cap.caption_many(paths)
    assert many == [cap.caption(p) for p in paths]
    assert cap.caption_embeddings(word_encoder.encode_images(paths)) == many


def test_prompts_are_encoded_once_per_encoder(word_encoder, images):
    zeroshot._TEXT_CACHE.clear()
    cap = build(word_encoder)
    cap.caption(images["red_tshirt"])
    n = len(word_encoder.text_calls)
    assert n >= 1
    cap.caption(images["blue_tshirt"])
    build(word_encoder).caption(images["yellow_dress"])  # a second component with the same encoder
    assert len(word_encoder.text_calls) == n
    encoded = [t for call in word_encoder.text_calls for t in call]
    assert len(encoded) == len(set(encoded))
    # colours use a prompt ensemble (averaged); articles one prompt
    assert {"a photo of a red item", "a red product", "a photo of something red", "a photo of a dress"} <= set(encoded)


def test_synonym_ensembling(word_encoder, images):
    cap = build(word_encoder, synonyms=True, vocabularies=["colours", "articles"], template="a {colours} {articles}")
    ls = cap.zs.labels("colours")
    assert ls.emb.shape[0] == len(ls.names) and np.allclose(np.linalg.norm(ls.emb, axis=1), 1, atol=1e-5)
    assert cap.caption(images["red_tshirt"]) == "a red t-shirt"
    encoded = {t for call in word_encoder.text_calls for t in call}
    assert {"a photo of a grey item", "a photo of a gray item"} <= encoded  # every synonym was embedded


def test_works_with_any_encoder(toy_encoder, images):
    cap = build(toy_encoder)
    text = cap.caption(images["red_tshirt"])
    assert text.startswith("a photo of") and text == cap.caption(images["red_tshirt"])


def test_bad_config_is_named(word_encoder):
    with pytest.raises(InputError, match=r"field 'template' has slot\(s\) \{usages\} that are not in 'vocabularies'"):
        build(word_encoder, template="a {usages} {colours}", vocabularies=["colours"])
    with pytest.raises(InputError, match=r"vocabulary patterns tagged but not in field 'template'"):
        build(word_encoder, template="a {colours}", vocabularies=["colours", "patterns"])
    with pytest.raises(InputError, match=r"field 'min_prob' names colors, which is no vocabulary \(tagged: colours, "):
        build(word_encoder, min_prob={"colors": 0.3})
    build(word_encoder, min_prob={"usages": 0.3})  # an untagged vocabulary: allowed (defaults name some)
    with pytest.raises(InputError, match=r"vocabulary 'shapes' not found"):
        build(word_encoder, vocabularies=["shapes"], template="{shapes}")
    with pytest.raises(InputError, match=r"exactly one '\{\}'"):
        build(word_encoder, prompts={"colours": "a photo of colour"})
    with pytest.raises(InputError, match=r"in each '\|'-separated template"):
        build(word_encoder, prompts={"colours": "a {} thing|a photo"})
    with pytest.raises(ConfigError, match="field 'temperature': must be above 0, got 0"):
        build(word_encoder, temperature=0.0)
    with pytest.raises(TypeError, match="needs the component"):
        CAPTIONERS.build("tagger", {})


def test_broken_image_is_named(word_encoder, tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(ImageDecodeError, match="broken.jpg"):
        build(word_encoder).caption(bad)
    with pytest.raises(ImageDecodeError, match=r"broken.jpg.*1 of 1 image"):
        build(word_encoder).caption_many([bad])


def test_user_vocab_dir(word_encoder, images, tmp_path):
    (tmp_path / "colours.txt").write_text("red|scarlet\nblue\n")
    cap = build(word_encoder, vocabularies=["colours"], template="{colours} thing", vocab_dir=str(tmp_path))
    assert cap.caption(images["red_tshirt"]) == "red thing"
