"""The image editors: ``openai_edits`` against a scripted images API on 127.0.0.1,
``diffusers`` on a tiny random InstructPix2Pix pipeline built here, the offline stand-ins, and
edits through ``ctx.call`` (cached: a second run calls nothing, a vanished file is redone)."""

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agentcir.framework.errors import InputError
from agentcir.registry import EDITORS


def test_none_returns_the_image_and_recolour_tints_it(images, tmp_path):
    red = images["red_tshirt"]
    assert EDITORS.build("none", {}).edit(red, "make it blue") == Path(red).resolve()
    rec = EDITORS.build("recolour", {"output_dir": str(tmp_path / "ed")})
    out = rec.edit(red, "swap the red for blue")
    assert out.parent == (tmp_path / "ed").resolve() and out != Path(red).resolve()
    px = np.asarray(Image.open(out).convert("RGB"), np.float32)
    fg = ~(px >= 235).all(-1)
    assert px[fg][:, 2].mean() > px[fg][:, 0].mean()  # blue dominates where red did
    assert rec.edit(red, "swap the red for blue") == out  # content-addressed: the same file
    assert rec.edit(red, "a longer sleeve") == Path(red).resolve()  # no colour named: unchanged
    with pytest.raises(InputError, match="editor 'recolour': image '.*nope.png' does not exist"):
        rec.edit(tmp_path / "nope.png", "blue")


def test_openai_edits_uploads_the_image_and_saves_the_reply(images, tmp_path):
    pytest.importorskip("httpx", reason="editor 'openai_edits' needs the [llm] extra")
    from agentcir.testing.server import ScriptedServer, Step, error_body, image_edit_reply, multipart_fields

    with ScriptedServer() as srv:
        srv.script(
            "/images/edits",
            [Step(status=503, json=error_body("busy"), headers={"Retry-After": "0"}), image_edit_reply()],
        )
        ed = EDITORS.build(
            "openai_edits",
            {
                "base_url": srv.base_url,
                "model": "edit-1",
                "api_key": "k",
                "size": "",
                "extra": {"input_fidelity": "high"},
                "output_dir": str(tmp_path / "ed"),
                "backoff": 0.0,
            },
        )
        out = ed.edit(images["red_yellow"], "mirror it")
        sent = srv.requests_to("/images/edits")
        assert len(sent) == 2  # the 503 was retried
        fields = multipart_fields(sent[-1])
        assert fields["prompt"] == b"mirror it" and fields["model"] == b"edit-1"
        assert fields["input_fidelity"] == b"high" and "size" not in fields
        assert sent[-1].headers["authorization"] == "Bearer k"
        with Image.open(images["red_yellow"]) as a, Image.open(out) as b:
            a, b = np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB"))
            assert not np.array_equal(a, b) and np.array_equal(b[:, ::-1], a)
        assert out.parent == (tmp_path / "ed").resolve()
        srv.script("/images/edits", Step(status=400, json=error_body("bad prompt", "invalid_request_error")))
        with pytest.raises(
            Exception, match=r"editor 'openai_edits': POST .*/images/edits failed with HTTP 400: bad prompt"
        ):
            ed.edit(images["red_tshirt"], "again")
        with pytest.raises(InputError, match="non-empty text"):
            ed.edit(images["red_tshirt"], " ")
    base = EDITORS.build("openai_edits", {"model": "m"})
    assert EDITORS.build("openai_edits", {"model": "m", "base_url": "http://x/v1"}).identity == base.identity
    assert EDITORS.build("openai_edits", {"model": "m", "extra": {"a": 1}}).identity != base.identity


def test_edits_go_through_the_call_cache(images, tmp_path):
    from agentcir.framework.cache import CallCache
    from agentcir.framework.runner import RunContext

    cache = CallCache(str(tmp_path / "c.sqlite"))
    ed = EDITORS.build("recolour", {"output_dir": str(tmp_path / "ed")})

    def run():
        ctx = RunContext(cache=cache, run_dir=None)
        ctx.stage = "edit"
        out = asyncio.run(ctx.call(ed, "edit", image=images["red_tshirt"], instruction="make it green"))
        return out, ctx.stats["edit"]

    out, st = run()
    assert (st.calls, st.cache_hits) == (1, 0)
    again, st = run()
    assert again == out and (st.calls, st.cache_hits) == (0, 1)
    Path(out).unlink()  # a cleaned folder: the edit is made again, not read as a missing file
    redo, st = run()
    assert Path(redo).is_file() and st.calls == 1


def test_recipe_group_and_plan_counting(tmp_path):
    from agentcir.framework.recipe import compose
    from agentcir.framework.runner import resolve_run_dir

    plain = compose([f"run.root={tmp_path}"])
    assert plain["editor"] == {"name": "none"}
    edited = compose([f"run.root={tmp_path}", "editor=recolour"])
    assert edited["editor"]["name"] == "recolour" and edited["editor"]["background"] == 235
    assert resolve_run_dir(edited) != resolve_run_dir(plain)
    no_group = {k: v for k, v in plain.items() if k != "editor"}  # a recipe from before the editor group
    assert resolve_run_dir(no_group) == resolve_run_dir(plain)
    from agentcir.framework.plan import OPS

    assert OPS["editor"] == ("edit",)


def save_tiny_pix2pix(folder, seed=0):
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionInstructPix2PixPipeline, UNet2DConditionModel
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
        in_channels=8,
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
    pipe = StableDiffusionInstructPix2PixPipeline(
        vae=vae,
        text_encoder=text,
        tokenizer=tok,
        unet=unet,
        scheduler=DDIMScheduler(steps_offset=1, clip_sample=False),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(folder)
    (folder / "v.json").unlink()
    (folder / "m.txt").unlink()
    return folder


@pytest.mark.usefixtures("torch_one_thread")
def test_diffusers_edits_with_a_tiny_instruct_pix2pix(images, tmp_path):
    pytest.importorskip("diffusers", reason="editor 'diffusers' needs the [diffusion] extra")
    model = save_tiny_pix2pix(tmp_path / "p2p")
    cfg = {
        "model": str(model),
        "steps": 2,
        "height": 16,
        "width": 16,
        "device": "cpu",
        "output_dir": str(tmp_path / "ed"),
    }
    ed = EDITORS.build("diffusers", cfg)
    a = ed.edit(images["red_tshirt"], "make it blue")
    with Image.open(a) as im:
        assert im.size == (16, 16) and a.parent == (tmp_path / "ed").resolve()
    assert type(ed.pipeline()).__name__ == "StableDiffusionInstructPix2PixPipeline"
    assert ed.edit(images["red_tshirt"], "make it blue") == a  # seeded: the same edit, the same file
    assert ed.edit(images["blue_tshirt"], "make it blue") != a
    assert EDITORS.build("diffusers", {**cfg, "device": "cuda"}).identity == ed.identity
    assert EDITORS.build("diffusers", {**cfg, "seed": 1}).identity != ed.identity
    with pytest.raises(InputError, match="set both 'height' and 'width'"):
        EDITORS.build("diffusers", {"height": 8})
