"""Fault sweep: every method on the demo, killed and faulted the ways real runs are, must finish
with the metrics of an uninterrupted run, repeat no more model calls than were in flight, and
never print a traceback.

    python benchmarks/fault_sweep.py                  # the whole sweep (resumable: rerun to continue)
    python benchmarks/fault_sweep.py --only kills --methods xr,octopus
    python benchmarks/fault_sweep.py --fresh          # start over

The LLM is ``llm=openai`` against the project's scripted HTTP server
(:mod:`agentcir.components.llms.scripted_server`) run here as a slow OpenAI-compatible endpoint:
it answers every task of the contract deterministically from the request (so metrics are
reproducible), and counts every request it receives, so repeated model calls are counted at the
server, not by the client under test. Each ``agentcir run`` is a separate process.

Scenarios:

- ``kill``: SIGKILL at every stage boundary (right after ``stages/<stage>.done`` appears; for the
  methods outside ``--full-methods`` the first ``--boundaries``) and at seeded random points inside
  stages (after a random number of the run's model calls reached the endpoint), then the same
  command again until it exits 0.
- ``fault``: 429 with Retry-After, 500, 503, hangs (past the client timeout), connection resets,
  truncated bodies, prose (non-JSON 200), empty ``choices`` and huge (1 MB) replies, each at 10%
  and 30% of requests (seeded), with ``run.concurrency`` 4.
- ``lock``: two processes on one run directory at once (without and with ``--wait``).
- ``disk``: the run root on a full disk (a 8 MB tmpfs filled to a few KB; when mounting is not
  permitted the scenario is reported as not run), then space freed and the command rerun.

Results are appended to ``<out>/results.jsonl`` (one line per scenario: a rerun skips the
scenarios already there) and the table is printed (and written to ``<out>/table.md``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentcir.components.llms.scripted_server import Request, ScriptedServer, Step, chat_completion, error_body  # noqa: E402
from tests.full_disk import fill, mount_tmpfs, umount  # noqa: E402

CHAT = "/chat/completions"
METHODS: dict[str, list[str]] = {
    "octopus": ["method=octopus"],
    "xr": ["method=xr", "method.stage3=true", "method.k_prime=10", "method.alpha=10"],
    "imageseeker": ["method=imageseeker", "method.max_steps=4"],
    "cirevl": ["method=cirevl"],
    "ldre": ["method=ldre"],
    "text_only": ["method=text_only"],
    "image_only": ["method=image_only"],
    "image_text_sum": ["method=image_text_sum"],
    "autocir": ["method=autocir", "method.max_check_num=2"],
    "imagescope": ["method=imagescope", "method.k=10"],
    "wiser": ["method=wiser", "method.top_n=5", "editor=recolour"],
    "paracosm": ["method=paracosm", "method.describer=llm", "editor=recolour"],
}
FAULTS = ("429", "500", "503", "hang", "reset", "truncate", "prose", "empty", "huge")
BAD_200 = ("truncate", "prose", "empty")  # kind "bad200": one of these, drawn per faulted request
HANG_S = 3.0  # a hung reply waits this long; the client's timeout is shorter
CLIENT_TIMEOUT_S = 1.0


# -- the scripted endpoint ------------------------------------------------------------------------
def _task_signatures() -> list[tuple[str, str, list[str]]]:
    """(task, first static words of its prompt, the prompt's static pieces) of every contract task."""
    from agentcir.framework.prompts import load_prompt
    from agentcir.framework.tasks import TASKS

    out = []
    for name in TASKS:
        text = load_prompt(f"tasks/{name}").text
        pieces = [p for p in re.split(r"\{\{\s*\w+\s*\}\}", text) if p.strip()]
        out.append((name, text.split("{{")[0].strip()[:40], pieces))
    return out


def _message_text(msg: dict) -> str:
    c = msg.get("content")
    if isinstance(c, list):
        return " ".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
    return c if isinstance(c, str) else ""


def task_replier() -> Callable[[Request], Step]:
    """A deterministic answer to any task of the contract (and to the ImageSeeker agent's tool loop),
    built from the request's own text, so the same request always gets the same reply."""
    from agentcir.framework.tasks import TASKS

    sigs = _task_signatures()

    def reply(req: Request) -> Step:
        body = req.json or {}
        msgs = body.get("messages") or []
        h = int(hashlib.sha256(req.body).hexdigest()[:8], 16)
        if body.get("tools"):  # the ImageSeeker agent: one search, then an answer from its results
            tool_msgs = [m for m in msgs if m.get("role") == "tool"]
            if not tool_msgs:
                question = next((_message_text(m) for m in msgs if m.get("role") == "user"), "")
                return Step(
                    json=chat_completion(
                        None, tool_calls=[{"name": "image_search", "id": "c1", "arguments": {"query": question[:200]}}]
                    )
                )
            ids = re.findall(r'"id":\s*"([^"]+)"', str(tool_msgs[-1].get("content")))[:5]
            return Step(json=chat_completion(json.dumps({"ids": ids, "reasoning": "scripted"})))
        user = [m for m in msgs if m.get("role") == "user"]
        text = _message_text(user[0]) if user else ""
        task, pieces = None, []
        for name, sig, p in sigs:
            if sig and text.startswith(sig):
                task, pieces = name, p
                break
        values = text
        for p in pieces:
            values = values.replace(p, " | ")
        phrase = " ".join(w for w in values.replace("|", " ").split())[:160] or "a photo"
        spec = TASKS.get(task) if task else None
        if spec is None or spec.reply == "text":
            return Step(json=chat_completion(phrase))
        if spec.reply == "yes_no":
            return Step(json=chat_completion("Yes." if h % 3 == 0 else "No."))
        if spec.reply == "true_false":
            return Step(json=chat_completion("True" if h % 2 else "False"))
        words = phrase.split()
        variants = [" ".join(words[i:] + words[:i]) for i in range(min(4, len(words)))] or [phrase]
        data = {
            "target_caption": phrase,
            "modifications": variants[:1],
            "proxies": variants,
            "objects": words[:3],
            "keep": words[:2],
            "remove": [],
            "descriptions": variants,
            "caption": phrase,
            "captions": variants,
            "questions": [{"statement": v, "answer": bool((h >> i) & 1)} for i, v in enumerate(variants)],
            "session_memory": phrase,
            "working_memory": phrase,
        }
        return Step(json=chat_completion(json.dumps({k: data[k] for k, _ in spec.fields})))

    return reply


def faulty(good: Callable[[Request], Step], kind: str, rate: float, seed: int = 0) -> Callable[[Request], Step]:
    """``good``, except that a seeded ``rate`` of requests get fault ``kind`` (decided per request body
    and attempt, so a retry of a faulted request may succeed)."""
    attempts: dict[bytes, int] = {}
    lock = threading.Lock()

    def reply(req: Request) -> Step:
        with lock:
            n = attempts.get(req.body, 0)
            attempts[req.body] = n + 1
        rnd = random.Random(hashlib.sha256(req.body + f"|{n}|{seed}".encode()).digest())
        if rnd.random() >= rate:
            return good(req)
        return bad(req, rnd.choice(BAD_200) if kind == "bad200" else kind)

    def bad(req: Request, kind: str) -> Step:
        if kind == "429":
            return Step(status=429, json=error_body("rate limited", "rate_limit"), headers={"Retry-After": "0.2"})
        if kind in ("500", "503"):
            return Step(status=int(kind), json=error_body("scripted server error"))
        if kind == "hang":
            return Step(delay=HANG_S, json=good(req).json)
        if kind == "reset":
            return Step(fault="reset")
        if kind == "truncate":
            return Step(json=good(req).json, fault="truncate")
        if kind == "prose":
            return Step(body=b"We are experiencing high demand. Please try again later.", content_type="text/plain")
        if kind == "empty":
            return Step(json={"object": "chat.completion", "choices": []})
        if kind == "huge":
            return Step(json={**good(req).json, "padding": "x" * 1_000_000})
        raise ValueError(kind)

    return reply


# -- runs ----------------------------------------------------------------------------------------
@dataclass
class Outcome:
    rc: int
    wall_s: float
    stderr: str
    killed: bool = False
    inflight_at_kill: int = 0


@dataclass
class Row:
    scenario: str
    group: str
    tried: int = 0
    identical: int = 0
    repeated_calls: int = 0
    max_repeats_per_kill: int = 0
    max_inflight_at_kill: int = 0
    failed_queries: int = 0
    tracebacks: int = 0
    notes: list[str] = field(default_factory=list)


class Sweep:
    def __init__(
        self,
        out: Path,
        *,
        limit: int,
        concurrency: int,
        delay: float,
        seed: int,
        extra: tuple[str, ...] = (),
        pythonpath: tuple[str, ...] = (),
    ):
        self.out = out
        self.extra, self.pythonpath = tuple(extra), tuple(pythonpath)  # e.g. the tests' toy encoder plugin
        self.work = out / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.limit, self.concurrency, self.seed = limit, concurrency, seed
        self.server = ScriptedServer(delay=delay).start()
        self.replier = task_replier()
        self.server.script(CHAT, self.replier)
        self.results_file = out / "results.jsonl"
        self.done = {}
        if self.results_file.is_file():
            for line in self.results_file.read_text().splitlines():
                if line.strip():
                    d = json.loads(line)
                    self.done[d["scenario"]] = d
        self.refs: dict[str, dict] = {}

    def close(self) -> None:
        self.server.stop()

    # a run of `agentcir run` in its own process
    def cmd(self, method: str, name: str, *extra: str, root: Path | None = None) -> list[str]:
        return [
            sys.executable,
            "-m",
            "agentcir.cli",
            "run",
            *METHODS[method],
            "dataset=demo",
            f"dataset.limit={self.limit}",
            "llm=openai",
            f"llm.base_url={self.server.base_url}",
            "llm.model=scripted",
            "llm.backoff=0.05",
            "llm.backoff_max=0.5",
            f"llm.timeout={CLIENT_TIMEOUT_S}",
            f"run.root={root or self.work / 'root'}",
            f"run.name={name}",
            f"run.cache={self.work / (name + '.sqlite')}",
            f"run.concurrency={self.concurrency}",
            "run.progress=false",
            *self.extra,
            *extra,
        ]

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *self.pythonpath, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        return env

    def run(self, cmd: list[str], *, kill_when: Callable[[float], bool] | None = None, timeout: float = 600) -> Outcome:
        t0 = time.perf_counter()
        err_path = self.work / "stderr.txt"
        with open(err_path, "w") as err:
            proc = subprocess.Popen(cmd, env=self.env(), stdout=subprocess.DEVNULL, stderr=err)
            killed, inflight = False, 0
            while proc.poll() is None:
                el = time.perf_counter() - t0
                if kill_when is not None and kill_when(el):
                    inflight = self.server.inflight
                    os.kill(proc.pid, signal.SIGKILL)
                    killed = True
                    break
                if el > timeout:
                    proc.kill()
                    break
                time.sleep(0.005)
            proc.wait()
        return Outcome(proc.returncode, time.perf_counter() - t0, err_path.read_text(), killed, inflight)

    def requests(self) -> int:
        return len(self.server.requests_to(CHAT))

    def metrics(self, name: str, root: Path | None = None) -> dict | None:
        f = (root or self.work / "root") / name / "metrics.json"
        if not f.is_file():
            return None
        m = json.loads(f.read_text())
        return {"final": m["final"], "stages": m["stages"]}

    def clean(self, name: str, root: Path | None = None) -> None:
        shutil.rmtree((root or self.work / "root") / name, ignore_errors=True)
        # what a method stores with the shared gallery (Paracosm's gallery-side pass: its descriptions and
        # index) goes too, so that every scenario makes those calls again, as the reference run did
        for g in ((root or self.work / "root") / "_galleries").glob("*"):
            shutil.rmtree(g / "derived", ignore_errors=True)
            for f in g.glob("captions/paracosm-*"):
                f.unlink(missing_ok=True)
        for suffix in (".sqlite", ".sqlite-wal", ".sqlite-shm"):
            (self.work / (name + suffix)).unlink(missing_ok=True)

    def reference(self, method: str) -> dict:
        """An uninterrupted run: its metrics, requests, wall time and stage order."""
        if method in self.refs:
            return self.refs[method]
        f = self.out / f"ref-{method}.json"
        if f.is_file():
            self.refs[method] = json.loads(f.read_text())
            return self.refs[method]
        name = f"ref-{method}"
        self.clean(name)
        before = self.requests()
        o = self.run(self.cmd(method, name))
        if o.rc != 0:
            raise SystemExit(f"reference run of {method} failed (exit {o.rc}):\n{o.stderr[-3000:]}")
        stages_dir = self.work / "root" / name / "stages"
        order = [p.stem for p in sorted(stages_dir.glob("*.done"), key=lambda p: p.stat().st_mtime_ns)]
        ref = {"metrics": self.metrics(name), "requests": self.requests() - before, "wall_s": o.wall_s, "stages": order}
        f.write_text(json.dumps(ref))
        self.refs[method] = ref
        return ref

    def finish(self, cmd: list[str], row: Row, tries: int = 4) -> Outcome:
        """Rerun ``cmd`` until it exits 0 (at most ``tries`` times), counting failures and tracebacks."""
        o = None
        for _ in range(tries):
            o = self.run(cmd)
            row.tracebacks += "Traceback" in o.stderr
            if o.rc == 0:
                return o
            m = re.search(r"(\d+) of \d+ queries failed", o.stderr)
            row.failed_queries += int(m.group(1)) if m else 0
            row.notes.append(f"exit {o.rc}: {o.stderr.strip().splitlines()[-1][:160] if o.stderr.strip() else ''}")
        return o

    def record(self, row: Row) -> None:
        with open(self.results_file, "a") as f:
            f.write(json.dumps(asdict(row)) + "\n")
        self.done[row.scenario] = asdict(row)
        print(format_row(asdict(row)), flush=True)

    # -- scenarios ------------------------------------------------------------------------------
    def kills(self, method: str, inside: int, boundaries: int | None = None) -> None:
        """SIGKILL after each stage boundary (the first ``boundaries`` of them; None: all) and at
        ``inside`` seeded points inside stages: after a random number of the run's model calls reached
        the endpoint (methods that call no model: at a random moment of the reference's wall time)."""
        ref = self.reference(method)
        rng = random.Random(f"{self.seed}-{method}")
        stages = ref["stages"] if boundaries is None else ref["stages"][:boundaries]
        if ref["requests"] > 1:
            inner = [("call", rng.randint(1, ref["requests"] - 1)) for _ in range(inside)]
        else:
            inner = [("at", round(rng.uniform(0.3, 0.95) * ref["wall_s"], 2)) for _ in range(inside)]
        points = [("after", s) for s in stages] + inner
        for kind, where in points:
            sid = f"kill {method} {kind} {where}"
            row = Row(sid, f"kill {method}")
            if sid in self.done:
                continue
            name = "k-" + re.sub(r"[^\w.-]+", "_", f"{method}-{kind}-{where}")
            self.clean(name)
            cmd = self.cmd(method, name)
            before = self.requests()
            if kind == "after":
                done_file = self.work / "root" / name / "stages" / f"{where}.done"
                o = self.run(cmd, kill_when=lambda _el, f=done_file: f.is_file())
            elif kind == "call":
                o = self.run(cmd, kill_when=lambda _el, n=where: self.requests() - before >= n)
            else:
                o = self.run(cmd, kill_when=lambda el, t=where: el >= t)
            row.tried = int(o.killed)  # a run that finished before its kill point is no kill
            row.tracebacks += "Traceback" in o.stderr and not o.killed
            if not o.killed:
                row.notes.append(f"not a kill: finished (exit {o.rc}) before the kill point")
            self.finish(cmd, row)
            repeats = self.requests() - before - ref["requests"]
            row.repeated_calls = repeats
            row.max_repeats_per_kill = repeats
            row.max_inflight_at_kill = o.inflight_at_kill
            row.identical = int(self.metrics(name) == ref["metrics"]) * row.tried
            self.record(row)
            self.clean(name)

    def faults(self, method: str, rates: list[float], kinds: tuple[str, ...] = FAULTS) -> None:
        ref = self.reference(method)
        for kind in kinds:
            for rate in rates:
                sid = f"fault {kind} {rate:.0%} {method}"
                if sid in self.done:
                    continue
                row = Row(sid, f"fault {kind}")
                name = "f-" + re.sub(r"[^\w.-]+", "_", f"{method}-{kind}-{rate}")
                self.clean(name)
                self.server.script(CHAT, faulty(self.replier, kind, rate, self.seed))
                before = self.requests()
                try:
                    o = self.run(self.cmd(method, name))
                finally:
                    self.server.script(CHAT, self.replier)
                row.tried = 1
                row.tracebacks += "Traceback" in o.stderr
                if o.rc != 0:
                    m = re.search(r"(\d+) of \d+ queries failed", o.stderr)
                    row.failed_queries = int(m.group(1)) if m else -1
                    row.notes.append(
                        f"exit {o.rc}: {o.stderr.strip().splitlines()[-1][:200] if o.stderr.strip() else ''}"
                    )
                    self.finish(self.cmd(method, name), row)  # the rerun retries the failed queries alone
                row.repeated_calls = self.requests() - before - ref["requests"]  # = the retries of faulted requests
                row.identical = int(self.metrics(name) == ref["metrics"])
                self.record(row)
                self.clean(name)

    def locks(self, method: str) -> None:
        ref = self.reference(method)
        for wait in (False, True):
            sid = f"lock two processes {'--wait' if wait else 'no wait'} {method}"
            if sid in self.done:
                continue
            row = Row(sid, "lock")
            name = f"l-{method}-{int(wait)}"
            self.clean(name)
            cmd = self.cmd(method, name) + (["--wait"] if wait else [])
            err = [self.work / f"lock{i}.txt" for i in range(2)]
            procs = []
            for e in err:
                with open(e, "w") as fh:
                    procs.append(subprocess.Popen(cmd, env=self.env(), stdout=subprocess.DEVNULL, stderr=fh))
            codes = [p.wait(timeout=600) for p in procs]
            texts = [e.read_text() for e in err]
            row.tried = 1
            row.tracebacks = sum("Traceback" in t for t in texts)
            ok = sorted(codes) == ([0, 0] if wait else [0, 2])
            if not wait and ok:
                ok = "is in use by pid" in texts[codes.index(2)]
            row.identical = int(ok and self.metrics(name) == ref["metrics"])
            row.notes.append(
                f"exit codes {codes}"
                + ("" if wait else f"; refused one said: {texts[codes.index(2)].strip()[:160] if 2 in codes else '-'}")
            )
            self.record(row)
            self.clean(name)

    def disk(self, method: str) -> None:
        ref = self.reference(method)
        for free_kb in (4, 48):
            sid = f"disk full ({free_kb} KB free) {method}"
            if sid in self.done:
                continue
            row = Row(sid, "disk full")
            mnt = self.work / "tmpfs"
            mnt.mkdir(exist_ok=True)
            mounted, why = mount_tmpfs(mnt, "8m")
            if not mounted:
                row.notes.append(
                    f"not run: cannot mount a tmpfs here ({why[:120]}); "
                    f"tests/framework/test_reliability.py injects ENOSPC instead"
                )
                self.record(row)
                continue
            try:
                root = mnt / "root"
                shutil.copytree(self.work / "root" / "_galleries", root / "_galleries")
                name = f"d-{method}"
                fill(mnt / "filler", free_kb * 1024)
                cmd = self.cmd(method, name, root=root)
                o = self.run(cmd)
                row.tried = 1
                row.tracebacks += "Traceback" in o.stderr
                said = o.stderr.strip().splitlines()[-1] if o.stderr.strip() else ""
                row.notes.append(f"full: exit {o.rc}: {said[:200]}")
                (mnt / "filler").unlink()
                o2 = self.finish(cmd, row)
                row.identical = int(
                    o.rc == 2 and "no space left" in said and o2.rc == 0 and self.metrics(name, root) == ref["metrics"]
                )
            finally:
                umount(mnt)
            self.record(row)


# -- the table -----------------------------------------------------------------------------------
HEADER = (
    "| scenario | tried | finished with identical metrics | repeated model calls (at the server) | "
    "failed queries (counted, reported) | tracebacks |\n|---|---|---|---|---|---|"
)


def format_row(r: dict) -> str:
    return (
        f"| {r['scenario']} | {r['tried']} | {r['identical']} | {r['repeated_calls']} | {r['failed_queries']} | "
        f"{r['tracebacks']} |" + (f" <!-- {'; '.join(r['notes'])} -->" if r.get("notes") else "")
    )


def summary(rows: list[dict], concurrency: int) -> str:
    """One line per group (all kills of a method, each fault kind, locks, disk)."""
    groups: dict[str, dict] = {}
    for r in rows:
        g = groups.setdefault(
            r["group"],
            {
                "scenario": r["group"],
                "tried": 0,
                "identical": 0,
                "repeated_calls": 0,
                "failed_queries": 0,
                "tracebacks": 0,
                "max_rep": 0,
                "max_inflight": 0,
            },
        )
        for k in ("tried", "identical", "repeated_calls", "failed_queries", "tracebacks"):
            g[k] += max(0, r[k])
        g["max_rep"] = max(g["max_rep"], r.get("max_repeats_per_kill", 0))
        g["max_inflight"] = max(g["max_inflight"], r.get("max_inflight_at_kill", 0))
    lines = [HEADER]
    for g in groups.values():
        rep = str(g["repeated_calls"])
        if g["scenario"].startswith("kill"):
            rep += f" (at most {g['max_rep']} per kill; run.concurrency {concurrency})"
        elif g["scenario"].startswith("fault"):
            rep += " (retries of faulted requests)"
        lines.append(
            f"| {g['scenario']} | {g['tried']} | {g['identical']} | {rep} | {g['failed_queries']} | {g['tracebacks']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "runs" / "_fault_sweep"), help="results and work folder (resumable)")
    ap.add_argument("--only", default="kills,faults,locks,disk", help="comma-separated scenario groups")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--fault-method", default="octopus", help="method of the endpoint-fault, lock and disk scenarios")
    ap.add_argument("--rates", default="0.1,0.3")
    ap.add_argument("--inside", type=int, default=2, help="seeded random kills inside stages per method")
    ap.add_argument("--full-methods", default="octopus,xr", help="methods killed at every stage boundary")
    ap.add_argument("--boundaries", type=int, default=2, help="stage boundaries killed for the other methods")
    ap.add_argument("--limit", type=int, default=8, help="demo queries per run")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--delay", type=float, default=0.05, help="seconds the endpoint takes per reply")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh", action="store_true", help="forget earlier results and start over")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if a.fresh and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    sw = Sweep(out, limit=a.limit, concurrency=a.concurrency, delay=a.delay, seed=a.seed)
    only = set(a.only.split(","))
    print(HEADER, flush=True)
    methods = a.methods.split(",")
    full = [m for m in methods if m in a.full_methods.split(",")]
    rates = [float(r) for r in a.rates.split(",")]
    try:  # the headline methods and the 30% faults first: an interrupted sweep has the most telling rows
        if "kills" in only:
            for m in full:
                sw.kills(m, a.inside)
        if "faults" in only:
            sw.faults(a.fault_method, [max(rates)])
        if "locks" in only:
            sw.locks(a.fault_method)
        if "disk" in only:
            sw.disk(a.fault_method)
        if "kills" in only:
            for m in methods:
                if m not in full:
                    sw.kills(m, a.inside, boundaries=a.boundaries)
        if "faults" in only and len(rates) > 1:
            sw.faults(a.fault_method, [r for r in rates if r != max(rates)])
    finally:
        sw.close()
    rows = list(sw.done.values())
    table = summary(rows, a.concurrency)
    detail = "\n".join([HEADER, *(format_row(r) for r in rows)])
    (out / "table.md").write_text(f"{table}\n\nEvery scenario:\n\n{detail}\n")
    print("\n" + table)
    bad = [r for r in rows if r["tried"] and (not r["identical"] or r["tracebacks"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
