"""The command line: `index` with photo metadata and --user, `search` with ImageSeeker,
`build-disbench`, runs of the agent and the baseline, `eval --best-of`."""

import json
import subprocess
import sys

from .conftest import make_labelled_set


def run_cli(args, env):
    return subprocess.run([sys.executable, "-m", "agentcir.cli", *args], capture_output=True, text=True, env=env)


def test_index_extracts_metadata_and_search_runs_imageseeker(plugin_env, image_folder, tmp_path, toy_recipes):
    toy = toy_recipes
    gal = tmp_path / "gallery"
    r = run_cli(["index", str(image_folder), "--out", str(gal), *toy, "-q", "--user", "ada"], env=plugin_env)
    assert r.returncode == 0, r.stderr
    assert "indexed 12 image(s)" in r.stdout and "skipped 1 unreadable image(s)" in r.stdout
    assert (
        "metadata of 13 photo(s): 0 with a date, 0 with GPS, 0 with named people" in r.stdout
        and "user 'ada'" in r.stdout
    )
    items = [json.loads(x) for x in (gal / "items.jsonl").read_text().splitlines()]
    sub = [i for i in items if i["id"].startswith("sub/")]
    assert sub and all(i["meta"] == {"album": "sub", "user": "ada"} for i in sub)  # folder = album
    assert all(i["meta"]["user"] == "ada" for i in items)
    r = run_cli(["index", str(image_folder), "--out", str(gal), *toy, "-q", "--no-metadata"], env=plugin_env)
    assert r.returncode == 0 and "metadata of" not in r.stdout
    assert all(
        json.loads(x)["meta"] == {} for x in (gal / "items.jsonl").read_text().splitlines()
    )  # refreshed, not re-embedded
    r = run_cli(
        [
            "search",
            "--gallery",
            str(gal),
            "--text",
            "the photos from the sub album",
            "-k",
            "3",
            "method=imageseeker",
            *toy,
            "-q",
            f"run.cache={tmp_path / 'c.sqlite'}",
        ],
        env=plugin_env,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[0].split() == ["rank", "id", "score", "path"]


def test_build_disbench_run_and_best_of(plugin_env, tmp_path, toy_recipes):
    toy = toy_recipes
    src = make_labelled_set(tmp_path / "src")
    bench = tmp_path / "bench"
    r = run_cli(
        [
            "build-disbench",
            "--csv",
            str(src / "photos.csv"),
            "--images",
            str(src / "images"),
            "--out",
            str(bench),
            "--min-photos",
            "10",
            "--photos-per-event",
            "5",
            "--seed",
            "3",
        ],
        env=plugin_env,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["users"] == 2 and summary["queries"] == summary["intra-event"] + summary["inter-event"] > 0
    common = [
        *toy,
        "dataset=disbench",
        f"dataset.root={bench}",
        f"run.root={tmp_path / 'runs'}",
        "run.progress=false",
        "-q",
    ]
    dirs = []
    for method in (["method=imageseeker", "llm=rules"], ["method=history_topk", "method.top_k=3"]):
        r = run_cli(["run", *method, *common], env=plugin_env)
        assert r.returncode == 0, r.stderr
        assert "EM=" in r.stdout and "F1_inter=" in r.stdout
        dirs.append(r.stdout.split("run directory: ")[1].split()[0])
    r = run_cli(["eval", "--best-of", *dirs], env=plugin_env)
    assert r.returncode == 0, r.stderr
    assert "F1@2" in r.stdout and "EM_intra@2" in r.stdout
    r = run_cli(["build-disbench", "--out", str(tmp_path / "x")], env=plugin_env)
    assert r.returncode == 2 and "give either --csv" in r.stderr
