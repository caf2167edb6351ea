"""Who a GPU process belongs to, from what the host says: its cgroup names its pod, the pod names its claims.

NVML reports host pids. The cgroup of a pid (`<proc-root>/<pid>/cgroup`) is written by the kubelet and the
container runtime when the container starts; a process in an unprivileged container cannot move itself to
another cgroup (its cgroupfs is read-only). The pod UID is a path segment of that cgroup, in every layout the
kubelet uses:
  systemd driver  .../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_underscored>.slice/..
                  .../kubepods.slice/kubepods-pod<uid_underscored>.slice/...     (Guaranteed QoS)
  cgroupfs driver .../kubepods/burstable/pod<uid>/<container id>
                  .../kubepods/pod<uid>/<container id>                           (Guaranteed QoS)
on cgroup v1 (one line per hierarchy, `<id>:<controllers>:<path>`) and v2 (one line, `0::<path>`); a path seen
from another cgroup namespace may start with `/..`. The pod's claims come from the ResourceClaims'
`status.reservedFor` (recorded at prepare, refreshed by the region watcher): the pids and namespaces a
container writes into its region are never used to decide whose a process is.

A kill re-reads the cgroup right before signalling, through a pidfd opened first: the signal reaches the
process whose cgroup was checked, or no process at all (a pid that exited and was reused is not signalled).
"""

from __future__ import annotations

import errno
import os
import re
import signal
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

MAX_CGROUP_BYTES = 64 << 10  # a /proc/<pid>/cgroup file is a few hundred bytes; a bound on what is read

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# one path segment naming a pod: `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid>.slice` (systemd)
_POD_SEGMENT = re.compile(rf"(?:kubepods(?:-besteffort|-burstable)?-)?pod(?P<uid>{_UID})(?:\.slice)?")
_KUBEPODS_SEGMENT = re.compile(r"kubepods(?:\.slice)?")


class AttributionError(Exception):
    """A process whose pod cannot be told (unreadable cgroup, several pods named)."""


def pod_uid_of_path(path: str) -> str | None:
    """The pod UID a cgroup path names (lowercase, dashes), or None when it is not a pod's cgroup.

    The pod segment must come after a `kubepods` (or `kubepods.slice`) segment: a cgroup a process could
    name itself elsewhere (a systemd unit called pod<uid>.slice) does not count.
    """
    segments = path.split("/")
    for i, segment in enumerate(segments):
        if not _KUBEPODS_SEGMENT.fullmatch(segment):
            continue
        for later in segments[i + 1 :]:
            m = _POD_SEGMENT.fullmatch(later)
            if m:
                return m["uid"].replace("_", "-").lower()
        return None
    return None


def pod_uid_of_cgroup(text: str) -> str | None:
    """The pod UID a /proc/<pid>/cgroup file names, None for a process outside any pod.

    Every hierarchy of cgroup v1 and the unified one of v2 is read; they must agree (a process whose
    hierarchies name two pods is refused with AttributionError rather than given to either).
    """
    found = set()
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        uid = pod_uid_of_path(parts[2])
        if uid:
            found.add(uid)
    if len(found) > 1:
        raise AttributionError(f"cgroups name several pods: {sorted(found)}")
    return found.pop() if found else None


def read_cgroup(pid: int, proc_root: Path) -> str:
    try:
        fd = os.open(Path(proc_root) / str(pid) / "cgroup", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as e:
        raise AttributionError(f"pid {pid}: cannot read its cgroup: {e.strerror}") from None
    try:
        return os.read(fd, MAX_CGROUP_BYTES).decode(errors="replace")
    except OSError as e:
        raise AttributionError(f"pid {pid}: cannot read its cgroup: {e.strerror}") from None
    finally:
        os.close(fd)


def pod_of_process(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The UID of the pod whose cgroup holds host pid `pid`; None outside any pod or when unknowable."""
    try:
        return pod_uid_of_cgroup(read_cgroup(pid, proc_root))
    except AttributionError:
        return None


def pods_of_processes(pids: Iterable[int], proc_root: Path = Path("/proc")) -> dict[int, str | None]:
    return {pid: pod_of_process(pid, proc_root) for pid in set(pids)}


def reserved_pods(claim: dict[str, Any]) -> tuple[str, ...]:
    """The UIDs of the pods a ResourceClaim is reserved for (status.reservedFor entries of core pods), sorted;
    a malformed entry is skipped (the claim's other fields are checked elsewhere)."""
    out = set()
    status = claim.get("status") if isinstance(claim, dict) else None
    entries = status.get("reservedFor") if isinstance(status, dict) else None
    for ref in entries if isinstance(entries, list) else ():
        if not isinstance(ref, dict) or ref.get("resource") != "pods":
            continue
        if ref.get("apiGroup") not in ("", None):
            continue
        uid = ref.get("uid")
        if isinstance(uid, str) and re.fullmatch(_UID, uid.lower()):
            out.add(uid.lower().replace("_", "-"))
    return tuple(sorted(out))


def pidfd_kill(pid: int, allowed_pods: Collection[str], proc_root: Path = Path("/proc")) -> None:
    """SIGKILL host pid `pid` only if its cgroup, read right now, names one of `allowed_pods`.

    The pidfd is opened before the cgroup is read, so the signal goes to the process that was checked (or,
    if that one exited, to none: ProcessLookupError). Where pidfd_open is missing (kernel < 5.3), the plain
    kill follows the same check. Raises PermissionError (with the reason) when the cgroup names another pod.
    `proc_root` must show the same pid namespace the plugin signals in (hostPID).
    """
    pidfd = None
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            pidfd = pidfd_open(pid)
        except OSError as e:
            if e.errno == errno.ESRCH:
                raise ProcessLookupError(errno.ESRCH, f"pid {pid} exited") from None
            if e.errno != errno.ENOSYS:
                raise
    try:
        try:
            pod = pod_uid_of_cgroup(read_cgroup(pid, proc_root))
        except AttributionError as e:
            raise PermissionError(errno.EPERM, f"not killed: {e}") from None
        if pod is None or pod not in allowed_pods:
            raise PermissionError(
                errno.EPERM, f"not killed: pid {pid} is in pod {pod or '(none)'}, not one of the claim's pods"
            )
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        if pidfd is not None:
            os.close(pidfd)
