"""The fast subset of ``benchmarks/ann_crossmodal.py``: 5,000 rows expanded from a few hundred
clustered embeddings, a handful of queries, one knob value per index; its recall figures lie in
[0, 1], its ground truth is the exact top-100, and a rerun reuses every cached part."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")
pytest.importorskip("hnswlib")
pytest.importorskip("usearch")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # a few seconds: six small index builds


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("ann_crossmodal", ROOT / "benchmarks" / "ann_crossmodal.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    sys.path.remove(str(ROOT / "benchmarks"))


def embeddings(path: Path, n: int = 300, d: int = 32) -> None:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((20, d))
    img = centres[rng.integers(0, 20, n)] + 0.4 * rng.standard_normal((n, d))
    txt = img + 0.8 * rng.standard_normal((n, d))  # text near its photo, off the image manifold
    unit = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    np.savez(path, image=unit(img), names=unit(txt), templates=unit(txt[::-1].copy()))


def test_small_run_is_exact_bounded_and_resumes(bench, tmp_path, capsys):
    emb = tmp_path / "emb.npz"
    embeddings(emb)
    out, js = tmp_path / "out", tmp_path / "r.json"
    argv = ["--n", "5000", "--embeddings", str(emb), "--text-queries", "6", "--image-queries", "6", "--quick",
            "--octopus-n", "0", "--build-threads", "1", "--out", str(out), "--json", str(js)]  # fmt: skip
    assert bench.main(argv) == 0
    r = json.loads(js.read_text())
    assert set(r["indexes"]) == set(bench.QUICK)
    for res in r["indexes"].values():
        for key in ("text@10", "text@100", "image@10", "image@100"):
            pts = res[key]["points"]
            assert len(pts) == 1 and 0.0 <= pts[0]["recall"] <= 1.0 and pts[0]["qps"] > 0
        assert res["build"]["bytes"] > 0
    # the synthetic rows are noisy copies with the real rows' 10-NN similarity (within the noise of 500 rows)
    nb = r["set"]["neighbours"]
    assert abs(nb["synthetic"]["nn10"]["median"] - nb["real"]["nn10"]["median"]) < 0.1
    # the ground truth is the exact top-100 (numpy brute force)
    d = Path(r["set_dir"])
    G = np.load(d / "gallery.npy")
    assert G.shape == (5000, 32) and np.allclose(np.linalg.norm(G, axis=1), 1, atol=1e-5)
    for name in ("text", "image"):
        z = np.load(d / f"gt_{name}.npz")
        S = z["queries"] @ G.T
        ref = np.argsort(-S, axis=1, kind="stable")[:, :100]
        assert np.allclose(np.take_along_axis(S, z["ids"], 1), np.take_along_axis(S, ref, 1), atol=1e-5)
        assert (np.diff(z["scores"], axis=1) <= 1e-6).all()
    # a rerun builds nothing: every sweep's result is reused
    capsys.readouterr()
    assert bench.main(argv) == 0
    logged = capsys.readouterr().out
    assert "building" not in logged and logged.count(": reused") == len(bench.QUICK)
    assert json.loads(js.read_text())["indexes"] == r["indexes"]
