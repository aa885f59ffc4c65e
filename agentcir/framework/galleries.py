"""Open a gallery directory of either kind: unsharded (:class:`~.gallery.Gallery`) or sharded
(:class:`~.shards.ShardedGallery`, searched as a recipe's ``scale`` section says).

This module stands above :mod:`.gallery` and :mod:`.shards`, so neither imports the other's
way up: a caller that may meet either kind of gallery (``search``, ``serve``, ``eval``, a run's
plan) opens it here.
"""

from __future__ import annotations

from pathlib import Path

from .gallery import Gallery, read_gallery_info
from .shards import ShardedGallery, is_sharded, open_sharded


def open_gallery(root: str | Path, encoder=None, *, scale: dict | None = None) -> Gallery | ShardedGallery:
    """Open gallery directory ``root``; with ``encoder``, check it is the one that indexed it.

    A sharded gallery (``gallery.json`` lists ``shards``) opens as a :class:`~.shards.ShardedGallery`
    searched as ``scale`` (a recipe's ``scale`` section) says; ``scale`` is not used otherwise."""
    root = Path(root)
    info = read_gallery_info(root, encoder)
    if is_sharded(info):
        return open_sharded(root, info, scale)
    return Gallery.from_info(root, info)
