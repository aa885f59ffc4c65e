"""``open_clip``: any open_clip architecture, with local or hub weights.

``model`` names an architecture (``open_clip.list_models()``, e.g. ``ViT-B-32``) or, with
``model_config`` set to a JSON file, a custom one (registered under the file's stem).
``pretrained`` is a local checkpoint file or an open_clip pretrained tag (``laion2b_s34b_b79k``,
downloaded by open_clip itself, for users with internet). Images go through the model's own
open_clip preprocessing; texts through its tokenizer. Extra: ``clip``.

open_clip imports torchvision; :func:`.common.import_torchvision` makes a torchvision whose
compiled ops do not load with the installed torch importable (CLIP needs none of them).
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...framework.errors import InputError, MissingExtraError, require
from ...framework.hashing import file_digest
from ...framework.interfaces import Encoder
from ...registry import ENCODERS
from .common import import_torchvision


def import_open_clip():
    """open_clip, with torchvision made importable first (see :func:`.common.import_torchvision`)."""
    if importlib.util.find_spec("torchvision") is None:
        raise MissingExtraError(
            "the open_clip encoder needs torchvision (a build matching your torch); "
            "install it with: pip install 'agentcir[clip]'"
        )
    import_torchvision()
    return require("open_clip", "clip", feature="the open_clip encoder")


@ENCODERS.register("open_clip")
class OpenClipEncoder(Encoder):
    """An open_clip model (loaded on first use)."""

    @dataclass
    class Config:
        """Attributes:
        model: architecture name (``open_clip.list_models()``) or the stem of ``model_config``.
        pretrained: local checkpoint file, or an open_clip pretrained tag (downloads; needs internet).
        model_config: optional JSON file of a custom architecture (registered under its stem).
        batch_size: images or texts per forward pass.
        device: torch device (``cpu``, ``cuda``).
        precision: open_clip precision (``fp32``, ``fp16``, ``bf16``, ``amp``).
        num_threads: torch CPU threads (0 = torch's default).
        """

        model: str = "ViT-B-32"
        pretrained: str = ""
        model_config: str = ""
        batch_size: int = 32
        device: str = "cpu"
        precision: str = "fp32"
        num_threads: int = 0

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        self._model = None
        self._preprocess = None
        self._tokenizer = None
        self._lock = threading.Lock()

    def _weights(self) -> str:
        p = self.cfg.pretrained
        if not p:
            raise InputError(
                "encoder 'open_clip': set encoder.pretrained to a local checkpoint file or an "
                "open_clip pretrained tag (e.g. laion2b_s34b_b79k; tags download, so they need internet)"
            )
        path = Path(p).expanduser()
        if any(s in p for s in ("/", "\\")) or path.suffix in (".pt", ".bin", ".safetensors", ".pth"):
            if not path.is_file():
                raise InputError(f"encoder 'open_clip': checkpoint '{p}' not found")
            return str(path)
        return p

    def model_identity(self) -> str:
        p = self.cfg.pretrained
        path = Path(p).expanduser() if p else None
        weights = f"file:{file_digest(path)[:16]}" if path is not None and path.is_file() else f"tag:{p}"
        arch = self.cfg.model
        if self.cfg.model_config:
            cf = Path(self.cfg.model_config).expanduser()
            arch += f" config:{file_digest(cf)[:16]}" if cf.is_file() else f" config:{cf}"
        return f"open_clip {arch} {weights}"

    def _load(self):
        if self._model is None:
            weights = self._weights()
            oc = import_open_clip()
            import torch

            if self.cfg.num_threads > 0:
                torch.set_num_threads(self.cfg.num_threads)
            if self.cfg.model_config:
                cf = Path(self.cfg.model_config).expanduser()
                if not cf.is_file():
                    raise InputError(f"encoder 'open_clip': model_config '{cf}' not found")
                oc.add_model_config(str(cf))
                if self.cfg.model != cf.stem:
                    raise InputError(
                        f"encoder 'open_clip': model_config '{cf}' registers the architecture "
                        f"'{cf.stem}', but model='{self.cfg.model}'"
                    )
            if self.cfg.model not in oc.list_models():
                raise InputError(
                    f"encoder 'open_clip': unknown architecture '{self.cfg.model}' "
                    f"(see open_clip.list_models(), or pass model_config=FILE.json)"
                )
            model, _, preprocess = oc.create_model_and_transforms(
                self.cfg.model, pretrained=weights, device=self.cfg.device, precision=self.cfg.precision
            )
            self._model, self._preprocess = model.eval(), preprocess
            self._tokenizer = oc.get_tokenizer(self.cfg.model)
        return self._model

    @property
    def dim(self) -> int:  # type: ignore[override]
        m = self._load()
        proj = getattr(m, "text_projection", None)
        if proj is not None and hasattr(proj, "shape"):
            return int(proj.shape[-1])
        return int(m.encode_text(self._tokenizer(["a"]).to(self.cfg.device)).shape[-1])

    def _embed_images(self, images: list) -> np.ndarray:
        import torch

        model = self._load()
        x = torch.stack([self._preprocess(im) for im in images]).to(self.cfg.device)
        with self._lock, torch.inference_mode():
            return model.encode_image(x).float().cpu().numpy()

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        import torch

        model = self._load()
        tokens = self._tokenizer(texts).to(self.cfg.device)
        with self._lock, torch.inference_mode():
            return model.encode_text(tokens).float().cpu().numpy()
