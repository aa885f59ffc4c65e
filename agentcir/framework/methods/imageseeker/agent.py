"""``method=imageseeker``: agentic search over a personal photo history.

Implements ImageSeeker from *DeepImageSearch: Benchmarking Multimodal Agents for
Context-Aware Image Retrieval in Visual Histories* (Deng et al., 2026): an LLM with tool
calling plans and calls the tools of :mod:`.tools` over the question's user's photos, with
explicit state memory (named subsets), compressed context memory (session + working memory
under a token budget) and a memory graph (:mod:`.graph`), and answers with a set of photo
ids, a reasoning trace and the subset chain that produced them. Without an LLM that can call
tools (no ``llm`` or ``llm=rules``), or with ``planner=offline``, the deterministic
:mod:`.planner` drives the same tools.

Stages: ``collections`` (per user: photo store, visual tags, memory graph; saved as
``graphs/<user>.json`` in the run directory) and ``seek`` (per query through ``ctx.map``:
every model call goes through ``ctx.call``, so runs are cached and resume). The final
candidates are each query's answered photo rows, in answer order, padded with -1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ....registry import MEMORIES, METHODS, Choice
from ....registry.config import bounded
from ...errors import InputError
from ...interfaces import ChatReply, ToolCall, assistant_message, l2_normalize, tool_message, user_message
from ...method import Method, RunState, Stage
from ...prompts import load_prompt
from ...runner import RunContext
from ...types import Candidates, Query
from ...untrusted import mark as mark_untrusted
from .dates import format_timestamp
from .conditions import Facts
from .graph import GraphConfig, MemoryGraph, build_graph
from .planner import OfflinePlanner, PlanConfig, decompose
from .store import METADATA_FIELDS, Photo, PhotoCollection
from .tools import TOOLS, AnswerArgs, Toolbox, parse_arguments
from .visual import PROMPT, ClueVocabulary
from .web import WebSearch, make_web_search

log = logging.getLogger(__name__)

#: LLM backends that cannot call tools (the offline planner drives the tools instead)
NO_TOOL_CALLING = ("rules",)


class Planner(Choice):
    """What drives the tools (``method.planner``): the recipe's ``llm`` (tool calls), the
    ``offline`` planner, or ``auto`` (the llm when it can call tools)."""

    auto = "auto"
    llm = "llm"
    offline = "offline"


class VisualPass(Choice):
    """What admits a candidate at the offline planner's visual check (``method.visual_pass``)."""

    auto = "auto"
    calibrated = "calibrated"
    checked = "checked"


class OfflineJudge(Choice):
    """What the offline planner judges candidates by (``method.offline_judge``)."""

    auto = "auto"
    caption = "caption"
    encoder = "encoder"


@dataclass
class UserStore:
    """What the tools need about one user, built once per run."""

    collection: PhotoCollection
    tags: list[list[tuple[str, float]]]
    graph: MemoryGraph | None
    facts: Facts | None = None


@METHODS.register("imageseeker")
class ImageSeeker(Method):
    """ImageSeeker (DeepImageSearch, Deng et al. 2026; see the module docstring).

    Config:
        planner: ``auto`` (the LLM agent when the recipe's llm can call tools, else the offline
            planner), ``llm`` or ``offline``.
        max_steps: LLM turns before the agent must stop (the step budget).
        top_k: image_search's default ``top_k``.
        max_answer: most photo ids kept in an answer (not applied to the offline planner's
            metadata-only answers, which are exact: every matching photo).
        prompt: system prompt file of the LLM agent.
        view_images: view_photos sends the images to the LLM (a vision-language model).
        context_budget: tokens of the conversation before older turns are compressed.
        context_keep_last: recent messages kept verbatim at a compression.
        summarizer: ``offline`` (extractive) or ``llm`` (the recipe's llm runs ``compress_context``).
        token_counter: ``approx``, ``words`` or a local tokenizer folder.
        event_gap_hours: a longer gap between consecutive photos starts a new event (photoset).
        graph: build the memory graph and offer the ``expand_graph`` tool.
        graph_similarity: cosine above which photos of different events are linked as similar.
        graph_similar_k: most similar links per photo.
        clue_vocab: vocabularies (``agentcir/data/vocab``) of the offline visual tags / clues.
        clue_tags: visual tags per photo.
        verify_rank: offline verification: a phrase is seen in a photo when at most this many
            vocabulary terms beat it.
        episode_top_k: offline planner: candidates searched for the episode clue.
        target_top_k: offline planner: candidates searched for the target.
        verify_max: offline planner: most candidates viewed per verification.
        keep_top: offline planner: best-ranked target candidates always in the answer (0: only those
            that pass the visual check).
        visual_z: offline planner: a candidate passes the visual check when its similarity to the
            phrase is this many standard deviations above the mean over all the user's photos (or
            when the vocabulary check confirms it).
        visual_pass: offline planner: what admits a target candidate: ``calibrated`` (its similarity
            to the phrase clears the calibrated threshold of ``visual_z``; the answer is the
            candidates ranked by similarity, cut there), ``checked`` (the vocabulary check or the
            captioner's caption confirms it, or it clears the threshold) or ``auto``
            (``calibrated`` when the phrase names a vocabulary term and asks more, "red t-shirts
            for women", and the checks are the encoder's zero-shot vocabulary ranks, which confirm
            the whole category whatever its colour or whom it is for; else ``checked``).
        min_answer: offline planner: best-ranked candidates answered when none passes the visual
            check (0: answer no photo, and say so).
        file_dates: date a photo whose metadata has no date by its file's modification time (the
            last date source; relative dates count from metadata dates when there are any).
        web_search: web_search backend, ``none`` (offline) or ``searxng``.
        web_search_url: the SearXNG base URL for ``web_search=searxng``.
    """

    optional: ClassVar[tuple[str, ...]] = ("llm", "captioner", "context_memory", "subset_memory")
    requires: ClassVar[tuple[str, ...]] = ("encoder",)
    #: injected by the recipe pool (memory registry keys), configured from this method's fields
    memories: ClassVar[dict[str, str]] = {"context_memory": "context", "subset_memory": "subsets"}
    prompt_fields: ClassVar[tuple[str, ...]] = ("prompt",)
    needs_reference: ClassVar[bool] = False
    answers_set: ClassVar[bool] = True

    @classmethod
    def needs_for(cls, config: dict) -> dict[str, tuple[str, ...]]:
        """``planner=llm`` needs an llm that chats with tools (and reads images when it views
        photos); ``summarizer=llm`` needs task ``compress_context``. ``planner=auto`` needs
        nothing: it falls back to the offline planner."""
        llm: list[str] = []
        if config.get("planner") == "llm":
            llm += ["chat", "tools"] + (["images"] if config.get("view_images", True) else [])
        if config.get("summarizer") == "llm":
            llm.append("task:compress_context")
        return {"llm": tuple(llm)} if llm else {}

    @dataclass
    class Config:
        planner: Planner = Planner.auto
        max_steps: int = bounded(20, 1)
        top_k: int = 50
        max_answer: int = bounded(200, 1)
        prompt: str = "imageseeker/system"
        view_images: bool = True
        context_budget: int = bounded(16000, 1)
        context_keep_last: int = 6
        summarizer: str = "offline"
        token_counter: str = "approx"
        event_gap_hours: float = 24.0
        graph: bool = True
        graph_similarity: float = bounded(0.9, -1.0, 1.0)
        graph_similar_k: int = 5
        clue_vocab: list[str] = field(default_factory=lambda: ["articles", "objects"])
        clue_tags: int = 2
        verify_rank: int = 1
        offline_judge: OfflineJudge = OfflineJudge.auto
        episode_top_k: int = bounded(100, 1)
        target_top_k: int = bounded(200, 1)
        verify_max: int = 100
        keep_top: int = 0
        visual_z: float = bounded(2.0, None)
        visual_pass: VisualPass = VisualPass.auto
        min_answer: int = bounded(1, 0)
        file_dates: bool = True
        web_search: WebSearch = WebSearch.none
        web_search_url: str = ""

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        c = self.cfg
        if c.planner == "llm" and not self._llm_can_call_tools():
            raise InputError(
                "method 'imageseeker': planner=llm needs an llm that can call tools (llm=openai or "
                "transformers); the recipe has " + (f"llm={self.llm.registry_key}" if self.llm else "no llm")
            )
        if c.max_steps < 1 or c.top_k < 1 or c.max_answer < 1:
            raise InputError(
                f"method 'imageseeker': max_steps, top_k and max_answer must be positive "
                f"(got {c.max_steps}, {c.top_k}, {c.max_answer})"
            )
        # the memories come from the recipe pool; built directly (e.g. METHODS.build in a script), the
        # method makes them by registry key from its own fields
        if self.context_memory is None:
            self.context_memory = MEMORIES.build(
                "context",
                self.memory_config("context_memory", vars(c)),
                **({"llm": self.llm} if self.llm is not None else {}),
            )
        if self.subset_memory is None:
            self.subset_memory = MEMORIES.build("subsets", {})
        self.web = make_web_search(c.web_search, c.web_search_url)
        self._users: dict[str | None, UserStore] = {}
        self._locks: dict[str | None, asyncio.Lock] = {}
        self._vocab: ClueVocabulary | None = None

    @classmethod
    def memory_config(cls, dependency: str, node: dict[str, Any]) -> dict[str, Any]:
        """The context memory's settings are this method's ``context_*``, ``token_counter`` and
        ``summarizer`` fields; the subsets memory keeps each session's subsets in the run directory."""
        c = cls.Config(**{f.name: node[f.name] for f in dataclasses.fields(cls.Config) if f.name in node})
        if dependency == "context_memory":
            return {
                "budget": c.context_budget,
                "keep_last": c.context_keep_last,
                "token_counter": c.token_counter,
                "summarizer": c.summarizer,
            }
        return {}

    def visual_pass(self, phrase: str, vocab: ClueVocabulary | None) -> str:
        """The offline visual check's rule for ``phrase`` (``visual_pass``, ``auto`` resolved: ``checked``
        unless the phrase asks more than a vocabulary term the zero-shot check can confirm and no captioner's
        captions judge, :meth:`ClueVocabulary.asks_more`)."""
        if self.cfg.visual_pass == "auto":
            return "calibrated" if vocab is not None and vocab.asks_more(phrase) else "checked"
        return str(self.cfg.visual_pass)

    def judge_by_caption(self) -> bool:
        """Whether the offline checks read the captioner's captions (``offline_judge``): ``auto``
        reads them unless the captioner is derived from the encoder itself (e.g. ``tagger``:
        its caption is the encoder's zero-shot tags, thresholded, so it can only lose
        information the direct encoder check has)."""
        if self.captioner is None or self.cfg.offline_judge == "encoder":
            return False
        return self.cfg.offline_judge == "caption" or "encoder" not in getattr(self.captioner, "requires", ())

    def _llm_can_call_tools(self) -> bool:
        return self.llm is not None and getattr(self.llm, "registry_key", "") not in NO_TOOL_CALLING

    def use_llm(self) -> bool:
        return self.cfg.planner == "llm" or (self.cfg.planner == "auto" and self._llm_can_call_tools())

    @property
    def top_k(self) -> int:
        return self.cfg.max_answer

    def stages(self) -> list[Stage]:
        return [Stage("collections", self._collections), Stage("seek", self._seek)]

    # -- per user -----------------------------------------------------------------------------
    async def _vocabulary(self, ctx: RunContext) -> ClueVocabulary:
        if self._vocab is None:
            names, syns = ClueVocabulary.terms(self.cfg.clue_vocab)
            emb = (
                (await ctx.call(self.encoder, "encode_texts", texts=[PROMPT.format(n) for n in names]))
                if names
                else np.zeros((0, 1), np.float32)
            )
            self._vocab = ClueVocabulary(names, syns, l2_normalize(np.asarray(emb, np.float32)))
        return self._vocab

    async def user_store(self, ctx: RunContext, gallery, user: str | None) -> UserStore:
        """The user's photo store, visual tags and memory graph (built once, also when queries of
        one user arrive concurrently)."""
        async with self._locks.setdefault(user, asyncio.Lock()):
            return await self._build_store(ctx, gallery, user)

    async def _build_store(self, ctx: RunContext, gallery, user: str | None) -> UserStore:
        if user not in self._users:
            coll = PhotoCollection(
                gallery, user, event_gap_hours=self.cfg.event_gap_hours, file_dates=self.cfg.file_dates
            )
            vocab = await self._vocabulary(ctx)
            tags = (
                vocab.tags(coll.embeddings, self.cfg.clue_tags) if self.cfg.clue_tags > 0 else [[] for _ in coll.photos]
            )
            graph = None
            if self.cfg.graph:
                gcfg = GraphConfig(similarity=self.cfg.graph_similarity, similar_k=self.cfg.graph_similar_k)
                graph = await asyncio.to_thread(build_graph, coll, [[t for t, _ in ts] for ts in tags], gcfg)
            self._users[user] = UserStore(coll, tags, graph, Facts.of(coll.photos))
        return self._users[user]

    async def _collections(self, ctx: RunContext, state: RunState) -> None:
        users = list(dict.fromkeys(q.user for q in state.queries))
        out = {}
        for u in users:
            store = await self.user_store(ctx, state.gallery, u)
            out[str(u)] = {
                "photos": len(store.collection),
                "events": len(store.collection.events),
                "graph": store.graph.stats() if store.graph else None,
            }
            if ctx.run_dir is not None and store.graph is not None:
                d = ctx.run_dir / "graphs"
                d.mkdir(parents=True, exist_ok=True)
                safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(u))
                (d / f"{safe}.json").write_text(json.dumps(store.graph.to_json()), encoding="utf-8")
        state.arrays.setdefault("num_users", np.array([len(users)]))
        if ctx.run_dir is not None:
            (ctx.run_dir / "collections.json").write_text(json.dumps(out, indent=1), encoding="utf-8")

    # -- tools for one session ----------------------------------------------------------------
    def _toolbox(self, ctx: RunContext, store: UserStore, query: Query) -> Toolbox:
        folder = ctx.run_dir / "subsets" if ctx.run_dir is not None else None
        subsets = self.subset_memory.session(query.id, dir=folder)
        subsets.clear()  # a rerun replays the session from its cached model calls
        coll = store.collection

        async def embed_text(text: str) -> np.ndarray:
            return np.asarray(await ctx.call(self.encoder, "encode_texts", texts=[text]), np.float32)[0]

        async def view(photos: list[Photo]) -> list[dict]:
            out = []
            for p in photos:
                d: dict[str, Any] = {}
                if self.captioner is not None:
                    d["caption"] = await ctx.call(self.captioner, "caption", image=Path(p.path))
                tags = store.tags[coll.index(p.id)]
                if tags:
                    d["visual_tags"] = [t for t, _ in tags]
                if store.graph is not None:
                    xmp = [c for c in store.graph.clues_of(p.id) if c not in d.get("visual_tags", [])]
                    if xmp:
                        d["keywords"] = xmp
                out.append(d)
            return out

        enabled = [t for t in TOOLS if t != "expand_graph" or store.graph is not None]
        return Toolbox(
            coll,
            subsets,
            embed_text=embed_text,
            view=view,
            web=self.web,
            graph=store.graph,
            view_images=self.cfg.view_images and self.use_llm(),
            default_top_k=self.cfg.top_k,
            enabled=enabled,
        )

    async def _verify(
        self, ctx: RunContext, store: UserStore, photos: list[Photo], phrase: str, views: list[dict], contrast: str = ""
    ) -> list[bool]:
        """Offline "does the photo show ``phrase``?". Judged by caption (:meth:`judge_by_caption`):
        the caption names the phrase or a synonym. Else: the phrase ranks within ``verify_rank`` of
        the vocabulary terms, or (given a ``contrast``, e.g. the question's other object) the photo
        is closer to the phrase than to the contrast."""
        vocab = await self._vocabulary(ctx)
        texts = [PROMPT.format(phrase), *([PROMPT.format(contrast)] if contrast else [])]
        te = l2_normalize(np.asarray(await ctx.call(self.encoder, "encode_texts", texts=texts), np.float32))
        pe = te[0]
        emb = store.collection.embeddings[[store.collection.index(p.id) for p in photos]]
        ranks = vocab.rank_of(emb, phrase, pe)
        closer = (emb @ pe > emb @ te[1]) if contrast else np.zeros(len(photos), bool)
        groups = vocab.group_of(phrase)
        words = [w for w in re.findall(r"[a-z0-9-]+", phrase.lower()) if len(w) > 2]
        by_caption = self.judge_by_caption()
        out = []
        for i, (r, v) in enumerate(zip(ranks, views)):
            cap = str(v.get("caption") or "").lower() if by_caption else ""
            if cap:  # a (real) captioner's caption is a better judge than zero-shot similarity
                out.append(
                    bool(groups & vocab.group_of(cap)) or any(re.search(rf"\b{re.escape(w)}\b", cap) for w in words)
                )
            else:
                out.append(bool(r < self.cfg.verify_rank) or bool(closer[i]))
        return out

    # -- one query ------------------------------------------------------------------------------
    async def _seek(self, ctx: RunContext, state: RunState) -> None:
        async def one(q: Query) -> dict:
            store = await self.user_store(ctx, state.gallery, q.user)
            tb = self._toolbox(ctx, store, q)
            if self.use_llm():
                rec = await self._llm_session(ctx, tb, q)
            else:
                rec = await self._offline_session(ctx, store, tb, q)
            rec["answer_size"] = len(rec["ids"])  # the answer is a set: these ids, in answer order, lead the candidates
            exact = (
                rec["planner"] == "offline" and rec.get("visual_check") is None and not rec["decomposition"].get("clue")
            )
            if len(rec["ids"]) > self.cfg.max_answer and not exact:  # a metadata-only answer is exact: never cut
                rec["truncated_from"] = len(rec["ids"])
                rec["ids"] = rec["ids"][: self.cfg.max_answer]
            rec["steps"] = [o.to_json() for o in tb.log]
            rec["subsets"] = tb.subsets.list()
            return rec

        records = await ctx.map(state, one)
        answers = [records[q.id]["ids"] for q in state.queries]
        width = max(1, max((len(a) for a in answers), default=1))
        ids = np.full((len(answers), width), -1, np.int32)
        scores = np.full((len(answers), width), -np.inf, np.float32)
        g = state.gallery
        for qi, a in enumerate(answers):
            rows = [g.index_of(i) for i in a]
            rows = [r for r in rows if r >= 0]
            ids[qi, : len(rows)] = rows
            scores[qi, : len(rows)] = 1.0 - np.arange(len(rows), dtype=np.float32) / max(1, width)
        state.candidates = Candidates(ids, scores)

    def _chain(self, tb: Toolbox, subset: str | None, ids: list[str]) -> list[str]:
        """The subset chain of an answer: the lineage of the answered subset, else of the latest
        subset holding every answered id."""
        if not subset:
            want = set(ids)
            for s in reversed(tb.subsets.list()):
                if want and want <= set(tb.subsets.ids(s["name"])):
                    subset = s["name"]
                    break
        if not subset or subset not in tb.subsets:
            return []
        return [f"{s.name}({len(s)})" for s in tb.subsets.lineage(subset)]

    async def _offline_session(self, ctx: RunContext, store: UserStore, tb: Toolbox, q: Query) -> dict:
        coll = store.collection
        d = decompose(q.text, coll.gazetteer, facts=store.facts)

        vocab = await self._vocabulary(ctx) if self.cfg.visual_pass == "auto" and not self.judge_by_caption() else None

        async def score(phrase: str) -> dict[str, float]:  # the calibration population: all the user's photos
            te = l2_normalize(
                np.asarray(await ctx.call(self.encoder, "encode_texts", texts=[PROMPT.format(phrase)]), np.float32)
            )[0]
            return dict(zip(coll.ids, (coll.embeddings @ te).tolist()))

        planner = OfflinePlanner(
            tb,
            lambda photos, phrase, views, contrast: self._verify(ctx, store, photos, phrase, views, contrast),
            PlanConfig(
                self.cfg.episode_top_k,
                self.cfg.target_top_k,
                self.cfg.verify_max,
                min_answer=self.cfg.min_answer,
                keep_top=self.cfg.keep_top,
                visual_z=self.cfg.visual_z,
                visual_pass="auto",
            ),
            scorer=score,
            pass_rule=lambda phrase: self.visual_pass(phrase, vocab),
        )
        res = await planner.run(d)
        rec = {
            "planner": "offline",
            "ids": res.ids,
            "reasoning": res.reasoning,
            "subset_chain": self._chain(tb, res.subset, res.ids),
            "decomposition": d.to_json(),
            "filters": res.filters,
            "visual_check": res.visual,
            "unparsed": d.unparsed,
            "stopped": "answered",
            "no_match": res.no_match,
        }
        if d.count:
            rec["count"] = len(res.ids)
        return rec

    # -- the LLM agent --------------------------------------------------------------------------
    def _context(self, ctx: RunContext, goal: str, system: str):
        summarize = self.context_memory.summarize
        if self.cfg.summarizer == "llm":  # the summariser's LLM call goes through the run's cache too
            loop = asyncio.get_running_loop()

            def cached_summary(goal: str, findings: list[str], session_memory: str, history: list[str]) -> dict:
                from ...parsing import parse_task_reply

                variables = {
                    "goal": goal,
                    "findings": findings or ["(none yet)"],
                    "session_memory": session_memory or "(empty)",
                    "history": "\n".join(history),
                }
                fut = asyncio.run_coroutine_threadsafe(
                    ctx.call(
                        self.llm,
                        "run_task",
                        task="compress_context",
                        variables=variables,
                        prompt=self.context_memory.cfg.prompt,
                    ),
                    loop,
                )
                return parse_task_reply("compress_context", fut.result())

            summarize = cached_summary

        context = self.context_memory.new(goal, system=[{"role": "system", "content": system}])
        context.summarizer = summarize
        context.mark_memory = mark_untrusted  # the memories summarise tool results
        return context

    def _system(self, tb: Toolbox) -> str:
        whens = [p.when for p in tb.c.photos if p.when is not None]
        return load_prompt(self.cfg.prompt).render(
            num_photos=len(tb.c),
            first_date=format_timestamp(min(whens)) if whens else "unknown",
            last_date=format_timestamp(max(whens)) if whens else "unknown",
            num_events=len(tb.c.events),
            fields=", ".join(METADATA_FIELDS),
            max_steps=self.cfg.max_steps,
        )

    @staticmethod
    def _reply(raw: Any) -> ChatReply:
        if isinstance(raw, ChatReply):
            return raw
        calls = [
            ToolCall(str(t.get("id")), str(t.get("name")), t.get("arguments") or {})
            for t in raw.get("tool_calls") or []
        ]
        return ChatReply(str(raw.get("text") or ""), calls)

    async def _llm_session(self, ctx: RunContext, tb: Toolbox, q: Query) -> dict:
        from ...parsing import ReplyParseError, extract_json

        context = self._context(ctx, q.text, self._system(tb))
        await context.aadd(user_message(f"Question: {q.text}"))
        schemas = tb.schemas()
        answer: AnswerArgs | None = None
        ids: list[str] = []
        stopped = "step_budget"
        turns = 0
        while turns < self.cfg.max_steps:
            turns += 1
            try:
                reply = self._reply(await ctx.call(self.llm, "chat", messages=context.messages(), tools=schemas))
            except ReplyParseError as e:  # e.g. tool arguments that are not JSON: tell the model, go on
                await context.aadd(
                    user_message(f"Your last reply could not be used: {e}. Call the tools with JSON arguments.")
                )
                continue
            await context.aadd(assistant_message(reply))
            if not reply.tool_calls:
                parsed = None
                try:
                    parsed = extract_json(reply.text, expect=dict, what="final answer") if reply.text.strip() else None
                except ReplyParseError:
                    parsed = None
                if isinstance(parsed, dict) and any(k in parsed for k in ("ids", "targets", "subset")):
                    try:
                        answer = parse_arguments(
                            "answer",
                            {
                                "ids": parsed.get("ids") or parsed.get("targets") or [],
                                "subset": parsed.get("subset"),
                                "reasoning": str(parsed.get("reasoning", "")),
                            },
                        )
                        ids = tb.answer_ids(answer)
                        stopped = "answered"
                        break
                    except InputError as e:
                        await context.aadd(user_message(f"That answer could not be used: {e}"))
                        continue
                await context.aadd(user_message("Continue with the tools, or call answer with the photo ids."))
                continue
            for tc in reply.tool_calls:
                outcome = await tb.call(tc.name, tc.arguments)
                if tc.name == "answer" and outcome.error is None:
                    try:
                        answer = parse_arguments("answer", tc.arguments)
                        ids = tb.answer_ids(answer)
                        await context.aadd(tool_message(tc.id, {"ok": True, "answered": len(ids)}))
                        stopped = "answered"
                        break
                    except InputError as e:
                        outcome.error = str(e)
                        answer = None
                # every tool result may carry the photos' metadata, captions, file names or web text: data
                await context.aadd(tool_message(tc.id, mark_untrusted(outcome.text(), f"tool:{tc.name}")))
                if outcome.saved:
                    context.note(f"subset '{outcome.saved}' = {outcome.result.get('count')} photos from {tc.name}")
                if outcome.images:
                    shown = mark_untrusted(", ".join(r["id"] for r in outcome.result["photos"]), "photo ids")
                    await context.aadd(user_message(f"The photos of view_photos, in order:\n{shown}", outcome.images))
            if stopped == "answered":
                break
        subset = answer.subset if answer else None
        if stopped != "answered":  # budget spent: answer with the latest saved subset, and say so
            last = tb.subsets.list()[-1]["name"] if len(tb.subsets) else None
            ids = tb.subsets.ids(last)[: self.cfg.max_answer] if last else []
            subset = last
        reasoning = (
            answer.reasoning
            if answer
            else (
                f"step budget of {self.cfg.max_steps} turns spent without an answer; answered with the latest subset "
                f"'{subset}'"
                if subset
                else f"step budget of {self.cfg.max_steps} turns spent without an answer"
            )
        )
        return {
            "planner": "llm",
            "ids": ids,
            "reasoning": reasoning,
            "subset_chain": self._chain(tb, subset, ids),
            "stopped": stopped,
            "turns": turns,
            "compressions": [vars(c) for c in context.compressions],
            "context": {"session_memory": context.session_memory, "working_memory": context.working_memory},
        }
