"""agentcir.method_kit: the public helpers of a method (the same functions the built-in methods use)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import agentcir.method_kit as kit
from agentcir.framework.errors import InputError
from agentcir.framework.methods import common


def test_the_kit_is_the_built_in_methods_helpers():
    assert kit.reference_caption is common.reference_caption and kit.embed_texts is common.embed_texts
    assert kit.reference_rows is common.reference_rows and kit.to_candidates is common.to_candidates
    assert kit.run_task is common.task
    for name in kit.__all__:
        obj = getattr(kit, name)
        assert getattr(obj, "__doc__", None) or not callable(obj), f"{name} has no docstring"


class _Gallery:
    def __init__(self, emb, ids):
        self.image_emb, self.ids, self.dim = emb, ids, emb.shape[1]

    def index_of(self, item_id):
        return self.ids.index(item_id) if item_id in self.ids else -1

    def __len__(self):
        return len(self.ids)


class _Ctx:
    kernels = "reference"


def test_rank_excludes_the_reference_and_checks_its_input():
    emb = np.eye(4, dtype=np.float32)
    state = kit.RunState(
        queries=[kit.Query("q0", "t", reference_id="b"), kit.Query("q1", "t", reference_id="z")],
        gallery=_Gallery(emb, ["a", "b", "c", "d"]),
    )
    q = np.array([[0.1, 1.0, 0.5, 0.0], [0.0, 1.0, 0.5, 0.2]], np.float32)
    c = kit.rank(_Ctx(), state, q, 3)
    assert c.ids.tolist() == [[2, 0, 3], [1, 2, 3]]  # query 0's reference (row 1) is left out
    assert kit.rank(_Ctx(), state, q, 2, exclude_reference=False).ids.tolist() == [[1, 2], [1, 2]]
    one = kit.rank(_Ctx(), state, q[:1], 2, of=state.queries[:1])
    assert one.ids.tolist() == [[2, 0]]
    with pytest.raises(InputError, match=r"rank: queries must be \[2, d\]"):
        kit.rank(_Ctx(), state, q[:1], 2)
    with pytest.raises(InputError, match="query dimension 3 differs from the gallery's 4"):
        kit.rank(_Ctx(), state, q[:, :3], 2)
    with pytest.raises(InputError, match="against must be 'images' or 'captions'"):
        kit.rank(_Ctx(), state, q, 2, against="videos")


def test_embed_texts_makes_one_call_over_the_distinct_texts():
    calls = []

    class Ctx:
        async def call(self, component, op, **inputs):
            calls.append(inputs["texts"])
            return np.arange(len(inputs["texts"]) * 2, dtype=np.float32).reshape(-1, 2)

    out = asyncio.run(kit.embed_texts(Ctx(), object(), ["a", "b", "a"]))
    assert calls == [["a", "b"]] and out.tolist() == [[0, 1], [2, 3], [0, 1]]
