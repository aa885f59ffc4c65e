"""Files of the web app: :mod:`agentcir.framework.gallery_files` (gallery files confined to the
gallery root, uploads checked before they are stored, thumbnails, bounded on-disk stores), which
the MCP server shares."""

from ..framework.gallery_files import (
    NO_SPACE,
    THUMB_SIZES,
    UPLOAD_NAME,
    BoundedDir,
    Decoder,
    GalleryFiles,
    NoSpace,
    TooLarge,
    storage_error,
    within_roots,
)

__all__ = [
    "NO_SPACE",
    "THUMB_SIZES",
    "UPLOAD_NAME",
    "BoundedDir",
    "Decoder",
    "GalleryFiles",
    "NoSpace",
    "TooLarge",
    "storage_error",
    "within_roots",
]
