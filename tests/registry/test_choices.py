"""Choice-typed config fields: recipes give the plain word, the built config holds an Enum member
equal to it, and a word outside the set is refused naming the field, the allowed words and the
closest one."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import yaml

from agentcir.framework.recipe import GalleryCaptions, compose
from agentcir.framework.scale import scale_settings
from agentcir.registry import LLMS, Choice, ConfigError, make_config
from agentcir.registry.config import choice_fields, config_dict


class Colour(Choice):
    red = "red"
    dark_blue = "dark-blue"


@dataclass
class Paint:
    colour: Colour = Colour.red
    second: Colour | None = None
    coats: int = 1


def test_a_word_becomes_the_member_and_stays_a_string():
    cfg = make_config(Paint, {"colour": "dark-blue", "second": "red"}, where="paint")
    assert cfg.colour is Colour.dark_blue and cfg.second is Colour.red
    assert cfg.colour == "dark-blue" and f"{cfg.colour}" == "dark-blue" and str(cfg.colour) == "dark-blue"
    assert {"dark-blue": 1}[cfg.colour] == 1 and json.dumps(cfg.colour) == '"dark-blue"'
    assert make_config(Paint, {}, where="paint").second is None
    assert choice_fields(Paint) == {"colour": Colour, "second": Colour}


def test_a_word_outside_the_set_lists_the_choices_and_the_closest():
    with pytest.raises(
        ConfigError,
        match=r"paint: field 'colour': must be one of red, dark-blue, "
        r"got 'dark-bleu'; did you mean 'dark-blue'\?",
    ):
        make_config(Paint, {"colour": "dark-bleu"}, where="paint")
    with pytest.raises(ConfigError, match=r"field 'second': must be one of red, dark-blue, got 3$"):
        make_config(Paint, {"second": 3}, where="paint")


def test_config_dict_writes_words():
    plain = config_dict(make_config(Paint, {"colour": "dark-blue"}, where="paint"))
    assert plain == {"colour": "dark-blue", "second": None, "coats": 1}
    assert type(plain["colour"]) is str and yaml.safe_dump(plain)


def test_component_choice_is_refused_at_build_with_a_hint():
    with pytest.raises(
        ConfigError,
        match=r"llm 'rules': field 'fallback': must be one of append, keep, error, "
        r"got 'apend'; did you mean 'append'\?",
    ):
        LLMS.build("rules", {"fallback": "apend"})
    assert LLMS.build("rules", {"fallback": "keep"}).cfg.fallback == "keep"


def test_recipe_choices_are_checked_and_resolve_to_words():
    with pytest.raises(
        ConfigError,
        match=r"run: field 'gallery_captions': must be one of auto, dataset, captioner, "
        r"got 'captioners'; did you mean 'captioner'\?",
    ):
        compose(["run.gallery_captions=captioners"])
    recipe = compose(["run.gallery_captions=dataset"])
    assert recipe["run"]["gallery_captions"] == GalleryCaptions.dataset
    assert type(recipe["run"]["gallery_captions"]) is str  # the resolved recipe holds plain words
    yaml.safe_dump(recipe)


def test_scale_choices():
    with pytest.raises(
        ConfigError, match=r"scale: field 'engine': must be one of local, ray, got 'rey'; did you mean 'ray'\?"
    ):
        scale_settings({"engine": "rey"})
    s = scale_settings({"search": "ivf_sq", "sq": "8bit"})
    assert s["sq"] == "8bit" and type(s["sq"]) is str and s["engine"] == "local"


def test_a_config_built_in_python_is_checked_too():
    """``Component(Config(...))`` bypasses the recipe; the component still holds members and refuses
    a word outside the set."""
    from agentcir.framework.datasets.fashioniq import FashionIQ, FashionIQCategory
    from agentcir.framework.eval.metrics import FASHIONIQ_CATEGORIES

    ds = FashionIQ(FashionIQ.Config(category="shirt"))
    assert ds.cfg.category is FashionIQCategory.shirt and ds.subset.name == "FashionIQ shirt val"
    with pytest.raises(
        ConfigError,
        match=r"dataset 'FashionIQ': field 'category': must be one of dress, shirt, toptee, "
        r"got 'shirts'; did you mean 'shirt'\?",
    ):
        FashionIQ(FashionIQ.Config(category="shirts"))
    assert FashionIQCategory.values() == FASHIONIQ_CATEGORIES
