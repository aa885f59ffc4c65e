"""``method=autocir``: AutoCIR, planner -> retriever -> corrector loop (KDD 2025; code:
coloreyes/AutoCIR ``src/utils.py`` ``generate_predictions``, ``src/check_prompt.py``). Exact to the
released code for every part that is code.

Stages (each leaves a snapshot, so the report shows recall after every round):

1. ``plan`` (round 0): the reference caption (the gallery caption of a gallery reference, else the
   captioner's), then the planner (LLM task ``autocir_plan``, prompt ``planner_prompt``) writes the
   target description; its reply is read by :func:`edited_description` (the released
   ``LLM_modify_caption``: the first line starting with ``Edited Description:``; none, or an empty
   one, gives the modification text itself). Retrieval: the description's text embedding against
   the gallery images, inner product of normalised vectors (the released ``text_encoding`` +
   ``compute_results``), :func:`agentcir.kernels.cosine_topk`.
2. ``round1`` ... ``round<max_check_num>`` (the released ``max_check_num`` loop; 1 in every
   released config but FashionIQ-shirt's 0): for every query still active, the corrector (task
   ``autocir_check``, prompt ``corrector_prompt``) reads the reference caption, the modification
   and the gallery captions of the current top ``check_top`` (10, the released
   ``sorted_index_names[:, :10]``), rendered as the released prompt renders a Python list. A reply
   that contains the stop phrase ``Good retrieval, no more loops needed`` stops the query for good
   (its description is kept; no later round asks about it again). Otherwise the suggestions are
   read by :func:`extract_suggestions` (the text after "suggestions" on the first line that names
   them, and every line after it; the whole reply when that is empty), and the re-planner (task
   ``autocir_replan``, prompt ``replanner_prompt``) rewrites the last description; its reply is read
   by :func:`edited_description` with the last description as the fallback. Every query is then
   retrieved again (a stopped query's description, hence its ranking, is unchanged).

Reply reading: correct by default; ``upstream_compat=true`` reads replies exactly as released,
quirks included: an ``Edited Description:`` line keeps only the text up to the next colon
(``line.split(':')[1]``); the suggestion lines are concatenated with no separator; the stop phrase
is matched case-sensitively; a re-planner reply containing ``Error`` keeps the last description
(the released API wrapper's failure text; here a failed call raises and is retried instead, so
only a reply that happens to contain the word is affected). The correct reading: the text after
the first colon, markdown emphasis and quotes around it removed, a case-insensitive marker; the
suggestion lines joined by newlines; the stop phrase matched case-insensitively.

Not reproduced: the released ranking is ``torch.argsort`` of distances (unstable among exact
ties); here ties go to the lower gallery row. The released code removes the reference image from
the CIRR rankings only (its ``compute_results.cirr``); ``exclude_reference`` (default true, like
every method here) removes it everywhere; ``exclude_reference=false`` is the FashionIQ / CIRCO
behaviour.

Prompts: the project's own files (``tasks/autocir_plan``, ``tasks/autocir_check``,
``tasks/autocir_replan`` under ``agentcir/recipes/prompts``, and ``autocir/planner_fashion`` for
FashionIQ) follow the released structure and reply format. ``prompts=DIR`` reads ``planner.txt``,
``corrector.txt`` and ``replanner.txt`` from ``DIR`` instead (``python
benchmarks/upstream_autocir.py --export-prompts DIR --autocir CHECKOUT`` writes the authors' wording
there from their checkout, with this project's ``{{placeholders}}``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...kernels import cosine_topk
from ...registry import METHODS
from ..errors import InputError
from ..interfaces import l2_normalize
from ..method import Method, RunState, Stage
from ..runner import RunContext
from .common import embed_texts, gallery_captions, reference_caption, reference_rows, to_candidates

STOP_PHRASE = "Good retrieval, no more loops needed"
#: the prompt files ``prompts=DIR`` reads, per config field
PROMPT_FILES = {
    "planner_prompt": "planner.txt",
    "corrector_prompt": "corrector.txt",
    "replanner_prompt": "replanner.txt",
}


def edited_description(reply: str, fallback: str, *, upstream_compat: bool = False) -> str:
    """The description of a planner / re-planner reply: the first line that starts with
    ``Edited Description:``; ``fallback`` when there is none or it is empty.

    ``upstream_compat``: exactly ``LLM_modify_caption`` / ``LLM_remodify_caption``: the marker
    matched as written at the start of the stripped line, the text up to the next colon.
    """
    for line in str(reply or "").split("\n"):
        if upstream_compat:
            if line.strip().startswith("Edited Description:"):
                text = line.split(":")[1].strip()
                return text if text else fallback
            continue
        s = line.strip().lstrip("#*->• \t")
        head, sep, rest = s.partition(":")
        if sep and head.strip(" *_").lower() == "edited description":
            text = rest.strip().strip("*_ ").strip().strip("\"“”'").strip()
            return text if text else fallback
    return fallback


def extract_suggestions(reply: str, *, upstream_compat: bool = False) -> str:
    """The corrector's suggestions: after "suggestions" on the first line that names them, and
    every following line (the released ``extract_suggestions``). The released code concatenates
    the lines with no separator and keeps what follows "uggestions" as is (a leading colon
    included); the correct reading joins them with newlines and drops the leading colon/emphasis."""
    total: list[str] = []
    found = False
    for line in str(reply or "").split("\n"):
        if found:
            total.append(line)
        elif "suggestions" in line or "Suggestions" in line:
            found = True
            rest = line.split("uggestions")[1].strip()
            total.append(rest if upstream_compat else rest.lstrip(":*_ ").strip())
    if upstream_compat:
        return "".join(total)
    return "\n".join(total).strip()


def says_stop(reply: str, *, upstream_compat: bool = False) -> bool:
    """Whether the corrector's reply is the stop phrase (released: case-sensitive substring)."""
    text = str(reply or "")
    return STOP_PHRASE in text if upstream_compat else STOP_PHRASE.lower() in text.lower()


def released_list(captions: list[str]) -> str:
    """The captions as the released prompt renders them (a Python list in an f-string)."""
    return str(list(captions))


def resolve_prompt_folder(method: Method, folder: str, files: dict[str, str], where: str) -> None:
    """Point the method's prompt fields at the files of ``folder`` (``method.prompts=DIR``)."""
    d = Path(folder).expanduser()
    if not d.is_dir():
        raise InputError(
            f"{where}: field 'prompts' must be a folder holding {', '.join(files.values())}; '{folder}' is not a folder"
        )
    missing = [f for f in files.values() if not (d / f).is_file()]
    if missing:
        raise InputError(f"{where}: the prompts folder '{folder}' lacks {', '.join(missing)}")
    for fld, name in files.items():
        setattr(method.cfg, fld, str((d / name).resolve()))


@METHODS.register("autocir")
class AutoCIR(Method):
    """AutoCIR (KDD 2025): planner -> retriever -> corrector loop (module docstring).

    Config:
        top_k: ranking depth (at least ``check_top``).
        num_keyframes: keyframes captioned for a video reference.
        max_check_num: correction rounds (released configs: 1; 0 = the planner alone).
        check_top: retrieved gallery captions shown to the corrector (released: 10).
        upstream_compat: read replies exactly as released, quirks included (module docstring).
        prompts: a folder with ``planner.txt``, ``corrector.txt``, ``replanner.txt`` used instead of
            the three prompt fields (e.g. the authors' wording exported from their checkout).
        planner_prompt: prompt of task ``autocir_plan`` (reference caption + modification).
        corrector_prompt: prompt of task ``autocir_check`` (+ the top captions).
        replanner_prompt: prompt of task ``autocir_replan`` (+ last description and suggestions).
        exclude_reference: remove the reference item from the rankings.
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder", "llm", "captioner")
    needs_captions: ClassVar[bool] = True
    prompt_fields: ClassVar[tuple[str, ...]] = ("planner_prompt", "corrector_prompt", "replanner_prompt")

    @dataclass
    class Config:
        top_k: int = 100
        num_keyframes: int = 8
        max_check_num: int = 1
        check_top: int = 10
        upstream_compat: bool = False
        prompts: str = ""
        planner_prompt: str = "tasks/autocir_plan"
        corrector_prompt: str = "tasks/autocir_check"
        replanner_prompt: str = "tasks/autocir_replan"
        exclude_reference: bool = True

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c, where = self.cfg, "method 'autocir'"
        for name in ("top_k", "num_keyframes", "check_top"):
            if getattr(c, name) < 1:
                raise InputError(f"{where}: field '{name}' must be at least 1, got {getattr(c, name)}")
        if c.max_check_num < 0:
            raise InputError(f"{where}: field 'max_check_num' must be >= 0, got {c.max_check_num}")
        if c.prompts:
            resolve_prompt_folder(self, c.prompts, PROMPT_FILES, where)

    @property
    def depth(self) -> int:
        return max(self.cfg.top_k, self.cfg.check_top)

    def stages(self) -> list[Stage]:
        out = [Stage("plan", self._plan)]
        for r in range(1, self.cfg.max_check_num + 1):
            out.append(Stage(f"round{r}", self._round_fn(r)))
        return out

    # -- retrieval -----------------------------------------------------------------------------
    async def _retrieve(self, ctx: RunContext, state: RunState, descriptions: list[str]) -> None:
        emb = l2_normalize(np.asarray(await embed_texts(ctx, self.encoder, descriptions), np.float32))
        exclude = reference_rows(state) if self.cfg.exclude_reference else None
        top = cosine_topk(
            emb, state.gallery.image_emb, min(len(state.gallery), self.depth), exclude=exclude, backend=ctx.kernels
        )
        state.candidates = to_candidates(top)

    # -- round 0: the planner ---------------------------------------------------------------------
    async def _plan(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg

        async def one(q):
            ref, _ = await reference_caption(ctx, state, q, self.captioner, self.llm, c.num_keyframes)
            reply = await ctx.call(
                self.llm,
                "run_task",
                task="autocir_plan",
                prompt=c.planner_prompt,
                variables={"reference_caption": ref, "modification": q.text},
            )
            return {
                "reference_caption": ref,
                "reply": reply,
                "description": edited_description(reply, q.text, upstream_compat=c.upstream_compat),
                "active": True,
            }

        await ctx.map(state, one)
        await self._retrieve(ctx, state, [state.record(q, "plan")["description"] for q in state.queries])

    # -- rounds 1..max_check_num: corrector + re-planner --------------------------------------------
    def _round_fn(self, r: int):
        async def run(ctx: RunContext, state: RunState) -> None:
            await self._round(ctx, state, r)

        return run

    async def _round(self, ctx: RunContext, state: RunState, r: int) -> None:
        c = self.cfg
        prev = "plan" if r == 1 else f"round{r - 1}"
        caps = gallery_captions(state)
        cands = state.candidates
        index = {q.id: i for i, q in enumerate(state.queries)}

        async def one(q):
            last = state.record(q, prev)
            ref = state.record(q, "plan")["reference_caption"]
            if not last["active"]:
                return {
                    "round": r,
                    "asked": False,
                    "stopped": True,
                    "description": last["description"],
                    "active": False,
                }
            top = [int(x) for x in cands.ids[index[q.id]] if x >= 0][: c.check_top]
            top_caps = [caps[x] for x in top]
            check = await ctx.call(
                self.llm,
                "run_task",
                task="autocir_check",
                prompt=c.corrector_prompt,
                variables={
                    "reference_caption": ref,
                    "modification": q.text,
                    "top_captions": released_list(top_caps),
                    "n": len(top_caps),
                },
            )
            rec: dict[str, Any] = {
                "round": r,
                "asked": True,
                "checked_ids": [state.gallery.ids[x] for x in top],
                "verdict": check,
            }
            if says_stop(check, upstream_compat=c.upstream_compat):
                return {
                    **rec,
                    "stopped": True,
                    "suggestions": STOP_PHRASE,
                    "description": last["description"],
                    "active": False,
                }
            suggestions = extract_suggestions(check, upstream_compat=c.upstream_compat) or check
            reply = await ctx.call(
                self.llm,
                "run_task",
                task="autocir_replan",
                prompt=c.replanner_prompt,
                variables={
                    "reference_caption": ref,
                    "modification": q.text,
                    "last_description": last["description"],
                    "suggestions": suggestions,
                },
            )
            if c.upstream_compat and "Error" in reply:
                return {
                    **rec,
                    "stopped": False,
                    "suggestions": suggestions,
                    "reply": reply,
                    "description": last["description"],
                    "active": True,
                }
            return {
                **rec,
                "stopped": False,
                "suggestions": suggestions,
                "reply": reply,
                "description": edited_description(reply, last["description"], upstream_compat=c.upstream_compat),
                "active": True,
            }

        await ctx.map(state, one)
        await self._retrieve(ctx, state, [state.record(q, f"round{r}")["description"] for q in state.queries])
