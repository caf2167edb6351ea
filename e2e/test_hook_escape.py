"""A hostile image against carve's createContainer hooks, on real containers (containerd + runc).

Issue 17's HIGH finding, end to end: runc runs carve-cdi-hook from the container's init, whose
/proc/1/root is the node's "/". An image whose /etc is a symlink to /proc/1/root/<canary>/etc used to make
the preload hook rewrite the node's file there. Here a canary directory on the node (this machine: the
e2e nodes are local processes) stands for the node's /etc, an image pointing at it is built and imported
into the node's containerd, and a pod with a soft-slice claim runs it: the pod must not start, its
container must report the hook's message naming the path, and the canary must be byte for byte as it was.
A second image carries a library whose SONAME climbs out of its directory into the canary: the pod
starts (the hook drops that SONAME from the ld cache, ldconfig makes no links) and the canary is intact.
Skipped, naming the runtime, on a cluster started with the fake CRI on purpose.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from kubernetes import client

from driver import names
from e2e import kube
from e2e.cluster import images

N1 = "e2e-n1"


@pytest.fixture(autouse=True)
def real_containers(cluster):
    if cluster.runtime != "containerd":
        pytest.skip(f"needs real containers; this cluster runs the {cluster.runtime} runtime on purpose")


@pytest.fixture
def canary():
    top = Path(tempfile.mkdtemp(prefix="carve-e2e-canary-"))
    (top / "etc/ld.so.conf.d").mkdir(parents=True)
    (top / "etc/ld.so.preload").write_text("/canary/not-the-limiter.so\n")
    (top / "etc/ld.so.cache").write_bytes(b"canary cache")
    (top / "usr/lib64").mkdir(parents=True)
    (top / "usr/lib64/libc.so.6").write_text("canary lib")
    yield top
    shutil.rmtree(top, ignore_errors=True)


def snapshot(top: Path) -> dict[str, tuple[str, bytes | str]]:
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(top))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            else:
                out[rel] = ("dir", "") if p.is_dir() else ("file", p.read_bytes())
    return out


def hostile_image(cluster, tmp: Path, name: str, plant) -> str:
    """busybox with `plant(rootfs)` applied, imported into N1's containerd as docker.io/e2e/<name>:1."""
    rootfs = tmp / name
    images.busybox_rootfs(rootfs)
    plant(rootfs)
    ref = f"docker.io/e2e/{name}:1"
    tarball = images.oci_tarball(ref, rootfs, ["/bin/sh"], (), tmp / f"{name}.oci.tar")
    node = cluster.nodes[N1]
    assert node.containerd is not None
    node.containerd.ctr("images", "import", str(tarball))
    return f"e2e/{name}:1"


def start(api, namespace: str, name: str, image: str, gates_on: bool) -> None:
    kube.create(api, namespace, kube.template(name, kube.soft_or_slot(gates_on)))
    pod = kube.pod(name, claim_template=name, node=N1)
    pod["spec"]["containers"][0]["image"] = image
    kube.create(api, namespace, pod)


def container_failure(api, namespace: str, name: str) -> str | None:
    """The runtime's message once the pod's container failed to be created or started, else None."""
    p = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    assert p.status.phase != "Running", "the hostile pod started"
    for s in p.status.container_statuses or []:
        for state in (s.state.waiting, s.state.terminated):
            if state and state.message and "carve-cdi-hook" in state.message:
                return state.message
    return None


def test_an_etc_link_to_the_node_stops_the_container(cluster, api, namespace, gates_on, canary, tmp_path):
    def plant(rootfs: Path) -> None:
        shutil.rmtree(rootfs / "etc")
        (rootfs / "etc").symlink_to(f"/proc/1/root{canary}/etc")

    image = hostile_image(cluster, tmp_path, "hostile-etc", plant)
    before = snapshot(canary)
    start(api, namespace, "hostile-etc", image, gates_on)
    message = kube.wait(
        "the hostile pod's container to fail with the hook's message",
        lambda: container_failure(api, namespace, "hostile-etc"),
        timeout_s=180,
    )
    # The first hook that writes under /etc stops it (update-ldcache runs before preload), naming the path
    # its contained lookup refused.
    assert "/etc" in message and "inside the container root" in message, message
    assert snapshot(canary) == before


def test_a_climbing_soname_is_dropped_and_the_pod_runs(cluster, api, namespace, gates_on, canary, tmp_path):
    soname = f"../../../../proc/1/root{canary}/usr/lib64/libc.so.6"

    def plant(rootfs: Path) -> None:
        src = tmp_path / "evil.c"
        src.write_text("int carve_e2e_evil(void) { return 1; }\n")
        out = rootfs / "usr/lib64/libevil.so.1.0"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(src)],
            check=True,
            capture_output=True,
        )

    image = hostile_image(cluster, tmp_path, "hostile-soname", plant)
    before = snapshot(canary)
    start(api, namespace, "hostile-soname", image, gates_on)
    kube.wait_running(api, namespace, "hostile-soname", timeout_s=180)
    assert snapshot(canary) == before
    preload = kube.exec_sh(cluster, namespace, "hostile-soname", "cat /etc/ld.so.preload").split()
    assert preload[:1] == [names.LIMITER_CONTAINER_PATH], preload
