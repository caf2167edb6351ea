"""A fake `/proc` of cgroup files: the node's word on which pod a host pid belongs to (the kubelet's cgroup
layouts, systemd and cgroupfs drivers, cgroup v1 and v2), for the plugin's --proc-root in tests."""

from __future__ import annotations

from pathlib import Path


def pod_uid(n: int) -> str:
    """A pod UID (Kubernetes' lowercase 8-4-4-4-12 form), distinct for each n."""
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def cgroup_text(pod: str | None, layout: str = "systemd-v2", container: str = "c0ffee") -> str:
    """/proc/<pid>/cgroup of a process in `pod` (None: a host service), as the kubelet's layout writes it."""
    under = pod.replace("-", "_") if pod else ""
    if pod is None:
        paths = {"v2": "/system.slice/containerd.service", "v1": "/system.slice/containerd.service"}
    elif layout.startswith("systemd"):
        path = (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{under}.slice/"
            f"cri-containerd-{container}.scope"
        )
        paths = {"v2": path, "v1": path}
    elif layout.startswith("guaranteed"):
        path = f"/kubepods.slice/kubepods-pod{under}.slice/cri-containerd-{container}.scope"
        paths = {"v2": path, "v1": path}
    else:  # cgroupfs driver
        path = f"/kubepods/besteffort/pod{pod}/{container}"
        paths = {"v2": path, "v1": path}
    if layout.endswith("v1"):
        return "".join(
            f"{i}:{ctl}:{paths['v1']}\n"
            for i, ctl in ((12, "memory"), (11, "cpu,cpuacct"), (1, "name=systemd"))
        )
    return f"0::{paths['v2']}\n"


def write_cgroup(proc_root: Path, pid: int, pod: str | None, layout: str = "systemd-v2") -> None:
    d = Path(proc_root) / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup_text(pod, layout))
