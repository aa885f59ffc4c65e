"""verifier=vlm (tasks verify / answer) and verifier=entailment (task entail), through a
scripted LLM: prompts rendered from the real prompt files, replies parsed strictly."""

import asyncio

import pytest

from agentcir.framework.parsing import ReplyParseError
from agentcir.framework.errors import InputError
from agentcir.registry import VERIFIERS, ConfigError


def test_vlm_verify_sends_reference_then_candidate(scripted, images):
    llm = scripted(["Yes, the colour changed to blue.", "No, it is still red.", "Not sure", "I know"])
    v = VERIFIERS.build("vlm", {}, llm=llm)
    ref, cand = images["red_tshirt"], images["blue_tshirt"]
    assert v.verify(cand, "make it blue", reference=ref, reference_caption="a red t-shirt") is True
    call = llm.calls[0]
    assert call["images"] == [str(ref), str(cand)]
    assert "modification of it: make it blue" in call["text"] and "Its caption: a red t-shirt" in call["text"]
    assert v.verify(cand, "make it blue", reference=ref) is False
    assert "Its caption: unknown" in llm.calls[1]["text"]
    # unclear replies ("Not sure", "I know") count as no by default, never as a substring "no"
    assert v.verify(cand, "make it blue", reference=ref) is False
    assert v.verify(cand, "make it blue", reference=ref) is False


def test_vlm_verify_with_only_the_reference_caption(scripted, images):
    llm = scripted(["yes"])
    v = VERIFIERS.build("vlm", {}, llm=llm)
    assert v.verify(images["blue_tshirt"], "make it blue", reference_caption="a red t-shirt") is True
    assert llm.calls[0]["images"] == [str(images["blue_tshirt"])]
    assert "has this caption: a red t-shirt" in llm.calls[0]["text"]
    with pytest.raises(InputError, match="verify needs the reference image or the reference's caption"):
        v.verify(images["blue_tshirt"], "make it blue")


def test_vlm_check_answers_true_false(scripted, images):
    llm = scripted(["True.", "False - the sleeves are short", "false"])
    v = VERIFIERS.build("vlm", {}, llm=llm)
    assert v.check("The shirt is red", candidate=images["red_tshirt"]) is True
    assert v.check("The shirt has long sleeves", candidate=images["red_tshirt"]) is False
    assert (
        llm.calls[0]["images"] == [str(images["red_tshirt"])] and "Statement: The shirt is red" in llm.calls[0]["text"]
    )
    with pytest.raises(InputError, match="check needs the candidate image"):
        v.check("The shirt is red", caption="a red shirt")


def test_vlm_check_released_reading_is_xr_s_yes_substring(scripted, images):
    # XR's released image path: 'True' if 'yes' in reply.lower() else 'False' (no parse, no retry)
    llm = scripted(["Yes.", "No", "I cannot say; eyes closed", "It is unclear"])
    v = VERIFIERS.build("vlm", {"reading": "released", "answer_prompt": "xr/answer_released"}, llm=llm)
    got = [v.check("Is the shirt red?", candidate=images["red_tshirt"]) for _ in range(4)]
    assert got == [True, False, True, False]
    assert llm.calls[0]["text"].strip() == "Answer the question with Yes or No. Is the shirt red?"
    assert len(llm.calls) == 4  # an unclear reply is not asked again
    # the async path (the pipeline runner's acheck) reads the same way
    llm = scripted(["Yes.", "No", "I cannot say; eyes closed", "It is unclear"])
    v = VERIFIERS.build("vlm", {"reading": "released", "answer_prompt": "xr/answer_released"}, llm=llm)
    got = [asyncio.run(v.acheck("Is the shirt red?", candidate=images["red_tshirt"])) for _ in range(4)]
    assert got == [True, False, True, False] and len(llm.calls) == 4
    with pytest.raises(ConfigError, match="field 'reading': must be one of strict, released, got 'loose'"):
        VERIFIERS.build("vlm", {"reading": "loose"}, llm=scripted())


def test_unclear_policy(scripted, images):
    v = VERIFIERS.build("vlm", {"unclear": "error"}, llm=scripted(["It depends on the lighting"]))
    with pytest.raises(ReplyParseError, match="true/false answer of verifier 'vlm' for .*'It depends on the lighting'"):
        v.check("The shirt is red", candidate=images["red_tshirt"])
    v = VERIFIERS.build("vlm", {"unclear": "yes"}, llm=scripted(["hmm"]))
    assert v.check("The shirt is red", candidate=images["red_tshirt"]) is True
    with pytest.raises(ConfigError, match="field 'unclear': must be one of no, yes, error"):
        VERIFIERS.build("vlm", {"unclear": "maybe"}, llm=scripted())


def test_entailment_check_and_verify(scripted, images):
    llm = scripted(["true", "No.", "TRUE"])
    v = VERIFIERS.build("entailment", {}, llm=llm)
    assert v.check("the shirt is red", caption="a red cotton t-shirt") is True
    call = llm.calls[0]
    assert call["images"] == [] and "Caption of an image: a red cotton t-shirt" in call["text"]
    assert "Statement: the shirt is red" in call["text"]
    assert v.check("the shirt is blue", candidate=images["red_tshirt"], caption="a red cotton t-shirt") is False
    assert (
        v.verify(images["blue_tshirt"], "a blue t-shirt", caption="a blue tee", reference=images["red_tshirt"]) is True
    )
    assert "Statement: a blue t-shirt" in llm.calls[2]["text"]
    with pytest.raises(InputError, match="verifier 'entailment' needs the candidate's caption .* for .*red_tshirt.png"):
        v.check("the shirt is red", candidate=images["red_tshirt"])


def test_prompt_files_are_part_of_the_identity(scripted, tmp_path):
    llm = scripted()
    base = VERIFIERS.build("vlm", {}, llm=llm)
    p = tmp_path / "answer.txt"
    p.write_text("Is this true: {{statement}}? true or false.")
    custom = VERIFIERS.build("vlm", {"answer_prompt": str(p)}, llm=llm)
    assert custom.identity != base.identity
    p.write_text("Is this statement true: {{statement}}? Reply true or false.")
    assert VERIFIERS.build("vlm", {"answer_prompt": str(p)}, llm=llm).identity != custom.identity
    assert VERIFIERS.build("vlm", {"unclear": "error"}, llm=llm).identity != base.identity
    other_llm = scripted()
    other_llm.cfg.tag = "another model"
    assert VERIFIERS.build("vlm", {}, llm=other_llm).identity != base.identity


def test_entailment_with_the_offline_rules_llm(images):
    """verifier=entailment runs offline: the rules LLM implements task `entail`."""
    from agentcir.registry import LLMS

    v = VERIFIERS.build("entailment", {}, llm=LLMS.build("rules", {}))
    assert v.check("the shirt is blue", caption="a blue cotton shirt for men") is True
    assert v.check("the shirt is red", caption="a blue cotton shirt for men") is False
    assert v.verify(images["blue_tshirt"], "a blue shirt", caption="a blue cotton shirt for men") is True


def test_a_backend_that_gives_up_on_an_unclear_reply_follows_the_policy(scripted, images):
    """Prompted backends ask again and then raise ReplyParseError themselves: same policy."""
    from agentcir.framework.parsing import ReplyParseError as RPE

    llm = scripted()
    llm.run_task = lambda *a, **k: (_ for _ in ()).throw(RPE("could not read a yes/no answer from the reply: 'hm'"))
    assert (
        VERIFIERS.build("vlm", {}, llm=llm).verify(images["blue_tshirt"], "blue", reference=images["red_tshirt"])
        is False
    )
    with pytest.raises(RPE, match="'hm'"):
        VERIFIERS.build("vlm", {"unclear": "error"}, llm=llm).verify(
            images["blue_tshirt"], "blue", reference=images["red_tshirt"]
        )
