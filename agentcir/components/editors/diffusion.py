"""``editor=diffusers``: a local diffusers instruction-editing pipeline (InstructPix2Pix,
``*EditPipeline`` such as Qwen-Image-Edit, FLUX Kontext, ...). Extra:
``pip install 'agentcir[diffusion]'``.

The pipeline class is the one the model folder's ``model_index.json`` names
(``DiffusionPipeline.from_pretrained``), loaded lazily on the first edit from a local folder
saved with ``save_pretrained`` or a hub id already in the local hub cache. It is called with the
instruction as ``prompt`` and the image as ``image``; ``image_guidance_scale`` and
``true_cfg_scale`` are passed only to pipelines that take them. Editing is seeded, so the same
image and instruction give the same file (PNG, content-addressed, under ``output_dir``).
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...framework.errors import InputError, require
from ...framework.images import load_rgb
from ...framework.interfaces import Editor
from ...registry import EDITORS
from ...registry.config import bounded
from ..captioners.hf import (
    TorchDType,
    load_pretrained,
    model_fingerprint,
    quiet_transformers,
    torch_device,
    torch_dtype,
)
from ..generators.diffusion import _dtype_keyword
from ..generators.files import save_content_addressed


@EDITORS.register("diffusers")
class DiffusersEditor(Editor):
    """Edits the image with a diffusers instruction-editing pipeline.

    Config:
        model: local pipeline folder or hub id (e.g. ``timbrooks/instruct-pix2pix``).
        revision: hub revision (identity only for hub ids).
        steps: denoising steps.
        guidance_scale: text guidance scale.
        image_guidance_scale: how closely to keep the input image (pipelines that take it, e.g.
            InstructPix2Pix; 0: not passed).
        true_cfg_scale: true classifier-free guidance (pipelines that take it, e.g. Qwen-Image-Edit;
            0: not passed).
        height: resize the input to this many pixels high before editing (0: as it is).
        width: resize the input to this many pixels wide before editing (0: as it is).
        negative_prompt: what to steer away from (empty: nothing).
        seed: random seed (the same image and instruction give the same edit).
        output_dir: folder for the PNG files.
        device: ``cpu``, ``cuda``, ... or ``auto``.
        dtype: ``float32``, ``float16`` or ``bfloat16``.
        local_files_only: never try the hub (a local folder never does anyway).
    """

    @dataclass
    class Config:
        model: str = "timbrooks/instruct-pix2pix"
        revision: str = ""
        steps: int = bounded(30, 1)
        guidance_scale: float = 7.5
        image_guidance_scale: float = bounded(1.5, 0.0)
        true_cfg_scale: float = bounded(0.0, 0.0)
        height: int = bounded(0, 0)
        width: int = bounded(0, 0)
        negative_prompt: str = ""
        seed: int = 0
        output_dir: str = "runs/edited"
        device: str = "auto"
        dtype: TorchDType = TorchDType.float32
        local_files_only: bool = False

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        if bool(self.cfg.height) != bool(self.cfg.width):
            raise InputError(
                f"editor 'diffusers': set both 'height' and 'width' or neither, got "
                f"height={self.cfg.height}, width={self.cfg.width}"
            )
        self._pipe: Any = None
        self._lock = threading.Lock()

    def model_identity(self) -> str:
        return model_fingerprint(self.cfg.model, self.cfg.revision)

    def pipeline(self) -> Any:
        """The loaded editing pipeline (the class its ``model_index.json`` names)."""
        with self._lock:
            if self._pipe is None:
                diffusers = require("diffusers", "diffusion", feature="editor 'diffusers'")
                quiet_transformers()
                where = "editor 'diffusers'"
                kw = {"revision": self.cfg.revision} if self.cfg.revision else {}
                kw[_dtype_keyword()] = torch_dtype(self.cfg.dtype, where)
                pipe = load_pretrained(
                    diffusers.DiffusionPipeline.from_pretrained,
                    self.cfg.model,
                    where=where,
                    local_files_only=self.cfg.local_files_only,
                    **kw,
                )
                takes = inspect.signature(pipe.__call__).parameters
                if "image" not in takes:
                    raise InputError(
                        f"editor 'diffusers': model '{self.cfg.model}' is a {type(pipe).__name__}, "
                        f"which takes no input image; give an image editing pipeline "
                        f"(InstructPix2Pix, an *EditPipeline, ...)"
                    )
                pipe = pipe.to(torch_device(self.cfg.device))
                pipe.set_progress_bar_config(disable=True)
                self._pipe = pipe
            return self._pipe

    def edit(self, image: Path, instruction: str) -> Path:
        """``image`` edited as ``instruction`` asks -> PNG path."""
        import torch

        if not isinstance(instruction, str) or not instruction.strip():
            raise InputError(f"editor 'diffusers': the instruction must be a non-empty text, got {instruction!r}")
        if not Path(image).is_file():
            raise InputError(f"editor 'diffusers': image '{image}' does not exist")
        c = self.cfg
        pipe = self.pipeline()
        takes = inspect.signature(pipe.__call__).parameters
        ref = load_rgb(image)
        if c.height and c.width:
            ref = ref.resize((c.width, c.height))
        kw: dict[str, Any] = {
            "image": ref,
            "num_inference_steps": c.steps,
            "guidance_scale": c.guidance_scale,
            "generator": torch.Generator(device="cpu").manual_seed(c.seed),
        }
        if c.image_guidance_scale and "image_guidance_scale" in takes:
            kw["image_guidance_scale"] = c.image_guidance_scale
        if c.true_cfg_scale and "true_cfg_scale" in takes:
            kw["true_cfg_scale"] = c.true_cfg_scale
        if c.negative_prompt:
            kw["negative_prompt"] = c.negative_prompt
        with self._lock, torch.inference_mode():
            out = pipe(instruction, **kw).images[0]
        return save_content_addressed(out, c.output_dir, what=f"editor 'diffusers' ({c.model})")
