"""ImageSeeker's tools: typed arguments and results, JSON schemas for tool calling, one toolbox per session.

Every tool's arguments are a dataclass (its JSON schema for OpenAI-compatible tool calling is
generated from the dataclass: :func:`tool_schema`), its result a dataclass turned into JSON
for the model. The tools (DeepImageSearch §4):

=================== ================================================================================
``image_search``    text and/or photo-id (image-to-image) similarity search, top_k, ``search_within``
``get_metadata``    date, address, album, event, people, ... of photos
``filter_metadata`` photos whose metadata satisfies an expression (:mod:`.expr`), ``filter_within``
``view_photos``     look at up to 20 photos: the images go to a vision-language model; offline,
                    each photo's caption (captioner) and visual tags (encoder zero-shot) instead
``web_search``      look something up (pluggable backend; offline: returns nothing and says so)
``expand_graph``    photos linked to given photos in the memory graph (same event, album, day,
                    place, person, visual clue, visually similar, linked events)
``answer``          the final answer: photo ids (or a subset) and the reasoning
=================== ================================================================================

Tools that produce photos save them as a named subset (explicit state memory,
:class:`~agentcir.components.memory.subsets.NamedSubsets`): under ``save_as`` or, by default,
``<tool>_<n>``; later calls search or filter within it by name. A bad call (unknown tool,
unknown or ill-typed argument, unknown subset, an expression that does not parse) returns
an error *to the model*, never raises.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Sequence

import numpy as np

from ...errors import InputError
from ...interfaces import l2_normalize
from .expr import compile_expression
from .graph import EXPANSIONS, MemoryGraph
from .scoring import cosine_topk
from .store import METADATA_FIELDS, Photo, PhotoCollection

MAX_TOP_K = 1000
LISTED = 40  # photos listed in a result (a saved subset holds them all)


def _doc(text: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata={"doc": text})
    if default is dataclasses.MISSING:
        return field(metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


# -- arguments ---------------------------------------------------------------------------------
@dataclass
class ImageSearchArgs:
    """Find this user's photos most similar to a text description and/or to given photos."""

    query: str = _doc("what to look for, described in words (may be empty when photo_ids are given)", "")
    photo_ids: list[str] = _doc(
        "photos to use as visual queries (image-to-image search; averaged, "
        "and combined with the text when both are given)",
        factory=list,
    )
    top_k: int = _doc("how many photos to return (default: the method's top_k)", 50)
    search_within: str | None = _doc("name of a saved subset to search within (default: all photos)", None)
    save_as: str | None = _doc("name to save the result under (default: image_search_<n>)", None)


@dataclass
class GetMetadataArgs:
    """Metadata of photos: date, address, album, event (photoset), people, tags, camera, ..."""

    ids: list[str] = _doc("photo ids (at most 200)", factory=list)
    subset: str | None = _doc("or: a saved subset whose photos to describe", None)
    fields: list[str] = _doc(f"fields to return (default all): {', '.join(METADATA_FIELDS)}", factory=list)


@dataclass
class FilterMetadataArgs:
    """Photos whose metadata satisfies a boolean expression."""

    expression: str = _doc(
        'e.g. date in 2023-06..2023-08 and place ~ "Rome"; fields date, year, month, day, '
        'hour, weekday, place (aliases such as "NYC" match), album, event, person, tag, camera, '
        "text, id, lat, lon; operators = != < <= > >= ~ (contains/place match) in [a, b] a..b; "
        'and, or, not, parentheses; functions match_address("x"), near(lat, lon, km), has(field), '
        'same_day_as("photo id")'
    )
    filter_within: str | None = _doc("name of a saved subset to filter (default: all photos)", None)
    save_as: str | None = _doc("name to save the result under (default: filter_metadata_<n>)", None)


@dataclass
class ViewPhotosArgs:
    """Look at photos (at most 20 at a time) to check what they show."""

    ids: list[str] = _doc("photo ids to look at", factory=list)
    subset: str | None = _doc("or: a saved subset whose first photos to look at", None)
    max: int = _doc("how many photos to show (at most 20)", 20)


@dataclass
class WebSearchArgs:
    """Search the web to identify a landmark, event or object."""

    query: str = _doc("what to look up")


@dataclass
class ExpandGraphArgs:
    """Photos linked to given photos in the memory graph."""

    ids: list[str] = _doc("photo ids to start from", factory=list)
    subset: str | None = _doc("or: a saved subset to start from", None)
    relations: list[str] = _doc(
        "links to follow: " + "; ".join(f"{k} = {v}" for k, v in EXPANSIONS.items()), factory=lambda: ["photoset"]
    )
    save_as: str | None = _doc("name to save the result under (default: expand_graph_<n>)", None)


@dataclass
class AnswerArgs:
    """Give the final answer and stop."""

    ids: list[str] = _doc("the photo ids that answer the question", factory=list)
    subset: str | None = _doc("or: the saved subset that answers the question", None)
    reasoning: str = _doc("how the photos were found (the clues and steps)", "")


TOOLS: dict[str, type] = {
    "image_search": ImageSearchArgs,
    "get_metadata": GetMetadataArgs,
    "filter_metadata": FilterMetadataArgs,
    "view_photos": ViewPhotosArgs,
    "web_search": WebSearchArgs,
    "expand_graph": ExpandGraphArgs,
    "answer": AnswerArgs,
}


# -- results -----------------------------------------------------------------------------------
@dataclass
class PhotoBrief:
    id: str
    date: str | None = None
    address: str | None = None
    event: str | None = None
    score: float | None = None


@dataclass
class SubsetResult:
    """What a photo-producing tool returns: the count, the first photos, the saved subset."""

    count: int
    saved_as: str
    photos: list[PhotoBrief]
    events: list[dict] = field(default_factory=list)
    note: str = ""


@dataclass
class MetadataResult:
    photos: list[dict]
    note: str = ""


@dataclass
class ViewResult:
    photos: list[dict]
    shown: int
    note: str = ""


@dataclass
class WebResult:
    results: list[dict]
    note: str = ""


@dataclass
class ToolOutcome:
    """One executed call: its result (JSON-able) or an error message, images for the VLM,
    and the subset it saved."""

    name: str
    arguments: dict
    result: dict | None = None
    error: str | None = None
    images: list[str] = field(default_factory=list)
    saved: str | None = None

    def text(self) -> str:
        if self.error is not None:
            return json.dumps({"error": self.error}, ensure_ascii=False)
        return json.dumps(self.result, ensure_ascii=False, default=str)

    def to_json(self) -> dict:
        return {
            "tool": self.name,
            "arguments": self.arguments,
            "error": self.error,
            "saved": self.saved,
            "result": self.result,
            "images": self.images,
        }


# -- schemas -----------------------------------------------------------------------------------
def _json_type(tp: Any) -> dict:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _json_type(args[0]) if len(args) == 1 else {"anyOf": [_json_type(a) for a in args]}
    if origin in (list, Sequence):
        return {"type": "array", "items": _json_type(typing.get_args(tp)[0])}
    return {
        str: {"type": "string"},
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
    }.get(tp, {"type": "string"})


def tool_schema(name: str, cls: type) -> dict:
    """The OpenAI function-calling spec of tool ``name`` from its argument dataclass."""
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):
        props[f.name] = {**_json_type(hints[f.name]), "description": f.metadata.get("doc", "")}
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    params = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        params["required"] = required
    return {
        "type": "function",
        "function": {"name": name, "description": (cls.__doc__ or "").strip(), "parameters": params},
    }


class ToolArgumentError(InputError):
    """A tool call whose arguments do not fit the tool."""


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(value, args[0], where)
    if origin is list:
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list):
            raise ToolArgumentError(f"{where} must be a list, got {type(value).__name__}")
        return [_coerce(v, typing.get_args(tp)[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is str:
        if isinstance(value, (dict, list)) or value is None:
            raise ToolArgumentError(f"{where} must be a string, got {type(value).__name__}")
        return str(value)
    if tp is int:
        try:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        except (TypeError, ValueError):
            raise ToolArgumentError(f"{where} must be an integer, got {value!r}") from None
    return value


def parse_arguments(name: str, arguments: Any) -> Any:
    """The argument dataclass of tool ``name`` from a model's arguments (a dict or JSON text);
    raises :class:`ToolArgumentError` naming the tool and argument."""
    if name not in TOOLS:
        raise ToolArgumentError(f"unknown tool '{name}'; tools: {', '.join(TOOLS)}")
    cls = TOOLS[name]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            raise ToolArgumentError(f"arguments of {name} are not valid JSON ({e})") from None
    if not isinstance(arguments, dict):
        raise ToolArgumentError(f"arguments of {name} must be a JSON object, got {type(arguments).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(arguments) - set(names))
    if unknown:
        raise ToolArgumentError(
            f"unknown argument(s) {', '.join(repr(u) for u in unknown)} for {name}; arguments: {', '.join(names)}"
        )
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in arguments:
            values[f.name] = _coerce(arguments[f.name], hints[f.name], f"{name}: argument '{f.name}'")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ToolArgumentError(f"{name}: missing required argument '{f.name}'")
    return cls(**values)


# -- the toolbox -------------------------------------------------------------------------------
TextEmbedder = Callable[[str], Awaitable[np.ndarray]]
PhotoViewer = Callable[[list[Photo]], Awaitable[list[dict]]]
WebSearcher = Callable[[str], Awaitable[tuple[list[dict], str]]]


class Toolbox:
    """The tools over one user's photos in one agent session.

    Args:
        collection: the user's photos.
        subsets: the session's named subsets.
        embed_text: ``async f(text) -> [d]`` (through the run's cached calls).
        view: ``async f(photos) -> [{"caption"?, "tags"?}]`` offline descriptions (may be ``None``).
        web: ``async f(query) -> (results, note)``.
        graph: the memory graph (``None``: expand_graph reports it is off).
        view_images: whether view_photos hands the images to the model.
        default_top_k: image_search's top_k when the model gives none.
    """

    def __init__(
        self,
        collection: PhotoCollection,
        subsets,
        *,
        embed_text: TextEmbedder,
        view: PhotoViewer | None = None,
        web: WebSearcher | None = None,
        graph: MemoryGraph | None = None,
        view_images: bool = True,
        default_top_k: int = 50,
        enabled: Sequence[str] | None = None,
    ):
        self.c = collection
        self.subsets = subsets
        self.embed_text = embed_text
        self.view = view
        self.web = web
        self.graph = graph
        self.view_images = view_images
        self.default_top_k = default_top_k
        self.enabled = list(enabled or TOOLS)
        self.steps = 0
        self.log: list[ToolOutcome] = []

    def schemas(self) -> list[dict]:
        return [tool_schema(n, TOOLS[n]) for n in self.enabled]

    async def call(self, name: str, arguments: Any) -> ToolOutcome:
        """Run one tool call; every problem becomes the outcome's ``error``."""
        self.steps += 1
        raw = arguments if isinstance(arguments, dict) else {"_raw": arguments}
        out = ToolOutcome(name, raw)
        try:
            if name not in self.enabled:
                raise ToolArgumentError(f"unknown tool '{name}'; tools: {', '.join(self.enabled)}")
            args = parse_arguments(name, arguments)
            if name == "image_search" and not (isinstance(arguments, dict) and "top_k" in arguments):
                args.top_k = self.default_top_k
            out.arguments = asdict(args)
            if name != "answer":
                result, out.images, out.saved = await getattr(self, f"_{name}")(args)
                out.result = asdict(result)
        except InputError as e:
            out.error = str(e)
        self.log.append(out)
        return out

    # helpers
    def _name(self, tool: str, save_as: str | None) -> str:
        return save_as.strip() if save_as and save_as.strip() else f"{tool}_{self.steps}"

    def _ids_or_subset(self, ids: list[str], subset: str | None, what: str) -> list[Photo]:
        if subset:
            ids = [*ids, *self.subsets.ids(subset)]
        if not ids:
            raise ToolArgumentError(f"{what}: give photo ids or a saved subset name")
        return self.c.resolve(dict.fromkeys(ids))

    def _brief(self, p: Photo, score: float | None = None) -> PhotoBrief:
        from .dates import format_timestamp

        return PhotoBrief(
            p.id,
            format_timestamp(p.when),
            p.address or None,
            p.event or None,
            None if score is None else round(float(score), 4),
        )

    def _events(self, photos: list[Photo]) -> list[dict]:
        """Events of a result: id, photos of the result in it, date span, place."""
        from .dates import format_timestamp

        groups: dict[str, list[Photo]] = {}
        for p in photos:
            groups.setdefault(p.event, []).append(p)
        out = []
        for ev, ps in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:20]:
            start, end = self.c.event_span(ev)
            out.append(
                {
                    "event": ev,
                    "photos_here": len(ps),
                    "event_size": len(self.c.events.get(ev, [])),
                    "from": format_timestamp(start),
                    "to": format_timestamp(end),
                    "place": next((p.address for p in ps if p.address), None),
                }
            )
        return out

    def _save(
        self,
        tool: str,
        save_as: str | None,
        photos: list[Photo],
        scores: Sequence[float] | None,
        source: str,
        parents: Sequence[str],
        note: str = "",
    ) -> tuple[SubsetResult, list[str], str]:
        name = self._name(tool, save_as)
        self.subsets.save(name, [p.id for p in photos], source=source, parents=[p for p in parents if p])
        briefs = [self._brief(p, None if scores is None else scores[i]) for i, p in enumerate(photos[:LISTED])]
        if len(photos) > LISTED:
            note = (
                note + " " if note else ""
            ) + f"{len(photos)} photos; the first {LISTED} are listed, all are in subset '{name}'."
        return SubsetResult(len(photos), name, briefs, self._events(photos), note.strip()), [], name

    # tools
    async def _image_search(self, a: ImageSearchArgs):
        if not a.query.strip() and not a.photo_ids:
            raise ToolArgumentError("image_search: give a query text, photo_ids, or both")
        k = a.top_k
        if not 1 <= k <= MAX_TOP_K:
            raise ToolArgumentError(f"image_search: top_k must be between 1 and {MAX_TOP_K}, got {k}")
        parts = []
        if a.query.strip():
            parts.append(np.asarray(await self.embed_text(a.query), np.float32))
        if a.photo_ids:
            refs = self.c.resolve(a.photo_ids)
            parts.append(l2_normalize(self.c.embeddings[[self.c.index(p.id) for p in refs]].mean(0)))
        q = l2_normalize(np.mean(parts, axis=0))
        allowed = self.subsets.within(a.search_within)
        mask = self.c.mask(allowed)
        if a.photo_ids:
            mask &= ~self.c.mask(set(a.photo_ids))
        rows, scores = cosine_topk(q, self.c.embeddings, k, mask)
        photos = [self.c.photos[int(r)] for r in rows]
        src = (
            f"image_search(query={a.query!r}" + (f", photo_ids={a.photo_ids}" if a.photo_ids else "") + f", top_k={k})"
        )
        return self._save("image_search", a.save_as, photos, scores.tolist(), src, [a.search_within or ""])

    async def _get_metadata(self, a: GetMetadataArgs):
        photos = self._ids_or_subset(a.ids, a.subset, "get_metadata")
        bad = [
            f
            for f in a.fields
            if f not in METADATA_FIELDS
            and f
            not in (
                "taken_time",
                "place",
                "location",
                "photoset",
                "person",
                "tag",
                "capturedevice",
                "lat",
                "lon",
                "time",
            )
        ]
        if bad:
            raise ToolArgumentError(
                f"get_metadata: unknown field(s) {', '.join(bad)}; fields: {', '.join(METADATA_FIELDS)}"
            )
        note = f"{len(photos)} photos; the first 200 are described." if len(photos) > 200 else ""
        return MetadataResult([p.describe(a.fields or None) for p in photos[:200]], note), [], None

    async def _filter_metadata(self, a: FilterMetadataArgs):
        pred = compile_expression(a.expression, gazetteer=self.c.gazetteer, lookup=self.c.get)
        allowed = self.subsets.within(a.filter_within)
        photos = [p for p in self.c.photos if (allowed is None or p.id in allowed) and pred(p)]
        photos.sort(key=lambda p: (p.when is None, p.when.isoformat() if p.when else "", p.id))
        note = "" if photos else "no photo matches"
        return self._save(
            "filter_metadata",
            a.save_as,
            photos,
            None,
            f"filter_metadata({a.expression!r})",
            [a.filter_within or ""],
            note,
        )

    async def _view_photos(self, a: ViewPhotosArgs):
        n = min(max(1, a.max), 20)
        photos = self._ids_or_subset(a.ids, a.subset, "view_photos")
        shown = photos[:n]
        seen = await self.view(shown) if self.view is not None else [{} for _ in shown]
        rows = [{**asdict(self._brief(p)), **{k: v for k, v in d.items() if v}} for p, d in zip(shown, seen)]
        for r in rows:
            r.pop("score", None)
        note = ""
        if len(photos) > n:
            note = f"showing {n} of {len(photos)} photos (at most 20 at a time)."
        images = [p.path for p in shown] if self.view_images else []
        if not self.view_images and self.view is None:
            note = (note + " " if note else "") + "no image viewer is configured: only metadata is shown."
        return ViewResult(rows, len(shown), note.strip()), images, None

    async def _web_search(self, a: WebSearchArgs):
        if self.web is None:
            return WebResult([], "web search is offline (no backend configured): no results"), [], None
        results, note = await self.web(a.query)
        return WebResult(results, note), [], None

    async def _expand_graph(self, a: ExpandGraphArgs):
        if self.graph is None:
            raise ToolArgumentError("expand_graph: the memory graph is off for this run (method.graph=false)")
        bad = [r for r in a.relations if r not in EXPANSIONS]
        if bad or not a.relations:
            raise ToolArgumentError(
                f"expand_graph: unknown relation(s) {', '.join(bad) or '(none given)'}; "
                f"relations: {', '.join(EXPANSIONS)}"
            )
        seeds = self._ids_or_subset(a.ids, a.subset, "expand_graph")
        found = self.graph.expand([p.id for p in seeds], a.relations)
        ordered = sorted(found.items(), key=lambda kv: (-kv[1][1], self.c.index(kv[0])))
        photos = [self.c.get(pid) for pid, _ in ordered]
        return self._save(
            "expand_graph",
            a.save_as,
            photos,
            [w for _, (_, w) in ordered],
            f"expand_graph(relations={a.relations})",
            [a.subset or ""],
        )

    def answer_ids(self, args: AnswerArgs) -> list[str]:
        """The photo ids of an ``answer`` call (its ids, then its subset's), checked."""
        ids = list(args.ids)
        if args.subset:
            ids += self.subsets.ids(args.subset)
        return [p.id for p in self.c.resolve(dict.fromkeys(ids))]
