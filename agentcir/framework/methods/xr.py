"""``method=xr``: XR, cross-modal agents for composed image retrieval (Yang, Pang, Yuan, WWW 2026;
code: 01yzzyu/xr.github.io ``XR/xr.py``). Exact to the released code (docs/design/methods.md).

Stages (each that ranks leaves a snapshot, so the report shows recall after every agent):

1. ``imagine``: the reference caption, then the text imagination ``v1`` (LLM task
   ``target_descriptions``, ``num_descriptions`` target descriptions; XR's "step2") and the
   visual imagination ``v2`` (task ``rewrite_caption``: one rewritten caption; XR's
   ``caption_v2``).
2. ``coarse`` (similarity agents): per target text ``t``,
   ``sim = (1 - tau) cos(t, I) + tau cos(t, C)`` (``I`` gallery images, ``C`` gallery captions),
   averaged over the texts of a variant; variants ``v1``, ``v2`` and ``aug`` (= the v1 texts and
   the v2 caption together); Reciprocal Rank Fusion over the variants,
   ``score(n) = sum_v 1 / (z + rank_v(n))``, ranks from 1 (:func:`agentcir.kernels.rrf`). The
   stage-2 list is ``stage2_source``: ``aug`` (the released default) or ``fused`` (RRF; its
   similarities are the RRF scores, as in the released code) or one variant. Snapshot: that list.
   The averaged similarity is one inner product of the mean text embedding with the
   concatenated ``[I | C]`` gallery (query ``[(1 - tau) t, tau t]``), so it streams through
   :func:`agentcir.kernels.cosine_topk` (one extra ``[N, 2d]`` copy of the gallery per run).
3. ``questions``: at most ``num_questions`` true/false statements about the target with
   their expected answers (task ``questions``; XR's ``s2_atomic``).
4. ``fine`` (question agents): every candidate of the top ``k_prime`` gets the fraction of
   statements answered as expected on its image (``verifier.check(statement, candidate=...)``,
   the VQA agent) and on its caption (LLM task ``entail``, the text QA agent);
   ``score = (qa_weight qa + (1 - qa_weight) cap) * minmax_head(stage-1 sim)``; the head is
   re-sorted, the tail keeps its order (:func:`agentcir.kernels.xr_rerank`). ``s2_mode``:
   ``both`` (the fusion), ``qa`` (image only) or ``caption`` (caption only), as the released
   ``s2_mode``; ``none`` skips stages 3-4.
5. ``verify`` (stage 3, off by default): the top ``alpha`` candidates are judged yes/no in
   order (``verifier.verify``); the first yes moves to the front. (The released code judges
   all ``alpha`` and moves every yes to the front in order; docs/design/methods.md specifies the first
   yes, which also stops the calls there.)

Answer parsing: correct by default (``framework.parsing``: the expected answer of a statement is a
real boolean, a reply's first word decides). ``upstream_compat=true`` reads replies exactly as
the released code (``XR/xr.py``), with its two bugs: the statements are read as released
(``{"step2": [[question, answer], ...]}`` pairs or this project's ``{"questions": [...]}``,
all of them, no cut at ``num_questions``), unchecked; the caption path
(``_run_caption_path``) asks ``compat_entail_prompt`` (the released Yes/No judge wording),
takes a reply as yes when it contains "yes" and contains "no" nowhere ("not", "know",
"cannot" make it no; "true" is not yes), and expects ``bool(raw answer)``, so ``"False"``
counts as true; the image path (``_run_qa_path``) compares the verdict as the string
``"True"``/``"False"`` with the raw answer, so only string answers ``"True"``/``"False"``
(the released prompt's) can ever match: a JSON boolean never does. For the released image
reading too, use ``verifier=vlm verifier.reading=released`` (a reply containing "yes" is
yes); ``+experiment=xr_upstream_compat`` sets all of it. Not reproduced: the released
re-sort is numpy's unstable ``argsort`` (tie order; see :func:`agentcir.kernels.xr_rerank`).

The released code keeps the reference in the stage-1 lists (CIRR removes it at evaluation);
``exclude_reference`` (default true, like every method here) removes it before the head is
taken. Ablation rows of XR (``+experiment=xr_<row>``): visual similarity only (``tau=0``, no
stage 2), + text similarity (``tau=0.15``), + text QA (``s2_mode=caption``), + visual QA
(``s2_mode=both``, the full method).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..parsing import extract_json, parse_task_reply, parse_true_false
from ...kernels import cosine_topk, promote_first_accepted, rrf, xr_rerank
from ...registry import METHODS, Choice
from ...registry.config import bounded
from ..errors import InputError
from ..method import Method, RunState, Stage
from ..runner import RunContext
from ..types import Candidates
from .common import (
    VerifyInstruction,
    accepted_matrix,
    caption_embeddings,
    embed_texts,
    first_accepted,
    gallery_captions,
    gather_limited,
    middle,
    reference_caption,
    reference_rows,
    sample_keyframes,
    task,
    to_candidates,
)

VARIANTS = ("v1", "v2", "aug")


class Stage2Source(Choice):
    """The ranking stage 2 re-ranks (``method.stage2_source``): one variant's, or their fusion."""

    aug = "aug"
    fused = "fused"
    v1 = "v1"
    v2 = "v2"


class S2Mode(Choice):
    """Stage 2's evidence (``method.s2_mode``): questions, caption entailment, both or none."""

    both = "both"
    qa = "qa"
    caption = "caption"
    none = "none"


SOURCES = Stage2Source.values()
S2_MODES = S2Mode.values()


def upstream_is_yes(text: str) -> bool:
    """The released caption-path reading of a reply (``upstream_compat``): "yes" found and
    "no" found nowhere, by substring ("not", "know", "cannot" all count as no)."""
    t = (text or "").strip().lower()
    return "yes" in t and "no" not in t


def upstream_image_match(verdict: bool, raw: Any) -> bool:
    """The released image-path comparison: the verdict as the string ``"True"``/``"False"``
    equals the raw expected answer (a JSON boolean, or ``"true"``, never does)."""
    return ("True" if verdict else "False") == raw


def upstream_questions(reply: str) -> list[dict[str, Any]]:
    """The statements of a questions reply as the released code reads them, all of them:
    ``{"step2": [[statement, answer], ...]}`` (the released format; entries that are not
    pairs are skipped) or ``{"questions": [{"statement", "answer"}, ...]}``. ``raw`` is the
    answer as written (compared by :func:`upstream_image_match`), ``caption_answer`` is
    ``bool(raw)`` (the string ``"False"`` is true), ``answer`` the correct reading (for the
    trace; None when it is neither true nor false)."""
    data = extract_json(reply, what="reply to XR's statements (upstream_compat)")
    if isinstance(data, dict) and isinstance(data.get("step2"), list):
        pairs = [(x[0], x[1]) for x in data["step2"] if isinstance(x, list) and len(x) == 2]
    else:
        items = data.get("questions", []) if isinstance(data, dict) else data
        pairs = [
            (q.get("statement"), q.get("answer"))
            for q in (items if isinstance(items, list) else [])
            if isinstance(q, dict)
        ]
    out = []
    for statement, raw in pairs:
        if isinstance(statement, str) and statement.strip():
            strict = raw if isinstance(raw, bool) else parse_true_false(raw, default=None)
            out.append({"statement": statement.strip(), "answer": strict, "raw": raw, "caption_answer": bool(raw)})
    return out


@METHODS.register("xr")
class XR(Method):
    """XR (WWW 2026): imagination -> coarse filter (similarity agents + RRF) -> fine filter
    (true/false questions on image and caption) -> optional yes/no verification.

    See the module docstring for the exact scoring, the switches and the ablation rows.

    Config:
        top_k: ranking depth (at least ``k_prime`` is kept).
        num_keyframes: keyframes captioned for a video reference.
        num_descriptions: target descriptions of variant v1 (XR: 3).
        variants: the stage-1 variants ranked and fused (v1, v2, aug).
        tau: weight of the caption similarity in a text's similarity (XR: 0.15).
        rrf_z: the RRF constant z (60).
        rrf_depth: ranks of each variant fused by RRF (the released code keeps 15000; 0 = all).
        stage2_source: the stage-1 list the fine filter re-ranks: aug, fused, v1 or v2.
        k_prime: candidates checked by the question agents (100).
        num_questions: most true/false statements per query (XR: 3).
        s2_mode: both, qa (image), caption, or none (no fine filter).
        qa_weight: weight of the image answers in the fusion (0.5).
        stage3: run the yes/no verification of the top ``alpha``.
        alpha: candidates judged by stage 3 (100).
        upstream_compat: read replies exactly as the released code, bugs included (module docstring).
        compat_questions_prompt: the statements prompt under ``upstream_compat`` (reply unchecked).
        compat_entail_prompt: the caption-path judge prompt under ``upstream_compat`` (the released
            Yes/No wording; reply unchecked).
        exclude_reference: remove the reference item from the stage-1 lists.
        verify_instruction: what stage 3 asks the verifier about: ``modification`` or ``target``.
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder", "llm", "captioner")
    optional: ClassVar[tuple[str, ...]] = ("verifier",)
    needs_captions: ClassVar[bool] = True
    prompt_fields: ClassVar[tuple[str, ...]] = ("compat_questions_prompt", "compat_entail_prompt")

    @dataclass
    class Config:
        top_k: int = 100
        num_keyframes: int = bounded(8, 1)
        num_descriptions: int = bounded(3, 1)
        variants: list[str] = field(default_factory=lambda: ["v1", "v2", "aug"])
        tau: float = bounded(0.15, 0.0, 1.0)
        rrf_z: float = 60.0
        rrf_depth: int = bounded(15000, 1)
        stage2_source: Stage2Source = Stage2Source.aug
        k_prime: int = bounded(100, 1)
        num_questions: int = 3
        s2_mode: S2Mode = S2Mode.both
        qa_weight: float = bounded(0.5, 0.0, 1.0)
        stage3: bool = False
        alpha: int = bounded(100, 1)
        upstream_compat: bool = False
        compat_questions_prompt: str = "tasks/questions"
        compat_entail_prompt: str = "xr/entail_released"
        exclude_reference: bool = True
        verify_instruction: VerifyInstruction = VerifyInstruction.modification

    @classmethod
    def needs_for(cls, config: dict) -> dict[str, tuple[str, ...]]:
        """The LLM tasks the configured stages run; ``upstream_compat`` runs the released prompts
        as unchecked tasks, which needs a prompt-reading llm (chat)."""
        import dataclasses

        c = {**dataclasses.asdict(cls.Config()), **config}
        tasks = ["summarize_captions", "target_descriptions", "rewrite_caption"]
        if c["s2_mode"] != "none":
            if c["upstream_compat"]:
                return {"llm": (*(f"task:{t}" for t in tasks), "chat")}
            tasks += ["questions"] + (["entail"] if c["s2_mode"] in ("both", "caption") else [])
        return {"llm": tuple(f"task:{t}" for t in tasks)}

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c, where = self.cfg, "method 'xr'"
        bad = [v for v in c.variants if v not in VARIANTS]
        if not c.variants or bad:
            raise InputError(
                f"{where}: field 'variants' must list some of {', '.join(VARIANTS)}, got {list(c.variants)}"
            )
        if len(set(c.variants)) != len(c.variants):
            raise InputError(f"{where}: field 'variants' repeats a variant: {list(c.variants)}")
        if c.stage2_source == "fused" and len(c.variants) < 2:
            raise InputError(
                f"{where}: stage2_source=fused needs at least two variants to fuse, got {list(c.variants)}"
            )
        if c.stage2_source in VARIANTS and c.stage2_source not in c.variants:
            raise InputError(
                f"{where}: stage2_source={c.stage2_source} is not one of the ranked variants {list(c.variants)}"
            )
        for name in ("top_k", "num_keyframes", "num_descriptions", "k_prime", "num_questions", "alpha"):
            if getattr(c, name) < 1:
                raise InputError(f"{where}: field '{name}' must be at least 1, got {getattr(c, name)}")
        if not 0.0 <= c.tau <= 1.0 or not 0.0 <= c.qa_weight <= 1.0:
            raise InputError(f"{where}: fields 'tau' and 'qa_weight' must be in [0, 1], got {c.tau}, {c.qa_weight}")
        if c.rrf_z < 0 or c.rrf_depth < 0:
            raise InputError(f"{where}: fields 'rrf_z' and 'rrf_depth' must be >= 0, got {c.rrf_z}, {c.rrf_depth}")

    def stages(self) -> list[Stage]:
        out = [Stage("imagine", self._imagine), Stage("coarse", self._coarse)]
        if self.cfg.s2_mode != "none":
            if self.cfg.s2_mode in ("both", "qa") and self.verifier is None:
                raise InputError(
                    f"method 'xr': s2_mode={self.cfg.s2_mode} asks questions on the candidate images and "
                    f"needs a verifier (e.g. verifier=vlm), or set method.s2_mode=caption"
                )
            out += [Stage("questions", self._questions), Stage("fine", self._fine)]
        if self.cfg.stage3:
            if self.verifier is None:
                raise InputError("method 'xr': stage3=true needs a verifier (e.g. verifier=vlm)")
            out.append(Stage("verify", self._verify))
        return out

    @property
    def depth(self) -> int:
        return max(self.cfg.top_k, self.cfg.k_prime)

    # -- 1. imagination ----------------------------------------------------------------------
    async def _imagine(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        need_v1 = any(v in ("v1", "aug") for v in c.variants)
        need_v2 = any(v in ("v2", "aug") for v in c.variants)

        async def one(q):
            ref, _ = await reference_caption(ctx, state, q, self.captioner, self.llm, c.num_keyframes)
            rec: dict[str, Any] = {"reference_caption": ref, "descriptions": [], "rewritten": None}
            if need_v1:
                rec["descriptions"] = (
                    await task(
                        ctx,
                        self.llm,
                        "target_descriptions",
                        reference_caption=ref,
                        modification=q.text,
                        n=c.num_descriptions,
                    )
                )["descriptions"]
            if need_v2:
                rec["rewritten"] = (
                    await task(ctx, self.llm, "rewrite_caption", reference_caption=ref, modification=q.text)
                )["caption"]
            return rec

        await ctx.map(state, one)

    def variant_texts(self, rec: dict, variant: str, query_text: str) -> list[str]:
        """The texts of a variant (released fallbacks: no v1 texts -> the reference caption;
        no v2 caption -> the v1 texts)."""
        v1 = list(rec["descriptions"]) or [rec["reference_caption"]]
        v2 = rec["rewritten"]
        if variant == "v1":
            return v1
        if variant == "v2":
            return [v2] if v2 else v1
        return v1 + ([v2] if v2 else [])

    # -- 2. coarse filter ----------------------------------------------------------------------
    async def _coarse(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        g = state.gallery
        N = len(g)
        texts = {
            v: [self.variant_texts(state.record(q, "imagine"), v, q.text) for q in state.queries] for v in c.variants
        }
        flat = [t for v in c.variants for per_q in texts[v] for t in per_q]
        emb = await embed_texts(ctx, self.encoder, flat)
        if c.tau > 0:
            gallery = np.concatenate(
                [np.asarray(g.image_emb), np.asarray(caption_embeddings(state, self.encoder))], axis=1
            )
        else:
            gallery = g.image_emb
        depth = N if c.rrf_depth == 0 else min(N, max(c.rrf_depth, self.depth))
        exclude = reference_rows(state) if c.exclude_reference else None
        lists: dict[str, Candidates] = {}
        pos = 0
        for v in c.variants:
            means = []
            for per_q in texts[v]:
                means.append(emb[pos : pos + len(per_q)].mean(axis=0))
                pos += len(per_q)
            t = np.stack(means).astype(np.float32)
            q = np.concatenate([(1 - c.tau) * t, c.tau * t], axis=1) if c.tau > 0 else t
            lists[v] = to_candidates(cosine_topk(q, gallery, depth, exclude=exclude, backend=ctx.kernels))
        if len(c.variants) > 1:
            lists["fused"] = to_candidates(
                rrf(np.stack([lists[v].ids for v in c.variants]), depth, z=c.rrf_z, backend=ctx.kernels)
            )
        source = c.stage2_source if c.stage2_source in lists else c.variants[0]
        for name, cand in lists.items():
            state.arrays[f"stage1_{name}_ids"] = cand.ids[:, : self.depth]
        chosen = lists[source]
        state.candidates = Candidates(chosen.ids[:, : self.depth], chosen.scores[:, : self.depth])

    # -- 3. questions -----------------------------------------------------------------------
    async def _questions(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg

        async def one(q):
            rec = state.record(q, "imagine")
            target = rec["rewritten"] or (rec["descriptions"] or [rec["reference_caption"]])[0]
            variables = {
                "reference_caption": rec["reference_caption"],
                "modification": q.text,
                "target_caption": target,
                "n": c.num_questions,
            }
            if c.upstream_compat:  # an unchecked task name: the reply is read as released
                reply = await ctx.call(
                    self.llm,
                    "run_task",
                    task="xr_statements_released",
                    variables=variables,
                    prompt=c.compat_questions_prompt,
                )
                qs = upstream_questions(reply)
            else:
                reply = await ctx.call(self.llm, "run_task", task="questions", variables=variables)
                qs = [
                    {**x, "caption_answer": x["answer"]}
                    for x in parse_task_reply("questions", reply, variables)["questions"][: c.num_questions]
                ]
            return {"target_caption": target, "questions": qs}

        await ctx.map(state, one)

    # -- 4. fine filter --------------------------------------------------------------------------
    async def _entails(self, ctx: RunContext, statement: str, caption: str) -> bool:
        variables = {"statement": statement, "caption": caption}
        if self.cfg.upstream_compat:
            reply = await ctx.call(
                self.llm,
                "run_task",
                task="xr_entail_released",
                variables=variables,
                prompt=self.cfg.compat_entail_prompt,
            )
            return upstream_is_yes(reply)
        reply = await ctx.call(self.llm, "run_task", task="entail", variables=variables)
        return parse_true_false(reply)

    async def _fine(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        g = state.gallery
        caps = gallery_captions(state)
        cands = state.candidates
        H = min(c.k_prime, cands.k)
        on_image, on_caption = c.s2_mode in ("both", "qa"), c.s2_mode in ("both", "caption")
        index = {q.id: i for i, q in enumerate(state.queries)}

        async def one(q):
            qs = state.record(q, "questions")["questions"]
            head = [int(r) for r in cands.ids[index[q.id], :H] if r >= 0]

            async def judge(row: int, st: dict) -> tuple[int, int]:
                img = cap = 0
                if on_image:
                    verdict = bool(
                        await ctx.call(self.verifier, "check", statement=st["statement"], candidate=g.path_of(row))
                    )
                    img = int(
                        upstream_image_match(verdict, st["raw"]) if c.upstream_compat else verdict == st["answer"]
                    )
                if on_caption:
                    cap = int((await self._entails(ctx, st["statement"], caps[row])) == st["caption_answer"])
                return img, cap

            res = await gather_limited([judge(r, st) for r in head for st in qs], ctx.concurrency)
            n = max(1, len(qs))
            img = [sum(res[j * len(qs) + t][0] for t in range(len(qs))) for j in range(len(head))]
            cap = [sum(res[j * len(qs) + t][1] for t in range(len(qs))) for j in range(len(head))]
            return {
                "num_questions": len(qs),
                "image_correct": img,
                "caption_correct": cap,
                "qa": [x / n for x in img],
                "cap": [x / n for x in cap],
            }

        await ctx.map(state, one)
        qa = np.zeros((len(state.queries), H), np.float32)
        cp = np.zeros_like(qa)
        for i, q in enumerate(state.queries):
            r = state.record(q, "fine")
            qa[i, : len(r["qa"])], cp[i, : len(r["cap"])] = r["qa"], r["cap"]
        w = c.qa_weight if c.s2_mode == "both" else (1.0 if c.s2_mode == "qa" else 0.0)
        top = xr_rerank(
            cands.ids, np.where(cands.ids >= 0, cands.scores, 0.0), qa, cp, qa_weight=w, backend=ctx.kernels
        )
        state.candidates = to_candidates(top)

    # -- 5. stage 3 ------------------------------------------------------------------------------
    async def _verify(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        cands = state.candidates
        index = {q.id: i for i, q in enumerate(state.queries)}

        async def one(q):
            rec = state.record(q, "imagine")
            target = rec["rewritten"] or (rec["descriptions"] or [rec["reference_caption"]])[0]
            verdicts = await first_accepted(
                ctx,
                self.verifier,
                state,
                cands.ids[index[q.id]],
                c.alpha,
                instruction=q.text if c.verify_instruction == "modification" else target,
                reference=middle(sample_keyframes(q.reference, c.num_keyframes)),
                reference_caption=rec["reference_caption"],
            )
            return {"verdicts": verdicts, "accepted": (len(verdicts) - 1) if verdicts and verdicts[-1] else None}

        await ctx.map(state, one)
        verdicts = [state.record(q, "verify")["verdicts"] for q in state.queries]
        top = promote_first_accepted(
            cands.ids, cands.scores, accepted_matrix(verdicts, min(c.alpha, cands.k)), backend=ctx.kernels
        )
        state.candidates = to_candidates(top)
