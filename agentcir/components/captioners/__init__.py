"""captioners."""
