"""Kubernetes-style structured allocation (the kube-scheduler's DRA allocator, in Python).

    from driver.allocator import Allocator, Unallocatable, allocate

`allocate(claim, slices, classes, allocated=(), node=None)` returns a claim's status.allocation;
`Allocator(slices, classes)` is the incremental form for the simulator and the controller.
"""

from driver.allocator.allocator import Allocator, Unallocatable, allocate

__all__ = ["Allocator", "Unallocatable", "allocate"]
