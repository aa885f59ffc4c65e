"""HTTP plumbing shared by the OpenAI-compatible clients (chat: ``llms/openai.py``; images:
the generators' images-API backend): endpoint settings, bounded concurrency, retries with
exponential backoff and jitter, and images as base64 data URLs.

Every request runs on one background event loop owned by the client, so one semaphore
bounds the requests in flight across every caller, and both the sync (:meth:`HttpClient.post`)
and the async (:meth:`HttpClient.apost`) entry points work from any thread, whether or not
an event loop is running there.

Needs the ``llm`` extra (``httpx``). The API key is read from the config or the
environment and only ever sent in the ``Authorization`` header: it is never logged, never
part of an error message, and never part of a component identity.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import io
import logging
import os
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine
from urllib.parse import urlsplit, urlunsplit

from ...framework.errors import AgentcirError, InputError, require

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: requests in flight when neither the endpoint's ``concurrency`` nor a run sets it
DEFAULT_CONCURRENCY = 8
#: statuses worth retrying: timeouts, conflicts, rate limits, server errors
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class EndpointError(AgentcirError):
    """An HTTP endpoint failed (after retries where retrying makes sense).

    Attributes:
        status: the last HTTP status, or ``None`` for a timeout / connection failure.
        attempts: how many requests were made.
    """

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1):
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class BadReply(Exception):
    """A 2xx reply that cannot be used (a truncated or non-JSON body, no ``choices``): retried like
    a 5xx, since servers and proxies send these under load; after the retries, an :class:`EndpointError`."""


@dataclass
class Endpoint:
    """Where and how to reach an OpenAI-compatible server.

    Attributes:
        base_url: e.g. ``http://localhost:8000/v1`` (vLLM), ``http://localhost:11434/v1``
            (Ollama), ``http://localhost:8080/v1`` (llama.cpp); ``None``: ``$OPENAI_BASE_URL``,
            else the OpenAI API.
        api_key: the key; ``None``: read the environment variable ``api_key_env``. Local
            servers usually need none.
        api_key_env: environment variable holding the key.
        timeout: seconds per request (connect, read and write each).
        retries: extra attempts after a timeout, a connection error, HTTP 408/409/425/429/5xx or a
            2xx reply that cannot be used (truncated, not JSON, no ``choices``: :class:`BadReply`).
        backoff: first retry delay in seconds, doubled each attempt, with jitter.
        backoff_max: cap on one delay (a ``Retry-After`` header is honoured up to ``retry_after_max``).
        retry_after_max: longest ``Retry-After`` wait accepted; a longer one fails at once.
        concurrency: requests in flight at once (across every caller of this client);
            ``None``: follow the run's ``run.concurrency`` (:meth:`HttpClient.follow_concurrency`),
            :data:`DEFAULT_CONCURRENCY` outside a run. A number caps it (a rate-limited server).
        headers: extra request headers (e.g. an organisation); not part of identities.
    """

    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0
    retries: int = 4
    backoff: float = 0.5
    backoff_max: float = 20.0
    retry_after_max: float = 120.0
    concurrency: int | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def resolved_base_url(self) -> str:
        url = (self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InputError(f"base_url '{public_url(url)}' is not an http(s) URL (e.g. http://localhost:8000/v1)")
        return url

    def resolved_api_key(self) -> str | None:
        return self.api_key or (os.environ.get(self.api_key_env) if self.api_key_env else None) or None


#: Endpoint fields that cannot change a model's outputs (never part of an identity): an endpoint's
#: identity is the model it serves (its name and the user-declared ``revision``), not the URL it is
#: reached at, so moving a server to another host or port keeps the call cache
ENDPOINT_VOLATILE = (
    "base_url",
    "api_key",
    "api_key_env",
    "timeout",
    "retries",
    "backoff",
    "backoff_max",
    "retry_after_max",
    "concurrency",
    "headers",
)


def public_url(url: str) -> str:
    """``url`` without credentials, query or fragment (safe for messages and identities)."""
    p = urlsplit(url)
    host = p.hostname or ""
    if p.port:
        host = f"{host}:{p.port}"
    return urlunsplit((p.scheme, host, p.path.rstrip("/"), "", ""))


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds asked by ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``, if any."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with "equal jitter": ``d = min(cap, base·2^attempt)``, uniform in ``[d/2, d]``."""
    d = min(cap, base * (2**attempt))
    return d / 2 + (rng or random).random() * d / 2


def _error_detail(response: Any) -> str:
    try:
        body = response.json()
    except Exception:
        text = " ".join(response.text.split())
        return text[:300]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return str(body)[:300]


class BackgroundLoop:
    """An event loop running in a daemon thread; coroutines from any thread run on it."""

    def __init__(self, name: str = "agentcir-http"):
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=main, name=self._name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def run(self, coro: Coroutine) -> Any:
        """Run ``coro`` on the loop and wait (from any thread but the loop's own)."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a blocking call was made from the client's own event loop; await the async variant")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def arun(self, coro: Coroutine) -> Any:
        """Await ``coro`` run on the loop, from another loop (cancellation propagates)."""
        if self.in_loop_thread():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self, cleanup: Coroutine | None = None) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None or loop.is_closed():
            if cleanup is not None:
                cleanup.close()
            return
        if cleanup is not None:
            try:
                asyncio.run_coroutine_threadsafe(cleanup, loop).result(timeout=5)
            except Exception:  # closing is best effort
                pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        loop.close()


class ShardedPool:
    """``n`` connections as several httpx clients of at most :attr:`SHARD` connections each; a
    request goes to the least busy one.

    httpcore's pool assigns requests to connections with a scan over both on every state change,
    so one pool of 64 connections spends ~10 ms of CPU per request (measured: 384 requests at 64
    in flight took 8x the server's time); shards of 16 keep it at ~1 ms (benchmarks/README.md,
    pipeline section).
    """

    SHARD = 16

    def __init__(self, n: int, make: Callable[[int], Any]):
        sizes = [self.SHARD] * (n // self.SHARD) + ([n % self.SHARD] if n % self.SHARD else [])
        self.clients = [make(size) for size in sizes]
        self._busy = [0] * len(self.clients)

    async def request(self, method: str, url: str, **kwargs: Any) -> Any:
        i = min(range(len(self.clients)), key=self._busy.__getitem__)
        self._busy[i] += 1
        try:
            return await self.clients[i].request(method, url, **kwargs)
        finally:
            self._busy[i] -= 1

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()


class HttpClient:
    """JSON requests to one OpenAI-compatible server, with retries and bounded concurrency.

    Args:
        endpoint: where and how (see :class:`Endpoint`).
        who: how errors name the caller, e.g. ``"llm 'openai' (model gpt-4o-mini)"``.
    """

    def __init__(self, endpoint: Endpoint, *, who: str = "HTTP client"):
        if endpoint.concurrency is not None and endpoint.concurrency < 1:
            raise InputError(f"{who}: concurrency must be at least 1, got {endpoint.concurrency}")
        if endpoint.retries < 0:
            raise InputError(f"{who}: retries must be 0 or more, got {endpoint.retries}")
        if endpoint.timeout <= 0:
            raise InputError(f"{who}: timeout must be positive, got {endpoint.timeout}")
        self.endpoint = endpoint
        self.base_url = endpoint.resolved_base_url()
        self.who = who
        self.requests = 0  #: HTTP requests sent (retries included)
        self._bg = BackgroundLoop()
        self._client = None
        self._sem: asyncio.Semaphore | None = None
        self._rng = random.Random()
        self._follow: int | None = None

    @property
    def concurrency(self) -> int:
        """Requests in flight at most: the endpoint's cap, else the run's, else the default."""
        return self.endpoint.concurrency or self._follow or DEFAULT_CONCURRENCY

    def follow_concurrency(self, n: int, *, cap_field: str = "concurrency") -> dict:
        """Follow a run's ``run.concurrency`` ``n`` unless the endpoint sets a cap; returns
        ``{"limit", "capped_by"}`` (``capped_by``: ``cap_field`` when the endpoint caps, else ``None``)."""
        before = self.concurrency
        self._follow = max(1, int(n))
        if self.concurrency != before and self._client is not None:  # new limits for the next requests
            client, self._client = self._client, None
            asyncio.run_coroutine_threadsafe(client.aclose(), self._bg.loop)
        return {"limit": self.concurrency, "capped_by": cap_field if self.endpoint.concurrency else None}

    def _url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.base_url}/{path.lstrip('/')}"

    def _ensure(self):
        if self._client is None:
            httpx = require("httpx", "llm", feature="the OpenAI-compatible client")
            headers = {"Content-Type": "application/json", **self.endpoint.headers}
            key = self.endpoint.resolved_api_key()
            if key:
                headers["Authorization"] = f"Bearer {key}"
            n = self.concurrency
            self._client = ShardedPool(
                n,
                lambda size: httpx.AsyncClient(
                    headers=headers,
                    timeout=httpx.Timeout(self.endpoint.timeout),
                    limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
                ),
            )
            self._sem = asyncio.Semaphore(n)
        return self._client

    async def _send(
        self, method: str, path: str, payload: Any = None, decode: Callable[[Any], Any] | None = None
    ) -> Any:
        """The response (or ``decode(response)``), retrying timeouts, connection failures, the
        statuses of :data:`RETRY_STATUSES` and 2xx replies ``decode`` rejects with :class:`BadReply`."""
        httpx = require("httpx", "llm", feature="the OpenAI-compatible client")
        client = self._ensure()
        url = self._url(path)
        shown = public_url(url)
        ep = self.endpoint
        attempts = ep.retries + 1
        last = ""
        status = None
        for attempt in range(attempts):
            retry_after = None
            async with self._sem:
                self.requests += 1
                try:
                    resp = await client.request(method, url, json=payload)
                except httpx.TimeoutException:
                    status, last = None, f"timed out after {ep.timeout:g} s"
                except httpx.TransportError as e:
                    status, last = None, f"connection failed ({type(e).__name__}: {e})"
                else:
                    status = resp.status_code
                    if status < 400:
                        if decode is None:
                            return resp
                        try:
                            return decode(resp)
                        except BadReply as e:
                            last = f"HTTP {status} with an unusable reply: {e}"
                    if status >= 400:
                        last = f"HTTP {status}: {_error_detail(resp)}"
                    if status >= 400 and status not in RETRY_STATUSES and status < 500:
                        hint = (
                            " (check the API key: set api_key or the variable named by api_key_env)"
                            if status in (401, 403)
                            else ""
                        )
                        raise EndpointError(
                            f"{self.who}: {method} {shown} failed with {last}{hint}",
                            status=status,
                            attempts=attempt + 1,
                        )
                    retry_after = retry_after_seconds(resp.headers)
            if attempt + 1 >= attempts:
                break
            if retry_after is not None and retry_after > ep.retry_after_max:
                raise EndpointError(
                    f"{self.who}: {method} {shown} failed with {last}; the server asks to retry after "
                    f"{retry_after:g} s (more than retry_after_max={ep.retry_after_max:g} s)",
                    status=status,
                    attempts=attempt + 1,
                )
            delay = (
                retry_after
                if retry_after is not None
                else backoff_delay(attempt, ep.backoff, ep.backoff_max, self._rng)
            )
            log.info(
                "%s: %s %s: %s; retry %d/%d in %.2f s", self.who, method, shown, last, attempt + 1, ep.retries, delay
            )
            await asyncio.sleep(delay)
        raise EndpointError(
            f"{self.who}: {method} {shown} failed after {attempts} attempt(s): {last}", status=status, attempts=attempts
        )

    async def _json(
        self, method: str, path: str, payload: Any = None, check: Callable[[Any], Any] | None = None
    ) -> Any:
        def decode(resp: Any) -> Any:
            try:
                data = resp.json()
            except ValueError:
                raise BadReply(
                    f"not JSON (content-type {resp.headers.get('content-type', '?')}, "
                    f"{len(resp.content)} bytes): {' '.join(resp.text.split())[:200]!r}"
                ) from None
            return data if check is None else check(data)

        return await self._send(method, path, payload, decode)

    async def _bytes(self, url: str) -> bytes:
        return (await self._send("GET", url)).content

    # -- public entry points ----------------------------------------------------------------
    def run(self, coro: Coroutine) -> Any:
        """Run a coroutine on the client's event loop and wait for it (from any thread)."""
        return self._bg.run(coro)

    async def apost(self, path: str, payload: dict, check: Callable[[Any], Any] | None = None) -> Any:
        """POST ``payload`` as JSON to ``base_url/path``; the decoded JSON reply, or ``check(reply)``
        (which raises :class:`BadReply` for a reply worth retrying) (async)."""
        return await self._bg.arun(self._json("POST", path, payload, check))

    def post(self, path: str, payload: dict, check: Callable[[Any], Any] | None = None) -> Any:
        """POST ``payload`` as JSON to ``base_url/path``; the decoded JSON reply (blocking; see :meth:`apost`)."""
        return self._bg.run(self._json("POST", path, payload, check))

    async def aget_bytes(self, url: str) -> bytes:
        """GET a URL (absolute, or relative to ``base_url``) as bytes, with the same retries (async)."""
        return await self._bg.arun(self._bytes(url))

    def get_bytes(self, url: str) -> bytes:
        """GET a URL (absolute, or relative to ``base_url``) as bytes, with the same retries (blocking)."""
        return self._bg.run(self._bytes(url))

    def close(self) -> None:
        client, self._client = self._client, None
        self._bg.close(client.aclose() if client is not None else None)


# -- images -------------------------------------------------------------------------------
class _BytesLRU:
    """A thread-safe LRU map of strings bounded by their total length (bytes, for ASCII)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._items: OrderedDict[Any, str] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> str | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Any, value: str) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes += len(value) - (len(old) if old is not None else 0)
            self._items[key] = value
            while self._bytes > self.max_bytes and len(self._items) > 1:
                self._bytes -= len(self._items.popitem(last=False)[1])


#: encoded images by (path, size, mtime, max_side, quality): a run sends the same gallery images
#: again and again (the verifier's candidates), and encoding one costs milliseconds of CPU
_DATA_URLS = _BytesLRU(64 << 20)


def _data_url(path: str, size: int, mtime_ns: int, max_side: int, quality: int) -> str:
    key = (path, size, mtime_ns, max_side, quality)
    hit = _DATA_URLS.get(key)
    if hit is None:
        hit = _encode_data_url(path, max_side, quality)
        _DATA_URLS.put(key, hit)
    return hit


def _encode_data_url(path: str, max_side: int, quality: int) -> str:
    from ...framework.images import load_rgb

    im = load_rgb(path, min_side=max_side or None)  # a big JPEG is decoded at a reduced DCT scale
    if max_side and max(im.size) > max_side:
        from PIL import Image

        im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def image_data_url(image: Any, *, max_side: int = 768, quality: int = 90) -> str:
    """An image (path, PIL image, ``http(s)://`` or ``data:`` URL) as a URL for a chat message.

    Local images are decoded, shrunk so that their longer side is at most ``max_side``
    (0: never), and re-encoded as JPEG at ``quality``; remote and data URLs pass unchanged.

    Raises:
        agentcir.framework.images.ImageDecodeError: the file is missing or not an image.
    """
    if not (1 <= quality <= 100):
        raise InputError(f"image quality must be within 1..100, got {quality}")
    if max_side < 0:
        raise InputError(f"image max_side must be 0 (no resize) or positive, got {max_side}")
    if isinstance(image, str) and image.startswith(("http://", "https://", "data:")):
        return image
    if hasattr(image, "mode") and hasattr(image, "size"):  # a PIL image
        from ...framework.images import load_rgb

        im = load_rgb(image)
        if max_side and max(im.size) > max_side:
            im.thumbnail((max_side, max_side))
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=quality)
        return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    path = os.fspath(image)
    try:
        st = os.stat(path)
    except OSError:
        from ...framework.images import ImageDecodeError

        raise ImageDecodeError(f"image '{path}': file not found") from None
    return _data_url(os.path.abspath(path), st.st_size, st.st_mtime_ns, max_side, quality)
