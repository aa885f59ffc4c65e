"""verifier=contrast: statements judged by encoder contrast (the rule is in the module docstring)."""

import pytest

from agentcir.components.verifiers.contrast import find_mentions, positive_form
from agentcir.framework.errors import InputError
from agentcir.components.llms.edits import Lexicon
from agentcir.registry import VERIFIERS, ConfigError

LEX = Lexicon()
VOCABS = ("colours", "patterns", "articles", "genders", "usages", "objects")


def test_find_mentions_and_negations():
    text = "The navy blue t-shirt is not striped, but has no logo"
    ms = find_mentions(text, LEX, VOCABS)
    assert [(m.term, m.vocab) for m in ms] == [
        ("navy blue", "colours"),
        ("t-shirt", "articles"),
        ("striped", "patterns"),
        ("logo", "objects"),
    ]
    neg = {m.term: (text[m.negation[0] : m.negation[1]] if m.negation else None) for m in ms}
    assert neg == {"navy blue": None, "t-shirt": None, "striped": "not", "logo": "no"}
    assert [m.term for m in find_mentions("two t-shirts and dresses", LEX, VOCABS)] == ["t-shirt", "dress"]  # plurals
    assert [m.term for m in find_mentions("a red dress", LEX, ["articles"])] == ["dress"]  # only those judged
    # a negation does not reach past "but"/"and" or punctuation
    ms = find_mentions("not red but blue", LEX, VOCABS)
    assert [(m.term, m.negation is not None) for m in ms] == [("red", True), ("blue", False)]
    ms = find_mentions("it isn't a dress", LEX, VOCABS)
    assert ms[0].term == "dress" and ms[0].negation is not None


def test_positive_form():
    assert positive_form("a shirt without stripes", (8, 15)) == "a shirt with stripes"
    assert positive_form("the shirt isn't red", (10, 15)) == "the shirt is red"
    assert positive_form("remove the stripes", (0, 6)) == "the stripes"


@pytest.fixture
def verifier(word_encoder):
    return VERIFIERS.build("contrast", {}, encoder=word_encoder)


def test_check_on_the_image(verifier, images):
    red = images["red_tshirt"]
    assert verifier.check("a photo of a red t-shirt", candidate=red) is True
    assert verifier.check("the t-shirt is blue", candidate=red) is False
    assert verifier.check("the t-shirt is not blue", candidate=red) is True
    assert verifier.check("the t-shirt is not red", candidate=red) is False
    assert verifier.check("a red dress", candidate=red) is False  # every mention must hold
    assert verifier.check("a yellow dress", candidate=images["yellow_dress"]) is True
    # the word encoder cannot tell patterns apart (all tie): a tie does not confirm
    assert verifier.check("a striped t-shirt", candidate=red) is False
    assert verifier.check("a t-shirt without stripes", candidate=red) is True


def test_check_on_the_caption(verifier):
    assert verifier.check("the t-shirt is red", caption="a red cotton t-shirt") is True
    assert verifier.check("the t-shirt is green", caption="a red cotton t-shirt") is False
    with pytest.raises(InputError, match=r"needs the candidate image \(candidate=\) or its caption \(caption=\)"):
        verifier.check("the t-shirt is red")
    with pytest.raises(InputError, match="the statement must be a non-empty text"):
        verifier.check(" ", caption="x")


def test_statement_without_vocabulary_terms_uses_the_negation(word_encoder, images):
    v = VERIFIERS.build("contrast", {"vocabularies": ["colours"]}, encoder=word_encoder)
    assert v.check("a photo of an apple", candidate=images["red_tshirt"]) is True
    encoded = {t for call in word_encoder.text_calls for t in call}
    assert "it is not true that a photo of an apple" in encoded


def test_verify_instruction(word_encoder, verifier, images):
    red, blue = images["red_tshirt"], images["blue_tshirt"]
    assert verifier.verify(blue, "make it blue", reference=red) is True
    assert verifier.verify(red, "make it blue", reference=red) is False
    assert verifier.verify(red, "change to a dress", reference=blue) is False
    assert verifier.verify(images["yellow_dress"], "a dress instead, not blue") is True
    assert verifier.verify(images["yellow_dress"], "make it a dress in blue instead of yellow") is False
    assert verifier.verify(blue, "blue instead of red", reference=red) is True
    assert verifier.verify(red, "without stripes") is True  # the word encoder never ranks striped first
    assert verifier.verify(red, "add an apple") is True and verifier.verify(red, "remove the apple") is False
    assert verifier.verify(blue, "remove the apple") is True
    assert [(e.slot, e.op, e.values) for e in verifier.edits("a dress instead, not blue")] == [
        ("article", "set", ("dress",)),
        ("colour", "remove", ("blue",)),
    ]
    # no vocabulary term: the candidate must be closer to the instruction than the reference
    only_colours = VERIFIERS.build("contrast", {"vocabularies": ["colours"]}, encoder=word_encoder)
    assert only_colours.verify(red, "more like an apple", reference=images["yellow_dress"]) is True
    assert only_colours.verify(images["yellow_dress"], "more like an apple", reference=red) is False


def test_image_embeddings_and_prompts_are_reused(word_encoder, verifier, images):
    for s in ("the t-shirt is red", "the t-shirt is blue", "the t-shirt is red"):
        verifier.check(s, candidate=images["red_tshirt"])
    assert word_encoder.image_calls == 1
    n = len(word_encoder.text_calls)
    verifier.check("the t-shirt is blue", candidate=images["red_tshirt"])
    assert len(word_encoder.text_calls) == n


def test_works_with_any_encoder_and_bad_config(toy_encoder, word_encoder, images):
    v = VERIFIERS.build("contrast", {}, encoder=toy_encoder)
    assert isinstance(v.check("a red t-shirt", candidate=images["red_tshirt"]), bool)
    assert isinstance(v.verify(images["red_tshirt"], "brighter please", reference=images["blue_tshirt"]), bool)
    with pytest.raises(ConfigError, match="field 'object_top_k': must be at least 1, got 0"):
        VERIFIERS.build("contrast", {"object_top_k": 0}, encoder=word_encoder)
    with pytest.raises(ConfigError, match="field 'top_k': must be at least 1, got 0"):
        VERIFIERS.build("contrast", {"top_k": 0}, encoder=word_encoder)
    with pytest.raises(InputError, match="field 'vocabularies' names shapes; the verifier judges"):
        VERIFIERS.build("contrast", {"vocabularies": ["colours", "shapes"]}, encoder=word_encoder)
    with pytest.raises(InputError, match="field 'negation' needs exactly one"):
        VERIFIERS.build("contrast", {"negation": "no"}, encoder=word_encoder)


def test_top_k_tolerates_near_values(word_encoder):
    v1 = VERIFIERS.build("contrast", {}, encoder=word_encoder)
    v3 = VERIFIERS.build("contrast", {"top_k": 60}, encoder=word_encoder)
    # with top_k larger than the colour vocabulary every colour statement holds
    assert v1.check("a green t-shirt", caption="a red t-shirt") is False
    assert v3.check("a green t-shirt", caption="a red t-shirt") is True
