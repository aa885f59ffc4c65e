"""``method=imagescope``: ImageScope, collective reasoning of large multimodal models (Luo et al.,
WWW 2025; code: pengfei-luo/ImageScope ``imagescope.py``, ``utils/inference_entrypoint_ray.py``).
Exact to the released code for every part that is code. XR forked this pipeline.

Stages (each that ranks leaves a snapshot):

1. ``reason`` (stage-1 reasoner, released ``stage1_reason``): task ``imagescope_reason``
   (prompt ``reason_prompt``) with the instruction and the reference description (the gallery
   caption of a gallery reference, else the captioner's); the reply's JSON gives ``step1``, the
   atomic instructions ``[type, content]``, and ``step2``, the target descriptions (three in the
   released prompts). No ``step2`` or an empty one -> the reference description; no JSON at all ->
   ``step1 = [["Modification", instruction]]`` and ``step2 = [reference description]``.
2. ``retrieve`` (released ``clip_rank_retrieval_ray``): per description ``t``,
   ``sim = (1 - tau) cos(t, I) + tau cos(t, C)`` (``I`` gallery images, ``C`` gallery captions,
   ``tau = 0.15``), averaged over the descriptions; one inner product of the mean text embedding
   with ``[I | C]`` (query ``[(1 - tau) t, tau t]``) through :func:`agentcir.kernels.cosine_topk`.
3. ``propositions`` (stage-2 reasoner, released ``stage2_verify``): task
   ``imagescope_propositions`` (prompt ``propositions_prompt``) with the instruction and the
   atomic instructions rendered as released (``"\\n"`` then ``"   (i) type: content\\n"`` per valid
   pair); the reply's ``step2`` holds ``[question, answer]`` pairs (entries that are not pairs are
   dropped). No JSON -> no questions, and stage 4 keeps the stage-1 order for that query.
4. ``rerank`` (released ``stage2_rerank``): each of the top ``k`` (20) candidates is asked every
   question on its image (``verifier.check``; the released MLLM prompt is ``"Answer the question
   with Yes or No. <question>"``, read as yes when the reply contains "yes"); a candidate's value is
   the number of answers equal to the expected ones; the head is sorted by value, descending, with
   Python's stable sort (ties keep the stage-1 order); the tail keeps its order. Scores after this
   stage are the values in the head and the stage-1 similarity minus a constant below them in the
   tail, so the ranking reads in order.
5. ``verify`` (stage-3 evaluator, released ``stage3_evaluate`` with
   ``stage3_large_mllm_inference_batch_cmp_ray``): the top ``alpha`` (3) candidates are judged in
   order against the instruction (stripped of spaces and dots at both ends and lowercased, as
   released) with the reference image (``verifier.verify``); the judging stops at the first yes,
   which moves to the front (:func:`agentcir.kernels.promote_first_accepted`).

``stages`` selects the released ``--stages`` (``s1``: 1-2, ``s2``: 3-4, ``s3``: 5).

Reply reading: correct by default (the project's JSON reader, which repairs trailing commas and
quotes and finds a balanced object; an answer is a real true/false, ``"True"``, ``"yes"`` ...).
``upstream_compat=true`` reads replies exactly as released: stage 1 takes the first fenced
```` ```json ```` block, else the shortest ``{...}`` span (non-greedy, so a nested object is cut at its
first ``}``), repaired; a reply whose JSON has no ``step1`` keeps none (the released code then fails in
stage 2; here the query gets no atomic instructions); stage 2 takes only a fenced ``json`` block;
an answer matches only as the string ``"True"`` / ``"False"`` (a JSON boolean never matches, as in
XR's fork). For the released image reading use ``verifier=vlm verifier.reading=released
verifier.answer_prompt=imagescope/answer_released``; ``+experiment=imagescope_upstream_compat`` sets
all of it.

Deviations (docs/upstream.md): the released ``repair_json`` (package ``json_repair``) is replaced by
this project's repair (the same result on the trailing commas, quotes and unclosed brackets that
models write; a reply broken beyond that may be read differently); the stage-1 ranking is
``torch.argsort`` (unstable among exact ties), here ties go to the lower gallery row; the released
code keeps the reference in the rankings, ``exclude_reference`` (default true) removes it; the
evaluator sees the reference and candidate as two images, not the released side-by-side
concatenation (a verifier's input, not the method's).

Prompts: the project's own files (``tasks/imagescope_reason``, ``tasks/imagescope_propositions``
under ``agentcir/recipes/prompts``) follow the released structure and reply format. ``prompts=DIR``
points at a released per-dataset folder (``prompts/<DATASET>/`` of the authors' checkout):
``prompt1_stage1_reasoner.txt`` and ``prompt2_stage2_reasoner.txt`` are read as they are; their
``[[INSTRUCTION]]``, ``[[REF_IMAGE_DESC]]`` and ``[[ATOMIC_INST]]`` placeholders are filled like
this project's."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...kernels import cosine_topk, promote_first_accepted
from ...registry import METHODS
from ..errors import InputError
from ..method import Method, RunState, Stage
from ..parsing import ReplyParseError, _repair, extract_json, parse_true_false
from ..runner import RunContext
from ..types import Candidates
from .autocir import resolve_prompt_folder
from .common import (
    VerifyInstruction,
    accepted_matrix,
    caption_embeddings,
    embed_texts,
    first_accepted,
    gather_limited,
    middle,
    reference_caption,
    reference_rows,
    sample_keyframes,
    to_candidates,
)
from .xr import upstream_image_match

STAGE_SETS = ("s1", "s2", "s3")
PROMPT_FILES = {"reason_prompt": "prompt1_stage1_reasoner.txt", "propositions_prompt": "prompt2_stage2_reasoner.txt"}
_FENCED = re.compile(r"```json\s*([\s\S]*?)\s*```", re.DOTALL)
_BRACES = re.compile(r"(\{[\s\S]*?\})", re.DOTALL)


def _loads_repaired(text: str) -> Any:
    import json

    for attempt in (text, _repair(text)):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            continue
    return None


def _released_json(reply: str, *, braces: bool) -> Any:
    """The released reading: the first fenced ``json`` block, else (stage 1 only) the shortest
    ``{...}`` span; repaired; ``None`` when nothing matches or nothing parses."""
    m = _FENCED.search(reply or "")
    if m is None and braces:
        m = _BRACES.search(reply or "")
    return None if m is None else _loads_repaired(m.group(1))


def _correct_json(reply: str) -> Any:
    try:
        return extract_json(reply, expect=dict, what="ImageScope reply")
    except ReplyParseError:
        return None


def parse_reason(
    reply: str, instruction: str, reference_description: str, *, upstream_compat: bool = False
) -> dict[str, Any]:
    """Stage-1 reply -> ``{"step1": [[type, content], ...], "step2": [description, ...], "parsed": bool}``."""
    data = _released_json(reply, braces=True) if upstream_compat else _correct_json(reply)
    if not isinstance(data, dict):
        return {"step1": [["Modification", instruction]], "step2": [reference_description], "parsed": False}
    if upstream_compat:
        step1 = data.get("step1", [])
        step2 = data.get("step2")
        if not isinstance(step2, list) or len(step2) == 0:
            step2 = [reference_description]
        return {"step1": step1 if isinstance(step1, list) else [], "step2": [str(x) for x in step2], "parsed": True}
    step1 = data.get("step1")
    if not isinstance(step1, list):
        step1 = [["Modification", instruction]]
    step2 = (
        [str(x).strip() for x in data.get("step2") or [] if isinstance(x, str) and x.strip()]
        if isinstance(data.get("step2"), list)
        else []
    )
    return {"step1": step1, "step2": step2 or [reference_description], "parsed": True}


def atomic_text(step1: list) -> str:
    """The atomic instructions as the released stage-2 prompt shows them."""
    out = "\n"
    i = 1
    for element in step1:
        if not isinstance(element, (list, tuple)) or len(element) != 2:
            continue
        kind, content = element
        out += f"   ({i}) {kind}: {content}\n"
        i += 1
    return out


def parse_propositions(reply: str, *, upstream_compat: bool = False) -> list[dict[str, Any]] | None:
    """Stage-2 reply -> the questions ``[{"question", "raw", "answer"}]`` (``raw`` as written,
    ``answer`` its true/false reading, None when neither); None when the reply has no JSON (the
    query keeps its stage-1 order)."""
    data = _released_json(reply, braces=False) if upstream_compat else _correct_json(reply)
    if not isinstance(data, dict):
        return None
    pairs = data.get("step2")
    if not isinstance(pairs, list):
        return None if upstream_compat else []
    out = []
    for x in pairs:
        if isinstance(x, list) and len(x) == 2:
            q, raw = x
            ans = (
                raw if isinstance(raw, bool) else parse_true_false(raw, default=None) if isinstance(raw, str) else None
            )
            if upstream_compat or (isinstance(q, str) and q.strip() and ans is not None):
                out.append({"question": str(q), "raw": raw, "answer": ans})
    return out


def stable_value_rerank(ids: np.ndarray, scores: np.ndarray, values: list[list[int]], k: int) -> Candidates:
    """The released stage-2 re-rank: per row, the first ``len(values[i])`` (at most ``k``)
    candidates sorted by value, descending, ties in their order (a stable sort); the rest unchanged.
    Head scores are the values; the tail keeps its scores shifted below the lowest head value."""
    ids = np.asarray(ids, np.int32).copy()
    scores = np.asarray(scores, np.float32).copy()
    for i, vals in enumerate(values):
        h = min(len(vals), k, ids.shape[1])
        if h == 0:
            continue
        order = sorted(range(h), key=lambda j: -vals[j])
        ids[i, :h] = ids[i, :h][order]
        head = np.asarray([vals[j] for j in order], np.float32)
        tail = scores[i, h:]
        finite = np.isfinite(tail)
        if finite.any():
            tail[finite] = tail[finite] - tail[finite].max() + head.min() - 1.0
        scores[i, :h] = head
    return Candidates(ids, scores)


@METHODS.register("imagescope")
class ImageScope(Method):
    """ImageScope (WWW 2025): reasoner -> retrieval -> proposition verification -> evaluator.

    See the module docstring for the exact steps, the switches and the deviations.

    Config:
        top_k: ranking depth (at least ``k``).
        num_keyframes: keyframes captioned for a video reference.
        tau: weight of the caption similarity (released 0.15).
        k: candidates verified by the stage-2 questions (released ``--top_k`` 20).
        alpha: candidates judged by the stage-3 evaluator (released 3).
        stages: the released ``--stages``: s1 (reason + retrieve), s2 (propositions + rerank), s3.
        upstream_compat: read replies exactly as released (module docstring).
        prompts: a released per-dataset prompt folder (``prompts/<DATASET>``), used instead of the
            two prompt fields.
        reason_prompt: prompt of task ``imagescope_reason``.
        propositions_prompt: prompt of task ``imagescope_propositions``.
        exclude_reference: remove the reference item from the rankings.
        verify_instruction: what stage 3 asks about: ``modification`` (released) or ``target``
            (the first target description).
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder", "llm", "captioner")
    optional: ClassVar[tuple[str, ...]] = ("verifier",)
    needs_captions: ClassVar[bool] = True
    prompt_fields: ClassVar[tuple[str, ...]] = ("reason_prompt", "propositions_prompt")

    @dataclass
    class Config:
        top_k: int = 100
        num_keyframes: int = 8
        tau: float = 0.15
        k: int = 20
        alpha: int = 3
        stages: list[str] = field(default_factory=lambda: ["s1", "s2", "s3"])
        upstream_compat: bool = False
        prompts: str = ""
        reason_prompt: str = "tasks/imagescope_reason"
        propositions_prompt: str = "tasks/imagescope_propositions"
        exclude_reference: bool = True
        verify_instruction: VerifyInstruction = VerifyInstruction.modification

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c, where = self.cfg, "method 'imagescope'"
        bad = [s for s in c.stages if s not in STAGE_SETS]
        if bad or "s1" not in c.stages:
            raise InputError(f"{where}: field 'stages' must list s1 and any of s2, s3, got {list(c.stages)}")
        for name in ("top_k", "num_keyframes", "k", "alpha"):
            if getattr(c, name) < 1:
                raise InputError(f"{where}: field '{name}' must be at least 1, got {getattr(c, name)}")
        if not 0.0 <= c.tau <= 1.0:
            raise InputError(f"{where}: field 'tau' must be in [0, 1], got {c.tau}")
        if c.prompts:
            resolve_prompt_folder(self, c.prompts, PROMPT_FILES, where)

    @property
    def depth(self) -> int:
        return max(self.cfg.top_k, self.cfg.k, self.cfg.alpha)

    def stages(self) -> list[Stage]:
        c = self.cfg
        out = [Stage("reason", self._reason), Stage("retrieve", self._retrieve)]
        if ("s2" in c.stages or "s3" in c.stages) and self.verifier is None:
            raise InputError(
                "method 'imagescope': stages s2 and s3 ask about the candidate images and need a "
                "verifier (e.g. verifier=vlm), or set method.stages=[s1]"
            )
        if "s2" in c.stages:
            out += [Stage("propositions", self._propositions), Stage("rerank", self._rerank)]
        if "s3" in c.stages:
            out.append(Stage("verify", self._evaluate))  # the released stage-3 evaluator; "verify" like every
            #                                                 yes/no stage here (search marks the accepted hit)
        return out

    # -- stage 1 ------------------------------------------------------------------------------
    async def _reason(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg

        async def one(q):
            ref, _ = await reference_caption(ctx, state, q, self.captioner, self.llm, c.num_keyframes)
            reply = await ctx.call(
                self.llm,
                "run_task",
                task="imagescope_reason",
                prompt=c.reason_prompt,
                variables={"instruction": q.text, "ref_image_desc": ref.strip()},
            )
            parsed = parse_reason(reply, q.text, ref, upstream_compat=c.upstream_compat)
            return {"reference_caption": ref, "reply": reply, **parsed}

        await ctx.map(state, one)

    async def _retrieve(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        g = state.gallery
        texts = [state.record(q, "reason")["step2"] or [q.text] for q in state.queries]
        emb = await embed_texts(ctx, self.encoder, [t for per_q in texts for t in per_q])
        means, pos = [], 0
        for per_q in texts:
            means.append(emb[pos : pos + len(per_q)].mean(axis=0))
            pos += len(per_q)
        t = np.stack(means).astype(np.float32)
        if c.tau > 0:
            gallery = np.concatenate(
                [np.asarray(g.image_emb), np.asarray(caption_embeddings(state, self.encoder))], axis=1
            )
            qv = np.concatenate([(1 - c.tau) * t, c.tau * t], axis=1)
        else:
            gallery, qv = g.image_emb, t
        exclude = reference_rows(state) if c.exclude_reference else None
        state.candidates = to_candidates(
            cosine_topk(qv, gallery, min(len(g), self.depth), exclude=exclude, backend=ctx.kernels)
        )

    # -- stage 2 ------------------------------------------------------------------------------
    async def _propositions(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg

        async def one(q):
            step1 = state.record(q, "reason")["step1"]
            reply = await ctx.call(
                self.llm,
                "run_task",
                task="imagescope_propositions",
                prompt=c.propositions_prompt,
                variables={"instruction": q.text, "atomic_inst": atomic_text(step1)},
            )
            return {"reply": reply, "questions": parse_propositions(reply, upstream_compat=c.upstream_compat)}

        await ctx.map(state, one)

    async def _rerank(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        g = state.gallery
        cands = state.candidates
        index = {q.id: i for i, q in enumerate(state.queries)}

        async def one(q):
            qs = state.record(q, "propositions")["questions"]
            if qs is None:
                return {"values": [], "answers": [], "skipped": "no questions"}
            head = [int(r) for r in cands.ids[index[q.id], : c.k] if r >= 0]
            said_all = await gather_limited(
                [
                    ctx.call(self.verifier, "check", statement=x["question"], candidate=g.path_of(row))
                    for row in head
                    for x in qs
                ],
                ctx.concurrency,
            )
            values, answers = [], []
            for j in range(len(head)):
                said = [bool(v) for v in said_all[j * len(qs) : (j + 1) * len(qs)]]
                if c.upstream_compat:
                    ok = [upstream_image_match(v, x["raw"]) for v, x in zip(said, qs)]
                else:
                    ok = [x["answer"] is not None and v == x["answer"] for v, x in zip(said, qs)]
                values.append(int(sum(ok)))
                answers.append(said)
            return {"candidates": [g.ids[r] for r in head], "values": values, "answers": answers}

        await ctx.map(state, one)
        values = [state.record(q, "rerank")["values"] for q in state.queries]
        state.candidates = stable_value_rerank(cands.ids, cands.scores, values, c.k)

    # -- stage 3 ------------------------------------------------------------------------------
    async def _evaluate(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        cands = state.candidates
        index = {q.id: i for i, q in enumerate(state.queries)}

        async def one(q):
            rec = state.record(q, "reason")
            instruction = q.text.strip(" .").lower() if c.verify_instruction == "modification" else rec["step2"][0]
            verdicts = await first_accepted(
                ctx,
                self.verifier,
                state,
                cands.ids[index[q.id]],
                c.alpha,
                instruction=instruction,
                reference=middle(sample_keyframes(q.reference, c.num_keyframes)),
                reference_caption=rec["reference_caption"],
            )
            return {"verdicts": verdicts, "accepted": (len(verdicts) - 1) if verdicts and verdicts[-1] else None}

        await ctx.map(state, one)
        verdicts = [state.record(q, "verify")["verdicts"] for q in state.queries]
        top = promote_first_accepted(
            cands.ids,
            np.where(cands.ids >= 0, cands.scores, 0.0).astype(np.float32),
            accepted_matrix(verdicts, min(c.alpha, cands.k)),
            backend=ctx.kernels,
        )
        state.candidates = to_candidates(top)
