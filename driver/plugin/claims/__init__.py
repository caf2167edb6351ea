"""From an allocated ResourceClaim to prepared node state: plan, device catalog, preparer."""
