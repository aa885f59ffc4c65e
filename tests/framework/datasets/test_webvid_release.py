"""WebVid-CoVR from a release's files (annotation/ + preload/, no videos): same queries, gallery
and masking as the authors' code (zbzzbzzbz/OCTOPUS src/compute_results.py)."""

from __future__ import annotations

import numpy as np
import pytest

from agentcir.framework.datasets.webvid_covr import WebVidCoVR
from agentcir.framework.errors import InputError
from agentcir.framework.recipe import compose
from agentcir.framework.runner import run_recipe

from .conftest import make_release

pytest.importorskip("torch")

ROWS = [(f"r/{i % 7}", f"t/{i}", f"edit {i}") for i in range(12)] + [("t/3", "t/12", "the reference is a target")]


def run(root, arch, tmp_path, *extra):
    recipe = compose(
        [
            "method=image_only",
            "dataset=webvid_covr",
            f"dataset.root={root}",
            "encoder=features",
            f"encoder.path={root}/preload",
            f"encoder.arch={arch}",
            f"run.root={tmp_path / 'runs'}",
            "run.progress=false",
            *extra,
        ]
    )
    return run_recipe(recipe, progress=False)


def authors_recalls(sim: np.ndarray, references, targets) -> dict[str, float]:
    """The authors' masking loop and eval_recall (query i's target is column i)."""
    sim = sim.copy()
    for i in range(len(references)):
        for j in range(len(targets)):
            if str(references[i]) == str(targets[j]):
                sim[i][j] = -10
    ranks = np.array([np.where(np.argsort(s)[::-1] == i)[0][0] for i, s in enumerate(sim)])
    r = {f"R@{k}": 100.0 * np.mean(ranks < k) for k in (1, 5, 10, 50)}
    return {**r, "meanR3": (r["R@1"] + r["R@5"] + r["R@10"]) / 3}


def test_loader_reads_the_release(tmp_path):
    root = make_release(tmp_path / "rel", ROWS, drop=[4])
    ds = WebVidCoVR(WebVidCoVR.Config(root=str(root)))
    items = ds.gallery_items()
    assert [it.id for it in items] == [t for i, (_, t, _) in enumerate(ROWS) if i != 4]  # the release's order
    assert items[0].path == "features:img_features/t/0" and items[0].caption == "caption of t/0"
    qs = ds.queries()
    assert [q.id for q in qs] == [str(i) for i in range(len(ROWS)) if i != 4]  # ids are CSV rows
    assert qs[0].reference == ["features:ref_img_features/r/0"] and qs[4].meta["release_row"] == 4
    assert "12 of 13 queries" in ds.subset_note()
    assert "1 target not in the release" in ds.subset_note()


def test_scores_as_the_authors_code(tmp_path):
    import pickle

    root = make_release(tmp_path / "rel", ROWS, dim=6)
    res = run(root, "ViT-B/32", tmp_path)
    load = lambda t: pickle.load(open(root / "preload" / t / "ViT-B/32_webvidcovr_test.pkl", "rb"))  # noqa: E731
    norm = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    img = norm(load("img_features")["index_features"].float().numpy())
    ref = norm(load("ref_img_features")["ref_features"].float().numpy())
    want = authors_recalls(ref @ img.T, [r for r, _, _ in ROWS], [t for _, t, _ in ROWS])
    got = res.metrics["final"]
    for k, v in want.items():
        assert got[k] == pytest.approx(v), k
    assert 0 < got["R@1"] < got["R@5"] <= 100


def test_missing_release_files_are_named(tmp_path):
    root = make_release(tmp_path / "rel", ROWS)
    (root / "preload" / "ref_img_features" / "ViT-B" / "32_webvidcovr_test.pkl").unlink()
    with pytest.raises(InputError, match="lacks ref_img_features/ViT-B/32_\\*.pkl"):
        WebVidCoVR(WebVidCoVR.Config(root=str(root))).gallery_items()
    empty = tmp_path / "empty"
    (empty / "preload").mkdir(parents=True)
    (empty / "webvid8m-covr_test.csv").write_text("pth1,pth2,edit\na,b,c\n")
    with pytest.raises(InputError, match="no img_features/<arch>_\\*.pkl under the release folder"):
        WebVidCoVR(WebVidCoVR.Config(root=str(empty))).gallery_items()


#: the authors' code (src/compute_results.py eval_recall, their masking) on the release's features,
#: image-only (reference frame . gallery): re-executed from their repository, per-query ranks equal too
RELEASE_IMAGE_ONLY = {
    "ViT-L/14": {"R@1": 38.53, "R@5": 62.69, "R@10": 71.81, "R@50": 89.23, "meanR3": 57.67, "meanR4": 65.56},
    "ViT-B/32": {"R@1": 32.30, "R@5": 55.52, "R@10": 64.06, "R@50": 82.18, "meanR3": 50.63, "meanR4": 58.52},
}


@pytest.mark.shared
@pytest.mark.parametrize("arch", list(RELEASE_IMAGE_ONLY))
def test_the_octopus_release_image_only(shared_dir, tmp_path, arch):
    root = shared_dir / "data" / "releases" / "octopus-webvid-covr"
    if not root.is_dir():
        pytest.skip(f"needs {root}")
    res = run(root, arch, tmp_path)
    assert res.metrics["num_queries"] == 2554 and res.metrics["gallery_size"] == 2554
    got = {k: round(v, 2) for k, v in res.metrics["final"].items()}
    assert got == RELEASE_IMAGE_ONLY[arch]
