"""The local transformers LLM on a tiny, randomly initialised Llama saved with save_pretrained."""

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from agentcir.framework.parsing import ReplyParseError  # noqa: E402
from agentcir.components.llms.transformers import TransformersLLM  # noqa: E402
from agentcir.framework.errors import InputError  # noqa: E402
from agentcir.framework.interfaces import user_message  # noqa: E402
from agentcir.registry import LLMS, ConfigError  # noqa: E402

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def save_tiny(folder, seed: int, template: bool = True):
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(
        ["a photo of a red dress", "make it blue", '{"caption": "a dog"}', "true false yes no"], trainer
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>"
    )
    if template:
        fast.chat_template = TEMPLATE
    fast.save_pretrained(folder)
    cfg = transformers.LlamaConfig(
        vocab_size=len(fast),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny-llama"), seed=0)


def test_lazy_loading_and_greedy_chat(tiny):
    import torch

    llm = LLMS.build("transformers", {"model": str(tiny), "max_new_tokens": 6})
    ident = llm.identity
    assert not llm.loaded  # building and identifying load nothing
    msgs = [user_message("make it blue")]
    prompt = llm.render(msgs)
    assert llm.loaded
    assert prompt == "<|im_start|>user\nmake it blue<|im_end|>\n<|im_start|>assistant\n"
    reply = llm.chat(msgs)
    assert reply.text == llm.chat(msgs).text and reply.tool_calls == []
    # the reply is the greedy continuation of the chat-templated prompt, at most max_new_tokens long
    model, tok = llm._model, llm._tokenizer
    enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] - enc["input_ids"].shape[1] <= 6
    assert reply.text == tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    assert llm.identity == ident


def test_plain_prompt_without_a_chat_template(tmp_path):
    folder = save_tiny(tmp_path / "plain", seed=0, template=False)
    llm = LLMS.build("transformers", {"model": str(folder), "max_new_tokens": 3})
    assert llm.render([user_message("make it blue")]) == "make it blue"
    assert (
        llm.render([{"role": "system", "content": "be brief"}, user_message("hi")])
        == "System: be brief\nUser: hi\nAssistant:"
    )
    assert isinstance(llm.chat([user_message("hi")]).text, str)


def test_task_reply_that_never_parses_raises_after_retries(tiny):
    llm = LLMS.build("transformers", {"model": str(tiny), "max_new_tokens": 4, "parse_retries": 1})
    with pytest.raises(
        ReplyParseError,
        match=r"llm 'transformers': could not parse JSON from the reply to LLM task 'rewrite_caption'.*\(after 2 attempt\(s\)\)",
    ):
        llm.run_task("rewrite_caption", {"reference_caption": "a red dress", "modification": "make it blue"})


def test_identity_follows_the_weights(tiny, tmp_path):
    a = LLMS.build("transformers", {"model": str(tiny)})
    other = save_tiny(tmp_path / "other", seed=1)
    b = LLMS.build("transformers", {"model": str(other)})
    c = LLMS.build("transformers", {"model": str(tiny), "max_new_tokens": 7})
    d = LLMS.build("transformers", {"model": str(tiny), "device": "cpu", "parse_retries": 3})
    assert a.model_identity().startswith("weights:") and a.identity != b.identity
    assert a.identity != c.identity and a.identity == d.identity
    assert (
        LLMS.build("transformers", {"model": "org/not-cached-model"}).model_identity()
        == "hf:org/not-cached-model@default"
    )


def test_text_only_and_missing_weights(tiny, tmp_path):
    llm = LLMS.build("transformers", {"model": str(tiny)})
    with pytest.raises(InputError, match="llm 'transformers' is text-only and cannot read the 1 image"):
        llm.run_task("target_caption", {"reference_caption": "a", "modification": "b"}, images=[tmp_path / "x.jpg"])
    missing = LLMS.build("transformers", {"model": str(tmp_path / "no-model")})  # building is fine
    with pytest.raises(
        InputError, match=r"llm 'transformers': cannot load model '.*no-model'.*nothing is downloaded at run time"
    ):
        missing.chat([user_message("hi")])
    with pytest.raises(ConfigError, match="field 'dtype': must be one of auto, float32, bfloat16, float16"):
        LLMS.build("transformers", {"dtype": "int3"})


def test_tool_call_parsing():
    text, calls = TransformersLLM._tool_calls(
        'Let me look.<tool_call>{"name": "image_search", "arguments": {"query": "cat"}}</tool_call>'
    )
    assert text == "Let me look." and [(c.name, c.arguments) for c in calls] == [("image_search", {"query": "cat"})]
    text, calls = TransformersLLM._tool_calls('{"name": "view_photos", "parameters": {"ids": ["a"]}}')
    assert text == "" and calls[0].name == "view_photos" and calls[0].arguments == {"ids": ["a"]}
    assert TransformersLLM._tool_calls('{"caption": "a dog"}') == ('{"caption": "a dog"}', [])
