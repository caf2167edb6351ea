"""`carve allocate`'s warning about HAMi's MiB written as bytes, at its bounds: a memory request of 1 (one
MiB in HAMi's nvidia.com/gpumem) up to 1Mi - 1 is warned about; 0 and 1Mi are not."""

from __future__ import annotations

import pytest

from driver.allocator import command


def _memory(value):
    return {"spec": {"devices": {"requests": [{"name": "r", "exactly": {"capacity": {"requests": {
        "memory": value}}}}]}}}


@pytest.mark.parametrize("value", [1, "1", 1048575])
def test_one_byte_up_to_a_mib_less_one_is_warned_about(value):
    assert command.hami_memory_warnings("W", _memory(value)) == [
        f"W: spec.devices.requests[0].exactly.capacity.requests.memory: {value!r} is {int(value)} bytes; "
        f"HAMi's nvidia.com/gpumem counts MiB, carve takes a quantity: write {value}Mi for {value} MiB"]


@pytest.mark.parametrize("value", [0, "0", "1Mi", 1048576])
def test_zero_and_a_mib_are_not(value):
    assert command.hami_memory_warnings("W", _memory(value)) == []
