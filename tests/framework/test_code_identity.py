"""Identities cover code: an edited method or component is recomputed, its unchanged model calls
are not; ``version`` replaces the digest; endpoints are identified by the model they serve;
``run.plugins`` imports unpackaged code; ``--plan`` counts cached calls."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework import code_identity as ci
from agentcir.framework.errors import InputError
from agentcir.framework.recipe import compose
from agentcir.framework.runner import run_recipe

ROOT = Path(__file__).resolve().parents[2]

HELPERS = '''\
"""How the target text is built (edited by the tests)."""


def describe(text):
    return text
'''

ENCODER = '''\
"""A tiny encoder: colour statistics for images, hashed words for texts."""

import hashlib
from dataclasses import dataclass

import numpy as np

from agentcir.framework.interfaces import Encoder
from agentcir.registry import ENCODERS

DIM = 16


@ENCODERS.register("{prefix}_enc")
class HashEncoder(Encoder):
    @dataclass
    class Config:
        batch_size: int = 64

    dim = DIM

    def _embed_images(self, images):
        proj = np.random.default_rng(0).standard_normal((3, DIM)).astype(np.float32)
        return np.stack([np.asarray(im.resize((8, 8)), np.float32).mean((0, 1)) / 255.0 for im in images]) @ proj

    def _embed_texts(self, texts):
        out = np.full((len(texts), DIM), 1e-3, np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                h = int(hashlib.md5(w.encode()).hexdigest()[:8], 16)
                out[i, h % DIM] += 1.0 if (h >> 8) % 2 else -1.0
        return out
'''

METHOD = '''\
"""A small plugin method, registered when imported (run.plugins), with its encoder."""

import json
from dataclasses import dataclass

import numpy as np

from agentcir.framework.method import Method, Stage
from agentcir.framework.types import Candidates
from agentcir.registry import METHODS

from . import encoder, helpers  # noqa: F401 (encoder: registers {prefix}_enc)


@METHODS.register("{prefix}_m")
class Rewrite(Method):
    requires = ("encoder", "llm")
    needs_captions = True  # a gallery_captions stage first (which the method's edits do not affect)

    @dataclass
    class Config:
        top_k: int = 10

    def stages(self):
        return [Stage("rewrite", self._rewrite), Stage("describe", self._describe), Stage("rank", self._rank)]

    async def _rewrite(self, ctx, state):
        async def one(q):
            reply = await ctx.call(self.llm, "run_task", task="rewrite_caption",
                                   variables={{"reference_caption": "a shirt", "modification": q.text}})
            return {{"caption": json.loads(reply)["caption"]}}

        await ctx.map(state, one)

    async def _describe(self, ctx, state):
        async def one(q):
            return {{"text": helpers.describe(state.record(q, "rewrite")["caption"])}}

        await ctx.map(state, one)

    async def _rank(self, ctx, state):
        texts = [state.record(q, "describe")["text"] for q in state.queries]
        emb = np.asarray(await ctx.call(self.encoder, "encode_texts", texts=texts), np.float32)
        state.candidates = Candidates.from_scores(emb @ np.asarray(state.gallery.image_emb, np.float32).T, self.cfg.top_k)
'''


def make_plugin(tmp_path: Path, prefix: str) -> tuple[Path, Path, str]:
    """A package ``<prefix>pkg`` (method + helpers) in ``tmp_path/plug`` and its recipe folder."""
    pkg = tmp_path / "plug" / f"{prefix}pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text(HELPERS)
    (pkg / "method.py").write_text(METHOD.format(prefix=prefix))
    (pkg / "encoder.py").write_text(ENCODER.format(prefix=prefix))
    rec = tmp_path / "recipes"
    (rec / "method").mkdir(parents=True)
    (rec / "encoder").mkdir()
    (rec / "method" / f"{prefix}_m.yaml").write_text(f"name: {prefix}_m\ntop_k: 10\n")
    (rec / "encoder" / f"{prefix}_enc.yaml").write_text(f"name: {prefix}_enc\nbatch_size: 64\n")
    return tmp_path / "plug", rec, f"{prefix}pkg"


def edit(path: Path, old: str, new: str) -> None:
    """Edit a source file so that its size and mtime both change."""
    text = path.read_text()
    assert old in text
    st = path.stat()
    path.write_text(text.replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))


def recipe_args(tmp_path: Path, prefix: str, pkg: str) -> list[str]:
    return [
        f"method={prefix}_m",
        f"encoder={prefix}_enc",
        "llm=rules",
        f"run.root={tmp_path / 'runs'}",
        f"run.cache={tmp_path / 'cache.sqlite'}",
        "run.progress=false",
        f"run.plugins=[{pkg}.method]",
    ]


# -- the stale-result bug -------------------------------------------------------------------------
def test_editing_a_plugin_method_recomputes_its_stages_and_keeps_the_model_calls(tmp_path, monkeypatch, caplog):
    plug, rec, pkg = make_plugin(tmp_path, "stale")
    monkeypatch.syspath_prepend(str(plug))
    args = recipe_args(tmp_path, "stale", pkg)
    recipe = compose(args, extra_dirs=[str(rec)])
    assert recipe["run"]["plugins"] == [f"{pkg}.method"]
    res = run_recipe(recipe)
    inputs = json.loads((res.dir / "inputs.json").read_text())
    assert set(inputs["code"]) >= {f"{pkg}.method", f"{pkg}.helpers", f"{pkg}.encoder"}
    assert not any(ci.is_neutral(m) for m in inputs["code"])  # the runner, the registry, ... are not code inputs
    assert all(len(d) == 12 for d in inputs["code"].values())
    calls = res.stats["rewrite"].calls
    assert calls > 0
    traces = (res.dir / "stages" / "describe.jsonl").read_text()
    captions_done = (res.dir / "stages" / "gallery_captions.done").stat().st_mtime_ns

    again = run_recipe(compose(args, extra_dirs=[str(rec)]))  # nothing edited: loaded, not recomputed
    assert again.stats["rank"].resumed_queries == len(res.queries)

    # a comment or a docstring is not code: still reused
    edit(plug / pkg / "helpers.py", "def describe(text):\n", "def describe(text):  # the target text\n")
    same = run_recipe(compose(args, extra_dirs=[str(rec)]))
    assert same.stats["describe"].resumed_queries == len(res.queries)

    # the researcher edits how the method builds its target text, and reruns the same command
    edit(plug / pkg / "helpers.py", "    return text\n", "    return 'zebra ' + text.upper()\n")
    importlib.reload(sys.modules[f"{pkg}.helpers"])  # a new process would import the edited module
    with caplog.at_level("WARNING", logger="agentcir"):
        res2 = run_recipe(compose(args, extra_dirs=[str(rec)]))
    assert res2.dir == res.dir
    assert f"code edited: {pkg}.helpers" in caplog.text
    assert "the stages after 'gallery_captions' are recomputed" in caplog.text  # upstream of the edit: kept
    assert (res.dir / "stages" / "gallery_captions.done").stat().st_mtime_ns == captions_done
    assert f"{pkg}.method" not in caplog.text.split("code edited: ")[1].split(";")[0]  # only the edited module
    assert res2.stats["describe"].resumed_queries == 0 and res2.stats["rank"].resumed_queries == 0
    new_traces = (res.dir / "stages" / "describe.jsonl").read_text()
    assert new_traces != traces and "ZEBRA" not in traces and "zebra" in new_traces
    assert not np.array_equal(res2.candidates.ids, res.candidates.ids)
    assert json.loads((res.dir / "metrics.json").read_text())["final"] == res2.metrics["final"]
    # the model calls did not change: every one comes from the call cache
    assert res2.stats["rewrite"].calls == 0 and res2.stats["rewrite"].cache_hits == len(res.queries)
    assert (
        json.loads((res.dir / "inputs.json").read_text())["code"][f"{pkg}.helpers"] != inputs["code"][f"{pkg}.helpers"]
    )


def test_editing_a_component_changes_its_identity_not_the_others(tmp_path, monkeypatch):
    plug, rec, pkg = make_plugin(tmp_path, "comp")
    monkeypatch.syspath_prepend(str(plug))
    from agentcir.framework.recipe import ComponentPool

    recipe = compose(recipe_args(tmp_path, "comp", pkg), extra_dirs=[str(rec)])
    pool = ComponentPool(recipe)
    enc, llm, method = pool.get("encoder"), pool.get("llm"), pool.get("method")
    before = (enc.identity, llm.identity, method.identity)
    edit(plug / pkg / "encoder.py", "/ 255.0", "/ 256.0")  # the encoder's module (the method imports it)
    pool2 = ComponentPool(recipe)
    enc2, llm2, method2 = pool2.get("encoder"), pool2.get("llm"), pool2.get("method")
    assert enc2.identity != before[0] and method2.identity != before[2]
    assert llm2.identity == before[1]  # the LLM's calls keep their cache keys


# -- the digest ------------------------------------------------------------------------------------
def test_module_closure_follows_the_package_and_skips_neutral_modules(tmp_path, monkeypatch):
    pkg = tmp_path / "clo" / "cpkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "import os\nimport numpy\nfrom .sub import b\nfrom agentcir.framework import runner\n"
        "def f():\n    from .sub.c import g\n    return g\n"
    )
    (pkg / "sub" / "b.py").write_text("from ..d import x\n")
    (pkg / "sub" / "c.py").write_text("def g():\n    return 1\n")
    (pkg / "d.py").write_text("x = 1\n")
    (pkg / "unused.py").write_text("y = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path / "clo"))
    got = ci.module_closure("cpkg.a")
    assert set(got) == {"cpkg.a", "cpkg.sub", "cpkg.sub.b", "cpkg.sub.c", "cpkg.d"}  # not numpy, os, the runner
    # a docstring or a comment changes nothing; code does
    edit(pkg / "d.py", "x = 1\n", '"""Doc."""\nx = 1  # one\n')
    assert ci.module_closure("cpkg.a") == got
    edit(pkg / "d.py", "x = 1", "x = 2")
    again = ci.module_closure("cpkg.a")
    assert ci.changed_modules(got, again) == ["cpkg.d"]


def test_a_loose_module_covers_its_folder_siblings(tmp_path, monkeypatch):
    (tmp_path / "loose_main.py").write_text("import loose_helper\nimport json\n")
    (tmp_path / "loose_helper.py").write_text("K = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert set(ci.module_closure("loose_main")) == {"loose_main", "loose_helper"}


def test_agentcir_components_cover_their_own_modules_not_the_runner():
    from agentcir.registry import LLMS, METHODS

    code = ci.class_code(METHODS.get("octopus").obj)
    assert "agentcir.framework.methods.octopus" in code and "agentcir.framework.methods.common" in code
    assert not {"agentcir.framework.runner", "agentcir.framework.cache", "agentcir.registry"} & set(code)
    llm = ci.class_code(LLMS.get("openai").obj)
    assert "agentcir.components.llms.openai" in llm and "agentcir.framework.methods.octopus" not in llm


def test_version_replaces_the_code_digest(tmp_path, monkeypatch):
    pkg = tmp_path / "ver" / "vpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    src = textwrap.dedent("""
        from dataclasses import dataclass
        from typing import ClassVar
        from agentcir.framework.component import Component

        class Versioned(Component):
            kind = "llm"
            version: ClassVar[str] = "1"

            @dataclass
            class Config:
                pass

            def f(self):
                return 1

        class Plain(Component):
            kind = "llm"

            def f(self):
                return 1
        """)
    (pkg / "m.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path / "ver"))
    from vpkg import m

    v1, p1 = m.Versioned().identity, m.Plain().identity
    assert ci.class_code(m.Versioned) == {"vpkg.m:Versioned": "version:1"}
    edit(pkg / "m.py", "return 1", "return 2")  # an edit without a version bump
    assert m.Versioned().identity == v1  # the author's version decides
    assert m.Plain().identity != p1  # the default: the code decides
    m.Versioned.version = "2"
    assert m.Versioned().identity != v1


def test_a_class_without_a_source_file_is_digested_by_source_or_bytecode(monkeypatch):
    from agentcir.framework.component import Component

    def make(body: str) -> type:
        mod = types.ModuleType("nb_cell_mod")  # a notebook cell: no file
        monkeypatch.setitem(sys.modules, "nb_cell_mod", mod)
        exec(compile(textwrap.dedent(body), "<cell>", "exec"), mod.__dict__)  # noqa: S102 (a notebook cell)
        return mod.Enc

    base = (
        "from agentcir.framework.component import Component\n"
        "def helper(x):\n    return x + {k}\n"
        "class Enc(Component):\n    def f(self, x):\n        return helper(x)\n"
    )
    a, b, c = make(base.format(k=1)), make(base.format(k=1)), make(base.format(k=2))
    assert issubclass(a, Component)
    assert ci.class_code(a) == ci.class_code(b)
    assert ci.class_code(a) != ci.class_code(c)  # the helper it calls is covered too
    assert set(ci.class_code(a)) == {"nb_cell_mod:Enc", "nb_cell_mod:helper"}


def test_a_main_class_is_digested_by_its_source(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent("""
        from agentcir.framework.component import Component
        from agentcir.framework import code_identity as ci

        class Mine(Component):
            def f(self):
                return 1

        print(sorted(ci.class_code(Mine)))
        """)
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True).stdout
    assert "'__main__:Mine'" in out


# -- run.plugins -----------------------------------------------------------------------------------
def test_run_plugins_from_the_command_line(tmp_path):
    plug, rec, pkg = make_plugin(tmp_path, "cli")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plug), str(ROOT)])}
    cmd = [
        sys.executable,
        "-m",
        "agentcir.cli",
        "run",
        "--recipes",
        str(rec),
        *recipe_args(tmp_path, "cli", pkg),
        "run.preflight=false",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert list((tmp_path / "runs").glob("cli_m-demo-*/metrics.json"))
    # without the plugin, the method is unknown
    bad = subprocess.run(
        [*cmd[:-2], "run.plugins=[]"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False
    )
    assert bad.returncode != 0 and "unknown encoder 'cli_enc'" in bad.stderr


def test_run_plugins_errors_name_the_module(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="run.plugins: cannot import module 'no_such_plugin_mod'"):
        compose(["run.plugins=[no_such_plugin_mod]", f"run.root={tmp_path}"])
    (tmp_path / "broken_plugin_mod.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InputError, match="'broken_plugin_mod' \\(it imports 'no_such_dependency_xyz'"):
        compose(["run.plugins=[broken_plugin_mod]", f"run.root={tmp_path}"])
    (tmp_path / "raising_plugin_mod.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(InputError, match="importing module 'raising_plugin_mod' failed: RuntimeError: boom"):
        compose(["run.plugins=raising_plugin_mod", f"run.root={tmp_path}"])


def test_run_plugins_are_not_part_of_the_run_identity(tmp_path, monkeypatch):
    from agentcir.framework.runner import resolve_run_dir

    (tmp_path / "noop_plugin_mod.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    a = compose([f"run.root={tmp_path}"])
    b = compose([f"run.root={tmp_path}", "run.plugins=[noop_plugin_mod]", "run.preflight=false"])
    assert b["run"]["plugins"] == ["noop_plugin_mod"] and resolve_run_dir(a) == resolve_run_dir(b)


# -- endpoints: the served model, not the URL -------------------------------------------------------
def _rewrite_replier():
    from agentcir.components.llms.scripted_server import Step, chat_completion

    def reply(req):
        text = json.dumps(req.json["messages"], sort_keys=True)
        return Step(json=chat_completion(json.dumps({"caption": f"caption {abs(hash(text)) % 997}"})))

    return reply


def test_moving_the_server_to_another_port_keeps_the_call_cache(tmp_path, monkeypatch):
    pytest.importorskip("httpx")
    from agentcir.components.llms.scripted_server import ScriptedServer, Step

    plug, rec, pkg = make_plugin(tmp_path, "port")
    monkeypatch.syspath_prepend(str(plug))
    models = Step(json={"object": "list", "data": [{"id": "served-model", "object": "model"}]})

    def run(srv):
        srv.script("/chat/completions", _rewrite_replier())
        srv.script("/models", models)
        args = [
            *recipe_args(tmp_path, "port", pkg)[:3],
            "llm=openai",
            f"llm.base_url={srv.base_url}",
            "llm.model=served-model",
            "llm.retries=0",
            *recipe_args(tmp_path, "port", pkg)[3:],
        ]
        return run_recipe(compose(args, extra_dirs=[str(rec)]))

    with ScriptedServer() as a:
        first = run(a)
        port_a, chats_a = a.base_url, len(a.requests_to("/chat/completions"))
    assert chats_a > 0 and len(a.requests_to("/models")) == 1  # the pre-flight check
    with ScriptedServer() as b:  # restarted: another port
        assert b.base_url != port_a
        second = run(b)
        assert b.requests_to("/chat/completions") == []  # zero new model calls
    assert second.stats["rewrite"].calls == 0 and second.stats["rewrite"].cache_hits == len(first.queries)
    np.testing.assert_array_equal(first.candidates.ids, second.candidates.ids)


# -- --plan counts what the cache holds ----------------------------------------------------------------
def test_plan_after_a_full_run_predicts_no_uncached_call(tmp_path, monkeypatch):
    """The stand-in replies of --plan differ from the endpoint's: a cached call must answer with
    its cached value, or the next stages' calls get other keys and are counted as new."""
    pytest.importorskip("httpx")
    from agentcir.components.llms.scripted_server import ScriptedServer, Step
    from agentcir.framework.plan import plan_recipe

    plug, rec, pkg = make_plugin(tmp_path, "plan")
    monkeypatch.syspath_prepend(str(plug))
    with ScriptedServer() as srv:
        srv.script("/chat/completions", _rewrite_replier())
        srv.script("/models", Step(json={"data": [{"id": "m"}]}))
        base = [
            *recipe_args(tmp_path, "plan", pkg)[:3],
            "llm=openai",
            f"llm.base_url={srv.base_url}",
            "llm.model=m",
            "llm.retries=0",
            *recipe_args(tmp_path, "plan", pkg)[3:],
            "dataset.limit=12",
        ]
        before = plan_recipe(compose(base, extra_dirs=[str(rec)]))
        assert before.total_calls > 0 and any(
            n.startswith("estimated: stage(s)") and "rewrite" in n for n in before.notes
        )
        run_recipe(compose(base, extra_dirs=[str(rec)]))
        n_chats = len(srv.requests_to("/chat/completions"))
        # the same command: every stage is in the run directory
        after = plan_recipe(compose(base, extra_dirs=[str(rec)]))
        assert after.total_calls == 0, after.render()
        assert not any(n.startswith("estimated") for n in after.notes), after.notes
        # another run directory (the same recipe): every call is in the cache, and the stages
        # after the LLM's see its cached replies, so their calls are found too
        elsewhere = plan_recipe(compose([*base, "run.name=elsewhere"], extra_dirs=[str(rec)]))
        assert elsewhere.total_calls == 0, elsewhere.render()
        assert elsewhere.rows[("rewrite", "llm:openai", "run_task")].cached == 12
        assert elsewhere.rows[("rank", "encoder:plan_enc", "encode_texts")].cached == 12
        assert not any(n.startswith("estimated") for n in elsewhere.notes), elsewhere.notes
        assert len(srv.requests_to("/chat/completions")) == n_chats  # the plans called no model


def test_standard_library_and_third_party_bases_are_not_digested():
    import abc

    from agentcir.framework.component import Component

    class Mixed(Component, abc.ABC):
        def f(self):
            return 1

    code = ci.class_code(Mixed)
    assert code and all(m.startswith(("tests", f"{__name__}")) for m in code), code
    assert not any(m == "abc" or m.startswith("abc") for m in code)
