"""The deterministic offline planner: decompose the question, then search -> filter -> verify with the tools.

Used when no LLM can call tools (no ``llm``, or the offline ``rules`` LLM) or when the
recipe asks for it (``method.planner=offline``). It runs the same tools as the LLM agent,
so its trace (tool calls, subsets, subset chain) has the same form.

**Decomposition** (DeepImageSearch's Episode / Episode breakdown / Target), by rules:

- the question's *metadata conditions* are read first (:mod:`.conditions`): dates (years,
  months, days, ranges, before/after, seasons, weekdays, times of day, dates relative to the
  newest photo such as "last summer"), places (gazetteer cities, regions and countries, aliases,
  demonyms; a region or country contains its cities), people, albums, cameras, keywords, titles,
  ratings, each possibly negated ("not in Rome"), and whether it asks "how many"; their words
  are removed from the text, and what could not be read is listed (``unparsed``) and left in
  the text for the visual search;
- the rest is split into a *target* and an *episode* at a connector such as ``from the
  day``, ``on the trips``, ``during the weekend``, ``where``, ``when``: "the shoes photos
  **from the day** I photographed a hat in Rome" -> target ``shoes``, episode "the day I
  photographed a hat in Rome";
- the episode's *visual clue* is what follows a verb such as photographed / saw / took a
  photo of (``hat``); plural episode words (days, trips, times) or ``every``/``all the``
  mark an inter-event question (every matching event counts);
- a target of nothing but filler ("photos", "pictures taken") means nothing visual is asked.

**Plan**: (0) each condition is one ``filter_metadata`` call within the previous one's result,
and the trace records what each kept of how many (``filters``); (1) episode: ``image_search``
for the clue within the filtered photos, ``view_photos`` to verify the clue, rank the events
(photosets) of the candidates by verified photos, then by their best-ranked photo, keep the best
one - or every event with a verified photo for an inter-event question - and ``filter_metadata``
to their photos; (2) target: with nothing visual asked, the answer is every photo kept (every
photo of the user when the question names no condition either); otherwise ``image_search`` for
the target within them and a visual check: a candidate passes when ``view_photos``' offline eyes
confirm it shows the target (rather than the episode's clue) or when its similarity to the
target lies ``visual_z`` standard deviations above the mean over all the user's photos (the
calibrated threshold; ``keep_top`` best-ranked candidates may be added, default none); when no
candidate passes, the best-ranked one is the answer and the trace says so; ``filter_metadata``
(``id in [...]``) saves the answer; (3) ``answer``, whose reasoning starts with the count for a
"how many" question.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Awaitable, Callable

from .conditions import Condition, Facts, parse_conditions
from .places import Gazetteer
from .store import Photo
from .tools import Toolbox, ToolOutcome

_EPISODE_WORDS = (
    "day",
    "days",
    "trip",
    "trips",
    "time",
    "times",
    "event",
    "events",
    "visit",
    "visits",
    "weekend",
    "weekends",
    "vacation",
    "vacations",
    "holiday",
    "holidays",
    "party",
    "parties",
    "evening",
    "evenings",
    "night",
    "nights",
    "morning",
    "mornings",
    "afternoon",
    "afternoons",
    "outing",
    "outings",
    "occasion",
    "occasions",
    "week",
    "weeks",
)
_PLURAL_EPISODE = {w for w in _EPISODE_WORDS if w.endswith("s") and w not in ("days",) or w == "days"}
_SPLIT = re.compile(
    r"\b(?:from|during|on|at|in|of|for)\s+(?:the|my|our|that|those|these|every|each|all\s+the)\s+(?:same\s+)?(?:"
    + "|".join(_EPISODE_WORDS)
    + r")\b|\b(?:when|where|while|on\s+which|in\s+which|at\s+which)\b",
    re.I,
)
_VERB = re.compile(
    r"\b(?:also\s+)?(?:photographed|shot|snapped|captured|saw|spotted|wore|bought|found|met|had|"
    r"took\s+(?:a\s+|some\s+)?(?:photo|photos|picture|pictures|shot|shots)\s+of|"
    r"took\s+(?:a\s+|some\s+)?(?:photo|photos|picture|pictures)|took)\b",
    re.I,
)
_FILLER = re.compile(
    r"\b(?:the|a|an|some|my|our|all|every|each|those|these|that|this|photos?|pictures?|images?|shots?|"
    r"of|i|we|me|us|also|too|again|find|show|get|give|please|which|where|when|same|one|ones|"
    r"with|were|was|taken|took|" + "|".join(_EPISODE_WORDS) + r")\b",
    re.I,
)
#: question words of other languages ("fotos de Italia", "Bilder aus Deutschland", "photos prises en Italie")
_FOREIGN = (
    r"fotos?|fotograf[ií]as?|fotografie|bilder|bild|aufnahmen|im[aá]genes|immagini|de|del|della|da|dal|dalla|di|aus|von|en|"
    r"nella|alla|"
    r"desde|dans|nach|uit|em|do|na|tomadas?|hechas?|sacadas?|prises?|gemacht|aufgenommen|scattate|fatte|genomen|"
    r"meine|mis|mes|mijn|le|les|la|las|los|die|der|das|el|il|alle|todas|toutes|tutte|und|y|et|ou|oder|"
    r"alguna|algo|etwas|quelque|qualcosa"
)
#: words that carry no visual content once the metadata conditions are read
_NOT_VISUAL = re.compile(
    r"\b(?:from|in|on|at|by|to|near|during|taken|shot|shoot|snap|captured|see|view|look|let|may|can|could|would|how|many|did|do|does|have|has|had|take|"
    r"are|is|am|be|been|there|show|list|count|number|and|or|but|any|photographs?|pics?|camera|phone|"
    r"what|who|whose|them|it|total|made|snapped|all|only|just|either|both|nor|while|then|than|everything|anything|stuff|"
    + _FOREIGN
    + r")\b",
    re.I,
)
#: the order in which conditions are applied and written (places and dates first)
_KIND_ORDER = {"place": 0, "date": 1, "time": 2, "weekday": 3}


@dataclass
class Decomposition:
    """A question split into Episode / Episode breakdown / Target (see the module docstring)."""

    query: str
    target: str
    episode: str = ""
    clue: str = ""
    places: list[str] = field(default_factory=list)
    periods: list[tuple[str, str]] = field(default_factory=list)
    multi: bool = False
    breakdown: list[str] = field(default_factory=list)
    #: the metadata conditions read (:class:`~.conditions.Condition`), in the order they are applied
    conditions: list[Condition] = field(default_factory=list)
    #: the question asks how many photos
    count: bool = False
    #: what looked like a condition but could not be read (those words stay in the visual search)
    unparsed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def filter_expression(self) -> str:
        """The metadata conditions as one ``filter_metadata`` expression ('' when none)."""
        return " and ".join(_wrap(c.expression()) for c in self.conditions)


def _wrap(expr: str) -> str:
    return expr if expr.startswith(("(", "not (")) or " or " not in expr else f"({expr})"


def _clean(text: str) -> str:
    t = _FILLER.sub(" ", text)
    t = re.sub(r"[^\w\s'-]", " ", t)
    return " ".join(t.split())


def _shape(c: Condition) -> str | None:
    """Conditions of one shape are alternatives ("in 2008 or 2009", "on Saturdays and Sundays"):
    periods, months, weekdays, hours, date bounds; others (place lists are read as one) none."""
    if c.negated or c.kind not in ("date", "weekday", "time"):
        return None
    if c.period:
        return "period"
    return "bound" if c.expr.startswith("date ") else c.expr.split()[0].strip("(")


def _alternatives(conds: list[Condition], query: str) -> list[Condition]:
    """Merge positive conditions of one shape into one disjunction (a photo has one date): "photos
    from 2008 or 2009" is either year; date bounds only when the question says "or" ("before 2000
    or after 2020"; "after 2000 and before 2005" is a span)."""
    groups: dict[str, list[Condition]] = {}
    for c in conds:
        shape = _shape(c)
        if shape and (shape != "bound" or re.search(r"\bor\b", query, re.I)):
            groups.setdefault(shape, []).append(c)
    out, done = [], set()
    for c in conds:
        shape = _shape(c)
        group = groups.get(shape or "", [])
        if len(group) < 2 or c not in group:
            out.append(c)
        elif shape not in done:
            done.add(shape)
            out.append(
                Condition(
                    c.kind, "(" + " or ".join(_wrap(g.expr) for g in group) + ")", " / ".join(g.text for g in group)
                )
            )
    return out


def decompose(
    query: str, gazetteer: Gazetteer, *, facts: Facts | None = None, min_population: int = 15000
) -> Decomposition:
    """Split ``query`` into metadata conditions, target, episode and clue (see the module docstring).

    ``facts`` (:meth:`Facts.of` a collection) lets the names of its people, albums, cameras,
    keywords and titles, and dates relative to its newest photo, be read."""
    parsed = parse_conditions(query, gazetteer, facts, min_population=min_population)
    periods = [c.period for c in parsed.conditions if c.kind == "date" and c.period and not c.negated]
    conds = sorted(_alternatives(parsed.conditions, query), key=lambda c: (_KIND_ORDER.get(c.kind, 9), c.negated))
    text = parsed.rest
    m = _SPLIT.search(text)
    if m:
        target_text, episode_text = text[: m.start()], text[m.start() :]
    else:
        target_text, episode_text = text, ""
    multi = bool(
        re.search(r"\b(?:" + "|".join(sorted(_PLURAL_EPISODE)) + r")\b", episode_text, re.I)
        or re.search(r"\b(?:every|each|all\s+the)\b", episode_text, re.I)
    )
    clue = ""
    if episode_text:
        v = _VERB.search(episode_text)
        clue = _clean(episode_text[v.end() :] if v else episode_text)
    target = re.sub(r"^(?:(?:or|and|but|nor)\s+)+|(?:\s+(?:or|and|but|nor))+$", "", _clean(target_text))
    if not _clean(_NOT_VISUAL.sub(" ", target)):
        target = ""  # nothing visual is asked: the answer is every photo the conditions keep
    places = [
        p.strip('"') for c in conds if c.kind == "place" and not c.negated for p in re.findall(r'"([^"]*)"', c.expr)
    ]
    d = Decomposition(
        query=str(query),
        target=target,
        episode=episode_text.strip(),
        clue=clue,
        places=places,
        periods=[tuple(p) for p in periods],
        multi=multi,
        conditions=conds,
        count=parsed.count,
        unparsed=parsed.unparsed,
        notes=parsed.notes,
    )
    steps = []
    where = " and ".join(c.describe() for c in conds)
    if clue:
        steps.append(f"find photos of '{clue}'" + (f" with {where}" if where else ""))
        steps.append(
            "verify them and keep " + ("every event (photoset) they belong to" if multi else "the event they belong to")
        )
    elif where:
        steps.append(f"keep the photos with {where}")
    if target:
        steps.append(f"find photos of '{target}'" + (" within those events" if clue else ""))
        steps.append(f"verify that they show '{target}' and answer with them")
    else:
        steps.append("answer with every photo kept" + (" and count them" if parsed.count else ""))
    d.breakdown = steps
    return d


# -- execution -------------------------------------------------------------------------------
#: ``async f(photos, phrase, views, contrast) -> [bool]``: does each photo show ``phrase`` (rather than ``contrast``)?
Verifier = Callable[[list[Photo], str, list[dict], str], Awaitable[list[bool]]]
#: ``async f(phrase) -> {photo id: similarity}`` over every photo of the collection (the calibration population)
Scorer = Callable[[str], Awaitable[dict[str, float]]]


@dataclass
class PlanConfig:
    episode_top_k: int = 100
    target_top_k: int = 200
    verify_max: int = 100
    min_answer: int = 1
    keep_top: int = 0
    #: a candidate also passes the visual check when its similarity to the phrase lies this many
    #: standard deviations above the mean over all the user's photos (needs a scorer)
    visual_z: float = 2.0
    #: ``calibrated``: a target candidate passes when its similarity clears the calibrated threshold
    #: (the answer is the ranking cut there); ``checked``: also when the eyes confirm it; ``auto``:
    #: the planner's ``pass_rule`` decides per phrase (``calibrated`` without one)
    visual_pass: str = "calibrated"


@dataclass
class PlanResult:
    ids: list[str]
    reasoning: str
    subset: str | None
    decomposition: Decomposition
    #: per applied condition: what it was, its expression, photos kept, photos it was applied to
    filters: list[dict] = field(default_factory=list)
    #: the visual check: phrase, candidates, passed, threshold (None when the question has no visual part)
    visual: dict | None = None
    #: why no photo is answered ("no photo matches: ...", naming the filter or check that kept none); None otherwise
    no_match: str | None = None


class OfflinePlanner:
    """Executes a :class:`Decomposition` with a :class:`Toolbox` (see the module docstring)."""

    def __init__(
        self,
        toolbox: Toolbox,
        verify: Verifier,
        cfg: PlanConfig | None = None,
        *,
        scorer: Scorer | None = None,
        pass_rule: Callable[[str], str] | None = None,
    ):
        self.tb = toolbox
        self.pass_rule = pass_rule
        self.verify = verify
        self.scorer = scorer
        self.cfg = cfg or PlanConfig()
        self.notes: list[str] = []
        self.filters: list[dict] = []
        self.visual: dict | None = None

    async def _call(self, name: str, **args) -> ToolOutcome:
        out = await self.tb.call(name, args)
        if out.error:
            self.notes.append(f"{name} failed: {out.error.splitlines()[0]}")
        return out

    def _size(self, subset: str | None) -> int:
        return len(self.tb.subsets.ids(subset)) if subset else len(self.tb.c)

    async def _apply(self, d: Decomposition) -> str | None:
        """Apply each condition in turn (``filter_metadata`` within the previous result) and record
        how many photos each kept; returns the last subset (``None`` when there is no condition)."""
        scope = None
        for i, c in enumerate(d.conditions, 1):
            before = self._size(scope)
            name = f"filter_{i}_{c.kind}"
            out = await self._call("filter_metadata", expression=c.expression(), filter_within=scope, save_as=name)
            rec = {
                "condition": c.describe(),
                "kind": c.kind,
                "negated": c.negated,
                "expression": c.expression(),
                "of": before,
            }
            if out.error:  # a condition the language refuses: said in the trace, not applied
                rec["error"] = out.error.splitlines()[0]
            else:
                rec["kept"] = out.result["count"]
                scope = name
            self.filters.append(rec)
        return scope

    async def _calibrated(self, phrase: str) -> tuple[set[str], float | None]:
        """Photos whose similarity to ``phrase`` is at least ``visual_z`` standard deviations above
        the mean over all the user's photos, and that threshold (``None`` without a scorer)."""
        if self.scorer is None or not phrase:
            return set(), None
        scores = await self.scorer(phrase)
        vals = list(scores.values())
        if len(vals) < 2:
            return set(), None
        mean = sum(vals) / len(vals)
        sd = (sum((v - mean) ** 2 for v in vals) / len(vals)) ** 0.5
        if sd <= 0:
            return set(), None
        cut = mean + self.cfg.visual_z * sd
        return {i for i, v in scores.items() if v >= cut}, cut

    async def _verified(
        self, subset: str, phrase: str, save_as: str, *, contrast: str = "", keep_top: int = 0
    ) -> tuple[list[str], str | None]:
        """View the photos of ``subset`` (20 at a time, at most ``verify_max``), keep those that show
        ``phrase`` (rather than ``contrast``, when given), those above the calibrated similarity
        threshold, and the ``keep_top`` best-ranked ones, and save them (``filter_metadata`` on
        ``id in [...]``), in the subset's order."""
        ids = self.tb.subsets.ids(subset)[: self.cfg.verify_max]
        good: set[str] = set(ids[:keep_top])
        above, cut = await self._calibrated(phrase)
        rule = self.cfg.visual_pass
        if rule == "auto":
            rule = self.pass_rule(phrase) if self.pass_rule else "calibrated"
        calibrated = save_as == "answer" and rule == "calibrated" and cut is not None
        if (
            calibrated
        ):  # the ranking (image_search's order) cut at the threshold: every candidate, not only those viewed
            ids = self.tb.subsets.ids(subset)
        good |= above & set(ids)
        for start in range(0, 0 if calibrated else len(ids), 20):
            batch = ids[start : start + 20]
            view = await self._call("view_photos", ids=batch, max=20)
            if view.error:
                continue
            photos = [self.tb.c.get(i) for i in batch]
            ok = await self.verify(photos, phrase, view.result["photos"], contrast)
            good |= {i for i, yes in zip(batch, ok) if yes}
        keep = [i for i in ids if i in good]
        if save_as == "answer":
            self.visual = {
                "phrase": phrase,
                "candidates": len(ids),
                "passed": len(keep),
                "calibrated_above": len(above & set(ids)),
                "threshold": None if cut is None else round(cut, 4),
                "visual_z": self.cfg.visual_z,
                "pass": "calibrated" if calibrated else "checked",
            }
        if not keep:
            return [], None
        quoted = ", ".join(f'"{i}"' for i in keep)
        out = await self._call("filter_metadata", expression=f"id in [{quoted}]", filter_within=subset, save_as=save_as)
        return (self.tb.subsets.ids(save_as), save_as) if not out.error else (keep, None)

    async def run(self, d: Decomposition) -> PlanResult:
        why: list[str] = [f"could not read {u}; those words go to the visual search" for u in d.unparsed] + list(
            d.notes
        )
        scope = await self._apply(d) if d.conditions else None
        if self.filters:
            why.append(
                "; ".join(
                    f"{f['condition']}: "
                    + (f"kept {f['kept']} of {f['of']}" if "kept" in f else f"not applied ({f['error']})")
                    for f in self.filters
                )
            )
        matched = self._size(scope)
        if d.clue:
            source = scope if scope and matched else None
            if scope and not matched:
                why.append(f"no photo matches {d.filter_expression()}; searching all photos")
            size = self._size(source)
            await self._call(
                "image_search",
                query=f"a photo of {d.clue}",
                top_k=max(1, min(self.cfg.episode_top_k, size)),
                search_within=source,
                save_as="episode_candidates",
            )
            found, _ = await self._verified("episode_candidates", d.clue, "episode_verified")
            ranked = (
                self.tb.subsets.ids("episode_candidates")[: self.cfg.verify_max]
                if "episode_candidates" in self.tb.subsets
                else []
            )
            meta = await self._call("get_metadata", ids=ranked, fields=["event"]) if ranked else None
            event_of = {r["id"]: r.get("event") for r in ((meta.result or {}).get("photos", []) if meta else [])}
            stats: dict[str, list[int]] = {}  # event -> [verified photos, best rank]
            for pos, pid in enumerate(ranked):
                ev = event_of.get(pid)
                if ev:
                    s = stats.setdefault(ev, [0, pos])
                    s[0] += pid in found
            events = sorted(stats, key=lambda e: (-stats[e][0], stats[e][1]))
            if d.multi:
                events = [e for e in events if stats[e][0] > 0] or events[:1]
            else:
                events = events[:1]
            if not found:
                why.append(f"no photo was verified to show '{d.clue}'; trusting the best-ranked candidate")
            scope = None
            if events:
                quoted = ", ".join(f'"{e}"' for e in events)
                out = await self._call("filter_metadata", expression=f"event in [{quoted}]", save_as="episode_photos")
                if not out.error:
                    scope = "episode_photos"
                    why.append(
                        f"'{d.clue}' seen in {sum(stats[e][0] for e in events)} photo(s) of event(s) {', '.join(events)}"
                    )
        elif scope and not d.target:  # metadata only: the answer is every photo that matches
            ids = self.tb.subsets.ids(scope)
            why.append(f"{len(ids)} photo(s) match every condition" if ids else self._emptied())
            return await self._answer(d, ids, scope, why)
        elif not d.target:  # neither a condition nor anything visual: every photo
            ids = self.tb.c.ids
            why.append(f"the question names no condition and nothing to look for: all {len(ids)} photos")
            return await self._answer(d, ids, None, why)
        elif scope and not matched:
            why.append(self._emptied())
            return await self._answer(d, [], scope, why)
        if not d.target:  # an episode question without a target: the episode's photos
            ids = self.tb.subsets.ids(scope) if scope else []
            return await self._answer(d, ids, scope, why)
        size = self._size(scope)
        search = await self._call(
            "image_search",
            query=f"a photo of {d.target}",
            top_k=max(1, min(self.cfg.target_top_k, size)),
            search_within=scope,
            save_as="target_candidates",
        )
        if search.error:
            return PlanResult([], "; ".join(why + self.notes), None, d, self.filters, self.visual)
        ids, saved = await self._verified(
            "target_candidates", d.target, "answer", contrast=d.clue, keep_top=self.cfg.keep_top
        )
        v = self.visual or {}
        if ids:
            why.append(
                f"{len(ids)} of {v.get('candidates', len(ids))} candidate(s) show '{d.target}'"
                + (f" rather than '{d.clue}'" if d.clue else "")
                + (" within those photos" if scope else "")
                + (
                    f" (visual check, or similarity above {v['threshold']}: mean + {self.cfg.visual_z} sd over all "
                    f"{len(self.tb.c)} photos)"
                    if v.get("threshold") is not None
                    else " (visual check)"
                )
            )
        else:
            ids = self.tb.subsets.ids("target_candidates")[: self.cfg.min_answer]
            saved = "target_candidates"
            check = f"the visual check of '{d.target}'" + (
                f" (similarity threshold {v['threshold']}: mean + {self.cfg.visual_z} "
                f"sd over all {len(self.tb.c)} photos)"
                if v.get("threshold") is not None
                else ""
            )
            if ids:
                why.append(f"no photo passed {check}; answering with the top {len(ids)} candidate(s)")
            else:
                why.append(
                    f"no photo matches: none of the {v.get('candidates', 0)} candidate(s)"
                    + (" within those photos" if scope else "")
                    + f" passed {check}"
                )
        return await self._answer(d, ids, saved, why)

    def _emptied(self) -> str:
        """ "no photo matches: ..." naming the first condition that kept no photo (and what it was applied to)."""
        f = next((f for f in self.filters if f.get("kept") == 0), None)
        if f is None:
            return "no photo matches every condition"
        return f"no photo matches: {f['condition']} kept none of the {f['of']} photo(s)" + (
            " that matched the conditions before it" if f is not self.filters[0] else ""
        )

    async def _answer(self, d: Decomposition, ids: list[str], subset: str | None, why: list[str]) -> PlanResult:
        if d.count:
            why.insert(0, f"{len(ids)} photo(s)")
        await self._call("answer", ids=list(ids), subset=None, reasoning="; ".join(why))
        no_match = None if ids else next((w for w in why if w.startswith("no photo matches")), "no photo matches")
        return PlanResult(
            list(ids), "; ".join(dict.fromkeys(why + self.notes)), subset, d, self.filters, self.visual, no_match
        )
