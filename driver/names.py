"""Every name carve shares with Kubernetes, containers and users: one place, so they never drift."""

from __future__ import annotations

# The DRA driver name; also the domain of every attribute and capacity carve publishes.
DRIVER_NAME = "gpu.carve.dev"
CONFIG_API_VERSION = "gpu.carve.dev/v1alpha1"
CRD_GROUP = "carve.dev"
CRD_VERSION = "v1alpha1"

# DeviceClasses, one per device type.
CLASS_GPU = "gpu.carve.dev"
CLASS_VGPU = "vgpu.carve.dev"
CLASS_SLOT = "slot.carve.dev"
CLASS_MIG = "mig.carve.dev"
CLASS_TIMESLICE = "timeslice.carve.dev"
CLASS_MPS = "mps.carve.dev"
# Soft slices whose memory the driver enforces (attribute memoryEnforcement == "driver").
CLASS_VGPU_STRICT = "vgpu-strict.carve.dev"
DEVICE_CLASSES = (CLASS_GPU, CLASS_VGPU, CLASS_SLOT, CLASS_MIG, CLASS_TIMESLICE, CLASS_MPS, CLASS_VGPU_STRICT)

# Device `type` attribute values.
TYPE_GPU = "gpu"
TYPE_VGPU = "vgpu"
TYPE_MIG = "mig"
TYPE_TIMESLICE = "timeslice"
TYPE_SLOT = "slot"
TYPE_MPS = "mps"

# Strategies (how one GPU is partitioned).
STRATEGY_EXCLUSIVE = "exclusive"
STRATEGY_SOFT = "soft"
STRATEGY_SLOTS = "slots"
STRATEGY_MIG = "mig"
STRATEGY_TIMESLICE = "timeslice"
STRATEGY_MPS = "mps"

# Memory enforcement backends of shareable devices (attribute `memoryEnforcement`; docs/enforcement.md):
# the driver's per-cgroup memory partition (NVML memory limits, CUDA 13.4 generation drivers) or carve's
# LD_PRELOAD limiter. `--memory-enforcement auto` takes the driver where a GPU supports it.
MEMORY_ENFORCEMENT_DRIVER = "driver"
MEMORY_ENFORCEMENT_LIMITER = "limiter"
MEMORY_ENFORCEMENT_AUTO = "auto"
MEMORY_ENFORCEMENT_ATTRIBUTE = "memoryEnforcement"
SHARING_ATTRIBUTE = "sharing"  # "mps" on the devices of the mps strategy

# CDI.
CDI_VENDOR = "k8s.gpu.carve.dev"
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"


def cdi_spec_file_name(claim_uid: str) -> str:
    """Transient CDI spec file name for one claim: <vendor>-<class>_<claim-uid>.json."""
    return f"{CDI_VENDOR}-{CDI_CLASS}_{claim_uid}.json"


def cdi_device_name(claim_uid: str, device: str, share_id: str | None = None) -> str:
    return f"{claim_uid}-{device}-{share_id}" if share_id else f"{claim_uid}-{device}"


def cdi_device_id(claim_uid: str, device: str, share_id: str | None = None) -> str:
    """Fully qualified CDI device id, as returned to the kubelet."""
    return f"{CDI_KIND}={cdi_device_name(claim_uid, device, share_id)}"


# Limiter.
LIMITER_LIBRARY = "libcarve-limiter.so"
LIMITER_BUILD_PATH = "native/build/libcarve-limiter.so"
LIMITER_CONTAINER_DIR = "/usr/local/carve/lib"
LIMITER_CONTAINER_PATH = f"{LIMITER_CONTAINER_DIR}/{LIMITER_LIBRARY}"
# The limiter's trust anchor (CARVE_LIMITS_SOURCE's value) as a file of the claim's directory, mounted
# read-only beside the limiter: a process chooses its children's environment, not the container's mounts,
# so where the file is the limiter does not read the variable (native/src/limits.c, LIMITS_SOURCE_FILE)
LIMITS_SOURCE_FILE = "limits-source"
LIMITS_SOURCE_CONTAINER_PATH = f"{LIMITER_CONTAINER_DIR}/{LIMITS_SOURCE_FILE}"

# The CDI createContainer hook (native/hook) and the static ldconfig it runs: installed next to the limiter
# (--limiter-dir) by the chart's init container; in the image under /usr/local/carve/bin.
HOOK_BINARY = "carve-cdi-hook"
HOOK_BUILD_PATH = "native/build/carve-cdi-hook"
LDCONFIG_BINARY = "carve-ldconfig"
# MPS (driver/plugin/mps): the control daemon from the driver root, and where clients find its pipes.
MPS_CONTROL_BINARY = "nvidia-cuda-mps-control"
MPS_CONTAINER_PIPE_DIR = "/var/run/carve/mps"
MPS_CONTAINER_SHM_DIR = "/dev/shm"  # the daemons' shared memory directory in an mps client (--mps-shm-dir)
ENV_FAKE_PROC_ROOT = "CARVE_FAKE_PROC_ROOT"  # where the fake NVML writes MIG capability files

# Kubelet plugin sockets.
DEFAULT_PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRIVER_NAME}"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_CDI_DIR = "/var/run/cdi"
# Per-boot state of the plugin (each prepared claim's directory: region, limits file): a tmpfs on every
# distribution, so creating a claim's files costs no disk work (driver/plugin/claims/dirs.py).
DEFAULT_RUN_DIR = "/run/carve"
REGISTRATION_SOCKET = f"{DRIVER_NAME}-reg.sock"
DRA_SOCKET = "dra.sock"
CHECKPOINT_FILE = "checkpoint.json"

# Legacy (device plugin) resources, HAMi-compatible.
LEGACY_GPU = "nvidia.com/gpu"
LEGACY_GPUMEM = "nvidia.com/gpumem"
LEGACY_GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
LEGACY_GPUCORES = "nvidia.com/gpucores"
LEGACY_PRIORITY = "nvidia.com/priority"

# Environment contract between the plugin and the limiter (see docs/limiter.md).
ENV_MEMORY_LIMIT = "CARVE_MEMORY_LIMIT"
ENV_CORES_LIMIT = "CARVE_CORES_LIMIT"
ENV_CORE_POLICY = "CARVE_CORE_POLICY"
ENV_PRIORITY = "CARVE_PRIORITY"
ENV_OOM_POLICY = "CARVE_OOM_POLICY"
ENV_REGION = "CARVE_REGION"
ENV_LIMITS_SOURCE = "CARVE_LIMITS_SOURCE"  # <major>:<minor>:<root> of the claims dir (limits/mounts.py)
ENV_LOG = "CARVE_LOG"

# Fake GPU libraries (native/fakes).
ENV_FAKE_GPUS = "CARVE_FAKE_GPUS"
ENV_FAKE_SEED = "CARVE_FAKE_SEED"
ENV_FAKE_STATE = "CARVE_FAKE_STATE"
# Where the GPUs' PCIe root complexes are read (driver/gpu/pcie.py): the host's sysfs, default /sys; with
# fake GPUs and this unset, a stand-in tree of the fake topology.
ENV_SYSFS_ROOT = "CARVE_SYSFS_ROOT"

# `carve allocate`: annotation on a claim that could not be allocated, saying why.
ALLOCATE_REASON_ANNOTATION = "allocate.carve.dev/reason"

# Legacy shim (driver/legacy, docs/legacy.md): the device plugin's socket and kubelet paths, the node
# annotation carrying its GPU inventory, the trusted assignment records the extender writes, and the HAMi pod
# annotations carve honours.
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEVICE_PLUGIN_SOCKET = "carve-gpu.sock"
KUBELET_SOCKET = "kubelet.sock"
KUBELET_DEVICE_CHECKPOINT = "kubelet_internal_checkpoint"  # the kubelet device manager's, beside it
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LEGACY_SCHEDULER_NAME = "carve-scheduler"
LEGACY_NODE_LABEL = "gpu.carve.dev/legacy"  # "true": the node runs the legacy device plugin, not the DRA one
# On a Node: strategy rules for its GPUs (driver/devices/rules.py grammar), over the chart's --strategy.
ANNOTATION_STRATEGY = "gpu.carve.dev/strategy"
LEGACY_INVENTORY_ANNOTATION = "gpu.carve.dev/legacy-gpus"
LEGACY_ASSIGNMENT_ANNOTATION = "gpu.carve.dev/legacy-assignment"  # on the pod: informational only
LEGACY_RECORD_LABEL = "gpu.carve.dev/legacy-record"
LEGACY_RECORD_NODE_LABEL = "gpu.carve.dev/node"
LEGACY_RECORD_PREFIX = "carve-legacy-"
LEGACY_CDI_PREFIX = "legacy-"  # CDI "claim uid" of an allocation: legacy-<allocation key>
HAMI_USE_GPUTYPE = "nvidia.com/use-gputype"
HAMI_NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
HAMI_USE_GPUUUID = "nvidia.com/use-gpuuuid"
HAMI_NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
HAMI_NODE_POLICY = "hami.io/node-scheduler-policy"
HAMI_GPU_POLICY = "hami.io/gpu-scheduler-policy"

# Namespace GPU budgets (driver/quota, docs/quota.md): labels on a Namespace, set by whoever may update
# Namespaces (cluster admins; the built-in admin and edit roles may not), summed over the capacity requests
# of soft-slice and MPS claims and enforced by the controller's validating webhook.
BUDGET_LABEL_PREFIX = "budget.gpu.carve.dev/"
BUDGET_MEMORY_LABEL = f"{BUDGET_LABEL_PREFIX}memory"  # a quantity: 40Gi
BUDGET_CORES_LABEL = f"{BUDGET_LABEL_PREFIX}cores"  # percent of one GPU's SMs, summed: 250
# HAMi conversion (driver/convert, docs/migrate-from-hami.md): the ResourceClaimTemplates the mutating webhook
# creates carry this label; the pods it rewrote carry the annotation (what each container asked before).
CONVERTED_LABEL = "gpu.carve.dev/converted-from"
CONVERTED_ANNOTATION = "gpu.carve.dev/converted-from-hami"
