"""The typed request/response models of the web API (also its OpenAPI schema).

:class:`SearchResponse` is the shape of :meth:`agentcir.framework.search.SearchResult.to_json`,
which ``agentcir search --json`` prints: one schema for the page, the API and scripts.
"""

from typing import Any, Optional

from pydantic import BaseModel, Field


class Error(BaseModel):
    detail: str = Field(description="what is wrong, naming the input")


class Hit(BaseModel):
    rank: int = Field(ge=1, description="1-based position")
    id: str = Field(description="gallery item id (the file's path under the indexed folder, without suffix)")
    score: Optional[float] = Field(description="the method's raw score; null for a set-answering method (ImageSeeker)")
    path: str = Field(description="the image file")
    row: int = Field(ge=0, description="gallery row (for /image/{row} and /thumb/{row})")
    meta: dict[str, Any] = Field(description="photo metadata: taken_time, city, country, capturedevice, people, album, ...")
    verified: bool = Field(description="the verification stage accepted this candidate")


class SearchTrace(BaseModel):
    """The search's own record; the trace also holds one record per stage of the method."""

    mode: str = Field(description="composed | image | text | answer")
    method: str = Field(description="the method that ran (text_only for a text search with a composed method)")
    recipe_method: str
    note: str = Field(description="why another method ran, if one did")
    reference: Optional[dict[str, Any]] = None
    text: str
    excluded: list[str] = Field(description="hits dropped as the reference itself")
    verification: list[dict[str, Any]] = Field(description="verdicts of the inspected candidates, in rank order")
    wall_s: float
    stages: dict[str, dict[str, Any]] = Field(description="per stage: model calls, cache hits, wall time")
    visual_proxy: Optional[dict[str, Any]] = None

    model_config = {"extra": "allow"}


class Trace(BaseModel):
    search: SearchTrace

    model_config = {"extra": "allow"}


class SearchResponse(BaseModel):
    hits: list[Hit]
    trace: Trace = Field(description="'search' plus each stage's record for the query (reference caption, target "
                                     "description, proxies, verdicts; ImageSeeker: steps, subsets, reasoning)")


class Info(BaseModel):
    gallery: str
    size: int
    dim: int
    method: str
    encoder: str
    needs_reference: bool = Field(description="the method needs a reference image (text alone runs text retrieval)")
    answers_set: bool
    questions: bool = Field(description="/api/ask answers history questions")
    with_metadata: int = Field(description="gallery items with a date or a place")
    max_upload_mb: float
    max_pixels: int
    thumb_sizes: list[int]
    auth: bool


class ProgressState(BaseModel):
    busy: bool
    stage: str = Field(description="the running stage")
    done: int = Field(description="items done of the running stage (gallery captions), else 0")
    total: int
    stages: list[str] = Field(description="stages started so far")
    elapsed_s: float
    preparing: bool = Field(description="the gallery captions are being made (once per gallery)")
    prepared: bool
    error: str
