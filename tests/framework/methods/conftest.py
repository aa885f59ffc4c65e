"""Tiny deterministic components for the method tests, whose outputs the tests know exactly.

- ``LookupEncoder``: every image is a solid colour whose red/green values encode an index into
  a fixed table of random vectors; every text gets a vector seeded by the md5 of the text.
- ``ScriptLLM``: answers every task from its variables with fixed templates (JSON as the task
  table promises); ``replies`` overrides a task's raw reply text.
- ``NameCaptioner``: "caption of <file stem>".
- ``FixedGenerator``: the gallery image named in ``proxy_of`` (by the description), else a file
  outside the gallery.
- ``ListDetector``: fixed labels per file stem.
- ``SetVerifier``: ``verify`` accepts the candidate stems in ``accept``; ``check`` is true when
  the statement's last word is in the candidate's stem.
Each call of the scripted components is counted, so tests can check what was asked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.cache import CallCache
from agentcir.framework.gallery import Gallery, GalleryItem
from agentcir.framework.interfaces import LLM, Captioner, Detector, Encoder, Generator, Verifier, l2_normalize
from agentcir.framework.method import RunState
from agentcir.framework.recipe import ComponentPool
from agentcir.framework.runner import RunContext, Runner, caption_stage
from agentcir.framework.types import Query

DIM = 8
N_GALLERY = 14


def image_vectors(n: int = 64) -> np.ndarray:
    return np.random.default_rng(42).standard_normal((n, DIM)).astype(np.float32)


def text_vector(text: str) -> np.ndarray:
    seed = int(hashlib.md5(text.encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def save_index_image(path: Path, index: int) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (index % 256, index // 256, 7)).save(path)
    return path


class LookupEncoder(Encoder):
    registry_key = "lookup"
    dim = DIM

    def _embed_images(self, images):
        table = image_vectors()
        return np.stack([table[im.getpixel((0, 0))[0] + 256 * im.getpixel((0, 0))[1]] for im in images])

    def _embed_texts(self, texts):
        return np.stack([text_vector(t) for t in texts])


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def enc_text(text: str) -> np.ndarray:
    """What the encoder gives for ``text`` (normalised), computed independently of it."""
    return unit(text_vector(text).astype(np.float64))


class ScriptLLM(LLM):
    registry_key = "script"

    @dataclass
    class Config:
        proxies: int = 3

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.calls: list[tuple[str, dict]] = []
        self.replies: dict[str, object] = {}

    def run_task(self, task, variables, *, prompt=None, images=(), json_mode=False):
        self.calls.append((task, dict(variables)))
        if task in self.replies:
            r = self.replies[task]
            return r(variables) if callable(r) else r
        v = variables
        out = {
            "target_caption": lambda: {
                "target_caption": f"{v['reference_caption']} then {v['modification']}",
                "modifications": [v["modification"]],
            },
            "refine": lambda: {"target_caption": f"refined {v['target_caption']}"},
            "textual_proxies": lambda: {
                "proxies": [
                    f"{v['target_caption']} #{i} {' '.join(v.get('objects') or [])}" for i in range(self.cfg.proxies)
                ]
            },
            "filter_objects": lambda: {
                "keep": [o for o in v["objects"] if not o.startswith("bad")],
                "remove": [o for o in v["objects"] if o.startswith("bad")],
            },
            "target_descriptions": lambda: {
                "descriptions": [f"{v['reference_caption']} {v['modification']} d{i}" for i in range(v["n"])]
            },
            "rewrite_caption": lambda: {"caption": f"{v['reference_caption']} rewritten {v['modification']}"},
            "divergent_captions": lambda: {"captions": [f"{v['modification']} div{i}" for i in range(v["n"])]},
            "questions": lambda: {
                "questions": [
                    {"statement": "it is g3", "answer": True},
                    {"statement": "it is g5", "answer": False},
                    {"statement": "it is g7", "answer": True},
                    {"statement": "it is g9", "answer": True},
                ]
            },
            "summarize_captions": lambda: {"caption": " + ".join(v["captions"])},
        }
        if task == "entail":
            return "true" if v["statement"].split()[-1] in v["caption"].split() else "false"
        return json.dumps(out[task]())

    def chat(self, messages, *, tools=None, json_mode=False):  # pragma: no cover - not used
        raise NotImplementedError


class NameCaptioner(Captioner):
    registry_key = "name"

    def caption(self, image):
        return f"caption of {Path(image).stem}"


class FixedGenerator(Generator):
    registry_key = "fixed"

    def __init__(self, cfg=None, *, proxy_of=None, outside=None, **deps):
        super().__init__(cfg, **deps)
        self.proxy_of = proxy_of or {}
        self.outside = outside
        self.calls: list[str] = []

    def generate(self, description, *, reference=None):
        self.calls.append(description)
        return self.proxy_of.get(description, self.outside)


class ListDetector(Detector):
    registry_key = "list"

    def detect(self, image):
        stem = Path(image).stem
        return [
            {"label": f"obj-{stem}", "score": 0.9, "box": None},
            {"label": f"bad-{stem}", "score": 0.5, "box": None},
        ]


class SetVerifier(Verifier):
    registry_key = "set"

    def __init__(self, cfg=None, *, accept=(), **deps):
        super().__init__(cfg, **deps)
        self.accept = set(accept)
        self.verify_calls: list[str] = []

    def verify(self, candidate, instruction, *, reference=None, caption=None, reference_caption=None):
        self.verify_calls.append(Path(candidate).stem)
        return Path(candidate).stem in self.accept

    def check(self, statement, *, candidate=None, caption=None):
        return statement.split()[-1] == Path(candidate).stem


@dataclass
class World:
    """A built gallery (``g0`` ... ``g13``), queries and the components."""

    root: Path
    gallery: Gallery
    queries: list[Query]
    encoder: LookupEncoder
    llm: ScriptLLM
    captioner: NameCaptioner
    detector: ListDetector

    @property
    def I(self) -> np.ndarray:  # noqa: E743 - the paper's name
        return unit(image_vectors()[:N_GALLERY].astype(np.float64))

    @property
    def C(self) -> np.ndarray:
        return np.stack([enc_text(f"caption of g{i}") for i in range(N_GALLERY)])

    def row(self, item: str) -> int:
        return self.gallery.index_of(item)

    def image_vector(self, index: int) -> np.ndarray:
        return unit(image_vectors()[index].astype(np.float64))

    def run(self, method, *, backend: str = "reference", name: str = "run") -> tuple[RunState, RunContext]:
        ctx = RunContext(
            cache=CallCache(self.root / "cache.sqlite"),
            run_dir=self.root / name,
            concurrency=4,
            progress=False,
            kernels=backend,
        )
        state = RunState(queries=self.queries, gallery=self.gallery)
        pool = ComponentPool({}, prebuilt={"captioner": self.captioner})
        prepare = [caption_stage(pool, "captioner")] if method.needs_captions else []
        asyncio.run(Runner(method, ctx, state, prepare=prepare).execute())
        return state, ctx


@pytest.fixture
def world(tmp_path) -> World:
    """14 gallery images g0..g13 (image vector i), 3 queries with references g0, g1 and a video
    of 5 keyframes (images 20..24, outside the gallery)."""
    items = [
        GalleryItem(f"g{i}", str(save_index_image(tmp_path / "gallery" / f"g{i}.png", i))) for i in range(N_GALLERY)
    ]
    frames = [str(save_index_image(tmp_path / "video" / f"f{i}.png", 20 + i)) for i in range(5)]
    enc = LookupEncoder()
    gallery = Gallery.build(tmp_path / "gallery_dir", items, enc, progress=False)
    queries = [
        Query("q0", "make it red", reference=[items[0].path], reference_id="g0", targets=["g3"]),
        Query("q1", "add a dog", reference=[items[1].path], reference_id="g1", targets=["g5"]),
        Query("q2", "faster", reference=frames, targets=["g7"]),
    ]
    return World(tmp_path, gallery, queries, enc, ScriptLLM(), NameCaptioner(), ListDetector())


def topk_desc(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each row of ``S`` (NaN = removed), score descending then lower id: the test's own ranking."""
    ids = np.full((S.shape[0], k), -1)
    sc = np.full((S.shape[0], k), -np.inf)
    for q, row in enumerate(S):
        keep = np.flatnonzero(~np.isnan(row))
        order = sorted(keep, key=lambda j: (-row[j], j))[:k]
        ids[q, : len(order)] = order
        sc[q, : len(order)] = row[order]
    return ids, sc


def assert_ranking(cands, ids: np.ndarray, scores: np.ndarray, atol: float = 1e-5) -> None:
    k = ids.shape[1]
    np.testing.assert_array_equal(cands.ids[:, :k], ids)
    fin = np.isfinite(scores)
    np.testing.assert_allclose(cands.scores[:, :k][fin], scores[fin], atol=atol, rtol=0)


__all__ = [
    "World",
    "world",
    "l2_normalize",
    "enc_text",
    "unit",
    "topk_desc",
    "assert_ranking",
    "ScriptLLM",
    "SetVerifier",
    "FixedGenerator",
]
