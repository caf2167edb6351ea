"""Memory enforcement backends on real containers (containerd + runc; docs/enforcement.md).

For this module the plugin of e2e-n1 restarts with a fake driver of the 615 generation (the fake NVML's
memory limits API) and `0=mig,1=soft,2=mps`, under `--memory-enforcement auto`; the session's layout is
restored afterwards. Then:
- a soft pod of `vgpu-strict.carve.dev` lands on the driver-enforced GPU; runc runs the spec's createRuntime
  hook (`carve-cdi-hook memory-limits`), which puts the container's cgroup under the fake driver's
  partition; with the limiter removed from the container's /etc/ld.so.preload, a CUDA program is still
  refused past the limit (by the driver) and granted under it;
- an `mps.carve.dev` pod gets the node's MPS pipe directory and client settings, and its CUDA programs
  become clients of the plugin's (fake) MPS control daemon, whose server list then names the server its
  log says they attached to;
- an mps pod of a second uid is refused by the `carve-cdi-hook mps-user` createRuntime hook while the first
  uid's pod holds the GPU's MPS server, and starts (kubelet retry) once that pod is gone.
The container's fake libcuda reads the node's fake GPU state through a hostPath mount of the plugin's state
file (the driver's state is node-wide on hardware too). On this hybrid host the container sees no cgroup2
mount (runc mounts the v1 hierarchies only) and has no cgroup namespace, so its /proc/self/cgroup "0::" path
is the host's: the fake driver finds the partition by that path (native/fakes/common/cgroup.c).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client

from driver import names
from e2e import kube

N1 = "e2e-n1"
MiB = 1024**2
LIMIT = 2 * 1024**3
CUDA_ERROR_OUT_OF_MEMORY = 2
STRATEGY = "0=mig,1=soft,2=mps"
STATE_IN_POD = "/var/run/carve-fake/fake-gpus.state"
MPS_CONTROL = Path(__file__).resolve().parents[1] / "native" / "build" / "fakes" / "nvidia-cuda-mps-control"


# Module scope: it must skip before the module's driver_node fixture restarts the plugin and waits for
# devices a gates-off cluster never publishes.
@pytest.fixture(scope="module", autouse=True)
def real_containers(cluster, gates_on):
    if cluster.runtime != "containerd":
        pytest.skip(f"needs real containers; this cluster runs the {cluster.runtime} runtime on purpose")
    if not gates_on:
        pytest.skip("soft and mps devices need DRAConsumableCapacity, off in this run (GATES=off)")


@pytest.fixture(scope="module")
def driver_node(cluster, api):
    """e2e-n1's plugin on a 615 fake driver with an mps GPU, for this module only."""
    node = cluster.nodes[N1]
    spec, saved = node.spec, os.environ.get("CARVE_FAKE_DRIVER_VERSION")
    extra = list(node.extra_plugin_args)
    os.environ["CARVE_FAKE_DRIVER_VERSION"] = "615.20.01"
    node.spec = dataclasses.replace(spec, strategy=STRATEGY)
    (node.root / "mps-shm").mkdir(exist_ok=True)
    (node.root / "mps-shm").chmod(0o1777)  # as the chart's init container leaves it
    node.extra_plugin_args = [*extra, "--mps-shm-dir", str(node.root / "mps-shm")]
    node.restart_plugin(kill=False)
    try:
        _wait_published(cluster, node.name)
        yield node
    finally:
        node.spec = spec
        node.extra_plugin_args = extra
        if saved is None:
            os.environ.pop("CARVE_FAKE_DRIVER_VERSION", None)
        else:
            os.environ["CARVE_FAKE_DRIVER_VERSION"] = saved
        node.restart_plugin(kill=False)


def _attrs(device: dict) -> dict:
    return {k.rpartition("/")[2]: next(iter(v.values())) for k, v in (device.get("attributes") or {}).items()}


def _wait_published(cluster, node_name: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        devices = {
            d["name"]: _attrs(d) for s in cluster.slices(node_name) for d in s["spec"].get("devices") or []
        }
        if (
            devices.get("gpu-1", {}).get("memoryEnforcement") == "driver"
            and devices.get("gpu-2", {}).get("type") == names.TYPE_MPS
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{node_name} never published the driver/mps devices: {devices}")
        time.sleep(1)


def _pod(node, name: str, requests: list[dict]) -> tuple[dict, dict]:
    pod = kube.pod(name, claim_template=name, node=N1)
    container = pod["spec"]["containers"][0]
    container["image"] = "e2e/glibc"
    container["env"] = [
        {"name": names.ENV_FAKE_GPUS, "value": node.spec.gpus.removeprefix("fake:")},
        {"name": names.ENV_FAKE_SEED, "value": N1},
        {"name": names.ENV_FAKE_STATE, "value": STATE_IN_POD},
    ]
    container["volumeMounts"] = [{"name": "fake-state", "mountPath": os.path.dirname(STATE_IN_POD)}]
    pod["spec"]["volumes"] = [
        {"name": "fake-state", "hostPath": {"path": str(node.plugin_dir), "type": "Directory"}}
    ]
    return kube.template(name, requests), pod


def _cgroup_view(cluster, namespace: str) -> str:
    """What the fake driver in the container has to find its cgroup with (for a failure's message)."""
    script = "grep '^0::' /proc/self/cgroup; grep -c ' - cgroup2 ' /proc/self/mountinfo || true"
    return kube.exec_sh(cluster, namespace, "strict", script)


def _run(cluster, api, namespace, node, name: str, requests: list[dict]) -> None:
    template, pod = _pod(node, name, requests)
    kube.create(api, namespace, template)
    kube.create(api, namespace, pod)
    kube.wait_running(api, namespace, name, timeout_s=120)


def test_driver_backend_refuses_a_process_without_the_limiter(cluster, api, namespace, driver_node):
    requests = [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": names.CLASS_VGPU_STRICT,
                "capacity": {"requests": {"memory": "2Gi", "cores": "20"}},
            },
        }
    ]
    _run(cluster, api, namespace, driver_node, "strict", requests)
    claim = kube.claim_of(api, namespace, "strict")
    device = kube.results(claim)[0]["device"]
    assert device == "gpu-1", device  # the only driver-enforced soft GPU
    # The createRuntime hook recorded the cgroup it partitioned: the container's own, as the host names it
    # (under the node's cgroup v2 mount), the one the container's /proc/self/cgroup names (without a cgroup
    # namespace, as on this hybrid host, by the same path; in one it reads "/").
    pod = client.CoreV1Api(api).read_namespaced_pod("strict", namespace)
    container_id = pod.status.container_statuses[0].container_id.rpartition("://")[2]
    record = driver_node.run_dir / "claims" / claim["metadata"]["uid"] / "cgroups" / container_id
    partitioned = record.read_text()
    inside = kube.exec_sh(cluster, namespace, "strict", "grep '^0::' /proc/self/cgroup").strip()[3:]
    assert Path(partitioned).is_dir(), partitioned
    assert inside == "/" or partitioned.endswith(inside), (partitioned, inside)
    # Take the limiter out of the container's preload: only the driver is left to refuse.
    kube.exec_sh(cluster, namespace, "strict", ": > /etc/ld.so.preload")
    over = kube.cuda_probe(cluster, namespace, "strict", LIMIT + 64 * MiB)
    assert over["limiter"] is False, over
    assert (over["init"], over["ctx"]) == (0, 0), over
    assert over["alloc"] == CUDA_ERROR_OUT_OF_MEMORY, (
        f"over the driver's limit of {LIMIT} B: {over}; "
        f"the container's cgroup view: {_cgroup_view(cluster, namespace)}"
    )
    under = kube.cuda_probe(cluster, namespace, "strict", LIMIT // 2)
    assert under["alloc"] == 0, under


def test_mps_pod_is_a_client_of_the_nodes_daemon(cluster, api, namespace, driver_node):
    requests = [
        {
            "name": "gpu",
            "exactly": {
                "deviceClassName": names.CLASS_MPS,
                "capacity": {"requests": {"memory": "2Gi", "cores": "25"}},
            },
        }
    ]
    _run(cluster, api, namespace, driver_node, "mps", requests)
    env = kube.container_env(cluster, namespace, "mps")
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == names.MPS_CONTAINER_PIPE_DIR, env
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25", env
    listing = kube.exec_sh(cluster, namespace, "mps", f"ls {names.MPS_CONTAINER_PIPE_DIR}").split()
    assert "control" in listing, listing
    # The container's /dev/shm is the node's --mps-shm-dir (the daemons' /dev/shm under the chart), not the
    # runtime's own: what the container writes there is in that host directory.
    kube.exec_sh(cluster, namespace, "mps", f"echo {namespace} > {names.MPS_CONTAINER_SHM_DIR}/carve-e2e")
    assert (driver_node.root / "mps-shm" / "carve-e2e").read_text().strip() == namespace
    # The pinned limit (2Gi; on this 615 driver also the partition) holds a process without the limiter.
    kube.exec_sh(cluster, namespace, "mps", ": > /etc/ld.so.preload")
    over = kube.cuda_probe(cluster, namespace, "mps", LIMIT + 64 * MiB)
    assert over["alloc"] == CUDA_ERROR_OUT_OF_MEMORY, over
    under = kube.cuda_probe(cluster, namespace, "mps", LIMIT // 2)
    assert under["alloc"] == 0, under
    # The container's CUDA programs were clients of the node's daemon: it started a server for them.
    gpu_dir = driver_node.plugin_dir / "mps" / "gpu-2"
    assert (gpu_dir / "pipe" / "nvidia-cuda-mps-control.pid").exists()
    servers = _mps_control(gpu_dir / "pipe", "get_server_list").split()
    assert len(servers) == 1 and servers[0].isdigit(), servers
    log = (gpu_dir / "log" / "control.log").read_text()
    attached = [line for line in log.splitlines() if f"attached to server {servers[0]}" in line]
    assert len(attached) >= 2, log  # the two probes


MPS_REQUEST = [
    {
        "name": "gpu",
        "exactly": {
            "deviceClassName": names.CLASS_MPS,
            "capacity": {"requests": {"memory": "1Gi", "cores": "20"}},
        },
    }
]


def _mps_pod_as(driver_node, name: str, uid: int) -> tuple[dict, dict]:
    """An mps pod running as `uid` whose CUDA program stays a client of the GPU's MPS server; restarted by
    the kubelet when its container fails to start (the mps-user hook's refusal is such a failure)."""
    template, pod = _pod(driver_node, name, MPS_REQUEST)
    pod["spec"]["restartPolicy"] = "OnFailure"
    pod["spec"]["securityContext"] = {"runAsUser": uid, "runAsGroup": uid}
    pod["spec"]["containers"][0]["command"] = [
        "sh",
        "-c",
        f"{kube.CUDA_VISIBLE_FROM_DEV} cuda-probe {MiB} 3600 & exec sleep 3600",
    ]
    return template, pod


def _server_uid(pid: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("Uid:")).split()[1])


def test_mps_pod_of_a_second_uid_starts_when_the_first_users_clients_are_gone(
    cluster, api, namespace, driver_node
):
    """MPS serves one uid per GPU at a time: carve's createRuntime hook (`carve-cdi-hook mps-user`) refuses
    the second uid's container with a message naming both uids, instead of letting it hang in cuInit; the
    kubelet retries it, and it starts once the first user's pod is gone."""
    pipe = driver_node.plugin_dir / "mps" / "gpu-2" / "pipe"
    template, pod = _mps_pod_as(driver_node, "first", 1000)
    kube.create(api, namespace, template)
    kube.create(api, namespace, pod)
    kube.wait_running(api, namespace, "first", timeout_s=120)

    def served():
        for server in _mps_control(pipe, "get_server_list").split():
            if _server_uid(server) == 1000 and _mps_control(pipe, f"get_client_list {server}").split():
                return server
        return None

    kube.wait("the first pod's CUDA program a client of a server of uid 1000", served, timeout_s=60)
    template, pod = _mps_pod_as(driver_node, "second", 2000)
    kube.create(api, namespace, template)
    kube.create(api, namespace, pod)
    core = client.CoreV1Api(api)

    def refused():
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=second").items
        said = [e.message for e in events if e.message and "mps-user" in e.message]
        return said[0] if said else None

    message = kube.wait("the second pod's container refused by the mps-user hook", refused, timeout_s=120)
    # The uid lease (the first pod's container holds the GPU) or the daemon's word (its server serves uid
    # 1000) refuses it, whichever the hook meets first (docs/security.md, "carve-cdi-hook mps-user").
    assert "uid 1000" in message and "runs as uid 2000" in message, message

    def started():
        statuses = core.read_namespaced_pod("second", namespace).status.container_statuses or []
        return (statuses and statuses[0].state.running is not None) or None

    assert not started(), "the second uid's container runs beside the first uid's MPS clients"
    kube.delete_pod(api, namespace, "first")
    # The kubelet's next try (back-off: tens of seconds) passes the hook; the daemon then serves uid 2000.
    kube.wait("the second pod's container running", started, timeout_s=240)

    def serves_second():
        return any(_server_uid(s) == 2000 for s in _mps_control(pipe, "get_server_list").split()) or None

    kube.wait("the GPU's MPS server serving uid 2000", serves_second, timeout_s=60)


def _mps_control(pipe, command: str) -> str:
    """One command to a node's MPS control daemon, as the plugin sends it (the fake control binary)."""
    proc = subprocess.run(
        [str(MPS_CONTROL)],
        input=command + "\n",
        env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, f"{MPS_CONTROL} {command}: {proc.stderr}"
    return proc.stdout
