"""carve: a Kubernetes DRA driver that shares GPUs (MIG, soft slices, time-slicing)."""

__version__ = "0.1.0"
