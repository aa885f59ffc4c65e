"""Sweeps (`agentcir run -m`): expansion, override errors, a 2x2 sweep of the demo against a scripted
OpenAI-compatible endpoint (every distinct model call reaches the server once), the summary and
sensitivity plots, resume after a SIGKILL mid-sweep, and `eval --compare` labels."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcir.cli import main
from agentcir.components.llms.scripted_server import ScriptedServer, Step, chat_completion
from agentcir.framework.errors import InputError
from agentcir.framework.recipe import compose
from agentcir.framework.report import RunInfo, override_labels
from agentcir.framework.sweep import SharedComponents, expand, run_sweep
from agentcir.registry import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/chat/completions"
SWEEP = ["method=ldre", "method.num_captions=2,3", "method.temperature=0.04,0.5", "dataset.limit=12"]


# -- expansion and errors ---------------------------------------------------------------------
def test_expand_is_the_cartesian_product_in_hydra_order():
    jobs = expand(["method=ldre", "method.num_captions=2,3", "method.temperature=range(0.1,0.4,0.1)", "run.show=1"])
    assert [j.swept for j in jobs[:4]] == [
        {"method.num_captions": "2", "method.temperature": t} for t in ("0.1", "0.2", "0.3")
    ] + [{"method.num_captions": "3", "method.temperature": "0.1"}]
    assert len(jobs) == 6 and jobs[0].overrides == [
        "method=ldre",
        "method.num_captions=2",
        "method.temperature=0.1",
        "run.show=1",
    ]
    assert [j.swept["method.top_k"] for j in expand(["method.top_k=range(10,40,10)"])] == ["10", "20", "30"]
    jobs = expand(["+experiment=octopus_v2v,octopus_no_creator", "method=choice(octopus)"])
    assert [j.overrides for j in jobs] == [
        ["+experiment=octopus_v2v", "method=octopus"],
        ["+experiment=octopus_no_creator", "method=octopus"],
    ]
    assert jobs[1].label == "experiment=octopus_no_creator method=octopus"
    assert [j.swept for j in expand(["method=xr"])] == [{}]  # nothing swept: one job


@pytest.mark.parametrize(
    "override,message",
    [
        ("method.lam=range(1,", "override 'method.lam=range(1,': no viable alternative"),
        ("method.lam=interval(0,1)", "override 'method.lam=interval(0,1)': interval(...) is for optimisers"),
        ("method.top_k=range(5,1)", "override 'method.top_k=range(5,1)': the sweep has no values"),
        ("method.top_k=range(1,5,0)", "override 'method.top_k=range(1,5,0)': range step must not be 0"),
        ("method.lam=0.1,0.1", "override 'method.lam=0.1,0.1': a value is listed twice"),
        ("method=glob(*)", "override 'method=glob(*)': glob(...) is not supported"),
        ("=3", "override '=3': no key before '='"),
    ],
)
def test_bad_sweep_syntax_names_the_override(override, message):
    with pytest.raises(InputError) as e:
        expand([override])
    assert str(e.value).startswith(message)


def test_a_key_swept_twice_and_a_sweep_without_multirun(capsys):
    with pytest.raises(InputError, match="override 'method.lam=3,4': 'method.lam' is swept twice"):
        expand(["method.lam=1,2", "method.lam=3,4"])
    with pytest.raises(InputError) as e:
        compose(["method.lam=0.1,0.2"])
    assert "override 'method.lam=0.1,0.2' sweeps over several values" in str(e.value) and "-m" in str(e.value)
    assert main(["run", "-m", "method.lam=range(1,"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentcir run: error: override 'method.lam=range(1,':") and "\n" not in err


def test_unknown_field_fails_with_valid_fields_and_closest_match_never_the_plus_hint(capsys):
    with pytest.raises(ConfigError) as e:
        compose(["method.lamx=0.3"])
    msg = str(e.value)
    assert msg.startswith("method 'octopus': unknown field 'lamx'; valid fields: alpha, bonus,") and msg.endswith(
        ", visual_without_proxy; did you mean 'lam'?"
    )
    with pytest.raises(
        ConfigError, match=r"^run: unknown field 'concurency'; valid fields: .*; did you mean 'concurrency'\?$"
    ):
        compose(["run.concurency=3"])  # no `+` needed for the project to check it
    with pytest.raises(
        ConfigError, match=r"^recipe: unknown top-level key\(s\) methd; valid: .*; did you mean 'method'\?$"
    ):
        compose(["methd=xr"])
    with pytest.raises(ConfigError, match="generator 'none': selects no generator and takes no fields, got 'size'"):
        compose(["generator=none", "generator.size=3"])
    assert compose(["experiment=octopus_no_creator"])["method"]["creator"] is False  # a bundle without the `+`
    assert compose(["method.lam=0.3"])["method"]["lam"] == 0.3
    assert main(["run", "--cfg", "job", "method.lamx=0.3"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'lam'?" in err and "+method" not in err and "append" not in err
    # in a sweep, every job is composed before any runs: the bad one is named
    with pytest.raises(ConfigError, match=r"^sweep job 1 \(method=ldre\): method 'ldre': unknown field 'lam'"):
        run_sweep(["method=octopus,ldre", "method.lam=0.3"])


def test_cfg_prints_every_job_of_a_sweep(capsys, tmp_path):
    assert main(["run", "-m", "--cfg", "job", "method=ldre", "method.num_captions=2,3", f"run.root={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert out.count("# job ") == 2 and "num_captions: 2" in out and "num_captions: 3" in out
    assert f"run directory {tmp_path}/sweeps/method.num_captions-" in out and not (tmp_path / "sweeps").exists()
    assert main(["run", "--cfg", "job", "method=ldre"]) == 0
    assert capsys.readouterr().out.startswith("encoder:\n  name: catalog")
    assert (
        main(
            ["run", "-m", "--cfg", "sweep", "method=ldre,cirevl", "method.top_k=range(50,150,50)", "--sweep-name", "s"]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# job 0: method=ldre method.top_k=50  (run directory runs/sweeps/s/000)"
    assert out[-1] == "#   overrides: method=cirevl method.top_k=100" and len(out) == 8
    assert main(["run", "--cfg", "sweep", "method=ldre"]) == 2
    assert "add -m" in capsys.readouterr().err


def test_shared_components_are_built_once_per_identical_config(tmp_path):
    shared = SharedComponents()
    a = compose(["method=ldre", "method.temperature=0.04", f"run.root={tmp_path}"])
    b = compose(["method=ldre", "method.temperature=0.5", f"run.root={tmp_path}"])
    c = compose(["method=ldre", "encoder.batch_size=7", f"run.root={tmp_path}"])
    pa, pb, pc = shared.pool(a), shared.pool(b), shared.pool(c)
    assert pa.get("encoder") is pb.get("encoder") and pa.get("captioner") is pb.get("captioner")
    assert pa.get("method") is not pb.get("method")
    assert pc.get("encoder") is not pa.get("encoder")  # another config: another instance,
    assert pc.get("captioner") is not pa.get("captioner")  # and so is what it is built with
    shared.close()


def test_override_labels_name_what_differs():
    def info(name, recipe):
        return RunInfo(Path("/r") / name, {}, recipe)

    base = {
        "method": {"name": "octopus", "lam": 0.2, "top_k": 100},
        "dataset": {"name": "demo"},
        "run": {"name": None, "concurrency": 8, "gallery_dtype": "float32"},
    }
    runs = [
        info("a", base),
        info("b", {**base, "method": {**base["method"], "lam": 0.4}, "run": {**base["run"], "concurrency": 2}}),
        info("c", {**base, "method": {"name": "xr", "top_k": 100, "tau": 0.1}}),
        info("d", base),
    ]
    assert override_labels(runs) == [
        "method=octopus method.lam=0.2 (a)",
        "method=octopus method.lam=0.4",
        "method=xr",
        "method=octopus method.lam=0.2 (d)",
    ]
    assert override_labels(runs[:1]) == ["a"] and override_labels([info("x", {}), info("y", {})]) == ["x", "y"]


# -- the demo against a scripted endpoint -------------------------------------------------------
class Endpoint:
    """LDRE's `divergent_captions` answered from the prompt (n captions of the modification);
    requests asking for `block_n` captions wait for `release` (a job that cannot finish)."""

    def __init__(self, block_n=None):
        self.block_n = block_n
        self.release = threading.Event()
        self.answered: list[str] = []
        self.blocked = 0
        self.lock = threading.Lock()

    def __call__(self, req):
        prompt = req.json["messages"][-1]["content"]
        prompt = prompt if isinstance(prompt, str) else " ".join(p.get("text", "") for p in prompt)
        n = int(re.search(r"Write (\d+) diverse captions", prompt).group(1))
        if n == self.block_n:
            self.blocked += 1
            self.release.wait(60)
            return Step(status=503)
        mod = re.search(r"Requested modification: (.*)", prompt).group(1)
        with self.lock:
            self.answered.append(json.dumps(req.json, sort_keys=True))
        return Step(json=chat_completion(json.dumps({"captions": [f"{mod}, variant {i}" for i in range(n)]})))


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    """One run.root for the module: the demo gallery is embedded once (each test has its own call cache)."""
    return tmp_path_factory.mktemp("sweep-runs")


def llm_overrides(srv, cache):
    return [
        "llm=openai",
        f"llm.base_url={srv.base_url}",
        "llm.model=scripted",
        "llm.retries=0",
        "llm.timeout=30",
        f"run.cache={cache}",
        "run.progress=false",
    ]


def test_2x2_sweep_calls_each_distinct_model_call_once(demo_root, tmp_path, capsys):
    ep = Endpoint()
    with ScriptedServer() as srv:
        srv.script(CHAT, ep)
        overrides = [*SWEEP, *llm_overrides(srv, tmp_path / "cache.sqlite"), f"run.root={demo_root}"]
        res = run_sweep(overrides, name="two-by-two")
        n_requests = len(srv.requests_to("/chat/completions"))  # besides the pre-flight GET /models
        assert [j["status"] for j in res.jobs] == ["done"] * 4
        assert n_requests == len(ep.answered) == len(set(ep.answered)) > 0  # no call twice at the server
        per_n = {n: sum(f"Write {n} diverse" in a for a in ep.answered) for n in (2, 3)}
        assert per_n[2] == per_n[3] == n_requests // 2  # the temperature jobs shared every call
        calls = [j["calls"] for j in res.jobs]
        assert calls[0] > 0 and calls[2] > 0 and calls[1] < calls[0] and calls[3] < calls[2]
        # the sweep directory
        d = demo_root / "sweeps" / "two-by-two"
        assert res.dir == d and [Path(j["dir"]).name for j in res.jobs] == ["000", "001", "002", "003"]
        for j in res.jobs:
            assert json.loads((Path(j["dir"]) / "metrics.json").read_text())["final"] == j["metrics"]
        md = (d / "summary.md").read_text()
        assert "| job | method.num_captions | method.temperature | mAP@5 | mAP@10 |" in md
        assert f"| 3 | 3 | 0.5 | {res.jobs[3]['metrics']['mAP@5']:.2f} |" in md
        csv_head = (d / "summary.csv").read_text().splitlines()[0].split(",")
        assert csv_head[:4] == ["job", "method.num_captions", "method.temperature", "mAP@5"]
        assert len(json.loads((d / "summary.json").read_text())["jobs"]) == 4
        # one sensitivity plot per swept numeric field, one line per value of the other field
        assert sorted(p.name for p in res.plots) == [
            "sensitivity_method.num_captions.png",
            "sensitivity_method.temperature.png",
        ]
        for field, other in (
            ("method.num_captions", "method.temperature"),
            ("method.temperature", "method.num_captions"),
        ):
            png = d / f"sensitivity_{field}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
            series = json.loads((d / f"sensitivity_{field}.json").read_text())["series"]["mAP@10"]
            values = ("0.04", "0.5") if other == "method.temperature" else ("2", "3")
            assert sorted(series) == [f"{other}={v}" for v in values]
            assert all(len(pts) == 2 for pts in series.values())
        job = next(j for j in res.jobs if j["swept"] == {"method.num_captions": "3", "method.temperature": "0.04"})
        assert [3.0, job["metrics"]["mAP@10"]] in json.loads((d / "sensitivity_method.num_captions.json").read_text())[
            "series"
        ]["mAP@10"]["method.temperature=0.04"]
        # the same sweep again: read from the sweep directory, no job rerun, no request
        mtimes = [(Path(j["dir"]) / "metrics.json").stat().st_mtime_ns for j in res.jobs]
        seen = []
        again = run_sweep(overrides, name="two-by-two", on_job=lambda rec, earlier: seen.append(earlier))
        assert seen == [True] * 4 and len(srv.requests_to(CHAT)) == n_requests
        assert [(Path(j["dir"]) / "metrics.json").stat().st_mtime_ns for j in again.jobs] == mtimes
        # eval --compare labels the runs by what differs
        capsys.readouterr()
        assert main(["eval", "--compare", *(j["dir"] for j in res.jobs), "--plot", "none"]) == 0
        out = capsys.readouterr().out
        assert f"- method.num_captions=2 method.temperature=0.5: {res.jobs[1]['dir']}" in out
        table = out.replace("**", "")  # the best value of a column is in bold
        assert f"| method.num_captions=3 method.temperature=0.04 | {res.jobs[2]['metrics']['mAP@5']:.2f} |" in table


def test_resume_after_a_kill_mid_sweep_repeats_no_finished_job(demo_root, tmp_path):
    ep = Endpoint(block_n=3)  # jobs 0 and 1 (2 captions) finish, job 2 hangs on the endpoint
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "TQDM_DISABLE": "1",
    }
    with ScriptedServer() as srv:
        srv.script(CHAT, ep)
        cmd = [
            sys.executable,
            "-m",
            "agentcir.cli",
            "run",
            "-m",
            "-q",
            *SWEEP,
            *llm_overrides(srv, tmp_path / "cache.sqlite"),
            f"run.root={demo_root}",
            "--sweep-name",
            "killed",
        ]
        manifest = demo_root / "sweeps" / "killed" / "manifest.json"
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.time() + 120
            while time.time() < deadline:
                states = [j["status"] for j in json.loads(manifest.read_text())["jobs"]] if manifest.is_file() else []
                if states[:3] == ["done", "done", "running"] and ep.blocked:
                    break
                assert proc.poll() is None, proc.communicate()[0]
                time.sleep(0.2)
            else:
                pytest.fail("the sweep did not reach job 2")
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            ep.release.set()
        jobs = json.loads(manifest.read_text())["jobs"]
        finished = {j["index"]: (Path(j["dir"]) / "metrics.json").stat().st_mtime_ns for j in jobs[:2]}
        answered_before = len(ep.answered)
        ep.block_n = None
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "job 0 [finished earlier]" in r.stdout and "job 1 [finished earlier]" in r.stdout
        assert "job 2 [done]" in r.stdout and "job 3 [done]" in r.stdout
        jobs = json.loads(manifest.read_text())["jobs"]
        assert [j["status"] for j in jobs] == ["done"] * 4
        assert {i: (Path(jobs[i]["dir"]) / "metrics.json").stat().st_mtime_ns for i in finished} == finished
        new = ep.answered[answered_before:]
        assert new and all("Write 3 diverse" in a for a in new)  # nothing of the finished jobs was asked again
        assert len(ep.answered) == len(set(ep.answered))
