"""carve gpu."""
