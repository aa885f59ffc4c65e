"""Zero-shot tagging with any :class:`~agentcir.framework.interfaces.Encoder` against the
attribute vocabularies (``agentcir/data/vocab``), shared by the offline captioner
(``captioner=tagger``), detector (``detector=crop_tagger``) and verifier
(``verifier=contrast``).

Each vocabulary term becomes a prompt (``"a photo of a {}"`` for articles, ...), or an
ensemble of prompts separated by ``|`` whose embeddings are averaged (colours: ``"a photo
of a {} item|a {} product|a photo of something {}"``); an image is scored against every
term of a vocabulary by cosine similarity, turned into probabilities with a softmax at
``temperature``. Prompt texts are embedded once per encoder identity and reused by
every component in the process (:func:`embed_texts_once`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ...framework.errors import InputError
from ...framework.hashing import stable_hash
from ...framework.interfaces import l2_normalize
from ...framework.vocab import VOCAB_DIR, Vocabulary, load_vocab

#: default zero-shot prompt per bundled vocabulary (``{}`` = the term)
DEFAULT_PROMPTS: dict[str, str] = {
    "colours": "a photo of a {} item|a {} product|a photo of something {}",
    "articles": "a photo of a {}",
    "genders": "a photo of a product for {}",
    "usages": "a photo of a {} outfit",
    "patterns": "a photo of a {} item",
    "objects": "a photo of a {}",
}
#: prompt for a vocabulary without an entry in ``DEFAULT_PROMPTS`` (a user's own file)
FALLBACK_PROMPT = "a photo of {}"

_TEXT_CACHE: "OrderedDict[tuple[str, str], np.ndarray]" = OrderedDict()
_TEXT_LOCK = threading.Lock()
_TEXT_CACHE_SIZE = 256


def embed_texts_once(encoder: Any, texts: Sequence[str]) -> np.ndarray:
    """``encoder.encode_texts(texts)``, memoised per (encoder identity, texts).

    Vocabulary prompts are embedded once per encoder and shared by every component of
    the process (LRU of the last 256 text lists).
    """
    key = (encoder.identity, stable_hash(list(texts)))
    with _TEXT_LOCK:
        hit = _TEXT_CACHE.get(key)
        if hit is not None:
            _TEXT_CACHE.move_to_end(key)
            return hit
    emb = np.asarray(encoder.encode_texts(list(texts), progress=False), np.float32)
    emb.setflags(write=False)
    with _TEXT_LOCK:
        _TEXT_CACHE[key] = emb
        while len(_TEXT_CACHE) > _TEXT_CACHE_SIZE:
            _TEXT_CACHE.popitem(last=False)
    return emb


def softmax(x: np.ndarray, temperature: float) -> np.ndarray:
    z = np.asarray(x, np.float64) / temperature
    z -= z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def templates(prompt: str) -> list[str]:
    """The templates of a prompt ensemble ``"a photo of a {}|a {} product"``."""
    return [t.strip() for t in prompt.split("|") if t.strip()]


def check_prompt(prompt: str, where: str) -> str:
    """``prompt`` if every template of it has exactly one ``{}``, else an error naming it."""
    if not templates(prompt) or any(t.count("{}") != 1 for t in templates(prompt)):
        raise InputError(
            f"{where}: a zero-shot prompt needs exactly one '{{}}' where the term goes "
            f"(in each '|'-separated template), got {prompt!r}"
        )
    return prompt


@dataclass(frozen=True)
class LabelSet:
    """Labels (canonical terms) with their prompt embeddings ``[L, d]``."""

    names: tuple[str, ...]
    vocab_of: tuple[str, ...]  # the vocabulary each label comes from
    emb: np.ndarray


class ZeroShot:
    """Scores images (or their embeddings) against vocabulary prompts.

    Args:
        encoder: any Encoder.
        vocab_dir: folder of vocabulary files (``""``: the bundled ones).
        prompts: per-vocabulary prompt overrides (``{"colours": "a {} garment|a {} product"}``).
        temperature: softmax temperature over cosine similarities (CLIP's is 0.01).
        synonyms: embed every synonym of a term too and average them with the canonical
            term's prompts, instead of the canonical term only.
        where: names the owning component in error messages.
    """

    def __init__(
        self,
        encoder: Any,
        *,
        vocab_dir: str = "",
        prompts: Mapping[str, str] | None = None,
        temperature: float = 0.01,
        synonyms: bool = False,
        where: str = "zero-shot tagger",
    ):
        if temperature <= 0:
            raise InputError(f"{where}: temperature must be positive, got {temperature}")
        self.encoder = encoder
        self.vocab_dir = vocab_dir or str(VOCAB_DIR)
        self.prompts = {k: check_prompt(v, f"{where}: prompt for '{k}'") for k, v in (prompts or {}).items()}
        self.temperature = float(temperature)
        self.synonyms = bool(synonyms)
        self.where = where
        self._sets: dict[tuple[str, ...], LabelSet] = {}
        self._lock = threading.Lock()

    def vocabulary(self, name: str) -> Vocabulary:
        return load_vocab(name, self.vocab_dir)

    def prompt_for(self, vocab: str) -> str:
        return self.prompts.get(vocab) or DEFAULT_PROMPTS.get(vocab) or FALLBACK_PROMPT

    def phrases(self, vocab: str, term: str) -> list[str]:
        """The prompt texts of ``term`` from vocabulary ``vocab`` (one per template)."""
        return [t.replace("{}", term) for t in templates(self.prompt_for(vocab))]

    def labels(self, *vocabs: str) -> LabelSet:
        """The label set of one or several vocabularies (a term listed twice is kept once)."""
        key = tuple(vocabs)
        with self._lock:
            hit = self._sets.get(key)
        if hit is not None:
            return hit
        names: list[str] = []
        origin: list[str] = []
        groups: list[list[str]] = []
        for v in vocabs:
            voc = self.vocabulary(v)
            for term, syns in voc.terms.items():
                if term in names:
                    continue
                names.append(term)
                origin.append(v)
                groups.append([p for s in (syns if self.synonyms else (term,)) for p in self.phrases(v, s)])
        if not names:
            raise InputError(f"{self.where}: vocabularies {', '.join(vocabs)} hold no terms")
        flat = [t for g in groups for t in g]
        emb = embed_texts_once(self.encoder, flat)
        if len(flat) > len(groups):  # ensembles: average each term's prompts
            bounds = np.cumsum([0, *map(len, groups)])
            emb = l2_normalize(np.stack([emb[a:b].mean(0) for a, b in zip(bounds[:-1], bounds[1:])]))
        out = LabelSet(tuple(names), tuple(origin), emb)
        with self._lock:
            self._sets[key] = out
        return out

    def probs(self, image_emb: np.ndarray, *vocabs: str) -> tuple[LabelSet, np.ndarray]:
        """Softmax probabilities ``[n, L]`` of each image over the labels of ``vocabs``."""
        ls = self.labels(*vocabs)
        sims = np.atleast_2d(np.asarray(image_emb, np.float32)) @ ls.emb.T
        return ls, softmax(sims, self.temperature)

    def embed_images(self, images: Sequence) -> np.ndarray:
        """Embeddings of images (paths or PIL images); an undecodable image is an error."""
        from ...framework.images import ImageDecodeError, load_rgb

        decoded = [load_rgb(im) for im in images]  # raises ImageDecodeError naming the path
        emb = self.encoder.encode_images(decoded, progress=False)
        if len(emb) != len(decoded):  # pragma: no cover - decoded images cannot be skipped
            raise ImageDecodeError(f"{self.where}: the encoder skipped {len(decoded) - len(emb)} image(s)")
        return emb

    def identity(self) -> str:
        """Hash of the vocabulary files' contents and the prompts (for component identities)."""
        from pathlib import Path

        files = sorted(Path(self.vocab_dir).glob("*.txt"))
        return stable_hash(
            [(p.name, p) for p in files], {v: self.prompt_for(v) for v in DEFAULT_PROMPTS}, self.prompts, n=16
        )
