"""``agentcir run --plan``: the model calls a run would make, before spending anything.

The plan walks the method's real stages on the real dataset, gallery size and config, but
every model operation of the recipe's components (encoder ``encode_images`` /
``encode_texts``, LLM ``run_task`` / ``chat``, ``caption``, ``generate``, ``edit``, ``detect``,
``verify`` / ``check``) is replaced, for the plan's duration, by a stand-in that records
the call and answers offline:

- calls found in the call cache (same key as a run would compute: component identity +
  inputs) are counted as cached, not as calls, and answer with the value the cache holds, so
  the later stages see what a run would see and their calls are looked up by the real keys;
- the gallery index counts as cached when the run's gallery folder is built already, and the
  plan then retrieves over its real embeddings (read through links in a temporary folder: the
  gallery is never written); imported stages (``run.imports``) make no calls, as in a run;
- the stages the run directory holds as finished (computed from the same inputs,
  ``inputs.json``) are read from it and make no calls, and the queries a cut-off stage logged
  are skipped, as a resumed run would;
- a call that is not cached gets a stand-in answer, and the plan says so: the stages after one
  that made uncached calls see stand-in values, so their counts are estimates (the notes name
  those stages); the stand-ins:
- LLM replies come from the offline ``rules`` model (so parsing and the next stages go on);
  the verifier answers "no", so every verified query uses its whole depth (which queries an
  uncertainty gate lets through depends on the real scores); an agent's chat gets an empty
  reply (one turn per query: a lower bound); embeddings are hash-seeded unit vectors.

Tokens: an LLM call's input is its rendered prompt (the task's prompt file with the call's
variables; ~4 characters a token) plus ``image_tokens`` per image; its output is the stand-in
reply's length, which only indicates the size of the answer the task asks for. A captioner,
detector or verifier backed by an LLM (the ``vlm`` ones) is one LLM request per call: its
prompt file and images in, :data:`OUT_TOKENS` out, priced as ``llm``. Cost comes
from ``run.prices``: per component kind, ``input_per_1m`` / ``output_per_1m`` (per million
tokens), ``per_call`` and ``per_item`` (an image or a text embedded), e.g.
``run.prices.llm.input_per_1m=0.15 run.prices.llm.output_per_1m=0.6 run.prices.generator.per_call=0.04``
(an image edit: ``run.prices.editor.per_call``).

Nothing is written: no run folder, no gallery, no cache entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import tempfile
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .cache import MISSING
from .errors import InputError
from .hashing import stable_hash
from .interfaces import ChatReply, l2_normalize

#: component kind -> the operations that are model calls
OPS: dict[str, tuple[str, ...]] = {
    "encoder": ("encode_images", "encode_texts"),
    "llm": ("run_task", "chat"),
    "captioner": ("caption",),
    "generator": ("generate",),
    "editor": ("edit",),
    "detector": ("detect",),
    "verifier": ("verify", "check"),
}
DIM = 64
CHARS_PER_TOKEN = 4.0
IMAGE_TOKENS = 765  # a 768-px image at OpenAI's high detail (85 + 4 x 170)
PRICE_FIELDS = ("input_per_1m", "output_per_1m", "per_call", "per_item")
#: output tokens assumed for a VLM-backed component's reply (a caption, an object list, a yes/no, true/false)
OUT_TOKENS = {"caption": 30, "detect": 40, "verify": 5, "check": 3}

__all__ = ["Plan", "plan_recipe", "OPS"]


@dataclass
class Row:
    calls: int = 0
    items: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    priced_as: str = ""  # "llm" for a VLM-backed captioner / detector / verifier


@dataclass
class Plan:
    """Planned model calls per (stage, component, op), with tokens and cost."""

    rows: dict[tuple[str, str, str], Row] = field(default_factory=lambda: defaultdict(Row))
    num_queries: int = 0
    gallery_size: int = 0
    imported: dict[str, Any] = field(default_factory=dict)
    prices: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def cost(self, component: str, row: Row) -> float | None:
        """The estimated cost of ``row`` at the recipe's prices (``None``: the component has no price)."""
        kind = component.split(":")[0]
        p = (
            self.prices.get(component)
            or self.prices.get(kind)
            or (self.prices.get(row.priced_as) if row.priced_as else None)
        )
        if not p:
            return None
        return (
            (row.input_tokens * p.get("input_per_1m", 0.0) + row.output_tokens * p.get("output_per_1m", 0.0)) / 1e6
            + row.calls * p.get("per_call", 0.0)
            + row.items * p.get("per_item", 0.0)
        )

    @property
    def total_calls(self) -> int:
        """Model calls planned over every stage and component."""
        return sum(r.calls for r in self.rows.values())

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON: one entry per (stage, component, op), totals, imports and notes."""
        rows = [
            {"stage": s, "component": c, "op": o, **vars(r), "cost": self.cost(c, r)}
            for (s, c, o), r in self.rows.items()
        ]
        costs = [r["cost"] for r in rows if r["cost"] is not None]
        return {
            "queries": self.num_queries,
            "gallery": self.gallery_size,
            "rows": rows,
            "total_calls": self.total_calls,
            "total_cost": sum(costs) if costs else None,
            "imported": self.imported,
            "notes": self.notes,
        }

    def render(self) -> str:
        """The plan as the markdown table ``agentcir run --plan`` prints."""
        head = f"plan: {self.num_queries} queries, gallery {self.gallery_size} items; no model was called\n\n"
        lines = [
            "| stage | component | op | calls | items | cached | input tokens | output tokens | cost |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for (s, c, o), r in self.rows.items():
            cost = self.cost(c, r)
            lines.append(
                f"| {s} | {c} | {o} | {r.calls} | {r.items} | {r.cached} | {r.input_tokens} | "
                f"{r.output_tokens} | {'' if cost is None else f'{cost:.4f}'} |"
            )
        j = self.to_json()
        total = (
            f"\ntotal: {j['total_calls']} model calls"
            + ("" if j["total_cost"] is None else f", estimated cost {j['total_cost']:.4f}")
            + "\n"
        )
        imp = "".join(
            f"imported: stage {s} for {v['queries']} queries ({', '.join(v['fields'])})\n"
            for s, v in self.imported.items()
        )
        return head + "\n".join(lines) + "\n" + total + imp + "".join(f"note: {n}\n" for n in self.notes)


class _ReadOnlyCache:
    """The run's call cache, read but never written."""

    def __init__(self, inner):
        self.inner = inner

    def get(self, key):
        return self.inner.get(key)

    def put(self, *a, **kw):
        return None


def _vectors(values, salt: str, dim: int = DIM) -> np.ndarray:
    out = np.zeros((len(values), dim), np.float32)
    for i, v in enumerate(values):
        seed = int.from_bytes(hashlib.sha256(f"{salt}:{v}".encode()).digest()[:8], "little")
        out[i] = np.random.default_rng(seed).standard_normal(dim)
    return l2_normalize(out)


class _Recorder:
    """Replaces the model operations of the given components' classes while active."""

    def __init__(self, plan: Plan, components: dict[str, Any], tmp: Path, image_tokens: int):
        from ..registry import LLMS

        self.plan, self.components, self.tmp, self.image_tokens = plan, components, tmp, image_tokens
        self.stage = "index"
        self.dim = DIM  #: of stand-in embeddings: the real gallery's when the plan retrieves over it
        self.lock = threading.Lock()
        self._mute = threading.local()
        self._saved: list[tuple[type, str, Any]] = []
        self.rules = LLMS.build("rules", {})
        self.rules_run = type(self.rules).run_task  # before any patching (the recipe's llm may be rules)

    @staticmethod
    def name(comp) -> str:
        return f"{comp.kind}:{getattr(comp, 'registry_key', '') or type(comp).__name__}"

    @contextlib.contextmanager
    def muted(self, comp, op: str, items: int):
        """A cached call: counted as ``cached`` items, its stand-in answer not recorded."""
        with self.lock:
            self.plan.rows[(self.stage or "index", self.name(comp), op)].cached += items
        self._mute.active = True
        try:
            yield
        finally:
            self._mute.active = False

    def record_vlm(self, comp, op: str, prompt_field: str, images: int, tout: int) -> None:
        """A captioner / detector / verifier call; one backed by an LLM (``comp.llm``: the VLM ones)
        is one LLM request: its prompt file and images are its input tokens, priced as the LLM."""
        if getattr(comp, "llm", None) is None:
            return self.record(comp, op)
        try:
            text = comp.prompt(prompt_field).text if prompt_field in comp.prompt_fields else ""
        except Exception:  # a prompt that cannot be read now fails in the run, not in the plan
            text = ""
        self.record(
            comp, op, 1, math.ceil(len(text) / CHARS_PER_TOKEN) + self.image_tokens * images, tout, priced_as="llm"
        )

    def record(self, comp, op: str, items: int = 1, tin: int = 0, tout: int = 0, priced_as: str = "") -> None:
        if getattr(self._mute, "active", False):
            return
        with self.lock:
            r = self.plan.rows[(self.stage or "index", self.name(comp), op)]
            r.calls += 1
            r.items += items
            r.priced_as = priced_as or r.priced_as
            r.input_tokens += tin
            r.output_tokens += tout

    # -- stand-ins ------------------------------------------------------------------------
    def _standins(self) -> dict[str, Any]:
        rec = self

        def encode_images(self, images, batch_size=None, *, progress=None, skipped=None, normalize=True):
            rec.record(self, "encode_images", len(images))
            tmp = str(rec.tmp)  # a stand-in proxy's vector does not depend on where this plan keeps it
            return _vectors([str(p).replace(tmp, "<plan>", 1) for p in images], "image", rec.dim)

        def encode_texts(self, texts, batch_size=None, *, progress=None, normalize=True):
            if isinstance(texts, str):
                raise TypeError("encode_texts takes a list of strings, not a single string")
            rec.record(self, "encode_texts", len(texts))
            return _vectors([str(t) for t in texts], "text", rec.dim)

        def run_task(self, task, variables, *, prompt=None, images=(), json_mode=False):
            from .interfaces import default_task_prompt
            from .prompts import load_prompt

            try:
                text = load_prompt(prompt or default_task_prompt(task)).render(variables)
            except Exception:  # a backend that implements the task without a prompt file
                text = json.dumps(variables, default=str)
            reply = rec.rules_run(rec.rules, task, variables)
            rec.record(
                self,
                "run_task",
                1,
                math.ceil(len(text) / CHARS_PER_TOKEN) + rec.image_tokens * len(images),
                math.ceil(len(reply) / CHARS_PER_TOKEN),
            )
            return reply

        def chat(self, messages, *, tools=None, json_mode=False):
            text = json.dumps(messages, default=str) + (json.dumps(tools) if tools else "")
            n_img = text.count('"type": "image"')
            rec.record(self, "chat", 1, math.ceil(len(text) / CHARS_PER_TOKEN) + rec.image_tokens * n_img, 0)
            return ChatReply("")

        def caption(self, image):
            rec.record_vlm(self, "caption", "prompt", 1, OUT_TOKENS["caption"])
            return f"a photo {stable_hash(str(image), n=8)}"  # one caption per image, as real ones differ

        def generate(self, description, *, reference=None):
            rec.record(self, "generate")
            return rec.tmp / f"proxy-{stable_hash(description, str(reference), n=12)}.png"

        def edit(self, image, instruction):
            rec.record(self, "edit")
            return rec.tmp / f"edit-{stable_hash(str(image), instruction, n=12)}.png"

        def detect(self, image):
            rec.record_vlm(self, "detect", "prompt", 1, OUT_TOKENS["detect"])
            return [{"label": "object", "score": 1.0, "box": None}]

        def verify(self, candidate, instruction, *, reference=None, caption=None, reference_caption=None):
            rec.record_vlm(self, "verify", "verify_prompt", 2 if reference is not None else 1, OUT_TOKENS["verify"])
            return False

        def check(self, statement, *, candidate=None, caption=None):
            rec.record_vlm(self, "check", "answer_prompt", 1 if candidate is not None else 0, OUT_TOKENS["check"])
            return False

        return {k: v for k, v in locals().items() if callable(v) and k != "rec" and not k.startswith("_")}

    def __enter__(self):
        fns = self._standins()
        classes: dict[type, tuple[str, ...]] = {}
        for kind, comp in self.components.items():
            for cls in type(comp).__mro__:  # patch where defined too, so bound copies (generator.bind) count
                if cls.__module__.startswith("agentcir.framework.interfaces") or cls is type(comp):
                    classes.setdefault(cls, OPS.get(kind, ()))
        for cls, ops in classes.items():
            for op in ops:
                for name, fn in ((op, fns[op]), (f"a{op}", None)):
                    if name == op or hasattr(cls, name):
                        self._saved.append((cls, name, cls.__dict__.get(name, _ABSENT)))
                        setattr(cls, name, fn)
        return self

    def __exit__(self, *exc):
        for cls, name, old in reversed(self._saved):
            if old is _ABSENT:
                delattr(cls, name)
            else:
                setattr(cls, name, old)
        self._saved.clear()


_ABSENT = object()


def _prices(run: dict) -> dict[str, dict[str, float]]:
    out = {}
    for comp, p in (run.get("prices") or {}).items():
        if not isinstance(p, dict) or set(p) - set(PRICE_FIELDS):
            raise InputError(f"run.prices.{comp}: expected a mapping of {', '.join(PRICE_FIELDS)}, got {p!r}")
        try:
            out[comp] = {k: float(v) for k, v in p.items()}
        except (TypeError, ValueError):
            raise InputError(f"run.prices.{comp}: prices must be numbers, got {p!r}") from None
    return out


def _linked_gallery(src: Path, dest: Path, encoder, scale: dict | None):
    """Open the built gallery ``src`` through a folder of links to its files (``dest``): whatever
    the plan writes there (captions, caption embeddings) never reaches the real gallery."""
    import os

    from .galleries import open_gallery

    for folder, _dirs, files in os.walk(src):
        rel = Path(folder).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            os.symlink(Path(folder, f).resolve(), dest / rel / f)
    return open_gallery(dest, encoder=encoder, scale=scale)


def _read_records(path: Path) -> list[dict]:
    """The records of a trace file (a torn last line skipped; the file is not touched)."""
    out = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _load_finished(run_dir: Path, stages, state) -> list[str]:
    """Load the leading stages ``run_dir`` holds as finished into ``state`` (as a resumed run
    would, reading only); the first unfinished stage's logged queries too. Returns the names loaded."""
    from .runner import PERSISTED_STATE
    from .types import Candidates

    loaded = []
    for stage in stages:
        d = run_dir / "stages"
        for row in _read_records(d / f"{stage.name}.jsonl"):
            state.traces.setdefault(row["query"], {})[stage.name] = row["record"]
        done = d / f"{stage.name}.done"
        if not done.is_file():
            break
        arrays, cands = d / f"{stage.name}.arrays.npz", d / f"{stage.name}.candidates.npz"
        if arrays.is_file():
            with np.load(arrays) as z:
                state.arrays.update({k: z[k] for k in z.files})
        if cands.is_file():
            state.candidates = Candidates.load(cands)
            state.stage_candidates[stage.name] = state.candidates
        for k, v in (json.loads(done.read_text()).get("state") or {}).items():
            if k in PERSISTED_STATE:
                setattr(state, k, v)
        loaded.append(stage.name)
    return loaded


def plan_recipe(recipe: dict[str, Any], *, pool=None, image_tokens: int = IMAGE_TOKENS) -> Plan:
    """The :class:`Plan` of a resolved recipe (see the module docstring); calls no model."""
    from .cache import open_call_cache
    from .gallery import Gallery
    from .imports import apply_imports, parse_imports
    from .method import RunState
    from .recipe import COMPONENT_GROUPS, ComponentPool
    from .runner import Runner, caption_stage, resolve_run_dir, run_gallery_dir, run_inputs

    pool = pool or ComponentPool(recipe)
    run = recipe["run"]
    plan = Plan(prices=_prices(run))
    dataset, encoder, method = pool.get("dataset"), pool.get("encoder"), pool.get("method")
    components = {g: pool.get(g) for g in COMPONENT_GROUPS if g in OPS and pool.has(g)}
    items = dataset.gallery_items()
    if not items:
        raise InputError(f"dataset '{recipe['dataset']['name']}' has an empty gallery")
    queries = dataset.queries()
    if not queries:
        raise InputError(f"dataset '{recipe['dataset']['name']}' has no queries")
    plan.num_queries, plan.gallery_size = len(queries), len(items)
    gdir = run_gallery_dir(recipe, items, encoder)
    built = (gdir / "gallery.json").is_file()
    for c in components.values():  # identities (cache keys) before patching: they read files, not models
        c.identity
    cache = _ReadOnlyCache(open_call_cache(pool, run))
    run_dir = resolve_run_dir(recipe)
    prepare = [caption_stage(pool, run["gallery_captions"])] if method.needs_captions else []
    stages = [*prepare, *method.stages()]
    with tempfile.TemporaryDirectory(prefix="agentcir-plan-") as tmp:
        source = None
        if built:  # the run opens it (no call); the plan retrieves over its real embeddings
            gallery = _linked_gallery(gdir, Path(tmp) / "gallery", encoder, recipe.get("scale"))
            plan.notes.append(f"the gallery is indexed already ({gdir})")
            if (run_dir / "inputs.json").is_file():
                inputs, _ = run_inputs(recipe, pool, method, gallery, gdir, queries)
                old = json.loads((run_dir / "inputs.json").read_text())
                if old == inputs:
                    source = run_dir
                else:
                    changed = sorted(k for k in set(inputs) | set(old) if old.get(k) != inputs.get(k))
                    plan.notes.append(
                        f"the run directory {run_dir} was computed from other inputs "
                        f"({', '.join(changed)} changed): its stages are recomputed"
                    )
        with _Recorder(plan, components, Path(tmp), image_tokens) as rec:
            if built:
                rec.dim = gallery.dim
            else:
                gallery = Gallery.build(Path(tmp) / "gallery", items, encoder, progress=False)
            ctx = _plan_context(
                rec,
                cache=cache,
                run_dir=None,
                concurrency=run["concurrency"],
                progress=False,
                kernels=recipe["kernels"]["backend"],
            )
            state = RunState(queries=queries, gallery=gallery)
            plan.imported = apply_imports(
                state.traces, queries, parse_imports(run.get("imports")), [s.name for s in stages]
            )
            finished = _load_finished(source, stages, state) if source is not None else []
            if finished:
                plan.notes.append(f"finished in the run directory (read, no call): stage(s) {', '.join(finished)}")
            runner = Runner(method, ctx, state, prepare=prepare)
            runner.stages = [s for s in runner.stages if s.name not in finished]
            asyncio.run(runner.execute())
    if not built:
        plan.notes.append(
            "the gallery is not indexed yet: retrieval runs over stand-in embeddings, so which "
            "candidates the later stages see is estimated"
        )
    names = [s.name for s in stages]
    estimated = [n for n in names if any(r.calls for (st, _, _), r in plan.rows.items() if st == n)]
    if estimated:
        later = names[names.index(estimated[0]) + 1 :]
        plan.notes.append(
            f"estimated: stage(s) {', '.join(estimated)} make calls the cache does not hold, answered "
            f"here by stand-ins"
            + (f"; the counts of the stages after them ({', '.join(later)}) are estimates" if later else "")
        )
    uncached_ops = {o for (_, _, o), r in plan.rows.items() if r.calls}
    if "verify" in uncached_ops:
        plan.notes.append(
            "verification: the stand-in verifier says no, so every gated query uses its whole depth "
            "(alpha); which queries pass the uncertainty gate depends on the real scores"
        )
    if "chat" in uncached_ops:
        plan.notes.append("agent chats counted at one turn per query (a lower bound)")
    if "run_task" in uncached_ops:
        plan.notes.append("output tokens are those of the offline rules model's replies: indicative only")
    return plan


def _plan_context(rec: _Recorder, **kw):
    """A :class:`RunContext` that records instead of caching: a call already in the call cache
    counts as cached and answers with the cached value (what a run would get); a call made
    earlier in this plan (a run would have cached it) counts as cached with a stand-in answer;
    its stage is the recorder's, so direct component calls count too."""
    from .runner import RunContext, StageStats

    seen: set[str] = set()

    class Ctx(RunContext):
        @property
        def stage(self):
            return rec.stage

        @stage.setter
        def stage(self, value):
            rec.stage = value

        async def call(self, component, op, /, **inputs):
            key = self.call_key(component, op, inputs)
            n = len(inputs.get("images") or inputs.get("texts") or [None])
            hit = self.cache.get(key) if key not in seen else MISSING
            if hit is not MISSING:
                self.stats.setdefault(self.stage, StageStats()).cache_hits += 1
                with rec.muted(component, op, n):
                    return hit
            if key in seen:
                self.stats.setdefault(self.stage, StageStats()).cache_hits += 1
                with rec.muted(component, op, n):
                    return getattr(component, op)(**inputs)
            seen.add(key)
            return getattr(component, op)(**inputs)

        async def call_batch(self, component, op, many, inputs, *, batch, on_done=None):
            out = []  # recorded one call at a time, as a run counts them
            for x in inputs:
                out.append(await self.call(component, op, **x))
                if on_done is not None:
                    on_done(1)
            return out

    return Ctx(**kw)
