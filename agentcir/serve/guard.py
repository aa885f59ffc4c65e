"""The web app's outer layer: :class:`agentcir.framework.http_guard.Guard` (host allow-list,
token, body limit, security headers) with the limits and token of the app's
:class:`~agentcir.serve.state.ServeState`."""

from __future__ import annotations

from ..framework import http_guard
from ..framework.http_guard import (
    ALLOW_HOSTS_ENV,
    LOCAL_HOSTS,
    SECURITY_HEADERS,
    WILDCARD_BINDS,
    allowed_hosts,
    host_name,
    plain,
)
from .state import COOKIE, ServeState

__all__ = [
    "ALLOW_HOSTS_ENV",
    "LOCAL_HOSTS",
    "SECURITY_HEADERS",
    "WILDCARD_BINDS",
    "Guard",
    "allowed_hosts",
    "host_name",
    "plain",
]


class Guard(http_guard.Guard):
    """The guard of ``agentcir serve``: the token and upload limit of the app's state."""

    def __init__(self, inner, state: ServeState):
        self.st = state
        cfg = state.cfg
        super().__init__(
            inner,
            token=state.token,
            host=cfg.host,
            allow_hosts=cfg.allow_hosts,
            max_body=state.max_upload,
            cookie=COOKIE,
        )
