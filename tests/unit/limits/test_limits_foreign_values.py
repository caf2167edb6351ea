"""Values carve did not write are refused naming what is wrong: a limits file whose magic is not
`CARVELIM` (a file of another kind, or one byte off either way), and limiter environment values that are
not integers (`carve inspect` reads a container's environment, which its image may have set)."""

from __future__ import annotations

import pytest

from driver.limits import ClaimLimits, DeviceLimit, LimitsError, parse_limiter_env, region, write_limits
from driver.limits.limitsfile import LIMITS_MAGIC, LimitsStruct, read_limits
from driver.limits.region import RegionError


def _with_magic(tmp_path, magic):
    path = tmp_path / "limits" / "limits"
    write_limits(path, ClaimLimits((DeviceLimit(1 << 30, 50, uuid="GPU-A"),), "/r"))
    s = LimitsStruct.from_buffer_copy(path.read_bytes())
    s.magic = magic
    path.chmod(0o600)
    path.write_bytes(bytes(s))
    return path


@pytest.mark.parametrize("magic", [LIMITS_MAGIC - 1, LIMITS_MAGIC + 1, 0, region.MAGIC],
                         ids=["one-below", "one-above", "zero", "a-region"])
def test_a_limits_file_with_another_magic_is_refused_naming_it(tmp_path, magic):
    path = _with_magic(tmp_path, magic)
    with pytest.raises(RegionError) as refused:
        read_limits(path)
    assert str(refused.value) == f"limits {path}: magic is {magic:#x}, expected {LIMITS_MAGIC:#x}"
    assert read_limits(_with_magic(tmp_path, LIMITS_MAGIC)).memory_limits == (1 << 30,)


@pytest.mark.parametrize(("env", "device", "mem", "cores"), [
    ({"CARVE_MEMORY_LIMIT": "1Gi"}, 0, "1Gi", "0"),
    ({"CARVE_MEMORY_LIMIT": "5", "CARVE_CORES_LIMIT_1": "half"}, 1, "5", "half"),
])
def test_a_limiter_value_that_is_not_an_integer_is_refused_naming_the_device(env, device, mem, cores):
    with pytest.raises(LimitsError) as refused:
        parse_limiter_env(env, 2)
    assert str(refused.value) == f"env: device {device}: memory {mem!r} or cores {cores!r} is not an integer"
