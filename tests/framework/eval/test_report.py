"""`agentcir eval`: per-run tables, --compare (a table + PNG per benchmark), FashionIQ averages, --submit, --best-of."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from agentcir.cli import main
from agentcir.framework.report import comparison_rows, load_run, plot_comparison


def make_run(root: Path, name: str, final: dict, dataset: dict, method: str = "image_only", stages=None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(
        json.dumps(
            {
                "final": final,
                "stages": stages or {},
                "subset": f"subset of {name}",
                "num_queries": 3,
                "gallery_size": 10,
                "gallery_skipped": 0,
            }
        )
    )
    (d / "recipe.yaml").write_text(
        yaml.safe_dump({"method": {"name": method, "top_k": 50}, "dataset": dataset, "run": {"root": str(root)}})
    )
    return d


def test_compare_prints_one_table_and_writes_a_png(tmp_path, capsys):
    from PIL import Image

    a = make_run(tmp_path, "runA", {"mAP@10": 30.0, "R@1": 20.0, "mAP@10/negation": 5.0}, {"name": "demo", "limit": 0})
    b = make_run(tmp_path, "runB", {"mAP@10": 45.5, "R@1": 25.0}, {"name": "demo", "limit": 0}, method="text_only")
    png = tmp_path / "out" / "cmp.png"
    assert main(["eval", "--compare", str(a), str(b), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "## demo" in out and "| | mAP@10 | R@1 | mAP@10/negation |" in out
    assert "| method=image_only | 30.00 | 20.00 | **5.00** |" in out  # the best value per column in bold
    assert (
        "| method=text_only | **45.50** | **25.00** |  |" in out and f"- method=image_only: {a} (subset of runA)" in out
    )
    assert f"plot: {png}" in out  # rows are labelled by what differs between the runs
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    arr = np.asarray(Image.open(png).convert("L"), np.float32)
    assert arr.shape[0] > 200 and arr.shape[1] > 300 and arr.std() > 5  # a drawn chart, not a blank image


def test_default_plot_path_and_no_plot(tmp_path, capsys):
    a = make_run(tmp_path, "runA", {"R@1": 1.0}, {"name": "demo", "limit": 0})
    assert main(["eval", "--compare", str(a)]) == 0
    assert (tmp_path / "compare.png").is_file()
    (tmp_path / "compare.png").unlink()
    assert main(["eval", "--compare", str(a), "--plot", "none"]) == 0
    assert not (tmp_path / "compare.png").exists()


def test_per_run_tables_and_fashioniq_average(tmp_path, capsys):
    runs = []
    for cat, r10 in (("dress", 20.0), ("shirt", 30.0), ("toptee", 40.0)):
        ds = {"name": "fashioniq", "root": "/x", "category": cat, "split": "val", "images": "", "limit": 0}
        runs.append(
            make_run(tmp_path, f"fiq-{cat}", {"R@10": r10, "R@50": r10 + 20}, ds, stages={"rank": {"R@10": r10 - 1}})
        )
    other = make_run(
        tmp_path,
        "fiq-dress-textonly",
        {"R@10": 1.0, "R@50": 2.0},
        {"name": "fashioniq", "root": "/x", "category": "dress", "split": "val", "images": "", "limit": 0},
        method="text_only",
    )
    assert main(["eval", *map(str, runs), str(other)]) == 0
    out = capsys.readouterr().out
    assert "## fiq-dress\nsubset of fiq-dress" in out and "| after rank | 19.00 |" in out
    assert "## FashionIQ (plain mean over dress, shirt, toptee)" in out
    assert (
        out.count("FashionIQ average (image_only") == 1 and "| 30.00 | 50.00 |" in out
    )  # text_only lacks shirt/toptee
    rows = comparison_rows([load_run(r) for r in runs])
    avg = next(v for k, v in rows.items() if k.startswith("FashionIQ average"))
    assert avg == {"R@10": 30.0, "R@50": 50.0}


def test_bad_run_dir_is_one_clear_error(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nothing")]) == 2
    assert "is not a finished run directory (no metrics.json)" in capsys.readouterr().err


def test_plot_needs_metrics(tmp_path):
    from agentcir.framework.errors import InputError

    with pytest.raises(InputError, match="nothing to plot"):
        plot_comparison({"a": {"note": "text"}}, tmp_path / "x.png")


def test_submit_writes_circo_files(tmp_path, capsys):
    root = tmp_path / "CIRCO"
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "test.json").write_text(
        json.dumps(
            [
                {"id": 0, "reference_img_id": 1, "relative_caption": "a", "shared_concept": "b"},
                {"id": 1, "reference_img_id": 2, "relative_caption": "c", "shared_concept": "d"},
            ]
        )
    )
    (root / "COCO2017_unlabeled" / "annotations").mkdir(parents=True)
    (root / "COCO2017_unlabeled" / "annotations" / "image_info_unlabeled2017.json").write_text(
        json.dumps({"images": [{"id": i, "file_name": f"{i:012d}.jpg"} for i in range(1, 80)]})
    )
    (root / "COCO2017_unlabeled" / "unlabeled2017").mkdir()
    for i in range(1, 80):
        (root / "COCO2017_unlabeled" / "unlabeled2017" / f"{i:012d}.jpg").touch()
    run = make_run(
        tmp_path / "runs", "circo-test", {}, {"name": "circo", "root": str(root), "split": "test", "limit": 0}
    )
    with open(run / "rankings.jsonl", "w") as f:
        for q in ("0", "1"):
            f.write(json.dumps({"query": q, "ids": [str(i) for i in range(3, 63)], "scores": [0.0] * 60}) + "\n")
    assert main(["eval", str(run), "--submit", str(tmp_path / "sub")]) == 0
    sub = json.loads((tmp_path / "sub" / "circo_test_submission.json").read_text())
    assert sub["0"] == list(range(3, 53)) and set(sub) == {"0", "1"}
    assert "wrote" in capsys.readouterr().out


def test_best_of_disbench_runs(tmp_path, capsys):
    root = tmp_path / "dis"
    (root / "metadata").mkdir(parents=True)
    (root / "metadata" / "u.jsonl").write_text(
        "".join(json.dumps({"photo_id": p, "metadata": {}}) + "\n" for p in "abcd")
    )
    (root / "images" / "u").mkdir(parents=True)
    for p in "abcd":
        (root / "images" / "u" / f"{p}.jpg").touch()
    (root / "queries.jsonl").write_text(
        json.dumps({"query_id": "1", "user_id": "u", "query": "q", "answer": ["a"], "event_type": "intra-event"})
        + "\n"
        + json.dumps({"query_id": "2", "user_id": "u", "query": "q", "answer": ["b", "c"], "event_type": "inter-event"})
        + "\n"
    )
    ds = {"name": "disbench", "root": str(root), "users": [], "answer_k": 0, "limit": 0}
    runs = []
    for n, answers in enumerate(({"1": ["a"], "2": ["d"]}, {"1": ["d"], "2": ["b", "c"]})):
        r = make_run(tmp_path / "runs", f"run{n}", {"F1": 0.0}, ds)
        (r / "rankings.jsonl").write_text(
            "".join(json.dumps({"query": q, "ids": ids, "scores": []}) + "\n" for q, ids in answers.items())
        )
        runs.append(str(r))
    assert main(["eval", "--best-of", *runs]) == 0
    out = capsys.readouterr().out
    assert "| best of 2 runs | 100.00 | 100.00 |" in out and "EM@2" in out
    other = make_run(tmp_path / "runs", "demo-run", {}, {"name": "demo", "limit": 0})
    assert main(["eval", "--best-of", runs[0], str(other)]) == 2
    assert "needs runs of one dataset recipe" in capsys.readouterr().err


def test_run_then_compare_end_to_end(plugin_path, tmp_path, capsys):
    """Two real runs of the demo (toy encoder from the test plugin), then `agentcir eval --compare`."""
    from agentcir.framework.recipe import compose
    from agentcir.framework.runner import run_recipe

    (tmp_path / "recipes" / "encoder").mkdir(parents=True)
    (tmp_path / "recipes" / "encoder" / "toy.yaml").write_text("name: toy\n")
    dirs = []
    for method in ("image_only", "text_only"):
        recipe = compose(
            [
                f"method={method}",
                "encoder=toy",
                "dataset=demo",
                "dataset.limit=8",
                "method.top_k=60",
                f"run.root={tmp_path / 'runs'}",
                "run.progress=false",
            ],
            extra_dirs=[str(tmp_path / "recipes")],
        )
        result = run_recipe(recipe)
        dirs.append(str(result.dir))
        report = (result.dir / "report.md").read_text()
        assert "evaluated 8 of 40 queries" in report and "Limited to the first 8" in report
        assert set(result.metrics["final"]) == {"mAP@5", "mAP@10", "mAP@25", "mAP@50", "R@1", "R@5", "R@10", "R@50"}
    png = tmp_path / "cmp.png"
    assert main(["eval", "--compare", *dirs, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert all(Path(d).name in out for d in dirs) and png.stat().st_size > 5000
