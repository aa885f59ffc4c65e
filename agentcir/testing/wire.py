"""The OpenAI wire format of the scripted endpoint: a scripted answer (:class:`Step`), a received
:class:`Request`, and the reply bodies (:func:`chat_completion`, :func:`error_body`, an image edit).

Shared by the server (:mod:`agentcir.testing.server`) and the task replies
(:mod:`agentcir.testing.replies`); standard library only (PIL for an image edit).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Union


@dataclass
class Step:
    """One scripted answer: wait ``delay`` seconds, then send ``status`` with ``json`` (or ``body`` bytes)."""

    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    content_type: str = "application/json"
    fault: str | None = None  #: None, "reset" or "truncate" (see the module docstring)

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"Step.fault must be one of {FAULTS}, got {self.fault!r}")


FAULTS = (None, "reset", "truncate")


@dataclass
class Request:
    """A request the server received (``json`` is ``None`` when the body is not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any


Script = Union[Step, Callable[[Request], Step]]


def chat_completion(
    text: str | None = "",
    *,
    tool_calls: list[dict] | None = None,
    model: str = "scripted",
    finish_reason: str | None = None,
) -> dict:
    """A chat-completions reply body. ``tool_calls``: ``[{"name", "arguments": dict|str, "id"?}]``."""
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        msg["tool_calls"] = [
            {
                "id": tc.get("id", f"call_{i}"),
                "type": "function",
                "function": {
                    "name": tc["name"],
                    "arguments": tc["arguments"] if isinstance(tc["arguments"], str) else json.dumps(tc["arguments"]),
                },
            }
            for i, tc in enumerate(tool_calls)
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": msg, "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def multipart_fields(req: Request) -> dict[str, bytes]:
    """The fields of a ``multipart/form-data`` request (an image upload): name -> raw bytes."""
    from email.parser import BytesParser
    from email.policy import HTTP

    ctype = req.headers.get("content-type", "")
    if not ctype.startswith("multipart/form-data"):
        raise ValueError(f"not a multipart/form-data request (Content-Type: {ctype!r})")
    msg = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + req.body)
    out: dict[str, bytes] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            out[str(name)] = part.get_payload(decode=True) or b""
    return out


def image_edit_reply(transform: Callable[[Any, str], Any] | None = None) -> Callable[[Request], Step]:
    """A step for ``/images/edits``: the uploaded ``image`` changed by ``transform(PIL image, prompt)``
    (default: mirrored left to right, a visible and deterministic edit), sent back as ``b64_json``.
    A request without an ``image`` or ``prompt`` field is answered 400, as the API does."""
    import base64
    import io

    def answer(req: Request) -> Step:
        from PIL import Image, ImageOps

        try:
            fields = multipart_fields(req)
        except ValueError as e:
            return Step(status=400, json=error_body(str(e), "invalid_request_error"))
        if "image" not in fields or not fields.get("prompt"):
            return Step(status=400, json=error_body("'image' and 'prompt' are required", "invalid_request_error"))
        with Image.open(io.BytesIO(fields["image"])) as im:
            im = im.convert("RGB")
            out = transform(im, fields["prompt"].decode()) if transform else ImageOps.mirror(im)
        buf = io.BytesIO()
        out.save(buf, format="PNG")
        return Step(
            json={"created": int(time.time()), "data": [{"b64_json": base64.b64encode(buf.getvalue()).decode()}]}
        )

    return answer


def error_body(message: str, kind: str = "server_error") -> dict:
    return {"error": {"message": message, "type": kind}}
