"""Every captioner/generator/editor/detector/verifier recipe composes and builds (with the test
plugin's encoder and LLM injected), and its cache identity changes when its config,
its prompt file or its injected model changes (issue 5, point 8)."""

import pytest

from agentcir.framework.recipe import RECIPES_DIR
from agentcir.registry import CAPTIONERS, DETECTORS, EDITORS, GENERATORS, VERIFIERS

GROUPS = {
    "captioner": CAPTIONERS,
    "generator": GENERATORS,
    "editor": EDITORS,
    "detector": DETECTORS,
    "verifier": VERIFIERS,
}
FILES = sorted((g, p.stem) for g in GROUPS for p in (RECIPES_DIR / g).glob("*.yaml"))

#: one config change per key that must change the identity
CHANGES = {
    ("captioner", "vlm"): "captioner.prompt=verifier/verify_caption",
    ("captioner", "transformers"): "captioner.max_new_tokens=12",
    ("captioner", "dataset"): "captioner.caption_field=title",
    ("captioner", "tagger"): "captioner.default_min_prob=0.5",
    ("generator", "retrieval"): "generator.exclude_reference=false",
    ("generator", "openai_images"): "generator.model=other",
    ("generator", "diffusers"): "generator.steps=4",
    ("editor", "openai_edits"): "editor.model=other",
    ("editor", "diffusers"): "editor.steps=4",
    ("editor", "recolour"): "editor.background=200",
    ("detector", "vlm"): "detector.max_objects=3",
    ("detector", "owlvit"): "detector.threshold=0.2",
    ("detector", "crop_tagger"): "detector.grids=[1,3]",
    ("verifier", "vlm"): "verifier.unclear=error",
    ("verifier", "entailment"): "verifier.prompt=tasks/answer",
    ("verifier", "contrast"): "verifier.top_k=2",
}


def test_every_key_has_a_recipe_file():
    for group, reg in GROUPS.items():
        files = {p.stem for p in (RECIPES_DIR / group).glob("*.yaml")}
        assert set(reg.keys()) == files, group


@pytest.mark.parametrize("group,option", FILES, ids=[f"{g}/{o}" for g, o in FILES])
def test_recipe_builds_and_identity_tracks_config(build_recipe, group, option):
    if option == "none":
        assert GROUPS[group].build("none", {}).identity
        return
    comp = build_recipe(group, option)
    assert comp.registry_key == option and len(comp.identity) == 24
    assert build_recipe(group, option).identity == comp.identity  # stable
    changed = build_recipe(group, option, CHANGES[(group, option)])
    assert changed.identity != comp.identity


def test_recipe_files_list_every_config_field():
    import dataclasses

    import yaml

    for group, option in FILES:
        data = yaml.safe_load((RECIPES_DIR / group / f"{option}.yaml").read_text())
        fields = {f.name for f in dataclasses.fields(GROUPS[group].config_class(option))}
        assert data["name"] == option and set(data) - {"name"} == fields, f"{group}/{option}"


@pytest.mark.parametrize(
    "group,option,field",
    [
        ("captioner", "vlm", "prompt"),
        ("detector", "vlm", "prompt"),
        ("verifier", "vlm", "verify_prompt"),
        ("verifier", "vlm", "verify_caption_prompt"),
        ("verifier", "vlm", "answer_prompt"),
        ("verifier", "entailment", "prompt"),
    ],
)
def test_identity_follows_the_prompt_file_content(build_recipe, tmp_path, group, option, field):
    p = tmp_path / "p.txt"
    p.write_text("first {{statement}}")
    a = build_recipe(group, option, f"{group}.{field}={p}").identity
    p.write_text("second, longer {{statement}}")
    b = build_recipe(group, option, f"{group}.{field}={p}").identity
    assert a != b


@pytest.mark.parametrize(
    "group,option",
    [("captioner", "tagger"), ("generator", "retrieval"), ("detector", "crop_tagger"), ("verifier", "contrast")],
)
def test_identity_follows_the_encoder(plugin_path, group, option):
    from agentcir.registry import ENCODERS

    a = GROUPS[group].build(option, {}, encoder=ENCODERS.build("toy", {"seed": 0}))
    b = GROUPS[group].build(option, {}, encoder=ENCODERS.build("toy", {"seed": 1}))
    assert a.identity != b.identity


@pytest.mark.parametrize(
    "group,option", [("captioner", "vlm"), ("detector", "vlm"), ("verifier", "vlm"), ("verifier", "entailment")]
)
def test_identity_follows_the_llm(plugin_path, group, option):
    from agentcir.registry import LLMS

    a = GROUPS[group].build(option, {}, llm=LLMS.build("counting", {"suffix": "a"}))
    b = GROUPS[group].build(option, {}, llm=LLMS.build("counting", {"suffix": "b"}))
    assert a.identity != b.identity


def test_identity_follows_vocabulary_files(word_encoder, tmp_path):
    (tmp_path / "colours.txt").write_text("red\nblue\n")
    a = CAPTIONERS.build(
        "tagger",
        {"vocabularies": ["colours"], "template": "{colours}", "vocab_dir": str(tmp_path)},
        encoder=word_encoder,
    ).identity
    (tmp_path / "colours.txt").write_text("red\nblue\ngreen\n")
    b = CAPTIONERS.build(
        "tagger",
        {"vocabularies": ["colours"], "template": "{colours}", "vocab_dir": str(tmp_path)},
        encoder=word_encoder,
    ).identity
    assert a != b


def test_identity_follows_the_dataset_captions_file(tmp_path):
    f = tmp_path / "caps.jsonl"
    f.write_text('{"id": "a", "caption": "x"}\n')
    a = CAPTIONERS.build("dataset", {"path": str(f)}).identity
    f.write_text('{"id": "a", "caption": "yz"}\n')
    assert CAPTIONERS.build("dataset", {"path": str(f)}).identity != a


def test_cached_calls_are_keyed_by_identity(word_encoder, images):
    """Through the runner's cache: a captioner with another config is a cache miss, the same one a hit."""
    import asyncio

    from agentcir.framework.cache import CallCache
    from agentcir.framework.runner import RunContext

    ctx = RunContext(cache=CallCache(":memory:"), run_dir=None)
    ctx.stage = "captions"
    a = CAPTIONERS.build("tagger", {}, encoder=word_encoder)
    b = CAPTIONERS.build("tagger", {"fallback": {"articles": "thing"}}, encoder=word_encoder)

    async def go():
        return [await ctx.call(c, "caption", image=images["red_tshirt"]) for c in (a, a, b)]

    out = asyncio.run(go())
    assert out == ["a photo of a red t-shirt"] * 3
    st = ctx.stats["captions"]
    assert (st.calls, st.cache_hits) == (2, 1)
