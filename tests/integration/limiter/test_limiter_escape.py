"""A container cannot lift its quota from the inside.

Not as root: writing, deleting or replacing its writable region, forging a limits file of its own (even on
a read-only mount the pod spec made: only the plugin's own mount of its claims directory is trusted),
rewriting its environment before the first CUDA call, or starting a child with a cleared environment. The
limits come only from the plugin's limits file, mounted read-only; a missing or malformed one fails closed.
A driver that looks up its own entry points neither reaches the hooks nor disturbs the limiter.

The container tests build the plugin's mounts in a private mount namespace (unshare -m, as root): a tmpfs
on /run, the claim's region file at /var/run/carve/<uid>/region and its limits directory bind-mounted
read-only at /var/run/carve/<uid>/limits, exactly as the CDI spec mounts them.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import CLIENT, LIMITER, REPO, Claim, write_claim

from driver.limits import ClaimLimits, DeviceLimit, create_region, limits_path_for, write_limits
from driver.limits.mounts import limits_source

MIB = 1 << 20
UID = "0f0e0d0c-claim"

ALLOC_9_MIB = """
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
ctx, dev, p = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
print("rc", cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(9 << 20)))
"""

# Root's attacks on the writable region, run inside the "container" before the allocation. What the kernel
# refuses (a mount point cannot be unlinked or renamed over: EBUSY) is printed and the attack goes on.
TRY = """
import os, sys
def attempt(what, fn):
    try:
        fn()
        print("attack:", what, "done", file=sys.stderr)
    except OSError as e:
        print("attack:", what, "refused:", e.strerror, file=sys.stderr)
"""
WRITE_REGION = """
from driver.limits.region import RegionStruct, DeviceStruct
import os
fd = os.open("{region}", os.O_RDWR)
devices = RegionStruct.devices.offset
os.pwrite(fd, (0).to_bytes(8, "little"), devices + DeviceStruct.memory_limit.offset)  # no memory limit
os.pwrite(fd, (0).to_bytes(4, "little"), devices + DeviceStruct.cores_limit.offset)
os.pwrite(fd, (2).to_bytes(4, "little"), RegionStruct.core_policy.offset)  # core_policy=disable
os.pwrite(fd, (0).to_bytes(8, "little"), devices + DeviceStruct.memory_used.offset)
"""
REPLACE_REGION = """
from driver.limits import ClaimLimits, DeviceLimit, create_region
create_region("/tmp/forged", ClaimLimits((DeviceLimit(0, 0, uuid="{uuid}"),), "{region}", "disable"))
forged = open("/tmp/forged", "rb").read()
attempt("rename over", lambda: os.rename("/tmp/forged", "{region}"))
attempt("rewrite in place", lambda: open("{region}", "wb").write(forged))
"""
FORGE_LIMITS = """
import os
from driver.limits import ClaimLimits, DeviceLimit, write_limits
# a claim of its own, named first, and its limits file, naming the same GPU without a limit
os.makedirs("/var/run/carve/000-forged/limits")
forged = ClaimLimits((DeviceLimit(0, 0, uuid="{uuid}"),), "/x")
write_limits("/var/run/carve/000-forged/limits/limits", forged)
for attempt in (lambda: open("{limits}", "r+b"), lambda: os.unlink("{limits}"),
                lambda: os.rename("/var/run/carve/000-forged/limits/limits", "{limits}")):
    try:
        attempt()
    except OSError:
        continue
    raise SystemExit("the plugin's limits file could be changed")
"""
ATTACKS = {
    "write-region": WRITE_REGION,
    # a deleted region would be re-created from the environment; a symlink must not be followed
    "delete-region": 'attempt("unlink", lambda: os.unlink("{region}"))',
    "symlink-region": 'attempt("unlink", lambda: os.unlink("{region}")); '
    'attempt("symlink", lambda: os.symlink("/dev/zero", "{region}"))',
    "replace-region": REPLACE_REGION,
    "forge-limits": FORGE_LIMITS,
}


def run_python(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)


def require_mount_namespace() -> None:
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode
    ):
        pytest.fail("these tests build the plugin's read-only mounts: they need root and unshare -m")


def contained_claim(claim) -> tuple[Claim, str]:
    """A claim on the fake GPUs for a test that builds mounts (the namespace checked first), and its GPU's
    UUID, which the claim's limits name."""
    require_mount_namespace()
    c = claim()
    return c, json.loads(c.run("uuids").stdout)[0]


def contained(
    c,
    tmp_path,
    attack: str,
    alloc: int,
    pod_mounts: str = "",
    claims_dir: str = "claims",
    uid: str = UID,
    **env: str,
) -> subprocess.CompletedProcess:
    """Mount the claim as the plugin does (CARVE_LIMITS_SOURCE as its CDI spec sets it), make the pod's own
    mounts (`pod_mounts`: shell, run in the namespace as the runtime would for the pod spec's volumes), run
    `attack` as root inside, then allocate `alloc` bytes with an environment that asks for no limit at all."""
    uuid = json.loads(c.run("uuids").stdout)[0]
    claims = tmp_path / claims_dir  # the plugin's <plugin-dir>/claims
    host = claims / uid
    mounted = f"/var/run/carve/{uid}"
    q_mounted = shlex.quote(mounted)
    host.mkdir(parents=True)
    write_claim(host / "region", ClaimLimits((DeviceLimit(8 * MIB, 0, uuid=uuid),), f"{mounted}/region"))
    env.setdefault("CARVE_LIMITS_SOURCE", limits_source(claims))
    if env["CARVE_LIMITS_SOURCE"] == "":
        del env["CARVE_LIMITS_SOURCE"]
    script = tmp_path / "attack.py"
    attack = attack.format(region=f"{mounted}/region", limits=f"{mounted}/limits/limits", uuid=uuid)
    script.write_text(TRY + attack)
    asked = {"CARVE_MEMORY_LIMIT": "1T", "CARVE_REGION": f"{mounted}/region", "CARVE_CORE_POLICY": "disable"}
    env = c.env(**{**asked, **env})
    if "CARVE_REGION_DIR" not in env_given(env, c):
        env.pop("CARVE_REGION_DIR")  # the default, /var/run/carve
    env["PYTHONPATH"] = str(REPO)
    # as the CDI spec mounts them: the region file alone read-write, the limits directory read-only
    setup = (
        f"mount -t tmpfs tmpfs /run && mkdir -p {q_mounted}/limits && touch {q_mounted}/region && "
        f"mount --bind {shlex.quote(str(host / 'region'))} {q_mounted}/region && "
        f"mount --bind {shlex.quote(str(host / 'limits'))} {q_mounted}/limits && "
        f"mount -o remount,bind,ro {q_mounted}/limits && "
        f"{pod_mounts.format(uuid=uuid) + ' && ' if pod_mounts else ''}"
        f'env -u LD_PRELOAD "{sys.executable}" "{script}" && exec "{CLIENT}" alloc {alloc}'
    )
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", setup], env=env, capture_output=True, text=True, timeout=60
    )


def env_given(env: dict[str, str], c) -> dict[str, str]:
    return {k: v for k, v in c.extra.items() if k in env}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_root_in_the_container_cannot_lift_its_quota(claim, tmp_path, attack):
    require_mount_namespace()
    c = claim()
    out = contained(c, tmp_path, ATTACKS[attack], 64 * MIB)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2", out.stderr  # CUDA_ERROR_OUT_OF_MEMORY: the plugin's 8 MiB hold
    if attack in ("delete-region", "symlink-region"):
        assert "refused: Device or resource busy" in out.stderr  # the region is a mount point
    within = contained(c, tmp_path / "within", ATTACKS[attack], 4 * MIB)
    assert within.stdout.strip() == "0", within.stderr  # and the quota is the plugin's, not "refuse all"


@pytest.mark.parametrize("damage", ["deleted", "symlink", "garbage"])
def test_a_claim_whose_region_is_gone_or_broken_fails_closed(claim, damage):
    # Where the region is not a mount point (outside a container), removing or breaking it must not open the
    # claim up: each process would otherwise get the whole quota of its own.
    c = claim().create(memory=64 * MIB)
    c.region.unlink()
    if damage == "symlink":
        c.region.symlink_to("/dev/zero")
    elif damage == "garbage":
        c.region.write_bytes(b"x" * 4096)
    out = c.run("alloc", str(1 * MIB), CARVE_MEMORY_LIMIT="1T")
    assert out.stdout.strip() == "2", out.stderr
    assert "is unusable: allocations on this claim's GPUs are refused" in out.stderr
    assert not c.region.exists() or damage != "deleted"  # never re-created from the environment


@pytest.mark.parametrize(
    "damage",
    ["missing", "truncated", "symlink", "fifo", "bad-version", "not-a-directory"],
)
def test_a_missing_or_malformed_limits_file_fails_closed(claim, damage):
    c = claim().create(memory=64 * MIB)
    limits = c.limits
    data = limits.read_bytes()
    limits.unlink()
    if damage == "truncated":
        limits.write_bytes(data[:100])
    elif damage == "symlink":
        (limits.parent / "real").write_bytes(data)
        limits.symlink_to(limits.parent / "real")
    elif damage == "fifo":
        os.mkfifo(limits)
    elif damage == "bad-version":
        limits.write_bytes(data[:8] + (99).to_bytes(4, "little") + data[12:])
    elif damage == "not-a-directory":  # open(2) fails with neither ENOENT nor ELOOP: ENOTDIR
        limits.parent.rmdir()
        limits.parent.write_bytes(data)
    out = c.run("alloc", str(1 * MIB), CARVE_MEMORY_LIMIT="1T", timeout=20)
    assert out.stdout.strip() == "2", out.stderr  # never open: nothing can be allocated
    # the line names the file and what is wrong with it: the admin's one clue to which damage it was
    problem = {
        "missing": "is missing",
        "truncated": "size does not match this layout",
        "symlink": "is a symlink",
        "fifo": "is not a regular file",
        "bad-version": "foreign limits version",
        "not-a-directory": "cannot be opened",
    }[damage]
    assert f"limits {limits} {problem}: " in out.stderr and "refused" in out.stderr, out.stderr


def test_the_limits_file_wins_over_the_environment_and_the_region(claim):
    c = claim().create(memory=8 * MIB)
    create_region(c.region, ClaimLimits((DeviceLimit(0, 0),), str(c.region), "disable"))  # no limit in it
    assert c.run("alloc", str(9 * MIB), CARVE_MEMORY_LIMIT="1T").stdout.strip() == "2"
    write_limits(limits_path_for(c.region), ClaimLimits((DeviceLimit(16 * MIB, 0),), str(c.region)))
    assert c.run("alloc", str(9 * MIB), CARVE_MEMORY_LIMIT="1").stdout.strip() == "0"


@pytest.mark.parametrize("plugin_region", [True, False], ids=["plugin-region", "environment-only"])
def test_rewriting_the_environment_before_the_first_cuda_call_changes_nothing(claim, plugin_region):
    c = claim()
    if plugin_region:
        c.create(memory=8 * MIB)
    escape = textwrap.dedent(
        """
        import os
        for name in [n for n in os.environ if n.startswith(("CARVE_", "CUDA_DEVICE_"))]:
            del os.environ[name]  # unsetenv
        os.environ["CARVE_MEMORY_LIMIT"] = "1T"  # putenv
        os.environ["CARVE_REGION_DIR"] = "/nonexistent"
        """
    )
    out = run_python(escape + ALLOC_9_MIB, c.env(CARVE_MEMORY_LIMIT=str(8 * MIB)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["rc", "2"], out.stderr  # still CUDA_ERROR_OUT_OF_MEMORY at 8 MiB


def test_limits_set_by_a_process_that_started_without_any_change_nothing(claim):
    # The snapshot is what the process started with, even when that is none of the limiter's variables (a
    # process outside any claim, on a driver that needs no configuration): a limit it sets itself before its
    # first CUDA call is not read, any more than a lifted one is. (The fake driver needs none of its
    # CARVE_FAKE_* variables: one private GPU by default.)
    c = claim()
    env = {k: v for k, v in c.env().items() if not k.startswith(("CARVE_", "CUDA_DEVICE_"))}
    assert env["LD_PRELOAD"]  # the limiter is loaded
    script = 'import os\nos.environ["CARVE_MEMORY_LIMIT"] = str(1 << 20)  # putenv\n'
    out = run_python(script + ALLOC_9_MIB, env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["rc", "0"], out.stderr  # no limit: the 1 MiB set at run time is not read


# Directories other than the plugin's /var/run/carve: one under the test's own, and two a character away
# from it, one sorting before and one after (glibc's strcmp answers -1 and 1 for them: the limiter asks
# only whether the two differ, never which sorts first).
ELSEWHERE = ["tmp", "/var/run/carvd", "/var/run/carvf"]


@pytest.mark.parametrize("elsewhere", ELSEWHERE)
def test_a_child_with_a_rewritten_environment_is_held_by_the_plugins_mounted_regions(
    claim, tmp_path, elsewhere: str
):
    # The child's environment has no CARVE_REGION and points CARVE_REGION_DIR elsewhere, as
    # `env -i CARVE_REGION_DIR=/x app` would (ld.so.preload, not the environment, loads the limiter in a
    # container: LD_PRELOAD stands in for it here).
    require_mount_namespace()
    c = claim()
    c.extra = {"CARVE_REGION_DIR": str(tmp_path / "elsewhere") if elsewhere == "tmp" else elsewhere}
    out = contained(c, tmp_path, "pass", 9 * MIB, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2", out.stderr  # OUT_OF_MEMORY: the mounted claim's 8 MiB hold


def test_the_drivers_lookups_of_its_own_entry_points_get_the_driver_not_the_hooks(claim):
    # The fake libcuda looks up cuMemAlloc_v2 on its own handle from its constructor (while it is loaded)
    # and again later; both answers must be its own function. The limiter keeps working afterwards.
    c = claim().create(memory=8 * MIB)
    script = textwrap.dedent(
        f"""
        import ctypes
        cuda = ctypes.CDLL("libcuda.so.1")
        hook = ctypes.cast(ctypes.CDLL("{LIMITER}").cuMemAlloc_v2, ctypes.c_void_p).value
        seen_by_app = ctypes.cast(cuda.cuMemAlloc_v2, ctypes.c_void_p).value
        cuda.carveFakeCudaCtorLookup.restype = ctypes.c_void_p
        cuda.carveFakeCudaSelfLookup.restype = ctypes.c_void_p
        at_load = cuda.carveFakeCudaCtorLookup()
        later = cuda.carveFakeCudaSelfLookup(b"cuMemAlloc_v2")
        print("lookups", int(seen_by_app == hook), int(at_load == later), int(later not in (None, hook)))
        """
    )
    out = run_python(script + ALLOC_9_MIB, c.env(CARVE_FAKE_CTOR_LOOKUP="cuMemAlloc_v2"))
    assert out.returncode == 0, out.stderr
    # the application gets the hook; the driver, both times, its own function; the quota still holds
    assert out.stdout.split() == ["lookups", "1", "1", "1", "rc", "2"], out.stderr


def forged_limits(tmp_path, uuid: str, memory: int) -> str:
    """A limits directory the pod brings (a configMap, a volume), naming the claim's GPU with `memory`, and
    a region file beside it (copied into the pod's writable /var/run/carve/000-forged/ by POD_MOUNTS)."""
    forged = tmp_path / "forged" / "limits"
    forged.mkdir(parents=True, exist_ok=True)
    limits = ClaimLimits((DeviceLimit(memory, 0, uuid=uuid),), "/x")
    write_limits(forged / "limits", limits)
    create_region(forged.parent / "region", limits)
    return str(forged)


# The pod's own read-only mounts of a limits directory at /var/run/carve/000-forged/limits (named before
# the claim, so the limiter meets it first): how a pod spec can make one without any capability.
POD_MOUNTS = {
    # a readOnly volumeMount of a directory on the node's disk: the plugin's device, another root
    "read-only-volume": "mkdir -p /run/carve/000-forged/limits"
    " && cp {forged}/../region /run/carve/000-forged/"
    " && mount --bind {forged} /run/carve/000-forged/limits"
    " && mount -o remount,bind,ro /run/carve/000-forged/limits",
    # a memory emptyDir whose subPath copies the plugin's path: the plugin's root, another device
    "tmpfs-subpath": "mkdir -p /mnt/vol && mount -t tmpfs tmpfs /mnt/vol"
    " && mkdir -p /mnt/vol{claims}/000-forged && cp -r {forged} /mnt/vol{claims}/000-forged/"
    " && mkdir -p /run/carve/000-forged/limits && cp {forged}/../region /run/carve/000-forged/"
    " && mount --bind /mnt/vol{claims}/000-forged/limits /run/carve/000-forged/limits"
    " && mount -o remount,bind,ro /run/carve/000-forged/limits",
}


@pytest.mark.parametrize("kind", sorted(POD_MOUNTS))
def test_a_read_only_mount_the_pod_made_is_not_trusted(claim, tmp_path, kind):
    # A process that dropped CARVE_REGION (keeping the rest of the CDI environment) has no primary claim:
    # the limiter meets the pod's forged limits first. On a read-only mount with the right mode it used to
    # be "trusted" and lift the quota; only the plugin's own mount is trusted now.
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 0)  # no memory limit
    mounts = POD_MOUNTS[kind].format(forged=forged, claims=str(tmp_path / "claims"), uuid="{uuid}")
    out = contained(c, tmp_path, "pass", 9 * MIB, pod_mounts=mounts, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2", out.stderr  # OUT_OF_MEMORY: the plugin's 8 MiB hold


@pytest.mark.parametrize(
    ("claims_dir", "uid", "source_tail"),
    [
        ("claims", UID, ""),
        # mountinfo writes a space as \040, a backslash as \134 (CARVE_LIMITS_SOURCE as mountinfo does): the
        # mount point and root are unescaped before they are compared with the real paths
        ("plugin dir/claims", "0f0e0d0c claim\\1", ""),
        # "<root>/" names the same directory as "<root>"
        ("claims", UID, "/"),
    ],
)
def test_the_plugins_own_mount_is_trusted_over_a_tighter_file_of_the_pods(
    claim, tmp_path, claims_dir, uid, source_tail
):
    # The pod's own (writable) limits directory names the GPU with 4 MiB; the plugin's mount says 8 MiB.
    # Trusted, the plugin's wins: 6 MiB fits. (Were the plugin's mount not recognised, the tightest of the
    # untrusted files would hold: 4 MiB.)
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    mounts = f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
    source = limits_source(tmp_path / claims_dir) + source_tail
    out = contained(
        c,
        tmp_path,
        "pass",
        6 * MIB,
        pod_mounts=mounts,
        claims_dir=claims_dir,
        uid=uid,
        CARVE_REGION="",
        CARVE_LIMITS_SOURCE=source,
    )
    assert out.stdout.strip() == "0", out.stderr


def test_a_mount_made_after_the_plugins_at_another_point_does_not_decide_its_trust(claim, tmp_path):
    # Only the last entry at the plugin's own mount point decides (an over-mount): a pod's volume mounted
    # after it at a point that sorts before it (/run/a < /run/carve/...) is another mount point, not one on
    # top of the plugin's, so the plugin's mount stays trusted and its 8 MiB win over the pod's 4 MiB.
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    mounts = (
        f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
        " && mkdir -p /run/a && mount -t tmpfs tmpfs /run/a"
    )
    out = contained(c, tmp_path, "pass", 6 * MIB, pod_mounts=mounts, CARVE_REGION="")
    assert out.stdout.strip() == "0", out.stderr


def test_without_the_plugins_anchor_the_tightest_limits_file_holds(claim, tmp_path):
    # a process that cleared its environment (no CARVE_LIMITS_SOURCE) trusts no file: the pod's 4 MiB hold
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    mounts = f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
    blind = contained(
        c, tmp_path, "pass", 6 * MIB, pod_mounts=mounts, CARVE_REGION="", CARVE_LIMITS_SOURCE=""
    )
    assert blind.stdout.strip() == "2", blind.stderr


def test_a_gpu_of_a_claim_that_failed_closed_reports_one_byte_all_in_use(claim):
    # what nvidia-smi, cuMemGetInfo and frameworks see on a GPU where nothing may be allocated: no room
    c = claim().create(memory=64 * MIB)
    c.limits.unlink()
    c.limits.write_bytes(b"\0" * 64)  # a malformed limits file: the claim fails closed
    out = c.json("info")
    seen = {k: out[k] for k in ("total", "free", "device_total", "nvml_total", "nvml_used", "nvml_free")}
    one_byte = {"total": 1, "free": 0, "device_total": 1, "nvml_total": 1, "nvml_used": 1, "nvml_free": 0}
    assert seen == one_byte, out


@pytest.mark.parametrize("shift", ["minor above", "major above", "below"])
def test_a_plugins_anchor_on_another_device_trusts_no_file(claim, tmp_path, shift):
    # CARVE_LIMITS_SOURCE names the plugin's claims directory by its device (major:minor) and root: the same
    # root on a device one number off, either way, is not the plugin's mount, so the pod's 4 MiB hold.
    # "below": the minor number below, or the major one when the minor is 0 (no device is 0:0).
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    mounts = f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
    major, minor, root = limits_source(tmp_path / "claims").split(":", 2)
    major, minor = int(major), int(minor)
    if shift == "minor above":
        minor += 1
    elif shift == "major above":
        major += 1
    elif minor:
        minor -= 1
    else:
        major -= 1
    source = f"{major}:{minor}:{root}"
    out = contained(
        c, tmp_path, "pass", 6 * MIB, pod_mounts=mounts, CARVE_REGION="", CARVE_LIMITS_SOURCE=source
    )
    assert out.stdout.strip() == "2", out.stderr
