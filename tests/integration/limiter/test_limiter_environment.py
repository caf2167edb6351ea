"""The limiter's environment contract (docs/limiter.md, "Environment contract") as a workload without the
plugin uses it: sizes with their suffixes, percents, policies, HAMi's names and which name wins, and a value
that does not parse logged (naming the variable, the value and the device) and ignored, never fatal.

A claim without a region file: the first process creates it from its environment, so the region the plugin
(or `carve inspect`) reads shows what was parsed, and the reports show what is enforced.
"""

from __future__ import annotations

import json
import re

from driver.limits import Region
from driver.limits.env import OOM_POLICIES

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
T4_TOTAL_FLOOR = 14 * GIB  # a fake T4's memory is above this: a report at the real total shows no limit


def errors(log: str) -> list[str]:
    """The error lines' messages, less those about /var/run/carve: the limiter scans that directory whatever
    its environment says (the plugin's mounts), and on a test machine other things live there."""
    return [
        m for m in re.findall(r"^carve-limiter\[\d+\] error: (.*)$", log, re.M) if "/var/run/carve/" not in m
    ]


def parsed(c, *ordinals: str, **env: str) -> tuple[dict, Region, str]:
    """Run the client's `multi` (no allocation, every ordinal's reported total) under `env`."""
    proc = c.run("multi", *ordinals, **env)
    return json.loads(proc.stdout.strip().splitlines()[-1]), Region.open(c.region), proc.stderr


# per device: (CARVE_MEMORY_LIMIT_<i>, bytes parsed or None: not a size, logged, no limit)
MEMORY = [
    ("8388608", 8 * MIB),
    (" 8M", 8 * MIB),  # leading blanks are skipped
    ("8k", 8 * KIB),
    ("010M", 10 * MIB),  # decimal, whatever its leading zero
    ("2G", 2 * GIB),
    ("16777215T", 16777215 * TIB),  # the largest size in T
    ("8MiB", 8 * MIB),
    ("8mb", 8 * MIB),
    ("8Mi", 8 * MIB),
    ("8X", None),
    ("-8M", None),
    ("16777216T", None),  # 2^64 bytes: does not fit
    ("8MiBs", None),
    ("1t", TIB),
    ("0x10", None),  # not hexadecimal
]
# device -> (CARVE_CORES_LIMIT_<i>, percent parsed; None: out of 0..100, logged, no compute limit). Device 1
# has none: CARVE_CORES_LIMIT_10's name starts with its name, and is not its variable.
CORES = {
    0: ("50", 50),
    2: ("100", 0),
    3: ("0", 0),
    4: ("101", None),
    5: ("-1", None),
    6: ("5x", None),
    7: ("1", 1),
    8: ("99", 99),
    10: ("10", 10),
    11: ("010", 10),  # decimal, a leading zero or not (HAMi's atoi reads it so), never octal
    12: ("0x1f", None),  # not hexadecimal
}


def test_sizes_and_percents_per_device_and_what_does_not_parse(claim):
    c = claim(gpus="16xT4")
    env = {f"CARVE_MEMORY_LIMIT_{i}": v for i, (v, _) in enumerate(MEMORY)}
    env |= {f"CARVE_CORES_LIMIT_{i}": v for i, (v, _) in CORES.items()}
    env |= {
        # the global names cover the devices without a per-device one, and win over HAMi's per-device names
        "CARVE_MEMORY_LIMIT": "1G",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "4m",
        "CUDA_DEVICE_MEMORY_LIMIT_15": "4m",
        "CARVE_CORES_LIMIT": "30",
        "CUDA_DEVICE_SM_LIMIT_9": "70",
        "CUDA_DEVICE_SM_LIMIT_0": "70",
    }
    out, region, log = parsed(c, **env)
    with region:
        assert region._struct.generation == 1  # a region made from the environment starts as the plugin's do
        for i in range(16):
            value, want = MEMORY[i] if i < len(MEMORY) else ("1G", GIB)
            assert region.memory_limit(i) == (want or 0), (i, value)
            # what is enforced: the reports show the quota (below the GPU's memory) or the real total
            if want is not None and want < T4_TOTAL_FLOOR:
                assert out["total"][i] == want == out["device_total"][i], (i, value)
            else:
                assert out["total"][i] > T4_TOTAL_FLOOR, (i, value)
            named = f"memory limit '{value}' for device {i} is not a size; no memory limit"
            assert (named in log) == (want is None), (i, log)
        for i in range(16):
            value, want = CORES.get(i, ("30", 30))
            assert region.cores_limit(i) == (want or 0), (i, value)
            named = f"cores limit '{value}' for device {i} is not 0..100; no compute limit"
            assert (named in log) == (want is None), (i, log)
    # one error line per value that does not parse, and no other
    unparsed = [v for v, want in (*MEMORY, *CORES.values()) if want is None]
    assert len(errors(log)) == len(unparsed), log


def test_hamis_names_when_the_carve_ones_are_absent(claim):
    c = claim(gpus="2xT4")
    env = {
        "CUDA_DEVICE_MEMORY_LIMIT_0": "4m",
        "CUDA_DEVICE_MEMORY_LIMIT": "2g",
        "CUDA_DEVICE_SM_LIMIT_1": "40",
        "CUDA_DEVICE_SM_LIMIT": "20",
    }
    out, region, log = parsed(c, **env)
    with region:
        assert [region.memory_limit(0), region.memory_limit(1), region.memory_limit(2)] == [
            4 * MIB,
            2 * GIB,
            2 * GIB,
        ]
        assert [region.cores_limit(0), region.cores_limit(1), region.cores_limit(2)] == [20, 40, 20]
    assert out["total"] == [4 * MIB, 2 * GIB] and errors(log) == []


# (environment, core policy, priority, OOM policy, the error lines it logs)
POLICIES = [
    (
        {"CARVE_CORE_POLICY": "FORCE", "CARVE_PRIORITY": "low", "CARVE_OOM_POLICY": "kill"},
        "force",
        "low",
        "kill",
        [],
    ),
    (
        {"GPU_CORE_UTILIZATION_POLICY": "disable", "CUDA_TASK_PRIORITY": "1", "ACTIVE_OOM_KILLER": "1"},
        "disable",
        "low",
        "kill",
        [],
    ),
    (
        {"ACTIVE_OOM_KILLER": "TRUE", "CUDA_TASK_PRIORITY": "0", "GPU_CORE_UTILIZATION_POLICY": "force"},
        "force",
        "high",
        "kill",
        [],
    ),
    (
        # the CARVE_ names win over HAMi's
        {
            "CARVE_CORE_POLICY": "default",
            "GPU_CORE_UTILIZATION_POLICY": "disable",
            "CARVE_PRIORITY": "high",
            "CUDA_TASK_PRIORITY": "1",
            "CARVE_OOM_POLICY": "error",
            "ACTIVE_OOM_KILLER": "true",
        },
        "default",
        "high",
        "error",
        [],
    ),
    ({"ACTIVE_OOM_KILLER": "false", "CUDA_TASK_PRIORITY": ""}, "default", "high", "error", []),
    (
        {"CARVE_CORE_POLICY": "bogus", "CARVE_PRIORITY": "middle", "CARVE_OOM_POLICY": "explode"},
        "default",
        "high",
        "error",
        [
            "CARVE_CORE_POLICY=bogus is not understood; using default",
            "CARVE_PRIORITY=middle is not understood; using high",
            "CARVE_OOM_POLICY=explode is not understood; using error",
        ],
    ),
]


def test_policies_from_either_name_and_a_value_not_understood(claim):
    for n, (env, core, priority, oom, logged) in enumerate(POLICIES):
        c = claim(f"policies{n}")
        _, region, log = parsed(c, **env)
        with region:
            assert (region.core_policy, region.priority, OOM_POLICIES[region._struct.oom_policy]) == (
                core,
                priority,
                oom,
            ), env
        assert errors(log) == logged, (env, log)


# (environment, which of the lines below the process logs): a refusal is a warning, "ready" is info, the
# binding of a device to its claim is debug
LEVELS = [
    ({"LIBCUDA_LOG_LEVEL": "0"}, set()),
    ({"LIBCUDA_LOG_LEVEL": "1"}, {"warn"}),
    ({"LIBCUDA_LOG_LEVEL": "2"}, {"warn", "info"}),
    ({"LIBCUDA_LOG_LEVEL": "3"}, {"warn", "info", "debug"}),
    ({"LIBCUDA_LOG_LEVEL": "9"}, {"warn", "info", "debug"}),
    ({"LIBCUDA_LOG_LEVEL": "x"}, {"warn"}),  # not a number: the default
    ({"CARVE_LOG": "error", "LIBCUDA_LOG_LEVEL": "4"}, set()),  # CARVE_LOG wins
    ({"CARVE_LOG": "INFO"}, {"warn", "info"}),
]
LINES = {
    "warn": r"warn: device 0: allocation of \d+ bytes refused",
    "info": r"info: ready: region ",
    "debug": r"debug: device 0 \(",
}


def test_log_level_from_either_name(claim):
    c = claim().create(memory=8 * MIB)
    for env, shown in LEVELS:
        env = {"CARVE_LOG": "", **env}  # the harness's CARVE_LOG=warn, unless the case sets it
        log = c.run("alloc", str(9 * MIB), **env).stderr
        for level, line in LINES.items():
            assert bool(re.search(rf"^carve-limiter\[\d+\] {line}", log, re.M)) == (level in shown), (
                env,
                level,
                log,
            )


def test_a_log_level_not_understood_is_logged_and_the_default_kept(claim):
    c = claim().create(memory=8 * MIB)
    log = c.run("alloc", str(9 * MIB), CARVE_LOG="loud").stderr
    assert re.search(
        r"^carve-limiter\[\d+\] error: CARVE_LOG=loud is not understood; using warn$", log, re.M
    ), log
    assert re.search(rf"^carve-limiter\[\d+\] {LINES['warn']}", log, re.M), log
    assert not re.search(rf"^carve-limiter\[\d+\] {LINES['info']}", log, re.M), log
