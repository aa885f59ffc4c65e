"""The running work: ``/api/progress`` (what the search or the gallery preparation is doing)
and the preparation started with the app."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import logging

from fastapi import APIRouter

from .. import models as M
from ..state import ServeState
from . import State

log = logging.getLogger(__name__)

router = APIRouter()


@router.get("/api/progress", response_model=M.ProgressState, summary="what the running search is doing")
def get_progress(st: State):
    return st.progress.snapshot()


def start_preparation(st: ServeState) -> None:
    """Start the app's background work: the gallery captions and the warm-up, when the config asks,
    then the thumbnails, and the gallery follower (:meth:`ServeState.start_background`)."""
    st.start_background()
