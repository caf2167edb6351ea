"""carve allocator."""
