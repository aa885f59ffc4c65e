"""Rule-based reading and editing of captions over the attribute vocabularies.

The engine of the offline ``rules`` LLM (:mod:`agentcir.components.llms.rules`). It knows
six slots, each backed by a vocabulary of ``agentcir/data/vocab`` (or a user folder):
``article`` (garment / product type), ``colour``, ``gender``, ``usage``, ``pattern`` and
``object`` (COCO-style things plus text / logo). It

- finds attribute mentions in a caption (:meth:`Lexicon.parse_caption`): longest match
  first, ties broken by slot priority (``casual shoes`` is an article, not the usage
  ``casual``); a gender word counts as the item's gender only when possessive
  (``men's``), after ``for`` or right before the item noun, else it is a person;
- reads a modification (:meth:`Lexicon.parse_modification`) into :class:`Edit` s: set a
  slot (``make it blue``, ``a dress instead of a skirt``, ``change it from women's to
  men's``), remove a value (``without stripes``, ``not red``), add or remove objects
  (``add a dog``, ``no people``, ``remove the logo``), plus unrecognised ``with ...``
  phrases kept verbatim;
- applies edits to a caption's text (:func:`apply_edits`) in place: a replaced value
  takes the old one's position and form (``men's`` -> ``women's``, ``for men`` -> ``for
  women``), a new value goes where English puts it (colour, pattern, gender, usage before
  the noun; ``for <gender>`` after it), articles are re-chosen (a/an).

It is deliberately small and literal: no world knowledge, no synonyms beyond the
vocabularies, no relations between objects. What it does not understand it leaves out
and reports (``Modification.understood``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from ...framework.vocab import Vocabulary, load_vocab

SLOT_VOCAB = {
    "article": "articles",
    "colour": "colours",
    "gender": "genders",
    "usage": "usages",
    "object": "objects",
    "pattern": "patterns",
}
#: ties between vocabularies (same span length): the earlier slot wins
PRIORITY = ("article", "colour", "gender", "usage", "object", "pattern")
#: single-valued attributes of an item, in the order they precede its noun in English
CHAIN_ORDER = {"colour": 0, "pattern": 1, "gender": 2, "usage": 3}
ATTRIBUTES = ("colour", "pattern", "gender", "usage", "article")

GENDER_FORMS = {
    "men": ("men's", "men"),
    "women": ("women's", "women"),
    "boys": ("boys'", "boys"),
    "girls": ("girls'", "girls"),
    "unisex": ("unisex", "everyone"),
}
USAGE_ADJ = {"sports": "sporty"}
PATTERN_ADJ = {"solid": "plain", "polka dot": "polka-dot"}
MASS_NOUNS = {"text", "lettering", "writing", "words"}
#: removing these from a garment makes it plain
PRINT_OBJECTS = {"text", "logo"}
PRINT_PATTERNS = {"graphic", "printed"}
PAIR_NOUNS = (
    "jeans",
    "shorts",
    "trousers",
    "heels",
    "flats",
    "sandals",
    "flip flops",
    "socks",
    "shoes",
    "sunglasses",
    "briefs",
    "pants",
    "capris",
    "leggings",
    "tights",
    "stockings",
    "gloves",
    "cufflinks",
)
_PHOTO_PREFIX = re.compile(
    r"^\s*(?:a|an)\s+(?:photo|picture|image|photograph|product photo|close-up photo)\s+of\s+", re.I
)

# modification cues ----------------------------------------------------------------------
_BOUNDARY = re.compile(r",|;|\.(?!\d)|!|\?|\bbut\b|\band\b|\bto\b|\bfor\b|\binto\b|\bwith\b|\bthen\b|\bplease\b|->|→")
_STRONG_NEG = re.compile(
    r"\b(?:not|no longer|no more|instead of|rather than|less|without|no|remove|removing|delete|minus|"
    r"except|other than|isn't|aren't|isnt|arent|don't want|do not want|dont want|never|lose|drop|"
    r"get rid of|take away|take off|take out)\b"
)
_WEAK_NEG = re.compile(
    r"\b(?:from|change|changing|turn|turning|swap|swapping|replace|replacing|switch|switching|convert|converting)\b"
)
_ADD_VERBS = r"add|adding|added|put|putting|include|including|insert|with|plus|featuring|has|have|having|show|showing"
_REMOVE_VERBS = (
    r"remove|removing|removed|delete|deleting|without|no|minus|drop|dropping|erase|erasing|exclude|excluding|"
    r"take away|take out|take off|get rid of|free of|lose|w/o"
)
_DETS = r"(?:(?:a|an|the|some|any|all|its|his|her|their|more|other|of|one|two|three|several|many)\s+)*"
_PREPOSITIONS = (
    r"on|in|at|under|near|by|beside|behind|above|below|next to|in front of|on top of|inside|holding|wearing|carrying"
)
_EXTRA_PHRASE = re.compile(
    r"\b(with|without|featuring)\s+([a-z][a-z' -]*?)\s*(?=,|;|\.|!|\?|\band\b|\bbut\b|\bplease\b|$)"
)
_STOP = set(
    "a an the it its this that one ones some of in on at for to and or but with please make made i i'd id want "
    "would like need show me same kind type version thing something more less is be should can could just "
    "instead rather than change turn into not no also prefer preferred colour color shade style same as "
    "version like looking look get give have has pair".split()
)


@dataclass(frozen=True)
class Mention:
    """A vocabulary term found in a text: ``text[start:end]`` means ``value`` of ``slot``."""

    start: int
    end: int
    slot: str
    value: str
    text: str


@dataclass(frozen=True)
class Edit:
    """One change of the item: ``op`` is ``set`` (a single-valued slot), ``add`` or ``remove``.

    ``values`` are the new values (``set``/``add``) or the removed ones (``remove``);
    ``old`` the values a ``set`` replaces, when the modification names them.
    """

    slot: str
    op: str
    values: tuple[str, ...]
    old: tuple[str, ...] = ()

    def describe(self) -> str:
        """The edit as a short instruction, e.g. ``change the colour from green to blue``."""
        new = " and ".join(self.values)
        if self.slot == "object" and self.op == "set":
            olds = " and ".join(object_phrase(v, definite=True) for v in self.old)
            return f"replace {olds} with {' and '.join(object_phrase(v) for v in self.values)}"
        if self.slot == "object" or (self.slot == "article" and self.op in ("add",)):
            verb = "add" if self.op == "add" else "remove"
            return f"{verb} {' and '.join(object_phrase(v, definite=self.op == 'remove') for v in self.values)}"
        if self.op == "remove":
            what = {
                "colour": "the colour",
                "pattern": "the pattern",
                "usage": "the style",
                "gender": "the gender",
                "article": "the item type",
            }[self.slot]
            return f"remove {what} {new}" if self.slot != "article" else f"not {with_article(new)}"
        old = " and ".join(self.old)
        if self.slot == "colour":
            return f"change the colour from {old} to {new}" if old else f"make it {new}"
        if self.slot == "article":
            return f"change the {old} into {with_article(new)}" if old else f"make it {with_article(new)}"
        if self.slot == "gender":
            return f"change it from {old} to {new}" if old else f"make it for {GENDER_FORMS.get(new, (new, new))[1]}"
        if self.slot == "usage":
            adj = USAGE_ADJ.get(new, new)
            return f"make it {adj} instead of {USAGE_ADJ.get(old, old)}" if old else f"make it {adj}"
        adj = PATTERN_ADJ.get(new, new)
        return f"make it {adj} instead of {PATTERN_ADJ.get(old, old)}" if old else f"make it {adj}"


@dataclass
class Modification:
    """A parsed modification: its edits, unrecognised ``with ...`` phrases, and whether
    anything at all was understood."""

    text: str
    edits: list[Edit] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)

    @property
    def understood(self) -> bool:
        return bool(self.edits or self.extras)

    def descriptions(self) -> list[str]:
        return [e.describe() for e in self.edits] + list(self.extras)


@dataclass
class ParsedCaption:
    """A caption's mentions; ``head`` is the item noun (first article, else first object);
    ``absent`` the object values it negates (``without text``)."""

    text: str
    mentions: list[Mention]
    head: Mention | None
    absent: set[str] = field(default_factory=set)

    def of(self, slot: str) -> list[Mention]:
        return [m for m in self.mentions if m.slot == slot]

    def values(self, slot: str) -> list[str]:
        return list(dict.fromkeys(m.value for m in self.of(slot)))

    def first(self, slot: str) -> str | None:
        vals = self.values(slot)
        return vals[0] if vals else None

    @property
    def head_noun(self) -> str:
        return self.head.value if self.head is not None else "item"

    def attributes(self) -> dict[str, list[str]]:
        return {s: self.values(s) for s in (*ATTRIBUTES, "object")}


# -- English helpers ----------------------------------------------------------------------
def _an(word: str) -> str:
    w = word.lower()
    if w.startswith(("uni", "use", "usu", "eu", "one", "u-")):
        return "a"
    if w.startswith(("hour", "honest", "heir")):
        return "an"
    return "an" if w[:1] in "aeiou" else "a"


def is_pair(noun: str) -> bool:
    return any(noun.endswith(p) for p in PAIR_NOUNS)


def with_article(noun: str) -> str:
    """``t-shirt`` -> ``a t-shirt``; ``jeans`` -> ``a pair of jeans``; ``text`` -> ``text``."""
    if noun in MASS_NOUNS:
        return noun
    if is_pair(noun):
        return noun if noun.endswith(("briefs", "socks")) else f"a pair of {noun}"
    return f"{_an(noun)} {noun}"


def object_phrase(value: str, *, definite: bool = False) -> str:
    if value in MASS_NOUNS:
        return value
    if value == "person":
        return "the people" if definite else "a person"
    if definite:
        return f"the {value}"
    return with_article(value)


def fix_articles(text: str) -> str:
    """Re-choose every ``a``/``an`` for the word after it."""

    def sub(m: re.Match) -> str:
        art = _an(m.group(3))
        return (art.capitalize() if m.group(1)[0].isupper() else art) + m.group(2) + m.group(3)

    return re.sub(r"\b(a|an|A|An)\b(\s+)([\w'-]+)", sub, text)


def tidy(text: str) -> str:
    t = re.sub(r"\s+", " ", text)
    t = re.sub(r"\s+([,.;!?])", r"\1", t)
    t = re.sub(r",\s*,", ",", t)
    t = re.sub(r"\b(with|and|for|in)\s*([,.;]|$)", r"\2", t)
    return fix_articles(t.strip(" ,;"))


# -- the lexicon ----------------------------------------------------------------------------
class Lexicon:
    """The six vocabularies and the parsers built on them.

    Args:
        vocab_dir: a folder with ``articles.txt``, ``colours.txt``, ... (default: the bundled ones).
    """

    def __init__(self, vocab_dir: str | Path | None = None):
        self.vocab_dir = vocab_dir
        self.vocabs: dict[str, Vocabulary] = {slot: load_vocab(name, vocab_dir) for slot, name in SLOT_VOCAB.items()}
        self._regex = {slot: self._compile(v, plural=slot in ("object", "article")) for slot, v in self.vocabs.items()}
        add_terms = self._alternatives(self.vocabs["object"], self.vocabs["article"])
        obj_terms = self._alternatives(self.vocabs["object"])
        self._add = re.compile(rf"\b(?:{_ADD_VERBS})\s+{_DETS}(?P<obj>{add_terms})(?:e?s)?(?![\w-])")
        self._remove = re.compile(rf"(?<![\w-])(?:{_REMOVE_VERBS})\s+{_DETS}(?P<obj>{obj_terms})(?:e?s)?(?![\w-])")

    @staticmethod
    def _alternatives(*vocabs: Vocabulary) -> str:
        syns = {s for v in vocabs for syns in v.terms.values() for s in syns}
        return "|".join(re.escape(s) for s in sorted(syns, key=len, reverse=True))

    def _compile(self, vocab: Vocabulary, plural: bool) -> re.Pattern:
        suffix = r"(?:e?s)?" if plural else ""
        return re.compile(rf"(?<![\w-])(?:{self._alternatives(vocab)}){suffix}(?![\w-])")

    def canonical(self, slot: str, text: str) -> str | None:
        v = self.vocabs[slot]
        t = text.lower().strip()
        for cand in (t, t[:-1] if t.endswith("s") else None, t[:-2] if t.endswith("es") else None):
            if cand:
                c = v.normalize(cand)
                if c is not None:
                    return c
        return None

    def synonyms(self, slot: str, value: str) -> list[str]:
        """Natural alternative names of ``value`` (plural forms of singular terms left out)."""
        terms = self.vocabs[slot].terms.get(value, (value,))

        def plural(t: str) -> bool:
            return (t.endswith("s") and t[:-1] in terms) or (t.endswith("es") and t[:-2] in terms)

        out = [t for t in terms[1:] if not plural(t)]
        return [t for t in out if t != value]

    # -- finding mentions --------------------------------------------------------------------
    def mentions(
        self, text: str, slots: tuple[str, ...] = PRIORITY, taken: list[tuple[int, int]] | None = None
    ) -> list[Mention]:
        """Non-overlapping vocabulary mentions in ``text`` (longest first, then slot priority)."""
        low = text.lower()
        cands = []
        for slot in slots:
            for m in self._regex[slot].finditer(low):
                value = self.canonical(slot, m.group(0))
                if value is not None:
                    cands.append(Mention(m.start(), m.end(), slot, value, text[m.start() : m.end()]))
        cands.sort(key=lambda c: (-(c.end - c.start), PRIORITY.index(c.slot), c.start))
        used = [False] * len(low)
        for a, b in taken or ():
            for i in range(a, b):
                used[i] = True
        out = []
        for c in cands:
            if not any(used[c.start : c.end]):
                out.append(c)
                for i in range(c.start, c.end):
                    used[i] = True
        return sorted(out, key=lambda c: c.start)

    # -- captions ----------------------------------------------------------------------------
    def parse_caption(self, caption: str) -> ParsedCaption:
        """The mentions of ``caption``, with the item noun and the negated objects."""
        found = self.mentions(caption)
        head = next((m for m in found if m.slot == "article"), None)
        out: list[Mention] = []
        for i, m in enumerate(found):
            if m.slot == "gender" and not self._item_gender(caption, m, found, i):
                person = self.canonical("object", m.text)
                if person is None:
                    continue
                m = replace(m, slot="object", value=person)
            out.append(m)
        if head is None:
            head = next((m for m in out if m.slot == "object"), None)
        absent = set()
        low = caption.lower()
        for m in out:
            if m.slot in ("object", "article") and m is not head:
                before = low[max(0, m.start - 24) : m.start]
                if re.search(r"\b(?:without|no|free of|not|minus)\s+(?:\w+\s+)?$", before):
                    absent.add(m.value)
        return ParsedCaption(caption, out, head, absent)

    @staticmethod
    def _item_gender(text: str, m: Mention, found: list[Mention], i: int) -> bool:
        t = m.text.lower()
        if t.endswith(("'s", "'", "’s")) or t in ("mens", "womens", "unisex"):
            return True
        if re.search(r"\bfor\s+(?:the\s+)?$", text[max(0, m.start - 10) : m.start].lower()):
            return True
        nxt = found[i + 1] if i + 1 < len(found) else None
        return nxt is not None and nxt.slot in ("article", "usage", "pattern") and not text[m.end : nxt.start].strip()

    # -- modifications -------------------------------------------------------------------------
    def parse_modification(self, text: str) -> Modification:
        """The edits a modification asks for (see the module docstring)."""
        low = " ".join(text.lower().replace("’", "'").split())
        edits: list[Edit] = []
        taken: list[tuple[int, int]] = []
        adds: list[str] = []
        removes: list[str] = []
        for rx, bucket in ((self._remove, removes), (self._add, adds)):
            for m in rx.finditer(low):
                if any(a < m.end() and m.start() < b for a, b in taken):
                    continue
                obj = m.group("obj")
                value = (
                    self.canonical("object", obj)
                    if bucket is removes
                    else (self.canonical("object", obj) or self.canonical("article", obj))
                )
                if value is None:
                    continue
                bucket.append(value)
                taken.append((m.start(), m.end()))
        found = self.mentions(low, taken=taken)
        pos: dict[str, list[str]] = {}
        strong: dict[str, list[str]] = {}
        weak: dict[str, list[str]] = {}
        for m in found:
            pol = self._polarity(low, m)
            bucket = pos if pol == "pos" else strong if pol == "neg" else weak
            bucket.setdefault(m.slot, []).append(m.value)
        for slot in ("article", "colour", "gender", "usage", "pattern"):
            p = list(dict.fromkeys(pos.get(slot, [])))
            olds = list(dict.fromkeys(strong.get(slot, []) + weak.get(slot, [])))
            if slot == "pattern" and len(p) > 1:
                p = [v for v in p if v != "printed"] or p
            if slot != "colour":
                p = p[:1]
            if p:
                edits.append(Edit(slot, "set", tuple(p), tuple(o for o in olds if o not in p)))
            elif strong.get(slot):
                vals = tuple(dict.fromkeys(strong[slot]))
                if slot == "article":
                    edits.append(Edit("article", "remove", vals))
                else:
                    edits.append(Edit(slot, "remove", vals))
        obj_pos = [v for v in pos.get("object", [])]
        obj_neg = list(dict.fromkeys(strong.get("object", []) + (weak.get("object", []) if obj_pos else [])))
        if obj_pos and obj_neg:
            edits.append(Edit("object", "set", tuple(dict.fromkeys(obj_pos)), tuple(obj_neg)))
        else:
            adds += obj_pos
            removes += obj_neg
        if removes:
            edits.append(Edit("object", "remove", tuple(dict.fromkeys(removes))))
        if adds:
            edits.append(Edit("object", "add", tuple(dict.fromkeys(a for a in adds if a not in removes))))
        extras = self._extras(low, taken + [(m.start, m.end) for m in found])
        return Modification(text, [e for e in edits if e.values], extras)

    @staticmethod
    def _polarity(low: str, m: Mention) -> str:
        start = 0
        for b in _BOUNDARY.finditer(low, 0, m.start):
            start = b.end()
        prefix = low[start : m.start]
        if _STRONG_NEG.search(prefix):
            return "neg"
        if _WEAK_NEG.search(prefix):
            return "weak"
        return "pos"

    @staticmethod
    def _extras(low: str, covered: list[tuple[int, int]]) -> list[str]:
        out = []
        for m in _EXTRA_PHRASE.finditer(low):
            if any(a < m.end() and m.start() < b for a, b in covered):
                continue
            words = [w for w in re.findall(r"[a-z']+", m.group(2)) if w not in _STOP]
            if words:
                out.append(f"{m.group(1)} {m.group(2).strip()}")
        return out


# -- applying edits ---------------------------------------------------------------------------
def _render(slot: str, value: str, form: str = "pre") -> str:
    if slot == "gender":
        return GENDER_FORMS.get(value, (value, value))[0 if form == "pre" else 1]
    if slot == "usage":
        return USAGE_ADJ.get(value, value)
    if slot == "pattern":
        return PATTERN_ADJ.get(value, value)
    return value


def _gender_form(text: str, m: Mention) -> str:
    t = m.text.lower()
    if t.endswith(("'s", "'", "’s")) or t in ("mens", "womens"):
        return "pre"
    if re.search(r"\bfor\s+(?:the\s+)?$", text[max(0, m.start - 10) : m.start].lower()):
        return "post"
    return "pre"


class _Editor:
    """Applies edits to one caption, keeping mention offsets valid between edits."""

    def __init__(self, lex: Lexicon, caption: str):
        self.lex = lex
        self.text = caption.strip()
        self.end_punct = ""
        if self.text.endswith("."):
            self.text, self.end_punct = self.text[:-1].rstrip(), "."

    def parsed(self) -> ParsedCaption:
        return self.lex.parse_caption(self.text)

    def _splice(self, a: int, b: int, new: str) -> None:
        self.text = self.text[:a] + new + self.text[b:]

    def _chain(self, p: ParsedCaption) -> list[Mention]:
        """Modifier mentions right before the head noun (colour, pattern, gender's, usage)."""
        if p.head is None:
            return []
        chain: list[Mention] = []
        idx = p.mentions.index(p.head)
        pos = p.head.start
        for m in reversed(p.mentions[:idx]):
            gap = self.text[m.end : pos].strip().lower()
            if m.slot in CHAIN_ORDER and gap in ("", ",", "and", "&", "/", "-"):
                chain.insert(0, m)
                pos = m.start
            else:
                break
        return chain

    def _insert_modifier(self, slot: str, word: str) -> None:
        p = self.parsed()
        if p.head is None:
            self.text = f"{self.text} in {word}" if slot == "colour" else f"{self.text}, {word}"
            return
        order = CHAIN_ORDER[slot]
        at = p.head.start
        for m in self._chain(p):
            if CHAIN_ORDER[m.slot] > order:
                at = m.start
                break
        self._splice(at, at, f"{word} ")

    def _delete_mention(self, m: Mention) -> None:
        a, b = m.start, m.end
        before = self.text[:a]
        joined = re.search(r"(?:\s+(?:and|&|/)\s*|\s*[/,]\s*)$", before)
        if m.slot == "gender" and re.search(r"\bfor\s+(?:the\s+)?$", before.lower()):
            a = re.search(r"\s*\bfor\s+(?:the\s+)?$", before, re.I).start()
        elif joined and m.slot == "colour":
            a = joined.start()
        self._splice(a, b, "")

    def set_slot(self, e: Edit) -> None:
        p = self.parsed()
        have = [m for m in p.of(e.slot) if e.slot != "article" or m is p.head]
        if e.slot == "article":
            self._set_article(e, p)
            return
        new_pre = " and ".join(_render(e.slot, v) for v in e.values)
        if have:
            target = next((m for m in have if m.value in e.old), have[0])
            if (
                all(v in [m.value for m in have] for v in e.values)
                and len(have) == len(e.values)
                and not (set(e.old) & {m.value for m in have})
            ):
                return  # already so
            # drop the other values of the slot (e.g. the "white" of "black and white")
            for m in sorted((m for m in have if m is not target), key=lambda m: -m.start):
                self._delete_mention(m)
            target = next(m for m in self.parsed().of(e.slot) if m.value == target.value)
            form = _gender_form(self.text, target) if e.slot == "gender" else "pre"
            new = " and ".join(_render(e.slot, v, form) for v in e.values)
            self._splice(target.start, target.end, new)
            return
        if e.slot == "gender":
            if p.head is None:
                self.text = f"{self.text} for {_render('gender', e.values[0], 'post')}"
            else:
                self._splice(p.head.end, p.head.end, f" for {_render('gender', e.values[0], 'post')}")
            return
        self._insert_modifier(e.slot, new_pre)

    def _set_article(self, e: Edit, p: ParsedCaption) -> None:
        new = e.values[0]
        target = next((m for m in p.of("article") if m.value in e.old), None) or p.head
        if target is None or target.slot not in ("article",) and not e.old:
            if target is None:
                self.text = f"{self.text}, {with_article(new)}"
                return
        if target.value == new:
            return
        self._splice(target.start, target.end, new)
        # "a pair of X" <-> "a X"
        before = self.text[: target.start]
        m = re.search(r"\b(a|an)\s+pair\s+of\s+((?:[\w'-]+\s+){0,4})$", before, re.I)
        if m and not is_pair(new):
            self._splice(m.start(), m.end(), f"a {m.group(2)}")

    def remove_slot(self, e: Edit) -> None:
        p = self.parsed()
        if e.slot == "article":
            for v in e.values:
                p = self.parsed()
                if p.head is not None and p.head.slot == "article" and p.head.value == v:
                    self._splice(p.head.start, p.head.end, "item")
                else:
                    self._remove_object(v)
            return
        for m in sorted((m for m in p.of(e.slot) if m.value in e.values), key=lambda m: -m.start):
            self._delete_mention(m)

    def _remove_object(self, value: str) -> bool:
        p = self.parsed()
        for m in sorted(
            (
                m
                for m in p.mentions
                if m.value == value and m is not p.head and m.slot in ("object", "article", "pattern")
            ),
            key=lambda m: -m.start,
        ):
            if value in p.absent:
                continue
            before = self.text[: m.start]
            conn = re.search(rf"(?:,\s*|\s+)(?:with|and|&|,|featuring|plus|{_PREPOSITIONS})\s+{_DETS}$", before, re.I)
            if conn:
                self._splice(conn.start(), m.end, "")
            else:
                det = re.search(rf"\b{_DETS}$", before, re.I)
                self._splice(det.start() if det else m.start, m.end, "")
            return True
        return False

    def replace_head(self, olds: Sequence[str], new: str) -> bool:
        """Replace the item noun when it is one of ``olds`` (``a dog on a couch`` -> ``a cat on a couch``)."""
        p = self.parsed()
        if p.head is None or p.head.value not in olds:
            return False
        self._splice(p.head.start, p.head.end, "person" if new == "person" else new)
        for old in olds:
            if old != p.head.value:
                self._remove_object(old)
        return True

    def add_object(self, value: str) -> None:
        p = self.parsed()
        if value in p.absent:
            neg = next(m for m in p.mentions if m.value == value)
            before = self.text[: neg.start]
            cue = re.search(rf"(?:,\s*|\s+)(?:without|no|free of|minus)\s+{_DETS}$", before, re.I)
            self._splice(cue.start() if cue else neg.start, neg.end, "")
        elif any(m.value == value for m in p.mentions if m is not p.head):
            return
        elif p.head is not None and p.head.value == value:
            return
        phrase = with_article(value) if value != "person" else "a person"
        joiner = " and " if re.search(r"\bwith\s+[^,;]*$", self.text, re.I) else " with "
        self.text = f"{self.text}{joiner}{phrase}"

    def remove_object(self, value: str, garment: bool) -> None:
        self._remove_object(value)
        p = self.parsed()
        if value in PRINT_OBJECTS and garment:
            printed = [m for m in p.of("pattern") if m.value in PRINT_PATTERNS]
            if printed:
                self._splice(printed[0].start, printed[0].end, "plain")
            elif not p.of("pattern"):
                self._insert_modifier("pattern", "plain")
            p = self.parsed()
        if value not in p.absent:
            what = "people" if value == "person" else value if value in MASS_NOUNS else with_article(value)
            self.text = f"{self.text} without {what}"

    def result(self) -> str:
        return tidy(self.text) + self.end_punct


def apply_edits(lex: Lexicon, caption: str, mod: Modification) -> str:
    """``caption`` edited by ``mod`` (its unrecognised ``with ...`` phrases appended)."""
    ed = _Editor(lex, caption)
    garment = ed.parsed().head is not None and ed.parsed().head.slot == "article"
    for e in mod.edits:
        if e.slot == "object" or (e.slot == "article" and e.op == "add"):
            if e.op == "set":
                if not ed.replace_head(e.old, e.values[0]):
                    for old in e.old:
                        ed._remove_object(old)
                    for v in e.values:
                        ed.add_object(v)
            elif e.op == "add":
                for v in e.values:
                    ed.add_object(v)
            else:
                for v in e.values:
                    ed.remove_object(v, garment)
        elif e.op == "set":
            ed.set_slot(e)
        else:
            ed.remove_slot(e)
    for extra in mod.extras:
        if extra.lower() not in ed.text.lower():
            ed.text = f"{ed.text} {extra}"
    return ed.result()


def strip_photo_prefix(caption: str) -> str:
    """``a photo of a red dress`` -> ``a red dress``."""
    return _PHOTO_PREFIX.sub("", caption.strip()).strip()
