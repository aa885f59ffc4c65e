"""The fast subset of ``benchmarks/scale/run.py`` (and its report): every part on a tiny gallery,
the embedding part over a few demo photos with three of its five variants: the job in this
process and the `agentcir index` commands, local and joining the benchmark's running Ray by address."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("faiss")

# beside the Ray tests on one pytest-xdist worker (`--dist loadgroup`): the benchmark's plain
# ray.init() would join the cluster that test_scale_ray.py's two-node test names in Ray's address file
pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "agentcir" / "data" / "demo" / "images"


@pytest.mark.slow
def test_scale_benchmark_runs_resumes_and_reports(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in sorted(DEMO.iterdir())[:8]:
        shutil.copy(p, photos / p.name)
    out = tmp_path / "r.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "scale" / "run.py"),
        "--n",
        "4000",
        "--shards",
        "1",
        "2",
        "--rounds",
        "1",
        "--ann-n",
        "4000",
        "--hnsw-n",
        "4000",
        "--nlist",
        "16",
        "--ann-reps",
        "1",
        "--embed-rounds",
        "1",
        "--embed-shards",
        "2",
        "--embed-variants",  # one Ray variant: the Ray Data job in-process and a command starting its
        "job_local",  # own Ray are the paths test_scale_ray.py runs (embedding, init_ray without an address)
        "cmd_local",
        "cmd_ray_join",
        "--photos",
        str(photos),
        "--data",
        str(tmp_path / "data"),
        "--quiet-limit",
        "0",
        "--out",
        str(out),
    ]  # no wait for an idle machine: the times are not checked
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert {"machine", "exact", "ann", "embed"} <= set(r)
    e = r["embed"]
    assert e["images"] == 8
    for v in ("job_local", "cmd_local", "cmd_ray_join", "build_local", "build_ray_join"):
        assert e[f"{v}_s"] > 0 and e[f"{v}_img_s"] > 0
    assert not any(k.startswith(("job_ray", "cmd_ray_own", "build_ray_own")) for k in e)  # not asked for
    for how in ("local", "ray_join"):  # a command's embedding is part of it
        assert e[f"build_{how}_s"] < e[f"cmd_{how}_s"]
    assert all(e[f"{v}_vs_local"] > 0 for v in ("cmd_ray_join", "build_ray_join"))
    indexes = r["ann"]["indexes"]
    assert {"ivf_flat", "ivf_sq_fp16", "ivf_sq_8bit", "ivf_pq", "hnsw"} <= set(indexes)
    for v in indexes.values():
        assert v["sweep"] and all(0 <= row["recall@10"] <= 1 for row in v["sweep"])
    assert max(row["recall@10"] for row in indexes["ivf_flat"]["sweep"]) == 1.0  # every list probed: exact
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)  # resumable: parts skipped
    assert again.returncode == 0 and again.stderr.count("done already") + again.stdout.count("done already") == 3
    report = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale" / "report.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    assert (
        "command, `--engine ray --address` (joins)" in report.stdout
        and "its embedding, Ray joining" in report.stdout
        and "**Exact search**" in report.stdout
    )


@pytest.mark.slow
def test_embed_timeline_times_every_encoder_call_of_the_job(tmp_path):
    """benchmarks/scale/embed_timeline.py: the job of `agentcir index --engine ray` over 8 demo
    photos in batches of 2, every call stamped inside its actor, next to the local build."""
    out = tmp_path / "t.json"
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scale" / "embed_timeline.py"),
            "--photos",
            str(DEMO),
            "--n",
            "8",
            "--rounds",
            "1",
            "--batch-size",
            "2",
            "--quiet-limit",
            "0",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(out.read_text())
    job = r["rounds"][0]
    assert r["images"] == 8 and job["actors"] == len(job["per_actor"]) >= 1
    assert sum(a["calls"] for a in job["per_actor"]) == 4  # 8 photos in 4 encoder batches
    for a in job["per_actor"]:
        assert 0 <= a["born_s"] <= a["ready_s"] <= a["first_call_s"] < a["last_end_s"] <= job["wall_s"]
        assert (
            0 < a["busy_s"] <= a["last_end_s"] - a["first_call_s"] + 0.01 and a["idle_between_calls_s"] >= 0
        )  # rounded
        assert a["cpu_s"] > 0  # its start and its calls
    # the actors' CPU is part of the machine's (give or take /proc/stat's ticks and a worker Ray started before the job)
    assert job["machine_cpu_s"] >= sum(a["cpu_s"] for a in job["per_actor"]) - 0.5
    assert job["others_cpu_s"] == round(job["machine_cpu_s"] - sum(a["cpu_s"] for a in job["per_actor"]), 2)
    assert job["local_s"] > 0 and job["tail_s"] >= 0 and r["median_wall_s"] == job["wall_s"]


@pytest.mark.serial  # needs an idle machine: `make test` runs it alone, after the parallel part
@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads /proc/stat (Linux)")
def test_variants_are_timed_on_an_idle_machine():
    """benchmarks/_data.py quiet(): it waits while another process keeps a core busy (as Ray
    actors unloading torch do after a job), and returns at once on an idle machine."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        data = importlib.import_module("_data")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    data.quiet(limit=10)  # whatever the suite left running
    assert data.busy_cores() < 0.5
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"])
    try:
        time.sleep(0.2)
        assert data.busy_cores() > 0.7
        waited = data.quiet(limit=10)
    finally:
        spin.wait(5)
    assert 0.8 < waited < 10  # it waited out the spinning process
    assert data.quiet(limit=10) < 1.5  # idle: two calm windows
