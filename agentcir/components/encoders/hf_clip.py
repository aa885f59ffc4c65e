"""``hf_clip``: CLIP (``CLIPModel``) and SigLIP (``SiglipModel``) through transformers, from a local folder.

The folder is what ``save_pretrained`` writes (or a downloaded hub snapshot): ``config.json``,
the weights, the tokenizer files and ``preprocessor_config.json``. Nothing is downloaded
(``local_files_only``). Images are preprocessed by :mod:`.common` from the values of
``preprocessor_config.json`` (CLIP: shorter side resized, centre crop; SigLIP: resized to
the square input), so the ONNX export (:func:`.onnx.export_onnx`) sees the same pixels.
Texts are tokenized as each model expects (SigLIP pads to ``max_length``). Extra: ``hf``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...framework.errors import InputError, require
from ...framework.hashing import file_digest, stable_hash
from ...framework.interfaces import Encoder
from ...registry import ENCODERS
from ..captioners.hf import TorchDType
from .common import preprocess, torchvision_guard

SUPPORTED = ("clip", "siglip")
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
_PIL_RESAMPLE = {2: "bilinear", 3: "bicubic"}


def model_files(root: Path) -> list[Path]:
    """Every file of a model folder (sorted), the hidden ones excepted."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def preprocess_spec(root: Path, config) -> dict[str, Any]:
    """The :mod:`.common` spec from ``preprocessor_config.json`` (defaults: the model type's)."""
    siglip = config.model_type == "siglip"
    side = int(config.vision_config.image_size)
    f = root / "preprocessor_config.json"
    pc = json.loads(f.read_text()) if f.is_file() else {}
    size = pc.get("size", {"height": side, "width": side} if siglip else {"shortest_edge": side})
    if isinstance(size, int):
        size = {"shortest_edge": size}
    resample = _PIL_RESAMPLE.get(int(pc.get("resample", 3)), "bicubic")
    mean = pc.get("image_mean", [0.5] * 3 if siglip else CLIP_MEAN)
    std = pc.get("image_std", [0.5] * 3 if siglip else CLIP_STD)
    if "shortest_edge" in size:
        crop = pc.get("crop_size", {"height": side})
        crop = crop if isinstance(crop, int) else int(crop["height"])
        if not pc.get("do_center_crop", True):
            crop = int(size["shortest_edge"])
        return {
            "mode": "shortest",
            "size": int(size["shortest_edge"]),
            "crop": crop,
            "resample": resample,
            "mean": list(mean),
            "std": list(std),
        }
    if int(size["height"]) != int(size["width"]):
        raise InputError(
            f"encoder 'hf_clip': '{f}' asks for a non-square input {size}; only square inputs are supported"
        )
    return {"mode": "stretch", "size": int(size["height"]), "resample": resample, "mean": list(mean), "std": list(std)}


def _transformers():
    torchvision_guard()  # transformers imports an installed torchvision
    return require("transformers", "hf", feature="the hf_clip encoder")


@ENCODERS.register("hf_clip")
class HFClipEncoder(Encoder):
    """A transformers CLIP or SigLIP dual encoder loaded from a local folder (on first use)."""

    @dataclass
    class Config:
        """Attributes:
        path: local model folder (``save_pretrained`` output or a hub snapshot); required to encode.
        batch_size: images or texts per forward pass.
        device: torch device (``cpu``, ``cuda``).
        dtype: ``float32``, ``float16`` or ``bfloat16`` weights.
        num_threads: torch CPU threads (0 = torch's default).
        """

        path: str = ""
        batch_size: int = 32
        device: str = "cpu"
        dtype: TorchDType = TorchDType.float32
        num_threads: int = 0

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        self.root = Path(self.cfg.path).expanduser() if self.cfg.path else None
        self._model = None
        self._tokenizer = None
        self._config = None
        self._lock = threading.Lock()

    def _require_root(self) -> Path:
        if self.root is None:
            raise InputError(
                "encoder 'hf_clip': set encoder.path to a local CLIP/SigLIP model folder "
                "(save_pretrained output or a downloaded snapshot)"
            )
        if not (self.root / "config.json").is_file():
            raise InputError(f"encoder 'hf_clip': '{self.root}' is not a transformers model folder (no config.json)")
        return self.root

    def model_identity(self) -> str:
        if self.root is None or not self.root.is_dir():
            return f"hf_clip (no model folder) {self.cfg.path}"
        return "hf_clip " + stable_hash(
            [[str(p.relative_to(self.root)), file_digest(p)] for p in model_files(self.root)], n=24
        )

    @property
    def config(self):
        if self._config is None:
            tr = _transformers()
            cfg = tr.AutoConfig.from_pretrained(str(self._require_root()), local_files_only=True)
            if cfg.model_type not in SUPPORTED:
                raise InputError(
                    f"encoder 'hf_clip': '{self.root}' holds a '{cfg.model_type}' model; "
                    f"supported: {', '.join(SUPPORTED)}"
                )
            self._config = cfg
        return self._config

    @property
    def dim(self) -> int:  # type: ignore[override]
        c = self.config
        return (
            int(getattr(c, "projection_dim", None) or c.text_config.hidden_size)
            if c.model_type == "clip"
            else int(c.text_config.hidden_size)
        )

    @property
    def preprocess_spec(self) -> dict[str, Any]:
        return preprocess_spec(self._require_root(), self.config)

    @property
    def padding(self) -> str:
        return "max_length" if self.config.model_type == "siglip" else "longest"

    @property
    def max_length(self) -> int:
        return int(self.config.text_config.max_position_embeddings)

    def model(self):
        if self._model is None:
            torch = require("torch", "hf")
            tr = _transformers()
            if self.cfg.num_threads > 0:
                torch.set_num_threads(self.cfg.num_threads)
            self.config  # noqa: B018 - checks the model type
            key = "dtype" if int(tr.__version__.split(".")[0]) >= 5 else "torch_dtype"  # renamed in transformers 5
            m = tr.AutoModel.from_pretrained(
                str(self.root), local_files_only=True, **{key: getattr(torch, self.cfg.dtype)}
            )
            self._model = m.to(self.cfg.device).eval()
        return self._model

    def tokenizer(self):
        if self._tokenizer is None:
            tr = _transformers()
            self._tokenizer = tr.AutoTokenizer.from_pretrained(str(self._require_root()), local_files_only=True)
        return self._tokenizer

    @staticmethod
    def _features(out):
        return out if hasattr(out, "shape") else out.pooler_output

    def _embed_images(self, images: list) -> np.ndarray:
        import torch

        model = self.model()
        x = torch.from_numpy(preprocess(images, self.preprocess_spec)).to(self.cfg.device, model.dtype)
        with self._lock, torch.inference_mode():
            return self._features(model.get_image_features(pixel_values=x)).float().cpu().numpy()

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        import torch

        model = self.model()
        enc = self.tokenizer()(
            texts, padding=self.padding, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        enc = {k: v.to(self.cfg.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        if self.config.model_type == "siglip":
            enc.pop("attention_mask", None)  # SigLIP was trained on max_length padding without a mask
        with self._lock, torch.inference_mode():
            return self._features(model.get_text_features(**enc)).float().cpu().numpy()

    # -- ONNX export -----------------------------------------------------------------------------
    def onnx_towers(self):
        """Both towers for :func:`agentcir.components.encoders.onnx.export_onnx` (fp32 on CPU)."""
        import torch

        from .onnx import OnnxTowers

        model = self.model().float().cpu()
        feats = self._features
        siglip = self.config.model_type == "siglip"

        class Image(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, pixels):
                return feats(self.m.get_image_features(pixel_values=pixels))

        class Text(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, input_ids, attention_mask=None):
                kw = {} if siglip else {"attention_mask": attention_mask}
                return feats(self.m.get_text_features(input_ids=input_ids, **kw))

        tok = self.tokenizer()
        if not getattr(tok, "is_fast", False) or not hasattr(tok, "backend_tokenizer"):
            raise InputError(
                f"encoder 'hf_clip': the tokenizer of '{self.root}' has no tokenizers-library form, "
                f"so it cannot be served by the onnx encoder"
            )
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="agentcir-tok-")) / "tokenizer.json"
        tok.backend_tokenizer.save(str(tmp))
        spec = self.preprocess_spec
        side = int(spec.get("crop", spec["size"]))
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        return OnnxTowers(
            image=Image(),
            image_shape=(3, side, side),
            text=Text(),
            text_inputs=["input_ids"] if siglip else ["input_ids", "attention_mask"],
            tokenizer_file=tmp,
            tokenizer={
                "max_length": self.max_length,
                "padding": self.padding,
                "pad_id": int(pad_id),
                "pad_token": str(tok.pad_token or tok.convert_ids_to_tokens(pad_id)),
            },
            preprocess=spec,
            dim=self.dim,
            notes={"model_type": self.config.model_type},
        )
