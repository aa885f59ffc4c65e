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
    meta: dict[str, Any] = Field(
        description="photo metadata: taken_time, city, country, capturedevice, people, album, ..."
    )
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
    trace: Trace = Field(
        description="'search' plus each stage's record for the query (reference caption, target "
        "description, proxies, verdicts; ImageSeeker: steps, subsets, reasoning)"
    )
    groups: list[list[int]] = Field(
        default_factory=list,
        description="near-duplicate groups: positions into hits, "
        "one list per picture, its best-ranked first (the web API only)",
    )


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
    dup_threshold: float = Field(default=0.97, description="default near-duplicate grouping threshold (0 = off)")
    album: bool = Field(default=False, description="/api/album copies result sets into album folders")


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


class ShownHit(BaseModel):
    """A hit as the page showed it: the server reads its id, path and metadata from the gallery."""

    row: int = Field(ge=0, description="gallery row")
    rank: Optional[int] = Field(default=None, ge=1, description="its rank in the result set (default: its position)")
    score: Optional[float] = Field(default=None, description="the score it was shown with")
    verified: bool = False
    group: Optional[int] = Field(default=None, ge=0, description="its near-duplicate group (position of the group)")


class GroupsRequest(BaseModel):
    rows: list[int] = Field(min_length=1, max_length=1000, description="gallery rows of the hits, best first")
    threshold: Optional[float] = Field(
        default=None, description="image-embedding cosine (0 = no grouping; default: the server's --dup-threshold)"
    )
    hash_distance: Optional[int] = Field(
        default=None, ge=-1, le=64, description="most differing perceptual-hash bits (-1 = no hash check)"
    )


class Groups(BaseModel):
    groups: list[list[int]] = Field(description="positions into rows, one list per picture, its best-ranked first")
    threshold: float
    hash_distance: int


class ExportRequest(BaseModel):
    format: str = Field(pattern="^(csv|json|zip)$", description="csv | json | zip (the photos, with both tables)")
    hits: list[ShownHit] = Field(min_length=1, max_length=1000)
    query: dict[str, Any] = Field(
        default_factory=dict, description="the search it came from (text, reference), written into the JSON"
    )


class AlbumRequest(BaseModel):
    name: str = Field(min_length=1, max_length=100, description="the album folder's name (under the album root)")
    hits: list[ShownHit] = Field(min_length=1, max_length=1000)


class Album(BaseModel):
    folder: str
    copied: list[str] = Field(description="file names copied")
    already_there: list[str] = Field(description="files the album already had (same bytes)")
    missing: list[str] = Field(description="ids whose file is missing or outside the gallery folder")
