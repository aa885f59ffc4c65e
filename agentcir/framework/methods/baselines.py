"""The baselines the agentic methods are compared with.

- ``image_only``, ``text_only``, ``image_text_sum``: embedding baselines (the reference image,
  the modification text, or their normalised weighted sum, against gallery images);
- ``cirevl``: CIReVL-style (Karthik et al., ICLR 2024, "Vision-by-Language for Training-Free
  Compositional Image Retrieval"): caption the reference, let an LLM write the target's
  caption, retrieve with that text;
- ``ldre``: LDRE-style (Yang et al., SIGIR 2024, "LDRE: LLM-based Divergent Reasoning and
  Ensemble for Zero-Shot Composed Image Retrieval"): several divergent target captions from
  an LLM, combined by LDRE's adaptive ensemble (see :class:`LDRE`).

All of them score through the shared kernels (``agentcir.kernels``, ``backend=ctx.kernels``)
and remove the reference item from the ranking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...kernels import cosine_topk, ldre_weights
from ...registry import METHODS, Choice
from ...registry.config import bounded
from ..errors import InputError
from ..interfaces import l2_normalize
from ..method import Method, RunState, Stage
from ..runner import RunContext
from .common import embed_texts, reference_caption, reference_embeddings, reference_rows, task, to_candidates

__all__ = ["ImageOnly", "TextOnly", "ImageTextSum", "CIReVL", "LDRE", "reference_embeddings", "reference_rows"]


def _retrieve(ctx: RunContext, state: RunState, queries: np.ndarray, k: int) -> None:
    """Rank the gallery images by inner product with ``queries`` (reference removed)."""
    top = cosine_topk(
        np.ascontiguousarray(queries, np.float32),
        state.gallery.image_emb,
        k,
        exclude=reference_rows(state),
        backend=ctx.kernels,
    )
    state.candidates = to_candidates(top)


class _Embedding(Method):
    requires: ClassVar[tuple[str, ...]] = ("encoder",)
    use_image: ClassVar[bool] = True
    use_text: ClassVar[bool] = True

    @dataclass
    class Config:
        top_k: int = 50
        image_weight: float = bounded(0.5, 0.0, 1.0)

    def stages(self) -> list[Stage]:
        return [Stage("embed", self._embed), Stage("retrieve", self._retrieve)]

    async def _embed(self, ctx: RunContext, state: RunState) -> None:
        if self.use_image:
            state.arrays["ref_emb"] = await reference_embeddings(ctx, state, self.encoder)
        if self.use_text:
            state.arrays["text_emb"] = await embed_texts(ctx, self.encoder, [q.text for q in state.queries])

    async def _retrieve(self, ctx: RunContext, state: RunState) -> None:
        w = self.cfg.image_weight if (self.use_image and self.use_text) else (1.0 if self.use_image else 0.0)
        q = np.zeros((len(state.queries), state.gallery.dim), np.float32)
        if self.use_image:
            q += w * state.arrays["ref_emb"]
        if self.use_text:
            q += (1 - w) * state.arrays["text_emb"]
        _retrieve(ctx, state, l2_normalize(q), self.top_k)


@METHODS.register("image_only")
class ImageOnly(_Embedding):
    """Baseline: rank by similarity to the reference image alone."""

    use_text = False


@METHODS.register("text_only")
class TextOnly(_Embedding):
    """Baseline: rank by similarity to the modification text alone."""

    use_image = False
    needs_reference = False


@METHODS.register("image_text_sum")
class ImageTextSum(_Embedding):
    """Baseline: rank by the normalised weighted sum of reference-image and text embeddings."""


class _Captioned(Method):
    """A baseline that captions the reference and asks the LLM for the target."""

    requires: ClassVar[tuple[str, ...]] = ("encoder", "llm", "captioner")

    async def _caption(self, ctx: RunContext, state: RunState, q) -> str:
        return (await reference_caption(ctx, state, q, self.captioner, self.llm, self.cfg.num_keyframes))[0]


@METHODS.register("cirevl")
class CIReVL(_Captioned):
    """CIReVL-style baseline (Karthik et al., ICLR 2024): reference caption -> LLM target
    caption (task ``target_caption``) -> text-to-image retrieval with that caption.

    Stages: ``reason`` (per query: reference caption, target caption) and ``retrieve``.

    Config:
        top_k: ranking depth.
        num_keyframes: keyframes captioned for a video reference (uniformly sampled).
    """

    needs: ClassVar[dict[str, tuple[str, ...]]] = {"llm": ("task:target_caption", "task:summarize_captions")}

    @dataclass
    class Config:
        top_k: int = 100
        num_keyframes: int = bounded(8, 1)

    def stages(self) -> list[Stage]:
        return [Stage("reason", self._reason), Stage("retrieve", self._rank)]

    async def _reason(self, ctx: RunContext, state: RunState) -> None:
        async def one(q):
            ref = await self._caption(ctx, state, q)
            out = await task(ctx, self.llm, "target_caption", reference_caption=ref, modification=q.text)
            return {
                "reference_caption": ref,
                "target_caption": out["target_caption"],
                "modifications": out["modifications"],
            }

        await ctx.map(state, one)

    async def _rank(self, ctx: RunContext, state: RunState) -> None:
        texts = [state.record(q, "reason")["target_caption"] for q in state.queries]
        _retrieve(ctx, state, await embed_texts(ctx, self.encoder, texts), self.top_k)


class Ensemble(Choice):
    """How LDRE combines its captions' rankings (``method.ensemble``)."""

    adaptive = "adaptive"
    mean = "mean"


@METHODS.register("ldre")
class LDRE(_Captioned):
    """LDRE-style baseline (Yang et al., SIGIR 2024): divergent target captions, adaptive ensemble.

    LDRE captions the reference several times (BLIP-2 with nucleus sampling: "dense
    captions"), has an LLM edit each into a target caption ("divergent reasoning"), and
    retrieves with a weighted sum of the edited captions' text features. The released code
    (``src/divergent_caption_ensemble.py``, ``use_adaptive_ensemble``) weights edited caption
    ``i`` by how far it moves away from its reference caption ``b_i``:
    ``s_i = sum of the top-m of relu(b_i.I - e_i.I)`` over the gallery (``adaptive_topk`` m = 5),
    ``w = softmax(s / max_i s / T)`` (``adaptive_temperature`` T = 0.04), query ``sum_i w_i e_i``.

    Here the captioner is deterministic, so there is one reference caption ``b`` and the
    divergence comes from the LLM (task ``divergent_captions``, ``num_captions`` of them).
    The weights are computed per query (kernel :func:`agentcir.kernels.ldre_weights`). The
    released code sums ``s_i`` over *all queries of the batch* before the softmax (one weight
    per caption position shared by every query, so a query's ranking depends on the other
    queries); with one LLM call per query the i-th caption of two queries have nothing in
    common, so that is not reproduced. ``ensemble: mean`` is the released code's plain
    ``multi_caption`` average (no weights).

    Stages: ``reason`` (per query: reference caption, divergent captions) and ``ensemble``.

    Config:
        top_k: ranking depth.
        num_captions: divergent target captions per query (LDRE: 15).
        ensemble: ``adaptive`` (LDRE's weights) or ``mean``.
        adaptive_topk: m, the largest similarity drops summed per caption.
        temperature: T of the weights' softmax.
        num_keyframes: keyframes captioned for a video reference.
    """

    needs: ClassVar[dict[str, tuple[str, ...]]] = {"llm": ("task:divergent_captions", "task:summarize_captions")}

    @dataclass
    class Config:
        top_k: int = 100
        num_captions: int = bounded(15, 1)
        ensemble: Ensemble = Ensemble.adaptive
        adaptive_topk: int = bounded(5, 1)
        temperature: float = bounded(0.04, 0, lo_open=True)
        num_keyframes: int = bounded(8, 1)

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c = self.cfg
        if c.num_captions < 1 or c.adaptive_topk < 1 or not c.temperature > 0:
            raise InputError(
                f"method 'ldre': num_captions and adaptive_topk must be >= 1 and temperature > 0, got "
                f"{c.num_captions}, {c.adaptive_topk}, {c.temperature}"
            )

    def stages(self) -> list[Stage]:
        return [Stage("reason", self._reason), Stage("ensemble", self._ensemble)]

    async def _reason(self, ctx: RunContext, state: RunState) -> None:
        async def one(q):
            ref = await self._caption(ctx, state, q)
            caps = (
                await task(
                    ctx,
                    self.llm,
                    "divergent_captions",
                    reference_caption=ref,
                    modification=q.text,
                    n=self.cfg.num_captions,
                )
            )["captions"]
            if not caps:
                raise InputError(f"query '{q.id}': the LLM gave no divergent captions")
            caps = (caps + [caps[-1]] * self.cfg.num_captions)[: self.cfg.num_captions]  # pad by repeating the last
            return {"reference_caption": ref, "captions": caps}

        await ctx.map(state, one)

    async def _ensemble(self, ctx: RunContext, state: RunState) -> None:
        Q, n = len(state.queries), self.cfg.num_captions
        recs = [state.record(q, "reason") for q in state.queries]
        emb = await embed_texts(
            ctx, self.encoder, [r["reference_caption"] for r in recs] + [c for r in recs for c in r["captions"]]
        )
        before, edited = emb[:Q], emb[Q:].reshape(Q, n, -1)
        if self.cfg.ensemble == "adaptive":
            w = np.asarray(
                ldre_weights(
                    before,
                    edited,
                    state.gallery.image_emb,
                    topk=self.cfg.adaptive_topk,
                    tau=self.cfg.temperature,
                    backend=ctx.kernels,
                ),
                np.float32,
            )
        else:
            w = np.full((Q, n), 1.0 / n, np.float32)
        state.arrays["ldre_weights"] = w
        _retrieve(ctx, state, np.einsum("qk,qkd->qd", w, edited), self.top_k)
