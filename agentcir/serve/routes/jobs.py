"""The running work: ``/api/progress`` (what the search or the gallery preparation is doing)
and the preparation started with the app."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

import logging
import threading

from fastapi import APIRouter

from .. import models as M
from ...framework.plain import plain
from ..state import ServeState
from . import State

log = logging.getLogger(__name__)

router = APIRouter()


@router.get("/api/progress", response_model=M.ProgressState, summary="what the running search is doing")
def get_progress(st: State):
    return st.progress.snapshot()


def start_preparation(st: ServeState) -> None:
    """Make the gallery captions and/or warm up the models in a background thread, when the config asks."""
    cfg, searcher, progress = st.cfg, st.searcher, st.progress
    if not ((cfg.prepare and not searcher.prepared) or cfg.warm_up):
        return

    def prep():
        progress.begin(preparing=True)
        try:
            if cfg.prepare:
                searcher.prepare(progress.hook)
            if cfg.warm_up:
                took = searcher.warm_up(progress.hook)
                log.info("warmed up in %.1f s (models loaded, kernels compiled)", took)
            progress.end(prepared=True)
        except Exception as e:  # shown on the page; a search retries it
            log.warning("gallery preparation failed: %s", e)
            progress.end(error=f"The gallery could not be prepared: {plain(str(e))}", prepared=False)

    threading.Thread(target=prep, name="agentcir-prepare", daemon=True).start()
