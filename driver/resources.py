"""Files carve needs beside its code: the native build (the limiter, the CDI hook and its ldconfig, the fake
GPU libraries) and the DeviceClass YAMLs of `carve demo`.

In a checkout they are the repository's native/build/ and deviceclasses/. In the wheel `make release`
builds (hack/release.sh) they are packaged as driver/_native/ (same layout as native/build/) and
driver/_deviceclasses/, so `pip install carve-<version>-*.whl` gives a `carve` that runs without the
repository.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent


def native_dir() -> Path:
    """Where libcarve-limiter.so, carve-cdi-hook, carve-ldconfig and fakes/ are."""
    packaged = PACKAGE / "_native"
    return packaged if packaged.is_dir() else REPO / "native" / "build"


def deviceclasses_dir() -> Path:
    packaged = PACKAGE / "_deviceclasses"
    return packaged if packaged.is_dir() else REPO / "deviceclasses"
