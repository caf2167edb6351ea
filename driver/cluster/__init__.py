"""carve cluster."""
