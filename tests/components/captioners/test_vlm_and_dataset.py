"""captioner=vlm (through an injected LLM) and captioner=dataset (dataset-provided captions)."""

import json

import pytest

from agentcir.framework.parsing import ReplyParseError
from agentcir.framework.errors import InputError
from agentcir.registry import CAPTIONERS


def test_vlm_caption_sends_the_image_and_the_prompt(scripted, images):
    llm = scripted(['Caption: "A red cotton t-shirt on a white background."\n'])
    cap = CAPTIONERS.build("vlm", {}, llm=llm)
    assert cap.caption(images["red_tshirt"]) == "A red cotton t-shirt on a white background."
    call = llm.calls[0]
    assert call["images"] == [str(images["red_tshirt"])]
    assert call["text"].startswith("Describe this image in one sentence")  # recipes/prompts/tasks/caption.txt


def test_vlm_caption_with_own_prompt_file(scripted, images, tmp_path):
    prompt = tmp_path / "short.txt"
    prompt.write_text("Name the object.")
    llm = scripted(["a shirt"])
    cap = CAPTIONERS.build("vlm", {"prompt": str(prompt)}, llm=llm)
    assert cap.caption(images["red_tshirt"]) == "a shirt"
    assert llm.calls[0]["text"] == "Name the object."


def test_vlm_empty_caption_is_an_error(scripted, images):
    cap = CAPTIONERS.build("vlm", {}, llm=scripted(["  ``  "]))
    with pytest.raises(ReplyParseError, match="the caption reply is empty"):
        cap.caption(images["red_tshirt"])


def test_vlm_missing_prompt_file_is_named(scripted, images):
    cap = CAPTIONERS.build("vlm", {"prompt": "captioner/nope"}, llm=scripted(["x"]))
    with pytest.raises(InputError, match="prompt 'captioner/nope' not found"):
        cap.caption(images["red_tshirt"])


def test_vlm_caption_with_the_offline_rules_llm_says_it_cannot_see(images):
    from agentcir.components.llms.rules import NeedsVisionError
    from agentcir.registry import LLMS

    cap = CAPTIONERS.build("vlm", {}, llm=LLMS.build("rules", {}))
    with pytest.raises(NeedsVisionError, match="caption"):
        cap.caption(images["red_tshirt"])


# -- dataset ---------------------------------------------------------------------------------
@pytest.fixture
def items_jsonl(tmp_path, images):
    f = tmp_path / "items.jsonl"
    rows = [
        {"id": "red_tshirt", "path": str(images["red_tshirt"]), "caption": "a red tee"},
        {"id": "dress7", "path": "img/yellow_dress.png", "caption": "a yellow dress"},
        {"id": "nocap", "path": str(images["blue_tshirt"]), "caption": None},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return f


def test_dataset_lookup_by_path_relative_path_and_id(items_jsonl, images):
    cap = CAPTIONERS.build("dataset", {"path": str(items_jsonl)})
    assert cap.caption(images["red_tshirt"]) == "a red tee"
    assert cap.caption(images["yellow_dress"]) == "a yellow dress"  # relative path in the file
    assert cap.caption("img/yellow_dress") == "a yellow dress"  # gallery id = relative path, no suffix
    assert cap.caption("dress7") == "a yellow dress"  # by id
    assert cap.lookup("elsewhere/red_tshirt.jpg") == "a red tee"  # by id = file stem


def test_dataset_missing_caption_is_a_clear_error(items_jsonl, images):
    cap = CAPTIONERS.build("dataset", {"path": str(items_jsonl)})
    with pytest.raises(InputError) as e:
        cap.caption(images["blue_tshirt"])  # listed, but its caption is null
    assert str(e.value) == (
        f"captioner 'dataset': no caption for image '{images['blue_tshirt']}' in "
        f"'{items_jsonl}' (looked up by path and by id 'blue_tshirt')"
    )


def test_dataset_csv_with_another_caption_column(tmp_path):
    f = tmp_path / "gallery.csv"
    f.write_text("id,image,productDisplayName\n18862,images/18862.jpg,Puma Men Navy Polo\n13337,images/13337.jpg,\n")
    cap = CAPTIONERS.build("dataset", {"path": str(f), "caption_field": "productDisplayName"})
    assert cap.caption(tmp_path / "images" / "18862.jpg") == "Puma Men Navy Polo"
    assert cap.caption("18862") == "Puma Men Navy Polo"
    with pytest.raises(InputError, match="no caption for image '13337'"):
        cap.caption("13337")


def test_dataset_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="captioner 'dataset': field 'path' is empty"):
        CAPTIONERS.build("dataset", {}).caption(tmp_path / "x.jpg")
    with pytest.raises(InputError, match="captions file '.*nope.jsonl' does not exist"):
        CAPTIONERS.build("dataset", {"path": str(tmp_path / "nope.jsonl")}).caption(tmp_path / "x.jpg")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "caption": "x"}\n{oops\n')
    with pytest.raises(InputError, match="bad.jsonl' line 2 is not JSON"):
        CAPTIONERS.build("dataset", {"path": str(bad)}).caption("a")
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("id,image,title\n1,a.jpg,hello\n")
    with pytest.raises(
        InputError, match="has no column 'caption' \\(field 'caption_field'\\); its columns: id, image, title"
    ):
        CAPTIONERS.build("dataset", {"path": str(nocol)}).caption("1")
