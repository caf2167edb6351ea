"""The previous carve release for the e2e's upgrade from it (e2e/test_upgrade_previous.py): the chart and the
carve image of an earlier commit, built the way that commit built them.

The commit is CARVE_E2E_PREVIOUS_REF (default `DEFAULT_REF`: the last commit before the claims' directories
moved from `<plugin-dir>/claims` to `--run-dir`, 44e00a0). Its chart is `git archive`d; its image is built
by its own Dockerfile and hack/build_image.sh in a `git worktree add --detach` of it, tagged
`localhost/carve:<its version>-previous`, with this checkout's buildah storage (`.buildah`, which holds the
Debian base image `make image` made) and a link to the cached base rootfs (dist/base-bookworm.tar), so the
base is not made twice. Both are kept under dist/previous/<commit>/: a second run builds nothing; another
commit gets a directory of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.cluster.carve_image import REPOSITORY
from e2e.cluster.images import Image, ImageError
from e2e.cluster.versions import REPO

ENV_REF = "CARVE_E2E_PREVIOUS_REF"
DEFAULT_REF = "6eae394"
CACHE = REPO / "dist" / "previous"
TAG_SUFFIX = "-previous"


@dataclass(frozen=True)
class PreviousRelease:
    ref: str  # as given
    commit: str  # the full hash it names
    version: str  # pyproject.toml's version at that commit
    chart: Path  # its helm/carve
    image: Image  # localhost/carve:<version>-previous
    build_s: float  # what building took in this run (0: all cached)

    @property
    def knows_run_dir(self) -> bool:
        """Whether its chart has plugin.runDir (its plugin puts claim directories under --run-dir)."""
        return "runDir" in chart_plugin_values(self.chart)


def chart_plugin_values(chart: Path) -> dict:
    return (yaml.safe_load((chart / "values.yaml").read_text()) or {}).get("plugin") or {}


def _git(*args: str, cwd: Path = REPO) -> str:
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise ImageError(f"previous release: git {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def resolve(ref: str) -> str:
    """The commit `ref` names; an ImageError says what to do when this clone does not have it."""
    p = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0 or not p.stdout.strip():
        raise ImageError(
            f"previous release: {ENV_REF}={ref!r} names no commit in this clone (a shallow clone lacks the "
            "history: `git fetch --unshallow`)"
        )
    return p.stdout.strip()


def _version(commit: str) -> str:
    m = re.search(r'^version = "([^"]+)"', _git("show", f"{commit}:pyproject.toml"), re.M)
    if not m:
        raise ImageError(f"previous release: no version in pyproject.toml at {commit[:12]}")
    return m.group(1)


def _extract_chart(commit: str, into: Path) -> Path:
    """helm/carve as the commit has it, under `into` (written aside, then renamed: never half a copy)."""
    chart = into / "helm" / "carve"
    if (chart / "Chart.yaml").exists():
        return chart
    tmp = Path(tempfile.mkdtemp(prefix="chart-", dir=into))
    archive = subprocess.run(
        ["git", "archive", commit, "helm/carve"], cwd=REPO, capture_output=True, check=False
    )
    if archive.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ImageError(
            f"previous release: git archive {commit[:12]} helm/carve: {archive.stderr.decode()[-500:]}"
        )
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    shutil.rmtree(into / "helm", ignore_errors=True)
    os.replace(tmp / "helm", into / "helm")
    tmp.rmdir()
    return chart


def _build_image(commit: str, tag: str, out: Path) -> None:
    """The commit's own `make image` (hack/build_image.sh) in a detached worktree of it, into `out`."""
    work = Path(tempfile.mkdtemp(prefix=f"carve-previous-{commit[:12]}-"))
    src = work / "src"
    try:
        _git("worktree", "add", "--detach", str(src), commit)
        base = REPO / "dist" / "base-bookworm.tar"
        (src / "dist").mkdir(exist_ok=True)
        if base.exists():
            try:
                os.link(base, src / "dist" / base.name)
            except OSError:  # another filesystem
                shutil.copy2(base, src / "dist" / base.name)
        if shutil.which("buildah") is None:
            raise ImageError(
                "previous release: buildah is not installed to build its image "
                "(apt-get install buildah mmdebstrap)"
            )
        p = subprocess.run(
            ["nice", "-n", "10", str(src / "hack" / "build_image.sh")],
            cwd=src,
            env={
                **os.environ,
                "IMAGE": REPOSITORY,
                "VERSION": tag,
                # this checkout's storage: the Debian base image made for `make image` is there already
                "BUILDAH_ROOT": str(REPO / ".buildah"),
            },
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            raise ImageError(
                f"previous release: {commit[:12]}'s hack/build_image.sh exited {p.returncode}: "
                f"{(p.stderr or p.stdout)[-2000:]}"
            )
        built = src / "dist" / f"carve-{tag}.oci.tar"
        if not base.exists() and (src / "dist" / base.name).exists():
            shutil.move(src / "dist" / base.name, base)  # made there: kept for this checkout's next build
        tmp = out.with_suffix(".tmp")
        shutil.move(built, tmp)
        os.replace(tmp, out)
        # The archive is what is kept: the image's copy in the storage (vfs: whole layers) is not.
        storage = REPO / ".buildah"
        buildah = ["buildah", "--root", str(storage / "storage"), "--runroot", str(storage / "run")]
        subprocess.run(
            [*buildah, "--storage-driver", "vfs", "rmi", "-f", f"{REPOSITORY}:{tag}"], capture_output=True
        )
    finally:
        # its own entry only (no `git worktree prune`: the entries of other checkouts are not this one's)
        subprocess.run(["git", "worktree", "remove", "--force", str(src)], cwd=REPO, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def build(ref: str | None = None) -> PreviousRelease:
    """The previous release's chart and image, from the cache or built now."""
    ref = ref or os.environ.get(ENV_REF) or DEFAULT_REF
    commit = resolve(ref)
    version = _version(commit)
    tag = version + TAG_SUFFIX
    cache = CACHE / commit
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    chart = _extract_chart(commit, cache)
    archive = cache / f"carve-{tag}.oci.tar"
    if not archive.exists():
        _build_image(commit, tag, archive)
    return PreviousRelease(
        ref, commit, version, chart, Image(f"{REPOSITORY}:{tag}", archive), time.monotonic() - t0
    )


if __name__ == "__main__":
    release = build()
    print(release.commit, release.image.name, release.image.tarball, release.chart, f"{release.build_s:.1f}s")
