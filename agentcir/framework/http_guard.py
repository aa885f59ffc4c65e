"""The outer layer of an HTTP server of agentcir (pure ASGI, before any route runs or anything
reads the body): ``agentcir serve`` (:mod:`agentcir.serve.guard`) and the streamable HTTP
transport of ``agentcir mcp`` (:mod:`agentcir.mcp_server`) are both wrapped in :class:`Guard`.

In order, for every request:

1. **Host allow-list** (DNS rebinding): the ``Host`` header must name ``localhost``,
   ``127.0.0.1``, ``[::1]``, the address the server is bound to, or a name given with
   ``--allow-host`` / ``$AGENTCIR_ALLOW_HOSTS`` (comma-separated; ``*.example.org`` allows
   its subdomains, ``*`` any host: the check is off). A server
   bound to every interface (``0.0.0.0``, ``::``) also answers IP literals (a rebinding
   page always sends its own domain name). Anything else: 400.
2. **Token** (when set): ``Authorization: Bearer TOKEN`` or the HttpOnly cookie. A token in
   the query string is never accepted for the request itself: a ``GET`` with the right
   ``?token=`` gets a 303 redirect to the same URL without it, setting the cookie (so the
   token does not stay in the address bar, the history or the logs of what follows);
   a wrong one, or one on another method, is a 401.
3. **Body limit**: a declared or streamed body over the limit is a 413.

Every response, from a route or from this layer, carries the security headers of
:data:`SECURITY_HEADERS` (a route may set its own ``Content-Security-Policy``: the page does).
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
from urllib.parse import parse_qsl, quote, urlencode


ALLOW_HOSTS_ENV = "AGENTCIR_ALLOW_HOSTS"
#: the cookie carrying the token (set by opening ``/?token=TOKEN`` once)
COOKIE = "agentcir_token"
#: names every server answers to
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
#: bind addresses meaning every interface
WILDCARD_BINDS = ("0.0.0.0", "::", "")

#: sent with every response (a response's own value of a header wins); the default CSP lets
#: nothing run or load: JSON, images and errors need none of it
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=(), interest-cohort=()",
}


def host_name(value: str) -> str:
    """The host of a ``Host`` header value, without port or IPv6 brackets, lower case."""
    v = value.strip().lower()
    if v.startswith("["):
        end = v.find("]")
        return v[1:end] if end > 0 else v
    if v.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        v = v.rsplit(":", 1)[0]
    return v.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def allowed_hosts(bound: str, extra=(), env: str | None = None) -> tuple[frozenset[str], bool, bool]:
    """(the allowed host names, whether any IP literal is allowed, whether any host is allowed)."""
    names = {*LOCAL_HOSTS}
    listed = [*extra, *((os.environ.get(ALLOW_HOSTS_ENV, "") if env is None else env).split(","))]
    for h in [bound, *listed]:
        h = h.strip()
        if h:
            names.add(host_name(h) if not h.startswith("*") else h)
    any_host = "*" in names
    return frozenset(n for n in names if n != "*"), host_name(bound) in WILDCARD_BINDS, any_host


def _secured(headers: list) -> list:
    have = {k.decode("latin-1").lower() for k, _ in headers}
    return [*headers, *((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k not in have)]


class Guard:
    """Host allow-list, token, body limit and security headers (see the module docstring).

    Args:
        inner: the ASGI app guarded.
        token: the bearer token every request needs (empty: none).
        host: the address the server is bound to.
        allow_hosts: more names the ``Host`` header may give.
        max_body: the largest request body, in bytes (64 KiB of form fields are allowed on top).
        cookie: the name of the cookie that may carry the token.
    """

    def __init__(
        self,
        inner,
        *,
        token: str = "",
        host: str = "127.0.0.1",
        allow_hosts=(),
        max_body: int = 20 * 2**20,
        cookie: str = COOKIE,
    ):
        self.inner = inner
        self.token = token
        self.max_body = int(max_body)
        self.cookie = cookie
        self.hosts, self.ip_literals, self.any_host = allowed_hosts(host, allow_hosts)

    def host_allowed(self, value: str | None) -> bool:
        """Whether a request with this ``Host`` header is answered."""
        if self.any_host:
            return True
        if not value:
            return False
        name = host_name(value)
        return (
            name in self.hosts
            or (self.ip_literals and _is_ip(name))
            or any(h.startswith("*.") and name.endswith(h[1:]) for h in self.hosts)
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        token, max_upload = self.token, self.max_body
        limit_mb = f"{max_upload / 2**20:g}"
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host")
        if not self.host_allowed(host):
            shown = (host or "")[:100]
            return await plain(
                send,
                400,
                f"Host '{shown}' is not served here (a page of another site resolving to this "
                f"server is refused); if this is a name of this server, start it with "
                f"--allow-host {host_name(shown) or 'NAME'}"
                if shown
                else "a request needs a Host header",
            )
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in query if k == "token"]
        if token and given:  # never accepted as the request's credential: set the cookie once, then redirect
            if scope.get("method") != "GET" or not _same(given[0], token):
                return await plain(
                    send,
                    401,
                    "wrong token in the URL (a token in the URL only opens the page: GET /?token=TOKEN)",
                    {"www-authenticate": "Bearer"},
                )
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            path = "/" + (scope.get("root_path", "") + scope.get("path", "/")).lstrip("/")  # never //other.host
            location = quote(path, safe="/:@!$&'()*+,;=-._~") + (f"?{rest}" if rest else "")
            return await plain(
                send,
                303,
                "token accepted: the cookie is set",
                {
                    "location": location,
                    "cache-control": "no-store",
                    "set-cookie": f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/",
                },
            )
        if token and not _authorized(token, headers, self.cookie):
            return await plain(
                send,
                401,
                "missing or wrong bearer token (Authorization: Bearer TOKEN, or open the page once as /?token=TOKEN)",
                {"www-authenticate": "Bearer"},
            )
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_upload + 65536):
            return await plain(send, 413, f"request body larger than the upload limit of {limit_mb} MB")
        seen = [0]
        started = [False]
        refused = [False]

        async def limited():
            if refused[0]:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen[0] += len(msg.get("body", b""))
                if seen[0] > max_upload + 65536:  # answer 413 now; the app sees the client gone
                    refused[0] = True
                    if not started[0]:
                        started[0] = True
                        await plain(send, 413, f"upload larger than the limit of {limit_mb} MB")
                    return {"type": "http.disconnect"}
            return msg

        async def tracking(msg):
            if refused[0]:
                return  # the 413 is sent: whatever the app answers to the disconnect is dropped
            if msg["type"] == "http.response.start":
                started[0] = True
                msg = dict(msg, headers=_secured(list(msg.get("headers", []))))
            await send(msg)

        await self.inner(scope, limited, tracking)


def _same(given: str, token: str) -> bool:
    return bool(given) and secrets.compare_digest(given.encode(), token.encode())


def _cookie_token(headers, cookie: str) -> str:
    for part in headers.get("cookie", "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == cookie:
            return v
    return ""


def _authorized(token: str, headers, cookie: str = COOKIE) -> bool:
    auth = headers.get("authorization", "")
    given = [auth[7:].strip() if auth.lower().startswith("bearer ") else "", _cookie_token(headers, cookie)]
    return any(_same(t, token) for t in given)


async def plain(send, status: int, detail: str, extra: dict | None = None) -> None:
    """Answer ``{"detail": ...}`` with ``status`` straight from the ASGI layer (security headers included)."""
    body = json.dumps({"detail": detail}).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": _secured(hdrs)})
    await send({"type": "http.response.body", "body": body})
