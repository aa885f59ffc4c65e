"""The memory graph: node and edge types, honest persons, expansion."""

import numpy as np

from agentcir.framework.gallery import Gallery, GalleryItem
from agentcir.framework.methods.imageseeker.graph import GraphConfig, build_graph
from agentcir.framework.methods.imageseeker.store import PhotoCollection


class _Gallery(Gallery):
    """An in-memory gallery with given embeddings."""

    def __init__(self, items, emb):
        super().__init__(None, {"dim": emb.shape[1]}, items)
        self._image_emb = emb


def small_collection():
    items = [
        GalleryItem(
            "a1",
            "a1.jpg",
            None,
            {
                "taken_time": "2021-05-01 10:00:00",
                "address": "Rome, Italy",
                "album": "italy",
                "people": ["Ada"],
                "tags": ["fountain"],
            },
        ),
        GalleryItem(
            "a2", "a2.jpg", None, {"taken_time": "2021-05-01 12:00:00", "address": "Rome, Italy", "album": "italy"}
        ),
        GalleryItem(
            "a3",
            "a3.jpg",
            None,
            {"taken_time": "2021-05-01 15:00:00", "address": "Rome, Italy", "people": ["Ada", "Bo"]},
        ),
        GalleryItem(
            "b1",
            "b1.jpg",
            None,
            {"taken_time": "2022-08-10 09:00:00", "address": "Paris, France", "tags": ["fountain"]},
        ),
        GalleryItem(
            "b2", "b2.jpg", None, {"taken_time": "2022-08-10 18:00:00", "address": "Paris, France", "people": ["Bo"]}
        ),
        GalleryItem("c1", "c1.jpg", None, {"album": "scans"}),
    ]
    emb = np.eye(6, 4, dtype=np.float32)
    emb[3] = emb[0]  # b1 looks like a1 (another event): an associative "similar" link
    emb[5] = [0, 0, 0, 1]
    return PhotoCollection(_Gallery(items, emb), None)


def test_photosets_events_and_undated_photos():
    c = small_collection()
    assert sorted(len(v) for v in c.events.values()) == [1, 2, 3]
    assert c.get("a1").event == c.get("a3").event != c.get("b1").event
    assert c.get("c1").event == "album:scans"


def test_nodes_edges_and_expansion():
    c = small_collection()
    g = build_graph(c, [["hat"], [], ["hat"], [], [], []], GraphConfig(similarity=0.9, similar_k=2, max_links=4))
    st = g.stats()
    assert st["nodes"] == {
        "Photo": 6,
        "Photoset": 5,
        "VisualClue": 2,
        "Person": 2,
    }  # 3 events + 2 albums; fountain, hat; Ada, Bo
    rel = st["edges"]["by_relation"]
    assert rel["in_photoset"] == 6 and rel["in_album"] == 3 and rel["shows_person"] == 4 and rel["shows_clue"] == 4
    assert rel["same_day"] == 3 + 1 and rel["same_place"] == 3 + 1 and rel["similar"] == 1
    assert rel["shared_clue"] == 1  # the Rome and Paris events both show a fountain
    assert all(n["source"] == "metadata" for n in g.nodes.values() if n["type"] == "Person")
    assert set(g.expand(["a1"], ["photoset"])) == {"a2", "a3"}
    assert set(g.expand(["a1"], ["person"])) == {"a3"}
    assert set(g.expand(["a3"], ["person"])) == {"a1", "b2"}
    assert set(g.expand(["a1"], ["similar"])) == {"b1"}
    assert set(g.expand(["a1"], ["clue"])) == {"b1", "a3"}
    assert set(g.expand(["a2"], ["linked_events"])) == {"b1", "b2"}
    assert set(g.expand(["a1"], ["album"])) == {"a2"}
    data = g.to_json()
    assert len(data["edges"]) == st["edges"]["structural"] + st["edges"]["associative"]
