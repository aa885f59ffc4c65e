"""``editor=openai_edits``: an OpenAI-compatible image edits endpoint (``POST /images/edits``,
the image uploaded as multipart form data with the instruction as ``prompt``). Extra:
``pip install 'agentcir[llm]'`` (httpx).

The HTTP side (credentials, retries with backoff on 429/5xx/timeouts/connection errors,
``b64_json`` or ``url`` replies fetched without credentials under ``max_image_mb``) is the images
API client of ``generator=openai_images`` (:class:`~agentcir.components.generators.openai_images.ImagesAPI`).
The edited image is saved as PNG under ``output_dir`` with a content-addressed name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ...framework.component import Component
from ...framework.errors import InputError
from ...framework.interfaces import Editor
from ...registry import EDITORS
from ...registry.config import bounded
from ..generators.files import save_content_addressed
from ..generators.openai_images import ImagesAPI


@EDITORS.register("openai_edits")
class OpenAIEditsEditor(ImagesAPI, Editor):
    """Edits the image with an OpenAI-compatible ``/images/edits`` endpoint.

    Config:
        base_url: API root (``.../v1``); e.g. a local server's ``http://127.0.0.1:8000/v1``.
        model: image editing model name.
        revision: the served model's version as the user declares it; with ``model`` (and the
            image settings) the editor's identity (``base_url`` is not).
        api_key: key (empty: read from the environment variable ``api_key_env``).
        api_key_env: environment variable holding the key.
        size: image size, e.g. ``1024x1024`` (empty: not sent, the server's default).
        quality: model-specific quality setting (empty: not sent).
        response_format: ``b64_json`` (sent for servers that default to URLs); empty: not sent.
        extra: more form fields sent as they are (``{"input_fidelity": "high"}``); part of the identity.
        output_dir: folder for the PNG files.
        timeout: seconds per HTTP request to the API.
        max_image_mb: largest image fetched from a ``url`` reply.
        fetch_timeout: seconds per fetch of a ``url`` reply (no credentials are sent with it).
        retries: extra attempts after a 429/5xx reply, a timeout or a connection error.
        backoff: first retry delay in seconds (doubles per attempt; ``Retry-After`` wins).
    """

    volatile_fields: ClassVar[tuple[str, ...]] = (*Component.volatile_fields, *ImagesAPI.api_volatile_fields)
    #: ``edit`` blocks on HTTP: the runner gives it a thread per call slot, not a CPU worker
    io_bound: ClassVar[bool] = True
    api_name: ClassVar[str] = "openai_edits"

    @dataclass
    class Config:
        base_url: str = "https://api.openai.com/v1"
        model: str = "gpt-image-1"
        revision: str = ""
        api_key: str = ""
        api_key_env: str = "OPENAI_API_KEY"
        size: str = "1024x1024"
        quality: str = ""
        response_format: str = "b64_json"
        extra: dict[str, Any] = field(default_factory=dict)
        output_dir: str = "runs/edited"
        timeout: float = 120.0
        max_image_mb: float = bounded(50.0, 0, lo_open=True)
        fetch_timeout: float = bounded(60.0, 0, lo_open=True)
        retries: int = 4
        backoff: float = 1.0

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        if not isinstance(self.cfg.extra, dict):
            raise InputError(
                f"editor 'openai_edits': field 'extra' must be a mapping of form fields, got {self.cfg.extra!r}"
            )
        self._setup_api()

    def edit(self, image: Path, instruction: str) -> Path:
        """``image`` edited as ``instruction`` asks -> PNG path."""
        if not isinstance(instruction, str) or not instruction.strip():
            raise InputError(f"editor 'openai_edits': the instruction must be a non-empty text, got {instruction!r}")
        fields: dict[str, Any] = {"model": self.cfg.model, "prompt": instruction, "n": 1}
        for name in ("size", "quality", "response_format"):
            if getattr(self.cfg, name):
                fields[name] = getattr(self.cfg, name)
        fields.update({str(k): v for k, v in self.cfg.extra.items()})
        resp = self.post_edit(Path(image), fields)
        return save_content_addressed(
            self._image_bytes(resp), self.cfg.output_dir, what=f"editor 'openai_edits' ({self.cfg.model})"
        )
