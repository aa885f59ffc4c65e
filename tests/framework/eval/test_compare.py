"""`agentcir eval --compare`: one table per benchmark, labels by what differs, the paper's number
beside the reproduced one, CSV and LaTeX (booktabs) export; report.md's component facts."""

import csv
import json
from pathlib import Path

import pytest
import yaml

from agentcir.cli import main
from agentcir.framework.compare import comparison_tables, parse_paper, to_latex
from agentcir.framework.errors import InputError
from agentcir.framework.report import component_facts, load_run


def make_run(root: Path, name: str, final: dict, dataset: dict, method: dict, run: dict | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(
        json.dumps(
            {"final": final, "stages": {}, "subset": "", "num_queries": 3, "gallery_size": 10, "gallery_skipped": 0}
        )
    )
    (d / "recipe.yaml").write_text(
        yaml.safe_dump(
            {
                "method": method,
                "dataset": dataset,
                "encoder": {"name": "catalog"},
                "run": {"root": str(root), "name": name, **(run or {})},
            }
        )
    )
    return d


CIRCO = {"name": "circo", "root": "/c", "split": "val", "limit": 0}
CIRR = {"name": "cirr", "root": "/r", "split": "val", "limit": 0}
IMAGE_ONLY = {"name": "image_only", "top_k": 50, "image_weight": 0.5}
XR = {"name": "xr", "top_k": 50, "k_prime": 100}


def circo(m5):
    return {"mAP@5": m5, "mAP@10": m5 + 1, "mAP@25": m5 + 2, "mAP@50": m5 + 3, "R@1": 1.0}


def cirr(r1):
    return {
        "R@1": r1,
        "R@5": r1 + 10,
        "R@10": r1 + 20,
        "R@50": r1 + 40,
        "R_subset@1": 60.0,
        "R_subset@2": 70.0,
        "R_subset@3": 80.0,
        "Avg": 50.0,
    }


@pytest.fixture
def mixed(tmp_path):
    """xr and image_only on CIRCO, xr and image_only on CIRR; the xr runs are paper rows."""
    paper_circo = "XR main, CIRCO, ViT-B/32: mAP@5 27.51, mAP@50 30.95"
    paper_cirr = "XR main, CIRR, ViT-B/32: R@1 43.06, R@10 83.15, R_subset@3 95.21"
    return [
        make_run(tmp_path, "a1b2c3", circo(10.0), CIRCO, IMAGE_ONLY),
        make_run(tmp_path, "d4e5f6", circo(20.0), CIRCO, XR, {"paper": paper_circo}),
        make_run(tmp_path, "0a0b0c", cirr(30.0), CIRR, XR, {"paper": paper_cirr}),
        make_run(tmp_path, "9f8e7d", cirr(25.0), CIRR, IMAGE_ONLY),
    ]


def test_one_table_per_benchmark_labelled_by_what_differs(mixed):
    tables = comparison_tables([load_run(d) for d in mixed])
    assert [t.benchmark for t in tables] == ["circo", "cirr"]
    circo_t, cirr_t = tables
    assert [c[1] for c in circo_t.columns] == ["mAP@5", "mAP@10", "mAP@25", "mAP@50"]  # CIRCO's R@1 is not shown
    assert [c[1] for c in cirr_t.columns] == [
        "R@1",
        "R@5",
        "R@10",
        "R@50",
        "R_subset@1",
        "R_subset@2",
        "R_subset@3",
        "Avg",
    ]
    # the method is what differs; image_only's own field (image_weight) is not a difference
    assert [r.label for r in circo_t.rows] == ["method=image_only", "method=xr", "paper (XR main, CIRCO, ViT-B/32)"]
    assert [r.label for r in cirr_t.rows] == ["method=xr", "paper (XR main, CIRR, ViT-B/32)", "method=image_only"]
    paper = circo_t.rows[2]
    assert paper.paper and paper.values == {("", "mAP@5"): 27.51, ("", "mAP@50"): 30.95}
    assert circo_t.best() == {("", "mAP@5"): 20.0, ("", "mAP@10"): 21.0, ("", "mAP@25"): 22.0, ("", "mAP@50"): 23.0}


def test_fashioniq_per_category_and_average_with_the_paper(tmp_path):
    runs = []
    for method, base in ((XR, 30.0), (IMAGE_ONLY, 10.0)):
        for i, cat in enumerate(("dress", "shirt", "toptee")):
            ds = {"name": "fashioniq", "root": "/f", "category": cat, "split": "val", "limit": 0}
            run = {"paper": "XR main, FashionIQ average, ViT-B/32: R@10 36.66, R@50 57.10"} if method is XR else {}
            runs.append(
                make_run(
                    tmp_path, f"{method['name']}-{cat}", {"R@10": base + i, "R@50": base + 20 + i}, ds, method, run
                )
            )
    (t,) = comparison_tables([load_run(d) for d in runs])
    assert t.columns == [(g, m) for g in ("dress", "shirt", "toptee", "average") for m in ("R@10", "R@50")]
    assert [r.label for r in t.rows] == [
        "method=xr",
        "paper (XR main, FashionIQ average, ViT-B/32)",
        "method=image_only",
    ]
    xr = t.rows[0].values
    assert xr[("shirt", "R@10")] == 31.0 and xr[("average", "R@10")] == pytest.approx(31.0)
    assert xr[("average", "R@50")] == pytest.approx(51.0)
    assert t.rows[1].values == {("average", "R@10"): 36.66, ("average", "R@50"): 57.10}
    tex = to_latex(t)
    assert r"\multicolumn{2}{c}{Dress}" in tex and r"\cmidrule(lr){8-9}" in tex and r"\textit{36.66}" in tex


def test_compare_cli_writes_csv_latex_and_one_plot_per_benchmark(mixed, tmp_path, capsys):
    out_csv, out_tex, png = tmp_path / "x" / "cmp.csv", tmp_path / "x" / "cmp.tex", tmp_path / "x" / "cmp.png"
    assert (
        main(
            ["eval", "--compare", *map(str, mixed), "--csv", str(out_csv), "--latex", str(out_tex), "--plot", str(png)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "## CIRCO" in out and "## CIRR" in out
    assert "| method=xr | **20.00** | **21.00** | **22.00** | **23.00** |" in out
    assert "| paper (XR main, CIRCO, ViT-B/32) | 27.51 |  |  | 30.95 |" in out
    assert "a1b2c3" not in out.split("## CIRCO")[1].split("Time (s)")[0]  # rows are not named by run directories
    assert (tmp_path / "x" / "cmp-circo.png").is_file() and (tmp_path / "x" / "cmp-cirr.png").is_file()
    rows = list(csv.reader((tmp_path / "x" / "cmp-cirr.csv").open()))
    assert rows[0] == [
        "benchmark",
        "row",
        "paper",
        "R@1",
        "R@5",
        "R@10",
        "R@50",
        "R_subset@1",
        "R_subset@2",
        "R_subset@3",
        "Avg",
    ]
    assert rows[1][:4] == ["cirr", "method=xr", "", "30.00"] and rows[2][:4] == [
        "cirr",
        "paper (XR main, CIRR, ViT-B/32)",
        "yes",
        "43.06",
    ]
    tex = out_tex.read_text()
    assert tex.count(r"\begin{tabular}") == 2 and tex.count(r"\toprule") == 2 and tex.count(r"\bottomrule") == 2
    for block in tex.split(r"\begin{tabular}")[1:]:  # booktabs order: top, mid, bottom rule
        assert block.index(r"\toprule") < block.index(r"\midrule") < block.index(r"\bottomrule")
        body = block.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
        ncols = block.split("\n", 1)[0].count("r") + 1  # {lrrrr}
        assert all(line.count("&") == ncols - 1 and line.endswith(r"\\") for line in body)
    assert r"method=xr & \textbf{30.00}" in tex and r"R\_subset@1" in tex
    assert r"\textit{paper (XR main, CIRR, ViT-B/32)} & \textit{43.06}" in tex


def test_paper_numbers_parse_or_name_the_field():
    assert parse_paper("T1, CIRCO: mAP@5 28.18, mAP@10 28.66") == ("T1, CIRCO", {"mAP@5": 28.18, "mAP@10": 28.66})
    assert parse_paper("") == ("", {})
    with pytest.raises(InputError, match=r"run.paper = 'mAP@5 28.18': expected 'SOURCE: METRIC VALUE"):
        parse_paper("mAP@5 28.18")
    with pytest.raises(InputError, match="expected"):
        parse_paper("T1: mAP@5 high")


def test_every_experiment_bundle_paper_names_its_benchmark_metrics():
    """Each bundle's run.paper parses and names only metrics its benchmark's table shows."""
    from agentcir.framework.compare import BENCHMARK_METRICS
    from agentcir.framework.recipe import compose

    folder = Path(__file__).resolve().parents[3] / "agentcir" / "recipes" / "experiment"
    seen = 0
    for f in (
        sorted(folder.glob("*_t1_*.yaml"))
        + sorted(folder.glob("xr_*_[bl]*.yaml"))
        + [folder / "xr_ablation_cirr_visual_qa.yaml"]
    ):
        paper = (yaml.safe_load(f.read_text()).get("run") or {}).get("paper")
        if not paper:
            continue
        bench = compose([f"+experiment={f.stem}"], check_devices=False)["dataset"]["name"]
        _, numbers = parse_paper(paper, f.name)
        wanted = BENCHMARK_METRICS.get(bench, ("R@1", "R@5", "R@10", "R@50"))
        assert set(numbers) <= set(wanted), (f.name, numbers)
        seen += 1
    assert seen >= 8


def test_composed_row_carries_its_own_paper_not_its_base_s():
    from agentcir.framework.recipe import compose

    t3 = compose(["+experiment=octopus_t3_circo_v2v"], check_devices=False)["run"]["paper"]
    assert parse_paper(t3)[1] == {"mAP@5": 26.91, "mAP@10": 27.48}
    assert compose(["+experiment=xr_ablation_circo_text_sim"], check_devices=False)["run"]["paper"] == ""


def test_component_facts_state_the_config():
    recipe = {
        "method": {"name": "image_only", "top_k": 50},
        "dataset": {"name": "webvid_covr", "root": "/rel", "split": "test"},
        "encoder": {
            "name": "features",
            "path": "/rel/preload",
            "arch": "ViT-L/14",
            "text": {"name": "open_clip", "model": "ViT-L-14", "pretrained": "/w/l14.pt"},
        },
        "llm": {"name": "openai", "model": "gpt-4o-mini", "base_url": ""},
        "generator": {"name": "none"},
    }
    assert component_facts(recipe) == [
        "- method: `image_only`",
        "- dataset: `webvid_covr` (split `test`; root `/rel`)",
        "- encoder: `features` (arch `ViT-L/14`; path `/rel/preload`; text: `open_clip` (model `ViT-L-14`; "
        "pretrained `/w/l14.pt`))",
        "- llm: `openai` (model `gpt-4o-mini`)",
    ]
