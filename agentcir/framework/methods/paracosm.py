"""``method=paracosm``: Paracosm, retrieval in a generated "paracosm" (Wang, Zhao and Kong, ECCV 2026;
code: leowangtong/Paracosm ``src/utils.py``, ``test_cirr_circo.py``, ``fashioniq_val.py``,
``Paracosm_demo.ipynb``). Exact to the released code for every part that is code.

Stages:

1. ``synthetic_gallery`` (the gallery-side pass, once per gallery): every gallery image is described
   in detail (the describer, prompt ``gallery_prompt``), the description is drawn by the text-to-image
   ``generator`` (the released Qwen-Image, 512 x 512, 50 steps), and the drawing is embedded by the
   encoder; the gallery's index row is ``l2n(l2n(image) + l2n(synthetic))`` (the released
   ``*_extract_image_features`` sum of the two normalised features, normalised again before
   scoring as every released evaluation does). The descriptions are stored with the gallery's
   captions (``captions/paracosm-<key>.jsonl``) and the index beside the gallery
   (``derived/paracosm/<key>.npy``; :meth:`~agentcir.framework.gallery.Gallery.derived_emb`), keyed
   by the describer, its prompt, the generator and the encoder: every run over the same gallery and
   components reads them (no model call); a pass cut off resumes from the call cache (each
   description, drawing and batch of ``encode_batch`` embeddings is one cached call).
2. ``imagine`` (per query): the ``editor`` edits the reference image by the instruction rendered
   from ``edit_prompt`` (``edit_shared_prompt`` for a query with a shared concept: CIRCO) -> the
   "mental image" (``editor=none``: the reference image stands in for it); the describer describes it in one sentence (``mental_prompt``); the query text is
   the modification (``query_text=modification``: CIRR), both caption orders of FashionIQ
   (``both_orders``) or an LLM composition of the modification and the shared concept
   (``composed``: CIRCO's ``text_composed``, task ``paracosm_compose``).
3. ``retrieve``: with ``M``, ``D`` the encoder's *unnormalised* features of the mental image and its
   description and ``T`` the query text's, the query is ``lam * l2n(M + D) + (1 - lam) * l2n(T)``
   (``lam = 0.3``; FashionIQ: ``T = (T(a and b) + T(b and a)) / 2``, both unnormalised) and a gallery
   row scores its inner product with the index row: the released
   ``predicted_features @ index.T + predicted_features_modi @ index.T`` as one inner product, top
   ``top_k`` by :func:`agentcir.kernels.cosine_topk` (sharded galleries score per shard).

The describer (``describer``): ``llm`` asks the recipe's LLM (a VLM: the released Qwen2.5-VL-7B)
the tasks ``paracosm_describe_mental`` / ``paracosm_describe_gallery`` with the image, the reply
kept whole (the released ``output_text[0]``); ``captioner`` uses the recipe's captioner for both
(the offline ``tagger``: a stand-in, its templated captions are not the released descriptions).

Not reproduced (docs/upstream.md): the released rankings are ``torch.argsort`` / ``torch.topk``
(unstable among exact ties); here ties go to the lower gallery row, and the two inner products are
one (equal up to float rounding). The released code removes the reference from the CIRR rankings
only; ``exclude_reference`` (default true) removes it everywhere, ``false`` is the CIRCO /
FashionIQ behaviour. The released CIRCO ``text_composed`` files are keyed by reference image (two
queries with one reference share the last one written) and their generation is not released: here
one composition per query, by this project's prompt. The released images are padded to aspect ratio
1.25 before CLIP's preprocessing (SEARLE's ``targetpad_transform``); here the encoder preprocesses as
its model does.

Prompts: the project's own files (``paracosm/edit``, ``paracosm/edit_shared``,
``paracosm/describe_mental``, ``paracosm/describe_gallery``, ``paracosm/compose`` under
``agentcir/recipes/prompts``) follow the released structure. ``prompts=DIR`` reads ``edit.txt``,
``edit_shared.txt``, ``describe_mental.txt``, ``describe_gallery.txt`` (and ``compose.txt`` when
there) from ``DIR`` instead; ``python benchmarks/upstream_paracosm.py --paracosm CHECKOUT
--export-prompts DIR`` writes the authors' wording there from their notebook."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...kernels import cosine_topk
from ...registry import METHODS, Choice
from ..errors import InputError
from ..hashing import stable_hash
from ..interfaces import l2_normalize
from ..method import Method, RunState, Stage
from ..prompts import load_prompt
from ..runner import RunContext
from ..tasks import register_task
from .common import check_reference, middle, reference_rows, to_candidates

#: the prompt files ``prompts=DIR`` reads, per config field (``compose.txt`` only when there)
PROMPT_FILES = {
    "edit_prompt": "edit.txt",
    "edit_shared_prompt": "edit_shared.txt",
    "mental_prompt": "describe_mental.txt",
    "gallery_prompt": "describe_gallery.txt",
}
OPTIONAL_PROMPT_FILES = {"compose_prompt": "compose.txt"}
#: bump when the gallery-side index computed from the stored artefacts changes
INDEX_FORMAT = "paracosm-index-1"


def _compose_offline(v: dict[str, Any]) -> str:
    concept = str(v.get("shared_concept") or "").strip()
    mod = str(v["modification"]).strip().rstrip(".")
    return f"{concept} that {mod}" if concept else mod


def _describe_offline(v: dict[str, Any]) -> str:
    # no model saw the image: the plan's and the scripted endpoint's stand-in reply, one per item
    return f"an image ({v['item']})" if v.get("item") else "an image"


# ``item`` (the gallery item or the query whose image is described) is not in the prompts: it tells
# the offline repliers' images apart, so a plan counts one drawing per gallery image as a run makes
register_task(
    "paracosm_describe_mental",
    (),
    reply="text",
    images="[image]",
    prompt="paracosm/describe_mental",
    optional={"item": ""},
    replier=_describe_offline,
)
register_task(
    "paracosm_describe_gallery",
    (),
    reply="text",
    images="[image]",
    prompt="paracosm/describe_gallery",
    optional={"item": ""},
    replier=_describe_offline,
)
register_task(
    "paracosm_compose",
    ("modification", "shared_concept"),
    reply="text",
    prompt="paracosm/compose",
    replier=_compose_offline,
)


class Describer(Choice):
    """Who describes the mental images and the gallery images (``method.describer``)."""

    llm = "llm"
    captioner = "captioner"


class QueryText(Choice):
    """The text feature of the query (``method.query_text``)."""

    modification = "modification"
    both_orders = "both_orders"
    composed = "composed"


def paracosm_query(mental: np.ndarray, description: np.ndarray, text: np.ndarray, lam: float) -> np.ndarray:
    """``lam * l2n(mental + description) + (1 - lam) * l2n(text)`` per row (``mental``, ``description``
    and ``text``: the encoder's unnormalised features), float32."""
    m = l2_normalize(np.asarray(mental, np.float32) + np.asarray(description, np.float32))
    t = l2_normalize(np.asarray(text, np.float32))
    return (np.float32(lam) * m + np.float32(1.0 - lam) * t).astype(np.float32)


def paracosm_index(image: np.ndarray, synthetic: np.ndarray) -> np.ndarray:
    """``l2n(l2n(image) + l2n(synthetic))`` per row: a gallery image and its synthetic counterpart."""
    return l2_normalize(l2_normalize(image) + l2_normalize(synthetic))


def resolve_prompt_folder(method: Method, folder: str, where: str) -> None:
    """Point the prompt fields at the files of ``folder`` (``method.prompts=DIR``)."""
    d = Path(folder).expanduser()
    if not d.is_dir():
        raise InputError(
            f"{where}: field 'prompts' must be a folder holding {', '.join(PROMPT_FILES.values())}; "
            f"'{folder}' is not a folder"
        )
    missing = [f for f in PROMPT_FILES.values() if not (d / f).is_file()]
    if missing:
        raise InputError(f"{where}: the prompts folder '{folder}' lacks {', '.join(missing)}")
    for fld, name in {**PROMPT_FILES, **OPTIONAL_PROMPT_FILES}.items():
        if (d / name).is_file():
            setattr(method.cfg, fld, str((d / name).resolve()))


@METHODS.register("paracosm")
class Paracosm(Method):
    """Paracosm (ECCV 2026): a mental image of the target, matched against the gallery images and their
    synthetic counterparts (module docstring).

    Config:
        top_k: ranking depth.
        lam: weight of the mental image + description feature (released 0.3; the text's is ``1 - lam``).
        describer: ``llm`` (the recipe's VLM, the two description tasks) or ``captioner``.
        query_text: ``modification`` (CIRR), ``both_orders`` (FashionIQ's two caption orders) or
            ``composed`` (CIRCO: the modification and the shared concept composed by the LLM).
        synthetic_gallery: match against the gallery images and their synthetic counterparts
            (released); false: against the images alone (no gallery-side pass).
        encode_batch: synthetic images per encoder call in the gallery-side pass.
        exclude_reference: remove the reference item from the rankings (released: CIRR only).
        prompts: a folder with ``edit.txt``, ``edit_shared.txt``, ``describe_mental.txt``,
            ``describe_gallery.txt`` (``compose.txt`` optional) used instead of the prompt fields.
        edit_prompt: the editor's instruction (variable ``modification``).
        edit_shared_prompt: the instruction for a query with a shared concept (``modification``,
            ``shared_concept``).
        mental_prompt: prompt of task ``paracosm_describe_mental`` (one sentence).
        gallery_prompt: prompt of task ``paracosm_describe_gallery`` (a detailed description).
        compose_prompt: prompt of task ``paracosm_compose``.
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder", "generator")
    optional: ClassVar[tuple[str, ...]] = ("editor", "llm", "captioner")
    prompt_fields: ClassVar[tuple[str, ...]] = (
        "edit_prompt",
        "edit_shared_prompt",
        "mental_prompt",
        "gallery_prompt",
        "compose_prompt",
    )

    @dataclass
    class Config:
        top_k: int = 100
        lam: float = 0.3
        describer: Describer = Describer.captioner
        query_text: QueryText = QueryText.modification
        synthetic_gallery: bool = True
        encode_batch: int = 256
        exclude_reference: bool = True
        prompts: str = ""
        edit_prompt: str = "paracosm/edit"
        edit_shared_prompt: str = "paracosm/edit_shared"
        mental_prompt: str = "paracosm/describe_mental"
        gallery_prompt: str = "paracosm/describe_gallery"
        compose_prompt: str = "paracosm/compose"

    @classmethod
    def needs_for(cls, config: dict[str, Any]) -> dict[str, tuple[str, ...]]:
        llm: tuple[str, ...] = ()
        if str(config.get("describer", "llm")) == "llm":
            llm += ("images", "task:paracosm_describe_mental", "task:paracosm_describe_gallery")
        if str(config.get("query_text", "modification")) == "composed":
            llm += ("task:paracosm_compose",)
        return {"llm": llm} if llm else {}

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c, where = self.cfg, "method 'paracosm'"
        for name in ("top_k", "encode_batch"):
            if getattr(c, name) < 1:
                raise InputError(f"{where}: field '{name}' must be at least 1, got {getattr(c, name)}")
        if not 0.0 <= c.lam <= 1.0:
            raise InputError(f"{where}: field 'lam' must be in [0, 1], got {c.lam}")
        if c.prompts:
            resolve_prompt_folder(self, c.prompts, where)
        if c.describer == Describer.llm and self.llm is None:
            raise InputError(
                f"{where}: describer=llm needs an llm that reads images (e.g. llm=openai with a VLM); "
                f"offline, set method.describer=captioner"
            )
        if c.describer == Describer.captioner and self.captioner is None:
            raise InputError(f"{where}: describer=captioner needs a captioner (e.g. captioner=tagger)")
        if c.query_text == QueryText.composed and self.llm is None:
            raise InputError(f"{where}: query_text=composed needs an llm (task paracosm_compose)")

    def stages(self) -> list[Stage]:
        out = [Stage("synthetic_gallery", self._synthetic_gallery)] if self.cfg.synthetic_gallery else []
        return out + [Stage("imagine", self._imagine), Stage("retrieve", self._retrieve)]

    # -- the describer ----------------------------------------------------------------------
    async def _describe(self, ctx: RunContext, image: Path, which: str, item: str) -> str:
        if self.cfg.describer == Describer.captioner:
            return str(await ctx.call(self.captioner, "caption", image=Path(image)))
        task, prompt = (
            ("paracosm_describe_mental", self.cfg.mental_prompt)
            if which == "mental"
            else ("paracosm_describe_gallery", self.cfg.gallery_prompt)
        )
        reply = await ctx.call(
            self.llm, "run_task", task=task, prompt=prompt, variables={"item": item}, images=[Path(image)]
        )
        if not str(reply).strip():
            raise InputError(f"method 'paracosm': the describer gave an empty description of '{image}'")
        return str(reply)

    def _describer_identity(self) -> str:
        if self.cfg.describer == Describer.captioner:
            return f"captioner:{self.captioner.identity}"
        return f"llm:{self.llm.identity}:{self.prompt('gallery_prompt').sha256}"

    def gallery_keys(self, gallery) -> tuple[str, str]:
        """The keys of the gallery-side artefacts: the descriptions (a captions key) and the index
        (a derived array of kind ``paracosm``); they name the describer, its prompt, the generator
        (bound to ``gallery``) and the encoder, so every run with the same components shares them."""
        desc_key = "paracosm-" + stable_hash(self._describer_identity(), n=20)
        gen = self.generator.bind(gallery)
        return desc_key, stable_hash(INDEX_FORMAT, desc_key, gen.identity, self.encoder.identity, n=20)

    # -- 1. the gallery-side pass -----------------------------------------------------------------
    async def _synthetic_gallery(self, ctx: RunContext, state: RunState) -> None:
        g = state.gallery
        gen = self.generator.bind(g)
        desc_key, key = self.gallery_keys(g)
        if g.derived_emb("paracosm", key) is not None:
            return
        descriptions = g.captions(desc_key)
        if descriptions is None:
            descriptions = await self._over_gallery(
                ctx, len(g), "gallery descriptions", lambda r: self._describe(ctx, g.path_of(r), "gallery", g.ids[r])
            )
            g.save_captions(desc_key, descriptions)
        drawn = await self._over_gallery(
            ctx, len(g), "synthetic counterparts", lambda r: ctx.call(gen, "generate", description=descriptions[r])
        )
        for r, p in enumerate(drawn):
            if p is None:
                raise InputError(
                    f"method 'paracosm': generator '{gen.registry_key}' drew nothing for gallery item "
                    f"'{g.ids[r]}' (description {descriptions[r][:80]!r})"
                )
        b = self.cfg.encode_batch
        chunks = [[Path(p) for p in drawn[s : s + b]] for s in range(0, len(drawn), b)]
        embs = await asyncio.gather(*(ctx.call(self.encoder, "encode_images", images=ch) for ch in chunks))
        synthetic = np.concatenate([np.asarray(e, np.float32) for e in embs]) if embs else np.zeros((0, g.dim))
        if len(synthetic) != len(g):
            raise InputError(
                f"method 'paracosm': {len(g) - len(synthetic)} synthetic counterpart(s) could not be "
                f"decoded (see the log for which)"
            )
        index = np.empty((len(g), g.dim), np.float32)
        for s in range(0, len(g), 8192):
            index[s : s + 8192] = paracosm_index(
                np.asarray(g.image_emb[s : s + 8192], np.float32), synthetic[s : s + 8192]
            )
        g.save_derived_emb("paracosm", key, index)

    async def _over_gallery(self, ctx: RunContext, n: int, what: str, fn) -> list[Any]:
        """``fn(row)`` for every gallery row, ``ctx.window`` at a time, with a progress bar."""
        from tqdm.auto import tqdm

        sem = asyncio.Semaphore(ctx.window)
        bar = tqdm(total=n, desc=what, unit="img", disable=not ctx.progress, leave=False)
        done = [0]

        async def one(r: int) -> Any:
            async with sem:
                try:
                    return await fn(r)
                finally:
                    bar.update(1)
                    done[0] += 1
                    if ctx.on_progress is not None:
                        ctx.on_progress(ctx.stage, done[0], n)

        try:
            return list(await asyncio.gather(*(one(r) for r in range(n))))
        finally:
            bar.close()

    # -- 2. the mental image ----------------------------------------------------------------------
    async def _imagine(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        if c.query_text == QueryText.both_orders:
            bad = next((q for q in state.queries if not q.meta.get("text_reversed")), None)
            if bad is not None:
                raise InputError(
                    f"query '{bad.id}': query_text=both_orders needs the two caption orders of a "
                    f"FashionIQ query (meta 'text_reversed'); this dataset's queries have one text"
                )

        async def one(q):
            check_reference(q)
            ref = middle(q.reference_paths)  # a video: its middle keyframe
            concept = str(q.meta.get("shared_concept") or "").strip()
            prompt = c.edit_shared_prompt if concept else c.edit_prompt
            instruction = load_prompt(prompt).render({"modification": q.text, "shared_concept": concept}).strip()
            if self.editor is None:  # editor=none: the reference stands in for the mental image
                mental = Path(ref)
            else:
                mental = await ctx.call(self.editor, "edit", image=Path(ref), instruction=instruction)
            if mental is None:
                raise InputError(f"query '{q.id}': editor '{self.editor.registry_key}' made no image")
            description = await self._describe(ctx, Path(mental), "mental", q.id)
            rec: dict[str, Any] = {"instruction": instruction, "mental_image": str(mental), "description": description}
            if c.query_text == QueryText.composed:
                rec["text"] = [
                    str(
                        await ctx.call(
                            self.llm,
                            "run_task",
                            task="paracosm_compose",
                            prompt=c.compose_prompt,
                            variables={"modification": q.text, "shared_concept": concept},
                        )
                    )
                ]
            elif c.query_text == QueryText.both_orders:
                rec["text"] = [q.text, str(q.meta["text_reversed"])]
            else:
                rec["text"] = [q.text]
            return rec

        await ctx.map(state, one)

    # -- 3. retrieval -----------------------------------------------------------------------------
    async def _retrieve(self, ctx: RunContext, state: RunState) -> None:
        c = self.cfg
        g = state.gallery
        recs = [state.record(q, "imagine") for q in state.queries]
        images = list(dict.fromkeys(Path(r["mental_image"]) for r in recs))
        img = np.asarray(await ctx.call(self.encoder, "encode_images", images=images, normalize=False), np.float32)
        if len(img) != len(images):
            raise InputError(
                f"{len(images) - len(img)} mental image(s) could not be decoded (first of them: "
                f"'{images[0]}'); see the log for which"
            )
        texts = list(dict.fromkeys([r["description"] for r in recs] + [t for r in recs for t in r["text"]]))
        txt = np.asarray(await ctx.call(self.encoder, "encode_texts", texts=texts, normalize=False), np.float32)
        row_img = {p: i for i, p in enumerate(images)}
        row_txt = {t: i for i, t in enumerate(texts)}
        M = img[[row_img[Path(r["mental_image"])] for r in recs]]
        D = txt[[row_txt[r["description"]] for r in recs]]
        T = np.stack([np.mean(txt[[row_txt[t] for t in r["text"]]], axis=0) for r in recs]).astype(np.float32)
        query = paracosm_query(M, D, T, c.lam)
        state.arrays["paracosm_query"] = query  # saved with the stage: the query vectors as scored
        index = g.image_emb
        if c.synthetic_gallery:
            _, key = self.gallery_keys(g)
            index = g.derived_emb("paracosm", key)
            if index is None:  # removed from the gallery since its stage finished: made again (from the cache)
                await self._synthetic_gallery(ctx, state)
                index = g.derived_emb("paracosm", key)
        exclude = reference_rows(state) if c.exclude_reference else None
        state.candidates = to_candidates(
            cosine_topk(query, index, min(len(g), c.top_k), exclude=exclude, backend=ctx.kernels)
        )


__all__ = ["Paracosm", "paracosm_query", "paracosm_index", "Describer", "QueryText", "PROMPT_FILES"]
