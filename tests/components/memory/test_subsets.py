"""Named photo subsets: create/get/list, set operations, search/filter-within, lineage, persistence."""

import json

import numpy as np
import pytest

from agentcir.components.memory.subsets import NamedSubsets, SubsetError
from agentcir.registry import MEMORIES


def test_create_get_list():
    s = NamedSubsets()
    s.save("cats", ["p3", "p1", "p3", 7], source="image_search(query='cat', top_k=50)")
    assert s.ids("cats") == ["p3", "p1", "7"]  # order kept, duplicates dropped, ids as strings
    assert "cats" in s and " cats " in s and "dogs" not in s and len(s) == 1
    assert s.list() == [{"name": "cats", "size": 3, "source": "image_search(query='cat', top_k=50)", "parents": []}]
    got = s.get("cats")
    got.ids.append("mutated")
    assert s.ids("cats") == ["p3", "p1", "7"]  # get returns a copy
    s.save("cats", ["p9"])
    assert s.ids("cats") == ["p9"]  # saving again replaces


def test_unknown_names_list_the_saved_ones():
    s = NamedSubsets()
    with pytest.raises(SubsetError, match="unknown subset 'cats'; no subset has been saved yet"):
        s.get("cats")
    s.save("rome", ["a", "b"])
    s.save("florence", ["c"])
    with pytest.raises(SubsetError, match=r"unknown subset 'cats'; saved subsets: rome \(2\), florence \(1\)"):
        s.ids("cats")
    with pytest.raises(SubsetError, match="unknown subset 'venice'"):
        s.union("both", "rome", "venice")
    with pytest.raises(SubsetError, match="a subset name must be a non-empty string, got ''"):
        s.save("", ["a"])
    with pytest.raises(SubsetError, match="must be a list of ids, got the single string 'abc'"):
        s.save("x", "abc")
    with pytest.raises(SubsetError, match="unknown subset 'nope'"):
        s.save("child", ["a"], parents=["nope"])


def test_set_operations_and_lineage():
    s = NamedSubsets()
    s.save("rome", ["a", "b", "c", "d"], source="filter_metadata(place='Rome')")
    s.save("florence", ["e", "c", "f", "a"], source="filter_metadata(place='Florence')")
    s.save("cats", ["c", "a", "x", "e"], source="image_search(query='stray cat')")
    assert s.union("trip", "rome", "florence").ids == ["a", "b", "c", "d", "e", "f"]
    assert s.intersect("cats_in_trip", "cats", "trip").ids == ["c", "a", "e"]
    assert s.difference("rome_only", "rome", "florence").ids == ["b", "d"]
    assert s.get("cats_in_trip").source == "intersect(cats, trip)"
    chain = [x.name for x in s.lineage("cats_in_trip")]
    assert chain == ["cats", "rome", "florence", "trip", "cats_in_trip"]
    with pytest.raises(SubsetError, match="union needs at least one subset name"):
        s.union("empty")
    s.delete("rome_only")
    assert "rome_only" not in s
    s.clear()
    assert s.names() == []


def test_search_and_filter_within():
    s = NamedSubsets()
    s.save("a", ["1", "2"])
    s.save("b", ["2", "3"])
    assert s.within(None) is None and s.within("") is None and s.within([]) is None
    assert s.within("a") == {"1", "2"} and s.within(["a", "b"]) == {"1", "2", "3"}
    gallery_ids = ["0", "1", "2", "3", "4"]
    np.testing.assert_array_equal(s.mask("b", gallery_ids), [False, False, True, True, False])
    np.testing.assert_array_equal(s.mask(None, gallery_ids), [True] * 5)
    with pytest.raises(SubsetError, match="unknown subset 'c'"):
        s.mask("c", gallery_ids)


def test_persistence_and_resume(tmp_path):
    path = tmp_path / "q1.json"
    s = NamedSubsets(path)
    s.save("rome", ["a", "b"], source="filter_metadata(place='Rome')")
    s.save("cats", ["b"], parents=["rome"], source="image_search(query='cat', search_within='rome')")
    again = NamedSubsets(path)  # a resumed run
    assert again.list() == s.list() and [x.name for x in again.lineage("cats")] == ["rome", "cats"]
    assert json.loads(path.read_text())["version"] == 1
    path.write_text("{not json")
    with pytest.raises(SubsetError, match=r"subsets file '.*q1.json' is not a valid subsets file"):
        NamedSubsets(path)


def test_component_hands_out_one_store_per_session(tmp_path):
    mem = MEMORIES.build("subsets", {"dir": str(tmp_path / "subsets")})
    a = mem.session("q/1")
    assert mem.session("q/1") is a and mem.session("q2") is not a
    a.save("x", ["1"])
    assert (tmp_path / "subsets" / "q_1.json").is_file()
    in_memory = MEMORIES.build("subsets").session("q1")
    in_memory.save("x", ["1"])
    assert in_memory.path is None
    with pytest.raises(SubsetError, match="session key must be a non-empty string"):
        mem.session("")
