"""The loop of a looped method, read from a query's trace: its rounds, the suggestions made
and the verdicts given, in one shape for every such method.

A looped method (AutoCIR's planner → corrector rounds; ImageScope's reasoner → propositions →
re-ranking → evaluation; any method whose stage records use the same keys) writes one record
per stage into the query's trace. :func:`loop_steps` turns those records into steps:

``{"stage", "round", "description", "suggestions", "verdict", "questions", "checked",
"satisfied", "verdicts", "accepted_rank", "stopped"}`` (a key is ``None`` when the stage says
nothing about it), where

- ``description``: the target description the stage searched with (AutoCIR ``description``;
  ImageScope ``step2``, its first description);
- ``suggestions``: what the corrector asked to change; ``verdict``: its reply (a text);
- ``questions``: the statements checked on the candidates; ``checked``: how many candidates
  were checked; ``satisfied``: per checked candidate, how many statements held;
- ``verdicts``: per inspected candidate, accepted or not; ``accepted_rank``: the 1-based rank
  accepted; ``stopped``: the loop ended here (the corrector said the retrieval is good).

A trace with fewer than two such stages (a one-shot method) has no loop: ``[]``.
:func:`format_loop` prints the steps for a terminal (``agentcir search``); the web page
renders the same list (``trace.search.loop``).
"""

from __future__ import annotations

import re
from typing import Any

#: record keys that make a stage a step of a loop
STEP_KEYS = ("round", "description", "step2", "suggestions", "verdict", "verdicts", "questions", "values")


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, dict):  # per path (WISER: {"text": ..., "image": ...})
        parts = [f"{k}: {t}" for k, x in v.items() if (t := _text(x))]
        return "; ".join(parts) or None
    if isinstance(v, (list, tuple)):
        v = v[0] if v else None
        return _text(v)
    s = str(v).strip()
    return s or None


def _stage_round(name: str, rec: dict) -> int | None:
    if isinstance(rec.get("round"), int):
        return rec["round"]
    m = re.fullmatch(r"round_?(\d+)", name)
    return int(m.group(1)) if m else None


def loop_steps(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps of the loop in ``trace`` (one query's: ``{stage: record, ..., "search": ...}``), in stage order."""
    steps = []
    for name, rec in (trace or {}).items():
        if name == "search" or not isinstance(rec, dict) or not any(k in rec for k in STEP_KEYS):
            continue
        questions = rec.get("questions")
        if isinstance(questions, list):
            questions = [str(q.get("question", q)) if isinstance(q, dict) else str(q) for q in questions]
        checked = rec.get("checked_ids") or rec.get("candidates")
        verdicts = rec.get("verdicts")
        if isinstance(verdicts, list):
            verdicts = [bool(v) if not isinstance(v, dict) else bool(v.get("accepted")) for v in verdicts]
        else:
            verdicts = None
        accepted = rec.get("accepted")
        stopped = rec.get("stopped")
        suggestions = rec.get("suggestions")
        if isinstance(stopped, dict):  # per path (WISER): stopped when every path settled
            if isinstance(suggestions, dict):
                suggestions = {k: v for k, v in suggestions.items() if not stopped.get(k)}
            stopped = all(stopped.values()) if stopped else None
        steps.append(
            {
                "stage": name,
                "round": _stage_round(name, rec),
                "description": _text(
                    rec.get("description") if rec.get("description") is not None else rec.get("step2")
                ),
                "suggestions": _text(suggestions) if not stopped else None,
                "verdict": _text(rec.get("verdict")),
                "questions": questions if isinstance(questions, list) else None,
                "checked": len(checked)
                if isinstance(checked, list)
                else (len(verdicts) if verdicts is not None else None),
                "satisfied": [int(x) for x in rec["values"]] if isinstance(rec.get("values"), list) else None,
                "verdicts": verdicts,
                "accepted_rank": int(accepted) + 1
                if isinstance(accepted, int) and not isinstance(accepted, bool)
                else None,
                "stopped": bool(stopped) if stopped is not None else None,
            }
        )
    return steps if len(steps) >= 2 else []


def _short(s: str, n: int = 110) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def format_loop(steps: list[dict[str, Any]], method: str = "") -> str:
    """The steps as readable lines (empty for no loop)."""
    if not steps:
        return ""
    lines = [f"the loop of {method or 'the method'} ({len(steps)} steps):"]
    nq = None  # statements checked so far (a re-ranking step counts against the latest ones)
    for s in steps:
        nq = len(s["questions"]) if s["questions"] else nq
        head = f"round {s['round']}" if s["round"] is not None else s["stage"]
        parts = []
        if s["checked"] is not None and s["verdicts"] is None:
            parts.append(f"checked {s['checked']} candidates")
        if s["questions"]:
            parts.append("questions: " + "; ".join(_short(q, 60) for q in s["questions"][:4]))
        if s["satisfied"]:
            best = max(s["satisfied"])
            parts.append(f"best candidate satisfies {best} of {nq if nq is not None else '?'} statements")
        if s["verdict"]:
            parts.append(f"verdict: “{_short(s['verdict'], 90)}”")
        if s["stopped"]:
            parts.append("stopped: good retrieval")
        elif s["suggestions"]:
            parts.append(f"suggestions: “{_short(s['suggestions'], 90)}”")
        if s["verdicts"] is not None:
            acc = s["accepted_rank"]
            parts.append(
                f"inspected {len(s['verdicts'])} candidates, " + (f"accepted rank {acc}" if acc else "none accepted")
            )
        if s["description"]:
            parts.append(f"searched with “{_short(s['description'])}”")
        lines.append(f"  {head:<13} " + (" · ".join(parts) if parts else "—"))
    return "\n".join(lines)
