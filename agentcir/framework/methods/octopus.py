"""``method=octopus``: OCTOPUS, multi-agentic universal compositional visual retrieval (ECCV 2026;
code: github.com/zbzzbzzbz/OCTOPUS). Exact to the released code (docs/design/methods.md).

Stages (each leaves a ranking snapshot, so the report shows recall after every agent):

1. ``perceive`` (Perceiver): the reference caption (a video: ``num_keyframes`` uniformly
   sampled keyframes captioned and summarised), the modification reasoning (LLM task
   ``target_caption``) and the semantic refinement (task ``refine``). Snapshot: the gallery
   ranked by the target description alone (``q_t . I``).
2. ``create`` (Creator): the visual proxy (``generator.generate(target description)``), the
   objects of the reference and of the proxy (``detector.detect``), filtered against the
   instruction (task ``filter_objects``), and ``num_proxies`` textual proxies (task
   ``textual_proxies``, given the kept objects; a shorter list is padded by repeating its
   last proxy). Snapshot: the text-to-vision path alone, ``S_t2v``.
3. ``retrieve`` (Retriever, :func:`agentcir.kernels.octopus_topk`):
   ``q_v = norm(f_gen + (max f_gen / (max f_ref + 1e-8)) f_ref)``; adaptive proxy weights
   ``w = softmax(s / tau)``, ``s_i = mean_j relu(S_r[j] - S_E[i, j])``, ``e = norm(sum_i w_i P_i)``;
   ``S_t2v = ((e + q_t) / 2) . I^T``; ``S_v2t = q_v . C^T``;
   ``S = lam S_t2v + (1 - lam) (S_v2t * S_t2v)``; the reference item masked to -10.
4. ``verify`` (candidate verification): uncertainty ``u = 0.5 mm(H(softmax(S / 0.02))) +
   0.5 mm(clip(top2 / (top1 + 1e-8), 0, 1))`` over the queries, ``mm(x) = (x - min) / (max -
   min + 1e-8)``, as released (the entropy over the whole gallery, streamed by the kernel,
   exact where upstream adds 1e-8 inside the log: :func:`agentcir.kernels.uncertainty`; a run
   of a single query, where a min-max over queries is undefined, counts it as uncertain,
   ``u = 1``); the queries with ``u >= gate`` (the ``max_verified`` most uncertain) have
   their top ``alpha`` candidates judged by the verifier in rank order; the first accepted
   one gets ``max(S) + 100`` (it moves to the front). The released code leaves this step a
   stub (``qwen2vl_text_rerank`` returns its input); it is implemented from its parameters
   (threshold 0.8, ``u_topk`` 1000, ``topk`` 20, ``boost_value`` 100). The released code
   computes ``u`` before masking the reference; here after (the reference cannot be the
   answer, so it should not count as a confident top-1).

Where the objects enter the scores: only through the textual proxies. In the released code
the detected objects (``obj_det``) are an input of the prompt that writes the ten auxiliary
titles (``tools/enrich_tar_desc_webvid.py``: "consistent with the detected objects"), and
those titles are the proxies ``P`` weighted into ``e``; no score uses the objects directly.
Here the objects of the reference and of the visual proxy are filtered by the LLM against
the instruction (the paper's object filtering) and the kept ones are the ``objects`` of task
``textual_proxies``.

Ablations (OCTOPUS Table 3), one recipe override each (``+experiment=octopus_<row>``):
``modification_reasoning=false`` (the target description is the reference caption and the
instruction concatenated, then refined), ``refinement=false``, ``textual_proxies=false``
(the proxy list is the target description alone, so ``e = q_t``), ``visual_proxy=false``
(no generated image: ``q_v`` is the reference embedding, or with
``visual_without_proxy=none`` the vision-to-text term is dropped; objects come from the
reference only), ``creator=false`` (neither proxy nor objects), ``cross_modal=v2v``
(vision-to-vision: ``S_v2t = q_v . I^T`` instead of the captions) and ``verification=false``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from ...kernels import cosine_topk, octopus_topk, octopus_visual_query, promote_first_accepted, uncertainty
from ...registry import METHODS, Choice
from ...registry.config import bounded
from ..errors import InputError
from ..method import Method, RunState, Stage
from ..runner import RunContext
from .common import (
    VerifyInstruction,
    accepted_matrix,
    caption_embeddings,
    embed_texts,
    first_accepted,
    image_embeddings,
    middle,
    reference_caption,
    reference_embeddings,
    reference_rows,
    sample_keyframes,
    task,
    to_candidates,
)


class CrossModal(Choice):
    """Octopus's cross-modal similarity (``method.cross_modal``): visual proxies against the
    gallery's captions (``v2t``) or its images (``v2v``)."""

    v2t = "v2t"
    v2v = "v2v"


class WithoutProxy(Choice):
    """The visual query of a query without a generated proxy (``method.visual_without_proxy``)."""

    reference = "reference"
    none = "none"


@METHODS.register("octopus")
class Octopus(Method):
    """OCTOPUS (ECCV 2026): Perceiver -> Creator -> bidirectional Retriever -> verification.

    See the module docstring for the exact scoring and the ablation switches.

    Config:
        top_k: ranking depth.
        num_keyframes: keyframes captioned for a video reference (uniformly sampled).
        num_proxies: K, textual proxies per query.
        lam: lambda of the fusion.
        tau: tau_w of the adaptive proxy weights.
        modification_reasoning: run the modification tool (task ``target_caption``).
        refinement: run the semantic refinement (task ``refine``).
        textual_proxies: create the K textual proxies.
        visual_proxy: create the visual proxy (generator).
        objects: detect and filter objects for the textual proxies.
        creator: the whole Creator (false = no visual proxy, objects or textual proxies).
        cross_modal: ``v2t`` (the visual query against gallery captions, bidirectional) or
            ``v2v`` (against gallery images: the Table 3 "vision-to-vision" row).
        visual_without_proxy: without a visual proxy, ``reference`` (``q_v`` = the reference
            embedding) or ``none`` (no vision-to-text term: ``S = S_t2v``).
        verification: run the candidate verification.
        alpha: candidates judged per verified query, in rank order.
        gate: verify the queries whose uncertainty is at least this (0 = every query).
        max_verified: at most this many queries are verified, the most uncertain first (0 = no limit).
        entropy_tau: softmax temperature of the uncertainty's entropy.
        bonus: added to the row's best score for the accepted candidate.
        verify_instruction: what ``verifier.verify`` is asked about: the ``modification``
            (VLM / contrast verifiers) or the ``target`` description (entailment verifier).
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder", "llm", "captioner")
    optional: ClassVar[tuple[str, ...]] = ("generator", "detector", "verifier")
    needs_captions: ClassVar[bool] = True

    @dataclass
    class Config:
        top_k: int = 100
        num_keyframes: int = bounded(8, 1)
        num_proxies: int = bounded(10, 1)
        lam: float = bounded(0.2, 0.0, 1.0)
        tau: float = bounded(0.04, 0, lo_open=True)
        modification_reasoning: bool = True
        refinement: bool = True
        textual_proxies: bool = True
        visual_proxy: bool = True
        objects: bool = True
        creator: bool = True
        cross_modal: CrossModal = CrossModal.v2t
        visual_without_proxy: WithoutProxy = WithoutProxy.reference
        verification: bool = True
        alpha: int = bounded(20, 1)
        gate: float = bounded(0.8, 0.0, 1.0)
        max_verified: int = 1000
        entropy_tau: float = bounded(0.02, 0, lo_open=True)
        bonus: float = 100.0
        verify_instruction: VerifyInstruction = VerifyInstruction.modification

    @classmethod
    def needs_for(cls, config: dict) -> dict[str, tuple[str, ...]]:
        """The LLM tasks the configured stages run (a video reference adds ``summarize_captions``)."""
        import dataclasses

        c = {**dataclasses.asdict(cls.Config()), **config}
        tasks = ["summarize_captions"]
        tasks += ["target_caption"] if c["modification_reasoning"] else []
        tasks += ["refine"] if c["refinement"] else []
        if c["creator"]:
            tasks += ["filter_objects"] if c["objects"] else []
            tasks += ["textual_proxies"] if c["textual_proxies"] else []
        return {"llm": tuple(f"task:{t}" for t in tasks)}

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c, where = self.cfg, "method 'octopus'"
        for name in ("top_k", "num_keyframes", "num_proxies", "alpha"):
            if getattr(c, name) < 1:
                raise InputError(f"{where}: field '{name}' must be at least 1, got {getattr(c, name)}")
        if not 0.0 <= c.lam <= 1.0:
            raise InputError(f"{where}: field 'lam' must be in [0, 1], got {c.lam}")
        if not (c.tau > 0 and c.entropy_tau > 0):
            raise InputError(f"{where}: fields 'tau' and 'entropy_tau' must be > 0, got {c.tau}, {c.entropy_tau}")
        if c.max_verified < 0:
            raise InputError(f"{where}: field 'max_verified' must be >= 0 (0 = no limit), got {c.max_verified}")

    # -- switches ------------------------------------------------------------------------
    @property
    def _visual(self) -> bool:
        return self.cfg.creator and self.cfg.visual_proxy and self.generator is not None

    @property
    def _objects(self) -> bool:
        return self.cfg.creator and self.cfg.objects and self.detector is not None

    @property
    def _proxies(self) -> bool:
        return self.cfg.creator and self.cfg.textual_proxies

    def stages(self) -> list[Stage]:
        out = [Stage("perceive", self._perceive), Stage("create", self._create), Stage("retrieve", self._retrieve)]
        if self.cfg.verification:
            if self.verifier is None:
                raise InputError(
                    "method 'octopus': verification=true needs a verifier (select one, e.g. "
                    "verifier=vlm, or set method.verification=false)"
                )
            out.append(Stage("verify", self._verify))
        return out

    # -- 1. Perceiver ----------------------------------------------------------------------
    async def _perceive(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg

        async def one(q):
            ref, frames = await reference_caption(ctx, state, q, self.captioner, self.llm, c.num_keyframes)
            rec = {"reference_caption": ref, "keyframe_captions": frames if len(frames) > 1 else []}
            if c.modification_reasoning:
                out = await task(ctx, self.llm, "target_caption", reference_caption=ref, modification=q.text)
                rec["initial_target"], rec["modifications"] = out["target_caption"], out["modifications"]
            else:  # no modification tool: the caption and the instruction, concatenated
                rec["initial_target"], rec["modifications"] = f"{ref.rstrip(' .')}, {q.text.strip()}", []
            rec["target_caption"] = rec["initial_target"]
            if c.refinement:
                rec["target_caption"] = (
                    await task(
                        ctx,
                        self.llm,
                        "refine",
                        reference_caption=ref,
                        modification=q.text,
                        target_caption=rec["initial_target"],
                    )
                )["target_caption"]
            return rec

        await ctx.map(state, one)
        state.arrays["reference"] = await reference_embeddings(ctx, state, self.encoder, c.num_keyframes)
        state.arrays["target"] = await embed_texts(
            ctx, self.encoder, [state.record(q, "perceive")["target_caption"] for q in state.queries]
        )
        top = cosine_topk(
            state.arrays["target"],
            state.gallery.image_emb,
            c.top_k,
            exclude=reference_rows(state),
            exclude_score=-10.0,
            backend=ctx.kernels,
        )
        state.candidates = to_candidates(top)

    # -- 2. Creator ------------------------------------------------------------------------
    async def _create(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        gen = self.generator.bind(state.gallery) if self._visual else None

        async def one(q):
            p = state.record(q, "perceive")
            target, ref = p["target_caption"], middle(sample_keyframes(q.reference, c.num_keyframes))
            rec: dict = {"visual_proxy": None, "objects": [], "kept_objects": [], "removed_objects": []}
            if gen is not None:
                out = await ctx.call(gen, "generate", description=target, reference=ref)
                rec["visual_proxy"] = None if out is None else str(out)
            if self._objects:
                images = [ref] + ([Path(rec["visual_proxy"])] if rec["visual_proxy"] else [])
                labels: list[str] = []
                for im in images:
                    labels += [d["label"] for d in await ctx.call(self.detector, "detect", image=im)]
                rec["objects"] = list(dict.fromkeys(labels))
                if rec["objects"]:
                    f = await task(
                        ctx,
                        self.llm,
                        "filter_objects",
                        objects=rec["objects"],
                        modification=q.text,
                        target_caption=target,
                    )
                    rec["kept_objects"], rec["removed_objects"] = f["keep"], f["remove"]
            if self._proxies:
                proxies = (
                    await task(
                        ctx,
                        self.llm,
                        "textual_proxies",
                        reference_caption=p["reference_caption"],
                        modification=q.text,
                        target_caption=target,
                        k=c.num_proxies,
                        objects=rec["kept_objects"],
                    )
                )["proxies"] or [target]
                rec["proxies"] = (proxies + [proxies[-1]] * c.num_proxies)[: c.num_proxies]
            else:
                rec["proxies"] = [target]
            return rec

        await ctx.map(state, one)
        recs = [state.record(q, "create") for q in state.queries]
        K = len(recs[0]["proxies"]) if recs else 1
        state.arrays["proxies"] = (
            await embed_texts(ctx, self.encoder, [t for r in recs for t in r["proxies"]])
        ).reshape(len(recs), K, -1)
        ref = state.arrays["reference"]
        with_proxy = [i for i, r in enumerate(recs) if r["visual_proxy"]]
        visual = ref.copy()
        if with_proxy:
            gen_emb = await image_embeddings(
                ctx, state, self.encoder, [[Path(recs[i]["visual_proxy"])] for i in with_proxy]
            )
            visual[with_proxy] = octopus_visual_query(gen_emb, ref[with_proxy])
        state.arrays["visual"] = visual
        state.arrays["has_visual_proxy"] = np.array([bool(r["visual_proxy"]) for r in recs])
        top = octopus_topk(
            ref,
            state.arrays["proxies"],
            state.arrays["target"],
            state.gallery.image_emb,
            c.top_k,
            tau=c.tau,
            entropy_tau=c.entropy_tau,
            exclude=reference_rows(state),
            exclude_score=-10.0,
            backend=ctx.kernels,
        )
        state.candidates = to_candidates(top)

    # -- 3. Retriever ----------------------------------------------------------------------
    async def _retrieve(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        images = state.gallery.image_emb
        has_proxy = state.arrays["has_visual_proxy"]
        visual, other = state.arrays["visual"], None
        if c.visual_without_proxy == "none" and not has_proxy.all():
            if has_proxy.any():
                raise InputError(
                    "method 'octopus': visual_without_proxy=none needs a visual proxy for every query or "
                    f"for none, but the generator gave one to {int(has_proxy.sum())} of {len(has_proxy)}"
                )
            visual = None
        if visual is not None:
            other = images if c.cross_modal == "v2v" else caption_embeddings(state, self.encoder)
        top = octopus_topk(
            state.arrays["reference"],
            state.arrays["proxies"],
            state.arrays["target"],
            images,
            c.top_k,
            visual=visual,
            captions=other,
            lam=c.lam,
            tau=c.tau,
            entropy_tau=c.entropy_tau,
            exclude=reference_rows(state),
            exclude_score=-10.0,
            backend=ctx.kernels,
        )
        state.arrays["proxy_weights"] = np.asarray(top.weights, np.float32)
        state.arrays["entropy"] = np.asarray(top.entropy, np.float32)
        state.candidates = to_candidates(top)

    # -- 4. verification -------------------------------------------------------------------
    def gate_queries(
        self, scores: np.ndarray, entropy: np.ndarray, backend: str = "auto"
    ) -> tuple[np.ndarray, np.ndarray]:
        """The uncertainty of every query and the indices of the queries to verify (most uncertain first)."""
        c = self.cfg
        u = np.asarray(uncertainty(scores, tau=c.entropy_tau, entropy=entropy, backend=backend), np.float32)
        if len(u) == 1:
            # min-max over one query says nothing (the released formula gives 0: never verified);
            # a single search (agentcir search / serve) counts as uncertain, so it is verified
            u = np.ones(1, np.float32)
        chosen = np.flatnonzero(u >= c.gate)
        chosen = chosen[np.argsort(-u[chosen], kind="stable")]
        if c.max_verified:
            chosen = chosen[: c.max_verified]
        return u, chosen

    async def _verify(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        cands = state.candidates
        u, chosen = self.gate_queries(cands.scores, state.arrays["entropy"], ctx.kernels)
        refs = reference_rows(state)
        state.arrays["uncertainty"] = u
        pos = {state.queries[i].id: i for i in chosen}

        async def one(q):
            qi = pos[q.id]
            p = state.record(q, "perceive")
            instruction = q.text if c.verify_instruction == "modification" else p["target_caption"]
            verdicts = await first_accepted(
                ctx,
                self.verifier,
                state,
                cands.ids[qi],
                c.alpha,
                skip=int(refs[qi]),
                instruction=instruction,
                reference=middle(sample_keyframes(q.reference, c.num_keyframes)),
                reference_caption=p["reference_caption"],
            )
            return {
                "uncertainty": float(u[qi]),
                "verdicts": verdicts,
                "accepted": (len(verdicts) - 1) if verdicts and verdicts[-1] else None,
            }

        await ctx.map(state, one, [state.queries[i] for i in chosen])
        verdicts = [state.record(q, "verify").get("verdicts", []) if q.id in pos else [] for q in state.queries]
        top = promote_first_accepted(
            cands.ids,
            cands.scores,
            accepted_matrix(verdicts, min(c.alpha, cands.k)),
            bonus=c.bonus,
            backend=ctx.kernels,
        )
        state.candidates = to_candidates(top)
