"""What the composed-retrieval methods share.

- the reference of each query: its gallery row, its embedding, its caption (a video's
  caption is summarised from its uniformly sampled keyframes);
- text and image embeddings through the call cache (one encoder call per batch);
- kernel results (:class:`agentcir.kernels.TopK`) as :class:`~agentcir.framework.types.Candidates`;
- LLM task calls whose replies are parsed as the task table promises;
- the sequential yes/no verification pass of OCTOPUS and XR (candidates judged in rank
  order, stopping at the first accepted one).
"""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...registry import Choice
from ..errors import InputError
from ..interfaces import l2_normalize
from ..method import RunState
from ..runner import RunContext
from ..types import Candidates, Query


class VerifyInstruction(Choice):
    """How the instruction given to ``verifier.verify`` is chosen (``method.verify_instruction``):
    the query's ``modification`` text, or the ``target`` description the method composed."""

    modification = "modification"
    target = "target"


VERIFY_INSTRUCTIONS = VerifyInstruction.values()


def reference_rows(state: RunState) -> np.ndarray:
    """Gallery row of each query's reference item, -1 when it is not in the gallery."""
    g = state.gallery
    return np.array([g.index_of(q.reference_id) if q.reference_id else -1 for q in state.queries], np.int32)


def sample_keyframes(paths: Sequence[str | Path], n: int) -> list[Path]:
    """``n`` keyframes uniformly spread over ``paths`` (all of them when there are at most ``n``);
    a single image is itself."""
    paths = [Path(p) for p in paths]
    if n < 1:
        raise InputError(f"num_keyframes must be at least 1, got {n}")
    if len(paths) <= n:
        return paths
    idx = np.round(np.linspace(0, len(paths) - 1, n)).astype(int)
    return [paths[i] for i in idx]


def middle(paths: Sequence[Path]) -> Path:
    """The middle keyframe (the image itself for a single image)."""
    return paths[(len(paths) - 1) // 2]


def check_reference(q: Query) -> None:
    """Raise an :class:`InputError` naming ``q`` when it has no reference image."""
    if not q.reference:
        raise InputError(
            f"query '{q.id}' has no reference image: composed retrieval needs one (an image, or a video's keyframes)"
        )


_PATH_ROWS: "weakref.WeakKeyDictionary[Any, dict[str, int]]" = weakref.WeakKeyDictionary()


def _path_rows(state: RunState) -> dict[str, int]:
    """Resolved image path -> gallery row (built once per opened gallery)."""
    g = state.gallery
    rows = _PATH_ROWS.get(g)
    if rows is None:
        rows = _PATH_ROWS[g] = {str(Path(p).resolve()): i for i, p in enumerate(g.paths)}
    return rows


async def image_embeddings(ctx: RunContext, state: RunState, encoder, groups: Sequence[Sequence[Path]]) -> np.ndarray:
    """``[len(groups), d]``: the normalised mean embedding of each group of images (one image,
    or a video's keyframes). Gallery images are read from the gallery; the others are
    encoded in one cached encoder call. An empty group gives a zero row."""
    g = state.gallery
    rows = _path_rows(state)
    out = np.zeros((len(groups), g.dim), np.float32)
    todo: list[Path] = []
    for grp in groups:
        todo += [Path(p) for p in grp if str(Path(p).resolve()) not in rows]
    todo = list(dict.fromkeys(todo))
    enc: dict[Path, np.ndarray] = {}
    if todo:
        emb = await ctx.call(encoder, "encode_images", images=todo)
        if len(emb) != len(todo):
            raise InputError(
                f"{len(todo) - len(emb)} image(s) could not be decoded (first of them: "
                f"'{todo[0]}'); see the log for which"
            )
        enc = dict(zip(todo, emb))
    img = g.image_emb
    for i, grp in enumerate(groups):
        if not grp:
            continue
        vecs = [
            np.asarray(img[rows[str(Path(p).resolve())]], np.float32)
            if str(Path(p).resolve()) in rows
            else enc[Path(p)]
            for p in grp
        ]
        out[i] = l2_normalize(np.mean(vecs, axis=0))
    return out


async def reference_embeddings(ctx: RunContext, state: RunState, encoder, num_keyframes: int = 0) -> np.ndarray:
    """``[Q, d]`` embedding of each query's reference (a gallery row when the reference is a
    gallery image; the normalised mean over the keyframes for a video, ``num_keyframes``
    uniformly sampled when positive, else all)."""
    groups = []
    for q in state.queries:
        check_reference(q)
        groups.append(sample_keyframes(q.reference, num_keyframes) if num_keyframes > 0 else q.reference_paths)
    return await image_embeddings(ctx, state, encoder, groups)


async def embed_texts(ctx: RunContext, encoder, texts: Sequence[str]) -> np.ndarray:
    """``[len(texts), d]`` embeddings: one cached encoder call over the distinct texts."""
    texts = [str(t) for t in texts]
    uniq = list(dict.fromkeys(texts))
    if not uniq:
        return np.zeros((0, int(getattr(encoder, "dim", 0))), np.float32)
    emb = np.asarray(await ctx.call(encoder, "encode_texts", texts=uniq), np.float32)
    pos = {t: i for i, t in enumerate(uniq)}
    return emb[[pos[t] for t in texts]]


async def task(ctx: RunContext, llm, name: str, **variables: Any) -> Any:
    """Run LLM task ``name`` through the cache and parse its reply as the task table promises."""
    from ..parsing import parse_task_reply

    reply = await ctx.call(llm, "run_task", task=name, variables=variables)
    return parse_task_reply(name, reply, variables)


async def reference_caption(
    ctx: RunContext, state: RunState, q: Query, captioner, llm, num_keyframes: int
) -> tuple[str, list[str]]:
    """The reference's caption and the keyframe captions it was made from.

    A reference that is a gallery image takes the gallery's caption when the run has
    gallery captions (the same captions the candidates are described by); otherwise the
    captioner captions it. A video's ``num_keyframes`` uniformly sampled keyframes are
    captioned one by one and summarised by the LLM (task ``summarize_captions``) unless
    they all agree.
    """
    check_reference(q)
    frames = sample_keyframes(q.reference, num_keyframes)
    if len(frames) == 1 and state.captions_key is not None:
        row = _path_rows(state).get(str(frames[0].resolve()), -1)
        caps = state.gallery.captions(state.captions_key)
        if row >= 0 and caps is not None:
            return caps[row], [caps[row]]
    if captioner is None:
        raise InputError(f"query '{q.id}': the reference must be captioned, but the recipe selects no captioner")
    caps = [await ctx.call(captioner, "caption", image=p) for p in frames]
    if len(set(caps)) == 1:
        return caps[0], caps
    return (await task(ctx, llm, "summarize_captions", captions=caps))["caption"], caps


def gallery_captions(state: RunState) -> list[str] | None:
    """The run's gallery captions (``None`` when the method has none)."""
    return None if state.captions_key is None else state.gallery.captions(state.captions_key)


def caption_embeddings(state: RunState, encoder) -> np.ndarray:
    """``[N, d]`` embeddings of the run's gallery captions (computed once per gallery and encoder)."""
    if state.captions_key is None:
        raise InputError("this method needs gallery captions, but the run has none")
    return state.gallery.caption_emb(state.captions_key, encoder)


def to_candidates(topk) -> Candidates:
    """A kernel :class:`~agentcir.kernels.TopK` as :class:`Candidates` (``-1`` ids = padding)."""
    ids = np.asarray(topk.ids, np.int32)
    scores = np.asarray(topk.scores, np.float32)
    return Candidates(ids, np.where(ids >= 0, scores, -np.inf).astype(np.float32))


async def first_accepted(
    ctx: RunContext,
    verifier,
    state: RunState,
    row_ids: Sequence[int],
    alpha: int,
    *,
    instruction: str,
    reference: Path | None,
    reference_caption: str | None,
    skip: int = -1,
) -> list[bool]:
    """Judge the first ``alpha`` candidates of ``row_ids`` in rank order with ``verifier.verify``,
    stopping at the first accepted one. Returns one verdict per rank judged (the last is the
    only True, if any); the gallery row ``skip`` (the reference item) is never accepted nor asked about."""
    g = state.gallery
    caps = gallery_captions(state)
    verdicts: list[bool] = []
    for row in [int(r) for r in row_ids if r >= 0][:alpha]:
        if row == skip:
            verdicts.append(False)
            continue
        ok = await ctx.call(
            verifier,
            "verify",
            candidate=g.path_of(row),
            instruction=instruction,
            reference=reference,
            caption=None if caps is None else caps[row],
            reference_caption=reference_caption,
        )
        verdicts.append(bool(ok))
        if ok:
            break
    return verdicts


def accepted_matrix(verdicts: Sequence[Sequence[bool]], width: int) -> np.ndarray:
    """``bool [Q, width]`` of per-query verdict lists (judged in rank order; missing = not accepted)."""
    out = np.zeros((len(verdicts), max(1, width)), bool)
    for i, v in enumerate(verdicts):
        v = list(v)[: out.shape[1]]
        out[i, : len(v)] = v
    return out


async def gather_limited(coros, limit: int) -> list[Any]:
    """``asyncio.gather`` of ``coros`` with at most ``limit`` running at once."""
    sem = asyncio.Semaphore(max(1, limit))

    async def one(c):
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))
