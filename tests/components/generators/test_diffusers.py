"""generator=diffusers: the wiring, on a tiny randomly initialised Stable Diffusion pipeline
(UNet, VAE, CLIP text encoder and tokenizer built here and saved with save_pretrained)."""

import json

import pytest

from agentcir.framework.errors import InputError
from agentcir.registry import GENERATORS, ConfigError

pytest.importorskip(
    "diffusers", reason="generator 'diffusers' needs the [diffusion] extra (pip install 'agentcir[diffusion]')"
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def save_tiny_sd(folder, seed=0):
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"!": 0, "<|startoftext|>": 1, "<|endoftext|>": 2}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (folder / "v.json").write_text(json.dumps(vocab))
    (folder / "m.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(folder / "v.json"), str(folder / "m.txt"), model_max_length=16)
    torch.manual_seed(seed)
    text = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(vocab),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=16,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=2,
            projection_dim=16,
        )
    )
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16,
        norm_num_groups=4,
        attention_head_dim=2,
    )
    vae = AutoencoderKL(
        block_out_channels=(8,),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",),
        up_block_types=("UpDecoderBlock2D",),
        latent_channels=4,
        norm_num_groups=4,
        sample_size=16,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text,
        tokenizer=tok,
        unet=unet,
        scheduler=DDIMScheduler(steps_offset=1, clip_sample=False),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    pipe.save_pretrained(folder)
    (folder / "v.json").unlink()
    (folder / "m.txt").unlink()
    return folder


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory):
    return save_tiny_sd(tmp_path_factory.mktemp("sd"))


def test_text_to_image_and_image_to_image(tiny_sd, tmp_path, images):
    from PIL import Image

    cfg = {
        "model": str(tiny_sd),
        "steps": 2,
        "height": 16,
        "width": 16,
        "device": "cpu",
        "output_dir": str(tmp_path / "gen"),
    }
    gen = GENERATORS.build("diffusers", cfg)
    a = gen.generate("a red shirt")
    with Image.open(a) as im:
        assert im.size == (16, 16) and a.suffix == ".png" and a.parent == (tmp_path / "gen").resolve()
    assert gen.generate("a red shirt") == a  # seeded: same description, same image, same file
    assert gen.generate("a blue dress") != a
    edit = GENERATORS.build("diffusers", {**cfg, "use_reference": True, "strength": 0.5})
    b = edit.generate("a blue shirt", reference=images["red_tshirt"])
    with Image.open(b) as im:
        assert im.size == (16, 16)
    assert b != gen.generate("a blue shirt")
    assert {"text2img", "img2img"} <= set(edit._pipes)


def test_identity_and_bad_config(tiny_sd, tmp_path):
    a = GENERATORS.build("diffusers", {"model": str(tiny_sd)})
    assert GENERATORS.build("diffusers", {"model": str(tiny_sd), "device": "cuda"}).identity == a.identity
    assert GENERATORS.build("diffusers", {"model": str(tiny_sd), "seed": 1}).identity != a.identity
    with pytest.raises(ConfigError, match=r"field 'strength': must be within 0..1 and above 0, got 1.5"):
        GENERATORS.build("diffusers", {"strength": 1.5})
    with pytest.raises(ConfigError, match="field 'steps': must be at least 1, got 0"):
        GENERATORS.build("diffusers", {"steps": 0})
    gen = GENERATORS.build("diffusers", {"model": str(tmp_path / "none"), "local_files_only": True})
    with pytest.raises(InputError, match=r"generator 'diffusers': cannot load model '.*none'"):
        gen.generate("x")
