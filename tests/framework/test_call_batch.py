"""RunContext.call_batch: batched model calls that share the per-item cache of RunContext.call."""

from __future__ import annotations

import asyncio

import pytest

from agentcir.framework.cache import CallCache
from agentcir.framework.runner import RunContext


class Shouter:
    """A captioner stand-in: ``caption`` upper-cases the file's text; ``caption_many`` batches it."""

    kind = "captioner"
    registry_key = "shouter"
    identity = "shouter-v1"

    def __init__(self, broken: str | None = None):
        self.single: list[str] = []
        self.batches: list[int] = []
        self.broken = broken

    def _one(self, path) -> str:
        text = path.read_text()
        if text == self.broken:
            raise ValueError(f"cannot read '{path.name}'")
        return text.upper()

    def caption(self, image) -> str:
        self.single.append(image.name)
        return self._one(image)

    def caption_many(self, images) -> list[str]:
        self.batches.append(len(images))
        return [self._one(p) for p in images]


def files(tmp_path, texts):
    out = []
    for i, t in enumerate(texts):
        p = tmp_path / f"f{i}.txt"
        p.write_text(t)
        out.append(p)
    return out


def batch(ctx, comp, paths, size, seen=None):
    return asyncio.run(
        ctx.call_batch(
            comp,
            "caption",
            lambda items: comp.caption_many([x["image"] for x in items]),
            [{"image": p} for p in paths],
            batch=size,
            on_done=None if seen is None else seen.append,
        )
    )


def test_batches_fill_the_cache_that_single_calls_read_and_the_other_way_round(tmp_path):
    paths = files(tmp_path, ["a", "b", "c", "d", "e"])
    ctx = RunContext(cache=CallCache(tmp_path / "c.sqlite"), run_dir=None, progress=False)
    comp = Shouter()
    assert asyncio.run(ctx.call(comp, "caption", image=paths[1])) == "B"  # cached one by one first
    seen: list[int] = []
    assert batch(ctx, comp, paths, 2, seen) == ["A", "B", "C", "D", "E"]
    assert comp.batches == [2, 2] and comp.single == ["f1.txt"]  # the cached item is not computed again
    assert seen == [1, 2, 2] and sum(seen) == len(paths)
    st = ctx.stats[""]
    assert (st.calls, st.cache_hits) == (5, 1)  # 1 single + 4 batched; 1 hit
    assert asyncio.run(ctx.call(comp, "caption", image=paths[3])) == "D"  # a batched answer, read by call
    assert comp.single == ["f1.txt"] and ctx.stats[""].cache_hits == 2
    again = RunContext(cache=CallCache(tmp_path / "c.sqlite"), run_dir=None, progress=False)  # a rerun
    assert batch(again, comp, paths, 2) == ["A", "B", "C", "D", "E"]
    assert comp.batches == [2, 2] and again.stats[""].calls == 0


def test_an_input_given_twice_is_computed_once(tmp_path):
    paths = files(tmp_path, ["x", "y"])
    ctx = RunContext(cache=CallCache(), run_dir=None, progress=False)
    comp = Shouter()
    assert batch(ctx, comp, [paths[0], paths[1], paths[0]], 8) == ["X", "Y", "X"]
    assert comp.batches == [2] and ctx.stats[""].calls == 2


def test_a_failing_batch_is_redone_item_by_item_and_the_error_names_its_input(tmp_path):
    paths = files(tmp_path, ["a", "bad", "c", "d"])
    ctx = RunContext(cache=CallCache(tmp_path / "c.sqlite"), run_dir=None, progress=False)
    comp = Shouter(broken="bad")
    with pytest.raises(ValueError, match="cannot read 'f1.txt'"):
        batch(ctx, comp, paths, 4)
    assert comp.single == ["f0.txt", "f1.txt"]  # the batch failed; item by item up to the bad one
    assert asyncio.run(ctx.call(comp, "caption", image=paths[0])) == "A"  # kept: a hit
    assert comp.single == ["f0.txt", "f1.txt"]
