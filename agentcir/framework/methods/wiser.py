"""``method=wiser``: WISER (CVPR 2026), wider search -> adaptive fusion -> deeper thinking (code:
Physicsmile/WISER ``src/utils.py`` ``generate_editimg_caption_iteration``, ``get_pseudo_targets``,
``LLM_remodify_editimg_caption``, ``extract_suggestions``; ``src/compute_results.py``
``*_fuse2paths``; ``src/check_prompt.py``; ``src/get_pseudo_targets.py``). Exact to the released
code for every part that is code, except where :data:`DEVIATIONS` says.

Stages (each leaves a snapshot, so the report shows the fused ranking after every round):

1. ``round0``, per query: the reference caption (gallery caption, else the captioner's); the
   caption editor (LLM task ``wiser_describe``, prompt ``describe_prompt``: the structural
   modifier prompt, then ``Image Content: <caption>`` and ``Instruction: <modification>`` on their
   own lines) writes the target description, read by
   :func:`~agentcir.framework.methods.autocir.edited_description` (the first ``Edited
   Description:`` line; none or empty: the modification itself); the image editor edits the
   reference image by the modification (``ctx.call(editor, "edit", ...)``; with no editor in the
   recipe the reference image stands for the edit). Two retrieval paths: the description's text
   embedding (t2i) and the edited image's embedding (i2i) against the gallery images, inner
   product of normalised vectors, the top ``top_n`` (50, the released ``[:, :50]``) of each. The
   verifier (LLM task ``wiser_verify`` with the reference and the candidate image) gives every
   candidate of both paths a confidence that it is the reference changed as asked
   (:func:`vqa_confidence`); a path whose best confidence is above ``threshold`` (0.7, released
   ``confidence > threshold``) is settled and not refined again.
2. ``round1`` ... ``round<max_check_num>`` (released: 1): per query and path still open, the
   pseudo target (the path's candidate of highest confidence, the first of equal ones) is described
   by its gallery caption and the refiner (task ``wiser_check_t2i`` / ``wiser_check_i2i``) checks
   it against the request: the stop phrase ``Good retrieval, no more loops needed`` or a
   ``Suggestion:`` line (:func:`extract_suggestions`; none: the whole reply). A path that needs
   refining (open, no stop phrase, non-empty suggestion) gets the instruction
   ``"<modification stripped of '.?, '> and <suggestion stripped of '.?,\\"\\' '>."``
   (:func:`combined_instruction`): the caption editor rewrites the description (task
   ``wiser_redescribe``: ``Image Content: <caption>.`` / ``Instruction: <instruction>.``; none:
   the last description) and the image editor edits the *reference* image again with it; a path
   that does not keeps its last description / edited image and is closed. Both paths are then
   retrieved and verified again.

The ranking of every round is the released multi-level fusion (:func:`fuse_two_paths`): the union
of both paths' candidates, ordered by the sum of the two confidences (0 where a path lacks the
candidate), then the larger one, then the t2i one, then the gallery id (the released ``x[0]``, the
image name). The ranking holds only that union (at most ``2 * top_n`` items), as released. The
released code fuses, after the loop, the candidates it verified at the *start* of the last round (the
verification after the last re-retrieval updates the pseudo targets but not the lists it fuses), so
with ``max_check_num`` 1 its final ranking is round 0's; ``upstream_compat=true`` does the same (the
last stage's ranking is the previous round's fusion); by default each round ranks by its own
verification.

Reply reading: correct by default; ``upstream_compat=true`` reads replies as released: an
``Edited Description:`` line keeps only the text up to the next colon; the suggestion is found on a
line holding ``suggestion:`` / ``Suggestion:`` and the lines after it are glued with no separator;
the stop phrase is matched case-sensitively. The correct reading: the text after the first colon;
``suggestion``/``suggestions`` matched case-insensitively, lines joined by newlines; the stop phrase
case-insensitive.

Prompts: the project's own files (``tasks/wiser_describe``, ``tasks/wiser_redescribe``,
``tasks/wiser_check_t2i``, ``tasks/wiser_check_i2i``, ``tasks/wiser_verify``) follow the released
structure and reply formats. ``prompts=DIR`` reads ``describe.txt``, ``redescribe.txt``,
``check_t2i.txt``, ``check_i2i.txt`` and ``verify.txt`` from ``DIR`` instead (the authors' wording,
written with this project's ``{{placeholders}}``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from ...registry import METHODS
from ..errors import InputError
from ..method import Method, RunState, Stage
from ..runner import RunContext
from ..tasks import register_task
from ..types import Candidates
from .autocir import edited_description, resolve_prompt_folder
from .common import embed_texts, gallery_captions, image_embeddings, reference_caption, reference_rows

STOP_PHRASE = "Good retrieval, no more loops needed"
#: the prompt files ``prompts=DIR`` reads, per config field
PROMPT_FILES = {
    "describe_prompt": "describe.txt",
    "redescribe_prompt": "redescribe.txt",
    "check_t2i_prompt": "check_t2i.txt",
    "check_i2i_prompt": "check_i2i.txt",
    "verify_prompt": "verify.txt",
}
#: what this implementation does differently from the released code, and why (docs/upstream.md)
DEVIATIONS = (
    "confidence: the released verifier reads P(yes) from the VLM's logits (local Qwen2.5-VL) or from the "
    "API's top log-probabilities; the project's LLM interface returns text, so the confidence is read "
    "from the reply (a probability, or yes/Y = 1, no/N = 0; vqa_confidence): with hard verdicts ties are "
    "common and the fusion's tie-breaks decide more of the order",
    "models: one recipe llm plays the caption editor (released: BAGEL), the refiner (GPT-4o) and the "
    "verifier (Qwen2.5-VL); select a VLM that reads images",
    "ties among equal similarities in each path's top-n go to the lower gallery row (released: "
    "torch argsort, unstable among exact ties)",
    "exclude_reference (default true) removes the reference item from both paths' candidates",
)


# -- the released pure functions ---------------------------------------------------------------------
def extract_suggestions(reply: str, *, upstream_compat: bool = False) -> str:
    """The refiner's suggestion: after ``uggestion:`` on the first line that holds it, and every
    following line. Released (``upstream_compat``): ``suggestion:`` / ``Suggestion:`` only, the lines
    glued with no separator. Correct: ``suggestion`` or ``suggestions`` in any case, a leading colon
    and emphasis dropped, lines joined by newlines."""
    total: list[str] = []
    found = False
    for line in str(reply or "").split("\n"):
        if found:
            total.append(line)
        elif upstream_compat:
            if "suggestion:" in line or "Suggestion:" in line:
                found = True
                total.append(line.split("uggestion:")[1].strip())
        else:
            low = line.lower()
            at = low.find("suggestion")
            if at >= 0:
                rest = line[at + len("suggestion") :]
                if rest[:1].lower() == "s":
                    rest = rest[1:]
                if rest.lstrip(" *_").startswith(":"):
                    found = True
                    total.append(rest.lstrip(" *_")[1:].strip(" *_"))
    if upstream_compat:
        return "".join(total)
    return "\n".join(total).strip()


def says_stop(text: str, *, upstream_compat: bool = False) -> bool:
    """Whether ``text`` holds the stop phrase (released: case-sensitive substring)."""
    text = str(text or "")
    return STOP_PHRASE in text if upstream_compat else STOP_PHRASE.lower() in text.lower()


def refine_step(check_reply: str, *, upstream_compat: bool = False) -> tuple[bool, str]:
    """Whether an open path is refined after the refiner's ``check_reply``, and the suggestion: the
    extracted suggestion (the whole reply when none is found); refined when it holds no stop phrase
    and is not empty (the released ``need_text_modify`` / ``need_image_modify``)."""
    sugg = extract_suggestions(check_reply, upstream_compat=upstream_compat) or str(check_reply or "")
    return (not says_stop(sugg, upstream_compat=upstream_compat) and sugg != ""), sugg


def combined_instruction(modification: str, suggestion: str) -> str:
    """The released refinement instruction: ``"<modification> and <suggestion>."`` with
    ``'.?, '`` stripped from the modification's ends and ``'.?,"\\' '`` from the suggestion's."""
    return (
        f"{modification.strip('.?, ')} and {suggestion.strip(chr(46) + chr(63) + chr(44) + chr(34) + chr(39) + ' ')}."
    )


def vqa_confidence(reply: str) -> float:
    """The verifier's confidence that the candidate is the target, from its reply: a number in
    [0, 1] as written, else 1.0 for a reply starting with yes / Y, 0.0 otherwise (no / N / other)."""
    text = str(reply or "").strip().strip("*_`\"' ").strip()
    try:
        v = float(text.split()[0]) if text else math.nan
        if 0.0 <= v <= 1.0:
            return v
    except ValueError:
        pass
    return 1.0 if text[:1].lower() == "y" else 0.0


def best_candidate(scores: Sequence[float]) -> int:
    """The position of the highest confidence, the first of equal ones (the released ``max``)."""
    if not len(scores):
        raise InputError("best_candidate: no candidates")
    best = 0
    for i, s in enumerate(scores):
        if s > scores[best]:
            best = i
    return best


def fuse_two_paths(
    names1: Sequence[str], conf1: Sequence[float], names2: Sequence[str], conf2: Sequence[float]
) -> list[tuple[str, float]]:
    """The released fusion (``*_fuse2paths``): the union of both paths' candidates by name, each
    scored by the sum of its confidences (0.0 where a path lacks it), ordered by (sum, max, path-1
    confidence) descending, then name ascending. A name listed twice in a path keeps its last
    confidence (the released dict)."""
    m1 = dict(zip(names1, (float(c) for c in conf1)))
    m2 = dict(zip(names2, (float(c) for c in conf2)))
    names = set(m1) | set(m2)
    key = sorted(
        names,
        key=lambda n: (-(m1.get(n, 0.0) + m2.get(n, 0.0)), -max(m1.get(n, 0.0), m2.get(n, 0.0)), -m1.get(n, 0.0), n),
    )
    return [(n, m1.get(n, 0.0) + m2.get(n, 0.0)) for n in key]


# -- offline replies (the rules LLM and the scripted endpoint) -----------------------------------------
@functools.lru_cache(maxsize=1)
def _rules():
    """The offline rules LLM whose AutoCIR replies the WISER repliers reuse (built once)."""
    from ...registry import LLMS

    return LLMS.build("rules", {})


def _reply_describe(v: dict) -> str:
    return _rules().run_task(
        "autocir_plan", {"reference_caption": v["reference_caption"], "modification": v["instruction"]}
    )


def _reply_check(v: dict) -> str:
    reply = _rules().run_task(
        "autocir_check",
        {
            "reference_caption": v["reference_caption"],
            "modification": v["modification"],
            "top_captions": str([v["retrieved_caption"]]),
            "n": 1,
        },
    )
    return reply.replace("Suggestions:", "Suggestion:")


def _reply_verify(v: dict) -> str:
    """Offline: yes when the candidate's caption states every edit of the request the rules understand."""
    v = {"reference_caption": "", **v, "retrieved_caption": v.get("candidate_caption", "")}
    return "Y" if says_stop(_reply_check(v)) else "N"


for _name, _vars, _images, _replier in (
    ("wiser_describe", ("reference_caption", "instruction"), "", _reply_describe),
    ("wiser_redescribe", ("reference_caption", "instruction"), "", _reply_describe),
    ("wiser_check_t2i", ("reference_caption", "modification", "retrieved_caption"), "", _reply_check),
    ("wiser_check_i2i", ("reference_caption", "modification", "retrieved_caption"), "", _reply_check),
    ("wiser_verify", ("modification",), "[reference, candidate]", _reply_verify),
):
    register_task(
        _name,
        _vars,
        reply="text",
        images=_images,
        replier=_replier,
        optional={"candidate_caption": ""} if _name == "wiser_verify" else None,
    )


@METHODS.register("wiser")
class WISER(Method):
    """WISER (CVPR 2026): dual-path retrieve -> verify -> refine loop (module docstring).

    Config:
        top_n: candidates taken from each path and verified (released: 50).
        max_check_num: refinement rounds (released config: 1; 0 = round 0 alone).
        threshold: a path whose best confidence is above this is settled (released: 0.7).
        num_keyframes: keyframes captioned for a video reference.
        upstream_compat: read replies exactly as released, quirks included (module docstring).
        prompts: a folder with ``describe.txt``, ``redescribe.txt``, ``check_t2i.txt``,
            ``check_i2i.txt``, ``verify.txt`` used instead of the five prompt fields.
        describe_prompt: prompt of task ``wiser_describe`` (round-0 caption editor).
        redescribe_prompt: prompt of task ``wiser_redescribe`` (refinement caption editor).
        check_t2i_prompt: prompt of task ``wiser_check_t2i`` (refiner of the text path).
        check_i2i_prompt: prompt of task ``wiser_check_i2i`` (refiner of the image path).
        verify_prompt: prompt of task ``wiser_verify`` (the verifier: reference and candidate images).
        exclude_reference: remove the reference item from both paths.
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder", "llm", "captioner")
    optional: ClassVar[tuple[str, ...]] = ("editor",)
    needs: ClassVar[dict[str, tuple[str, ...]]] = {
        "llm": (
            "task:wiser_describe",
            "task:wiser_redescribe",
            "task:wiser_check_t2i",
            "task:wiser_check_i2i",
            "task:wiser_verify",
        )
    }
    needs_captions: ClassVar[bool] = True
    prompt_fields: ClassVar[tuple[str, ...]] = tuple(PROMPT_FILES)

    @dataclass
    class Config:
        top_n: int = 50
        max_check_num: int = 1
        threshold: float = 0.7
        num_keyframes: int = 8
        upstream_compat: bool = False
        prompts: str = ""
        describe_prompt: str = "tasks/wiser_describe"
        redescribe_prompt: str = "tasks/wiser_redescribe"
        check_t2i_prompt: str = "tasks/wiser_check_t2i"
        check_i2i_prompt: str = "tasks/wiser_check_i2i"
        verify_prompt: str = "tasks/wiser_verify"
        exclude_reference: bool = True

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c, where = self.cfg, "method 'wiser'"
        for name in ("top_n", "num_keyframes"):
            if getattr(c, name) < 1:
                raise InputError(f"{where}: field '{name}' must be at least 1, got {getattr(c, name)}")
        if c.max_check_num < 0:
            raise InputError(f"{where}: field 'max_check_num' must be >= 0, got {c.max_check_num}")
        if not 0.0 <= c.threshold <= 1.0:
            raise InputError(f"{where}: field 'threshold' must be within 0..1, got {c.threshold}")
        if c.prompts:
            resolve_prompt_folder(self, c.prompts, PROMPT_FILES, where)

    def stages(self) -> list[Stage]:
        return [Stage(f"round{r}", self._round_fn(r)) for r in range(self.cfg.max_check_num + 1)]

    def _round_fn(self, r: int):
        async def run(ctx: RunContext, state: RunState) -> None:
            await self._round(ctx, state, r)

        return run

    # -- one path's retrieval and verification ---------------------------------------------------------
    async def _path(
        self, ctx: RunContext, state: RunState, q, emb: np.ndarray, caps: list[str], exclude: int
    ) -> dict[str, Any]:
        g = state.gallery
        scores = g.image_emb @ np.asarray(emb, np.float32).reshape(-1)
        if exclude >= 0:
            scores[exclude] = -np.inf
        order = np.lexsort((np.arange(len(scores)), -scores))
        rows = [int(x) for x in order if np.isfinite(scores[x])][: self.cfg.top_n]
        ref = q.reference[0] if q.reference else None
        conf = []
        for row in rows:
            reply = await ctx.call(
                self.llm,
                "run_task",
                task="wiser_verify",
                prompt=self.cfg.verify_prompt,
                images=[ref, g.paths[row]] if ref else [g.paths[row]],
                variables={"modification": q.text, "candidate_caption": caps[row]},
            )
            conf.append(vqa_confidence(reply))
        best = best_candidate(conf) if conf else -1
        return {
            "ids": [g.ids[x] for x in rows],
            "confidence": conf,
            "best": g.ids[rows[best]] if rows else None,
            "best_confidence": conf[best] if rows else 0.0,
        }

    # -- a round -----------------------------------------------------------------------------------------
    async def _round(self, ctx: RunContext, state: RunState, r: int) -> None:
        c = self.cfg
        g = state.gallery
        caps = gallery_captions(state) or [""] * len(g)
        refs = reference_rows(state) if c.exclude_reference else np.full(len(state.queries), -1, np.int32)
        index = {q.id: i for i, q in enumerate(state.queries)}
        row_of = {gid: i for i, gid in enumerate(g.ids)}

        async def edit(image: str, instruction: str) -> str:
            if self.editor is None:
                return str(image)
            return str(await ctx.call(self.editor, "edit", image=image, instruction=instruction))

        async def one(q):
            if not q.reference:
                raise InputError(f"query '{q.id}': WISER edits the reference image, but the query has none")
            if r == 0:
                ref_cap, _ = await reference_caption(ctx, state, q, self.captioner, self.llm, c.num_keyframes)
                reply = await ctx.call(
                    self.llm,
                    "run_task",
                    task="wiser_describe",
                    prompt=c.describe_prompt,
                    variables={"reference_caption": ref_cap, "instruction": q.text},
                )
                description = edited_description(reply, q.text, upstream_compat=c.upstream_compat)
                image = await edit(q.reference[0], q.text)
                rec: dict[str, Any] = {
                    "round": 0,
                    "reference_caption": ref_cap,
                    "reply": reply,
                    "description": description,
                    "edited_image": image,
                    "active": {"t2i": True, "i2i": True},
                }
            else:
                prev = state.record(q, f"round{r - 1}")
                ref_cap = state.record(q, "round0")["reference_caption"]
                description, image = prev["description"], prev["edited_image"]
                rec = {"round": r, "reference_caption": ref_cap, "suggestions": {}, "verdict": {}, "stopped": {}}
                active = dict(prev["active"])
                for path in ("t2i", "i2i"):
                    if not active[path]:
                        rec["suggestions"][path] = STOP_PHRASE
                        rec["stopped"][path] = True
                        continue
                    pseudo = prev[path]["best"]
                    check = await ctx.call(
                        self.llm,
                        "run_task",
                        task=f"wiser_check_{path}",
                        prompt=getattr(c, f"check_{path}_prompt"),
                        variables={
                            "reference_caption": ref_cap,
                            "modification": q.text,
                            "retrieved_caption": caps[row_of[pseudo]] if pseudo else "",
                        },
                    )
                    need, sugg = refine_step(check, upstream_compat=c.upstream_compat)
                    rec["verdict"][path] = check
                    rec["suggestions"][path] = sugg if need else STOP_PHRASE
                    rec["stopped"][path] = not need
                    active[path] = need
                    if not need:
                        continue
                    instruction = combined_instruction(q.text, sugg)
                    if path == "t2i":
                        reply = await ctx.call(
                            self.llm,
                            "run_task",
                            task="wiser_redescribe",
                            prompt=c.redescribe_prompt,
                            variables={"reference_caption": ref_cap, "instruction": instruction},
                        )
                        rec["reply"] = reply
                        description = edited_description(reply, description, upstream_compat=c.upstream_compat)
                    else:
                        image = await edit(q.reference[0], instruction)
                rec.update(description=description, edited_image=image, active=active)
            temb = await embed_texts(ctx, self.encoder, [description])
            iemb = await image_embeddings(ctx, state, self.encoder, [[image]])
            exclude = int(refs[index[q.id]])
            rec["t2i"] = await self._path(ctx, state, q, temb[0], caps, exclude)
            rec["i2i"] = await self._path(ctx, state, q, iemb[0], caps, exclude)
            for path in ("t2i", "i2i"):  # released: a confident path is settled (confidence > threshold)
                if rec[path]["best_confidence"] > c.threshold:
                    rec["active"][path] = False
            rec["fused"] = [
                n
                for n, _ in fuse_two_paths(
                    rec["t2i"]["ids"], rec["t2i"]["confidence"], rec["i2i"]["ids"], rec["i2i"]["confidence"]
                )
            ]
            return rec

        await ctx.map(state, one)
        width = max(1, 2 * c.top_n)
        ids = np.full((len(state.queries), width), -1, np.int32)
        scores = np.full((len(state.queries), width), -np.inf, np.float32)
        # released: the final ranking fuses the candidates verified at the start of the last round (its
        # get_pseudo_targets output goes to candidates1/2; the one after the re-retrieval does not)
        source = f"round{r - 1}" if c.upstream_compat and r == c.max_check_num and r > 0 else f"round{r}"
        for i, q in enumerate(state.queries):
            rec = state.record(q, source)
            fused = fuse_two_paths(
                rec["t2i"]["ids"], rec["t2i"]["confidence"], rec["i2i"]["ids"], rec["i2i"]["confidence"]
            )
            for j, (name, s) in enumerate(fused[:width]):
                ids[i, j], scores[i, j] = row_of[name], s
        state.candidates = Candidates(ids, scores)
