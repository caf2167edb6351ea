"""carve cdi."""
