"""What the side-by-side checks against released code share (``upstream_autocir.py``,
``upstream_imagescope.py``): loading named functions or classes from a checkout's source file
without importing the file's other dependencies, and a tiny deterministic world (a gallery of
solid-colour images whose vectors are a seeded table, hashed text vectors, named captions) with
scripted model components, so that an agentcir method and the released code see the same inputs
and the same model replies."""

from __future__ import annotations

import ast
import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from agentcir.framework.cache import CallCache
from agentcir.framework.gallery import Gallery, GalleryItem
from agentcir.framework.interfaces import LLM, Captioner, Encoder, Verifier
from agentcir.framework.method import RunState
from agentcir.framework.recipe import ComponentPool
from agentcir.framework.runner import RunContext, Runner, caption_stage
from agentcir.framework.types import Query

DIM = 16


def load_defs(path: Path, names: list[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute only the top-level functions / classes ``names`` of ``path`` in ``namespace`` (the
    caller supplies the modules and stand-ins they use); decorators are dropped (e.g. ``@ray.remote``)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    nodes = []
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names:
            n.decorator_list = []
            nodes.append(n)
    missing = set(names) - {n.name for n in nodes}
    if missing:
        raise SystemExit(f"{path}: no top-level definition(s) {', '.join(sorted(missing))}")
    exec(compile(ast.Module(nodes, []), str(path), "exec"), namespace)
    return {n: namespace[n] for n in names}


def seed_of(*parts: Any) -> int:
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def text_vector(text: str) -> np.ndarray:
    v = np.random.default_rng(seed_of("text", text)).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def image_table(n: int) -> np.ndarray:
    v = np.random.default_rng(7).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class TableEncoder(Encoder):
    """Image = solid colour whose red/green values index a seeded table; text = hashed vector."""

    registry_key = "upstream_table"
    dim = DIM

    def _embed_images(self, images):
        table = image_table(4096)
        return np.stack([table[im.getpixel((0, 0))[0] + 256 * im.getpixel((0, 0))[1]] for im in images])

    def _embed_texts(self, texts):
        return np.stack([text_vector(t) for t in texts])


class NamedCaptioner(Captioner):
    registry_key = "upstream_named"

    def caption(self, image):
        return caption_of(Path(image).stem)


def caption_of(name: str) -> str:
    """The gallery caption of item ``name`` (both sides read the same)."""
    words = ["red", "blue", "green", "striped", "long", "short", "cotton", "floral", "dark", "bright"]
    h = seed_of("cap", name)
    return f"a {words[h % 10]} {words[(h // 10) % 10]} item {name}"


class ScriptedLLM(LLM):
    """Answers ``run_task`` with ``replier(task, variables)``; counts the calls."""

    registry_key = "upstream_scripted"

    def __init__(self, cfg=None, *, replier: Callable[[str, dict], str] | None = None, **deps):
        super().__init__(cfg, **deps)
        self.replier = replier
        self.calls: list[tuple[str, dict]] = []

    def run_task(self, task, variables, *, prompt=None, images=(), json_mode=False):
        self.calls.append((task, dict(variables)))
        return self.replier(task, dict(variables))

    def chat(self, messages, *, tools=None, json_mode=False):  # pragma: no cover - not used
        raise NotImplementedError


class ScriptedVerifier(Verifier):
    """``check`` / ``verify`` answer with ``answer(kind, text, candidate_name)``."""

    registry_key = "upstream_verifier"

    def __init__(self, cfg=None, *, answer: Callable[[str, str, str], bool] | None = None, **deps):
        super().__init__(cfg, **deps)
        self.answer = answer

    def check(self, statement, *, candidate=None, caption=None):
        return self.answer("check", statement, Path(candidate).stem)

    def verify(self, candidate, instruction, *, reference=None, caption=None, reference_caption=None):
        return self.answer("verify", instruction, Path(candidate).stem)


@dataclass
class World:
    root: Path
    gallery: Gallery
    names: list[str]
    paths: dict[str, str]
    queries: list[Query]
    image_emb: np.ndarray  # [N, d] as the gallery stores it
    caption_emb: np.ndarray  # [N, d]


def save_index_image(path: Path, index: int) -> str:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (index % 256, index // 256, 7)).save(path)
    return str(path)


def make_world(root: Path, n_gallery: int, instructions: list[str], seed: int = 0) -> World:
    """``n_gallery`` items ``g0..``; one query per instruction, its reference a gallery item and
    its target another one."""
    rng = np.random.default_rng(seed)
    names = [f"g{i:04d}" for i in range(n_gallery)]
    paths = {n: save_index_image(root / "gallery" / f"{n}.png", i) for i, n in enumerate(names)}
    items = [GalleryItem(n, paths[n]) for n in names]
    gallery = Gallery.build(root / "gallery_dir", items, TableEncoder(), progress=False)
    queries = []
    for i, text in enumerate(instructions):
        ref, tgt = (int(x) for x in rng.choice(n_gallery, 2, replace=False))
        queries.append(
            Query(f"q{i:03d}", text, reference=[paths[names[ref]]], reference_id=names[ref], targets=[names[tgt]])
        )
    img = np.asarray(gallery.image_emb, np.float32)
    cap = np.stack([text_vector(caption_of(n)) for n in names])
    return World(root, gallery, names, paths, queries, img, cap)


def run_method(world: World, method, captioner=None) -> RunState:
    ctx = RunContext(
        cache=CallCache(world.root / f"cache-{method.identity}.sqlite"),
        run_dir=world.root / method.identity,
        concurrency=4,
        progress=False,
        kernels="reference",
    )
    state = RunState(queries=world.queries, gallery=world.gallery)
    pool = ComponentPool({}, prebuilt={"captioner": captioner or NamedCaptioner()})
    prepare = [caption_stage(pool, "captioner")] if method.needs_captions else []
    asyncio.run(Runner(method, ctx, state, prepare=prepare).execute())
    return state
