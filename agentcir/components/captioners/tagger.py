"""``captioner=tagger``: the offline captioner. Tags an image with the injected encoder
against attribute vocabularies and writes a templated caption.

Honest and limited: it can only say what its vocabularies hold (colour, pattern, who
it is for, article type, ...), and only as well as the encoder separates those words;
an attribute the encoder is unsure about is left out rather than guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from ...framework.errors import InputError
from ...framework.interfaces import Captioner
from ...registry import CAPTIONERS
from ...registry.config import bounded
from .zeroshot import DEFAULT_PROMPTS, ZeroShot

_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_AN = re.compile(r"\b([Aa]) (?=(?:[aeio]|u(?!ni|s[aeu]|ti)|hour|honest)\w*)")


def _join(values: list[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def tidy(text: str) -> str:
    """Collapse blanks and fix ``a``/``an`` before a vowel sound (``an olive dress``)."""
    text = " ".join(text.split())
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    return _AN.sub(lambda m: m.group(1) + "n ", text)


@CAPTIONERS.register("tagger")
class TaggerCaptioner(Captioner):
    """Encoder zero-shot tagging -> templated caption (``"a photo of a black men's t-shirt"``).

    For each vocabulary in ``vocabularies`` the image is scored against every term's
    prompt (``"a photo of a {} item"``, ...; see :mod:`.zeroshot`). The best terms (up to
    ``max_values``, default 1) whose probability is at least the vocabulary's ``min_prob``
    are kept, but only when the weakest of them beats the best term left out by more than
    ``min_margin`` (so a tie is never kept); else the attribute is left out (its slot gets
    ``fallback``, if any). Several kept terms are joined with "and". The caption is
    ``template`` with ``{vocabulary}`` slots filled, blanks collapsed and a/an fixed.

    Config:
        vocabularies: vocabulary files to tag with (names under ``vocab_dir``). ``genders`` is
            not tagged by default: the bundled catalog encoder names it wrongly 95% of the
            time on the demo photos (benchmarks/offline_vision_quality.py); add it (and a
            ``{genders}`` slot) with an encoder that separates it.
        template: the caption, one ``{name}`` slot per vocabulary.
        prompts: per-vocabulary zero-shot prompt overrides (``{}`` = the term; ``|`` separates
            the templates of an ensemble).
        forms: how a term is written in the caption (``men`` -> ``men's``).
        fallback: text for a slot whose attribute was left out (default: nothing).
        min_prob: per-vocabulary minimum probability (default ``default_min_prob``).
        default_min_prob: minimum probability for vocabularies not in ``min_prob``.
        min_margin: per-vocabulary lead the kept terms must have over the best term left
            out (probability points, strictly more; default ``default_min_margin``).
        default_min_margin: the same for vocabularies not in ``min_margin``.
        max_values: per-vocabulary number of terms to keep (default 1).
        temperature: softmax temperature over cosine similarities.
        synonyms: average the prompts of every synonym of a term (prompt ensembling).
        vocab_dir: folder of vocabulary files (empty: the bundled ``agentcir/data/vocab``).
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder",)

    @dataclass
    class Config:
        vocabularies: list[str] = field(default_factory=lambda: ["colours", "patterns", "articles"])
        template: str = "a photo of a {colours} {patterns} {articles}"
        prompts: dict[str, str] = field(default_factory=dict)
        forms: dict[str, str] = field(
            default_factory=lambda: {
                "men": "men's",
                "women": "women's",
                "boys": "boys'",
                "girls": "girls'",
                "solid": "",
            }
        )
        fallback: dict[str, str] = field(default_factory=lambda: {"articles": "item"})
        min_prob: dict[str, float] = field(default_factory=lambda: {"patterns": 0.5})
        default_min_prob: float = 0.4
        min_margin: dict[str, float] = bounded(lo=-1.0, hi=1.0, default_factory=dict)
        default_min_margin: float = bounded(0.0, -1.0, 1.0)
        max_values: dict[str, int] = bounded(lo=1, default_factory=dict)
        temperature: float = bounded(0.01, 0, lo_open=True)
        synonyms: bool = False
        vocab_dir: str = ""

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c = self.cfg
        where = f"captioner '{self.registry_key or 'tagger'}'"
        if not c.vocabularies:
            raise InputError(f"{where}: field 'vocabularies' is empty; name at least one vocabulary")
        slots = _SLOT.findall(c.template)
        unknown = sorted(set(slots) - set(c.vocabularies))
        if unknown:
            raise InputError(
                f"{where}: field 'template' has slot(s) {', '.join('{' + s + '}' for s in unknown)} "
                f"that are not in 'vocabularies' ({', '.join(c.vocabularies)})"
            )
        unused = [v for v in c.vocabularies if v not in slots]
        if unused:
            raise InputError(
                f"{where}: vocabular{'ies' if len(unused) > 1 else 'y'} {', '.join(unused)} "
                f"tagged but not in field 'template' {c.template!r}"
            )
        self.zs = ZeroShot(
            self.encoder,
            vocab_dir=c.vocab_dir,
            prompts=c.prompts,
            temperature=c.temperature,
            synonyms=c.synonyms,
            where=where,
        )
        # per-vocabulary settings may name any vocabulary file (defaults cover untagged ones); a typo fails
        known = {*c.vocabularies, *DEFAULT_PROMPTS, *(p.stem for p in Path(self.zs.vocab_dir).glob("*.txt"))}
        for name in ("min_prob", "min_margin", "max_values", "prompts", "fallback"):
            extra = sorted(set(getattr(c, name)) - known)
            if extra:
                raise InputError(
                    f"{where}: field '{name}' names {', '.join(extra)}, which is no vocabulary "
                    f"(tagged: {', '.join(c.vocabularies)})"
                )
        for v in c.vocabularies:
            self.zs.vocabulary(v)  # a missing vocabulary file fails at build time

    def model_identity(self) -> str:
        return self.zs.identity()

    # -- tagging ----------------------------------------------------------------------
    def tags_from_embeddings(self, emb: np.ndarray) -> list[dict[str, list[tuple[str, float]]]]:
        """Kept tags per image: ``{vocabulary: [(term, probability), ...]}`` (best first)."""
        c = self.cfg
        emb = np.atleast_2d(np.asarray(emb, np.float32))
        out: list[dict[str, list[tuple[str, float]]]] = [{} for _ in range(len(emb))]
        for v in c.vocabularies:
            ls, p = self.zs.probs(emb, v)
            floor = c.min_prob.get(v, c.default_min_prob)
            margin = c.min_margin.get(v, c.default_min_margin)
            keep_n = max(1, int(c.max_values.get(v, 1)))
            order = np.argsort(-p, axis=1, kind="stable")
            for i in range(len(emb)):
                kept = []
                for j in order[i, :keep_n]:
                    if p[i, j] < floor:
                        break
                    kept.append(j)
                # the kept terms must stand apart from the best term left out
                while kept:
                    nxt = float(p[i, order[i, len(kept)]]) if len(kept) < p.shape[1] else 0.0
                    if p[i, kept[-1]] - nxt > margin:
                        break
                    kept.pop()
                out[i][v] = [(ls.names[j], float(p[i, j])) for j in kept]
        return out

    def tags(self, image: Path | Any) -> dict[str, list[tuple[str, float]]]:
        """Kept tags of one image (path or PIL image)."""
        return self.tags_from_embeddings(self.zs.embed_images([image]))[0]

    def render(self, tags: dict[str, list[tuple[str, float]]]) -> str:
        """The caption of a tag dict (see the class docstring)."""
        c = self.cfg

        def fill(m: re.Match) -> str:
            v = m.group(1)
            terms = [c.forms.get(t, t) for t, _ in tags.get(v, [])]
            terms = [t for t in terms if t]
            return _join(terms) if terms else c.fallback.get(v, "")

        return tidy(_SLOT.sub(fill, c.template))

    # -- the Captioner interface --------------------------------------------------------
    def caption(self, image: Path) -> str:
        """Caption one image (path or PIL image)."""
        return self.render(self.tags(image))

    def caption_many(self, images: Sequence[Path], batch_size: int | None = None) -> list[str]:
        """Caption several images with batched encoding (an undecodable image is an error)."""
        from ...framework.images import ImageDecodeError, Skipped

        skipped: list[Skipped] = []
        emb = self.encoder.encode_images(list(images), batch_size, skipped=skipped)
        if skipped:
            raise ImageDecodeError(
                f"image '{skipped[0].path}': {skipped[0].reason} "
                f"({len(skipped)} of {len(images)} image(s) could not be captioned)"
            )
        return self.caption_embeddings(emb)

    def caption_embeddings(self, emb: np.ndarray) -> list[str]:
        """Captions of images from their embeddings by the same encoder (e.g. a gallery's)."""
        return [self.render(t) for t in self.tags_from_embeddings(emb)]
