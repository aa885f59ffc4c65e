"""``verifier=vlm``: yes/no and true/false judgements by the injected VLM (tasks ``verify``
and ``answer``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...framework.errors import InputError
from ...framework.interfaces import Verifier
from ...registry import VERIFIERS, Choice
from .answers import Unclear, aask, ask


class Reading(Choice):
    """How ``check`` reads a reply (config field ``reading``)."""

    strict = "strict"
    released = "released"


#: the allowed readings
READINGS = Reading.values()


@VERIFIERS.register("vlm")
class VLMVerifier(Verifier):
    """Asks the injected VLM; replies are parsed strictly (:mod:`.answers`).

    - ``verify(candidate, instruction, reference=..., reference_caption=...)``: task
      ``verify`` with images ``[reference, candidate]`` and prompt ``verify_prompt``;
      without a reference image, images ``[candidate]``, the reference described by
      ``reference_caption``, prompt ``verify_caption_prompt``. Needs the reference image
      or its caption.
    - ``check(statement, candidate=...)``: task ``answer`` on ``[candidate]``, true/false.

    Config:
        verify_prompt: prompt of ``verify`` with the reference image.
        verify_caption_prompt: prompt of ``verify`` with only the reference's caption.
        answer_prompt: prompt of ``check`` (task ``answer``).
        unclear: what an unclear reply counts as: ``no``, ``yes`` (both logged) or ``error``.
        reading: how ``check`` reads a reply: ``strict`` (the shared parser, under ``unclear``)
            or ``released`` (XR's released image path: yes when the reply contains "yes",
            unchecked; pair it with ``answer_prompt=xr/answer_released``).
    """

    requires: ClassVar[tuple[str, ...]] = ("llm",)
    needs: ClassVar[dict[str, tuple[str, ...]]] = {"llm": ("images", "task:verify", "task:answer")}
    prompt_fields: ClassVar[tuple[str, ...]] = ("verify_prompt", "verify_caption_prompt", "answer_prompt")

    @dataclass
    class Config:
        verify_prompt: str = "tasks/verify"
        verify_caption_prompt: str = "verifier/verify_caption"
        answer_prompt: str = "tasks/answer"
        unclear: Unclear = Unclear.no
        reading: Reading = Reading.strict

    def _verify_request(
        self, candidate: Path, instruction: str, reference: Path | None, reference_caption: str | None
    ) -> tuple[dict, list[Path], str]:
        variables = {"modification": instruction, "reference_caption": reference_caption or "unknown"}
        if reference is not None:
            return variables, [Path(reference), Path(candidate)], self.cfg.verify_prompt
        if reference_caption:
            return variables, [Path(candidate)], self.cfg.verify_caption_prompt
        raise InputError(
            "verifier 'vlm': verify needs the reference image or the reference's caption "
            "(reference= or reference_caption=)"
        )

    def verify(
        self,
        candidate: Path,
        instruction: str,
        *,
        reference: Path | None = None,
        caption: str | None = None,
        reference_caption: str | None = None,
    ) -> bool:
        """Does ``candidate`` show the reference changed by ``instruction``? (``caption``, the
        candidate's caption, is not used: the VLM looks at the image.)"""
        variables, images, prompt = self._verify_request(candidate, instruction, reference, reference_caption)
        return ask(
            lambda: self.llm.run_task("verify", variables, images=images, prompt=prompt),
            self.cfg.unclear,
            what=f"yes/no answer of verifier 'vlm' for '{candidate}'",
        )

    async def averify(
        self,
        candidate: Path,
        instruction: str,
        *,
        reference: Path | None = None,
        caption: str | None = None,
        reference_caption: str | None = None,
    ) -> bool:
        """:meth:`verify` awaiting the LLM (no thread held while the endpoint answers)."""
        variables, images, prompt = self._verify_request(candidate, instruction, reference, reference_caption)
        return await aask(
            lambda: self.llm.arun_task("verify", variables, images=images, prompt=prompt),
            self.cfg.unclear,
            what=f"yes/no answer of verifier 'vlm' for '{candidate}'",
        )

    def _check_request(self, statement: str, candidate: Path | None) -> tuple[str, dict, list[Path]]:
        if candidate is None:
            raise InputError(
                "verifier 'vlm': check needs the candidate image (candidate=); "
                "to judge a caption use verifier=entailment"
            )
        # reading=released: an unchecked task name, the reply is read as XR released it (_released_yes)
        task = "xr_answer_released" if self.cfg.reading == "released" else "answer"
        return task, {"statement": statement}, [Path(candidate)]

    def check(self, statement: str, *, candidate: Path | None = None, caption: str | None = None) -> bool:
        """Is ``statement`` true of the candidate image? (needs ``candidate``)"""
        task, variables, images = self._check_request(statement, candidate)
        run = lambda: self.llm.run_task(task, variables, images=images, prompt=self.cfg.answer_prompt)  # noqa: E731
        if self.cfg.reading == "released":
            return _released_yes(run())
        return ask(run, self.cfg.unclear, what=f"true/false answer of verifier 'vlm' for '{candidate}'")

    async def acheck(self, statement: str, *, candidate: Path | None = None, caption: str | None = None) -> bool:
        """:meth:`check` awaiting the LLM (no thread held while the endpoint answers)."""
        task, variables, images = self._check_request(statement, candidate)
        run = lambda: self.llm.arun_task(task, variables, images=images, prompt=self.cfg.answer_prompt)  # noqa: E731
        if self.cfg.reading == "released":
            return _released_yes(await run())
        return await aask(run, self.cfg.unclear, what=f"true/false answer of verifier 'vlm' for '{candidate}'")


def _released_yes(reply) -> bool:
    """XR's released image-path reading of a reply: yes when it contains "yes" (unchecked)."""
    return "yes" in (reply or "").strip().lower()
