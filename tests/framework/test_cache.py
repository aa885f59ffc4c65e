"""The content-addressed call cache: keys, values, persistence across processes."""

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np

from agentcir.framework.cache import MISSING, CallCache
from agentcir.framework.hashing import stable_hash
from agentcir.framework.runner import RunContext


def test_values_round_trip(tmp_path):
    c = CallCache(tmp_path / "c.sqlite")
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    c.put("k", {"text": "hi", "emb": arr, "n": 3, "p": Path("/x/y.jpg")})
    got = CallCache(tmp_path / "c.sqlite").get("k")
    assert got["text"] == "hi" and got["n"] == 3 and got["p"] == Path("/x/y.jpg")
    np.testing.assert_array_equal(got["emb"], arr)
    assert got["emb"].dtype == np.float32
    assert c.get("other") is MISSING


def test_commits_are_visible_to_another_process(tmp_path):
    db = tmp_path / "c.sqlite"
    CallCache(db).put("key", "value")
    code = f"from agentcir.framework.cache import CallCache; print(CallCache({str(db)!r}).get('key'))"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "value"
    )


def test_file_inputs_are_keyed_by_content(tmp_path):
    a = tmp_path / "a.jpg"
    a.write_bytes(b"one")
    k1 = stable_hash(a)
    a.write_bytes(b"two!")
    assert stable_hash(a) != k1
    b = tmp_path / "b.jpg"
    b.write_bytes(b"two!")
    assert stable_hash(b) == stable_hash(a)


class Echo:
    kind = "llm"
    registry_key = "echo"

    def __init__(self, identity):
        self.identity = identity
        self.calls = 0

    def run(self, text):
        self.calls += 1
        return text.upper()


def test_context_call_uses_the_cache_and_the_component_identity(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    ctx = RunContext(cache=cache, run_dir=None)
    e1 = Echo("id-1")
    assert asyncio.run(ctx.call(e1, "run", text="a")) == "A"
    assert asyncio.run(ctx.call(e1, "run", text="a")) == "A"
    assert e1.calls == 1
    e2 = Echo("id-2")  # another model/config/prompt -> another identity -> not a hit
    asyncio.run(ctx.call(e2, "run", text="a"))
    assert e2.calls == 1
    st = ctx.stats[""]
    assert (st.calls, st.cache_hits) == (2, 1)


def test_prompt_file_is_part_of_the_key(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("Describe {{x}}")
    k1 = RunContext.call_key(Echo("i"), "run", {"prompt": str(p), "x": 1})
    p.write_text("Describe {{x}} briefly")
    assert RunContext.call_key(Echo("i"), "run", {"prompt": str(p), "x": 1}) != k1
