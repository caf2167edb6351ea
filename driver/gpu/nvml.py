"""GPU inventory through pynvml: loading NVML (real, or the fake library for `--gpus fake:...`) and
reading Gpu records, MIG profiles, placements and live MIG instances. No MIG table lives here: every
profile and placement is what NVML reports.

NVML is loaded and initialised once per process and stays initialised; the fake library reads its
topology once, so a process cannot switch to another fake topology (that is an error, not a surprise).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from driver import names
from driver.gpu import pcie
from driver.gpu.model import Gpu, InventoryError, MigInstance, MigPlacement, MigProfile
from driver.resources import native_dir

MI = 1024**2
FAKE_LIBRARY = "libnvidia-ml.so.1"
ENV_FAKE_LIB_DIR = "CARVE_FAKE_LIB_DIR"

T = TypeVar("T")

# NVML architecture ids -> names, from pynvml's own NVML_DEVICE_ARCH_* constants (not a table of ours).
_ARCHITECTURES = {
    getattr(pynvml, n): n.removeprefix("NVML_DEVICE_ARCH_").lower()
    for n in dir(pynvml)
    if n.startswith("NVML_DEVICE_ARCH_") and n != "NVML_DEVICE_ARCH_UNKNOWN"
}
# GPU-instance profile index -> name suffix, used only when NVML gives no profile name (v1 info).
_PROFILE_SUFFIX = {"_REV1": "+me", "_GFX": "+gfx", "_NO_ME": "-me", "_ALL_ME": "+me.all"}
_GONE = (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument)
_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)


@dataclass
class _Session:
    backend: str | None = None  # "nvml" or "fake:<spec>"


_session = _Session()
_lock = threading.RLock()


def fake_library_path() -> Path:
    """Where `--gpus fake:...` loads the fake NVML from: $CARVE_FAKE_LIB_DIR, else the native build."""
    base = os.environ.get(ENV_FAKE_LIB_DIR) or str(native_dir() / "fakes")
    return Path(base) / FAKE_LIBRARY


def _fake_spec(gpus: str) -> str:
    from driver.devices.base import ModelError  # the catalog knows the emulated models
    from driver.devices.catalog import parse_fake_spec

    spec = gpus.removeprefix("fake:").strip()
    try:
        keys = parse_fake_spec(spec)
    except ModelError as e:
        raise InventoryError(f"--gpus: {e}") from None
    counts: list[tuple[str, int]] = []
    for key in keys:  # canonical form: consecutive runs, "2xA100-80GB,1xT4"
        if counts and counts[-1][0] == key:
            counts[-1] = (key, counts[-1][1] + 1)
        else:
            counts.append((key, 1))
    return ",".join(f"{n}x{k}" for k, n in counts)


def load(gpus: str = "nvml", node_name: str | None = None) -> str:
    """Load and initialise NVML for this process (idempotent); returns the backend in use."""
    gpus = (gpus or "nvml").strip()
    if gpus == "nvml":
        backend = "nvml"
    elif gpus.startswith("fake:"):
        backend = "fake:" + _fake_spec(gpus)
    else:
        raise InventoryError(
            f"--gpus {gpus!r}: expected 'nvml' or 'fake:<count>x<model>,...' (e.g. fake:2xA100-80GB)"
        )
    with _lock:
        if _session.backend is not None:
            if _session.backend != backend:
                raise InventoryError(
                    f"this process already uses GPUs from {_session.backend}; it cannot switch to {backend} "
                    "(NVML is loaded once per process; start a new process)"
                )
            return backend
        if backend.startswith("fake:"):
            _load_fake(backend.removeprefix("fake:"), node_name)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            raise InventoryError(
                "NVML (libnvidia-ml.so.1) not found: no NVIDIA driver on this machine; "
                "use --gpus fake:2xA100-80GB,1xT4 to emulate GPUs"
            ) from None
        except pynvml.NVMLError as e:
            raise InventoryError(f"NVML initialisation failed ({backend}): {e}") from None
        _session.backend = backend
        return backend


def _load_fake(spec: str, node_name: str | None) -> None:
    path = fake_library_path()
    os.environ[names.ENV_FAKE_GPUS] = spec
    if not os.environ.get(names.ENV_FAKE_SEED):
        os.environ[names.ENV_FAKE_SEED] = node_name or os.environ.get("NODE_NAME") or "carve-fake"
    try:
        # Loaded by path first, with RTLD_GLOBAL: pynvml's later CDLL("libnvidia-ml.so.1") then resolves
        # to this already-loaded object by its soname, so pynvml's unmodified code path runs on the fake.
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise InventoryError(
            f"fake NVML library {path} cannot be loaded ({e}); build it with `make native`"
        ) from None
    if not hasattr(lib, "carveFakeVersion"):
        raise InventoryError(f"{path} is not carve's fake NVML library (no carveFakeVersion)")


def backend() -> str | None:
    """The backend this process loaded ("nvml", "fake:<spec>"), None before the first load()."""
    return _session.backend


def call(what: str, fn: Callable[..., T], *args: Any) -> T:
    """An NVML call whose failure becomes an InventoryError naming the object and the call."""
    try:
        return fn(*args)
    except pynvml.NVMLError as e:
        raise InventoryError(f"{what}: {fn.__name__}: {e}") from None


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _pci_bus_id(raw: str | bytes) -> str:
    """NVML's "00000000:3B:00.0" -> "0000:3b:00.0" (the sysfs / Kubernetes form)."""
    domain, bus, rest = _text(raw).strip().lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{rest}"


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _multiprocessors(what: str, handle: Any, cc: tuple[int, int], profiles: tuple[MigProfile, ...]) -> int:
    """SM count from nvmlDeviceGetAttributes. NVML documents that call for MIG handles only, so a driver
    may refuse it for a whole GPU; then CUDA cores / cores per SM (64 up to Volta/Turing and GA100, 128
    from GA10x on, as in the CUDA programming guide); a MIG-enabled GPU may refuse that too, and only then
    the largest MIG profile's SMs stand in (fewer than the GPU has on an A100: 98 of 108)."""
    try:
        return int(pynvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
    except _UNSUPPORTED:
        pass
    except pynvml.NVMLError as e:
        raise InventoryError(f"{what}: nvmlDeviceGetAttributes (multiprocessor count): {e}") from None
    try:
        cores = int(pynvml.nvmlDeviceGetNumGpuCores(handle))
    except _UNSUPPORTED:
        if not profiles:
            raise InventoryError(
                f"{what}: neither nvmlDeviceGetAttributes nor nvmlDeviceGetNumGpuCores gives the SM count"
            ) from None
        return max(p.multiprocessors for p in profiles)
    except pynvml.NVMLError as e:
        raise InventoryError(f"{what}: nvmlDeviceGetNumGpuCores: {e}") from None
    return cores // (64 if cc <= (8, 0) else 128)


def _profile_name(index: int, info: Any) -> str:
    name = _text(getattr(info, "name", b"") or b"").strip()
    if name:
        return name.removeprefix("MIG ").strip()
    const = next(
        (
            n
            for n in dir(pynvml)
            if n.startswith("NVML_GPU_INSTANCE_PROFILE_") and getattr(pynvml, n) == index
        ),
        "",
    )
    suffix = next((s for key, s in _PROFILE_SUFFIX.items() if const.endswith(key)), "")
    return f"{info.sliceCount}g.{round(info.memorySizeMB / 1024)}gb{suffix}"


def _placements(what: str, handle: Any, profile_id: int) -> tuple[MigPlacement, ...]:
    count = ctypes.c_uint(0)
    # NULL first to learn the count, as NVML documents; then the array.
    call(
        what, pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, handle, profile_id, None, ctypes.byref(count)
    )
    array = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    call(
        what,
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements,
        handle,
        profile_id,
        array,
        ctypes.byref(count),
    )
    return tuple(MigPlacement(array[i].start, array[i].size) for i in range(count.value))


def read_profiles(what: str, handle: Any) -> tuple[MigProfile, ...]:
    """Every GPU-instance profile NVML reports for the GPU, with its possible placements."""
    profiles = []
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except pynvml.NVMLError_FunctionNotFound:
            info = call(what, pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, index, 1)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            continue  # a profile this GPU does not have
        except pynvml.NVMLError as e:
            raise InventoryError(f"{what}: nvmlDeviceGetGpuInstanceProfileInfo({index}): {e}") from None
        profiles.append(
            MigProfile(
                id=info.id,
                index=index,
                name=_profile_name(index, info),
                compute_slices=info.sliceCount,
                memory_bytes=info.memorySizeMB * MI,
                multiprocessors=info.multiprocessorCount,
                copy_engines=info.copyEngineCount,
                decoders=info.decoderCount,
                encoders=info.encoderCount,
                jpegs=info.jpegCount,
                ofas=info.ofaCount,
                max_instances=info.instanceCount,
                placements=_placements(f"{what} profile {info.id}", handle, info.id),
            )
        )
    return tuple(profiles)


def _gpu_instances(what: str, handle: Any, profile: MigProfile) -> list[Any]:
    count = ctypes.c_uint(0)
    array = (pynvml.c_nvmlGpuInstance_t * max(profile.max_instances, len(profile.placements), 1))()
    call(what, pynvml.nvmlDeviceGetGpuInstances, handle, profile.id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def compute_instances(what: str, gpu_instance: Any) -> list[Any]:
    """All compute instances of a GPU instance, over every CI profile it supports."""
    found = []
    for index in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gpu_instance, index, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except (*_UNSUPPORTED, pynvml.NVMLError_InvalidArgument):
            continue
        except pynvml.NVMLError as e:
            raise InventoryError(
                f"{what}: nvmlGpuInstanceGetComputeInstanceProfileInfo({index}): {e}"
            ) from None
        count = ctypes.c_uint(0)
        array = (pynvml.c_nvmlComputeInstance_t * max(info.instanceCount, 1))()
        call(
            what, pynvml.nvmlGpuInstanceGetComputeInstances, gpu_instance, info.id, array, ctypes.byref(count)
        )
        found.extend(array[i] for i in range(count.value))
    return found


def _mig_handles(what: str, handle: Any) -> dict[tuple[int, int], Any]:
    """(GPU instance id, compute instance id) -> MIG device handle."""
    handles = {}
    for k in range(call(what, pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, k)
        except (*_GONE, *_UNSUPPORTED):
            continue
        except pynvml.NVMLError as e:
            raise InventoryError(f"{what}: nvmlDeviceGetMigDeviceHandleByIndex({k}): {e}") from None
        gi = call(what, pynvml.nvmlDeviceGetGpuInstanceId, mig)
        ci = call(what, pynvml.nvmlDeviceGetComputeInstanceId, mig)
        handles[(gi, ci)] = mig
    return handles


def read_instance(what: str, handle: Any, profile: MigProfile, gpu_instance: Any, migs=None) -> MigInstance:
    """One live GPU instance as a MigInstance (its first compute instance; uuid "" and id -1 without one)."""
    info = call(what, pynvml.nvmlGpuInstanceGetInfo, gpu_instance)
    placement = MigPlacement(info.placement.start, info.placement.size)
    cis = compute_instances(what, gpu_instance)
    ci_id = call(what, pynvml.nvmlComputeInstanceGetInfo, cis[0]).id if cis else -1
    mig = (migs if migs is not None else _mig_handles(what, handle)).get((info.id, ci_id))
    uuid, memory, sms = "", profile.memory_bytes, profile.multiprocessors
    if mig is not None:
        uuid = call(what, pynvml.nvmlDeviceGetUUID, mig)
        memory = call(what, pynvml.nvmlDeviceGetMemoryInfo, mig).total
        with contextlib.suppress(pynvml.NVMLError):  # else keep the profile's SM count
            sms = int(pynvml.nvmlDeviceGetAttributes(mig).multiprocessorCount)
    return MigInstance(
        uuid=uuid,
        profile_id=profile.id,
        profile_name=profile.name,
        placement=placement,
        gpu_instance_id=info.id,
        compute_instance_id=ci_id,
        memory_bytes=memory,
        multiprocessors=sms,
    )


def read_instances(what: str, handle: Any, profiles: tuple[MigProfile, ...]) -> tuple[MigInstance, ...]:
    migs = _mig_handles(what, handle)
    instances = [
        read_instance(what, handle, profile, gi, migs)
        for profile in profiles
        for gi in _gpu_instances(what, handle, profile)
    ]
    return tuple(sorted(instances, key=lambda m: (m.placement.start, m.gpu_instance_id)))


def mig_mode(what: str, handle: Any) -> tuple[bool, bool, bool]:
    """(capable, current enabled, pending enabled); NOT_SUPPORTED means the GPU has no MIG."""
    try:
        current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    except _UNSUPPORTED:
        return False, False, False
    except pynvml.NVMLError as e:
        raise InventoryError(f"{what}: nvmlDeviceGetMigMode: {e}") from None
    return True, current == pynvml.NVML_DEVICE_MIG_ENABLE, pending == pynvml.NVML_DEVICE_MIG_ENABLE


def memory_limits_supported(handle: Any) -> bool:
    """Whether the driver partitions this GPU's memory per cgroup: the limits API exists and does not
    answer NOT_SUPPORTED. The probe asks for the limits of the cgroup root, which has none: NOT_FOUND (or
    OPERATING_SYSTEM where /sys/fs/cgroup is not there) means the call is supported."""
    if not hasattr(pynvml, "nvmlDeviceGetMemoryLimits_v1"):
        return False  # bindings older than the API (nvidia-ml-py < 13.615)
    limits = pynvml.c_nvmlGetMemoryLimits_v1_t()
    limits.nameSpace = b"/sys/fs/cgroup"
    try:
        pynvml.nvmlDeviceGetMemoryLimits_v1(handle, limits)
    except (pynvml.NVMLError_NotFound, pynvml.NVMLError_OperatingSystem):
        return True
    except pynvml.NVMLError:
        return False  # NOT_SUPPORTED, FunctionNotFound (an older driver), or anything unexpected
    return True


def read_gpu(i: int, driver_version: str, cuda_version: str) -> Gpu:
    what = f"GPU {i}"
    handle = call(what, pynvml.nvmlDeviceGetHandleByIndex, i)
    uuid = call(what, pynvml.nvmlDeviceGetUUID, handle)
    what = f"GPU {i} ({uuid})"
    memory = call(what, pynvml.nvmlDeviceGetMemoryInfo, handle).total
    major, minor = call(what, pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    arch = call(what, pynvml.nvmlDeviceGetArchitecture, handle)
    capable, enabled, pending = mig_mode(what, handle)
    profiles = read_profiles(what, handle) if capable else ()
    return Gpu(
        uuid=uuid,
        index=call(what, pynvml.nvmlDeviceGetIndex, handle),
        minor=call(what, pynvml.nvmlDeviceGetMinorNumber, handle),
        product=call(what, pynvml.nvmlDeviceGetName, handle),
        memory_bytes=memory,
        multiprocessors=_multiprocessors(what, handle, (major, minor), profiles),
        architecture=_ARCHITECTURES.get(arch, "unknown"),
        cuda_compute_capability=f"{major}.{minor}",
        driver_version=driver_version,
        cuda_driver_version=cuda_version,
        pci_bus_id=_pci_bus_id(call(what, pynvml.nvmlDeviceGetPciInfo, handle).busId),
        mig_capable=capable,
        mig_enabled=enabled,
        mig_pending=pending if pending != enabled else None,
        mig_profiles=profiles,
        mig_instances=read_instances(what, handle, profiles) if enabled else (),
        memory_limits=memory_limits_supported(handle),
        numa_node=read_numa_node(what, handle),
    )


def read_numa_node(what: str, handle: Any) -> int | None:
    """The nearest NUMA node (nvmlDeviceGetMemoryAffinity, scope NODE), None where the driver does not
    support it or names none."""
    try:
        mask = pynvml.nvmlDeviceGetMemoryAffinity(handle, 1, pynvml.NVML_AFFINITY_SCOPE_NODE)
    except _UNSUPPORTED:
        return None
    except pynvml.NVMLError as e:
        raise InventoryError(f"{what}: nvmlDeviceGetMemoryAffinity: {e}") from None
    return pcie.numa_node(mask)


def sysfs_root() -> Path:
    """$CARVE_SYSFS_ROOT, else /sys; with fake GPUs, a stand-in tree of the fake topology (pcie.py)."""
    env = os.environ.get(names.ENV_SYSFS_ROOT)
    if env:
        return Path(env)
    if (backend() or "").startswith("fake:"):
        seed = os.environ.get(names.ENV_FAKE_SEED, "carve-fake")
        return Path(tempfile.gettempdir()) / f"carve-fake-sysfs-{os.getuid()}-{seed}"
    return Path("/sys")


def with_topology(gpus: list[Gpu]) -> list[Gpu]:
    """The GPUs with their PCIe root complexes read from sysfs."""
    root = sysfs_root()
    if (backend() or "").startswith("fake:") and not os.environ.get(names.ENV_SYSFS_ROOT):
        try:
            pcie.write_fake_sysfs(root, [(g.pci_bus_id, g.numa_node) for g in gpus])
        except OSError:
            # A read-only temp dir (a locked-down container): the fake GPUs go without pcieRoot, as a host
            # whose sysfs does not tell; inventory itself must not fail over an attribute.
            return gpus
    return [replace(g, pcie_root=pcie.pcie_root(root, g.pci_bus_id)) for g in gpus]


def discover(gpus: str = "nvml", node_name: str | None = None) -> list[Gpu]:
    """Every GPU of this machine (or of the fake topology), read through pynvml."""
    load(gpus, node_name)
    with _lock:
        driver_version = _text(call("NVML", pynvml.nvmlSystemGetDriverVersion))
        cuda_version = _cuda_version(call("NVML", pynvml.nvmlSystemGetCudaDriverVersion))
        count = call("NVML", pynvml.nvmlDeviceGetCount)
        return with_topology([read_gpu(i, driver_version, cuda_version) for i in range(count)])


def handle_by_uuid(gpu_uuid: str) -> Any:
    """The NVML handle of a GPU by UUID, loading NVML ("nvml" backend) if nothing is loaded yet."""
    if backend() is None:
        load("nvml")
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
    except pynvml.NVMLError as e:
        raise InventoryError(f"GPU {gpu_uuid}: not found ({e})") from None
