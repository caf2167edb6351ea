"""Building CDI specs, pure: container edits in, a spec document (a dict ready for JSON) out.

One spec per prepared claim, kind `k8s.gpu.carve.dev/claim`, one CDI device per allocated device. The
`cdiVersion` written is the lowest version that has every feature the spec uses, so older runtimes
(containerd 1.7 ships an older CDI library) accept it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from driver import names

# CDI device names: alphanumerics first and last, '-', '_', '.', ':' between (CDI parser rules).
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


class CdiError(Exception):
    """A CDI spec that cannot be built; the message names the device and the field."""


@dataclass(frozen=True)
class DeviceNode:
    path: str  # in the container
    host_path: str | None = None  # on the host, when it differs (driver root not "/")
    permissions: str = "rw"
    # A fully specified node (type "c" and a major) is created by the runtime without a host file to stat:
    # MIG capability nodes, which need not exist in the plugin's /dev (driver/plugin/mig/caps.py).
    type: str = ""
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None  # permission bits, e.g. 0o444


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ("ro", "nosuid", "nodev", "bind")


@dataclass(frozen=True)
class Hook:
    """An OCI hook the runtime runs; carve's are createContainer hooks of native/hook (carve-cdi-hook)."""

    path: str  # on the host
    args: tuple[str, ...]  # argv, argv[0] included
    hook_name: str = "createContainer"
    env: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerEdits:
    """The subset of CDI container edits carve uses. Env entries are NAME=value strings."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()  # run in this order (create the links before the ld cache is written)

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """Self then other, dropping exact duplicates (two devices of a claim share /dev/nvidiactl)."""
        return ContainerEdits(
            env=_unique(self.env + other.env),
            device_nodes=_unique(self.device_nodes + other.device_nodes),
            mounts=_unique(self.mounts + other.mounts),
            hooks=_unique(self.hooks + other.hooks),
        )

    def to_json(self) -> dict:
        out: dict = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [_node_json(n) for n in self.device_nodes]
        if self.mounts:
            out["mounts"] = [
                {"hostPath": m.host_path, "containerPath": m.container_path, "options": list(m.options)}
                for m in self.mounts
            ]
        if self.hooks:
            out["hooks"] = [_hook_json(h) for h in self.hooks]
        return out


@dataclass(frozen=True)
class CdiDevice:
    name: str  # the CDI device name (without kind): <claim-uid>-<device>[-<shareID>]
    edits: ContainerEdits = field(default_factory=ContainerEdits)


def _unique(items: tuple) -> tuple:
    return tuple(dict.fromkeys(items))


def _node_json(node: DeviceNode) -> dict:
    out: dict = {"path": node.path}
    if node.host_path and node.host_path != node.path:
        out["hostPath"] = node.host_path
    if node.type:
        out["type"] = node.type
    for key, value in (("major", node.major), ("minor", node.minor), ("fileMode", node.file_mode)):
        if value is not None:
            out[key] = value
    if node.permissions:
        out["permissions"] = node.permissions
    return out


def _hook_json(hook: Hook) -> dict:
    out: dict = {"hookName": hook.hook_name, "path": hook.path, "args": list(hook.args)}
    if hook.env:
        out["env"] = list(hook.env)
    return out


def claim_spec(claim_uid: str, devices: Iterable[CdiDevice], common: ContainerEdits) -> dict:
    """The CDI spec document for one claim: per-device edits plus edits common to all its devices."""
    devices = list(devices)
    if not devices:
        raise CdiError(f"claim {claim_uid}: CDI spec needs at least one device")
    seen: set[str] = set()
    for d in devices:
        if not _DEVICE_NAME.match(d.name):
            raise CdiError(f"claim {claim_uid}: device {d.name!r}: name is not a valid CDI device name")
        if d.name in seen:
            raise CdiError(f"claim {claim_uid}: device {d.name!r}: name appears twice")
        seen.add(d.name)
    doc: dict = {
        "cdiVersion": "",
        "kind": names.CDI_KIND,
        "devices": [{"name": d.name, "containerEdits": d.edits.to_json()} for d in devices],
    }
    common_json = common.to_json()
    if common_json:
        doc["containerEdits"] = common_json
    doc["cdiVersion"] = minimum_version(doc)
    return doc


def minimum_version(doc: dict) -> str:
    """Lowest CDI spec version that has every feature `doc` uses (the CDI project's own rules)."""
    edits = [d.get("containerEdits") or {} for d in doc.get("devices", [])]
    edits.append(doc.get("containerEdits") or {})
    if any(e.get("intelRdt") or e.get("additionalGids") for e in edits):
        return "0.7.0"
    _, _, cls = doc.get("kind", "").partition("/")
    if doc.get("annotations") or any(d.get("annotations") for d in doc.get("devices", [])) or "." in cls:
        return "0.6.0"
    starts_with_digit = any(not d["name"][:1].isalpha() for d in doc.get("devices", []))
    host_paths = any(n.get("hostPath") for e in edits for n in e.get("deviceNodes", []))
    if starts_with_digit or host_paths:
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


def device_ids(doc: dict) -> list[str]:
    """Fully qualified CDI ids (kind=name) of the devices in a spec document."""
    return [f"{doc['kind']}={d['name']}" for d in doc["devices"]]
