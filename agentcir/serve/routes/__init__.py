"""The web app's routes, one module per concern: ``pages`` (the page, its files, /docs),
``search`` (/api/info, /api/search, /api/ask), ``jobs`` (/api/progress, the gallery's
preparation at start), ``images`` (gallery files, thumbnails, visual proxies) and
``uploads`` (stored reference images). Each has a ``router``; every route reads the app's
:class:`~agentcir.serve.state.ServeState` through the :data:`State` dependency."""

# no `from __future__ import annotations`: FastAPI reads the route annotations at run time

from typing import Annotated

from fastapi import Depends, Request

from ..state import ServeState


def _state(request: Request) -> ServeState:
    return request.app.state.serve


#: a route parameter of this type receives the app's shared state
State = Annotated[ServeState, Depends(_state)]
