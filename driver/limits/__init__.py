"""carve limits."""
