"""A throwaway container built from a CDI spec: mounts, device nodes and hooks applied as a runtime would.

`run_in_spec(spec, rootfs, argv)` starts `python -m support.cdi_sandbox <plan>` in a new mount namespace
(`unshare -m`, or `unshare -rm` when not root), which bind-mounts every spec mount into `rootfs`, binds (or,
for fully specified nodes, mknods) the device nodes, runs the spec's createContainer hooks with the OCI state
on stdin (bundle/config.json naming the root), then runs `argv` chroot'ed into the root. Nothing is left
mounted: the namespace dies with the process. `image_root` lays out a minimal Debian-like image: the host's
loader and libc at their Debian paths, plus the given programs and their libraries.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def unshare_prefix(mount: bool = True) -> list[str]:
    flags = "-m" if os.geteuid() == 0 else "-rm"
    return ["unshare", flags] if mount else []


def sandbox_available() -> str:
    """'' when namespaces and chroot work here, else the reason they do not."""
    if not shutil.which("unshare") or not shutil.which("chroot"):
        return "unshare(1) or chroot(1) missing"
    probe = subprocess.run([*unshare_prefix(), "chroot", "/", "true"], capture_output=True, text=True)
    if probe.returncode == 0:
        return ""
    return f"cannot create a mount namespace and chroot: {probe.stderr.strip()}"


def _libraries_of(program: Path) -> list[Path]:
    out = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            libs.append(Path(parts[2]))
        elif parts and parts[0].startswith("/"):
            libs.append(Path(parts[0]))  # the loader itself
    return libs


def image_root(root: Path, programs: dict[str, Path], extra_libs: tuple[Path, ...] = ()) -> Path:
    """A Debian-like image: each program at its path in the root, and every library they (and extra_libs)
    need at /lib/x86_64-linux-gnu (the loader at its own path), as a copy."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "lib/x86_64-linux-gnu").mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    (root / "dev").mkdir(exist_ok=True)
    libs: list[Path] = []
    for target, program in programs.items():
        dest = root / target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(program, dest)
        libs += _libraries_of(program)
    for lib in extra_libs:
        libs += _libraries_of(lib)
    for lib in dict.fromkeys(libs):
        loader = "ld-linux" in lib.name
        dest = root / lib.relative_to("/") if loader else root / "lib/x86_64-linux-gnu" / lib.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            shutil.copy2(lib.resolve(), dest)
    return root


def edits_of(spec: dict, devices: list[str] | None = None) -> dict:
    """The spec's common edits followed by those of the named devices (all when None), as CDI merges them."""
    parts = [spec.get("containerEdits") or {}]
    parts += [d["containerEdits"] for d in spec["devices"] if devices is None or d["name"] in devices]
    out: dict = {"env": [], "deviceNodes": [], "mounts": [], "hooks": []}
    for p in parts:
        for key in out:
            out[key] += p.get(key) or []
    return out


def run_in_spec(
    spec: dict, rootfs: Path, argv: list[str], env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    edits = edits_of(spec)
    with tempfile.TemporaryDirectory(prefix="cdi-sandbox-") as tmp:
        plan = Path(tmp) / "plan.json"
        plan.write_text(
            json.dumps({"root": str(rootfs), "bundle": tmp, "edits": edits, "argv": argv, "env": env or {}})
        )
        return subprocess.run(
            [*unshare_prefix(), sys.executable, str(HERE / "cdi_sandbox.py"), str(plan)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _mount_point(root: Path, container_path: str, like: Path) -> Path:
    dest = root / container_path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if like.is_dir():
        dest.mkdir(exist_ok=True)
    elif not dest.exists():
        dest.touch()
    return dest


def _inside(plan: dict) -> int:
    root = Path(plan["root"])
    edits = plan["edits"]
    for m in edits["mounts"]:
        src = Path(m["hostPath"])
        dest = _mount_point(root, m["containerPath"], src)
        subprocess.run(["mount", "--bind", str(src), str(dest)], check=True)
        if "ro" in m.get("options", []):
            subprocess.run(["mount", "-o", "remount,bind,ro", str(dest)], check=True)
    for n in edits["deviceNodes"]:
        host = Path(n.get("hostPath") or n["path"])
        if host.exists():
            dest = _mount_point(root, n["path"], host)
            subprocess.run(["mount", "--bind", str(host), str(dest)], check=True)
        elif n.get("type") == "c":
            dest = root / n["path"].lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(dest, 0o020000 | n.get("fileMode", 0o666), os.makedev(n["major"], n["minor"]))
    config = {"ociVersion": "1.2.0", "root": {"path": str(root)}}
    (Path(plan["bundle"]) / "config.json").write_text(json.dumps(config))
    state = json.dumps({"ociVersion": "1.2.0", "id": "sandbox", "status": "creating", "pid": os.getpid(),
                        "bundle": plan["bundle"]})  # fmt: skip
    for h in edits["hooks"]:
        if h["hookName"] != "createContainer":
            continue
        done = subprocess.run(h["args"], executable=h["path"], input=state, text=True, capture_output=True,
                              env=dict(e.split("=", 1) for e in h.get("env", [])))  # fmt: skip
        if done.returncode != 0:
            print(f"hook {h['args'][:2]} failed ({done.returncode}): {done.stderr}", file=sys.stderr)
            return 90
    env = dict(e.split("=", 1) for e in edits["env"])
    env.update(plan["env"])
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"  # found before `env` replaces PATH
    done = subprocess.run([chroot, str(root), *plan["argv"]], env=env, capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(_inside(json.loads(Path(sys.argv[1]).read_text())))
