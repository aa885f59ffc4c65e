"""The pipeline runner: stages over a batch, bounded concurrency, cached calls, resumable runs.

A run directory holds::

    recipe.yaml             the resolved recipe (every default filled in)
    stages/<stage>.jsonl    per-query records, appended as each query finishes
    stages/<stage>.*.npz    arrays and candidate snapshots of a finished stage
    stages/<stage>.done     marker with the stage's cost (calls, cache hits, wall, model-call, CPU time)
    rankings.jsonl          final top-k item ids and scores per query
    metrics.json            metrics of the final ranking and of every stage that ranked, the cost
                            per stage and where the time went (:mod:`agentcir.framework.accounting`)
    report.md               the same, readable, with the cost and time tables
    logs/                   what the loggers of ``run.loggers`` keep here (:mod:`agentcir.framework.tracking`)

Concurrency: ``run.concurrency`` bounds the model calls in flight at once across the whole
run (not the queries: a query waiting for its next call holds no slot), and a stage keeps
``2 x concurrency`` queries in progress so that a free slot always finds a call waiting.
Async component operations (``a<op>``, e.g. the endpoint clients) run on the event loop;
blocking ones run in a worker pool bounded at the number of cores (CPU-bound offline models
must not oversubscribe the cores), or, for components marked ``io_bound``, in a pool of
``run.concurrency`` threads.

Re-running the same recipe resumes: finished stages are loaded, a stage that was cut
off skips the queries it already logged, and every model call that completed is in the
content-addressed cache, so nothing completed is recomputed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

import numpy as np

from .accounting import CallClock, loading_seconds
from .cache import MISSING, CallCache, decode_value, encode_value
from .call_types import restore
from .errors import AgentcirError, InputError
from .files import atomic_path, atomic_write_text
from .gallery import Gallery, GalleryItem
from .hashing import stable_hash
from .integrity import (
    Damaged,
    check_record,
    file_record,
    open_line,
    read_sidecar,
    recompute_warning,
    remove_with_sidecar,
    seal,
    seal_line,
    unseal,
    write_text_checked,
)
from .method import Method
from .prompts import load_prompt
from .state import RunResult, RunState, Stage, StageStats
from .types import Candidates, Query

log = logging.getLogger(__name__)


#: scalar ``RunState`` fields a stage may set; saved in its ``.done`` marker and restored when a
#: resumed run skips the finished stage (e.g. the captions key chosen by ``gallery_captions``)
PERSISTED_STATE = ("captions_key",)


class StageError(AgentcirError):
    """Some queries of a stage failed; the others' work is saved and a rerun retries the failed ones."""


def _names_a_vanished_file(component: Any, value: Any) -> bool:
    """A cached generator or editor output naming an image file that is gone (a gallery photo
    renamed or deleted, a cleaned folder): the call runs again instead of failing on the file forever."""
    if getattr(component, "kind", "") not in ("generator", "editor") or not isinstance(value, (str, os.PathLike)):
        return False
    p = os.fspath(value)
    return os.path.isabs(p) and not os.path.exists(p)


class RunContext:
    """What a stage gets besides the state: cached model calls, a concurrent per-query
    map, the kernel backend, and where the run lives."""

    def __init__(
        self,
        *,
        cache: CallCache,
        run_dir: Path | None,
        concurrency: int = 8,
        progress: bool = True,
        kernels: str = "auto",
    ):
        self.cache = cache
        self.run_dir = run_dir
        self.concurrency = concurrency
        self.progress = progress
        self.kernels = kernels
        self.stage = ""
        self.stats: dict[str, StageStats] = {}
        #: ``on_progress(stage, done, total)`` (e.g. the web page's progress): a stage started
        #: (0, 0), or ``done`` of ``total`` items of it (gallery captions)
        self.on_progress: Callable[[str, int, int], None] | None = None
        self.clocks: dict[str, CallClock] = {}
        self._inflight: dict[str, asyncio.Future] = {}
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._cpu_pool: ThreadPoolExecutor | None = None

    @property
    def window(self) -> int:
        """Queries (or items) a stage keeps in progress at once: enough to fill every call slot."""
        return 2 * self.concurrency

    def _slot(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.concurrency))
        return self._slots[1]

    def cpu_workers(self) -> int:
        """Size of the pool of blocking, CPU-bound work: the usable cores, at most ``concurrency``."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, min(self.concurrency, cores))

    async def run_cpu(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the bounded CPU worker pool (the event loop keeps serving calls meanwhile)."""
        if self._cpu_pool is None:
            self._cpu_pool = ThreadPoolExecutor(max_workers=self.cpu_workers(), thread_name_prefix="agentcir-cpu")
        return await asyncio.get_running_loop().run_in_executor(self._cpu_pool, lambda: fn(*args))

    def close(self) -> None:
        """Shut the CPU worker pool down (it is made again when needed)."""
        pool, self._cpu_pool = self._cpu_pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # -- model calls ------------------------------------------------------------------
    @staticmethod
    def call_key(component: Any, op: str, inputs: dict[str, Any]) -> str:
        """key = component identity (backend, model, config, prompt files, dependencies)
        + operation + inputs (files by content) + the hash of every prompt file the call reads:
        ``component.call_prompts(op, inputs)`` (e.g. an LLM task's default ``tasks/<task>``),
        else the prompt file named by a ``prompt=`` input."""
        if hasattr(component, "call_prompts"):
            names = component.call_prompts(op, inputs)
        else:
            prompt = inputs.get("prompt")
            names = [prompt] if isinstance(prompt, str) and prompt else []
        shas = [load_prompt(n).sha256 for n in names]
        prompt_sha = shas[0] if len(shas) == 1 else (shas or None)
        return stable_hash(component.identity, op, inputs, prompt_sha)

    async def call(self, component: Any, op: str, /, **inputs: Any) -> Any:
        """``component.<op>(**inputs)`` through the cache (async variant ``a<op>`` preferred)."""
        st = self.stats.setdefault(self.stage, StageStats())
        key = self.call_key(component, op, inputs)
        pending = self._inflight.get(key)
        if pending is not None:  # the same call is already running: share its result
            st.cache_hits += 1
            return await asyncio.shield(pending)
        hit = self._cached(component, op, key)
        if hit is not MISSING:
            return hit
        fut = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            out = await self._in_slot(lambda: self._invoke(component, op, inputs))
            out = self._store(component, op, key, out)
            fut.set_result(out)
            return out
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters (if any) re-raise it
            raise
        finally:
            del self._inflight[key]

    async def _in_slot(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """``await work()`` holding one call slot, timed on the stage's call clock. At most
        ``concurrency`` model calls are in flight, however stages nest their maps: a kill loses
        (and a resumed run repeats) at most that many calls."""
        clock = self.clocks.setdefault(self.stage, CallClock())
        queued = time.perf_counter()
        async with self._slot():
            started = clock.start()
            clock.queued(started - queued)
            try:
                return await work()
            finally:
                clock.stop(started)

    def _cached(self, component: Any, op: str, key: str) -> Any:
        """The cached answer of a call (counted as a hit), typed as the operation declares; else
        ``MISSING`` (also when the answer names a file that is gone)."""
        hit = self.cache.get(key)
        if hit is MISSING or _names_a_vanished_file(component, hit):
            return MISSING
        self.stats.setdefault(self.stage, StageStats()).cache_hits += 1
        return restore(component, op, hit)

    def _store(self, component: Any, op: str, key: str, out: Any) -> Any:
        """Cache a computed call, count it, and hand back what a cache hit would return, so a
        resumed run sees identical values (typed as the operation declares: a ChatReply stays
        a ChatReply, call_types)."""
        st = self.stats.setdefault(self.stage, StageStats())
        name = f"{component.kind}:{getattr(component, 'registry_key', '')}"
        self.cache.put(key, out, component=name, op=op)
        st.calls += 1
        st.by_component[name] = st.by_component.get(name, 0) + 1
        if isinstance(out, (str, int, float, bool, type(None))):
            return out
        return restore(component, op, decode_value(encode_value(out)))

    async def call_batch(
        self,
        component: Any,
        op: str,
        many: Callable[[list[dict[str, Any]]], list[Any]],
        inputs: Sequence[dict[str, Any]],
        *,
        batch: int,
        on_done: Callable[[int], None] | None = None,
    ) -> list[Any]:
        """``[component.<op>(**x) for x in inputs]``, each answer cached under the key :meth:`call`
        gives it (a later ``call`` hits it, and the other way round). The misses are computed
        ``batch`` at a time by ``many(list of inputs)`` in the CPU pool, one call slot per batch: a
        batched forward pass instead of one per item. A batch that raises is done again item by
        item through :meth:`call`, so an error names its input and the others are kept.
        ``on_done(n)`` is told each time ``n`` more answers are in."""
        st = self.stats.setdefault(self.stage, StageStats())
        out: list[Any] = [MISSING] * len(inputs)
        todo: dict[str, list[int]] = {}  # key -> positions (an input given twice is computed once)
        for i, x in enumerate(inputs):
            key = self.call_key(component, op, x)
            if key in todo:
                todo[key].append(i)
                st.cache_hits += 1
                continue
            out[i] = self._cached(component, op, key)
            if out[i] is MISSING:
                todo[key] = [i]
        if on_done is not None and len(todo) < len(inputs):
            on_done(len(inputs) - sum(len(v) for v in todo.values()))
        keys = list(todo)
        for start in range(0, len(keys), max(1, batch)):
            chunk = keys[start : start + max(1, batch)]
            items = [inputs[todo[k][0]] for k in chunk]
            try:
                values = list(await self._in_slot(functools.partial(self.run_cpu, many, items)))
                if len(values) != len(items):
                    raise ValueError(f"{len(values)} answers for {len(items)} inputs")
                values = [self._store(component, op, k, v) for k, v in zip(chunk, values)]
            except Exception as e:
                log.debug("batched %s.%s failed (%s); item by item", component.kind, op, e)
                values = [await self.call(component, op, **x) for x in items]
            for k, v in zip(chunk, values):
                for i in todo[k]:
                    out[i] = v
            if on_done is not None:
                on_done(sum(len(todo[k]) for k in chunk))
        return out

    async def _invoke(self, component: Any, op: str, inputs: dict[str, Any]) -> Any:
        afn = getattr(component, f"a{op}", None)
        if afn is not None and asyncio.iscoroutinefunction(afn):
            return await afn(**inputs)
        fn = getattr(component, op)
        if getattr(component, "io_bound", False):  # blocking on I/O: one thread per call slot
            return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(**inputs))
        return await self.run_cpu(lambda: fn(**inputs))

    # -- per-query map ----------------------------------------------------------------
    def _stage_log(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "stages" / f"{self.stage}.jsonl"

    def log(self, query_id: str, record: dict[str, Any]) -> None:
        """Append a query's record to this stage's trace file (flushed at once)."""
        path = self._stage_log()
        if path is None:
            return
        with open(path, "a", encoding="utf-8") as f:
            f.write(
                seal_line(json.dumps({"query": query_id, "record": record}, ensure_ascii=False, default=_json_default))
                + "\n"
            )

    async def map(
        self, state: RunState, fn: Callable[[Query], Awaitable[dict[str, Any]]], queries: Sequence[Query] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Run ``fn(query) -> record`` for every query, :attr:`window` queries in progress at once
        (their model calls share the ``concurrency`` call slots).

        Records are stored in ``state.traces[qid][stage]`` and appended to the stage's
        trace file as each query finishes; queries already logged (a resumed stage) are
        not run again. A query that raises is counted and reported after the others
        finish (:class:`StageError`); its siblings' records are kept.
        """
        from tqdm.auto import tqdm

        queries = list(state.queries if queries is None else queries)
        st = self.stats.setdefault(self.stage, StageStats())
        results: dict[str, dict[str, Any]] = {}
        todo = []
        for q in queries:
            rec = state.traces.get(q.id, {}).get(self.stage)
            if rec is not None:
                results[q.id] = rec
                st.resumed_queries += 1
            else:
                todo.append(q)
        sem = asyncio.Semaphore(self.window)
        errors: list[tuple[str, BaseException]] = []
        bar = tqdm(
            total=len(queries),
            initial=len(queries) - len(todo),
            desc=self.stage,
            unit="query",
            disable=not self.progress or len(queries) < 2,
            leave=False,
        )

        async def one(q: Query) -> None:
            async with sem:
                try:
                    rec = await fn(q)
                except AgentcirError as e:  # user-facing problems: keep going, report at the end
                    errors.append((q.id, e))
                    return
                except Exception as e:  # a backend bug or an unexpected reply: same
                    log.debug("query %s failed in stage %s", q.id, self.stage, exc_info=True)
                    errors.append((q.id, e))
                    return
                finally:
                    bar.update(1)
            rec = rec or {}
            state.traces.setdefault(q.id, {})[self.stage] = rec
            results[q.id] = rec
            self.log(q.id, rec)

        try:
            await asyncio.gather(*(one(q) for q in todo))
        finally:
            bar.close()
        if errors:
            st.failures += len(errors)
            qid, err = errors[0]
            raise StageError(
                f"stage '{self.stage}': {len(errors)} of {len(queries)} queries failed "
                f"(first: query {qid}: {type(err).__name__}: {err}); the others' work is saved, "
                f"rerun the same command to retry the failed ones"
            )
        return results


def _json_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.integer, np.floating, np.bool_)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot write {type(o).__name__} to a trace")


def _read_jsonl_tolerant(path: Path) -> list[dict]:
    """Lines of a stage trace; a last line cut off by a kill is dropped (and truncated), a line that
    fails its checksum (or is not JSON) elsewhere is dropped with a warning (its query is recomputed)."""
    return _read_trace(path)[0]


def _read_trace(path: Path) -> tuple[list[dict], int]:
    """``(rows, damaged)``: the trace's rows, and how many damaged lines were dropped (the file is
    rewritten without them)."""
    if not path.is_file():
        return [], 0
    data = path.read_bytes()
    lines = data.split(b"\n")
    good: list[dict] = []
    kept: list[bytes] = []
    damaged = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        payload, ok = open_line(line)
        try:
            row = json.loads(payload) if ok is not False else None
        except (ValueError, UnicodeDecodeError):
            row = None
        if isinstance(row, dict) and "query" in row and "record" in row:
            good.append(row)
            kept.append(line)
        elif i >= len(lines) - 2 and ok is None:  # a torn tail (a kill mid-write): dropped quietly
            continue
        else:
            damaged += 1
    if damaged or len(kept) != sum(1 for ln in lines if ln.strip()):
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"".join(ln + b"\n" for ln in kept))
    if damaged:
        recompute_warning(
            Damaged(path, f"has {damaged} line(s) failing their checksum"),
            "their queries are recomputed (model calls come from the call cache)",
        )
    return good, damaged


class Runner:
    """Executes a method's stages on a batch; persists and resumes them in ``run_dir``."""

    def __init__(self, method: Method, ctx: RunContext, state: RunState, *, prepare: Sequence[Stage] = ()):
        self.method = method
        self.ctx = ctx
        self.state = state
        self.stages = [*prepare, *method.stages()]
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")
        #: ``on_stage(name, step, stats, key)`` after each stage, finished now or loaded from the run
        #: directory (``key``: the digest of its ``.done`` marker; experiment tracking)
        self.on_stage: Callable[[str, int, StageStats, str], None] | None = None

    def _paths(self, name: str) -> dict[str, Path]:
        d = self.ctx.run_dir / "stages"
        return {
            "log": d / f"{name}.jsonl",
            "arrays": d / f"{name}.arrays.npz",
            "cands": d / f"{name}.candidates.npz",
            "done": d / f"{name}.done",
        }

    def _load_stage(self, stage: Stage) -> dict | None:
        """A finished stage's outputs, checked: the ``.done`` marker against its own digest, the
        arrays and candidates against the digests it records, the trace line by line. Any damage
        makes the stage unfinished (recomputed, its model calls from the cache), with one warning."""
        p = self._paths(stage.name)
        rows, damaged = _read_trace(p["log"])
        for row in rows:
            self.state.traces.setdefault(row["query"], {})[stage.name] = row["record"]
        if not p["done"].is_file():
            return None
        if damaged:  # (warned by _read_trace) the stage runs again for the queries whose lines were dropped
            p["done"].unlink(missing_ok=True)
            return None
        try:
            done = unseal(p["done"], p["done"].read_bytes())
            if not isinstance(done.get("stats", {}), dict) or not isinstance(done.get("state") or {}, dict):
                raise Damaged(p["done"], "is not a stage marker")
            files = done.get("files")
            arrays, cands = {}, None
            for kind in ("arrays", "cands"):
                f = p[kind]
                if files is not None:  # the digests the marker recorded (absent: written before them)
                    if f.name not in files:
                        continue
                    check_record(f, files[f.name])
                elif not f.is_file():
                    continue
                try:
                    if kind == "arrays":
                        with np.load(f) as z:
                            arrays = {k: z[k] for k in z.files}
                    else:
                        cands = Candidates.load(f)
                except Exception as e:  # noqa: BLE001 -- a damaged file written before digests: unreadable
                    raise Damaged(f, f"cannot be read ({type(e).__name__}: {e})") from None
        except Damaged as e:
            recompute_warning(e, f"stage '{stage.name}' is recomputed (model calls come from the call cache)")
            p["done"].unlink(missing_ok=True)
            return None
        self.state.arrays.update(arrays)
        if cands is not None:
            self.state.candidates = cands
            self.state.stage_candidates[stage.name] = cands
        for k, v in (done.get("state") or {}).items():  # scalars a skipped stage would have set
            setattr(self.state, k, v)
        return done

    def _stage_done(self, name: str, step: int) -> None:
        if self.on_stage is None:
            return
        done = self._paths(name)["done"] if self.ctx.run_dir is not None else None
        key = (
            stable_hash(name, done.read_bytes().hex())
            if done is not None and done.is_file()
            else stable_hash(name, step)
        )
        self.on_stage(name, step, self.ctx.stats.get(name, StageStats()), key)

    async def execute(self) -> None:
        """Run the method's stages in order, skipping those a resumed run directory has finished."""
        persist = self.ctx.run_dir is not None
        if persist:
            (self.ctx.run_dir / "stages").mkdir(parents=True, exist_ok=True)
        executor = ThreadPoolExecutor(max_workers=self.ctx.concurrency, thread_name_prefix="agentcir-io")
        asyncio.get_running_loop().set_default_executor(executor)
        try:
            for step, stage in enumerate(self.stages):
                if persist:
                    done = self._load_stage(stage)
                    if done is not None:
                        self.ctx.stats[stage.name] = StageStats(
                            **{**done.get("stats", {}), "wall_s": done.get("stats", {}).get("wall_s", 0.0)}
                        )
                        self.ctx.stats[stage.name].resumed_queries = len(self.state.queries)
                        self._stage_done(stage.name, step)
                        continue
                self.ctx.stage = stage.name
                if self.ctx.on_progress is not None:
                    self.ctx.on_progress(stage.name, 0, 0)
                st = self.ctx.stats.setdefault(stage.name, StageStats())
                arrays_before = {k: id(v) for k, v in self.state.arrays.items()}
                cands_before = self.state.candidates
                scalars_before = {k: getattr(self.state, k) for k in PERSISTED_STATE}
                t0, cpu0, load0 = time.perf_counter(), time.process_time(), loading_seconds()
                clock = self.ctx.clocks[stage.name] = CallClock()
                await stage.fn(self.ctx, self.state)
                st.wall_s += time.perf_counter() - t0
                st.cpu_s += time.process_time() - cpu0
                st.loading_s += loading_seconds() - load0
                st.call_s += clock.call_s
                st.call_wall_s += clock.call_wall_s
                st.queue_s += clock.queue_s
                st.max_in_flight = max(st.max_in_flight, clock.max_in_flight)
                changed = {k: v for k, v in self.state.arrays.items() if arrays_before.get(k) != id(v)}
                if self.state.candidates is not cands_before and self.state.candidates is not None:
                    self.state.stage_candidates[stage.name] = self.state.candidates
                if persist:
                    p = self._paths(stage.name)
                    if changed:
                        with atomic_path(p["arrays"]) as tmp:
                            np.savez(tmp, **{k: np.asarray(v) for k, v in changed.items()})
                    if stage.name in self.state.stage_candidates:
                        self.state.candidates.save(p["cands"])
                    stats = asdict(st)
                    stats.pop("resumed_queries", None)
                    scalars = {
                        k: getattr(self.state, k)
                        for k in PERSISTED_STATE
                        if getattr(self.state, k) != scalars_before[k]
                    }
                    files = {
                        p[k].name: file_record(p[k])
                        for k in ("arrays", "cands")
                        if (k == "arrays" and changed) or (k == "cands" and stage.name in self.state.stage_candidates)
                    }
                    atomic_write_text(
                        p["done"], seal({"stage": stage.name, "stats": stats, "state": scalars, "files": files})
                    )
                self._stage_done(stage.name, step)
        finally:
            executor.shutdown(wait=False, cancel_futures=True)
            self.ctx.close()


#: component groups added to the recipe after run directories existed: absent (``none``), they are
#: left out of the recipe's identity, so the runs of recipes that do not use them keep their names
LATER_GROUPS = ("editor",)


def recipe_identity(recipe: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``recipe`` that name its run: every group but ``run``, and a group of
    :data:`LATER_GROUPS` only when it selects a component."""
    return {
        k: v for k, v in recipe.items() if k != "run" and not (k in LATER_GROUPS and (v or {}).get("name") == "none")
    }


def resolve_run_dir(recipe: dict[str, Any]) -> Path:
    """``<root>/<name>``; the default name is ``<method>-<dataset>-<hash of the recipe>``."""
    from .recipe import VOLATILE_RUN_FIELDS

    run = recipe["run"]
    if run.get("name"):
        return Path(run["root"]) / run["name"]
    identity = recipe_identity(recipe)
    # an empty run.imports keeps the names runs had before it existed
    identity["run"] = {k: v for k, v in run.items() if k not in VOLATILE_RUN_FIELDS and not (k == "imports" and not v)}
    h = stable_hash(identity, n=10)
    return Path(run["root"]) / f"{recipe['method']['name']}-{recipe['dataset']['name']}-{h}"


def prepare_run_dir(run_dir: Path, recipe: dict[str, Any]) -> None:
    """Create the directory, or check a previous run there used the same recipe."""
    import shutil

    import yaml

    rfile = run_dir / "recipe.yaml"
    identity = recipe_identity(recipe)
    if rfile.is_file() and recipe["run"].get("fresh"):
        shutil.rmtree(run_dir)
    elif rfile.is_file():
        try:
            read_sidecar_checked(rfile)
            old = yaml.safe_load(rfile.read_text())
            if not isinstance(old, dict):
                raise Damaged(rfile, "is not a recipe")
        except (Damaged, yaml.YAMLError, UnicodeDecodeError) as e:
            damage = e if isinstance(e, Damaged) else Damaged(rfile, "is not valid YAML")
            recompute_warning(damage, "the run's stages are recomputed (model calls come from the call cache)")
            discard_stages(run_dir)
            old = None
        old_identity = recipe_identity(old or {})
        if old is not None and stable_hash(old_identity) != stable_hash(identity):
            diff = sorted(k for k in set(old_identity) | set(identity) if old_identity.get(k) != identity.get(k))
            raise InputError(
                f"run directory '{run_dir}' holds a run of a different recipe (differs in: {', '.join(diff)}); "
                f"choose another run.name, or pass run.fresh=true to start over there"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_checked(rfile, yaml.safe_dump(recipe, sort_keys=False))


def read_sidecar_checked(path: Path) -> None:
    """Check ``path`` against its sidecar (a file written before checksums has none: accepted)."""
    rec = read_sidecar(path)
    if rec is not None:
        check_record(path, rec)


def discard_stages(run_dir: Path) -> None:
    """Remove a run's stages and outputs (recomputed by the next run; model calls stay cached)."""
    import shutil

    shutil.rmtree(run_dir / "stages", ignore_errors=True)
    for stale in ("metrics.json", "report.md", "rankings.jsonl"):
        remove_with_sidecar(run_dir / stale)


def check_run_inputs(
    run_dir: Path, inputs: dict[str, Any], stage_inputs: Sequence[tuple[str, Sequence[str]]] = ()
) -> list[str]:
    """Finished stages are only reused when they were computed from the same inputs.

    The run directory is named by the recipe, but the same recipe can meet other inputs:
    new encoder weights at the same path, edited prompt files, edited code, a rebuilt dataset.
    ``inputs`` holds the identities that decide the outputs (the method's, which covers every
    injected component's code, weights, config and prompts; the gallery; the queries; ``code``:
    ``{module: digest}`` of that code, :mod:`agentcir.framework.code_identity`, so that the
    warning names the edited modules). When they differ from those stored in ``inputs.json``, or
    a run has stages but no such file, the stages are discarded and recomputed; unchanged model
    calls still come from the call cache.

    ``stage_inputs`` lists the leading stages that depend on some inputs only, in run order, as
    ``(stage, input keys)`` (the ``gallery_captions`` stage: the gallery and the captioner): such
    a stage is kept while its inputs are unchanged; every stage after the first affected one
    (downstream of it) is recomputed. Returns the names of the stages kept.
    """
    import shutil

    from .code_identity import changed_modules

    path = run_dir / "inputs.json"
    stages = run_dir / "stages"
    old = None
    if path.is_file():
        try:
            read_sidecar_checked(path)
            old = json.loads(path.read_bytes())
            if not isinstance(old, dict):
                raise Damaged(path, "is not a JSON object")
        except (Damaged, ValueError, UnicodeDecodeError) as e:
            damage = e if isinstance(e, Damaged) else Damaged(path, "is not valid JSON")
            recompute_warning(damage, "the run's stages are recomputed (model calls come from the call cache)")
            discard_stages(run_dir)
            old = None
    kept: list[str] = []
    if old != inputs and stages.is_dir() and any(stages.iterdir()):
        changed = sorted(k for k in set(inputs) | set(old or {}) if (old or {}).get(k) != inputs.get(k))
        if old is None:
            why = "they were not recorded"
        else:
            parts = []
            if "code" in changed:
                parts.append(
                    f"code edited: {', '.join(changed_modules(old.get('code'), inputs.get('code') or {}))}"
                    if "code" in old
                    else "the code was not recorded"
                )
            rest = [k for k in changed if k != "code"]
            if rest:
                parts.append(f"{', '.join(rest)} changed")
            why = "; ".join(parts)
            for name, keys in stage_inputs:
                if any(k in changed for k in keys):
                    break
                kept.append(name)
        if kept:
            which = "the stages after " + ", ".join(f"'{k}'" for k in kept) + " are"
            for f in stages.iterdir():
                if not any(f.name.startswith(k + ".") for k in kept):
                    f.unlink() if f.is_file() else shutil.rmtree(f)
            for stale in ("metrics.json", "report.md", "rankings.jsonl"):
                remove_with_sidecar(run_dir / stale)
        else:
            which = "its stages are"
            discard_stages(run_dir)
        log.warning(
            "run '%s' was computed from other inputs (%s); %s recomputed "
            "(unchanged model calls come from the call cache)",
            run_dir,
            why,
            which,
        )
    if old != inputs:
        write_text_checked(path, json.dumps(inputs, indent=1))
    return kept


def run_inputs(
    recipe: dict[str, Any], pool, method: Method, gallery, gdir: Path, queries
) -> tuple[dict[str, Any], list]:
    """The inputs a run's stages are computed from (``inputs.json``, :func:`check_run_inputs`) and
    the leading stages that depend on some of them only."""
    from .code_identity import code_modules
    from .imports import imports_identity, parse_imports

    run = recipe["run"]
    inputs: dict[str, Any] = {"method": method.identity, "gallery": gdir.name, "queries": stable_hash(queries)}
    imports = parse_imports(run.get("imports"))
    if imports:
        inputs["imports"] = imports_identity(imports)
    code = code_modules(method)
    if method.needs_captions and (
        run["gallery_captions"] == "captioner"
        or (run["gallery_captions"] == "auto" and gallery.captions("dataset") is None)
    ):
        captioner = pool.get("captioner")
        inputs["captioner"] = captioner.identity
        code = {**code_modules(captioner), **code}
    inputs["code"] = dict(sorted(code.items()))
    stage_inputs = [("gallery_captions", ("gallery", "captioner"))] if method.needs_captions else []
    return inputs, stage_inputs


def gallery_dir(root: Path, dataset_key: str, items_hash: str, encoder_identity: str, dtype: str) -> Path:
    from .images import DECODE_VERSION  # photos decoded otherwise: another gallery (and new stage results)

    return (
        root / "_galleries" / f"{dataset_key}-{stable_hash(items_hash, encoder_identity, dtype, DECODE_VERSION, n=12)}"
    )


def run_gallery_dir(recipe: dict[str, Any], items: Sequence[GalleryItem], encoder) -> Path:
    """The shared gallery folder a run of ``recipe`` builds or opens (``-s<shards>`` when sharded)."""
    run = recipe["run"]
    gdir = gallery_dir(
        Path(run["root"]),
        recipe["dataset"]["name"],
        stable_hash([[i.id, i.path, i.caption] for i in items]),
        encoder.identity,
        run["gallery_dtype"],
    )
    shards = (recipe.get("scale") or {}).get("shards")
    return gdir.with_name(f"{gdir.name}-s{shards}") if shards else gdir


def run_lock_file(recipe: dict[str, Any], run_dir: Path) -> Path:
    """The lock of a run directory: ``<run.root>/.locks/<name>.lock`` (outside the directory, which
    ``run.fresh`` and the cleanup of a failed run remove)."""
    try:
        name = str(run_dir.relative_to(Path(recipe["run"]["root"])))
    except ValueError:
        name = run_dir.name
    return Path(recipe["run"]["root"]) / ".locks" / (name.replace(os.sep, "+") + ".lock")


def _holds_work(run_dir: Path) -> bool:
    """Whether a run directory holds anything computed (a finished stage, a logged query, metrics)."""
    stages = run_dir / "stages"
    if (run_dir / "metrics.json").is_file():
        return True
    return stages.is_dir() and any(
        f.suffix == ".done" or (f.suffix == ".jsonl" and f.stat().st_size > 0) for f in stages.iterdir()
    )


def run_recipe(
    recipe: dict[str, Any],
    *,
    pool=None,
    progress: bool | None = None,
    wait: bool = False,
    tracking_parent: dict[str, Any] | None = None,
) -> RunResult:
    """Run a resolved recipe end to end (resuming its run directory) and write its report.

    One process at a time works in a run directory: a second one fails with a
    :class:`~agentcir.framework.locks.LockedError` naming the holder, or with ``wait`` waits for
    it. A run that fails before computing anything leaves no directory behind. A full disk or a
    read-only folder is a :class:`~agentcir.framework.files.StorageError` naming the path.
    The loggers of ``run.loggers`` are told of the run (:mod:`agentcir.framework.tracking`;
    ``tracking_parent``: a sweep's, for one of its jobs).
    """
    from .files import storage_errors
    from .locks import hold_lock

    run_dir = resolve_run_dir(recipe)
    with (
        storage_errors(run_dir, "the run directory"),
        hold_lock(
            run_lock_file(recipe, run_dir),
            f"run directory '{run_dir}'",
            wait=wait,
            hint=" (agentcir run --wait waits for it), or choose another run.name",
        ),
    ):
        try:
            return _run_locked(recipe, run_dir, pool, progress, tracking_parent)
        except BaseException:
            if run_dir.is_dir() and not _holds_work(run_dir):
                import shutil

                shutil.rmtree(run_dir, ignore_errors=True)
            raise


def _run_locked(
    recipe: dict[str, Any], run_dir: Path, pool, progress: bool | None, tracking_parent: dict[str, Any] | None = None
) -> RunResult:
    """``metrics.json`` gets ``wall_s`` from the process start (or the previous run's end in this
    process) and its phases (``time``: startup, model loading, gallery, stages, evaluation),
    and ``concurrency``: the request limit of every component that has one."""
    from .tracking import Tracking

    tracking = Tracking.for_recipe(recipe)
    if tracking is None:
        return _run_tracked(recipe, run_dir, pool, progress, None)
    prepare_run_dir(run_dir, recipe)
    tracking.start(recipe, run_dir, tracking_parent)
    try:
        return _run_tracked(recipe, run_dir, pool, progress, tracking)
    except BaseException:
        tracking.finish("FAILED")
        raise


def _run_tracked(recipe: dict[str, Any], run_dir: Path, pool, progress: bool | None, tracking) -> RunResult:
    from .accounting import Phases, follow_concurrency
    from .cache import open_call_cache
    from .imports import apply_imports, parse_imports
    from .recipe import ComponentPool
    from .report import write_report

    phases = Phases()
    pool = pool or ComponentPool(recipe)
    run = recipe["run"]
    show_progress = run["progress"] if progress is None else progress
    if tracking is None:  # (else prepared before the loggers started)
        prepare_run_dir(run_dir, recipe)
    with phases.phase("model_loading"):
        dataset = pool.get("dataset")
        encoder = pool.get("encoder")
        method: Method = pool.get("method")
    limits = follow_concurrency(pool.built(), run["concurrency"])
    if run.get("preflight", True):  # every endpoint answers, before any gallery or query work
        from .preflight import check_endpoints

        if method.needs_captions and run["gallery_captions"] == "captioner":
            pool.get("captioner")
        check_endpoints(pool.built().values())
    items = dataset.gallery_items()
    if not items:
        raise InputError(f"dataset '{recipe['dataset']['name']}' has an empty gallery")
    gdir = run_gallery_dir(recipe, items, encoder)
    with phases.phase("gallery"):
        if (recipe.get("scale") or {}).get("shards"):  # a sharded gallery (docs/scale.md)
            from .scale.embed import build_sharded

            gallery = build_sharded(
                gdir,
                items,
                encoder,
                recipe["scale"],
                dtype=run["gallery_dtype"],
                recipe=recipe,
                progress=show_progress,
                source=f"dataset {recipe['dataset']['name']}",
            )
        else:
            gallery = Gallery.build(
                gdir,
                items,
                encoder,
                dtype=run["gallery_dtype"],
                progress=show_progress,
                source=f"dataset {recipe['dataset']['name']}",
            )
    queries = dataset.queries()
    if not queries:
        raise InputError(f"dataset '{recipe['dataset']['name']}' has no queries")
    inputs, stage_inputs = run_inputs(recipe, pool, method, gallery, gdir, queries)
    check_run_inputs(run_dir, inputs, stage_inputs)
    imports = parse_imports(run.get("imports"))
    cache = open_call_cache(pool, run)
    ctx = RunContext(
        cache=cache,
        run_dir=run_dir,
        concurrency=run["concurrency"],
        progress=show_progress,
        kernels=recipe["kernels"]["backend"],
    )
    state = RunState(queries=queries, gallery=gallery)
    prepare = [caption_stage(pool, run["gallery_captions"])] if method.needs_captions else []
    imported = apply_imports(state.traces, queries, imports, [s.name for s in (*prepare, *method.stages())])
    runner = Runner(method, ctx, state, prepare=prepare)
    evaluated: dict[str, Any] = {}  # per stage that ranked: its metrics (when loggers report them as it ends)
    if tracking is not None:

        def on_stage(name: str, step: int, stats: StageStats, key: str) -> None:
            if name in state.stage_candidates:
                evaluated[name] = (
                    state.stage_candidates[name],
                    dataset.evaluate(state.stage_candidates[name], queries, gallery),
                )
            tracking.stage(name, step, evaluated[name][1] if name in evaluated else None, asdict(stats), key)

        runner.on_stage = on_stage
    with phases.phase("stages"):
        asyncio.run(runner.execute())
    if state.candidates is None:
        raise AgentcirError(f"method '{recipe['method']['name']}' produced no ranking")

    def stage_metrics(name: str, c) -> dict:
        done = evaluated.get(name)
        return done[1] if done is not None and done[0] is c else dataset.evaluate(c, queries, gallery)

    with phases.phase("evaluation"):
        metrics = {
            "final": dataset.evaluate(state.candidates, queries, gallery),
            "stages": {name: stage_metrics(name, c) for name, c in state.stage_candidates.items()},
            "subset": dataset.subset_note(),
            "num_queries": len(queries),
            "gallery_size": len(gallery),
            "gallery_skipped": len(gallery.skipped),
            "imports": imported,
        }
    metrics["wall_s"] = round(phases.finish(), 3)
    metrics["time"] = phases.summary()
    metrics["concurrency"] = {**limits, "cpu_workers": ctx.cpu_workers()}
    result = RunResult(run_dir, recipe, queries, gallery, state.candidates, metrics, ctx.stats, state)
    write_report(result)
    if tracking is not None:
        tracking.end(metrics["final"], step=len(runner.stages))
    return result


#: gallery images per batched captioner call (``caption_many``); a kill loses at most one batch
CAPTION_BATCH = 32


def caption_stage(pool, source: str) -> Stage:
    """The ``gallery_captions`` stage: dataset captions, or the captioner's (cached per item),
    then their embeddings by the run's encoder (stored once in the gallery; counted here as one
    encoder call when computed, so the methods' stages do not carry this preprocessing)."""

    async def fn(ctx: RunContext, state: RunState) -> None:
        g = state.gallery
        if source in ("auto", "dataset") and g.captions("dataset") is not None:
            state.captions_key = "dataset"
        elif source == "dataset":
            raise InputError(f"run.gallery_captions=dataset, but the dataset has no captions for gallery '{g.root}'")
        else:
            await _captioner_captions(ctx, state, pool.get("captioner"))
        if pool.has("encoder"):
            encoder = pool.get("encoder")
            if not g.has_caption_emb(state.captions_key, encoder):
                await ctx.run_cpu(g.caption_emb, state.captions_key, encoder)
                st = ctx.stats.setdefault(ctx.stage, StageStats())
                name = f"{encoder.kind}:{getattr(encoder, 'registry_key', '')}"
                st.calls += 1
                st.by_component[name] = st.by_component.get(name, 0) + 1

    return Stage("gallery_captions", fn)


async def _captioner_captions(ctx: RunContext, state: RunState, captioner) -> None:
    """Caption every gallery item with ``captioner`` (each call cached), unless stored already."""
    g = state.gallery
    key = captioner.identity
    if g.captions(key) is None:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(g), desc="gallery captions", unit="img", disable=not ctx.progress, leave=False)
        done = [0]

        def advance(n: int) -> None:
            bar.update(n)
            done[0] += n
            if ctx.on_progress is not None:
                ctx.on_progress(ctx.stage, done[0], len(g))

        try:
            if hasattr(captioner, "caption_many"):
                caps = await ctx.call_batch(
                    captioner,
                    "caption",
                    lambda items: captioner.caption_many([x["image"] for x in items]),
                    [{"image": g.path_of(r)} for r in range(len(g))],
                    batch=CAPTION_BATCH,
                    on_done=advance,
                )
            else:
                sem = asyncio.Semaphore(ctx.window)

                async def one(row: int) -> str:
                    async with sem:
                        try:
                            return await ctx.call(captioner, "caption", image=g.path_of(row))
                        finally:
                            advance(1)

                caps = await asyncio.gather(*(one(r) for r in range(len(g))))
        finally:
            bar.close()
        g.save_captions(key, list(caps))
    state.captions_key = key
