"""The offline ``rules`` LLM: each edit family with hand-written expected outputs, every task,
the demo queries and the benchmark builder's phrasings, and its honest limits."""

import csv
import json
import random
import shutil
from pathlib import Path

import pytest

from agentcir.framework.parsing import parse_task_reply
from agentcir.components.llms.rules import NeedsVisionError
from agentcir.framework.datasets.builder import TEMPLATES, article_phrase, phrase_edit
from agentcir.framework.errors import InputError
from agentcir.framework.vocab import VOCAB_DIR
from agentcir.registry import LLMS, ConfigError

DEMO = Path(__file__).resolve().parents[3] / "agentcir" / "data" / "demo"


@pytest.fixture(scope="module")
def llm():
    return LLMS.build("rules")


def target(llm, caption, modification):
    out = parse_task_reply(
        "target_caption", llm.run_task("target_caption", {"reference_caption": caption, "modification": modification})
    )
    return out["target_caption"], out["modifications"]


@pytest.mark.parametrize(
    "caption,modification,expected,changes",
    [
        # colour / attribute replacement
        ("a photo of a black men's t-shirt", "make it blue", "a photo of a blue men's t-shirt", ["make it blue"]),
        (
            "a photo of a green skirt for women",
            "in red instead of green",
            "a photo of a red skirt for women",
            ["change the colour from green to red"],
        ),
        (
            "a photo of a black men's t-shirt",
            "change the colour to navy",
            "a photo of a navy blue men's t-shirt",
            ["make it navy blue"],
        ),
        (
            "a photo of an orange men's t-shirt",
            "swap the orange for green",
            "a photo of a green men's t-shirt",
            ["change the colour from orange to green"],
        ),
        (
            "a photo of a black and white striped men's t-shirt",
            "make it red",
            "a photo of a red striped men's t-shirt",
            ["make it red"],
        ),
        ("a photo of a t-shirt", "make it yellow", "a photo of a yellow t-shirt", ["make it yellow"]),
        ("a photo of a blue dress", "not blue", "a photo of a dress", ["remove the colour blue"]),
        (
            "a woman in a red dress standing on a street",
            "make it blue",
            "a woman in a blue dress standing on a street",
            ["make it blue"],
        ),
        # article changes (a/an and "a pair of" re-chosen)
        (
            "a photo of a green skirt for women",
            "a dress instead of a skirt",
            "a photo of a green dress for women",
            ["change the skirt into a dress"],
        ),
        (
            "a photo of a black men's t-shirt",
            "turn it into a jacket",
            "a photo of a black men's jacket",
            ["make it a jacket"],
        ),
        (
            "a photo of a blue top for women",
            "turn it into an umbrella",
            "a photo of a blue umbrella for women",
            ["make it an umbrella"],
        ),
        (
            "a photo of a brown casual shoes for men",
            "I want a pair of formal shoes rather than a pair of casual shoes",
            "a photo of a brown formal shoes for men",
            ["change the casual shoes into a pair of formal shoes"],
        ),
        (
            "a photo of a black men's shirt",
            "not a shirt, a t-shirt",
            "a photo of a black men's t-shirt",
            ["change the shirt into a t-shirt"],
        ),
        # gender changes keep the form of the caption
        (
            "a photo of a black men's t-shirt",
            "the women's version",
            "a photo of a black women's t-shirt",
            ["make it for women"],
        ),
        (
            "a photo of a blue casual shoes for women",
            "make it for men",
            "a photo of a blue casual shoes for men",
            ["make it for men"],
        ),
        (
            "a photo of a black t-shirt",
            "make it for women",
            "a photo of a black t-shirt for women",
            ["make it for women"],
        ),
        (
            "a photo of a white women's t-shirt",
            "change it from women's to men's",
            "a photo of a white men's t-shirt",
            ["change it from women to men"],
        ),
        # usage / style
        ("a photo of a black men's shirt", "more formal", "a photo of a black men's formal shirt", ["make it formal"]),
        (
            "a photo of a black men's shirt",
            "a sporty version",
            "a photo of a black men's sporty shirt",
            ["make it sporty"],
        ),
        (
            "a photo of a black formal shirt for men",
            "something casual instead of formal",
            "a photo of a black casual shirt for men",
            ["make it casual instead of formal"],
        ),
        # objects: add / remove / replace
        ("a photo of a cat on a sofa", "add a dog", "a photo of a cat on a sofa with a dog", ["add a dog"]),
        (
            "a photo of a white t-shirt with text",
            "without text",
            "a photo of a white plain t-shirt without text",
            ["remove text"],
        ),
        (
            "a photo of a white graphic t-shirt with a logo",
            "remove the logo",
            "a photo of a white plain t-shirt without a logo",
            ["remove the logo"],
        ),
        (
            "two people walking a dog on a beach",
            "no people",
            "two people walking a dog on a beach without people",
            ["remove the people"],
        ),
        (
            "a dog sitting on a couch",
            "a cat instead of a dog",
            "a cat sitting on a couch",
            ["replace the dog with a cat"],
        ),
        ("a photo of a white t-shirt without text", "add text", "a photo of a white t-shirt with text", ["add text"]),
        # patterns
        (
            "a photo of a black men's t-shirt",
            "striped",
            "a photo of a black striped men's t-shirt",
            ["make it striped"],
        ),
        ("a photo of a red dress", "with floral print", "a photo of a red floral dress", ["make it floral"]),
        ("a photo of a striped dress", "without stripes", "a photo of a dress", ["remove the pattern striped"]),
        (
            "a photo of a striped dress",
            "checked instead of striped",
            "a photo of a checked dress",
            ["make it checked instead of striped"],
        ),
        # several edits at once, and unrecognised "with ..." phrases kept verbatim
        (
            "a photo of a shirt",
            "a formal one in white for men",
            "a photo of a white formal shirt for men",
            ["make it white", "make it for men", "make it formal"],
        ),
        (
            "a photo of a blue shirt",
            "with long sleeves",
            "a photo of a blue shirt with long sleeves",
            ["with long sleeves"],
        ),
        # no-op parts are not listed as changes
        (
            "a photo of a red men's t-shirt",
            "a women's t-shirt like this",
            "a photo of a red women's t-shirt",
            ["make it for women"],
        ),
    ],
)
def test_edit_families(llm, caption, modification, expected, changes):
    assert target(llm, caption, modification) == (expected, changes)


def test_not_understood_falls_back_as_configured(llm):
    assert target(llm, "a photo of a blue shirt", "make it look older") == (
        "a photo of a blue shirt, make it look older",
        ["make it look older"],
    )
    keep = LLMS.build("rules", {"fallback": "keep"})
    assert target(keep, "a photo of a blue shirt", "make it look older")[0] == "a photo of a blue shirt"
    strict = LLMS.build("rules", {"fallback": "error"})
    with pytest.raises(InputError, match="llm 'rules' does not understand the modification 'make it look older'"):
        target(strict, "a photo of a blue shirt", "make it look older")
    with pytest.raises(
        ConfigError, match="llm 'rules': field 'fallback': must be one of append, keep, error, got 'guess'"
    ):
        LLMS.build("rules", {"fallback": "guess"})


def test_refine_and_rewrite(llm):
    v = {"reference_caption": "a photo of a black men's t-shirt", "modification": "in red instead of black"}
    assert json.loads(llm.run_task("rewrite_caption", v)) == {"caption": "a photo of a red men's t-shirt"}
    # a target caption that forgot the edit is corrected; a right one is kept
    assert json.loads(llm.run_task("refine", {**v, "target_caption": "a black t-shirt for men"})) == {
        "target_caption": "a red t-shirt for men"
    }
    assert json.loads(llm.run_task("refine", {**v, "target_caption": "a red men's t-shirt"})) == {
        "target_caption": "a red men's t-shirt"
    }


def test_textual_proxies(llm):
    v = {
        "reference_caption": "a photo of a black men's t-shirt",
        "modification": "make it navy",
        "target_caption": "a photo of a navy blue men's t-shirt",
        "k": 10,
    }
    proxies = parse_task_reply("textual_proxies", llm.run_task("textual_proxies", v))["proxies"]
    assert len(proxies) == 10 and len(set(proxies)) == 10
    assert proxies[:5] == [
        "a photo of a navy blue men's t-shirt",
        "a photo of a navy men's tshirt",
        "a photo of a t-shirt for men in navy blue",
        "an image of a navy blue men's t-shirt",
        "a picture of a dark blue men's tee",
    ]
    assert all("black" not in p for p in proxies)
    # exactly k, repeating when the variants run out; the target is derived when not given
    few = parse_task_reply("textual_proxies", llm.run_task("textual_proxies", {**v, "target_caption": "", "k": 40}))[
        "proxies"
    ]
    assert len(few) == 40 and few[0] == "a photo of a navy blue men's t-shirt"


def test_descriptions_and_divergent_captions(llm):
    v = {"reference_caption": "a photo of a red dress for women", "modification": "make it green", "n": 3}
    d = parse_task_reply("target_descriptions", llm.run_task("target_descriptions", v))["descriptions"]
    assert d == [
        "A photo of a green dress for women.",
        "A dress in green for women, photographed on its own.",
        "A product shot of a green gown for women.",
    ]
    c = parse_task_reply("divergent_captions", llm.run_task("divergent_captions", {**v, "n": 4}))["captions"]
    assert c == [
        "a green dress for women",
        "a photo of a dress in green for women",
        "a green dress",
        "a picture of a green gown for women",
    ]


def test_questions(llm):
    v = {
        "reference_caption": "a photo of a black men's t-shirt",
        "modification": "make it blue and add a logo",
        "target_caption": "a photo of a blue men's t-shirt with a logo",
        "n": 5,
    }
    q = parse_task_reply("questions", llm.run_task("questions", v))["questions"]
    assert q == [
        {"statement": "The t-shirt is blue.", "answer": True},
        {"statement": "The image contains a logo.", "answer": True},
        {"statement": "The t-shirt is black.", "answer": False},
        {"statement": "The item is a t-shirt.", "answer": True},
        {"statement": "The t-shirt is for men.", "answer": True},
    ]
    v2 = {
        "reference_caption": "a photo of a green skirt for women",
        "modification": "a dress instead of a skirt, without text",
        "target_caption": "",
        "n": 3,
    }
    assert parse_task_reply("questions", llm.run_task("questions", v2))["questions"] == [
        {"statement": "The item is a dress.", "answer": True},
        {"statement": "The item is a skirt.", "answer": False},
        {"statement": "The image contains text.", "answer": False},
    ]


def test_filter_objects(llm):
    out = json.loads(
        llm.run_task(
            "filter_objects",
            {
                "objects": ["skirt", "dog", "logo", "handbag", "tree"],
                "modification": "a dress instead of a skirt, remove the logo",
                "target_caption": "a green dress for women",
            },
        )
    )
    assert out == {"keep": ["dog", "handbag", "tree"], "remove": ["skirt", "logo"]}
    out = json.loads(
        llm.run_task(
            "filter_objects",
            {"objects": "person, dog\n- bench", "modification": "no people", "target_caption": "a dog on a bench"},
        )
    )
    assert out == {"keep": ["dog", "bench"], "remove": ["person"]}


@pytest.mark.parametrize(
    "statement,caption,answer",
    [
        ("The t-shirt is blue.", "a photo of a blue men's t-shirt", True),
        ("The t-shirt is green.", "a photo of a blue men's t-shirt", False),
        ("The item is navy.", "a photo of a navy blue dress", True),
        ("The item is for men.", "a photo of a blue men's t-shirt", True),
        ("The item is for women.", "a photo of a blue t-shirt for men", False),
        ("The item is for women.", "a photo of a blue t-shirt", False),  # the caption does not say
        ("The item is not red.", "a photo of a blue men's t-shirt", True),
        ("The item is not blue.", "a photo of a blue men's t-shirt", False),
        ("The image contains text.", "a photo of a white t-shirt without text", False),
        ("The image does not contain text.", "a photo of a white t-shirt without text", True),
        ("The image contains a logo.", "a photo of a t-shirt with a logo", True),
        ("The item is a dress.", "a red dress", True),
        ("The item is a blue dress.", "a red dress", False),
        ("The item is sporty.", "a photo of a blue sports t-shirt", True),
        ("There is a dog in the image.", "a man walking a puppy", True),
        ("The weather is nice.", "a red dress", False),
    ],
)
def test_entail(llm, statement, caption, answer):
    assert llm.run_task("entail", {"statement": statement, "caption": caption}) == ("true" if answer else "false")


def test_vision_tasks_and_chat_fail_clearly(llm, tmp_path):
    for task, v in [
        ("caption", {}),
        ("list_objects", {}),
        ("verify", {"modification": "m", "reference_caption": "c"}),
        ("answer", {"statement": "s"}),
    ]:
        with pytest.raises(NeedsVisionError, match=f"llm 'rules' cannot run task '{task}': it needs to see images"):
            llm.run_task(task, v, images=[tmp_path / "x.jpg"])
    with pytest.raises(InputError, match="llm 'rules' has no free-form chat"):
        llm.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(InputError, match=r"LLM task 'target_caption' needs variable\(s\) modification"):
        llm.run_task("target_caption", {"reference_caption": "x"})
    with pytest.raises(InputError, match="unknown LLM task 'poem'"):
        llm.run_task("poem", {})


def test_compress_context_task(llm):
    out = json.loads(
        llm.run_task(
            "compress_context",
            {
                "goal": "find the cat photos",
                "findings": ["the cat is orange"],
                "session_memory": "",
                "history": 'assistant: searching -> calls image_search({"query": "cat", "save_as": "cats"})\ntool image_search -> 12 ids',
            },
        )
    )
    assert "image_search" in out["session_memory"] and "cats" in out["working_memory"]


ROW_KEYS = {"gender": "gender", "articleType": "article", "baseColour": "colour"}
POSSESSIVE = {"men": "men's", "women": "women's", "boys": "boys'", "girls": "girls'", "unisex": "unisex"}


def _caption_forms(row):
    col, art, gen, use = (
        row["baseColour"].lower(),
        article_phrase(row["articleType"]),
        row["gender"].lower(),
        row["usage"].lower(),
    )
    return [f"a photo of a {col} {POSSESSIVE[gen]} {use} {art}", f"a photo of a {col} {art} for {gen}"]


def _value(lex, slot, raw):
    return lex.canonical(slot, article_phrase(raw) if slot == "article" else raw.lower())


def test_every_demo_query(llm):
    """Each demo query, from a tagging-style reference caption: the target caption holds the edited
    value (and not the old one) and keeps the attributes the query's targets share."""
    lex = llm.lexicon
    rows = {r["id"]: r for r in csv.DictReader(open(DEMO / "gallery.csv", encoding="utf-8"))}
    queries = [json.loads(line) for line in open(DEMO / "queries.jsonl", encoding="utf-8")]
    assert len(queries) == 40
    for q in queries:
        e = q["edit"]
        for cap in _caption_forms(rows[q["reference_id"]])[: 2 if e["kind"] != "usage" else 1]:
            got, changes = target(llm, cap, q["text"])
            p = lex.parse_caption(got)
            assert p.values(e["kind"])[:1] == [_value(lex, e["kind"], e["to"])], (q["id"], cap, q["text"], got)
            for col, val in e["keep"].items():
                if col not in ROW_KEYS:  # e.g. subCategory: not something a caption states
                    continue
                assert _value(lex, ROW_KEYS[col], val) in p.values(ROW_KEYS[col]), (q["id"], got)
            assert changes, q["id"]


@pytest.mark.parametrize("kind", sorted(k for k in TEMPLATES if k != "other"))
def test_every_builder_template(llm, kind):
    lex = llm.lexicon
    pairs = {
        "colour": [("Black", "Blue"), ("Navy Blue", "Red"), ("Green", "Off White")],
        "article": [
            ("Tshirts", "Shirts"),
            ("Casual Shoes", "Formal Shoes"),
            ("Handbags", "Backpacks"),
            ("Jeans", "Skirts"),
        ],
        "gender": [("Men", "Women"), ("Women", "Men")],
        "usage": [("Casual", "Sports"), ("Formal", "Casual"), ("Casual", "Ethnic")],
    }[kind]
    for old, new in pairs:
        for template in TEMPLATES[kind]:
            row = {
                "articleType": old if kind == "article" else "Tshirts",
                "baseColour": old if kind == "colour" else "Black",
                "gender": old if kind == "gender" else "Men",
                "usage": old if kind == "usage" else "Casual",
            }
            rng = random.Random(0)
            rng.choice = lambda seq, t=template: t
            mod = phrase_edit(kind, old, new, row["articleType"], rng)
            got, _ = target(llm, _caption_forms(row)[0], mod)
            assert lex.parse_caption(got).values(kind) == [_value(lex, kind, new)], (mod, got)


def test_identity_follows_the_vocabularies(tmp_path):
    a = LLMS.build("rules")
    vocab = tmp_path / "vocab"
    shutil.copytree(VOCAB_DIR, vocab)
    b = LLMS.build("rules", {"vocab_dir": str(vocab)})
    assert a.identity != b.identity  # another config
    c = LLMS.build("rules", {"vocab_dir": str(vocab)})
    before = c.identity
    (vocab / "colours.txt").write_text((vocab / "colours.txt").read_text() + "ultramarine\n")
    d = LLMS.build("rules", {"vocab_dir": str(vocab)})
    assert before != d.identity  # same config, other vocabulary content
    assert target(d, "a photo of a red dress", "make it ultramarine")[0] == "a photo of a ultramarine dress".replace(
        "a u", "an u"
    )
    with pytest.raises(InputError, match="vocab_dir '.*nowhere' is not a folder"):
        LLMS.build("rules", {"vocab_dir": str(tmp_path / "nowhere")})
