"""Kubeconfig files and API access of the local cluster: client-certificate users (admin, kubelets) and
token users (the plugin's ServiceAccount token)."""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path

import yaml


def write(
    path: Path,
    server: str,
    ca: Path,
    *,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
) -> Path:
    user: dict[str, str] = {}
    if cert and key:
        user = {"client-certificate": str(cert), "client-key": str(key)}
    if token:
        user = {"token": token}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "user"}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def get(server: str, ca: Path, cert: Path, key: Path, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """One GET with a client certificate; (status, body). For /readyz before any client is set up."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    try:
        with urllib.request.urlopen(server + path, context=ctx, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_json(server: str, ca: Path, cert: Path, key: Path, path: str) -> dict:
    status, body = get(server, ca, cert, key, path)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body[:200]}")
    return json.loads(body)
