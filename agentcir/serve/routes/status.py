"""What the server is getting ready: ``/api/status`` (the warm-up per model, the background
thumbnails, the gallery and its updates)."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

from typing import Any

from fastapi import APIRouter

from . import State

router = APIRouter()


@router.get("/api/status", summary="the warm-up (per model), the background thumbnails, the gallery and its updates")
def get_status(st: State) -> dict[str, Any]:
    """``warm_up``: ``state`` (idle, running, done, failed, off), ``ready_for`` (the search modes
    that no longer wait for a model: text, image, composed, answer), ``models`` (``kind:key`` ->
    waiting, loading, ready, failed), ``steps`` (name, models, ready_for, state, seconds, error),
    ``elapsed_s``, ``error``. ``thumbnails``: state (waiting, running, done, off), done, total,
    made, size, seconds, note. ``gallery``: path, size, generation (counts the updates opened),
    watching (the folder followed, or null), observer, updates, last_update (one line),
    last_update_s (from the first change to searchable), error, loaded_at (Unix time)."""
    return st.status()
