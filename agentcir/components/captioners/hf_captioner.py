"""``captioner=transformers``: a local image-to-text model (BLIP, BLIP-2, GIT,
VisionEncoderDecoder, ...) through transformers' ``AutoProcessor`` and
``AutoModelForImageTextToText``. Extra: ``pip install 'agentcir[hf]'``.

Weights are loaded lazily on the first caption (building the component is cheap) from a
local folder saved with ``save_pretrained`` or a hub id already in the local hub cache
(nothing is downloaded at run time on machines without a hub).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ...framework.errors import require
from ...framework.images import load_rgb
from ...framework.interfaces import Captioner
from ...registry import CAPTIONERS
from ...registry.config import bounded
from .hf import TorchDType, load_pretrained, model_fingerprint, quiet_transformers, torch_device, torch_dtype


@CAPTIONERS.register("transformers")
class TransformersCaptioner(Captioner):
    """Image captioning with a transformers image-to-text model.

    Config:
        model: local model folder or hub id (e.g. ``Salesforce/blip-image-captioning-base``).
        revision: hub revision (identity only for hub ids).
        text: conditional-captioning prefix (BLIP: ``"a photo of"``); empty = unconditional.
        strip_text: remove the prefix from the caption when the model repeats it.
        max_new_tokens: caption length limit in tokens.
        num_beams: beam search width (1 = greedy).
        device: ``cpu``, ``cuda``, ``cuda:1``, or ``auto``.
        dtype: ``float32``, ``float16`` or ``bfloat16``.
        batch_size: images per forward pass in :meth:`caption_many`.
        local_files_only: never try the hub (a local folder never does anyway).
    """

    @dataclass
    class Config:
        model: str = "Salesforce/blip-image-captioning-base"
        revision: str = ""
        text: str = ""
        strip_text: bool = False
        max_new_tokens: int = 30
        num_beams: int = bounded(1, 1)
        device: str = "cpu"
        dtype: TorchDType = TorchDType.float32
        batch_size: int = 8
        local_files_only: bool = False

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self._loaded: tuple[Any, Any, str] | None = None
        self._lock = threading.Lock()

    def model_identity(self) -> str:
        return model_fingerprint(self.cfg.model, self.cfg.revision)

    def _load(self) -> tuple[Any, Any, str]:
        with self._lock:
            if self._loaded is None:
                transformers = require("transformers", "hf", feature="captioner 'transformers'")
                quiet_transformers()
                where = f"captioner '{self.registry_key or 'transformers'}'"
                kw = {"revision": self.cfg.revision} if self.cfg.revision else {}
                processor = load_pretrained(
                    transformers.AutoProcessor.from_pretrained,
                    self.cfg.model,
                    where=where,
                    local_files_only=self.cfg.local_files_only,
                    **kw,
                )
                model = load_pretrained(
                    transformers.AutoModelForImageTextToText.from_pretrained,
                    self.cfg.model,
                    where=where,
                    local_files_only=self.cfg.local_files_only,
                    dtype=torch_dtype(self.cfg.dtype, where),
                    **kw,
                )
                device = torch_device(self.cfg.device)
                self._loaded = (processor, model.to(device).eval(), device)
            return self._loaded

    def caption_many(self, images: Sequence[Path | Any], batch_size: int | None = None) -> list[str]:
        """Captions of several images (paths or PIL images), ``batch_size`` per forward pass."""
        import torch

        processor, model, device = self._load()
        b = int(batch_size or self.cfg.batch_size)
        out: list[str] = []
        for start in range(0, len(images), b):
            pil = [load_rgb(p) for p in images[start : start + b]]
            kw: dict[str, Any] = {"images": pil, "return_tensors": "pt"}
            if self.cfg.text:
                kw["text"] = [self.cfg.text] * len(pil)
            inputs = processor(**kw).to(device)
            if "pixel_values" in inputs:
                inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
            with torch.inference_mode():
                ids = model.generate(**inputs, max_new_tokens=self.cfg.max_new_tokens, num_beams=self.cfg.num_beams)
            for text in processor.batch_decode(ids, skip_special_tokens=True):
                text = " ".join(text.split())
                if self.cfg.strip_text and self.cfg.text and text.lower().startswith(self.cfg.text.lower()):
                    text = text[len(self.cfg.text) :].strip()
                out.append(text)
        return out

    def caption(self, image: Path) -> str:
        return self.caption_many([image])[0]
