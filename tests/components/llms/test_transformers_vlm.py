"""``llm=transformers`` with an image-text-to-text model: a tiny, randomly initialised LLaVA
(CLIP vision tower + Llama) built and saved here, loaded back through AutoProcessor /
AutoModelForImageTextToText, so the VLM components run without a server."""

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from PIL import Image  # noqa: E402

from agentcir.framework.interfaces import user_message  # noqa: E402
from agentcir.registry import LLMS, VERIFIERS  # noqa: E402

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def save_tiny_llava(folder):
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<eos>", "<image>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["a photo of a red dress", "make it blue", "true false yes no"], trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>"
    )
    images = transformers.CLIPImageProcessorPil(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    transformers.LlavaProcessor(
        image_processor=images,
        tokenizer=fast,
        patch_size=8,
        vision_feature_select_strategy="default",
        chat_template=TEMPLATE,
        image_token="<image>",
        num_additional_image_tokens=1,
    ).save_pretrained(folder)
    cfg = transformers.LlavaConfig(
        vision_config=transformers.CLIPVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=16,
            patch_size=8,
            projection_dim=16,
        ),
        text_config=transformers.LlamaConfig(
            vocab_size=len(fast),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=512,
            eos_token_id=fast.eos_token_id,
            pad_token_id=fast.pad_token_id,
        ),
        image_token_index=fast.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(0)
    transformers.LlavaForConditionalGeneration(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    return save_tiny_llava(tmp_path_factory.mktemp("tiny-llava"))


@pytest.fixture()
def photos(tmp_path):
    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    Image.new("RGB", (40, 30), (200, 10, 10)).save(red)
    Image.new("RGB", (30, 40), (10, 10, 200)).save(blue)
    return red, blue


def test_a_vlm_is_recognised_from_its_config_without_loading(tiny_vlm):
    llm = LLMS.build("transformers", {"model": str(tiny_vlm), "max_new_tokens": 4})
    assert llm.vision and not llm.loaded


def test_images_reach_the_model_through_the_processor_in_order(tiny_vlm, photos):
    import torch

    red, blue = photos
    llm = LLMS.build("transformers", {"model": str(tiny_vlm), "max_new_tokens": 4})
    msgs = [user_message("which is red?", [red, blue])]
    assert llm.render(msgs) == "<|im_start|>user\nwhich is red?<image><image><|im_end|>\n<|im_start|>assistant\n"
    seen = {}
    generate = llm._model.generate

    def spy(**kw):
        seen.update(kw)
        return generate(**kw)

    llm._model.generate = spy
    reply = llm.chat(msgs)
    assert isinstance(reply.text, str) and reply.tool_calls == []
    # the pixels are the processor's for the two files, in message order
    expect = llm._processor(
        images=[Image.open(red).convert("RGB"), Image.open(blue).convert("RGB")], return_tensors="pt"
    )["pixel_values"]
    assert torch.equal(seen["pixel_values"], expect)
    assert int((seen["input_ids"] == llm._model.config.image_token_index).sum()) == 2 * 4  # 4 tokens per image
    # the image changes what the model computes
    with torch.inference_mode():
        a = llm._model(**{k: v for k, v in seen.items() if k in ("input_ids", "attention_mask", "pixel_values")})
        b = llm._model(
            input_ids=seen["input_ids"],
            attention_mask=seen["attention_mask"],
            pixel_values=seen["pixel_values"].flip(0),
        )
    assert float((a.logits[0, -1] - b.logits[0, -1]).abs().max()) > 0


def test_text_messages_still_work_on_a_vlm(tiny_vlm):
    llm = LLMS.build("transformers", {"model": str(tiny_vlm), "max_new_tokens": 3})
    assert llm.render([user_message("hi")]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert isinstance(llm.chat([user_message("hi")]).text, str)


def test_verifier_vlm_on_a_local_vlm(tiny_vlm, photos):
    # verifier=vlm asks task `answer` with the candidate image; any reply is read (unclear -> no)
    llm = LLMS.build("transformers", {"model": str(tiny_vlm), "max_new_tokens": 3, "parse_retries": 0})
    v = VERIFIERS.build("vlm", {}, llm=llm)
    assert v.check("The shirt is red", candidate=photos[0]) in (True, False)
