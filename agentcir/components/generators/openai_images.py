"""``generator=openai_images``: an OpenAI-compatible images API (OpenAI, or any server
speaking ``POST /images/generations`` and ``POST /images/edits``). Extra:
``pip install 'agentcir[llm]'`` (httpx).

Images come back as ``b64_json`` (or a ``url``, then fetched: with a client of its own that
carries no credentials, whatever host the URL names, under ``max_image_mb`` and within
``fetch_timeout``; http(s) only) and are saved as PNG under
``output_dir`` with content-addressed names (the sha256 of the PNG bytes). 429 and 5xx
replies, timeouts and connection errors are retried with exponential backoff
(``Retry-After`` honoured); other errors fail at once with the server's message.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...framework.component import Component
from ...framework.errors import AgentcirError, InputError, require
from ...framework.interfaces import Generator
from ...registry import GENERATORS
from ...registry.config import bounded
from .files import save_content_addressed

log = logging.getLogger(__name__)
#: longest ``Retry-After`` honoured, in seconds
MAX_RETRY_AFTER = 60.0


class ImagesAPIError(AgentcirError):
    """The images API failed (after retries) or answered something unusable."""


def _server_message(resp: Any) -> str:
    try:
        body = resp.json()
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    except ValueError:
        pass
    return " ".join(resp.text.split())[:200]


def _retry_after(resp: Any) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class ImagesAPI:
    """The HTTP side of an OpenAI-compatible images API, shared by ``generator=openai_images``
    and ``editor=openai_edits``: the client (credentials from ``api_key`` / ``api_key_env``),
    retries with backoff on 429/5xx, timeouts and connection errors, the reply's image read from
    ``b64_json`` or fetched from a ``url`` without credentials, capped at ``max_image_mb``.

    The class using it has a ``Config`` with ``base_url``, ``model``, ``revision``, ``api_key``,
    ``api_key_env``, ``timeout``, ``max_image_mb``, ``fetch_timeout``, ``retries``, ``backoff``.
    """

    #: fields that cannot change the images: not in the identity
    api_volatile_fields: ClassVar[tuple[str, ...]] = (
        "backoff",
        "api_key_env",
        "base_url",
        "max_image_mb",
        "fetch_timeout",
    )

    #: the registry key, for messages before the registry sets ``registry_key``
    api_name: ClassVar[str] = ""

    def where(self) -> str:
        """``<kind> '<key>'``, as messages name this component."""
        return f"{self.kind} '{self.registry_key or self.api_name}'"

    def _setup_api(self) -> None:
        """Check the HTTP settings of the config and prepare the (lazy) clients."""
        if self.cfg.retries < 0:
            raise InputError(f"{self.where()}: field 'retries' must be >= 0, got {self.cfg.retries}")
        for name in ("max_image_mb", "fetch_timeout", "timeout"):
            v = getattr(self.cfg, name)
            if not v > 0:  # NaN too
                raise InputError(f"{self.where()}: field '{name}' must be > 0, got {v}")
        self._client = None
        self._fetcher = None
        self._lock = threading.Lock()
        self.requests_sent = 0

    def model_identity(self) -> str:
        """The served model: its name and declared revision (never the URL it is reached at)."""
        return f"{self.cfg.model}@{self.cfg.revision}" if self.cfg.revision else self.cfg.model

    def endpoint_info(self):
        """What the run's pre-flight check asks of the server (:mod:`agentcir.framework.preflight`)."""
        from ...framework.preflight import EndpointInfo

        key = self.cfg.api_key or os.environ.get(self.cfg.api_key_env, "") or None
        return EndpointInfo(
            f"{self.where()} (model {self.cfg.model})",
            self.cfg.base_url.rstrip("/"),
            self.cfg.model,
            key,
            self.cfg.api_key_env,
        )

    # -- HTTP ---------------------------------------------------------------------------
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                httpx = require("httpx", "llm", feature=self.where())
                key = self.cfg.api_key or os.environ.get(self.cfg.api_key_env, "")
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                self._client = httpx.Client(
                    base_url=self.cfg.base_url.rstrip("/") + "/", headers=headers, timeout=self.cfg.timeout
                )
            return self._client

    def fetcher(self) -> Any:
        """The client fetching the images a reply names by ``url``: no API key, no base URL,
        no cookies: nothing of the endpoint's credentials reaches whatever host the URL names."""
        with self._lock:
            if self._fetcher is None:
                httpx = require("httpx", "llm", feature=self.where())
                self._fetcher = httpx.Client(timeout=self.cfg.fetch_timeout, follow_redirects=True, max_redirects=3)
            return self._fetcher

    def close(self) -> None:
        with self._lock:
            for name in ("_client", "_fetcher"):
                c = getattr(self, name)
                if c is not None:
                    c.close()
                    setattr(self, name, None)

    def _capped(self, client: Any, method: str, url: str, max_bytes: int) -> Any:
        """``client``'s reply read as a stream, refused past ``max_bytes`` (declared or received)."""
        import httpx

        with client.stream(method, url) as resp:
            if resp.status_code >= 400:
                resp.read()
                return resp
            limit = f"the image at {url} is larger than max_image_mb={self.cfg.max_image_mb:g}"
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise ImagesAPIError(f"{self.where()}: {limit} ({int(declared)} bytes declared)")
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise ImagesAPIError(f"{self.where()}: {limit} (refused after {len(body)} bytes)")
            return httpx.Response(resp.status_code, headers=resp.headers, content=bytes(body), request=resp.request)

    def _send(self, method: str, url: str, *, client: Any = None, max_bytes: int | None = None, **kwargs: Any) -> Any:
        """One request with retries on 429/5xx, timeouts and connection errors (by the API
        client, or ``client``; the body capped at ``max_bytes`` when given)."""
        import httpx

        client = client or self.client()
        timeout = self.cfg.fetch_timeout if max_bytes is not None else self.cfg.timeout
        last = ""
        for attempt in range(self.cfg.retries + 1):
            if attempt:
                time.sleep(delay)
            delay = self.cfg.backoff * (2**attempt)
            self.requests_sent += 1
            try:
                resp = (
                    client.request(method, url, **kwargs)
                    if max_bytes is None
                    else self._capped(client, method, url, max_bytes)
                )
            except httpx.TimeoutException:
                last = f"timed out after {timeout:g} s"
                log.warning("%s: %s %s %s (attempt %d)", self.where(), method, url, last, attempt + 1)
                continue
            except httpx.TransportError as e:
                last = f"connection error ({type(e).__name__}: {e})"
                log.warning("%s: %s %s %s (attempt %d)", self.where(), method, url, last, attempt + 1)
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {_server_message(resp)}"
                wait = _retry_after(resp)
                delay = min(wait, MAX_RETRY_AFTER) if wait is not None else delay
                log.warning("%s: %s %s -> %s (attempt %d)", self.where(), method, url, last, attempt + 1)
                continue
            if resp.status_code >= 400:
                raise ImagesAPIError(
                    f"{self.where()}: {method} {resp.request.url} failed with HTTP "
                    f"{resp.status_code}: {_server_message(resp)}"
                )
            return resp
        where = url if "://" in url else f"{self.cfg.base_url.rstrip('/')}/{url}"
        raise ImagesAPIError(
            f"{self.where()}: {method} {where} failed after {self.cfg.retries + 1} attempt(s); last: {last}"
        )

    def _image_bytes(self, resp: Any) -> bytes:
        try:
            body = resp.json()
        except ValueError:
            raise ImagesAPIError(
                f"{self.where()}: the reply is not JSON: {' '.join(resp.text.split())[:200]!r}"
            ) from None
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not data or not isinstance(data[0], dict):
            raise ImagesAPIError(f"{self.where()}: the reply has no 'data' list of images: {str(body)[:200]}")
        item = data[0]
        if item.get("b64_json"):
            try:
                return base64.b64decode(item["b64_json"], validate=True)
            except ValueError as e:
                raise ImagesAPIError(f"{self.where()}: 'b64_json' is not base64 ({e})") from None
        if item.get("url"):
            return self._fetch_image(str(item["url"]))
        raise ImagesAPIError(f"{self.where()}: the image has neither 'b64_json' nor 'url': {str(item)[:200]}")

    def post_edit(self, reference: Path, fields: dict[str, Any]) -> Any:
        """``POST images/edits``: ``reference`` uploaded as PNG (multipart, field ``image``) with
        the form ``fields``; the reply (read its image with :meth:`_image_bytes`)."""
        from .files import png_bytes

        ref = Path(reference)
        if not ref.is_file():
            raise InputError(f"{self.where()}: reference image '{reference}' does not exist")
        image = png_bytes(ref.read_bytes(), what=f"reference image '{reference}'")
        return self._send(
            "POST",
            "images/edits",
            data={k: str(v) for k, v in fields.items()},
            files={"image": (ref.stem + ".png", image, "image/png")},
        )

    def _fetch_image(self, url: str) -> bytes:
        """The image a reply names by ``url``: fetched without credentials, capped and timed out."""
        from urllib.parse import urljoin, urlsplit

        absolute = urljoin(self.cfg.base_url.rstrip("/") + "/", url)  # a relative URL is the endpoint's own
        if urlsplit(absolute).scheme not in ("http", "https"):
            raise ImagesAPIError(f"{self.where()}: the reply names an image URL that is not http(s): {url[:200]!r}")
        return self._send("GET", absolute, client=self.fetcher(), max_bytes=int(self.cfg.max_image_mb * 2**20)).content


@GENERATORS.register("openai_images")
class OpenAIImagesGenerator(ImagesAPI, Generator):
    """Draws the target description with an OpenAI-compatible images endpoint.

    Config:
        base_url: API root (``.../v1``); e.g. a local server's ``http://127.0.0.1:8000/v1``.
        model: image model name.
        revision: the served model's version as the user declares it; with ``model`` (and the
            image settings) it is the generator's identity: ``base_url`` is not, so a server moved
            to another host or port keeps the cache.
        api_key: key (empty: read from the environment variable ``api_key_env``).
        api_key_env: environment variable holding the key.
        size: image size, e.g. ``1024x1024``.
        quality: model-specific quality setting (empty: not sent).
        response_format: ``b64_json`` (sent for servers that default to URLs); empty: not sent.
        use_reference: edit the reference image (``/images/edits``) instead of drawing from
            text alone, when the query has a reference.
        output_dir: folder for the PNG files.
        timeout: seconds per HTTP request to the API.
        max_image_mb: largest image fetched from a ``url`` reply (refused while it streams in).
        fetch_timeout: seconds per fetch of a ``url`` reply (no credentials are sent with it).
        retries: extra attempts after a 429/5xx reply, a timeout or a connection error.
        backoff: first retry delay in seconds (doubles per attempt; ``Retry-After`` wins).
    """

    volatile_fields: ClassVar[tuple[str, ...]] = (*Component.volatile_fields, *ImagesAPI.api_volatile_fields)
    #: ``generate`` blocks on HTTP: the runner gives it a thread per call slot, not a CPU worker
    io_bound: ClassVar[bool] = True
    api_name: ClassVar[str] = "openai_images"

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
        use_reference: bool = False
        output_dir: str = "runs/generated"
        timeout: float = 120.0
        max_image_mb: float = bounded(50.0, 0, lo_open=True)
        fetch_timeout: float = bounded(60.0, 0, lo_open=True)
        retries: int = 4
        backoff: float = 1.0

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self._setup_api()

    # -- the Generator interface ------------------------------------------------------------
    def generate(self, description: str, *, reference: Path | None = None) -> Path:
        """Draw ``description`` (editing ``reference`` when ``use_reference``) -> PNG path."""
        if not isinstance(description, str) or not description.strip():
            raise InputError(
                f"generator 'openai_images': the description must be a non-empty text, got {description!r}"
            )
        fields: dict[str, Any] = {"model": self.cfg.model, "prompt": description, "n": 1, "size": self.cfg.size}
        if self.cfg.quality:
            fields["quality"] = self.cfg.quality
        if self.cfg.response_format:
            fields["response_format"] = self.cfg.response_format
        if self.cfg.use_reference and reference is not None:
            resp = self.post_edit(Path(reference), fields)
        else:
            resp = self._send("POST", "images/generations", json=fields)
        return save_content_addressed(
            self._image_bytes(resp), self.cfg.output_dir, what=f"generator 'openai_images' ({self.cfg.model})"
        )
