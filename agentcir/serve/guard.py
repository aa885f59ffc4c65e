"""The web app's outer layer (pure ASGI, before anything reads the body): the bearer token
and the request body limit."""

from __future__ import annotations

import json
import secrets
from urllib.parse import parse_qs

from .state import COOKIE, ServeState


class Guard:
    """Refuses a request without the token (401) or with a body over the upload limit (413)."""

    def __init__(self, inner, state: ServeState):
        self.inner = inner
        self.st = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        st = self.st
        token, max_upload = st.token, st.max_upload
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if token and not _authorized(token, scope, headers):
            return await plain(send, 401, "missing or wrong bearer token (Authorization: Bearer TOKEN, "
                                          "or open the page once as /?token=TOKEN)", {"www-authenticate": "Bearer"})
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_upload + 65536):
            return await plain(send, 413, f"request body larger than the upload limit of {st.cfg.max_upload_mb:g} MB")
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
                        await plain(send, 413, f"upload larger than the limit of {st.cfg.max_upload_mb:g} MB")
                    return {"type": "http.disconnect"}
            return msg

        async def tracking(msg):
            if refused[0]:
                return  # the 413 is sent: whatever the app answers to the disconnect is dropped
            if msg["type"] == "http.response.start":
                started[0] = True
                if token and _query_token(scope) and not _cookie_token(headers):  # the page opened with ?token=
                    msg = dict(msg, headers=[*msg.get("headers", []), (b"set-cookie", f"{COOKIE}={token}; HttpOnly; "
                                                                                  f"SameSite=Strict; Path=/".encode())])
            await send(msg)

        await self.inner(scope, limited, tracking)


def _query_token(scope) -> str:
    return (parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token") or [""])[0]


def _cookie_token(headers) -> str:
    for part in headers.get("cookie", "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == COOKIE:
            return v
    return ""


def _authorized(token: str, scope, headers) -> bool:
    auth = headers.get("authorization", "")
    given = [auth[7:].strip() if auth.lower().startswith("bearer ") else "", _cookie_token(headers), _query_token(scope)]
    return any(t and secrets.compare_digest(t.encode(), token.encode()) for t in given)


async def plain(send, status: int, detail: str, extra: dict | None = None) -> None:
    """Answer ``{"detail": ...}`` with ``status`` straight from the ASGI layer."""
    body = json.dumps({"detail": detail}).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})
