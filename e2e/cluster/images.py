"""Container images for the real-runtime e2e, built here with no registry: a rootfs from Debian packages
(`apt-get download` + `dpkg-deb -x`) and programs compiled here, packed as OCI image-layout tarballs that
`ctr -n k8s.io images import` loads.

Images (all one uncompressed layer, linux/amd64):
  docker.io/e2e/pause:1      /pause, a static C program that waits for SIGTERM/SIGINT (the CRI sandbox)
  docker.io/e2e/busybox      Debian's busybox-static with its applets as links in /bin
  docker.io/e2e/glibc        busybox + Debian's libc6 + /usr/local/bin/cuda-probe (dlopens libcuda.so.1)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.versions import REPO

CACHE = REPO / ".tools" / "images"
SOURCES = Path(__file__).resolve().parent / "image_src"
SOURCES_STAMP = "sources.sha256"
PAUSE = "docker.io/e2e/pause:1"
BUSYBOX = "docker.io/e2e/busybox:latest"
GLIBC = "docker.io/e2e/glibc:latest"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageError(RuntimeError):
    """An image could not be built: the message names the image and the step."""


@dataclass(frozen=True)
class Image:
    name: str
    tarball: Path


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise ImageError(f"{what}: {' '.join(argv)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def debian_package(name: str) -> Path:
    """The .deb of a Debian package, downloaded once into the cache (apt's own client and sources)."""
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{name}_*.deb"))
    if not found:
        _run(["apt-get", "download", name], f"downloading Debian package {name}", cwd=debs)
        found = sorted(debs.glob(f"{name}_*.deb"))
    if not found:
        raise ImageError(f"apt-get download {name} left no {name}_*.deb in {debs}")
    return found[-1]


def extract(deb: Path, rootfs: Path) -> None:
    _run(["dpkg-deb", "-x", str(deb), str(rootfs)], f"unpacking {deb.name}")


def compile_c(source: Path, out: Path, static: bool) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = ["gcc", "-O2", "-Wall", "-Werror", "-o", str(out), str(source)]
    argv += ["-static"] if static else ["-ldl"]
    _run(argv, f"compiling {source.name}")
    return out


def busybox_rootfs(rootfs: Path) -> None:
    extract(debian_package("busybox-static"), rootfs)
    busybox = rootfs / "bin" / "busybox"
    applets = _run([str(busybox), "--list"], "listing busybox applets").split()
    for applet in applets:
        link = rootfs / "bin" / applet
        if not link.exists() and applet != "busybox":
            link.symlink_to("busybox")
    for d in ("proc", "sys", "dev", "etc", "tmp", "var/run", "usr/lib64"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")


def _layer(rootfs: Path) -> bytes:
    """One uncompressed tar layer of `rootfs`, deterministic: sorted, owned by root, time 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def oci_tarball(
    name: str,
    rootfs: Path,
    entrypoint: list[str],
    env: tuple[str, ...],
    out: Path,
    cmd: list[str] | None = None,
) -> Path:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/*) in one tar file, of the image `name`."""
    blobs: dict[str, bytes] = {}
    layer = _blob(blobs, _layer(rootfs))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": entrypoint,
            "Env": [PATH_ENV, *env],
            "WorkingDir": "/",
            **({"Cmd": cmd} if cmd else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
    }
    cfg = _blob(blobs, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}],
    }
    man = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **man,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
            }
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
        **{f"blobs/sha256/{d.removeprefix('sha256:')}": data for d, data in blobs.items()},
    }
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        for arcname, data in files.items():
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)
    return out


def sources_digest() -> str:
    """What the images are built from: this module and image_src/ (a change rebuilds them)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for f in sorted(SOURCES.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(SOURCES).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def build_all(cache: Path = CACHE) -> list[Image]:
    """The three images as tarballs in `cache`, built again when their sources changed (SOURCES_STAMP)."""
    cache.mkdir(parents=True, exist_ok=True)
    wanted = {
        PAUSE: cache / "pause.oci.tar",
        BUSYBOX: cache / "busybox.oci.tar",
        GLIBC: cache / "glibc.oci.tar",
    }
    stamp, digest = cache / SOURCES_STAMP, sources_digest()
    current = stamp.exists() and stamp.read_text().strip() == digest
    if current and all(p.exists() for p in wanted.values()):
        return [Image(n, p) for n, p in wanted.items()]
    with tempfile.TemporaryDirectory(prefix="carve-images-") as tmp:
        work = Path(tmp)
        pause = work / "pause"
        compile_c(SOURCES / "pause.c", pause / "pause", static=True)
        oci_tarball(PAUSE, pause, ["/pause"], (), wanted[PAUSE])

        busybox = work / "busybox"
        busybox_rootfs(busybox)
        oci_tarball(BUSYBOX, busybox, ["/bin/sh"], (), wanted[BUSYBOX])

        glibc = work / "glibc"
        shutil.copytree(busybox, glibc, symlinks=True)
        extract(debian_package("libc6"), glibc)
        compile_c(SOURCES / "cuda_probe.c", glibc / "usr" / "local" / "bin" / "cuda-probe", static=False)
        oci_tarball(GLIBC, glibc, ["/bin/sh"], (), wanted[GLIBC])
    stamp.write_text(digest + "\n")
    return [Image(n, p) for n, p in wanted.items()]


if __name__ == "__main__":
    for image in build_all():
        print(image.name, image.tarball, image.tarball.stat().st_size)
