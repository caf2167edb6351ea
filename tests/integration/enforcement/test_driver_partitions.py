"""The driver backend end to end below the plugin: the fake NVML's memory limits API, the hook that sets
them on a container's cgroup, and a CUDA process refused past its hard limit without the limiter."""

from __future__ import annotations

import json
import subprocess

from enforcement_harness import CLIENT, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, GI, MI, Node

LIMIT_MAX = 0xFFFFFFFFFFFFFFFF


def _set(path: str, soft: int, hard: int) -> str:
    return (
        f"v = N.c_nvmlSetMemoryLimits_v1_t(); v.nameSpace = {path!r}.encode(); v.softLimit = {soft}; "
        f"v.hardLimit = {hard}\n"
    )


def test_set_and_get_limits_of_a_cgroup(node: Node):
    result = node.nvml(
        _set(str(node.cgroup), 1 * GI, 2 * GI) + "N.nvmlDeviceSetMemoryLimits_v1(H, v)\n"
        f"g = N.c_nvmlGetMemoryLimits_v1_t(); g.nameSpace = {str(node.cgroup)!r}.encode()\n"
        "N.nvmlDeviceGetMemoryLimits_v1(H, g)\n"
        "result = [g.softLimit, g.hardLimit, g.currentUsed]"
    )
    assert result == [1 * GI, 2 * GI, 0]


def test_limits_api_errors_follow_the_header(node: Node):
    total = 15360 * MI  # T4
    missing = str(node.tmp / "no-such-cgroup")
    result = node.nvml(
        "out = {}\n"
        + _set(str(node.cgroup), 2 * GI, 1 * GI)
        + "out['soft_above_hard'] = err(N.nvmlDeviceSetMemoryLimits_v1, H, v)\n"
        + _set(str(node.cgroup), 0, total + 1)
        + "out['above_total'] = err(N.nvmlDeviceSetMemoryLimits_v1, H, v)\n"
        + _set(str(node.cgroup), 0, LIMIT_MAX)
        + "out['clear'] = err(N.nvmlDeviceSetMemoryLimits_v1, H, v)\n"
        + _set(missing, 0, GI)
        + "out['missing_cgroup'] = err(N.nvmlDeviceSetMemoryLimits_v1, H, v)\n"
        f"g = N.c_nvmlGetMemoryLimits_v1_t(); g.nameSpace = {str(node.cgroup)!r}.encode()\n"
        "out['get_without_limits'] = err(N.nvmlDeviceGetMemoryLimits_v1, H, g)\n"
        "result = out"
    )
    assert result == {
        "soft_above_hard": "NVMLError_InvalidArgument",
        "above_total": "NVMLError_InvalidArgument",
        "clear": "ok",
        "missing_cgroup": "NVMLError_OperatingSystem",
        "get_without_limits": "NVMLError_NotFound",
    }


def test_drivers_before_615_do_not_support_limits(node: Node):
    result = node.nvml(
        _set(str(node.cgroup), 0, GI) + "result = err(N.nvmlDeviceSetMemoryLimits_v1, H, v)",
        CARVE_FAKE_DRIVER_VERSION="580.95.05",
    )
    assert result == "NVMLError_NotSupported"


def test_mig_devices_do_not_support_limits(tmp_path):
    node = Node(tmp_path, gpus="1xA100-40GB")
    result = node.nvml(
        "N.nvmlDeviceSetMigMode(H, 1)\n"
        "gi = N.nvmlDeviceCreateGpuInstance(H, N.nvmlDeviceGetGpuInstanceProfileInfo(H, 0).id)\n"
        "ci = N.nvmlGpuInstanceCreateComputeInstance(gi, N.nvmlGpuInstanceGetComputeInstanceProfileInfo("
        "gi, 0, 0).id)\n"
        "M = N.nvmlDeviceGetMigDeviceHandleByIndex(H, 0)\n"
        + _set(str(node.cgroup), 0, GI)
        + "result = err(N.nvmlDeviceSetMemoryLimits_v1, M, v)"
    )
    assert result == "NVMLError_NotSupported"


def test_hook_puts_the_container_cgroup_under_the_limit(node: Node):
    uuid = node.uuid()
    with node.container() as c:
        proc = node.hook(f"{uuid}:{GI}:{2 * GI}", pid=c.pid)
    assert proc.returncode == 0, proc.stderr
    assert (node.record / "c1").read_text() == str(node.cgroup)
    got = node.nvml(
        f"g = N.c_nvmlGetMemoryLimits_v1_t(); g.nameSpace = {str(node.cgroup)!r}.encode()\n"
        "N.nvmlDeviceGetMemoryLimits_v1(H, g)\nresult = [g.softLimit, g.hardLimit]"
    )
    assert got == [GI, 2 * GI]


def test_process_without_the_limiter_is_refused_past_the_hard_limit(node: Node):
    uuid = node.uuid()
    with node.container() as c:
        assert node.hook(f"{uuid}:{GI}:{2 * GI}", pid=c.pid).returncode == 0
    # No LD_PRELOAD at all: only the (fake) driver stands between the process and the GPU.
    assert int(node.client("alloc", str(2 * GI))) == CUDA_SUCCESS
    assert int(node.client("alloc", str(2 * GI + MI))) == CUDA_ERROR_OUT_OF_MEMORY
    # The same process outside the cgroup (another cgroup root: another directory) is not limited.
    other = node.tmp / "elsewhere"
    (other / str(node.cgroup.relative_to(node.cgroup_fs))).mkdir(parents=True)
    assert int(node.client("alloc", str(4 * GI), CARVE_FAKE_CGROUP_FS=str(other))) == CUDA_SUCCESS


def test_a_process_that_sees_no_cgroup2_mount_finds_its_partition_by_path(node: Node, tmp_path):
    """A container on a hybrid host: runc mounts only the v1 hierarchies into it and makes no cgroup
    namespace, so its /proc/self/cgroup names its cgroup as the host does but no cgroup2 directory is
    reachable (here: a cgroup root without the directory). The driver still finds its partition."""
    uuid = node.uuid()
    leaf = "/k8s.io/0123abcd"
    (node.cgroup_fs / leaf.lstrip("/")).mkdir(parents=True)
    proc_root = tmp_path / "proc"
    (proc_root / "4242").mkdir(parents=True)
    (proc_root / "4242" / "cgroup").write_text(f"4:memory:{leaf}\n0::{leaf}\n")
    assert node.hook(f"{uuid}:{GI}:{2 * GI}", pid=4242, proc_root=proc_root).returncode == 0
    blind = node.tmp / "v1-only-view"
    blind.mkdir()
    env = {"CARVE_FAKE_CGROUP_FS": str(blind), "CARVE_FAKE_CGROUP": leaf}
    assert int(node.client("alloc", str(2 * GI), **env)) == CUDA_SUCCESS
    assert int(node.client("alloc", str(2 * GI + MI), **env)) == CUDA_ERROR_OUT_OF_MEMORY
    info = json.loads(node.client("info", **env))
    assert (info["total"], info["nvml2_total"]) == (2 * GI, 2 * GI)
    # Another cgroup's path, equally blind: no partition.
    other = {"CARVE_FAKE_CGROUP_FS": str(blind), "CARVE_FAKE_CGROUP": leaf + "-sibling"}
    assert int(node.client("alloc", str(4 * GI), **other)) == CUDA_SUCCESS


def test_cuda_and_nvml_v2_report_the_partition(node: Node):
    uuid = node.uuid()
    with node.container() as c:
        assert node.hook(f"{uuid}:{GI}:{3 * GI}", pid=c.pid).returncode == 0
    info = json.loads(node.client("info"))
    assert info["total"] == 3 * GI
    assert info["nvml2_total"] == 3 * GI
    assert info["nvml_total"] == 15360 * MI  # v1 keeps the device's view


def test_limits_hold_across_processes_of_the_cgroup(node: Node):
    uuid = node.uuid()
    with node.container() as c:
        assert node.hook(f"{uuid}:0:{2 * GI}", pid=c.pid).returncode == 0
    holder = subprocess.Popen(
        [str(CLIENT), "hold", str(GI + GI // 2)], env=node.env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == f"ready {CUDA_SUCCESS}"
        assert int(node.client("alloc", str(GI))) == CUDA_ERROR_OUT_OF_MEMORY
        assert int(node.client("alloc", str(GI // 2))) == CUDA_SUCCESS
    finally:
        holder.kill()
        holder.wait()


def test_hook_fails_closed_naming_gpu_cgroup_and_nvml_error(node: Node):
    uuid = node.uuid()
    with node.container() as c:
        proc = node.hook(f"{uuid}:0:{2 * GI}", pid=c.pid, CARVE_FAKE_DRIVER_VERSION="580.95.05")
    assert proc.returncode == 1
    assert uuid in proc.stderr and str(node.cgroup) in proc.stderr and "Not Supported" in proc.stderr


def test_hook_fails_closed_on_an_unknown_gpu_and_clears_what_it_set(node: Node):
    uuid = node.uuid()
    with node.container() as c:
        proc = node.hook(f"{uuid}:0:{GI}", f"GPU-00000000-0000-0000-0000-000000000000:0:{GI}", pid=c.pid)
    assert proc.returncode == 1
    assert "GPU-00000000-0000-0000-0000-000000000000" in proc.stderr
    got = node.nvml(
        f"g = N.c_nvmlGetMemoryLimits_v1_t(); g.nameSpace = {str(node.cgroup)!r}.encode()\n"
        "result = err(N.nvmlDeviceGetMemoryLimits_v1, H, g)"
    )
    assert got == "NVMLError_NotFound"


def test_hook_refuses_a_state_without_pid_and_bad_arguments(node: Node):
    uuid = node.uuid()
    assert node.hook(f"{uuid}:0:{GI}", pid=None).returncode == 1
    assert node.hook(f"{uuid}:{2 * GI}:{GI}", pid=1).returncode == 2  # soft above hard
    assert node.hook("no-colons", pid=1).returncode == 2


def test_hook_refuses_a_cgroup_v1_process(node: Node, tmp_path):
    proc_root = tmp_path / "proc"
    (proc_root / "4242").mkdir(parents=True)
    (proc_root / "4242" / "cgroup").write_text("12:memory:/kubepods/x\n1:name=systemd:/kubepods/x\n")
    proc = node.hook(f"{node.uuid()}:0:{GI}", pid=4242, proc_root=proc_root)
    assert proc.returncode == 1
    assert "cgroup v1 is not supported" in proc.stderr


def test_hook_refuses_a_cgroup_path_with_dot_dot(node: Node, tmp_path):
    proc_root = tmp_path / "proc"
    (proc_root / "4242").mkdir(parents=True)
    (proc_root / "4242" / "cgroup").write_text("0::/kubepods/../../etc\n")
    proc = node.hook(f"{node.uuid()}:0:{GI}", pid=4242, proc_root=proc_root)
    assert proc.returncode == 1
    assert "not a plain absolute path" in proc.stderr


def test_poststop_clears_the_limits_it_recorded(node: Node):
    uuid = node.uuid()
    with node.container() as c:
        assert node.hook(f"{uuid}:{GI}:{2 * GI}", pid=c.pid).returncode == 0
    proc = node.hook(f"{uuid}:{GI}:{2 * GI}", pid=None, clear=True)
    assert proc.returncode == 0, proc.stderr
    assert not (node.record / "c1").exists()
    got = node.nvml(
        f"g = N.c_nvmlGetMemoryLimits_v1_t(); g.nameSpace = {str(node.cgroup)!r}.encode()\n"
        "result = err(N.nvmlDeviceGetMemoryLimits_v1, H, g)"
    )
    assert got == "NVMLError_NotFound"
    # A second poststop (the runtime may retry) has nothing to do and does not fail.
    assert node.hook(f"{uuid}:{GI}:{2 * GI}", pid=None, clear=True).returncode == 0


def test_driver_usage_counts_every_process_of_the_recorded_cgroups(node: Node):
    uuid = node.uuid()
    claim_dir = node.tmp / "claim"
    claim_dir.mkdir()
    record = node.record  # the hook's --record: <claim dir>/cgroups
    record.rename(claim_dir / "cgroups")
    node.record = claim_dir / "cgroups"
    with node.container() as c:
        assert node.hook(f"{uuid}:0:{4 * GI}", pid=c.pid).returncode == 0
    holder = subprocess.Popen(
        [str(CLIENT), "hold", str(GI)], env=node.env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == f"ready {CUDA_SUCCESS}"
        code = (
            "from driver.plugin.enforcement.driverusage import driver_usage\n"
            f"result = driver_usage({str(claim_dir)!r}, [{uuid!r}, 'GPU-unknown'])"
        )
        assert node.nvml(code) == {uuid: GI}
    finally:
        holder.kill()
        holder.wait()


def test_the_driver_refuses_also_under_the_limiter(node: Node, tmp_path):
    """The limiter loaded with a looser quota of its own than the partition: the driver still refuses."""
    from driver.limits import ClaimLimits, DeviceLimit, create_region, limits_path_for, write_limits
    from driver.limits.limitsfile import ClaimRuntime

    uuid = node.uuid()
    with node.container() as c:
        assert node.hook(f"{uuid}:0:{2 * GI}", pid=c.pid).returncode == 0
    region = tmp_path / "region"
    limits = ClaimLimits(devices=(DeviceLimit(8 * GI, 0, uuid=uuid),), region_path=str(region))
    create_region(region, limits)
    write_limits(limits_path_for(region), limits, ClaimRuntime())
    env = {"CARVE_REGION": str(region), "CARVE_REGION_DIR": str(tmp_path / "no-root"), "CARVE_LOG": "warn"}
    assert int(node.client("alloc", str(2 * GI), preload=True, **env)) == CUDA_SUCCESS
    assert int(node.client("alloc", str(3 * GI), preload=True, **env)) == CUDA_ERROR_OUT_OF_MEMORY
    # The same process outside the partition: the limiter alone lets 3Gi through (its quota is 8Gi).
    other = node.tmp / "elsewhere"
    (other / str(node.cgroup.relative_to(node.cgroup_fs))).mkdir(parents=True)
    outside = node.client("alloc", str(3 * GI), preload=True, CARVE_FAKE_CGROUP_FS=str(other), **env)
    assert int(outside) == CUDA_SUCCESS
