"""ONNX export of an encoder's two towers, and the ``onnx`` encoder that serves them.

``agentcir export-onnx encoder=KEY --out DIR`` (:func:`export_onnx`) writes::

    DIR/image.onnx       pixels float32 [n, 3, H, W] -> embedding [n, d]
    DIR/text.onnx        input_ids, attention_mask (, token_type_ids) int64 [n, L] -> embedding [n, d]
    DIR/tokenizer.json   the text tower's tokenizer (Hugging Face ``tokenizers`` format)
    DIR/encoder.json     preprocessing spec, tokenizer settings, dim, and the source encoder

For the ``catalog`` encoder the text graph is the whole locked MiniLM tower (BERT +
attention-masked mean pooling), so the ``onnx`` backend needs neither torch nor
transformers: it runs numpy/Pillow preprocessing (:mod:`.common`, the same code
as the torch encoder), the ``tokenizers`` tokenizer, and onnxruntime (the CUDA provider
when onnxruntime offers it, else the CPU one). Embeddings match the torch encoder within
1e-4 (tested), but the identity differs, so a gallery indexed by one is not silently
reused by the other. Exportable backends implement ``onnx_towers()`` returning
:class:`OnnxTowers`. Extra: ``onnx``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...framework.errors import InputError, require
from ...framework.hashing import file_digest, stable_hash
from ...framework.interfaces import Encoder
from ...registry import ENCODERS
from .common import preprocess

FORMAT = 1
FILES = ("image.onnx", "text.onnx", "tokenizer.json", "encoder.json")


@dataclass
class OnnxTowers:
    """What an exportable encoder hands to :func:`export_onnx`.

    Attributes:
        image: torch module, preprocessed pixels ``[n, 3, H, W]`` -> ``[n, dim]``.
        image_shape: ``(3, H, W)`` of its input.
        text: torch module taking ``text_inputs`` (int64 ``[n, L]`` each) -> ``[n, dim]``.
        text_inputs: input names, in the order ``text`` takes them.
        tokenizer_file: a ``tokenizer.json`` (Hugging Face ``tokenizers`` format).
        tokenizer: ``max_length``, ``padding`` (``longest`` or ``max_length``), ``pad_id``, ``pad_token``.
        preprocess: the image preprocessing spec (:mod:`.common`).
        dim: embedding dimension.
    """

    image: Any
    image_shape: tuple[int, int, int]
    text: Any
    text_inputs: list[str]
    tokenizer_file: Path
    tokenizer: dict[str, Any]
    preprocess: dict[str, Any]
    dim: int
    notes: dict[str, Any] = field(default_factory=dict)


def mean_pooled(transformer):
    """A torch module: a Hugging Face encoder's token states, mean-pooled over the attention mask
    (sentence-transformers' mean pooling)."""
    import torch

    class MeanPooled(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)

    return MeanPooled(transformer)


def export_onnx(encoder: Encoder, out: str | Path, *, opset: int = 17) -> Path:
    """Export both towers of ``encoder`` into folder ``out`` (see the module doc); returns it."""
    import torch

    require("onnx", "onnx", feature="ONNX export")
    towers_fn = getattr(encoder, "onnx_towers", None)
    if towers_fn is None:
        exportable = ", ".join(k for k in ("catalog", "hf_clip") if k in ENCODERS)
        raise InputError(
            f"encoder '{encoder.registry_key or type(encoder).__name__}' cannot be exported to ONNX "
            f"(exportable encoders: {exportable})"
        )
    t: OnnxTowers = towers_fn()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    image, text = t.image.float().eval(), t.text.float().eval()
    pixels = torch.zeros((2, *t.image_shape), dtype=torch.float32)
    ids = torch.ones((2, 8), dtype=torch.int64)
    text_args = tuple(
        ids if n == "input_ids" else (torch.ones_like(ids) if n == "attention_mask" else torch.zeros_like(ids))
        for n in t.text_inputs
    )
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's deprecation and tracer notices
        torch.onnx.export(
            image,
            (pixels,),
            str(out / "image.onnx.tmp"),
            input_names=["pixels"],
            output_names=["embedding"],
            dynamic_axes={"pixels": {0: "n"}, "embedding": {0: "n"}},
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
        torch.onnx.export(
            text,
            text_args,
            str(out / "text.onnx.tmp"),
            input_names=list(t.text_inputs),
            output_names=["embedding"],
            dynamic_axes={**{n: {0: "n", 1: "length"} for n in t.text_inputs}, "embedding": {0: "n"}},
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    for name in ("image.onnx", "text.onnx"):
        (out / f"{name}.tmp").replace(out / name)
    shutil.copyfile(t.tokenizer_file, out / "tokenizer.json")
    meta = {
        "format": FORMAT,
        "dim": int(t.dim),
        "image_shape": list(t.image_shape),
        "preprocess": t.preprocess,
        "text_inputs": list(t.text_inputs),
        "tokenizer": t.tokenizer,
        "source": {
            "key": encoder.registry_key,
            "identity": encoder.identity,
            "model_identity": encoder.model_identity(),
        },
        "opset": opset,
        "notes": t.notes,
    }
    (out / "encoder.json").write_text(json.dumps(meta, indent=1))
    return out


def _providers(choice: str) -> list[str]:
    ort = require("onnxruntime", "onnx", feature="the onnx encoder")
    avail = ort.get_available_providers()
    if choice == "auto":
        return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in avail]
    wanted = [p.strip() for p in choice.split(",") if p.strip()]
    missing = [p for p in wanted if p not in avail]
    if missing:
        raise InputError(
            f"encoder 'onnx': provider(s) {', '.join(missing)} not available in this onnxruntime "
            f"(available: {', '.join(avail)})"
        )
    return wanted


@ENCODERS.register("onnx")
class OnnxEncoder(Encoder):
    """Serves an encoder exported by ``agentcir export-onnx`` with ONNX Runtime."""

    @dataclass
    class Config:
        """Attributes:
        path: folder written by ``agentcir export-onnx`` (image.onnx, text.onnx, tokenizer.json, encoder.json).
        providers: ``auto`` (CUDA when onnxruntime offers it, else CPU) or a comma-separated
            list of onnxruntime execution providers.
        batch_size: images or texts per run.
        num_threads: intra-op CPU threads (0 = onnxruntime's default).
        """

        path: str = "runs/onnx/catalog"
        providers: str = "auto"
        batch_size: int = 64
        num_threads: int = 0

    volatile_fields = (*Encoder.volatile_fields, "providers")

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        self.root = Path(self.cfg.path).expanduser()
        self._meta: dict[str, Any] | None = None
        self._sessions: dict[str, Any] = {}
        self._tokenizer = None

    def _missing(self) -> list[str]:
        return [f for f in FILES if not (self.root / f).is_file()]

    def model_identity(self) -> str:
        if self._missing():
            return f"onnx (not exported yet) {self.root}"
        return "onnx " + stable_hash([file_digest(self.root / f) for f in FILES], n=24)

    @property
    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            missing = self._missing()
            if missing:
                raise InputError(
                    f"encoder 'onnx': '{self.root}' lacks {', '.join(missing)}; export an encoder "
                    f"there first: agentcir export-onnx encoder=catalog --out {self.root}"
                )
            meta = json.loads((self.root / "encoder.json").read_text())
            if meta.get("format") != FORMAT:
                raise InputError(
                    f"encoder 'onnx': '{self.root}/encoder.json' has format {meta.get('format')}, "
                    f"this agentcir reads format {FORMAT}: export again"
                )
            self._meta = meta
        return self._meta

    @property
    def dim(self) -> int:  # type: ignore[override]
        return int(self.meta["dim"])

    @property
    def providers(self) -> list[str]:
        return _providers(self.cfg.providers)

    def session(self, tower: str):
        """The onnxruntime session of ``image`` or ``text``."""
        if tower not in self._sessions:
            ort = require("onnxruntime", "onnx", feature="the onnx encoder")
            self.meta  # noqa: B018 - checks the folder
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if self.cfg.num_threads > 0:
                opts.intra_op_num_threads = self.cfg.num_threads
            self._sessions[tower] = ort.InferenceSession(
                str(self.root / f"{tower}.onnx"), opts, providers=self.providers
            )
        return self._sessions[tower]

    def tokenizer(self):
        if self._tokenizer is None:
            tk = require("tokenizers", "onnx", feature="the onnx encoder's text tower")
            spec = self.meta["tokenizer"]
            tok = tk.Tokenizer.from_file(str(self.root / "tokenizer.json"))
            tok.enable_truncation(max_length=int(spec["max_length"]))
            if spec.get("padding") == "max_length":
                tok.enable_padding(
                    pad_id=int(spec["pad_id"]), pad_token=spec["pad_token"], length=int(spec["max_length"])
                )
            else:
                tok.enable_padding(pad_id=int(spec["pad_id"]), pad_token=spec["pad_token"])
            self._tokenizer = tok
        return self._tokenizer

    def _embed_images(self, images: list) -> np.ndarray:
        x = preprocess(images, self.meta["preprocess"])
        return self.session("image").run(["embedding"], {"pixels": x})[0]

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        enc = self.tokenizer().encode_batch(texts)
        arrays = {
            "input_ids": np.array([e.ids for e in enc], np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
            "token_type_ids": np.array([e.type_ids for e in enc], np.int64),
        }
        return self.session("text").run(["embedding"], {n: arrays[n] for n in self.meta["text_inputs"]})[0]

    def close(self) -> None:
        self._sessions.clear()
