"""The carve image for the e2e's `--plugin-mode daemonset`, built here with no registry, following the
Dockerfile's steps (docs/e2e.md lists where it differs):

  Dockerfile                                   here
  FROM python:3.11-slim-bookworm               Debian bookworm's python3.11 packages + busybox-static (sh,
                                               cp, mv for the chart's init container), `apt-get download`ed
  native stage: make -C native ...             the same make targets' outputs from native/build
  wheels stage: pip wheel .                    `pip wheel --no-deps .` (carve) + `pip download` of its
                                               dependencies at the venv's versions (`pip freeze`), cached
  pip install --no-index --find-links /wheels  the same, with `--target` the image's dist-packages
  COPY native outputs to /usr/local/carve/...  the same paths
  ENV CARVE_FAKE_LIB_DIR, PYTHONUNBUFFERED     the same
  ENTRYPOINT ["carve"], CMD ["plugin"]         the same; /usr/local/bin/carve is written here (pip's
                                               script would name the venv's interpreter)

The image is `docker.io/e2e/carve:<hash>`, the hash over everything that goes in (driver/, api/,
pyproject.toml, the native outputs, the dependency versions), cached as an OCI tarball in .tools/images.
Before packing, the rootfs is checked by running `carve inspect` in it (chroot) on fake GPUs.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from e2e.cluster import images
from e2e.cluster.images import CACHE, Image, ImageError
from e2e.cluster.versions import REPO

REPOSITORY = "docker.io/e2e/carve"
PYTHON = "python3.11"
# What Debian's python3.11 needs at run time for what carve imports (ssl, ctypes, zlib, lzma, bz2, uuid,
# the stdlib), and libstdc++/libgcc for the manylinux wheels (grpcio, protobuf's upb, google-re2).
DEBIAN_PACKAGES = (
    "libc6",
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libexpat1",
    "zlib1g",
    "libssl3",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libuuid1",
    "libcrypt1",
    "libsqlite3-0",
    "libstdc++6",
    "libgcc-s1",
    "media-types",
)
SITE = Path("usr/local/lib") / PYTHON / "dist-packages"  # on Debian's sys.path
NATIVE = {
    "lib/libcarve-limiter.so": "libcarve-limiter.so",
    "bin/carve-cdi-hook": "carve-cdi-hook",
    "bin/carve-ldconfig": "carve-ldconfig",
    "fakes/libnvidia-ml.so.1": "fakes/libnvidia-ml.so.1",
    "fakes/libcuda.so.1": "fakes/libcuda.so.1",
}
ENTRYPOINT_SCRIPT = f"""#!/usr/bin/{PYTHON}
# carve's console script (pyproject.toml: carve = "driver.cli:main").
import sys

from driver.cli import main

sys.exit(main())
"""


def _pip(*args: str, what: str) -> str:
    return images._run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], what)


def _constraints(out: Path) -> Path:
    """The venv's versions of carve's dependencies (the ones the tests ran with)."""
    frozen = _pip("freeze", "--exclude-editable", what="pip freeze of the venv")
    out.write_text(frozen)
    return out


def _inputs_digest(constraints: str) -> str:
    h = hashlib.sha256()
    files = [REPO / "pyproject.toml", Path(__file__)]
    for tree in ("driver", "api"):
        files += sorted(p for p in (REPO / tree).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files += [REPO / "native" / "build" / src for src in NATIVE.values()]
    for f in files:
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(constraints.encode())
    return h.hexdigest()[:12]


def _wheels(work: Path, constraints: Path) -> tuple[Path, Path]:
    """carve's wheel (built from the working tree) and a wheel directory holding its dependencies,
    downloaded once into the cache at the venv's versions (binary wheels only, as the Dockerfile's)."""
    out = work / "wheels"
    _pip(
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        str(REPO),
        what="pip wheel of carve",
    )
    wheel = next(out.glob("carve-*.whl"))
    deps = CACHE / "wheels"
    deps.mkdir(parents=True, exist_ok=True)
    _pip(
        "download",
        "-q",
        "--only-binary=:all:",
        "-d",
        str(deps),
        "--find-links",
        str(deps),
        "-c",
        str(constraints),
        str(wheel),
        what="pip download of carve's dependencies",
    )
    return wheel, deps


def _rootfs(rootfs: Path, work: Path, constraints: Path) -> None:
    images.busybox_rootfs(rootfs)
    for pkg in DEBIAN_PACKAGES:
        images.extract(images.debian_package(pkg), rootfs)
    wheel, deps = _wheels(work, constraints)
    _pip(
        "install",
        "-q",
        "--no-index",
        "--find-links",
        str(deps),
        "--no-compile",
        "--target",
        str(rootfs / SITE),
        str(wheel),
        what="pip install of carve into the image",
    )
    shutil.rmtree(rootfs / SITE / "bin", ignore_errors=True)  # scripts naming the venv's interpreter
    bin_dir = rootfs / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "carve"
    script.write_text(ENTRYPOINT_SCRIPT)
    script.chmod(0o755)
    for name in ("python3", "python"):
        (bin_dir / name).symlink_to(f"/usr/bin/{PYTHON}")
    for dst, src in NATIVE.items():
        target = rootfs / "usr" / "local" / "carve" / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / "native" / "build" / src, target)


def _smoke(rootfs: Path) -> None:
    """The image's carve runs: `carve inspect` on fake GPUs, in the rootfs (chroot, as root)."""
    env = {
        "PATH": images.PATH_ENV.removeprefix("PATH="),
        "CARVE_FAKE_LIB_DIR": "/usr/local/carve/fakes",
        "HOME": "/tmp",
    }
    argv = ["chroot", str(rootfs), "carve", "inspect", "--gpus", "fake:1xA100-80GB", "--node-name", "img"]
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0 or "A100" not in p.stdout:
        said = (p.stderr or p.stdout)[-2000:]
        raise ImageError(f"carve image: `carve inspect` in the rootfs exited {p.returncode}: {said}")


def build(cache: Path = CACHE) -> Image:
    """The carve image as an OCI tarball in `cache`, built when its inputs changed."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [src for src in NATIVE.values() if not (REPO / "native" / "build" / src).exists()]
    if missing:
        raise ImageError(f"carve image: native/build lacks {', '.join(missing)} (run `make native`)")
    with tempfile.TemporaryDirectory(prefix="carve-image-") as tmp:
        work = Path(tmp)
        constraints = _constraints(work / "constraints.txt")
        tag = _inputs_digest(constraints.read_text())
        name = f"{REPOSITORY}:{tag}"
        out = cache / f"carve-{tag}.oci.tar"
        if out.exists():
            return Image(name, out)
        rootfs = work / "rootfs"
        _rootfs(rootfs, work, constraints)
        _smoke(rootfs)
        env = ("CARVE_FAKE_LIB_DIR=/usr/local/carve/fakes", "PYTHONUNBUFFERED=1")
        images.oci_tarball(name, rootfs, ["carve"], env, out, cmd=["plugin"])
    # Each change to carve's sources is a new 180 MB image: keep only the one just built.
    for old in cache.glob("carve-*.oci.tar"):
        if old != out:
            old.unlink(missing_ok=True)
    return Image(name, out)


if __name__ == "__main__":
    image = build()
    print(image.name, image.tarball, image.tarball.stat().st_size)
