"""The memory graph of a photo collection (DeepImageSearch §3): who, where, when and what links photos.

Nodes (``type``):

- ``Photo`` (``photo:<id>``), one per photo;
- ``Photoset`` (``photoset:<event id>`` for the time/place events of
  :class:`~.store.PhotoCollection`, ``album:<name>`` for folders/XMP albums);
- ``VisualClue`` (``clue:<label>``): what a photo shows, from its XMP keywords and the
  offline visual tags (encoder zero-shot labels over the attribute vocabularies, or words of
  a captioner's caption);
- ``Person`` (``person:<name>``): people *named in the metadata* (XMP face regions, people
  tags, DISBench fields). No face is detected or clustered in the pixels.

Edges (``relation``, ``kind``):

- structural: ``in_photoset`` and ``in_album`` (photo -> photoset), ``shows_clue``
  (photo -> clue), ``shows_person`` (photo -> person), ``same_day`` and ``same_place``
  (photo - photo; within a day or a city, each photo is linked to its ``max_links`` nearest
  in time, so a large day stays linear in size);
- associative: ``similar`` (photo - photo in *different* photosets whose image embeddings
  have cosine >= ``similarity`` , at most ``similar_k`` per photo) and ``shared_clue``
  (photoset - photoset that show the same visual clue; weight = clues shared).

:meth:`MemoryGraph.expand` is what the ``expand_graph`` tool runs: the photos one hop away
from a set of photos through the chosen relations.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .places import fold
from .store import PhotoCollection

STRUCTURAL = ("in_photoset", "in_album", "shows_clue", "shows_person", "same_day", "same_place")
ASSOCIATIVE = ("similar", "shared_clue")
#: relations the expand_graph tool accepts, and what each reaches from a photo
EXPANSIONS = {
    "photoset": "photos of the same event (time/place photoset)",
    "album": "photos of the same album (folder or XMP album)",
    "same_day": "photos taken the same day",
    "same_place": "photos taken in the same city",
    "similar": "visually similar photos of other events (image embeddings)",
    "clue": "photos that show the same visual clue (keyword or visual tag)",
    "person": "photos that name the same person",
    "linked_events": "photos of other events that share visual clues with this one",
}


@dataclass
class GraphConfig:
    similarity: float = 0.9
    similar_k: int = 5
    max_links: int = 4


@dataclass
class MemoryGraph:
    nodes: dict[str, dict] = field(default_factory=dict)
    adj: dict[str, list[tuple[str, str, float]]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add_node(self, node: str, node_type: str, **attrs) -> str:
        if node not in self.nodes:
            self.nodes[node] = {"type": node_type, **attrs}
        return node

    def add_edge(self, a: str, b: str, relation: str, weight: float = 1.0) -> None:
        self.adj[a].append((b, relation, weight))
        self.adj[b].append((a, relation, weight))
        self.counts[relation] += 1

    # -- reading ------------------------------------------------------------------------------
    def stats(self) -> dict:
        by_type: dict[str, int] = defaultdict(int)
        for n in self.nodes.values():
            by_type[n["type"]] += 1
        return {
            "nodes": dict(by_type),
            "edges": {
                "structural": sum(self.counts[r] for r in STRUCTURAL),
                "associative": sum(self.counts[r] for r in ASSOCIATIVE),
                "by_relation": {r: self.counts[r] for r in (*STRUCTURAL, *ASSOCIATIVE)},
            },
        }

    def neighbours(self, node: str, relations: Iterable[str]) -> list[tuple[str, str, float]]:
        rel = set(relations)
        return [e for e in self.adj.get(node, ()) if e[1] in rel]

    def clues_of(self, photo_id: str) -> list[str]:
        return [self.nodes[n]["label"] for n, r, _ in self.neighbours(f"photo:{photo_id}", ["shows_clue"])]

    def expand(self, photo_ids: Sequence[str], relations: Sequence[str]) -> dict[str, tuple[str, float]]:
        """Photos one hop away from ``photo_ids`` through ``relations`` (keys of
        :data:`EXPANSIONS`): ``{photo id: (relation, weight)}``, the given photos excluded."""
        seeds = {f"photo:{i}" for i in photo_ids}
        out: dict[str, tuple[str, float]] = {}

        def reach(node: str, rel: str, w: float) -> None:
            if node not in seeds and self.nodes.get(node, {}).get("type") == "Photo":
                pid = node[len("photo:") :]
                if pid not in out or out[pid][1] < w:
                    out[pid] = (rel, w)

        via_hub = {"photoset": "in_photoset", "album": "in_album", "clue": "shows_clue", "person": "shows_person"}
        for seed in seeds:
            for rel in relations:
                if rel in via_hub:
                    for hub, _, _ in self.neighbours(seed, [via_hub[rel]]):
                        for n, _, w in self.neighbours(hub, [via_hub[rel]]):
                            reach(n, rel, w)
                elif rel in ("same_day", "same_place", "similar"):
                    for n, _, w in self.neighbours(seed, [rel]):
                        reach(n, rel, w)
                elif rel == "linked_events":
                    for ps, _, _ in self.neighbours(seed, ["in_photoset"]):
                        for other, _, w in self.neighbours(ps, ["shared_clue"]):
                            for n, _, _ in self.neighbours(other, ["in_photoset"]):
                                reach(n, "linked_events", w)
        return out

    def to_json(self) -> dict:
        seen = set()
        edges = []
        for a, lst in self.adj.items():
            for b, r, w in lst:
                key = (min(a, b), max(a, b), r)
                if key not in seen:
                    seen.add(key)
                    edges.append([key[0], key[1], r, round(float(w), 4)])
        return {"nodes": self.nodes, "edges": edges, "stats": self.stats()}


def build_graph(
    collection: PhotoCollection, clues: Sequence[Sequence[str]] = (), cfg: GraphConfig | None = None
) -> MemoryGraph:
    """Build the memory graph of ``collection``.

    Args:
        collection: the user's photos.
        clues: per photo (collection order), visual clue labels from the offline tagger or a
            captioner (XMP keywords are always added).
        cfg: thresholds (see :class:`GraphConfig`).
    """
    cfg = cfg or GraphConfig()
    g = MemoryGraph()
    photos = collection.photos
    for i, p in enumerate(photos):
        node = g.add_node(f"photo:{p.id}", "Photo", label=p.id)
        g.add_edge(node, g.add_node(f"photoset:{p.event}", "Photoset", label=p.event, kind="event"), "in_photoset")
        for a in p.albums:
            g.add_edge(node, g.add_node(f"album:{a}", "Photoset", label=a, kind="album"), "in_album")
        labels = list(dict.fromkeys([*p.tags, *(clues[i] if i < len(clues) else [])]))
        for c in labels:
            if fold(c):
                g.add_edge(node, g.add_node(f"clue:{fold(c)}", "VisualClue", label=c), "shows_clue")
        for name in p.people:
            g.add_edge(
                node, g.add_node(f"person:{fold(name)}", "Person", label=name, source="metadata"), "shows_person"
            )
    # same day / same place: link each photo to its nearest neighbours in time within the group
    for key, relation in (
        (lambda p: p.when.date() if p.when else None, "same_day"),
        (lambda p: fold(p.city) if p.city else None, "same_place"),
    ):
        groups: dict = defaultdict(list)
        for p in photos:
            k = key(p)
            if k is not None:
                groups[k].append(p)
        for members in groups.values():
            members.sort(key=lambda p: (p.when is None, p.when.isoformat() if p.when else "", p.id))
            for j, p in enumerate(members):
                for q in members[j + 1 : j + 1 + cfg.max_links]:
                    g.add_edge(f"photo:{p.id}", f"photo:{q.id}", relation)
    # associative: visual similarity across photosets (each pair once)
    emb = collection.embeddings
    pairs: dict[tuple[int, int], float] = {}
    if len(photos) > 1 and cfg.similar_k > 0:
        event_ids = {e: n for n, e in enumerate(dict.fromkeys(p.event for p in photos))}
        events = np.array([event_ids[p.event] for p in photos])
        for start in range(0, len(photos), 1024):
            sims = emb[start : start + 1024] @ emb.T
            for r in range(sims.shape[0]):
                i = start + r
                row = np.where(events == events[i], -np.inf, sims[r])
                for j in np.argsort(-row, kind="stable")[: cfg.similar_k]:
                    if row[j] >= cfg.similarity:
                        pairs[(min(i, int(j)), max(i, int(j)))] = float(row[j])
    for (i, j), w in sorted(pairs.items()):
        g.add_edge(f"photo:{photos[i].id}", f"photo:{photos[j].id}", "similar", w)
    # associative: photosets sharing a clue
    clue_sets: dict[str, set[str]] = defaultdict(set)
    for node, attrs in g.nodes.items():
        if attrs["type"] == "VisualClue":
            for n, _, _ in g.neighbours(node, ["shows_clue"]):
                for ps, _, _ in g.neighbours(n, ["in_photoset"]):
                    clue_sets[ps].add(node)
    sets = sorted(clue_sets)
    for a_i, a in enumerate(sets):
        for b in sets[a_i + 1 :]:
            shared = len(clue_sets[a] & clue_sets[b])
            if shared:
                g.add_edge(a, b, "shared_clue", float(shared))
    return g
