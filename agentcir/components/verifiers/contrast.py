"""``verifier=contrast``: the offline verifier. Judges statements by encoder contrast on the
candidate's image embedding (or its caption's text embedding).

The rule (:meth:`ContrastVerifier.check`):

1. Find the vocabulary terms the statement mentions (colours, patterns, articles,
   genders, usages, objects; found by the rules engine of the offline LLM,
   :meth:`agentcir.components.llms.edits.Lexicon.mentions`: plurals too, the longest
   match wins, then its slot priority).
2. For each mention, build the statement with that term replaced by every value of its
   vocabulary ("a photo of a blue shirt" -> "... a red shirt", "... a green shirt", ...).
   The mention holds when the statement's own value ranks within the ``top_k`` most
   similar to the candidate among all of them (a tie counts against it: an encoder that
   cannot tell the values apart does not confirm the statement).
3. A mention preceded (within its clause, at most 3 words back) by a negation ("not",
   "no", "without", "remove", "...n't") is judged on the positive statement ("without
   stripes" -> "with stripes") and the answer inverted.
4. The statement is true when every mention holds. A statement mentioning no
   vocabulary term is contrasted with its explicit negation (``negation``, default
   "it is not true that {}"): true when the statement is the more similar of the two.

``verify(candidate, instruction, reference=...)`` reads the instruction into edits with
the rules engine of the offline LLM (:meth:`agentcir.components.llms.edits.Lexicon.parse_modification`:
"make it blue instead of red" sets the colour to blue, "without stripes" removes the
pattern striped, "add a dog" adds an object) and judges each edit on the candidate with
the vocabulary prompts of the offline captioner ("a photo of a blue item", ...): a value
set or added must rank within the ``top_k`` of its vocabulary (``object_top_k`` for
objects, several values widen it to their count), a removed value must not. An
instruction with no edit in ``vocabularies`` holds when the candidate is more similar to
it than the reference is (or, without a reference, by the negation contrast).

Honest and limited: text encoders handle negation and relations poorly; only
vocabulary attributes are judged with any reliability.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Iterable

import numpy as np

from ...framework.errors import InputError
from ...framework.hashing import file_digest
from ...framework.interfaces import Verifier
from ...registry import VERIFIERS
from ...registry.config import bounded
from ..captioners.zeroshot import ZeroShot, embed_texts_once
from ..llms.edits import PRIORITY, SLOT_VOCAB, Edit, Lexicon

#: words that negate the mention after them (plus any word ending in "n't")
NEGATIONS = frozenset(
    {
        "not",
        "no",
        "without",
        "non",
        "never",
        "nor",
        "remove",
        "removed",
        "removing",
        "minus",
        "lacks",
        "lacking",
        "free",
    }
)
#: words that end a negation's reach ("not red but blue": blue is not negated)
_CLAUSE_BREAKS = frozenset({"but", "and", "or", "with", "instead", "rather", "than"})
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
_POSITIVE = {"without": "with", "can't": "can", "won't": "will", "cannot": "can"}


@dataclass(frozen=True)
class Mention:
    start: int
    end: int
    term: str
    vocab: str
    negation: tuple[int, int] | None  # span of the negating word, if any


def find_mentions(text: str, lexicon: Lexicon, vocabs: Iterable[str]) -> list[Mention]:
    """Mentions of the vocabularies ``vocabs`` in ``text`` (found by the rules engine:
    plurals too, non-overlapping, longest first, then its slot priority), each with the span
    of the negation word that governs it, if any."""
    wanted = set(vocabs)
    slots = tuple(s for s in PRIORITY if SLOT_VOCAB[s] in wanted)
    return [
        Mention(m.start, m.end, m.value, SLOT_VOCAB[m.slot], _negation(text, m.start))
        for m in lexicon.mentions(text, slots)
    ]


def _negation(text: str, start: int) -> tuple[int, int] | None:
    prefix = text[:start]
    cut = max(prefix.rfind(p) for p in ",;.:!?")
    words = [m for m in _WORD.finditer(prefix) if m.start() > cut][-3:]
    for m in reversed(words):
        w = m.group(0).lower()
        if w in NEGATIONS or w.endswith("n't") or w == "cannot":
            return m.span()
        if w in _CLAUSE_BREAKS:
            return None
    return None


def positive_form(text: str, span: tuple[int, int]) -> str:
    """``text`` with the negation word at ``span`` turned positive ("without" -> "with",
    "isn't" -> "is", "not"/"no"/"remove" -> dropped)."""
    word = text[span[0] : span[1]]
    low = word.lower()
    if low in _POSITIVE:
        repl = _POSITIVE[low]
    elif low.endswith("n't"):
        repl = word[:-3]
    else:
        repl = ""
    return " ".join((text[: span[0]] + repl + text[span[1] :]).split())


@VERIFIERS.register("contrast")
class ContrastVerifier(Verifier):
    """Encoder contrast of a statement against its alternatives (see the module docstring).

    Config:
        vocabularies: vocabularies whose terms are judged (of the six the rules engine knows).
        top_k: a mention holds when its value ranks within the top ``top_k`` of its vocabulary.
        object_top_k: the same for objects an instruction adds or removes (a scene holds several).
        negation: template of a statement's explicit negation (``{}`` = the statement).
        vocab_dir: folder of vocabulary files (empty: the bundled ones).
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder",)

    @dataclass
    class Config:
        vocabularies: list[str] = field(
            default_factory=lambda: ["colours", "patterns", "articles", "genders", "usages", "objects"]
        )
        top_k: int = 1
        object_top_k: int = bounded(3, 1)
        negation: str = "it is not true that {}"
        vocab_dir: str = ""

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c = self.cfg
        where = "verifier 'contrast'"
        for name in ("top_k", "object_top_k"):
            if getattr(c, name) < 1:
                raise InputError(f"{where}: field '{name}' must be at least 1, got {getattr(c, name)}")
        if c.negation.count("{}") != 1:
            raise InputError(
                f"{where}: field 'negation' needs exactly one '{{}}' for the statement, got {c.negation!r}"
            )
        self.zs = ZeroShot(self.encoder, vocab_dir=c.vocab_dir, where=where)
        unknown = sorted(set(c.vocabularies) - set(SLOT_VOCAB.values()))
        if unknown:
            raise InputError(
                f"{where}: field 'vocabularies' names {', '.join(unknown)}; the verifier judges "
                f"{', '.join(SLOT_VOCAB.values())}"
            )
        self._by_name = {v: self.zs.vocabulary(v) for v in c.vocabularies}
        self._lexicon: Lexicon | None = None
        self._images: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def model_identity(self) -> str:
        return self.zs.identity()

    # -- embeddings ---------------------------------------------------------------------
    def _image_embedding(self, candidate: Path) -> np.ndarray:
        key = (
            (str(Path(candidate).resolve()), file_digest(candidate)) if Path(candidate).is_file() else (str(candidate),)
        )
        with self._lock:
            hit = self._images.get(key)
        if hit is None:
            hit = self.zs.embed_images([candidate])[0]
            with self._lock:
                self._images[key] = hit
                while len(self._images) > 1024:
                    self._images.popitem(last=False)
        return hit

    def _target(self, candidate: Path | None, caption: str | None) -> np.ndarray:
        if candidate is not None:
            return self._image_embedding(candidate)
        if caption:
            return embed_texts_once(self.encoder, [caption])[0]
        raise InputError("verifier 'contrast' needs the candidate image (candidate=) or its caption (caption=)")

    # -- the rule -----------------------------------------------------------------------
    def _mention_holds(self, text: str, m: Mention, target: np.ndarray) -> bool:
        values = self._by_name[m.vocab].canonical
        texts = [" ".join((text[: m.start] + v + text[m.end :]).split()) for v in values]
        sims = embed_texts_once(self.encoder, texts) @ target
        own = sims[values.index(m.term)]
        rank = int(np.sum(sims >= own)) - 1  # other values at least as similar (ties count against)
        return rank < self.cfg.top_k

    def _judge(self, text: str, target: np.ndarray) -> bool | None:
        """The mention rule; ``None`` when ``text`` mentions no vocabulary term."""
        mentions = find_mentions(text, self.lexicon, self._by_name)
        if not mentions:
            return None
        for m in mentions:
            if m.negation is None:
                ok = self._mention_holds(text, m, target)
            else:
                # judge the positive statement (offsets move with the removed word: find the term again)
                pos = positive_form(text, m.negation)
                again = next(
                    (
                        x
                        for x in find_mentions(pos, self.lexicon, self._by_name)
                        if x.term == m.term and x.vocab == m.vocab
                    ),
                    None,
                )
                ok = not (self._mention_holds(pos, again, target) if again else self._mention_holds(text, m, target))
            if not ok:
                return False
        return True

    def _rank(self, target: np.ndarray, vocab: str, value: str) -> int:
        """Other values of ``vocab`` at least as close to ``target`` as ``value`` (its prompt)."""
        ls, p = self.zs.probs(target, vocab)
        own = p[0, ls.names.index(value)]
        return int(np.sum(p[0] >= own)) - 1

    def _edit_holds(self, edit: Edit, target: np.ndarray) -> bool:
        vocab = SLOT_VOCAB[edit.slot]
        k = max(self.cfg.object_top_k if edit.slot == "object" else self.cfg.top_k, len(edit.values))
        ranks = [self._rank(target, vocab, v) for v in edit.values]
        if edit.op == "remove":
            return all(r >= k for r in ranks)
        return all(r < k for r in ranks)

    @property
    def lexicon(self) -> Lexicon:
        """The rules engine's reader of the vocabularies (built on first use)."""
        if self._lexicon is None:
            self._lexicon = Lexicon(self.cfg.vocab_dir or None)
        return self._lexicon

    def edits(self, instruction: str) -> list[Edit]:
        """The edits of ``instruction`` that this verifier judges (slots in ``vocabularies``)."""
        mod = self.lexicon.parse_modification(instruction)
        return [e for e in mod.edits if SLOT_VOCAB[e.slot] in self._by_name]

    def _negation_contrast(self, text: str, target: np.ndarray) -> bool:
        emb = embed_texts_once(self.encoder, [text, self.cfg.negation.replace("{}", text)])
        s = emb @ target
        return bool(s[0] > s[1])

    # -- the Verifier interface ---------------------------------------------------------------
    def check(self, statement: str, *, candidate: Path | None = None, caption: str | None = None) -> bool:
        """Is ``statement`` true of the candidate's image (or, without one, of its caption)?"""
        if not isinstance(statement, str) or not statement.strip():
            raise InputError(f"verifier 'contrast': the statement must be a non-empty text, got {statement!r}")
        target = self._target(candidate, caption)
        verdict = self._judge(statement, target)
        return self._negation_contrast(statement, target) if verdict is None else verdict

    def verify(
        self,
        candidate: Path,
        instruction: str,
        *,
        reference: Path | None = None,
        caption: str | None = None,
        reference_caption: str | None = None,
    ) -> bool:
        """Does the candidate satisfy ``instruction``? (its edits judged on the candidate;
        without edits, the candidate must be closer to the instruction than the reference)."""
        if not isinstance(instruction, str) or not instruction.strip():
            raise InputError(f"verifier 'contrast': the instruction must be a non-empty text, got {instruction!r}")
        target = self._target(candidate, caption)
        edits = self.edits(instruction)
        if edits:
            return all(self._edit_holds(e, target) for e in edits)
        if reference is not None:
            q = embed_texts_once(self.encoder, [instruction])[0]
            return bool(target @ q > self._image_embedding(reference) @ q)
        return self._negation_contrast(instruction, target)
