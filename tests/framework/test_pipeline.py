"""A pipeline that overlaps its model calls, and reports that account for the time.

- OCTOPUS with every component on a scripted endpoint (fixed delay per call) reaches >= 80% of
  the ideal throughput ``concurrency / (calls per query x delay)``;
- endpoint clients follow ``run.concurrency`` unless the recipe caps them, and the cap is
  logged and reported;
- blocking CPU-bound component work runs in a pool bounded at the cores, off the event loop;
- ``metrics.json`` / ``report.md`` / ``agentcir eval --compare`` carry the per-stage model-call,
  queueing and CPU time and the run's phases.
"""

import asyncio
import importlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from agentcir.components.llms.scripted_server import ScriptedServer, Step, chat_completion
from agentcir.components.llms.scripted_tasks import InFlight, task_of, task_replier, task_reply
from agentcir.framework.accounting import CallClock, follow_concurrency
from agentcir.framework.cache import CallCache
from agentcir.framework.interfaces import user_message
from agentcir.framework.parsing import parse_task_reply
from agentcir.framework.runner import RunContext
from agentcir.framework.tasks import TASKS
from agentcir.registry import LLMS

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("pipeline_throughput")
    finally:
        sys.path.remove(str(BENCH))


def test_scripted_tasks_answer_every_task_validly():
    from agentcir.framework.prompts import load_prompt

    for name, spec in TASKS.items():
        variables = {
            v: (3 if v in ("k", "n") else ["a", "b"] if v in ("objects", "captions") else "x") for v in spec.variables
        }
        text = load_prompt(f"tasks/{name}").render({**dict(spec.optional), **variables})
        assert task_of({"messages": [user_message(text, [])]}) == name
        parse_task_reply(name, task_reply(name, text), variables)  # parses as promised
    assert task_of({"messages": [{"role": "user", "content": "hello"}]}) is None
    verdicts = {task_reply("verify", f"seed {i}", accept=0.5) for i in range(50)}
    assert verdicts == {"yes", "no"}


def test_octopus_overlaps_its_model_calls(bench, plugin_path, tmp_path, caplog):
    """Every component on the endpoint, 0.2 s per call, concurrency 8: >= 80% of the ideal throughput
    (the offline encoder is the test plugin's instant one, so the run is its model calls)."""
    delay, c = 0.2, 8
    data = bench.make_dataset(tmp_path / "data", 40, gallery_limit=40)
    with ScriptedServer() as srv:
        active = InFlight(task_replier(), delay=delay)
        srv.script("/chat/completions", active)
        with caplog.at_level("INFO", logger="agentcir"):
            row = bench.run_once(
                "octopus", data, tmp_path / "runs", srv.base_url, c, delay, ["kernels=reference", "encoder=toy"]
            )
        n_requests = len(srv.requests_to("/chat/completions"))  # besides the pre-flight GET /models
    assert "follows run.concurrency" in caplog.text
    assert active.max == c  # the endpoint saw run.concurrency requests at once, never more
    assert row["calls"] == n_requests  # each model call is one request (no retries, nothing else)
    assert row["calls_per_query"] > 4
    for name, st in row["stages"].items():
        if st["calls"] > 1:
            assert st["max_in_flight"] == c, (name, st)
            assert st["call_s"] >= 0.9 * (st["calls"] - 1) * delay, (name, st)
    # the slots are kept full: throughput >= 80% of concurrency / (calls per query x the calls'
    # measured mean time), i.e. the scheduling loses at most 20% (the endpoint's own latency, the
    # delay plus this loaded machine's per-call client and server overhead, is not the runner's)
    mean_call = sum(st["call_s"] for st in row["stages"].values()) / row["calls"]
    assert delay <= mean_call < 3 * delay
    ideal = c / (row["calls_per_query"] * mean_call)
    assert row["throughput"] >= 0.8 * ideal, json.dumps(row)
    busy = sum(st["call_wall_s"] for st in row["stages"].values())
    assert busy >= 0.85 * row["wall_s"], json.dumps(row)  # a call is in flight nearly all the time
    run = tmp_path / "runs" / f"octopus-c{c}"
    m = json.loads((run / "metrics.json").read_text())
    assert m["concurrency"] == {
        "run": c,
        "llm": {"limit": c, "capped_by": None},
        "cpu_workers": min(c, len(os.sched_getaffinity(0))),
    }
    assert "llm: at most 8 requests in flight (follows `run.concurrency`)" in (run / "report.md").read_text()


@pytest.mark.parametrize("cap", [None, 3])
def test_endpoint_concurrency_follows_the_run_unless_capped(cap, caplog):
    with ScriptedServer() as srv:
        active = InFlight(Step(json=chat_completion("ok")), delay=0.1)
        srv.script("/chat/completions", active)
        llm = LLMS.build("openai", {"base_url": srv.base_url, "model": "m", "retries": 0, "concurrency": cap})
        try:
            with caplog.at_level("INFO", logger="agentcir"):
                limits = follow_concurrency({"llm": llm, "encoder": object()}, 12)

            async def main():
                await asyncio.gather(*(llm.achat([user_message(f"q{i}")]) for i in range(24)))

            asyncio.run(main())
        finally:
            llm.close()
    if cap is None:
        assert limits == {"run": 12, "llm": {"limit": 12, "capped_by": None}}
        assert active.max == 12 and "12 requests in flight at most (follows run.concurrency)" in caplog.text
    else:
        assert limits == {"run": 12, "llm": {"limit": 3, "capped_by": "llm.concurrency"}}
        assert active.max == 3
        assert "at most 3 requests in flight (capped by llm.concurrency), below run.concurrency=12" in caplog.text


def test_endpoint_concurrency_default_and_bad_cap():
    from agentcir.components.llms.http import DEFAULT_CONCURRENCY
    from agentcir.registry import ConfigError

    llm = LLMS.build("openai", {"base_url": "http://localhost:1/v1"})
    assert llm.http.concurrency == DEFAULT_CONCURRENCY  # outside a run
    with pytest.raises(ConfigError, match="field 'concurrency': must be at least 1, got 0"):
        LLMS.build("openai", {"base_url": "http://localhost:1/v1", "concurrency": 0})


def test_recipe_cap_is_reported(tmp_path):
    from agentcir.framework.report import concurrency_note

    limits = {"run": 64, "llm": {"limit": 8, "capped_by": "llm.concurrency"}}
    note = concurrency_note(limits)
    assert (
        "at most 64 (`run.concurrency`)" in note
        and "llm: at most 8 requests in flight (capped by `llm.concurrency`)" in note
    )


class _Busy:
    """A component with a blocking op (CPU-bound by default, or marked ``io_bound``)."""

    kind = "detector"
    registry_key = "busy"

    def __init__(self, io_bound=False, seconds=0.05):
        self.io_bound = io_bound
        self.seconds = seconds
        self.identity = f"busy-{io_bound}"
        self.lock = threading.Lock()
        self.now = self.max = 0
        self.threads = set()

    def detect(self, image):
        with self.lock:
            self.now += 1
            self.max = max(self.max, self.now)
            self.threads.add(threading.current_thread().name)
        if self.io_bound:  # waiting on I/O
            time.sleep(self.seconds)
        else:  # busy, holding a core (and, in part, the GIL)
            t = time.perf_counter()
            while time.perf_counter() - t < self.seconds:
                pass
        with self.lock:
            self.now -= 1
        return [{"label": str(image)}]


@pytest.mark.parametrize("io_bound", [False, True])
def test_blocking_work_runs_off_the_event_loop_in_a_bounded_pool(io_bound):
    comp = _Busy(
        io_bound=io_bound, seconds=0.1 if io_bound else 0.05
    )  # long enough for 16 threads to overlap under load
    ctx = RunContext(cache=CallCache(), run_dir=None, concurrency=16, progress=False)
    ticks = []

    async def main():
        from concurrent.futures import ThreadPoolExecutor

        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(16, thread_name_prefix="agentcir-io"))

        async def ticker():
            for _ in range(10):
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.01)

        t = asyncio.ensure_future(ticker())
        await asyncio.gather(*(ctx.call(comp, "detect", image=f"im{i}") for i in range(32)))
        await t

    try:
        asyncio.run(main())
    finally:
        ctx.close()
    if io_bound:
        assert comp.max == 16 and all(n.startswith("agentcir-io") for n in comp.threads)
    else:
        assert comp.max <= ctx.cpu_workers() and all(n.startswith("agentcir-cpu") for n in comp.threads)
    assert len(ticks) == 10  # the event loop kept running meanwhile
    assert ctx.clocks[""].max_in_flight == 16 and ctx.stats[""].calls == 32


def test_call_clock_sums_and_unions(monkeypatch):
    """Two overlapping calls on a stepped clock: the sum counts both, the union their span once."""
    from agentcir.framework import accounting

    now = [100.0]
    monkeypatch.setattr(accounting, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: now[0])}))
    clock = CallClock()
    a = clock.start()
    now[0] += 0.02
    b = clock.start()
    now[0] += 0.02
    clock.stop(a)  # a: 0.04 s
    now[0] += 0.01
    clock.stop(b)  # b: 0.03 s; in flight from 100.00 to 100.05
    now[0] += 1.0  # idle: not part of the union
    c = clock.start()
    now[0] += 0.1
    clock.stop(c)
    clock.queued(0.5)
    assert clock.call_s == pytest.approx(0.17) and clock.call_wall_s == pytest.approx(0.15)
    assert clock.queue_s == 0.5 and clock.max_in_flight == 2


def test_reports_account_for_the_time(plugin_path, tmp_path, capsys):
    """metrics.json: wall_s from the process start and its phases; per stage model-call (sum, wall),
    queueing and CPU time; report.md shows them; `agentcir eval --compare` prints them."""
    from agentcir.cli import main
    from agentcir.framework.accounting import process_start_time
    from agentcir.framework.recipe import compose
    from agentcir.framework.runner import run_recipe

    r = compose(
        [
            "method=llm_then_rank",
            "encoder=toy",
            "llm=counting",
            f"llm.counter={tmp_path / 'c.txt'}",
            "llm.delay=0.05",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            "run.concurrency=4",
        ]
    )
    started = time.time()
    res = run_recipe(r)
    m = json.loads((res.dir / "metrics.json").read_text())
    t = m["time"]
    assert set(t) == {"startup_s", "model_loading_s", "gallery_s", "stages_s", "evaluation_s", "unattributed_s"}
    assert m["wall_s"] == pytest.approx(sum(t.values()), abs=0.05)
    assert m["wall_s"] >= time.time() - started - 0.05  # counted from before the run started
    assert process_start_time() <= started
    cost = m["cost"]["rewrite"]
    # each call sleeps 0.05 s: the sum is at least that, and far below what counting the queueing
    # (up to 4 calls' worth per call at concurrency 4) would give, however loaded the machine
    assert cost["calls"] > 20 and cost["calls"] * 0.05 <= cost["call_s"] < cost["calls"] * 0.05 * 2.5
    assert cost["call_wall_s"] <= cost["wall_s"] and cost["call_s"] > 2 * cost["call_wall_s"]  # they overlapped
    assert cost["max_in_flight"] == 4 and cost["queue_s"] > 0 and cost["cpu_s"] > 0
    report = (res.dir / "report.md").read_text()
    assert "model-call s (sum)" in report and "queueing s" in report and "CPU s" in report
    assert "| gallery embedding (or opening the stored one) |" in report and "| model loading |" in report
    capsys.readouterr()
    assert main(["eval", str(res.dir), "--compare", "--plot", "none"]) == 0
    out = capsys.readouterr().out
    assert "Time (s) and model calls" in out
    for col in ("wall_s", "model_loading_s", "gallery_s", "call_s", "call_wall_s", "queue_s", "cpu_s", "cache_hits"):
        assert col in out, col


def test_encoded_images_are_cached_within_a_byte_budget(tmp_path):
    from PIL import Image

    from agentcir.components.llms import http

    cache = http._BytesLRU(100)
    cache.put("a", "x" * 60)
    cache.put("b", "y" * 30)
    assert cache.get("a") == "x" * 60  # a is now the most recent
    cache.put("c", "z" * 30)  # over budget: the least recent (b) goes
    assert cache.get("b") is None and cache.get("a") and cache.get("c")
    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "im.jpg")
    url = http.image_data_url(tmp_path / "im.jpg", max_side=16)
    assert url.startswith("data:image/jpeg;base64,") and http.image_data_url(tmp_path / "im.jpg", max_side=16) is url
