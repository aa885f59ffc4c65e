"""ONNX export (`agentcir export-onnx`) and the onnx encoder: parity with torch on real photos,
the CLI, missing folders, providers, and the transformers backend's export."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.registry import ENCODERS

from .conftest import make_hf_model

pytest.importorskip("onnxruntime", reason="needs the onnx extra: pip install 'agentcir[onnx]'")
pytest.importorskip("onnx", reason="needs the onnx extra: pip install 'agentcir[onnx]'")

TEXTS = [
    "a navy blue shirt for men",
    "Puma Men Graffiti Navy Blue Polo Tshirt",
    "x",
    "Ünïcödé café, 100% cotton!",
    "a very long product description " * 80,
]


# one worker runs the module, so that the export below is made once
pytestmark = pytest.mark.xdist_group("onnx")


@pytest.fixture(scope="module")
def exported(catalog_encoder, tmp_path_factory):
    """The bundled catalog encoder exported through the command line."""
    from agentcir.cli import main

    out = tmp_path_factory.mktemp("onnx") / "catalog"
    assert main(["export-onnx", "encoder=catalog", "--out", str(out)]) == 0
    return out


def test_export_writes_both_towers_and_metadata(exported, catalog_encoder):
    assert sorted(p.name for p in exported.iterdir()) == ["encoder.json", "image.onnx", "text.onnx", "tokenizer.json"]
    meta = json.loads((exported / "encoder.json").read_text())
    assert meta["dim"] == 384 and meta["source"] == {
        "key": "catalog",
        "identity": catalog_encoder.identity,
        "model_identity": catalog_encoder.model_identity(),
    }
    assert meta["text_inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert meta["preprocess"] == catalog_encoder.preprocess_spec and meta["tokenizer"]["max_length"] == 256


def test_parity_with_torch_on_real_photos_and_texts(exported, catalog_encoder, demo_photos):
    onnx = ENCODERS.build("onnx", {"path": str(exported)})
    photos = demo_photos[:48]
    a, b = catalog_encoder.encode_images(photos), onnx.encode_images(photos, batch_size=16)
    assert b.shape == (48, 384)
    assert np.abs(a - b).max() <= 1e-4
    t, u = catalog_encoder.encode_texts(TEXTS), onnx.encode_texts(TEXTS)
    assert np.abs(t - u).max() <= 1e-4
    assert onnx.providers == ["CPUExecutionProvider"]  # this machine; CUDA first where onnxruntime has it
    # another model, not the torch encoder under another name: its own identity
    assert onnx.identity != catalog_encoder.identity


def test_broken_images_are_skipped_too(exported, image_folder):
    onnx = ENCODERS.build("onnx", {"path": str(exported)})
    skipped = []
    emb = onnx.encode_images(
        sorted(p for p in image_folder.rglob("*") if p.suffix in (".jpg", ".png")), skipped=skipped
    )
    assert emb.shape == (12, 384) and [s.path.endswith("broken.jpg") for s in skipped] == [True]


def test_missing_export_and_bad_provider(tmp_path, exported):
    enc = ENCODERS.build("onnx", {"path": str(tmp_path / "none")})  # building needs no files
    assert "not exported yet" in enc.model_identity()
    with pytest.raises(InputError) as e:
        enc.encode_texts(["x"])
    assert "lacks image.onnx, text.onnx, tokenizer.json, encoder.json" in str(e.value)
    assert f"agentcir export-onnx encoder=catalog --out {tmp_path / 'none'}" in str(e.value)
    bad = ENCODERS.build("onnx", {"path": str(exported), "providers": "NoSuchExecutionProvider"})
    with pytest.raises(InputError, match="provider\\(s\\) NoSuchExecutionProvider not available"):
        bad.encode_texts(["x"])


def test_export_cli_refuses_encoders_without_towers(tmp_path, plugin_path, capsys):
    from agentcir.cli import main

    (tmp_path / "recipes" / "encoder").mkdir(parents=True)
    (tmp_path / "recipes" / "encoder" / "toy.yaml").write_text("name: toy\n")
    assert (
        main(["export-onnx", "encoder=toy", "--recipes", str(tmp_path / "recipes"), "--out", str(tmp_path / "x")]) == 2
    )
    assert "encoder 'toy' cannot be exported to ONNX (exportable encoders: catalog, hf_clip)" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_transformers_models_export_too(tmp_path, kind, demo_photos):
    from agentcir.components.encoders.onnx import export_onnx

    enc = ENCODERS.build("hf_clip", {"path": str(make_hf_model(tmp_path / kind, kind))})
    onnx = ENCODERS.build("onnx", {"path": str(export_onnx(enc, tmp_path / "out"))})
    texts = ["a photo of a red shirt", "a dog", "the cat"]
    assert np.abs(enc.encode_images(demo_photos[:4]) - onnx.encode_images(demo_photos[:4])).max() <= 1e-4
    assert np.abs(enc.encode_texts(texts) - onnx.encode_texts(texts)).max() <= 1e-4
