"""The `agentcir` command: help, list, index, search, eval, clear one-line errors."""

import re
import subprocess
import sys

import pytest

from agentcir.cli import COMMANDS, build_parser, main


def run_cli(args, env=None):
    return subprocess.run([sys.executable, "-m", "agentcir.cli", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_of_every_subcommand(command, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([command, "--help"])
    assert e.value.code == 0
    assert "usage: agentcir" in capsys.readouterr().out


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = dict(line.split(": ", 1) for line in out.strip().splitlines() if not line.startswith(" "))
    assert "image_text_sum" in lines["method"].split(", ") and {"composed", "demo"} <= set(lines["dataset"].split(", "))
    assert main(["list", "bogus"]) == 2
    assert "unknown kind 'bogus'" in capsys.readouterr().err


def test_errors_are_one_line_with_exit_code_2(capsys):
    assert main(["run", "method=nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentcir run: error: recipe error:") and "\n" not in err
    assert main(["run", "run.concurrency=lots"]) == 2
    assert "field 'concurrency'" in capsys.readouterr().err


def test_index_search_eval(plugin_env, image_folder, tmp_path):
    gal = tmp_path / "gallery"
    r = run_cli(["index", str(image_folder), "--out", str(gal), "encoder=toy", "-q"], env=plugin_env)
    assert r.returncode == 0, r.stderr
    assert "indexed 12 image(s)" in r.stdout and "skipped 1 unreadable image(s) and 1 non-image file(s)" in r.stdout
    assert "broken.jpg" in r.stderr  # the skipped file is named
    assert re.search(r"^embedding took [0-9.]+ s \([0-9.]+ images/s\)$", r.stdout, re.M)
    again = run_cli(["index", str(image_folder), "--out", str(gal), "encoder=toy", "-q"], env=plugin_env)
    assert (
        again.returncode == 0 and "only what it lacked was embedded" in again.stdout and "images/s" not in again.stdout
    )
    ref = next(image_folder.glob("img01.png"))
    r = run_cli(
        [
            "search",
            "--gallery",
            str(gal),
            "--image",
            str(ref),
            "--text",
            "brighter",
            "-k",
            "3",
            "encoder=toy",
            "-q",
            f"run.cache={tmp_path / 'c.sqlite'}",
        ],
        env=plugin_env,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].split() == ["rank", "id", "score", "path"] and len(lines) == 4
    # empty folder and a wrong encoder: one clear line each
    (tmp_path / "empty").mkdir()
    r = run_cli(["index", str(tmp_path / "empty"), "--out", str(tmp_path / "g2"), "encoder=toy"], env=plugin_env)
    assert r.returncode == 2 and "holds no image files" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli(["search", "--gallery", str(gal), "--text", "x", "encoder=toy", "encoder.seed=3"], env=plugin_env)
    assert r.returncode == 2 and "was indexed with encoder 'toy'" in r.stderr


def test_index_sharded_without_an_engine(plugin_env, image_folder, tmp_path):
    """`agentcir index --shards S` alone: the default engine (local), and the metadata line still comes."""
    r = run_cli(
        ["index", str(image_folder), "--out", str(tmp_path / "g"), "--shards", "2", "encoder=toy", "-q"], env=plugin_env
    )
    assert r.returncode == 0, r.stderr
    assert "2 shard(s), engine local" in r.stdout and "indexed 12 image(s)" in r.stdout
    r = run_cli(
        ["index", str(image_folder), "--out", str(tmp_path / "g2"), "--shards", "-1", "encoder=toy"], env=plugin_env
    )
    assert r.returncode == 2 and "field 'shards': must be at least 0, got -1" in r.stderr


def test_run_and_eval(plugin_env, tmp_path):
    args = ["run", "encoder=toy", f"run.root={tmp_path}", "run.progress=false"]
    r = run_cli(args, env=plugin_env)
    assert r.returncode == 0, r.stderr
    assert "metrics (40 queries, gallery 320): mAP@5=" in r.stdout and "<- target" in r.stdout or "1. " in r.stdout
    run_dir = next(tmp_path.glob("octopus-demo-*"))  # the default method
    r2 = run_cli(["eval", str(run_dir)])
    assert r2.returncode == 0 and "| final |" in r2.stdout
    r3 = run_cli(["eval", str(tmp_path)])
    assert r3.returncode == 2 and "not a finished run directory" in r3.stderr
