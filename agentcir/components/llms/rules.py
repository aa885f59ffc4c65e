"""The offline ``rules`` LLM: deterministic caption edits over the attribute vocabularies.

Honest and limited. It implements the text tasks of the task table
(:mod:`agentcir.framework.tasks`) directly with the rules of
:mod:`agentcir.components.llms.edits` — it reads no prompt file and knows nothing beyond
the vocabularies of ``agentcir/data/vocab`` (colours, articles, genders, usages, patterns,
objects). It handles the common phrasings of attribute edits (``make it blue``, ``in red
instead of green``, ``a dress instead of a skirt``, ``the women's version``, ``more
formal``, ``add a dog``, ``without text``, ``striped``) and nothing subtler: relations,
counts, viewpoints, comparatives (``darker``) and free-form requests are not understood;
the ``fallback`` setting says what then happens (by default the modification is appended
to the caption verbatim, and the modification list is the raw text). It cannot see:
``caption``, ``list_objects``, ``verify`` and ``answer`` raise :class:`NeedsVisionError`
(use a VLM backend, or the offline captioner / detector / verifier components), and the
optional reference image of ``target_caption`` is ignored.

Replies are the JSON / yes-no / true-false texts the task table promises, so callers
parse them exactly as they parse a real model's replies. A task a plugin registers
(:func:`agentcir.framework.tasks.register_task`) is answered by the task's offline
``replier``; a plugin task without one is refused when the recipe is composed.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Sequence

from ...framework.errors import InputError
from ...framework.hashing import file_digest, stable_hash
from ...framework.interfaces import LLM, ChatReply
from ...framework.vocab import VOCAB_DIR
from ...registry import LLMS, Choice
from .edits import (
    ATTRIBUTES,
    GENDER_FORMS,
    MASS_NOUNS,
    PATTERN_ADJ,
    SLOT_VOCAB,
    USAGE_ADJ,
    Lexicon,
    Modification,
    ParsedCaption,
    apply_edits,
    object_phrase,
    strip_photo_prefix,
    tidy,
    with_article,
)
from ...framework.tasks import TASKS, check_variables, find_task, offline_reply

#: bump when the rules change what they output (part of the identity, so caches refresh)
RULES_VERSION = "2"
VISION_TASKS = ("caption", "list_objects", "verify", "answer")


class NeedsVisionError(InputError):
    """The ``rules`` LLM was asked for a task that needs to see images."""


class Fallback(Choice):
    """What a modification the rules do not understand gives (config field ``fallback``)."""

    append = "append"
    keep = "keep"
    error = "error"


@LLMS.register("rules")
class RulesLLM(LLM):
    """Deterministic rule-based editor of captions (offline; see the module docstring).

    Config:
        vocab_dir: folder of the vocabularies (``colours.txt``, ``articles.txt``, ...);
            default: the bundled ``agentcir/data/vocab``.
        fallback: what a modification the rules do not understand gives: ``append`` (the
            caption followed by the modification text), ``keep`` (the caption unchanged) or
            ``error`` (raise an InputError naming the modification).
    """

    @dataclass
    class Config:
        vocab_dir: str | None = None
        fallback: Fallback = Fallback.append

    #: the built-in text tasks (plugin tasks: :meth:`can_serve`); no chat, tools or images
    supports: ClassVar[tuple[str, ...]] = tuple(f"task:{t}" for t in TASKS if t not in VISION_TASKS)

    @classmethod
    def can_serve(cls, need: str, config: dict) -> bool | None:
        """A plugin task is served when it registered an offline replier."""
        if need.startswith("task:") and need[5:] not in TASKS:
            spec = find_task(need[5:])
            return spec is not None and spec.replier is not None
        return None

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        vdir = Path(self.cfg.vocab_dir).expanduser() if self.cfg.vocab_dir else VOCAB_DIR
        if not vdir.is_dir():
            raise InputError(f"llm 'rules': vocab_dir '{vdir}' is not a folder")
        self._vocab_dir = vdir

    @functools.cached_property
    def lexicon(self) -> Lexicon:
        return Lexicon(self._vocab_dir)

    def model_identity(self) -> str:
        files = {
            name: file_digest(self._vocab_dir / f"{name}.txt")
            for name in SLOT_VOCAB.values()
            if (self._vocab_dir / f"{name}.txt").is_file()
        }
        plugins = plugin_repliers_identity()
        # no plugin replier: the identity rules runs have always had
        return (
            stable_hash("rules", RULES_VERSION, files, n=24)
            if not plugins
            else stable_hash("rules", RULES_VERSION, files, plugins, n=24)
        )

    def call_prompts(self, op: str, inputs: dict[str, Any]) -> list[str]:
        return []  # the rules read no prompt file: prompt edits do not invalidate their cache

    # -- the LLM interface ---------------------------------------------------------------
    def chat(self, messages: list[dict], *, tools: list[dict] | None = None, json_mode: bool = False) -> ChatReply:
        raise InputError(
            "llm 'rules' has no free-form chat (it is a rule-based offline editor); it only runs the "
            f"tasks {', '.join(t for t in TASKS if t not in VISION_TASKS)} (and plugin tasks that "
            "register an offline replier) through run_task. "
            "Use llm=openai or llm=transformers for chat and tool calling"
        )

    def run_task(
        self,
        task: str,
        variables: dict[str, Any],
        *,
        prompt: str | None = None,
        images: Sequence[Path | str] = (),
        json_mode: bool = False,
    ) -> str:
        """The reply to ``task`` (JSON text, ``yes``/``no`` or ``true``/``false``); ``prompt`` is ignored.
        A plugin task is answered by its registered offline replier."""
        if task not in TASKS and find_task(task) is not None:
            return offline_reply(task, variables)
        values = check_variables(task, variables)
        if task in VISION_TASKS:
            raise NeedsVisionError(
                f"llm 'rules' cannot run task '{task}': it needs to see images and the rules backend is text-only. "
                f"Use a vision-language backend (llm=openai with a VLM) or the offline vision components "
                f"(the encoder-based captioner, detector and verifier)"
            )
        out = getattr(self, f"_task_{task}")(values)
        if isinstance(out, bool):
            return "true" if out else "false"
        if isinstance(out, str):  # a free-text task (AutoCIR, ImageScope): the reply as written
            return out
        return json.dumps(out, ensure_ascii=False)

    # -- shared steps --------------------------------------------------------------------
    def _modification(self, text: Any) -> Modification:
        mod = self.lexicon.parse_modification(str(text))
        if not mod.understood and self.cfg.fallback == "error":
            raise InputError(
                f"llm 'rules' does not understand the modification {str(text)!r} "
                "(no colour, article, gender, usage, pattern or object edit found)"
            )
        return mod

    def _edit(self, caption: str, mod: Modification) -> str:
        caption = str(caption).strip()
        if mod.understood:
            return apply_edits(self.lexicon, caption, mod)
        if self.cfg.fallback == "keep" or not mod.text.strip():
            return caption
        return tidy(f"{caption.rstrip('.')}, {mod.text.strip().rstrip('.')}")

    def _effective(self, caption: str, mod: Modification) -> list[str]:
        """The edits that change ``caption`` (no-ops such as "a t-shirt" for a t-shirt left out)."""
        if not mod.understood:
            return [mod.text.strip()] if mod.text.strip() else []
        base = apply_edits(self.lexicon, caption, Modification(mod.text))
        out = [
            e.describe() for e in mod.edits if apply_edits(self.lexicon, caption, Modification(mod.text, [e])) != base
        ]
        return out + list(mod.extras)

    # -- tasks ---------------------------------------------------------------------------
    def _task_target_caption(self, v: dict) -> dict:
        mod = self._modification(v["modification"])
        ref = str(v["reference_caption"])
        return {"target_caption": self._edit(ref, mod), "modifications": self._effective(ref, mod)}

    def _task_refine(self, v: dict) -> dict:
        mod = self._modification(v["modification"])
        target = str(v["target_caption"]).strip()
        return {"target_caption": apply_edits(self.lexicon, target, mod) if mod.understood else target}

    def _task_rewrite_caption(self, v: dict) -> dict:
        return {"caption": self._edit(v["reference_caption"], self._modification(v["modification"]))}

    def _target(self, v: dict) -> str:
        if v.get("target_caption"):
            return str(v["target_caption"]).strip()
        return self._edit(v["reference_caption"], self._modification(v["modification"]))

    def _task_textual_proxies(self, v: dict) -> dict:
        target = self._target(v)
        forms = self._variants(target, "proxies")
        extra = self._scene_objects(target, _as_list(v.get("objects")))
        if extra:  # weave the expected scene objects into every other proxy (an LLM varies detail the same way)
            phrase = " and ".join(object_phrase(o) for o in extra)
            forms = [tidy(f"{f.rstrip('.')} with {phrase}") if i % 2 else f for i, f in enumerate(forms)]
        return {"proxies": _take(forms, v["k"])}

    def _scene_objects(self, target: str, objects: list[str]) -> list[str]:
        """The expected objects worth naming in a proxy: scene objects (the objects vocabulary, not
        item types: a second item type would contradict the target's) that the target caption does
        not mention yet, in the given order, without repeats."""
        have = {m.value for m in self.lexicon.mentions(target)}
        out: list[str] = []
        for label in objects:
            found = self.lexicon.mentions(label)
            if found and all(m.slot == "object" for m in found):
                out += [m.value for m in found if m.value not in have and m.value not in out]
        return out

    def _task_summarize_captions(self, v: dict) -> dict:
        """The keyframe caption most keyframes share (ties: the one nearest the middle keyframe)."""
        caps = [c.strip() for c in _as_list_lines(v["captions"]) if c.strip()]
        if not caps:
            raise InputError("llm 'rules': task 'summarize_captions' got no captions")
        counts = {c: caps.count(c) for c in caps}
        mid = (len(caps) - 1) / 2
        best = max(range(len(caps)), key=lambda i: (counts[caps[i]], -abs(i - mid), -i))
        return {"caption": caps[best]}

    def _task_target_descriptions(self, v: dict) -> dict:
        return {"descriptions": _take(self._variants(self._target(v), "descriptions"), v["n"])}

    def _task_divergent_captions(self, v: dict) -> dict:
        return {"captions": _take(self._variants(self._target(v), "divergent"), v["n"])}

    def _task_filter_objects(self, v: dict) -> dict:
        objects = _as_list(v["objects"])
        mod = self._modification(v["modification"])
        target = self.lexicon.parse_caption(str(v["target_caption"]))
        gone: set[str] = set()
        new: dict[str, set[str]] = {}
        for e in mod.edits:
            if e.op == "remove":
                gone.update(e.values)
            elif e.op == "set":
                gone.update(e.old)
                new.setdefault(e.slot, set()).update(e.values)
        keep, remove = [], []
        for label in objects:
            found = self.lexicon.mentions(label)
            bad = any(m.value in gone and m.value not in target.values(m.slot) for m in found) or any(
                m.slot in new and m.slot not in ("object", "article") and m.value not in new[m.slot] for m in found
            )
            (remove if bad else keep).append(label)
        return {"keep": keep, "remove": remove}

    def _task_questions(self, v: dict) -> dict:
        ref = self.lexicon.parse_caption(str(v["reference_caption"]))
        target_text = str(v.get("target_caption") or "") or self._target(v)
        tgt = self.lexicon.parse_caption(target_text)
        mod = self._modification(v["modification"])
        head = tgt.head_noun if tgt.head is not None and tgt.head.slot == "article" else "item"
        qs: list[dict[str, Any]] = []
        changed: set[str] = set()

        def add(statement: str, answer: bool) -> None:
            if statement not in (q["statement"] for q in qs):
                qs.append({"statement": statement, "answer": answer})

        falses: list[tuple[str, bool]] = []
        for e in mod.edits:
            changed.add(e.slot)
            if e.op in ("set", "add"):
                for val in e.values:
                    add(_statement(e.slot if e.op == "set" else "object", val, head), True)
                olds = list(e.old) or ([x for x in ref.values(e.slot) if x not in e.values] if e.op == "set" else [])
                falses += [(_statement(e.slot, o, head), False) for o in olds]
            else:
                falses += [
                    (_statement("object" if e.slot == "article" else e.slot, val, head), False) for val in e.values
                ]
        for s, a in falses:
            add(s, a)
        for slot in ("article", "colour", "gender", "usage", "pattern"):
            if slot not in changed:
                for val in tgt.values(slot)[:1]:
                    add(_statement(slot, val, head), True)
        return {"questions": qs[: v["n"]]}

    def _task_entail(self, v: dict) -> bool:
        return entails(self.lexicon, str(v["caption"]), str(v["statement"]))

    def _task_compress_context(self, v: dict) -> dict:
        from ..memory.context import offline_summary

        return offline_summary(
            str(v["goal"]),
            _as_list(v["findings"]),
            str(v["session_memory"] or ""),
            str(v["history"] or "").splitlines(),
        )

    # -- AutoCIR: planner, corrector, re-planner (free text in the released reply format) ----------
    def _task_autocir_plan(self, v: dict) -> str:
        return f"Edited Description: {self._edit(v['reference_caption'], self._modification(v['modification']))}"

    def _unmet(self, caption: str, mod: Modification) -> list[str]:
        """The edits of ``mod`` that ``caption`` does not state (checked with :func:`entails`)."""
        parsed = self.lexicon.parse_caption(caption)
        head = parsed.head_noun if parsed.head is not None and parsed.head.slot == "article" else "item"
        out = []
        for e in mod.edits:
            if e.op in ("set", "add"):
                ok = all(
                    entails(self.lexicon, caption, _statement(e.slot if e.op == "set" else "object", val, head))
                    for val in e.values
                )
            else:
                ok = not any(
                    entails(self.lexicon, caption, _statement("object" if e.slot == "article" else e.slot, val, head))
                    for val in e.values
                )
            if not ok:
                out.append(e.describe())
        return out

    def _task_autocir_check(self, v: dict) -> str:
        """Checks the top-1 retrieved caption (the first of the list) against the understood edits:
        all stated -> the stop phrase; else the unmet edits as suggestions. A modification the rules
        do not understand cannot be checked: its text is the suggestion."""
        mod = self.lexicon.parse_modification(str(v["modification"]))
        caps = _as_caption_list(v["top_captions"])
        top = caps[0] if caps else ""
        if not mod.edits:
            return (
                f"Step 1: the request could not be split into attribute edits.\n"
                f"Suggestions: {str(v['modification']).strip()}"
            )
        unmet = self._unmet(top, mod)
        phrases = "; ".join(e.describe() for e in mod.edits)
        if not unmet:
            return f"Step 1: {phrases}.\nStep 2: the top retrieved image states every edit.\nGood retrieval, no more loops needed."
        return (
            f"Step 1: {phrases}.\nStep 2: the top retrieved image does not state: {'; '.join(unmet)}.\n"
            f"Suggestions: {' and '.join(unmet)}"
        )

    def _task_autocir_replan(self, v: dict) -> str:
        """The suggested edits applied to the last description (unchanged when none is understood)."""
        last = str(v["last_description"]).strip()
        mod = self.lexicon.parse_modification(str(v["suggestions"]))
        return f"Edited Description: {apply_edits(self.lexicon, last, mod) if mod.edits else last}"

    # -- ImageScope: stage-1 and stage-2 reasoners (a ```json block, as released) -----------------
    def _task_imagescope_reason(self, v: dict) -> str:
        mod = self._modification(v["instruction"])
        ref = str(v["ref_image_desc"])
        kinds = {"add": "Addition", "remove": "Removal", "set": "Modification"}
        step1 = [[kinds.get(e.op, "Modification"), e.describe()] for e in mod.edits] + [
            ["Addition", x] for x in mod.extras
        ] or [["Modification", str(v["instruction"]).strip()]]
        target = self._edit(ref, mod)
        step2 = _take(self._variants(target, "descriptions"), 3)
        return "```json\n" + json.dumps({"step1": step1, "step2": step2}, ensure_ascii=False) + "\n```"

    def _task_imagescope_propositions(self, v: dict) -> str:
        qs = self._task_questions(
            {"reference_caption": "", "modification": v["instruction"], "target_caption": "", "n": 8}
        )["questions"]
        step2 = [[q["statement"], "True" if q["answer"] else "False"] for q in qs]
        return (
            "```json\n"
            + json.dumps({"step1": [q["statement"] for q in qs], "step2": step2}, ensure_ascii=False)
            + "\n```"
        )

    # -- variants (proxies, descriptions, divergent captions) -----------------------------
    def _variants(self, caption: str, purpose: str) -> list[str]:
        lex = self.lexicon
        core = strip_photo_prefix(caption).rstrip(".")
        p = lex.parse_caption(core)
        syn1, syn2 = _synonym_variant(lex, core, p, 0), _synonym_variant(lex, core, p, 1)
        post = _postnominal_variant(core, p)
        short = _short_np(p)
        if purpose == "proxies":
            forms = [
                caption,
                f"a photo of {core}",
                f"a photo of {syn1}",
                f"a photo of {post}",
                f"an image of {core}",
                f"a picture of {syn2}",
                f"a product photo of {core}",
                core,
                f"an image of {post}",
                f"a close-up photo of {core}",
                f"a photo of {short}",
                f"a picture of {syn1}",
                syn1,
                post,
            ]
        elif purpose == "descriptions":
            forms = [
                _sentence(f"a photo of {core}"),
                _sentence(f"{post}, photographed on its own"),
                _sentence(f"a product shot of {syn1}"),
                _sentence(f"an image showing {core}"),
                _sentence(f"{short}"),
                _sentence(f"a picture of {syn2}"),
            ]
        else:  # divergent captions: different wording and level of detail
            forms = [
                core,
                f"a photo of {post}",
                short,
                f"a picture of {syn1}",
                f"an image of {syn2}",
                f"a product photo of {core}",
                f"{post}",
                f"a close-up of {short}",
            ]
        return list(dict.fromkeys(tidy(f) for f in forms if f and f.strip()))


# -- helpers ------------------------------------------------------------------------------------
def plugin_repliers_identity() -> dict[str, str]:
    """Per plugin task with an offline replier: a digest of its spec and of the file that defines
    the replier, so that editing a replier recomputes (and re-caches) the rules LLM's answers."""
    import inspect

    from ...framework.tasks import PLUGIN_TASKS, load_task_plugins

    load_task_plugins()
    out = {}
    for name, spec in sorted(PLUGIN_TASKS.items()):
        if spec.replier is None:
            continue
        try:
            src = inspect.getsourcefile(spec.replier)
            code = file_digest(Path(src)) if src else ""
        except (TypeError, OSError):
            code = ""
        fn = getattr(spec.replier, "__qualname__", type(spec.replier).__qualname__)
        out[name] = stable_hash(
            spec.variables,
            spec.reply,
            spec.fields,
            spec.count,
            spec.optional,
            f"{getattr(spec.replier, '__module__', '')}.{fn}",
            code,
            n=16,
        )
    return out


def _take(items: list[str], n: int) -> list[str]:
    """Exactly ``n`` items, repeating the list when it is shorter (the variants run out)."""
    if not items:
        return []
    return [items[i % len(items)] for i in range(n)]


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        parts = [p.strip(" -•*\t") for line in value.splitlines() for p in line.split(",")]
        return [p for p in parts if p]
    return [str(x).strip() for x in value if str(x).strip()]


def _as_caption_list(value: Any) -> list[str]:
    """A list of captions given as a list, or as the Python list text AutoCIR's prompt shows."""
    if isinstance(value, (list, tuple)):
        return [str(x) for x in value]
    import ast

    try:
        got = ast.literal_eval(str(value))
    except (ValueError, SyntaxError):
        return _as_list_lines(value)
    return [str(x) for x in got] if isinstance(got, (list, tuple)) else [str(got)]


def _as_list_lines(value: Any) -> list[str]:
    """A list of sentences: a list as is, a text one item per line (captions hold commas)."""
    if isinstance(value, str):
        return [line.strip(" -•*\t") for line in value.splitlines() if line.strip(" -•*\t")]
    return _as_list(value)


def _sentence(text: str) -> str:
    t = tidy(text)
    return (t[:1].upper() + t[1:]).rstrip(".") + "."


def _synonym_variant(lex: Lexicon, text: str, p: ParsedCaption, which: int) -> str:
    out = text
    for m in sorted(p.mentions, key=lambda m: -m.start):
        if m.slot in ("article", "colour", "usage", "object"):
            syns = lex.synonyms(m.slot, m.value)
            if syns:
                out = out[: m.start] + syns[which % len(syns)] + out[m.end :]
    return tidy(out)


def _postnominal_variant(text: str, p: ParsedCaption) -> str:
    """Colour and gender moved after the noun: ``a black men's t-shirt`` -> ``a t-shirt for men in black``."""
    if p.head is None:
        return text
    colours = [m for m in p.of("colour") if m.end <= p.head.start]
    genders = [m for m in p.of("gender") if m.end <= p.head.start]
    if not colours and not genders:
        return text
    out = text
    tail = ""
    if genders:
        tail += f" for {GENDER_FORMS.get(genders[0].value, (genders[0].value,) * 2)[1]}"
    if colours:
        tail += " in " + " and ".join(m.value for m in colours)
    end = p.head.end
    out = out[:end] + tail + out[end:]
    for m in sorted(colours + genders, key=lambda m: -m.start):
        out = out[: m.start] + out[m.end :]
    return tidy(out)


def _short_np(p: ParsedCaption) -> str:
    """The item with only its colour(s): ``a black t-shirt``."""
    if p.head is None:
        return strip_photo_prefix(p.text)
    colours = " and ".join(p.values("colour"))
    return with_article(f"{colours} {p.head.value}".strip())


def _statement(slot: str, value: str, head: str) -> str:
    thing = "item" if head == "item" else head
    if slot == "colour":
        return f"The {thing} is {value}."
    if slot == "article":
        return f"The item is {with_article(value)}."
    if slot == "gender":
        return f"The {thing} is for {GENDER_FORMS.get(value, (value, value))[1]}."
    if slot == "usage":
        return f"The {thing} is {USAGE_ADJ.get(value, value)}."
    if slot == "pattern":
        return (
            f"The {thing} is {PATTERN_ADJ.get(value, value)}."
            if value in ("solid", "printed", "striped", "checked", "embroidered", "textured", "colourblocked")
            else f"The {thing} has a {value} pattern."
        )
    if value in MASS_NOUNS:
        return f"The image contains {value}."
    return f"The image contains {object_phrase(value)}."


_NEGATION = (
    "not",
    "no",
    "isn't",
    "isnt",
    "aren't",
    "without",
    "never",
    "doesn't",
    "does not",
    "don't",
    "do not",
    "none",
)


def entails(lex: Lexicon, caption: str, statement: str) -> bool:
    """Whether ``caption`` states what ``statement`` says, attribute by attribute.

    Every vocabulary mention of the statement must hold in the caption: the same value in
    the same slot (objects may also be the caption's articles). A negated statement ("is
    not blue", "contains no text") holds when the caption gives another value for the slot
    or negates the object. A statement with no vocabulary term cannot be checked: false.
    """
    cap = lex.parse_caption(caption)
    st_low = " " + " ".join(statement.lower().replace("’", "'").split()) + " "
    negated = any(f" {w} " in st_low or f" {w}," in st_low for w in _NEGATION)
    mentions = [m for m in lex.mentions(statement) if not (m.slot == "article" and m.value == "item")]
    if not mentions:
        return False
    have = {s: set(cap.values(s)) for s in (*ATTRIBUTES, "object")}
    positive_objects = (have["object"] | have["article"]) - cap.absent

    def holds(slot: str, value: str) -> bool:
        if slot in ("object",) or (slot == "article" and value not in have["article"] and value in have["object"]):
            return value in positive_objects
        return value in have[slot] or (slot == "article" and value in positive_objects)

    if not negated:
        return all(holds(m.slot, m.value) for m in mentions)
    # a negated statement: its subject (the item noun) must hold, the negated terms must not
    subject = [m for m in mentions if m.slot == "article" and m is mentions[0] and len(mentions) > 1]
    rest = [m for m in mentions if m not in subject]
    if not all(holds(m.slot, m.value) for m in subject):
        return False
    for m in rest:
        if m.slot in ("object",) or m.slot == "article":
            if m.value not in cap.absent:
                return False
        elif not have[m.slot] or m.value in have[m.slot]:
            return False
    return True
