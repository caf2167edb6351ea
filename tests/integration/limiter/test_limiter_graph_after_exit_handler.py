"""A graph launched after the limiter's exit handler is still charged its kernels' blocks.

At exit the limiter gives back what this process's slots hold, and forgets the bytes of every allocation it
still tracks (native/src/table.c, carve_forget_charges), so that a free made later (a C++ static destructor,
another library's atexit handler) does not release them a second time. The executable graphs it tracks in
the same table are not charges but block counts: an exit handler that launches a graph (a framework
flushing its last step) must still be charged for the graph's kernels, not for nothing.

native/tests/limiter_client_cuda_nvml's `exitgraph N` launches a graph of one 8-block kernel N times in
main, then N times more from an atexit handler registered before its first CUDA call (so it runs after the
limiter's), and prints the blocks charged for each round.
"""

from __future__ import annotations

LAUNCHES = 10
KERNEL_BLOCKS = 8


def test_a_graph_launched_after_the_limiters_exit_handler_is_charged_its_blocks(claim):
    c = claim().create(cores=50)
    out = c.run("exitgraph", str(LAUNCHES), CARVE_TICK_MS="10")
    in_main, at_exit = (int(line) for line in out.stdout.split())
    assert in_main == LAUNCHES * KERNEL_BLOCKS, out.stdout
    assert at_exit == LAUNCHES * KERNEL_BLOCKS, out.stdout


# past the limiter's table (65,536 slots, a 512-slot probe), records go to its overflow list: with twice the
# table's size held live, every slot is taken before the graph is instantiated, so its record is on the list
LIVE_PAST_THE_TABLE = 140_000


def test_a_graph_whose_record_overflowed_the_table_is_charged_after_the_exit_handler_too(claim):
    c = claim().create(cores=50)
    out = c.run("exitgraph", str(LAUNCHES), str(LIVE_PAST_THE_TABLE), CARVE_TICK_MS="10", timeout=120)
    in_main, at_exit = (int(line) for line in out.stdout.split())
    assert in_main == LAUNCHES * KERNEL_BLOCKS, out.stdout
    assert at_exit == LAUNCHES * KERNEL_BLOCKS, out.stdout
