"""Endpoint checks before a run: fail in a second, not after the gallery is indexed.

``run.preflight=true`` (the default): before any gallery or query work, every endpoint the
recipe's built components talk to gets one short ``GET <base_url>/models``:

- the host does not answer (connection refused, DNS, timeout), or answers 401/403, or the
  OpenAI API is used without a key: an :class:`EndpointUnavailable` naming the URL and the
  environment variable that should hold the key;
- the model is not in the list the server returns: a warning (some gateways list only some of
  the models they serve);
- a server without ``/models`` (404, 405) or one that fails it (5xx): a warning; the run goes on
  and its requests retry as usual.

A component takes part by having an ``endpoint_info()`` method that returns an
:class:`EndpointInfo` (or ``None`` when it reaches no endpoint). One request per distinct
(URL, key) is sent; the key is never logged.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .errors import InputError

log = logging.getLogger(__name__)

__all__ = ["EndpointInfo", "EndpointUnavailable", "check_endpoints"]

#: hosts that need an API key (no request is sent there without one)
KEYED_HOSTS = ("api.openai.com",)


class EndpointUnavailable(InputError):
    """An endpoint the recipe uses cannot serve the run (unreachable, or the key is missing or refused)."""


@dataclass
class EndpointInfo:
    """What a component needs from its endpoint.

    Attributes:
        who: how messages name the component (e.g. ``llm 'openai' (model m)``).
        base_url: the API root (``.../v1``).
        model: the model the component asks for.
        api_key: the key it sends (``None``: none).
        api_key_env: the environment variable the key is read from (for messages).
        headers: extra request headers.
    """

    who: str
    base_url: str
    model: str
    api_key: str | None = None
    api_key_env: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def _public(url: str) -> str:
    p = urlsplit(url)
    host = (p.hostname or "") + (f":{p.port}" if p.port else "")
    return urlunsplit((p.scheme, host, p.path.rstrip("/"), "", ""))


def _key_hint(info: EndpointInfo) -> str:
    if info.api_key:
        return f"the key given ({'api_key' if not info.api_key_env else f'api_key or ${info.api_key_env}'}) was refused"
    var = f"set the environment variable {info.api_key_env}" if info.api_key_env else "set the api_key field"
    return f"no API key is set: {var} (or the component's api_key field)"


def _get_models(info: EndpointInfo, timeout: float) -> tuple[int | None, Any, str]:
    """(status, decoded JSON or None, error text) of ``GET base_url/models``."""
    url = info.base_url.rstrip("/") + "/models"
    headers = {"Accept": "application/json", **info.headers}
    if info.api_key:
        headers["Authorization"] = f"Bearer {info.api_key}"
    req = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # http(s) only: checked by the component
            body = resp.read(4 << 20)
            status = resp.status
    except urllib.error.HTTPError as e:
        return e.code, None, f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return None, None, f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason
    try:
        return status, json.loads(body), ""
    except ValueError:
        return status, None, "not JSON"


def check_endpoints(components: Iterable[Any], *, timeout: float = 10.0) -> list[str]:
    """Check the endpoint of every component that has ``endpoint_info()`` (see the module
    docstring). Raises :class:`EndpointUnavailable`; returns the warnings it logged."""
    infos: list[EndpointInfo] = []
    for comp in components:
        fn = getattr(comp, "endpoint_info", None)
        info = fn() if callable(fn) else None
        if info is not None:
            infos.append(info)
    warnings: list[str] = []
    listed: dict[tuple[str, str | None], tuple[int | None, Any, str]] = {}
    for info in infos:
        shown = _public(info.base_url)
        host = urlsplit(info.base_url).hostname or ""
        if not info.api_key and host in KEYED_HOSTS:
            raise EndpointUnavailable(
                f"{info.who}: {shown} needs an API key and {_key_hint(info)}; "
                f"checked before the run (run.preflight=false skips the check)"
            )
        key = (info.base_url.rstrip("/"), info.api_key)
        if key not in listed:
            listed[key] = _get_models(info, timeout)
        status, data, err = listed[key]
        if status is None:
            raise EndpointUnavailable(
                f"{info.who}: the endpoint {shown} does not answer ({err}); start the server or "
                f"fix base_url (checked before the run; run.preflight=false skips the check)"
            )
        if status in (401, 403):
            raise EndpointUnavailable(
                f"{info.who}: {shown}/models answered HTTP {status}: {_key_hint(info)} "
                f"(checked before the run; run.preflight=false skips the check)"
            )
        if status >= 400 or not isinstance(data, dict):
            msg = (
                f"{info.who}: {shown}/models answered {err or f'HTTP {status}'}; the served models could not be "
                f"listed, the run goes on"
            )
        else:
            ids = [m.get("id") for m in data.get("data") or [] if isinstance(m, dict)]
            if info.model in ids:
                continue
            msg = (
                f"{info.who}: {shown} does not list model '{info.model}' (it lists "
                f"{', '.join(map(str, ids[:10])) or 'none'}{', ...' if len(ids) > 10 else ''}); the run goes on"
            )
        log.warning("%s", msg)
        warnings.append(msg)
    return warnings
