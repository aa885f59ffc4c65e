"""docs/reproduce.md is what benchmarks/reproduce_plans.py renders: every row's command and the
paper's numbers come from the experiment bundles (``run.paper``, the numbers ``agentcir eval
--compare`` prints beside a run), the prose from the script; the planned model calls, tokens and
cost of each row are read back from the doc and rendered again (planning every row takes hours)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reproduce.md"


def load_script():
    spec = importlib.util.spec_from_file_location("reproduce_plans", ROOT / "benchmarks" / "reproduce_plans.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def table_rows(text: str) -> list[list[str]]:
    lines = text.split("| table | row | command |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]


def summaries_of(text: str, rows) -> dict[str, tuple[str, str, str]]:
    doc_rows = table_rows(text)
    assert len(doc_rows) == len(rows), "docs/reproduce.md has not one table row per ROWS entry"
    return {bundle: tuple(cells[4:7]) for (bundle, *_), cells in zip(rows, doc_rows) if cells[4] != "(not planned)"}


def test_reproduce_doc_is_the_rendered_source():
    mod = load_script()
    text = DOC.read_text()
    queries = int(text.split("per-query stages planned on the first\n", 1)[1].split()[0])
    rendered = mod.render(summaries_of(text, mod.ROWS), queries)
    assert rendered == text, "docs/reproduce.md differs from the source: rerun `python benchmarks/reproduce_plans.py`"


def test_a_changed_paper_number_shows_as_a_difference(monkeypatch):
    mod = load_script()
    text = DOC.read_text()
    real = mod.paper_cell
    monkeypatch.setattr(mod, "paper_cell", lambda b: "R@1 1.00" if b == "octopus_t1_webvid" else real(b))
    assert mod.render(summaries_of(text, mod.ROWS), 20) != text


def test_paper_column_matches_each_bundle():
    from agentcir.framework.compare import parse_paper

    mod = load_script()
    rows = table_rows(DOC.read_text())
    by_bundle = {b: cells for (b, *_), cells in zip(mod.ROWS, rows)}
    cells = by_bundle["xr_cirr_b32"]
    assert cells[3] == "R@1 43.06, R@10 83.15, R_subset@3 95.21"
    assert parse_paper(f"x: {cells[3]}")[1] == {"R@1": 43.06, "R@10": 83.15, "R_subset@3": 95.21}
    assert by_bundle["octopus_t3_circo_v2v"][2].startswith("`+experiment=octopus_t3_circo_v2v dataset.root=ROOT")
    assert by_bundle["octopus_webvid_release"][3] == "(no paper row)"


def test_planned_rows_equal_what_plan_reports_now(tmp_path):
    """Two WebVid-CoVR rows planned again (the release's query set, no placeholder gallery): the
    doc's model calls, tokens and cost are what `agentcir run --plan` gives today."""
    import pytest

    mod = load_script()
    if not (mod.RELEASE / "annotation").is_dir():
        pytest.skip(f"no OCTOPUS release at {mod.RELEASE}")
    text = DOC.read_text()
    queries = int(text.split("per-query stages planned on the first\n", 1)[1].split()[0])
    doc = summaries_of(text, mod.ROWS)
    for bundle in ("octopus_webvid_release", "octopus_t1_webvid"):
        plan = mod.plan_row(bundle, {"webvid": mod.RELEASE}, tmp_path, queries)
        assert mod.summary(bundle, plan, {}) == doc[bundle], bundle


def test_a_plan_repeats(tmp_path):
    """Two plans of one row in different folders count the same calls (the stand-in proxies'
    vectors do not depend on where a plan keeps them)."""
    import pytest

    mod = load_script()
    if not (mod.RELEASE / "annotation").is_dir():
        pytest.skip(f"no OCTOPUS release at {mod.RELEASE}")
    plans = [mod.plan_row("octopus_t1_webvid", {"webvid": mod.RELEASE}, tmp_path / str(i), 8)["rows"] for i in range(2)]
    assert plans[0] == plans[1]
