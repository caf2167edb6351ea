"""MIG lifecycle and partitioning: instances, journal, capability nodes, mode switches, NodePartitioning."""
