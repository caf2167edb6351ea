"""`carve plugin --memory-enforcement limiter` keeps every GPU under the limiter, even one whose driver could
partition its memory; `driver` refuses to start on a GPU whose driver cannot, naming it. The value comes
from the command line, a string of its own, not the module's constant: it is compared by value."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from driver.devices.catalog import fake_gpu
from driver.gpu.model import Gpu
from driver.plugin import command
from driver.plugin.enforcement.backends import CgroupV2, EnforcementError, choose

V2 = CgroupV2("/sys/fs/cgroup")


def gpu(index: int, limits: bool) -> Gpu:
    return dataclasses.replace(fake_gpu("A100-80GB", index), memory_limits=limits, mig_enabled=False)


def flag(value: str) -> str:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    # Built at run time as argv holds it.
    args, _rest = parser.parse_known_args(["--memory-enforcement", "".join(value)])
    assert args.memory_enforcement == value
    return args.memory_enforcement


def test_limiter_from_the_command_line_never_takes_the_driver() -> None:
    assert choose(flag("limiter"), [gpu(0, True), gpu(1, True)], V2) == frozenset()


def test_driver_from_the_command_line_refuses_a_gpu_that_cannot() -> None:
    with pytest.raises(EnforcementError, match=r"--memory-enforcement driver: gpu-1 .*NOT_SUPPORTED"):
        choose(flag("driver"), [gpu(0, True), gpu(1, False)], V2)
    able = gpu(0, True)
    assert choose(flag("driver"), [able], V2) == {able.uuid}


def test_auto_from_the_command_line_takes_the_driver_where_it_can() -> None:
    able, old = gpu(0, True), gpu(1, False)
    assert choose(flag("auto"), [able, old], V2) == {able.uuid}
