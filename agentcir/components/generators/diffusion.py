"""``generator=diffusers``: a local diffusers text-to-image pipeline (Stable Diffusion,
SDXL, ...), optionally image-to-image from the reference. Extra:
``pip install 'agentcir[diffusion]'``.

The pipeline is loaded lazily on the first call from a local folder saved with
``save_pretrained`` or a hub id already in the local hub cache. Images are saved as PNG
under ``output_dir`` with content-addressed names. Generation is seeded, so the same
description gives the same image.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...framework.errors import InputError, require
from ...framework.images import load_rgb
from ...framework.interfaces import Generator
from ...registry import GENERATORS
from ...registry.config import bounded
from ..captioners.hf import (
    TorchDType,
    load_pretrained,
    model_fingerprint,
    quiet_transformers,
    torch_device,
    torch_dtype,
)
from .files import save_content_addressed


def _dtype_keyword() -> str:
    """``dtype`` on diffusers versions that deprecate ``torch_dtype``, else ``torch_dtype``."""
    try:
        from diffusers.utils import deprecation_utils
    except ImportError:  # pragma: no cover - older diffusers
        return "torch_dtype"
    return "dtype" if hasattr(deprecation_utils, "_TORCH_DTYPE_DEPRECATION_MESSAGE") else "torch_dtype"


@GENERATORS.register("diffusers")
class DiffusersGenerator(Generator):
    """Draws the target description with a diffusers pipeline.

    Config:
        model: local pipeline folder or hub id.
        revision: hub revision (identity only for hub ids).
        steps: denoising steps.
        guidance_scale: classifier-free guidance scale.
        height: image height in pixels (0: the model's default).
        width: image width in pixels (0: the model's default).
        negative_prompt: what to steer away from (empty: nothing).
        seed: random seed (the same description gives the same image).
        use_reference: start from the reference image (image-to-image) when the query has one.
        strength: how far image-to-image moves from the reference (0..1).
        output_dir: folder for the PNG files.
        device: ``cpu``, ``cuda``, ... or ``auto``.
        dtype: ``float32``, ``float16`` or ``bfloat16``.
        local_files_only: never try the hub (a local folder never does anyway).
    """

    @dataclass
    class Config:
        model: str = "stable-diffusion-v1-5/stable-diffusion-v1-5"
        revision: str = ""
        steps: int = bounded(30, 1)
        guidance_scale: float = 7.5
        height: int = 0
        width: int = 0
        negative_prompt: str = ""
        seed: int = 0
        use_reference: bool = False
        strength: float = bounded(0.6, 0.0, 1.0, lo_open=True)
        output_dir: str = "runs/generated"
        device: str = "auto"
        dtype: TorchDType = TorchDType.float32
        local_files_only: bool = False

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c = self.cfg
        if c.steps < 1:
            raise InputError(f"generator 'diffusers': field 'steps' must be at least 1, got {c.steps}")
        if not 0.0 < c.strength <= 1.0:
            raise InputError(f"generator 'diffusers': field 'strength' must be in (0, 1], got {c.strength}")
        self._pipes: dict[str, Any] = {}
        self._lock = threading.Lock()

    def model_identity(self) -> str:
        return model_fingerprint(self.cfg.model, self.cfg.revision)

    def pipeline(self, mode: str = "text2img") -> Any:
        """The loaded pipeline for ``text2img`` or ``img2img`` (sharing one set of weights)."""
        with self._lock:
            if "text2img" not in self._pipes:
                diffusers = require("diffusers", "diffusion", feature="generator 'diffusers'")
                quiet_transformers()
                where = "generator 'diffusers'"
                kw = {"revision": self.cfg.revision} if self.cfg.revision else {}
                kw[_dtype_keyword()] = torch_dtype(self.cfg.dtype, where)
                pipe = load_pretrained(
                    diffusers.AutoPipelineForText2Image.from_pretrained,
                    self.cfg.model,
                    where=where,
                    local_files_only=self.cfg.local_files_only,
                    **kw,
                )
                pipe = pipe.to(torch_device(self.cfg.device))
                pipe.set_progress_bar_config(disable=True)
                self._pipes["text2img"] = pipe
            if mode == "img2img" and "img2img" not in self._pipes:
                import diffusers

                pipe = diffusers.AutoPipelineForImage2Image.from_pipe(self._pipes["text2img"])
                pipe.set_progress_bar_config(disable=True)
                self._pipes["img2img"] = pipe
            return self._pipes[mode]

    def generate(self, description: str, *, reference: Path | None = None) -> Path:
        """Draw ``description`` (from ``reference`` when ``use_reference``) -> PNG path."""
        import torch

        if not isinstance(description, str) or not description.strip():
            raise InputError(f"generator 'diffusers': the description must be a non-empty text, got {description!r}")
        c = self.cfg
        img2img = c.use_reference and reference is not None
        pipe = self.pipeline("img2img" if img2img else "text2img")
        kw: dict[str, Any] = {
            "num_inference_steps": c.steps,
            "guidance_scale": c.guidance_scale,
            "generator": torch.Generator(device="cpu").manual_seed(c.seed),
        }
        if c.negative_prompt:
            kw["negative_prompt"] = c.negative_prompt
        if img2img:
            ref = load_rgb(reference)
            if c.height and c.width:
                ref = ref.resize((c.width, c.height))
            kw.update(image=ref, strength=c.strength)
        else:
            if c.height:
                kw["height"] = c.height
            if c.width:
                kw["width"] = c.width
        with self._lock, torch.inference_mode():
            image = pipe(description, **kw).images[0]
        return save_content_addressed(image, c.output_dir, what=f"generator 'diffusers' ({c.model})")
