"""The deterministic offline planner: decompose the question, then search -> filter -> verify with the tools.

Used when no LLM can call tools (no ``llm``, or the offline ``rules`` LLM) or when the
recipe asks for it (``method.planner=offline``). It runs the same tools as the LLM agent,
so its trace (tool calls, subsets, subset chain) has the same form.

**Decomposition** (DeepImageSearch's Episode / Episode breakdown / Target), by rules:

- dates (``in 2023``, ``June 2023``, ``summer 2022``, ``2023-06-14``, ``on June 14, 2023``) and
  places (city, country or alias names of the bundled gazetteer, capitalised in the text)
  are parsed out of the question;
- the question is split into a *target* and an *episode* at a connector such as ``from the
  day``, ``on the trips``, ``during the weekend``, ``where``, ``when``: "the shoes photos
  **from the day** I photographed a hat in Rome" -> target ``shoes``, episode "the day I
  photographed a hat in Rome";
- the episode's *visual clue* is what follows a verb such as photographed / saw / took a
  photo of (``hat``); plural episode words (days, trips, times) or ``every``/``all the``
  mark an inter-event question (every matching event counts).

**Plan**: (1) episode: ``filter_metadata`` by place/date (metadata is exact), ``image_search``
for the clue within it, ``view_photos`` to verify the clue, rank the events (photosets) of the
candidates by verified photos, then by their best-ranked photo, keep the best one - or every
event with a verified photo for an inter-event question - and ``filter_metadata`` to their
photos; (2) target: ``image_search`` for the target within the episode photos,
``view_photos`` to verify that a photo shows the target rather than the episode's clue (plus
the ``keep_top`` best-ranked candidates: a question always has an answer),
``filter_metadata`` (``id in [...]``) to save the answer; (3) ``answer``.
It understands questions of these shapes and nothing subtler (no relative dates such as
"last summer", no negations, no counting).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Awaitable, Callable

from .dates import MONTHS, SEASONS, month_period, parse_period, season_period
from .places import Gazetteer
from .store import Photo
from .tools import Toolbox, ToolOutcome

_MONTH_RX = "|".join(sorted(MONTHS, key=len, reverse=True))
_PRE = r"(?:\b(?:in|on|during|from|of)\s+)?"
_DATE_PATTERNS: list[tuple[re.Pattern, Callable[[re.Match], tuple[datetime, datetime] | None]]] = [
    (re.compile(_PRE + r"\b(\d{4}-\d{1,2}-\d{1,2})\b", re.I), lambda m: parse_period(m.group(1))),
    (re.compile(_PRE + r"\b(\d{4}-\d{1,2})\b", re.I), lambda m: parse_period(m.group(1))),
    (re.compile(_PRE + rf"\b({_MONTH_RX})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I),
     lambda m: parse_period(f"{m.group(3)}-{MONTHS[m.group(1).lower()]:02d}-{int(m.group(2)):02d}")),
    (re.compile(_PRE + rf"\b({_MONTH_RX})\.?\s+(?:of\s+)?(\d{{4}})\b", re.I),
     lambda m: month_period(int(m.group(2)), MONTHS[m.group(1).lower()])),
    (re.compile(_PRE + rf"\b(?:the\s+)?({'|'.join(SEASONS)})\s+(?:of\s+)?(\d{{4}})\b", re.I),
     lambda m: season_period(int(m.group(2)), m.group(1).lower())),
    (re.compile(r"\b(?:in|during|of)\s+((?:19|20)\d{2})\b", re.I), lambda m: parse_period(m.group(1))),
]
_EPISODE_WORDS = ("day", "days", "trip", "trips", "time", "times", "event", "events", "visit", "visits", "weekend",
                  "weekends", "vacation", "vacations", "holiday", "holidays", "party", "parties", "evening", "evenings",
                  "night", "nights", "morning", "mornings", "afternoon", "afternoons", "outing", "outings",
                  "occasion", "occasions", "week", "weeks")
_PLURAL_EPISODE = {w for w in _EPISODE_WORDS if w.endswith("s") and w not in ("days",) or w == "days"}
_SPLIT = re.compile(r"\b(?:from|during|on|at|in|of|for)\s+(?:the|my|our|that|those|these|every|each|all\s+the)\s+(?:same\s+)?(?:"
                    + "|".join(_EPISODE_WORDS) + r")\b|\b(?:when|where|while|on\s+which|in\s+which|at\s+which)\b", re.I)
_VERB = re.compile(r"\b(?:also\s+)?(?:photographed|shot|snapped|captured|saw|spotted|wore|bought|found|met|had|"
                   r"took\s+(?:a\s+|some\s+)?(?:photo|photos|picture|pictures|shot|shots)\s+of|"
                   r"took\s+(?:a\s+|some\s+)?(?:photo|photos|picture|pictures)|took)\b", re.I)
_FILLER = re.compile(r"\b(?:the|a|an|some|my|our|all|every|each|those|these|that|this|photos?|pictures?|images?|shots?|"
                     r"of|i|we|me|us|also|too|again|find|show|get|give|please|which|where|when|same|one|ones|"
                     r"with|were|was|taken|took|"
                     + "|".join(_EPISODE_WORDS) + r")\b", re.I)
_PLACE_PREP = r"(?:\s*,?\s*\b(?:in|at|from|to|near|around)\s+(?:the\s+)?)"


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

    def to_json(self) -> dict:
        return asdict(self)

    def filter_expression(self) -> str:
        """The place/date constraints as a ``filter_metadata`` expression ('' when none)."""
        parts = []
        if self.places:
            ors = " or ".join(f'place ~ "{p}"' for p in self.places)
            parts.append(f"({ors})" if len(self.places) > 1 else ors)
        if self.periods:
            ors = " or ".join(_period_expr(a, b) for a, b in self.periods)
            parts.append(f"({ors})" if len(self.periods) > 1 else ors)
        return " and ".join(parts)


def _period_expr(a: str, b: str) -> str:
    return f"date >= {a} and date < {b}" if " " in a or " " in b else f"(date >= {a} and date < {b})"


def _clean(text: str) -> str:
    t = _FILLER.sub(" ", text)
    t = re.sub(r"[^\w\s'-]", " ", t)
    return " ".join(t.split())


def decompose(query: str, gazetteer: Gazetteer, *, min_population: int = 15000) -> Decomposition:
    """Split ``query`` into target, episode, clue, places, periods (see the module docstring)."""
    text = " ".join(str(query).split())
    periods: list[tuple[datetime, datetime]] = []
    for rx, conv in _DATE_PATTERNS:
        def take(m: re.Match) -> str:
            p = conv(m)
            if p is None:
                return m.group(0)
            periods.append(p)
            return " "
        text = rx.sub(take, text)
    places = gazetteer.find_places(text, min_population=min_population)
    for p in places:
        text = re.sub(_PLACE_PREP + re.escape(p) + r"\b", " ", text, count=1)
        text = re.sub(r"\b" + re.escape(p) + r"\b", " ", text, count=1)
    text = " ".join(text.split())
    m = _SPLIT.search(text)
    if m:
        target_text, episode_text = text[:m.start()], text[m.start():]
    else:
        target_text, episode_text = text, ""
    multi = bool(re.search(r"\b(?:" + "|".join(sorted(_PLURAL_EPISODE)) + r")\b", episode_text, re.I)
                 or re.search(r"\b(?:every|each|all\s+the)\b", episode_text, re.I))
    clue = ""
    if episode_text:
        v = _VERB.search(episode_text)
        clue = _clean(episode_text[v.end():] if v else episode_text)
    target = _clean(target_text) or _clean(text)
    fmt = "%Y-%m-%d %H:%M" if any(p[0].hour or p[0].minute for p in periods) else "%Y-%m-%d"
    d = Decomposition(query=str(query), target=target, episode=episode_text.strip(), clue=clue, places=places,
                      periods=[(a.strftime(fmt), b.strftime(fmt)) for a, b in periods], multi=multi)
    steps = []
    where = " and ".join(x for x in (", ".join(places), " or ".join(f"{a}..{b}" for a, b in d.periods)) if x)
    if clue:
        steps.append(f"find photos of '{clue}'" + (f" in {where}" if where else ""))
        steps.append("verify them and keep " + ("every event (photoset) they belong to" if multi else "the event they belong to"))
    elif where:
        steps.append(f"keep the photos from {where}")
    steps.append(f"find photos of '{target}'" + (" within those events" if clue else ""))
    steps.append(f"verify that they show '{target}' and answer with them")
    d.breakdown = steps
    return d


# -- execution -------------------------------------------------------------------------------
#: ``async f(photos, phrase, views, contrast) -> [bool]``: does each photo show ``phrase`` (rather than ``contrast``)?
Verifier = Callable[[list[Photo], str, list[dict], str], Awaitable[list[bool]]]


@dataclass
class PlanConfig:
    episode_top_k: int = 100
    target_top_k: int = 200
    verify_max: int = 100
    min_answer: int = 1
    keep_top: int = 1


@dataclass
class PlanResult:
    ids: list[str]
    reasoning: str
    subset: str | None
    decomposition: Decomposition


class OfflinePlanner:
    """Executes a :class:`Decomposition` with a :class:`Toolbox` (see the module docstring)."""

    def __init__(self, toolbox: Toolbox, verify: Verifier, cfg: PlanConfig | None = None):
        self.tb = toolbox
        self.verify = verify
        self.cfg = cfg or PlanConfig()
        self.notes: list[str] = []

    async def _call(self, name: str, **args) -> ToolOutcome:
        out = await self.tb.call(name, args)
        if out.error:
            self.notes.append(f"{name} failed: {out.error.splitlines()[0]}")
        return out

    async def _verified(self, subset: str, phrase: str, save_as: str, *, contrast: str = "",
                        keep_top: int = 0) -> tuple[list[str], str | None]:
        """View the photos of ``subset`` (20 at a time, at most ``verify_max``), keep those that show
        ``phrase`` (rather than ``contrast``, when given) and the ``keep_top`` best-ranked ones, and
        save them (``filter_metadata`` on ``id in [...]``), in the subset's order."""
        ids = self.tb.subsets.ids(subset)[: self.cfg.verify_max]
        good: set[str] = set(ids[:keep_top])
        for start in range(0, len(ids), 20):
            batch = ids[start:start + 20]
            view = await self._call("view_photos", ids=batch, max=20)
            if view.error:
                continue
            photos = [self.tb.c.get(i) for i in batch]
            ok = await self.verify(photos, phrase, view.result["photos"], contrast)
            good |= {i for i, yes in zip(batch, ok) if yes}
        keep = [i for i in ids if i in good]
        if not keep:
            return [], None
        quoted = ", ".join(f'"{i}"' for i in keep)
        out = await self._call("filter_metadata", expression=f"id in [{quoted}]", filter_within=subset, save_as=save_as)
        return (self.tb.subsets.ids(save_as), save_as) if not out.error else (keep, None)

    async def run(self, d: Decomposition) -> PlanResult:
        where = d.filter_expression()
        scope: str | None = None
        why: list[str] = []
        if d.clue:
            source = None
            if where:  # metadata first: it is exact
                f = await self._call("filter_metadata", expression=where, save_as="episode_scope")
                if not f.error and f.result["count"]:
                    source = "episode_scope"
                else:
                    why.append(f"no photo matches {where}; searching all photos")
            size = len(self.tb.subsets.ids(source)) if source else len(self.tb.c)
            await self._call("image_search", query=f"a photo of {d.clue}", top_k=max(1, min(self.cfg.episode_top_k, size)),
                             search_within=source, save_as="episode_candidates")
            found, _ = await self._verified("episode_candidates", d.clue, "episode_verified")
            ranked = self.tb.subsets.ids("episode_candidates")[: self.cfg.verify_max] if "episode_candidates" in self.tb.subsets else []
            meta = await self._call("get_metadata", ids=ranked, fields=["event"]) if ranked else None
            event_of = {r["id"]: r.get("event") for r in ((meta.result or {}).get("photos", []) if meta else [])}
            stats: dict[str, list[int]] = {}   # event -> [verified photos, best rank]
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
            if events:
                quoted = ", ".join(f'"{e}"' for e in events)
                out = await self._call("filter_metadata", expression=f"event in [{quoted}]", save_as="episode_photos")
                if not out.error:
                    scope = "episode_photos"
                    why.append(f"'{d.clue}' seen in {sum(stats[e][0] for e in events)} photo(s) of event(s) {', '.join(events)}"
                               + (f" ({where})" if where else ""))
        elif where:
            out = await self._call("filter_metadata", expression=where, save_as="episode_photos")
            if not out.error and out.result["count"]:
                scope = "episode_photos"
                why.append(f"{out.result['count']} photos match {where}")
        size = len(self.tb.subsets.ids(scope)) if scope else len(self.tb.c)
        search = await self._call("image_search", query=f"a photo of {d.target}", top_k=max(1, min(self.cfg.target_top_k, size)),
                                  search_within=scope, save_as="target_candidates")
        if search.error:
            return PlanResult([], "; ".join(why + self.notes), None, d)
        ids, saved = await self._verified("target_candidates", d.target, "answer", contrast=d.clue,
                                          keep_top=self.cfg.keep_top)
        if ids:
            why.append(f"{len(ids)} photo(s) show '{d.target}'" + (f" rather than '{d.clue}'" if d.clue else "")
                       + (" within those events" if scope else ""))
        else:
            ids = self.tb.subsets.ids("target_candidates")[: self.cfg.min_answer]
            saved = "target_candidates"
            why.append(f"no photo verified to show '{d.target}'; answering with the top {len(ids)} candidate(s)")
        await self._call("answer", ids=ids, subset=None, reasoning="; ".join(why))
        return PlanResult(ids, "; ".join(dict.fromkeys(why + self.notes)), saved, d)
