"""The worked plugin of examples/agentcir-refine-loop, installed by pip and run as a user would:
offline, killed and resumed, rerun from the cache, and edited."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agentcir-refine-loop"

# one worker runs the module, so that its tests share the offline run of ``offline_run``
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("examples")]


@pytest.fixture(scope="module")
def example_site(tmp_path_factory) -> Path:
    """The example package, really installed by pip into a temp folder (a copy of the source, so
    the build leaves nothing in the repository)."""
    src = tmp_path_factory.mktemp("example-src") / "agentcir-refine-loop"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path_factory.mktemp("example-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    return target


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from agentcir.testing.data import tiny_composed_dataset

    return tiny_composed_dataset(tmp_path_factory.mktemp("tiny"))


def env_for(site: Path, cache: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["AGENTCIR_CACHE"] = str(cache)
    return env


def run_args(dataset: Path, root: Path, name: str, *more: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentcir.cli",
        "run",
        "method=refine_loop",
        "dataset=composed",
        f"dataset.root={dataset}",
        f"run.root={root}",
        f"run.name={name}",
        "run.progress=false",
        *more,
    ]


def agentcir_run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return p


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def model_calls(m: dict) -> int:
    return sum(int(s["calls"]) for s in m["cost"].values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Endpoint:
    """``python -m agentcir.testing.server`` on a fixed port, as a separate process."""

    def __init__(self, port: int, env: dict, delay: float):
        self.port, self.env, self.delay = port, env, delay
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Endpoint":
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentcir.testing.server",
                "--port",
                str(self.port),
                "--delay",
                str(self.delay),
                "--replier",
                "agentcir_refine_loop.tasks",
            ],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line + self.proc.stderr.read()
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
            self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(scope="module")
def offline_run(example_site, dataset, tmp_path_factory) -> dict:
    """One offline run of the example from an editable copy of its installed package: its folder,
    cache and environment, and the rankings and metrics it first wrote (the tests below rerun it)."""
    work = tmp_path_factory.mktemp("offline")
    site = work / "site"
    shutil.copytree(example_site, site)
    env = env_for(site, work / "cache.sqlite")
    agentcir_run(run_args(dataset, work / "runs", "offline"), env)
    run = work / "runs" / "offline"
    return {
        "work": work,
        "site": site,
        "env": env,
        "dir": run,
        "metrics": metrics(run),
        "rankings": (run / "rankings.jsonl").read_bytes(),
    }


def test_the_example_runs_offline_and_its_loop_refines(offline_run):
    run, m = offline_run["dir"], offline_run["metrics"]
    assert m["num_queries"] == 8 and set(m["cost"]) == {"gallery_captions", "plan", "refine", "retrieve"}
    assert m["cost"]["plan"]["by_component"] == {"llm:rules": 8}  # the plugin's task, answered offline
    records = [json.loads(line)["record"] for line in (run / "stages" / "refine.jsonl").read_text().splitlines()]
    verdicts = [r["verdict"] for rec in records for r in rec["rounds"]]
    assert "revise" in verdicts and "accept" in verdicts  # the critique sent some queries round again
    assert 0 <= m["final"]["R@5"] <= 100


def test_killed_and_resumed_against_the_scripted_endpoint_gives_identical_results(example_site, dataset, tmp_path):
    port = free_port()
    # 0.1 s a reply, one request at a time: once 3 queries are planned, 5 plans and the refine
    # stage's calls (over a second) remain to be cut
    endpoint = Endpoint(port, env_for(example_site, tmp_path / "unused.sqlite"), delay=0.1).start()
    llm = ["llm=openai", f"llm.base_url={endpoint.url}", "llm.model=scripted", "run.concurrency=1"]
    try:
        # an uninterrupted run
        agentcir_run(run_args(dataset, tmp_path / "runs", "whole", *llm), env_for(example_site, tmp_path / "a.sqlite"))
        # the same run, SIGKILLed once some queries are planned
        env_b = env_for(example_site, tmp_path / "b.sqlite")
        cut = tmp_path / "runs" / "cut"
        proc = subprocess.Popen(
            run_args(dataset, tmp_path / "runs", "cut", *llm),
            env=env_b,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        log = cut / "stages" / "plan.jsonl"
        deadline = time.monotonic() + 500
        while time.monotonic() < deadline and proc.poll() is None:
            if log.is_file() and len(log.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert not (cut / "metrics.json").exists()
        # the endpoint restarts on the same port: the LLM's identity, and so the cache, still hold
        endpoint.stop()
        endpoint.start()
        agentcir_run(run_args(dataset, tmp_path / "runs", "cut", *llm), env_b)
    finally:
        endpoint.stop()
    whole, resumed = metrics(tmp_path / "runs" / "whole"), metrics(cut)
    assert resumed["cost"]["plan"]["resumed_queries"] >= 3  # the logged queries were not run again
    assert resumed["final"] == whole["final"] and resumed["stages"] == whole["stages"]
    assert (cut / "rankings.jsonl").read_bytes() == (tmp_path / "runs" / "whole" / "rankings.jsonl").read_bytes()


def test_a_recomputed_run_makes_zero_model_calls(offline_run, dataset):
    first = offline_run["metrics"]
    assert model_calls(first) > 0
    # every stage recomputed, with the example as it was installed
    agentcir_run(run_args(dataset, offline_run["work"] / "runs", "offline", "run.fresh=true"), offline_run["env"])
    again = metrics(offline_run["dir"])
    assert model_calls(again) == 0, again["cost"]
    assert sum(int(s["cache_hits"]) for s in again["cost"].values()) > 0
    assert again["final"] == first["final"]
    assert (offline_run["dir"] / "rankings.jsonl").read_bytes() == offline_run["rankings"]


def test_editing_the_method_recomputes(offline_run, dataset, tmp_path):
    """The same run folder and cache as the offline run, with the method's code edited in a copy of
    the package: the edit is seen, never the old rankings."""
    site = tmp_path / "site"
    shutil.copytree(offline_run["site"], site)
    method = site / "agentcir_refine_loop" / "method.py"
    old = 'texts = [state.record(q, "refine")["description"] for q in state.queries]'
    assert old in method.read_text()
    # rank by the modification text alone: other rankings
    method.write_text(method.read_text().replace(old, "texts = [q.text for q in state.queries]"))
    env = {
        **offline_run["env"],
        "PYTHONPATH": offline_run["env"]["PYTHONPATH"].replace(str(offline_run["site"]), str(site)),
    }
    agentcir_run(run_args(dataset, offline_run["work"] / "runs", "offline"), env)
    assert (offline_run["dir"] / "rankings.jsonl").read_bytes() != offline_run["rankings"]


def test_the_packages_own_tests_pass(example_site, tmp_path):
    env = env_for(example_site, tmp_path / "cache.sqlite")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(EXAMPLE / "tests"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "3 passed" in p.stdout
