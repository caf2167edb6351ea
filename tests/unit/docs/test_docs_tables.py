"""Docs tables that state what the code does, held to it (issue 29: the RBAC and DeviceClass tables
contradicted the chart): the plugin's permissions table in docs/install.md against the ClusterRole the
chart renders, and every DeviceClass list against deviceclasses/."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from support.helm_render import one, render

REPO = Path(__file__).resolve().parents[3]
INSTALL = (REPO / "docs" / "install.md").read_text()
CLASSES = sorted(
    yaml.safe_load(p.read_text())["metadata"]["name"] for p in (REPO / "deviceclasses").glob("*.yaml")
)


def _table_after(text: str, heading: str) -> list[list[str]]:
    start = text.index(heading)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if set(cells[0]) <= {"-", " "}:
            continue
        rows.append(cells)
    return rows[1:]  # without the header


def test_the_plugin_permissions_table_is_the_clusterrole():
    documented: set[tuple[str, str, str]] = set()
    for resource, verbs, _why in _table_after(INSTALL, "Permissions (`resource.k8s.io`)"):
        name = re.match(r"`([a-z/]+)`", resource).group(1)
        group = re.search(r"\(`?([a-z.]+)`?\)", resource)
        group = "" if group and group.group(1) == "core" else (group.group(1) if group else "resource.k8s.io")
        for verb in re.findall(r"`([a-z:-]+)`", verbs):
            documented.add((group, name, verb))
    role = one(render(), "ClusterRole")
    rendered = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"]}
    assert documented == rendered


def test_every_deviceclass_is_in_every_list_of_them():
    assert len(CLASSES) >= 7
    (row,) = [line for line in INSTALL.splitlines() if line.startswith("| DeviceClasses")]
    listed = {f"{n}.carve.dev" for n in re.findall(r"`([a-z-]+)`", row.split("|")[1])}
    assert listed == set(CLASSES), row
    table = (REPO / "docs" / "deviceclasses.md").read_text()
    rows = {m for m in re.findall(r"^\| `([a-z.-]+\.carve\.dev)` \|", table, re.M)}
    assert rows == set(CLASSES)
    readme = (REPO / "README.md").read_text()
    assert all(f"`{c}`" in readme for c in CLASSES)


def _psa_refusals(pod: dict) -> list[str]:
    """What the Pod Security `baseline` level (the strictest a namespace usually runs) refuses in a pod
    spec, for the fields carve's chart can set: host namespaces, hostPath volumes, privileged containers."""
    found = [f"spec.{k}" for k in ("hostPID", "hostNetwork", "hostIPC") if pod.get(k)]
    found += [f"volume {v['name']}: hostPath" for v in pod.get("volumes") or [] if "hostPath" in v]
    for c in (pod.get("initContainers") or []) + pod.get("containers", []):
        if (c.get("securityContext") or {}).get("privileged"):
            found.append(f"container {c['name']}: privileged")
    return found


def test_the_pod_security_guidance_labels_the_namespace_the_plugin_needs():
    # The plugin's pod needs the `privileged` Pod Security level (baseline refuses what it must do), so the
    # install docs and the README's release install label its namespace, and the docs say why.
    pod = one(render(), "DaemonSet")["spec"]["template"]["spec"]
    assert _psa_refusals(pod), "the plugin pod no longer needs the privileged level: update docs/install.md"
    section = INSTALL[INSTALL.index("### Pod Security Admission"):]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    assert "pod-security.kubernetes.io/enforce=privileged" in section
    readme = (REPO / "README.md").read_text()
    release = readme[readme.index("## Install from a release"):]
    assert "pod-security.kubernetes.io/enforce=privileged" in release.split("```")[1]
