"""What the prompt-reading LLM backends (``openai``, ``transformers``) share: running a
task from its prompt file, checking the reply against the task table, and asking again
when a reply does not parse."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any, ClassVar, Coroutine, Sequence

from ...framework.errors import InputError
from ...framework.interfaces import LLM, ChatReply, default_task_prompt, user_message
from ...framework.prompts import load_prompt
from ...framework.parsing import ReplyParseError, parse_task_reply
from ...framework.tasks import TaskSpec, check_variables, find_task

_AGAIN = {
    "json": "Reply again with only the JSON object, no other text.",
    "yes_no": "Reply again with only one word: yes or no.",
    "true_false": "Reply again with only one word: true or false.",
    "text": "Reply again with only the requested text.",
}


def run_sync(coro: Coroutine) -> Any:
    """Run a coroutine to completion from sync code, whether or not this thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentcir-sync") as ex:
        return ex.submit(asyncio.run, coro).result()


class PromptedLLM(LLM):
    """An LLM that renders ``tasks/<task>`` (or ``prompt``) and chats.

    For the tasks of the task table (built in or registered by plugins) the variables are checked
    first, JSON tasks are sent in JSON mode, and a reply that :func:`parse_task_reply` cannot
    read is answered with a short correction, up to ``cfg.parse_retries`` times; if it still
    does not parse, :class:`ReplyParseError` is raised (nothing unusable reaches the cache).
    Other task names run their prompt file as is, unchecked.
    """

    #: whether this backend sends image parts (text-only backends fail clearly instead)
    vision: ClassVar[bool] = True
    #: capabilities (agentcir.framework.capabilities): chat, tool calls, images, every task with a prompt
    supports: ClassVar[tuple[str, ...]] = ("chat", "tools", "images", "task:*")

    def _task_request(
        self, task: str, variables: dict[str, Any] | None, prompt: str | None, images: Sequence[Path | str]
    ) -> tuple[list[dict], TaskSpec | None, dict[str, Any]]:
        spec = find_task(task)
        values = check_variables(task, variables) if spec is not None else dict(variables or {})
        images = list(images or ())
        if spec is not None and spec.needs_images and not images:
            raise InputError(f"LLM task '{task}' needs image(s) {spec.images}, got none")
        if images and not self.vision:
            raise InputError(
                f"{self.describe()} is text-only and cannot read the {len(images)} image(s) of task "
                f"'{task}'; use a vision-language backend (llm=openai with a VLM)"
            )
        text = load_prompt(prompt or default_task_prompt(task)).render(values)
        return [user_message(text, images)], spec, values

    async def arun_task(
        self,
        task: str,
        variables: dict[str, Any],
        *,
        prompt: str | None = None,
        images: Sequence[Path | str] = (),
        json_mode: bool = False,
    ) -> str:
        messages, spec, values = self._task_request(task, variables, prompt, images)
        kind = spec.reply if spec is not None else ("json" if json_mode else "text")
        want_json = json_mode or kind == "json"
        retries = max(0, int(getattr(self.cfg, "parse_retries", 1)))
        reply: ChatReply = await self.achat(messages, json_mode=want_json)
        if spec is None:
            return reply.text
        for attempt in range(retries + 1):
            try:
                parse_task_reply(task, reply.text, values)
                return reply.text
            except ReplyParseError as e:
                if attempt >= retries:
                    raise ReplyParseError(f"{self.describe()}: {e} (after {retries + 1} attempt(s))") from None
                messages = [
                    *messages,
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"Your reply could not be used: {e}. {_AGAIN[kind]}"},
                ]
                reply = await self.achat(messages, json_mode=want_json)
        raise AssertionError("unreachable")  # pragma: no cover

    def _run(self, coro: Coroutine) -> Any:
        return run_sync(coro)

    def run_task(
        self,
        task: str,
        variables: dict[str, Any],
        *,
        prompt: str | None = None,
        images: Sequence[Path | str] = (),
        json_mode: bool = False,
    ) -> str:
        """The reply text to ``task`` (checked to parse; see the class docstring)."""
        return self._run(self.arun_task(task, variables, prompt=prompt, images=images, json_mode=json_mode))
