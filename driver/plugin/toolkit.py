"""What the node's NVIDIA stack may do past carve, checked at plugin start (docs/install.md, "Nodes with the
NVIDIA container toolkit and the GPU Operator").

- The container toolkit's runtime, where it is the node's default runtime, hands a container GPUs by env
  (`NVIDIA_VISIBLE_DEVICES=all`, which CUDA base images set) unless its config.toml says
  `accept-nvidia-visible-devices-envvar-when-unprivileged = false`, and by /dev/null mounts under
  /var/run/nvidia-container-devices when `accept-nvidia-visible-devices-as-volume-mounts = true` (mounts win
  over env). Containers holding a carve device are safe (their CDI spec sets NVIDIA_VISIBLE_DEVICES=void,
  applied after the image's env); their pod's other containers are not. Pure: `check_config`.
- The GPU Operator's MIG manager applies the layout its node label `nvidia.com/mig.config` names, and so
  undoes carve's MIG changes: a GPU whose rule gives `mig` on such a node runs the fallback strategy (see
  driver/plugin/strategies.py). Pure: `mig_manager`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

# Where the toolkit keeps its config, relative to the host's root: a package install, and the GPU Operator's
# toolkit container (installed under /usr/local/nvidia/toolkit on the host).
CONFIG_PATHS = (
    "etc/nvidia-container-runtime/config.toml",
    "usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml",
)
ENVVAR_UNPRIVILEGED = "accept-nvidia-visible-devices-envvar-when-unprivileged"
VOLUME_MOUNTS = "accept-nvidia-visible-devices-as-volume-mounts"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MAX_CONFIG_BYTES = 1 << 20  # a toolkit config is a few KiB; anything larger is not one


@dataclass(frozen=True)
class Finding:
    setting: str  # the config key at fault, or "unreadable"
    path: str  # the file, as the host names it
    detail: str


def check_config(text: str, path: str) -> list[Finding]:
    """The settings of one toolkit config.toml that let a container ask for GPUs past carve (the toolkit's
    defaults apply to keys it does not set: env honoured, mounts not)."""
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return [Finding("unreadable", path, f"not TOML ({e}): the toolkit's defaults may apply")]
    out = []
    if config.get(ENVVAR_UNPRIVILEGED, True) is not False:
        out.append(
            Finding(
                ENVVAR_UNPRIVILEGED,
                path,
                "an unprivileged container whose image or pod sets NVIDIA_VISIBLE_DEVICES=all gets every GPU "
                "unless it holds a carve device (a pod's other containers do not); set it to false",
            )
        )
    if config.get(VOLUME_MOUNTS, False) is True:
        out.append(
            Finding(
                VOLUME_MOUNTS,
                path,
                "a container mounting /dev/null under /var/run/nvidia-container-devices/ gets the GPUs it "
                "names, whatever its env; set it to false unless NVIDIA's device plugin needs it",
            )
        )
    return out


def toolkit_findings(host_root: Path) -> list[Finding]:
    """Every finding of the toolkit configs present under `host_root` (the host's / as the plugin sees it)."""
    out: list[Finding] = []
    for rel in CONFIG_PATHS:
        path = host_root / rel
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except FileNotFoundError:
            continue
        except OSError as e:
            out.append(Finding("unreadable", f"/{rel}", f"cannot read: {e.strerror or e}"))
            continue
        if len(raw) > MAX_CONFIG_BYTES:
            out.append(Finding("unreadable", f"/{rel}", f"larger than {MAX_CONFIG_BYTES} bytes"))
            continue
        out += check_config(raw.decode("utf-8", errors="replace"), f"/{rel}")
    return out


def mig_manager(labels: dict[str, str] | None) -> str:
    """Why carve may not change MIG on this node ("" when it may): the GPU Operator's MIG manager owns it."""
    value = (labels or {}).get(MIG_CONFIG_LABEL)
    if value is None:
        return ""
    return (
        f"the GPU Operator's MIG manager manages MIG on this node (label {MIG_CONFIG_LABEL}={value}) and "
        "would undo carve's changes; disable it (migManager.enabled=false) or remove the label"
    )
