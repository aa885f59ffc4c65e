"""llm=transformers with image inputs: a tiny randomly initialised LLaVA (CLIP vision tower +
Llama) built here and loaded through AutoProcessor + AutoModelForImageTextToText."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from agentcir.framework.errors import InputError  # noqa: E402
from agentcir.framework.interfaces import user_message  # noqa: E402
from agentcir.registry import CAPTIONERS, LLMS, VERIFIERS  # noqa: E402

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
            "{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}"
            "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def save_tiny_llava(folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers as tr
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<eos>", "<image>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["a photo of a red dress", "make it blue", "yes no true false"], trainer)
    fast = tr.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>")
    fast.image_token = "<image>"
    vision = tr.CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2)
    text = tr.LlamaConfig(vocab_size=len(fast), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                          eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    cfg = tr.LlavaConfig(vision_config=vision, text_config=text, image_token_index=fast.convert_tokens_to_ids("<image>"),
                         vision_feature_layer=-1, vision_feature_select_strategy="default")
    torch.manual_seed(seed)
    tr.LlavaForConditionalGeneration(cfg).save_pretrained(folder)
    images = tr.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    tr.LlavaProcessor(image_processor=images, tokenizer=fast, patch_size=8, num_additional_image_tokens=1,
                      vision_feature_select_strategy="default", chat_template=TEMPLATE,
                      image_token="<image>").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    return save_tiny_llava(tmp_path_factory.mktemp("tiny-llava"))


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    from PIL import Image

    d = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    out = []
    for i in range(2):
        p = d / f"p{i}.png"
        Image.fromarray(rng.integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(p)
        out.append(p)
    return out


def test_images_reach_the_model_through_the_processor(tiny_vlm, photos):
    import torch
    import transformers as tr
    from PIL import Image

    llm = LLMS.build("transformers", {"model": str(tiny_vlm), "max_new_tokens": 5})
    assert llm.vision and not llm.loaded  # detected from the folder's files; nothing loaded
    msgs = [user_message("describe it", [photos[0]])]
    prompt = llm.render(msgs)
    assert prompt == "<|im_start|>user\ndescribe it<image><|im_end|>\n<|im_start|>assistant\n"
    reply = llm.chat(msgs).text
    # the same as the processor and the model called directly (greedy)
    proc = tr.AutoProcessor.from_pretrained(tiny_vlm, local_files_only=True)
    model = tr.AutoModelForImageTextToText.from_pretrained(tiny_vlm, local_files_only=True).eval()
    enc = proc(text=prompt, images=[Image.open(photos[0]).convert("RGB")], return_tensors="pt")
    n_image_tokens = int((enc["input_ids"] == model.config.image_token_index).sum())
    assert n_image_tokens == 16  # (32 / 8)^2 patches
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=5, do_sample=False, pad_token_id=proc.tokenizer.pad_token_id)
    assert reply == proc.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()
    # the image changes the input: another photo gives other pixels to the vision tower
    enc2 = proc(text=prompt, images=[Image.open(photos[1]).convert("RGB")], return_tensors="pt")
    assert not torch.equal(enc["pixel_values"], enc2["pixel_values"])
    # text-only messages work on the VLM too
    assert isinstance(llm.chat([user_message("make it blue")]).text, str)


def test_vlm_captioner_and_verifier_run_on_the_local_model(tiny_vlm, photos):
    llm = LLMS.build("transformers", {"model": str(tiny_vlm), "max_new_tokens": 4})
    cap = CAPTIONERS.build("vlm", {}, llm=llm)
    text = cap.caption(photos[0])  # the prompt file tasks/caption and the image, on the local model
    raw = llm.chat([user_message(cap.prompt("prompt").render({}), [photos[0]])]).text
    assert text and text in raw.replace("\n", " ") or text == raw.strip().strip('"')
    ver = VERIFIERS.build("vlm", {"unclear": "no"}, llm=llm)
    assert ver.verify(photos[1], "make it red", reference=photos[0]) is False  # a random model's reply is unclear: no


def test_vision_switch_and_text_only_models(tiny_vlm, tmp_path, photos):
    assert LLMS.build("transformers", {"model": str(tiny_vlm), "vision": "false"}).vision is False
    with pytest.raises(InputError, match="vision must be one of auto, true, false"):
        LLMS.build("transformers", {"model": str(tiny_vlm), "vision": "maybe"})
    from .test_transformers import save_tiny

    text_only = LLMS.build("transformers", {"model": str(save_tiny(tmp_path / "llama", seed=0)), "max_new_tokens": 2})
    assert text_only.vision is False
    with pytest.raises(InputError, match="text-only"):
        text_only.run_task("caption", {}, images=[photos[0]])
