"""``llm=openai``: any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama,
llama.cpp server, LM Studio, ...), text and vision, JSON mode and tool calling.

Needs the ``llm`` extra (``httpx``). The HTTP plumbing (retries, backoff, concurrency,
image data URLs) is :mod:`agentcir.components.llms.http`, shared with the images-API
generator.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, ClassVar, Coroutine

from ...framework.component import Component
from ...framework.errors import InputError
from ...framework.interfaces import ChatReply, ToolCall
from ...registry import LLMS, Choice
from ...registry.config import bounded
from .base import PromptedLLM
from .http import ENDPOINT_VOLATILE, BadReply, Endpoint, EndpointError, HttpClient, image_data_url, public_url
from ...framework.parsing import ReplyParseError, extract_json

_ROLES = ("system", "user", "assistant", "tool", "developer")


class ResponseFormat(Choice):
    """How JSON tasks ask for JSON (config field ``response_format``)."""

    json_object = "json_object"
    none = "none"


class ImageDetail(Choice):
    """OpenAI's ``detail`` of image parts (config field ``image_detail``)."""

    low = "low"
    high = "high"
    auto = "auto"


@LLMS.register("openai")
class OpenAILLM(PromptedLLM):
    """Chat with an OpenAI-compatible ``/chat/completions`` endpoint.

    Messages use agentcir's internal form (:func:`agentcir.framework.interfaces.user_message`):
    image parts ``{"type": "image", "image": path}`` are sent as base64 JPEG data URLs,
    shrunk to ``image_max_side``; assistant turns carry ``tool_calls`` as
    ``{"id", "name", "arguments": dict}`` (:func:`~agentcir.framework.interfaces.assistant_message`)
    and tool results are ``{"role": "tool", "tool_call_id", "content"}``. Tools are OpenAI
    function specs, or bare ``{"name", "description", "parameters"}`` dicts.

    Config (besides the endpoint fields of :class:`~agentcir.components.llms.http.Endpoint`):
        model: the model name the server knows (e.g. ``gpt-4o-mini``, ``Qwen/Qwen2.5-VL-7B-Instruct``).
        revision: the served model's version as the user declares it (e.g. a checkpoint hash, a
            dated snapshot); with ``model`` it is the LLM's identity: the URL (``base_url``) is not,
            so a server moved to another host or port keeps the call cache, and a server that
            starts serving other weights under the same name needs a new ``revision``.
        temperature: sampling temperature (0: as deterministic as the server allows).
        max_tokens: reply length cap (``None``: the server's default).
        seed: sampling seed sent to servers that honour it.
        response_format: ``json_object`` (JSON tasks are sent with
            ``response_format={"type": "json_object"}``) or ``none`` (for servers that reject it).
        image_max_side: longer side of images sent, in pixels (0: unchanged).
        image_quality: JPEG quality of images sent (1-100).
        image_detail: OpenAI's ``detail`` of image parts (``low``, ``high``, ``auto``) or ``None``.
        parse_retries: times a task reply that does not parse is answered with a correction.
        extra_body: more request fields (e.g. ``{"top_p": 0.9}`` or vLLM's ``guided_json``).
    """

    volatile_fields: ClassVar[tuple[str, ...]] = tuple(
        dict.fromkeys((*Component.volatile_fields, *ENDPOINT_VOLATILE, "parse_retries"))
    )

    @dataclass
    class Config(Endpoint):
        model: str = "gpt-4o-mini"
        revision: str = ""
        temperature: float = 0.0
        max_tokens: int | None = None
        seed: int | None = None
        response_format: ResponseFormat = ResponseFormat.json_object
        image_max_side: int = 768
        image_quality: int = bounded(90, 1, 100)
        image_detail: ImageDetail | None = None
        parse_retries: int = 1
        extra_body: dict[str, Any] = bounded(lo=None, default_factory=dict)

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        c = self.cfg
        if not c.model:
            raise InputError("llm 'openai': model is empty; set llm.model to a model the server serves")
        self.http = HttpClient(c, who=f"llm 'openai' (model {c.model})")

    def model_identity(self) -> str:
        """The served model: its name and declared revision (never the URL it is reached at)."""
        return f"{self.cfg.model}@{self.cfg.revision}" if self.cfg.revision else self.cfg.model

    def describe(self) -> str:
        return f"llm 'openai' (model {self.cfg.model} at {public_url(self.http.base_url)})"

    def endpoint_info(self):
        """What the run's pre-flight check asks of the server (:mod:`agentcir.framework.preflight`)."""
        from ...framework.preflight import EndpointInfo

        ep = self.cfg
        return EndpointInfo(
            f"llm 'openai' (model {ep.model})",
            self.http.base_url,
            ep.model,
            ep.resolved_api_key(),
            ep.api_key_env,
            dict(ep.headers),
        )

    # -- requests ------------------------------------------------------------------------
    def _part(self, part: Any) -> dict:
        if isinstance(part, str):
            return {"type": "text", "text": part}
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            return {"type": "text", "text": str(part.get("text", ""))}
        if kind == "image":
            url = image_data_url(part["image"], max_side=self.cfg.image_max_side, quality=self.cfg.image_quality)
            img = {"url": url}
            if self.cfg.image_detail:
                img["detail"] = self.cfg.image_detail
            return {"type": "image_url", "image_url": img}
        if kind == "image_url":
            return part
        raise InputError(f"{self.describe()}: unknown message part {part!r} (expected text or image parts)")

    @staticmethod
    def _wire_tool_call(tc: Any, i: int) -> dict:
        if isinstance(tc, ToolCall):
            tc = vars(tc)
        if "function" in tc:
            return tc
        args = tc.get("arguments", {})
        return {
            "id": tc.get("id") or f"call_{i}",
            "type": "function",
            "function": {"name": tc["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
        }

    def _wire_messages(self, messages: list[dict]) -> list[dict]:
        if not messages:
            raise InputError(f"{self.describe()}: no messages to send")
        out = []
        for i, m in enumerate(messages):
            role = m.get("role") if isinstance(m, dict) else None
            if role not in _ROLES:
                raise InputError(f"{self.describe()}: message {i} has role {role!r}; roles: {', '.join(_ROLES)}")
            w: dict[str, Any] = {"role": role}
            content = m.get("content")
            if isinstance(content, list):
                w["content"] = [self._part(p) for p in content]
            else:
                w["content"] = content if content is None or isinstance(content, str) else json.dumps(content)
            if role == "assistant" and m.get("tool_calls"):
                w["tool_calls"] = [self._wire_tool_call(tc, j) for j, tc in enumerate(m["tool_calls"])]
            if role == "tool":
                if not m.get("tool_call_id"):
                    raise InputError(f"{self.describe()}: tool message {i} lacks 'tool_call_id'")
                w["tool_call_id"] = m["tool_call_id"]
            if m.get("name"):
                w["name"] = m["name"]
            out.append(w)
        return out

    @staticmethod
    def _wire_tools(tools: list[dict]) -> list[dict]:
        out = []
        for i, t in enumerate(tools):
            if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict):
                out.append(t)
            elif isinstance(t, dict) and t.get("name"):
                fn = {"name": t["name"], "parameters": t.get("parameters") or {"type": "object", "properties": {}}}
                if t.get("description"):
                    fn["description"] = t["description"]
                out.append({"type": "function", "function": fn})
            else:
                raise InputError(
                    f"tool {i} is not a function spec (need 'name' and 'parameters', or "
                    f"{{'type': 'function', 'function': {{...}}}}): {t!r}"
                )
        return out

    def payload(self, messages: list[dict], *, tools: list[dict] | None = None, json_mode: bool = False) -> dict:
        """The request body for these messages (images encoded; API key never included)."""
        c = self.cfg
        body: dict[str, Any] = {
            "model": c.model,
            "messages": self._wire_messages(messages),
            "temperature": c.temperature,
        }
        if c.max_tokens is not None:
            body["max_tokens"] = c.max_tokens
        if c.seed is not None:
            body["seed"] = c.seed
        if tools:
            body["tools"] = self._wire_tools(tools)
        if json_mode and c.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        body.update(c.extra_body or {})
        return body

    @staticmethod
    def _check(data: Any) -> Any:
        """A reply without ``choices`` is retried (:class:`BadReply`), like a 5xx."""
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            detail = data.get("error") if isinstance(data, dict) else None
            raise BadReply(f"no choices{f' (error: {detail})' if detail else ''}: {json.dumps(data)[:200]}")
        return data

    def _reply(self, data: Any) -> ChatReply:
        try:
            choices = self._check(data)["choices"]
        except BadReply as e:
            raise EndpointError(f"{self.describe()}: the reply has {e}") from None
        msg = choices[0].get("message") or {}
        content = msg.get("content")
        if isinstance(content, list):  # some servers answer with content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = []
        for i, tc in enumerate(msg.get("tool_calls") or []):
            fn = tc.get("function") or {}
            name = fn.get("name")
            if not name:
                raise EndpointError(
                    f"{self.describe()}: tool call {i} of the reply has no function name: {json.dumps(tc)[:200]}"
                )
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = (
                        extract_json(args, expect=dict, what=f"arguments of tool call '{name}'") if args.strip() else {}
                    )
                except ReplyParseError as e:
                    raise ReplyParseError(f"{self.describe()}: {e}") from None
            elif args is None:
                args = {}
            elif not isinstance(args, dict):
                raise ReplyParseError(f"{self.describe()}: arguments of tool call '{name}' are not an object: {args!r}")
            calls.append(ToolCall(id=str(tc.get("id") or f"call_{i}"), name=str(name), arguments=args))
        return ChatReply(text=content or "", tool_calls=calls)

    async def _complete(self, body: dict) -> ChatReply:
        return self._reply(await self.http.apost("chat/completions", body, check=self._check))

    # -- the LLM interface ---------------------------------------------------------------
    def chat(self, messages: list[dict], *, tools: list[dict] | None = None, json_mode: bool = False) -> ChatReply:
        """One chat completion (blocking; safe whether or not this thread runs an event loop)."""
        return self.http.run(self._complete(self.payload(messages, tools=tools, json_mode=json_mode)))

    async def achat(
        self, messages: list[dict], *, tools: list[dict] | None = None, json_mode: bool = False
    ) -> ChatReply:
        """One chat completion (async; at most ``concurrency`` requests in flight per client)."""
        has_images = any(isinstance(m.get("content"), list) for m in messages if isinstance(m, dict))
        body = (
            await asyncio.to_thread(self.payload, messages, tools=tools, json_mode=json_mode)
            if has_images
            else self.payload(messages, tools=tools, json_mode=json_mode)
        )
        return await self._complete(body)

    def _run(self, coro: Coroutine) -> Any:
        return self.http.run(coro)

    def follow_concurrency(self, n: int) -> dict:
        """Requests in flight follow the run's ``run.concurrency`` unless ``llm.concurrency`` caps them."""
        return self.http.follow_concurrency(n, cap_field="llm.concurrency")

    def close(self) -> None:
        self.http.close()
