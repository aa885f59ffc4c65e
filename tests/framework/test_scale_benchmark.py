"""The fast subset of ``benchmarks/scale/run.py`` (and its report): every part on a tiny gallery,
the embedding part over a few demo photos with all five variants, the `agentcir index` commands
included (one of them joining the benchmark's running Ray by address)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("faiss")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "agentcir" / "data" / "demo" / "images"


@pytest.mark.slow
def test_scale_benchmark_runs_resumes_and_reports(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in sorted(DEMO.iterdir())[:8]:
        shutil.copy(p, photos / p.name)
    out = tmp_path / "r.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "scale" / "run.py"), "--n", "20000", "--shards", "1", "2",
           "--rounds", "1", "--ann-n", "20000", "--hnsw-n", "4000", "--nlist", "16", "--ann-reps", "1",
           "--embed-rounds", "1", "--embed-shards", "2", "--photos", str(photos), "--data", str(tmp_path / "data"),
           "--out", str(out)]
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert {"machine", "exact", "ann", "embed"} <= set(r)
    e = r["embed"]
    assert e["images"] == 8
    for v in ("job_local", "job_ray", "cmd_local", "cmd_ray_join", "cmd_ray_own"):
        assert e[f"{v}_s"] > 0 and e[f"{v}_img_s"] > 0
    assert all(e[f"{v}_vs_local"] > 0 for v in ("job_ray", "cmd_ray_join", "cmd_ray_own"))
    indexes = r["ann"]["indexes"]
    assert {"ivf_flat", "ivf_sq_fp16", "ivf_sq_8bit", "ivf_pq", "hnsw"} <= set(indexes)
    for v in indexes.values():
        assert v["sweep"] and all(0 <= row["recall@10"] <= 1 for row in v["sweep"])
    assert max(row["recall@10"] for row in indexes["ivf_flat"]["sweep"]) == 1.0   # every list probed: exact
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)   # resumable: parts skipped
    assert again.returncode == 0 and again.stderr.count("done already") + again.stdout.count("done already") == 3
    report = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale" / "report.py"), str(out)],
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "command, `--engine ray --address` (joins)" in report.stdout and "**Exact search**" in report.stdout
