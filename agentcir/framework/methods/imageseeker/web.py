"""Web search backends of the ``web_search`` tool, named by the method's ``web_search`` field.

- ``none`` (default, offline): no backend; the tool answers with no results and says so.
- ``searxng``: a SearXNG instance's JSON API (``GET {url}/search?q=...&format=json``, results
  ``[{"title", "url", "content"}]``), e.g. one run on the user's own machine. Needs the ``llm``
  extra (``httpx``).
"""

from __future__ import annotations

from typing import Awaitable, Callable

from ....registry import Choice
from ...errors import InputError, require


class WebSearch(Choice):
    """The web search backend of ImageSeeker's ``web_search`` tool (``method.web_search``)."""

    none = "none"
    searxng = "searxng"


BACKENDS = WebSearch.values()
WebSearcher = Callable[[str], Awaitable[tuple[list[dict], str]]]


def make_web_search(backend: str, url: str = "", max_results: int = 5, timeout: float = 20.0) -> WebSearcher | None:
    """The ``async f(query) -> (results, note)`` of ``backend`` (``None`` for ``none``)."""
    if backend not in BACKENDS:
        raise InputError(f"method 'imageseeker': web_search must be one of {', '.join(BACKENDS)}, got '{backend}'")
    if backend == "none":
        return None
    if not url:
        raise InputError("method 'imageseeker': web_search=searxng needs web_search_url (the SearXNG base URL)")

    async def searxng(query: str) -> tuple[list[dict], str]:
        httpx = require("httpx", "llm", feature="web_search=searxng")
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:
                r = await client.get(url.rstrip("/") + "/search", params={"q": query, "format": "json"})
                r.raise_for_status()
                data = r.json()
        except Exception as e:  # a search failure is a note to the model, not a crash
            return [], f"web search failed ({type(e).__name__}: {str(e)[:160]})"
        rows = [
            {"title": x.get("title", ""), "url": x.get("url", ""), "snippet": (x.get("content") or "")[:300]}
            for x in (data.get("results") or [])[:max_results]
            if isinstance(x, dict)
        ]
        return rows, "" if rows else "no results"

    return searxng
