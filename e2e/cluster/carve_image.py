"""The carve image for the e2e's `--plugin-mode daemonset`: the repository's Dockerfile built by buildah
(`make image`, hack/build_image.sh: base image from Debian's packages, no registry), the OCI archive
dist/carve-<version>.oci.tar imported into each node's containerd with `ctr images import`.

The archive is built again when a file that goes into the image (driver/, api/, native/ sources,
pyproject.toml, the Dockerfile, the build script) is newer than it; a cold build takes minutes
(docs/install.md, "The image": size and build time).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from e2e.cluster.images import Image, ImageError
from e2e.cluster.versions import REPO

REPOSITORY = "localhost/carve"
BUILD = REPO / "hack" / "build_image.sh"


def version() -> str:
    m = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    if not m:
        raise ImageError("carve image: no version in pyproject.toml")
    return m.group(1)


def _inputs() -> list[Path]:
    files = [REPO / "pyproject.toml", REPO / "Dockerfile", BUILD]
    for tree in ("driver", "api", "native"):
        files += [
            p
            for p in (REPO / tree).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and "build" not in p.relative_to(REPO).parts[:2]
        ]
    return files


def stale(archive: Path) -> bool:
    """Whether a file that goes into the image changed after the archive was written."""
    if not archive.exists():
        return True
    built = archive.stat().st_mtime
    return any(f.stat().st_mtime > built for f in _inputs())


def build() -> Image:
    """`make image`'s archive, built (or built again) when missing or stale."""
    tag = version()
    archive = REPO / "dist" / f"carve-{tag}.oci.tar"
    if stale(archive):
        if shutil.which("buildah") is None:
            raise ImageError(
                f"carve image: {archive.relative_to(REPO)} is missing or older than the sources, and "
                "buildah is not installed to build it (apt-get install buildah mmdebstrap; `make image`)"
            )
        p = subprocess.run(
            ["nice", "-n", "10", str(BUILD)],
            cwd=REPO,
            env={**os.environ, "IMAGE": REPOSITORY, "VERSION": tag},
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            raise ImageError(
                f"carve image: {BUILD.name} exited {p.returncode}: {(p.stderr or p.stdout)[-2000:]}"
            )
    return Image(f"{REPOSITORY}:{tag}", archive)


if __name__ == "__main__":
    image = build()
    print(image.name, image.tarball, image.tarball.stat().st_size)
