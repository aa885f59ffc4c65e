"""One query at a time against an indexed gallery, with a recipe's method.

Used by ``agentcir search`` (``--json``), the web page and its API (``agentcir serve``): all
three answer one shape, :meth:`SearchResult.to_json`::

    {"hits": [{"rank", "id", "score", "path", "row", "meta", "verified"}, ...],
     "trace": {"<stage>": {...its record for the query...}, ..., "search": {...}}}

- ``score`` is the method's raw score of the hit. Verification never shows through as a
  score: the candidate that the verifier accepted (and the method moved to the front) keeps
  the score it had before, and carries ``verified: true``. A method that answers a *set*
  (``Method.answers_set``, e.g. ImageSeeker) gives its answer set, in its order, with
  ``score: null``: there is no ranking to invent scores for.
- A search with a text but no reference image works with any method: a composed method
  (``Method.needs_reference``) is replaced by text retrieval (the ``text_only`` baseline over
  the same encoder and gallery); ``trace.search.mode`` says which ran and why.
- A search with a reference image but no text ("more like this") works with any method too: it
  is image retrieval (the ``image_only`` baseline over the same encoder and gallery), since a
  composed method has no modification to apply and a history question has no question;
  ``trace.search.mode`` is ``image`` and ``trace.search.note`` says so.
- The reference itself never comes back as a hit: a gallery image used as the reference is
  excluded by the method (its ``reference_id``), and a hit whose file has the same bytes as the
  reference (an upload of a gallery photo), or whose image embedding is the reference's
  (cosine >= ``DUPLICATE_COS``: the same picture re-encoded, another format), is dropped
  (``trace.search.excluded``).
- A set-answering method may answer no photo: ``trace.search.no_match`` then says why ("no photo
  matches: place 'from Antarctica' kept none of the 122 photo(s)", naming the condition that
  emptied the set).
- ``trace.search.stages``: model calls, cache hits and wall time of each stage of the query.
- ``trace.search.loop``: a looped method's rounds, suggestions and verdicts
  (:func:`agentcir.framework.loops.loop_steps`; empty for a one-shot method).

The method runs through the same runner as a benchmark run (no run directory): every model
call goes through the call cache, and gallery captions are computed once and stored in the
gallery (:meth:`Searcher.prepare`; with a ``progress`` hook it reports their count as they go).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .cache import open_call_cache
from .errors import InputError
from .galleries import open_gallery
from .hashing import file_digest
from .images import load_rgb
from .loops import loop_steps
from .method import RunState
from .recipe import ComponentPool
from .runner import RunContext, Runner, caption_stage
from .types import Query

#: ``progress(stage, done, total)``: a stage started (0, 0), or ``done`` of ``total`` items of it
Progress = Callable[[str, int, int], None]

#: the ``mode`` of a search (trace.search.mode)
MODES = ("composed", "text", "image", "answer")
#: a hit this close to the reference (cosine of the image embeddings) is the reference itself in
#: another file (a re-encoded copy, another format) and is dropped
DUPLICATE_COS = 0.999


@dataclass
class Hit:
    rank: int
    id: str
    #: the method's raw score (``None`` for a set-answering method)
    score: float | None
    path: str
    row: int
    meta: dict[str, Any] = field(default_factory=dict)
    #: the verification stage accepted this candidate
    verified: bool = False

    def to_json(self) -> dict[str, Any]:
        """The hit as a JSON-ready dict."""
        return asdict(self)


@dataclass
class SearchResult:
    hits: list[Hit]
    #: what each stage recorded for the query (reference caption, target description, ...), and
    #: ``search``: the mode, the method that ran, excluded hits, per-stage calls and cache hits
    trace: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The hits and the trace as one JSON-ready dict (``agentcir search --json``)."""
        return {"hits": [h.to_json() for h in self.hits], "trace": self.trace}


@dataclass
class WarmStep:
    """One step of :meth:`Searcher.warm_up`: the models it loads (``kind:key``), the search modes
    that wait for no model once it is done, and what it runs."""

    name: str
    models: list[str]
    ready_for: tuple[str, ...]
    run: Callable[[Any], None]


class WarmUp:
    """The warm-up's progress, read from another thread (``agentcir serve``'s ``/api/status``):
    its ``state`` (``idle``, ``running``, ``done``, ``failed``, ``off``), each step's state
    (``waiting``, ``running``, ``done``, ``failed``) and seconds, each model's load state
    (``waiting``, ``loading``, ``ready``, ``failed``) and the search modes ready (``text``,
    ``image``, ``composed``, ``answer``): those that no longer wait for a model to load."""

    def __init__(self):
        self._lock = threading.Lock()
        self.state = "idle"
        self._steps: list[dict[str, Any]] = []
        self._modes: set[str] = set()
        self._t0 = self._t1 = 0.0
        self.error = ""

    def plan(self, steps: list[WarmStep]) -> None:
        with self._lock:
            self.state, self._t0, self._t1 = "running", time.perf_counter(), 0.0
            self._steps = [
                {
                    "name": s.name,
                    "models": list(s.models),
                    "ready_for": list(s.ready_for),
                    "state": "waiting",
                    "seconds": 0.0,
                    "error": "",
                    "_t": 0.0,
                }
                for s in steps
            ]

    def _step(self, name: str) -> dict[str, Any]:
        return next(s for s in self._steps if s["name"] == name)

    def start(self, name: str) -> None:
        with self._lock:
            st = self._step(name)
            st.update(state="running", _t=time.perf_counter())

    def finish(self, name: str, error: str = "") -> None:
        with self._lock:
            st = self._step(name)
            st.update(
                state="failed" if error else "done", error=error, seconds=round(time.perf_counter() - st["_t"], 3)
            )
            if error:
                self.state, self.error, self._t1 = "failed", f"{name}: {error}", time.perf_counter()
            else:
                self._modes.update(st["ready_for"])

    def done(self) -> None:
        with self._lock:
            self.state, self._t1 = "done", time.perf_counter()

    def off(self) -> None:
        with self._lock:
            self.state = "off"

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            steps = [{k: v for k, v in s.items() if k != "_t"} for s in self._steps]
            for s in steps:
                if s["state"] == "running":
                    s["seconds"] = round(
                        time.perf_counter() - next(t["_t"] for t in self._steps if t["name"] == s["name"]), 3
                    )
            models: dict[str, str] = {}
            for s in steps:
                for m in s["models"]:
                    models[m] = {"waiting": "waiting", "running": "loading", "done": "ready", "failed": "failed"}[
                        s["state"]
                    ]
            end = self._t1 or time.perf_counter()
            return {
                "state": self.state,
                "elapsed_s": round(end - self._t0, 3) if self._t0 else 0.0,
                "ready_for": sorted(self._modes),
                "models": models,
                "steps": steps,
                "error": self.error,
            }


#: the files whose (inode, size, mtime) tell that a gallery folder holds another gallery: an
#: update swaps a new folder in (new inodes), a metadata refresh rewrites ``items.jsonl``
SIGNATURE_FILES = ("gallery.json", "items.jsonl", "content.json")


def gallery_signature(root: str | Path) -> tuple | None:
    """What changes when gallery folder ``root`` is updated; None while it has no gallery (a swap
    between its two renames)."""
    out = []
    for name in SIGNATURE_FILES:
        try:
            st = os.stat(Path(root) / name)
        except OSError:
            if name == "gallery.json":
                return None
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _file_digest(path: str | Path) -> tuple[int, str] | None:
    """(size, sha256) of a file (the hash memoised by :func:`~.hashing.file_digest`); None: unreadable."""
    try:
        return os.path.getsize(path), file_digest(path)
    except OSError:
        return None


def _same_bytes(path: str, digest: tuple[int, str]) -> bool:
    try:
        return os.path.getsize(path) == digest[0] and file_digest(path) == digest[1]
    except OSError:
        return False


def _cosine(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(a @ b / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12))


class Searcher:
    """Holds the built components and the opened gallery; ``search`` runs one query.

    Args:
        recipe: a resolved recipe (:func:`agentcir.framework.recipe.compose`).
        gallery_dir: a gallery made by ``agentcir index`` with the recipe's encoder.
        progress: progress bars on stderr.
    """

    def __init__(self, recipe: dict[str, Any], gallery_dir: str | Path, *, progress: bool = False):
        self.recipe = recipe
        self.pool = ComponentPool(recipe)
        self.gallery_dir = Path(gallery_dir)
        self._signature = gallery_signature(self.gallery_dir)
        self.gallery = open_gallery(gallery_dir, encoder=self.pool.get("encoder"), scale=recipe.get("scale"))
        #: how many times the gallery was opened again after an update (:meth:`reload`)
        self.generation = 0
        self.method = self.pool.get("method")
        self.cache = open_call_cache(self.pool, recipe["run"])
        self.progress = progress
        self._lock = threading.Lock()  # one query at a time: components need not be thread-safe
        self._rows: dict[str, int] | None = None  # resolved gallery file -> row, made on first use
        self._prepared = not self.method.needs_captions
        self._text_method = None
        self._image_method = None
        self._waiting = 0  # searches waiting for the lock: the warm-up lets them go first
        self._count_lock = threading.Lock()

    def reopen(self) -> None:
        """Open the gallery directory again after it was updated (``agentcir index`` into it, or
        :func:`~agentcir.framework.indexing.index_folder`): the models stay loaded; the method is
        built again, since a method may hold state made from the gallery's rows."""
        with self._lock:
            built = {k: v for k, v in self.pool.built().items() if k != "method"}
            self.pool = ComponentPool(self.recipe, prebuilt=built)
            self.gallery = open_gallery(
                self.gallery.root, encoder=self.pool.get("encoder"), scale=self.recipe.get("scale")
            )
            self.method = self.pool.get("method")
            self._rows = None
            self._prepared = not self.method.needs_captions
            self._text_method = self._image_method = None

    @property
    def prepared(self) -> bool:
        """Whether the gallery captions the method needs are ready (or it needs none)."""
        return self._prepared

    def row_of(self, path: str | Path) -> int:
        """The gallery row of an image file (symlinks resolved), -1 when it is not a gallery file."""
        if self._rows is None:  # one resolve per gallery file: only once a reference image is given
            self._rows = {str(Path(p).resolve()): i for i, p in enumerate(self.gallery.paths)}
        return self._rows.get(str(Path(path).resolve()), -1)

    @contextlib.contextmanager
    def _turn(self):
        """The search lock, counted while waited for (the warm-up lets a waiting search go first)."""
        with self._count_lock:
            self._waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._count_lock:
                self._waiting -= 1
        try:
            yield
        finally:
            self._lock.release()

    def busy(self) -> bool:
        """Whether a search (or a warm-up step, or a reload) runs or waits to run."""
        return self._waiting > 0 or self._lock.locked()

    def changed_on_disk(self) -> bool:
        """Whether the gallery folder holds another gallery than the one open (an update was swapped
        in, or its metadata rewritten) since it was opened."""
        sig = gallery_signature(self.gallery_dir)
        return sig is not None and sig != self._signature

    def reload(self, *, force: bool = False) -> bool:
        """Open the gallery again when it changed on disk (``force``: in any case); waits for the
        running search. Returns whether it was opened again."""
        with self._lock:
            sig = gallery_signature(self.gallery_dir)
            if sig is None or (sig == self._signature and not force):
                return False
            old = self.gallery
            self.gallery = open_gallery(
                self.gallery_dir, encoder=self.pool.get("encoder"), scale=self.recipe.get("scale")
            )
            self._signature = sig
            self._rows = None
            self._prepared = not self.method.needs_captions
            self.generation += 1
        close = getattr(old, "close", None)
        if callable(close):
            close()
        return True

    @property
    def method_name(self) -> str:
        """The recipe's method key."""
        return self.recipe["method"]["name"]

    def _context(self, hook: Progress | None) -> RunContext:
        run = self.recipe["run"]
        ctx = RunContext(
            cache=self.cache,
            run_dir=None,
            concurrency=run["concurrency"],
            progress=self.progress,
            kernels=self.recipe["kernels"]["backend"],
        )
        ctx.on_progress = hook
        return ctx

    def _caption_stage(self):
        return caption_stage(self.pool, self.recipe["run"]["gallery_captions"])

    def prepare(self, progress: Progress | None = None) -> None:
        """Make the gallery captions (and their embeddings) the method needs, once; a later
        search finds them stored. Reports ``gallery_captions`` counts through ``progress``."""
        with self._lock:
            if self._prepared:
                return
            ctx = self._context(progress)
            stage = self._caption_stage()
            ctx.stage = stage.name
            if progress:
                progress(stage.name, 0, len(self.gallery))
            asyncio.run(Runner(_NoStages(), ctx, RunState(queries=[], gallery=self.gallery), prepare=[stage]).execute())
            self._prepared = True

    def warm_up(self, progress: Progress | None = None, status: "WarmUp | None" = None) -> float:
        """Load every model and compile every kernel a search uses, before the first person waits
        for it, step by step (:meth:`warm_steps`), each reported in ``status``. A search that comes
        in the meantime goes first, between two steps: it waits only for the step running (and
        loads what it needs itself). Returns seconds."""
        status = status if status is not None else WarmUp()
        steps = self.warm_steps()
        status.plan(steps)
        t0 = time.perf_counter()
        for step in steps:
            while self._waiting:  # someone is searching: let them go first
                time.sleep(0.01)
            status.start(step.name)
            try:
                step.run(progress)  # takes the search lock itself
            except Exception as e:
                status.finish(step.name, error=f"{type(e).__name__}: {e}")
                raise
            status.finish(step.name)
        status.done()
        return time.perf_counter() - t0

    def warm_steps(self) -> list["WarmStep"]:
        """The warm-up's steps, each holding the search lock while it runs: the encoder's text
        tower; a text search (its kernels); the encoder's image tower; an image search ("more like
        this"); the gallery captions the method needs; a composed search with a fresh reference (a gallery photo with one pixel changed,
        so no call is a cache hit) and a fresh text, which loads every other model of the method."""
        import tempfile
        import uuid

        import numpy as np

        word = uuid.uuid4().hex[:8]
        enc = self.pool.get("encoder")
        first = self.gallery.paths[0] if len(self.gallery) else None
        others = [
            f"{k}:{getattr(c, 'registry_key', '') or type(c).__name__}"
            for k, c in self.pool.built().items()
            if k not in ("encoder", "method", "memory", "dataset")
        ]
        answers = getattr(self.method, "answers_set", False)

        def text_tower(progress):
            with self._lock:
                enc.encode_texts([f"a photo {word}"], progress=False)

        def image_tower(progress):
            if first is not None:
                with self._lock:
                    enc.encode_images([first], progress=False)

        def search(image: bool, text: bool):
            def run(progress):
                with tempfile.TemporaryDirectory(prefix="agentcir-warm-") as d:
                    ref = None
                    if image:
                        im = np.array(load_rgb(self.gallery.paths[0]))
                        im[0, 0] = np.random.default_rng().integers(0, 256, 3)
                        from PIL import Image

                        ref = Path(d) / "warm.png"
                        Image.fromarray(im).save(ref)
                    self.search(image=ref, text=f"a photo in red {word}" if text else "", k=5, progress=progress)

            return run

        def captions(progress):
            self.prepare(progress)

        name = f"encoder:{getattr(enc, 'registry_key', '') or type(enc).__name__}"
        steps = [
            WarmStep("encoder text tower", [f"{name} text"], (), text_tower),
            WarmStep("text search", [], ("text",), search(False, True)),
            WarmStep("encoder image tower", [f"{name} images"], (), image_tower),
        ]
        if first is not None:
            steps.append(WarmStep("image search", [], ("image",), search(True, False)))
        if self.method.needs_captions:
            steps.append(WarmStep("gallery captions", [o for o in others if o.startswith("captioner:")], (), captions))
        if first is not None and not answers:
            steps.append(
                WarmStep(
                    "composed search",
                    [o for o in others if not o.startswith("captioner:")] or [],
                    ("composed",),
                    search(True, True),
                )
            )
        elif answers:
            steps.append(
                WarmStep(
                    "question", [o for o in others if not o.startswith("captioner:")], ("answer",), search(False, True)
                )
            )
        return steps

    def text_method(self):
        """The text retrieval used for a text-only search when the method needs a reference."""
        if self._text_method is None:
            from .methods.baselines import TextOnly

            self._text_method = TextOnly(
                TextOnly.Config(top_k=max(self.method.top_k, 50)), encoder=self.pool.get("encoder")
            )
            self._text_method.registry_key = "text_only"
        return self._text_method

    def image_method(self):
        """The image retrieval used for a reference image with no text ("more like this")."""
        if getattr(self.method, "use_text", True) is False and not getattr(self.method, "answers_set", False):
            return self.method  # the recipe's method is image retrieval already
        if self._image_method is None:
            from .methods.baselines import ImageOnly

            self._image_method = ImageOnly(
                ImageOnly.Config(top_k=max(self.method.top_k, 50)), encoder=self.pool.get("encoder")
            )
            self._image_method.registry_key = "image_only"
        return self._image_method

    def search(
        self, *, image: str | Path | None = None, text: str = "", k: int = 10, progress: Progress | None = None
    ) -> SearchResult:
        """Rank the gallery for a reference ``image`` and/or a ``text``; the top ``k`` hits (a
        set-answering method: its whole answer set)."""
        text = (text or "").strip()
        if image is None and not text:
            raise InputError("a search needs a reference image, a text, or both")
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        with self._turn():  # one query at a time, its decodes included (bounded memory)
            t0 = time.perf_counter()
            ref: list[str] = []
            ref_id = ref_digest = None
            if image is not None:
                if not Path(image).is_file():
                    raise InputError(f"reference image '{image}' not found")
                load_rgb(image)  # a clear error now rather than deep inside a stage
                ref = [str(Path(image).resolve())]
                row = self.row_of(ref[0])
                ref_id = self.gallery.ids[row] if row >= 0 else None
                ref_digest = _file_digest(ref[0])
            method, mode, why = self.method, "composed" if ref and text else ("image" if ref else "text"), ""
            if ref and not text:
                method = self.image_method()
                if method is not self.method:
                    why = (
                        f"a reference image and no text: more like this, so this is image retrieval (the image_only "
                        f"baseline with the same encoder) rather than method '{self.method_name}'"
                    )
            elif getattr(method, "answers_set", False):
                mode = "answer"
            elif not ref and getattr(method, "needs_reference", True):
                method = self.text_method()
                why = (
                    f"no reference image: method '{self.method_name}' needs one, so this is text retrieval "
                    f"(the text_only baseline with the same encoder)"
                )
            q = Query(id="query", text=text, reference=ref, reference_id=ref_id)
            state = RunState(queries=[q], gallery=self.gallery)
            ctx = self._context(progress)
            prepare = [self._caption_stage()] if method.needs_captions else []
            asyncio.run(Runner(method, ctx, state, prepare=prepare).execute())
            self._prepared = self._prepared or bool(prepare)
            ref_vec = self._reference_vector(ctx, state, ref) if ref else None
        wall = time.perf_counter() - t0
        trace = dict(state.traces.get(q.id, {}))
        hits, excluded, verification = self._hits(state, method, k, ref_digest, ref_id, ref_vec)
        trace["search"] = {
            "mode": mode,
            "method": method.registry_key or type(method).__name__,
            "recipe_method": self.method_name,
            "note": why,
            "reference": ({"path": ref[0], "gallery_id": ref_id} if ref else None),
            "text": text,
            "excluded": excluded,
            "verification": verification,
            "wall_s": round(wall, 4),
            "no_match": None
            if hits
            else next((r["no_match"] for r in trace.values() if isinstance(r, dict) and r.get("no_match")), None),
            "stages": {
                name: {
                    "calls": s.calls,
                    "cache_hits": s.cache_hits,
                    "wall_s": round(s.wall_s, 4),
                    "by_component": dict(s.by_component),
                }
                for name, s in ctx.stats.items()
            },
            "loop": loop_steps(trace),
        }  # a looped method's rounds, suggestions and verdicts
        return SearchResult(hits, trace)

    def _reference_vector(self, ctx: RunContext, state: RunState, ref: list[str]):
        """The reference's normalised image embedding (a gallery row's, else through the call cache)."""
        from .methods.common import image_embeddings

        ctx.stage = "exclude_reference"
        return asyncio.run(image_embeddings(ctx, state, self.pool.get("encoder"), [[Path(ref[0])]]))[0]

    def _hits(
        self, state: RunState, method, k: int, ref_digest, ref_id, ref_vec=None
    ) -> tuple[list[Hit], list[str], list[dict]]:
        """The hits; the ids excluded as the reference; the verdicts of the verified candidates."""
        g = state.gallery  # the gallery searched (an update may have been opened since)
        c = state.candidates
        if c is None:
            raise InputError(f"method '{self.method_name}' produced no ranking")
        rows = [int(r) for r in c.ids[0] if r >= 0]
        scores = {int(r): float(s) for r, s in zip(c.ids[0], c.scores[0]) if r >= 0}
        verified = set()
        verification: list[dict] = []
        ver = state.traces.get("query", {}).get("verify")
        names = list(state.stage_candidates)
        if ver and "verify" in names and names.index("verify") > 0:
            before = state.stage_candidates[names[names.index("verify") - 1]]
            judged = [int(r) for r in before.ids[0] if r >= 0][: len(ver.get("verdicts") or [])]
            verification = [
                {"rank": i + 1, "id": g.ids[r], "row": r, "accepted": bool(v)}
                for i, (r, v) in enumerate(zip(judged, ver.get("verdicts") or []))
            ]
            a = ver.get("accepted")
            if a is not None and int(a) < len(judged):
                row = judged[int(a)]
                verified.add(row)
                scores[row] = float(before.scores[0][int(a)])  # the raw score, not the promotion bonus
        set_answer = bool(getattr(method, "answers_set", False))
        hits: list[Hit] = []
        excluded: list[str] = []
        for row in rows:
            if (
                g.ids[row] == ref_id
                or (ref_digest is not None and _same_bytes(g.paths[row], ref_digest))
                or (ref_vec is not None and _cosine(g.image_emb[row], ref_vec) >= DUPLICATE_COS)
            ):
                excluded.append(g.ids[row])
                continue
            if not set_answer and len(hits) >= k:
                break
            hits.append(
                Hit(
                    len(hits) + 1,
                    g.ids[row],
                    None if set_answer else scores[row],
                    g.paths[row],
                    row,
                    dict(g.items[row].meta),
                    row in verified,
                )
            )
        return hits, excluded, verification


class _NoStages:
    """A method with no stages (to run only the gallery-caption preparation)."""

    def stages(self):
        return []
