"""Everything a retrieval method needs, in one public module (``docs/writing-a-method.md``).

A method is a registered :class:`Method` whose :meth:`~Method.stages` are ``async fn(ctx, state)``
functions; they call models only through ``ctx.call`` (cached, resumable) and per query through
``ctx.map`` (recorded, skipped on resume). This module gathers the types a method is written
with and the helpers the built-in methods share, so a plugin imports one module::

    from agentcir.method_kit import (Method, Stage, METHODS, embed_texts, rank, reference_caption,
                                     run_task)

    @METHODS.register("caption_edit")
    class CaptionEdit(Method):
        requires = ("encoder", "llm", "captioner")
        needs = {"llm": ("task:target_caption",)}

        @dataclass
        class Config:
            top_k: int = 50

        def stages(self):
            return [Stage("reason", self.reason), Stage("retrieve", self.retrieve)]

        async def reason(self, ctx, state):
            async def one(q):
                ref, _ = await reference_caption(ctx, state, q, self.captioner, self.llm, num_keyframes=8)
                out = await run_task(ctx, self.llm, "target_caption", reference_caption=ref, modification=q.text)
                return {"target": out["target_caption"]}

            await ctx.map(state, one)

        async def retrieve(self, ctx, state):
            emb = await embed_texts(ctx, self.encoder, [state.record(q, "reason")["target"] for q in state.queries])
            state.candidates = rank(ctx, state, emb, self.top_k)

The helpers (all cached through ``ctx.call``, so a rerun makes no model call twice):

- :func:`reference_caption` — a query's reference caption (the gallery's caption when the
  reference is a gallery image, else the captioner's; a video's keyframes are captioned and
  summarised by the LLM);
- :func:`reference_embeddings` / :func:`image_embeddings` — reference and image embeddings
  (gallery rows are read, not re-encoded);
- :func:`embed_texts` — text embeddings in one encoder call over the distinct texts;
- :func:`reference_rows` — each query's reference row in the gallery (``-1``: not in it), to
  exclude the reference from a ranking;
- :func:`rank` — the top-k gallery images (or captions) of query embeddings, reference
  excluded, as :class:`Candidates`;
- :func:`to_candidates` — a kernel :class:`agentcir.kernels.TopK` as :class:`Candidates`;
- :func:`run_task` — an LLM task through the cache, its reply parsed as the task declares;
- :func:`gallery_captions` / :func:`caption_embeddings` — the run's gallery captions (methods
  with ``needs_captions = True``) and their embeddings;
- :func:`first_accepted` / :func:`accepted_matrix` — the sequential yes/no verification pass;
- :func:`gather_limited`, :func:`sample_keyframes`, :func:`check_reference`.

Tasks and prompts: :func:`register_task`, :func:`register_replier`, :func:`load_prompt`,
:func:`add_prompt_dir` (:mod:`agentcir.framework.tasks`, :mod:`agentcir.framework.prompts`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .framework.errors import InputError
from .framework.interfaces import ChatReply, ToolCall, assistant_message, l2_normalize, tool_message, user_message
from .framework.method import Method
from .framework.methods.common import (
    accepted_matrix,
    caption_embeddings,
    check_reference,
    embed_texts,
    first_accepted,
    gallery_captions,
    gather_limited,
    image_embeddings,
    reference_caption,
    reference_embeddings,
    reference_rows,
    sample_keyframes,
    to_candidates,
)
from .framework.methods.common import task as run_task
from .framework.prompts import Prompt, add_prompt_dir, load_prompt
from .framework.runner import RunContext
from .framework.state import RunState, Stage, StageContext
from .framework.tasks import register_replier, register_task
from .framework.types import Candidates, Query
from .registry import METHODS

__all__ = [
    # the contract
    "Method",
    "Stage",
    "StageContext",
    "RunContext",
    "RunState",
    "Query",
    "Candidates",
    "METHODS",
    "InputError",
    # chat
    "ChatReply",
    "ToolCall",
    "user_message",
    "assistant_message",
    "tool_message",
    # tasks and prompts
    "register_task",
    "register_replier",
    "run_task",
    "load_prompt",
    "add_prompt_dir",
    "Prompt",
    # helpers
    "reference_caption",
    "reference_embeddings",
    "image_embeddings",
    "embed_texts",
    "reference_rows",
    "rank",
    "to_candidates",
    "gallery_captions",
    "caption_embeddings",
    "first_accepted",
    "accepted_matrix",
    "gather_limited",
    "sample_keyframes",
    "check_reference",
    "l2_normalize",
]


def rank(
    ctx: Any,
    state: RunState,
    queries: np.ndarray,
    k: int,
    *,
    exclude_reference: bool = True,
    against: str = "images",
    encoder: Any = None,
    of: Sequence[Query] | None = None,
) -> Candidates:
    """The top ``k`` gallery rows of each query embedding by inner product, as :class:`Candidates`.

    Args:
        ctx: the stage's context (its kernel backend is used).
        state: the run state (its gallery and queries).
        queries: ``[Q, d]`` L2-normalised query embeddings, one row per query of ``state.queries``
            (or of ``of``).
        k: ranking depth (beyond the gallery size the rows are padded with id ``-1``).
        exclude_reference: leave each query's reference item out of its ranking (the convention of
            every method here: the reference is never the answer).
        against: ``images`` (the gallery's image embeddings) or ``captions`` (the embeddings of the
            run's gallery captions, by ``encoder``; the method must set ``needs_captions = True``).
        encoder: the encoder of the caption embeddings (``against="captions"`` only).
        of: the queries the rows belong to, when not all of ``state.queries`` (e.g. ``[q]`` inside
            a per-query ``ctx.map`` function).

    Returns:
        ``Candidates`` with ids ``int32 [Q, k]`` (``-1`` = padding) and scores ``float32 [Q, k]``.
    """
    from .kernels import cosine_topk

    batch = list(state.queries if of is None else of)
    q = np.ascontiguousarray(queries, np.float32)
    if q.ndim != 2 or q.shape[0] != len(batch):
        raise InputError(f"rank: queries must be [{len(batch)}, d] (one row per query), got {list(q.shape)}")
    if against == "images":
        gallery = state.gallery.image_emb
    elif against == "captions":
        if encoder is None:
            raise InputError("rank(against='captions') needs the encoder of the caption embeddings (encoder=...)")
        gallery = caption_embeddings(state, encoder)
    else:
        raise InputError(f"rank: against must be 'images' or 'captions', got {against!r}")
    if q.shape[1] != state.gallery.dim:
        raise InputError(f"rank: query dimension {q.shape[1]} differs from the gallery's {state.gallery.dim}")
    if int(k) < 1:
        raise InputError(f"rank: k must be at least 1, got {k}")
    exclude = None
    if exclude_reference:
        g = state.gallery
        exclude = np.array([g.index_of(x.reference_id) if x.reference_id else -1 for x in batch], np.int32)
    return to_candidates(cosine_topk(q, gallery, int(k), exclude=exclude, backend=ctx.kernels))
