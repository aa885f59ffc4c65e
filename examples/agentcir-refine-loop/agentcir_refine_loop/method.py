"""The refine_loop method: plan -> (retrieve -> critique -> refine) x rounds -> rank.

Stages (each ``async fn(ctx, state)``; per-query work goes through ``ctx.map``, so a killed run
resumes at the query it stopped at, and every model call goes through ``ctx.call``, so nothing
finished is asked twice):

1. ``plan``: caption the reference (the gallery's caption when it is a gallery image), then the
   LLM writes a target description (task ``refine_loop_plan``).
2. ``refine``: up to ``rounds`` times: embed the description, retrieve the top ``inspect``
   gallery images (the reference excluded), show their captions to the LLM (task
   ``refine_loop_critique``); it accepts the description or gives a better one.
3. ``retrieve``: rank the gallery by the final descriptions (``top_k``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from agentcir.method_kit import (
    METHODS,
    InputError,
    Method,
    Stage,
    embed_texts,
    gallery_captions,
    rank,
    reference_caption,
    run_task,
)

from . import tasks  # noqa: F401  (registers the method's LLM tasks)


@METHODS.register("refine_loop")
class RefineLoop(Method):
    """Plan a target description, then let the LLM critique what it retrieves and refine it.

    Config:
        top_k: ranking depth.
        rounds: critique/refine rounds at most (a query stops at its first accept).
        inspect: candidates whose captions the critique reads.
        num_keyframes: keyframes captioned for a video reference.
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder", "llm", "captioner")
    needs_captions: ClassVar[bool] = True  # the critique reads the candidates' captions
    needs: ClassVar[dict[str, tuple[str, ...]]] = {
        "llm": ("task:refine_loop_plan", "task:refine_loop_critique", "task:summarize_captions")
    }

    @dataclass
    class Config:
        top_k: int = 50
        rounds: int = 3
        inspect: int = 3
        num_keyframes: int = 8

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        for name in ("top_k", "rounds", "inspect", "num_keyframes"):
            if getattr(self.cfg, name) < 1:
                raise InputError(
                    f"method 'refine_loop': field '{name}' must be at least 1, got {getattr(self.cfg, name)}"
                )

    def stages(self) -> list[Stage]:
        return [Stage("plan", self.plan), Stage("refine", self.refine), Stage("retrieve", self.retrieve)]

    async def plan(self, ctx, state) -> None:
        async def one(q):
            ref, _ = await reference_caption(ctx, state, q, self.captioner, self.llm, self.cfg.num_keyframes)
            out = await run_task(ctx, self.llm, "refine_loop_plan", reference_caption=ref, modification=q.text)
            return {"reference_caption": ref, "description": out["description"], "keep": out["keep"]}

        await ctx.map(state, one)

    async def refine(self, ctx, state) -> None:
        captions = gallery_captions(state)

        async def one(q):
            description = state.record(q, "plan")["description"]
            rounds = []
            for _ in range(self.cfg.rounds):
                emb = await embed_texts(ctx, self.encoder, [description])
                top = rank(ctx, state, emb, self.cfg.inspect, of=[q])
                shown = [captions[r] for r in top.row(0)]
                out = await run_task(
                    ctx,
                    self.llm,
                    "refine_loop_critique",
                    modification=q.text,
                    description=description,
                    candidates=shown,
                )
                rounds.append({"description": description, "shown": shown, "verdict": out["verdict"]})
                if out["verdict"].strip().lower() == "accept" or not out["description"]:
                    break
                description = out["description"]
            return {"description": description, "rounds": rounds}

        await ctx.map(state, one)

    async def retrieve(self, ctx, state) -> None:
        texts = [state.record(q, "refine")["description"] for q in state.queries]
        state.candidates = rank(ctx, state, await embed_texts(ctx, self.encoder, texts), self.top_k)
