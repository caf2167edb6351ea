"""Issue 32: a root tenant of an mps or soft-slice container against the host, with real runc and the real
plugin (fake GPUs). Each test starts the plugin, prepares a claim, and runs a runc container that has the
mounts and environment of the claim's CDI spec (the parts under /var/run/carve: the MPS pipe directory, the
region, the limits) with tests/integration/plugin/attacks/mps_attack.c as its program, root inside. The
assertion is the harm the attack aimed at, not the attack's own steps; each of these failed on the code
before issue 32 (docs/security.md, "The six attacks of issue 32"). Skipped only without runc or root (CI
installs runc: `make test-runc`)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from test_plugin_memory_backends import env_of, soft_claim, spec_of

from driver import names
from driver.plugin.container import regionfs

REPO = Path(__file__).resolve().parents[3]
ATTACK_SRC = Path(__file__).parent / "attacks" / "mps_attack.c"
RUNC = shutil.which("runc")
PID_FILE = "nvidia-cuda-mps-control.pid"
MI = 1024**2


@pytest.fixture(scope="module")
def attack_bin(tmp_path_factory) -> Path:
    if not RUNC:
        pytest.skip("runc is not installed (apt-get install runc, or `make test-runc`)")
    if os.geteuid() != 0:
        pytest.skip("runc run needs root")
    out = tmp_path_factory.mktemp("attack") / "mps_attack"
    subprocess.run(
        ["gcc", "-static", "-O2", "-o", str(out), str(ATTACK_SRC)], check=True, capture_output=True
    )
    return out


class Containers:
    """runc containers with the carve mounts, env and (optionally) createRuntime hooks of a CDI spec."""

    def __init__(self, top: Path, program: Path):
        self.top, self.program, self.runs = top, program, 0
        self.state = top / "runc-state"

    def _bundle(self, doc: dict, args: list[str], uid: int, hooks: bool) -> tuple[Path, str]:
        self.runs += 1
        bundle = self.top / f"bundle-{self.runs}"
        root = bundle / "rootfs"
        for d in ("proc", "sys", "dev", "tmp"):
            (root / d).mkdir(parents=True)
        shutil.copy2(self.program, root / "mps_attack")
        subprocess.run([RUNC, "spec", "--bundle", str(bundle)], check=True, capture_output=True)
        config = json.loads((bundle / "config.json").read_text())
        config["process"].update(args=["/mps_attack", *args], terminal=False, user={"uid": uid, "gid": uid})
        config["process"]["env"] += [f"{k}={v}" for k, v in env_of(doc).items()]
        config["root"] = {"path": "rootfs", "readonly": False}
        edits = [doc.get("containerEdits", {})] + [d["containerEdits"] for d in doc["devices"]]
        for m in (m for e in edits for m in e.get("mounts", [])):
            if m["containerPath"].startswith("/var/run/carve"):
                config["mounts"].append(
                    {
                        "destination": m["containerPath"],
                        "type": "bind",
                        "source": m["hostPath"],
                        "options": m.get("options") or ["bind"],
                    }
                )
        if hooks:
            config["hooks"] = {
                "createRuntime": [
                    {k: h[k] for k in ("path", "args", "env") if k in h}
                    for e in edits
                    for h in e.get("hooks", [])
                    if h["hookName"] == "createRuntime" and "mps-user" in h["args"]
                ]
            }
        (bundle / "config.json").write_text(json.dumps(config))
        return bundle, f"carve-attack-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def run(self, doc: dict, *args: str, uid: int = 0, hooks: bool = False, timeout: float = 90):
        """`runc run` to its end; TimeoutExpired after `timeout` (runc and its hooks killed: output goes to
        files, so a hook that outlives runc cannot hold the test)."""
        bundle, cid = self._bundle(doc, list(args), uid, hooks)
        out, err = bundle / "stdout", bundle / "stderr"
        try:
            with open(out, "w") as o, open(err, "w") as e:
                proc = subprocess.Popen(
                    [RUNC, "--root", str(self.state), "run", "--bundle", str(bundle), cid],
                    stdout=o,
                    stderr=e,
                    start_new_session=True,
                )
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
            return subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())
        finally:
            subprocess.run([RUNC, "--root", str(self.state), "delete", "--force", cid], capture_output=True)

    def start(self, doc: dict, *args: str) -> tuple[subprocess.Popen, Path, str]:
        bundle, cid = self._bundle(doc, list(args), 0, False)
        out = bundle / "out.txt"
        with open(out, "w") as f:
            proc = subprocess.Popen(
                [RUNC, "--root", str(self.state), "run", "--bundle", str(bundle), cid],
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        return proc, out, cid

    def finish(self, proc: subprocess.Popen, cid: str) -> None:
        subprocess.run([RUNC, "--root", str(self.state), "kill", cid, "KILL"], capture_output=True)
        try:
            proc.wait(30)
        finally:
            subprocess.run([RUNC, "--root", str(self.state), "delete", "--force", cid], capture_output=True)


@pytest.fixture
def containers(tmp_path, attack_bin) -> Containers:
    return Containers(tmp_path / "runc", attack_bin)


def mps_claim(node, kubelet, name: str = "m") -> tuple[dict, Path]:
    """An mps claim on gpu-2, prepared: its CDI spec and the GPU's pipe directory on the host."""
    claim = soft_claim(node, name, memory="2Gi", device="gpu-2")
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    doc = spec_of(node, claim[2])
    (mount,) = [
        m
        for e in [doc["containerEdits"]] + [d["containerEdits"] for d in doc["devices"]]
        for m in e.get("mounts", [])
        if m["containerPath"] == names.MPS_CONTAINER_PIPE_DIR
    ]
    return doc, Path(mount["hostPath"])


def control_daemons(pipe: Path) -> list[int]:
    """Live processes running as an MPS control daemon of `pipe` (its environment names the directory)."""
    wanted = f"CUDA_MPS_PIPE_DIRECTORY={pipe}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "nvidia-cuda-mps":
                continue
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return sorted(found)


WATCH_PASSES_S = 12  # two passes of the plugin's MPS watcher (every 5 s)


def test_a_tenant_cannot_make_root_overwrite_a_host_file_through_the_pid_file(
    node, kubelet, plugin_factory, containers, tmp_path
):
    """Attack 1: delete the daemon's pid file and keep a symlink to a host file at its name while the
    plugin restarts the daemon: root must never write that file."""
    plugin_factory("2=mps,exclusive")
    doc, _pipe = mps_claim(node, kubelet)
    canary = tmp_path / "host-canary"
    canary.write_text("a host file\n")
    done = containers.run(
        doc, "plant", f"{names.MPS_CONTAINER_PIPE_DIR}/{PID_FILE}", str(canary), str(WATCH_PASSES_S)
    )
    assert done.returncode == 0, done.stderr
    assert canary.read_text() == "a host file\n", f"root wrote the host file; the container: {done.stdout}"
    assert "unlink EROFS" in done.stdout and "planted 0" in done.stdout, done.stdout


def test_a_fifo_in_the_pipe_directory_does_not_stall_prepare(node, kubelet, plugin_factory, containers):
    """Attack 2: the pid file replaced by a FIFO must not block the plugin: a prepare after a watcher pass
    finishes in time."""
    plugin_factory("2=mps,exclusive")
    doc, _pipe = mps_claim(node, kubelet)
    done = containers.run(doc, "fifo", f"{names.MPS_CONTAINER_PIPE_DIR}/{PID_FILE}")
    assert done.returncode == 0, done.stderr
    time.sleep(WATCH_PASSES_S)
    second = soft_claim(node, "m2", memory="2Gi", device="gpu-2")
    started = time.monotonic()
    assert kubelet.prepare([second], timeout=20)[second[2]]["error"] == ""
    assert time.monotonic() - started < 20
    assert "unlink EROFS" in done.stdout, done.stdout


def test_a_dev_zero_pid_file_does_not_exhaust_the_plugin(node, kubelet, plugin_factory, containers):
    """Attack 3: the pid file as a symlink to /dev/zero. The plugin runs under an address-space limit 1 GiB
    above its size (a plugin reading it whole hits it at once instead of taking the machine), and must
    neither fail a watcher pass nor grow."""
    plugin = plugin_factory("2=mps,exclusive")
    doc, pipe = mps_claim(node, kubelet)
    status = Path(f"/proc/{plugin.proc.pid}/status").read_text()
    size = int(next(x for x in status.splitlines() if x.startswith("VmSize:")).split()[1]) * 1024
    resource.prlimit(plugin.proc.pid, resource.RLIMIT_AS, (size + 1024 * MI, size + 1024 * MI))
    done = containers.run(doc, "plant", f"{names.MPS_CONTAINER_PIPE_DIR}/{PID_FILE}", "/dev/zero", "1")
    assert done.returncode == 0, done.stderr
    time.sleep(WATCH_PASSES_S)
    assert plugin.proc.poll() is None
    assert "MemoryError" not in plugin.log() and "mps.watch-failed" not in plugin.log(), plugin.log()[-3000:]
    status = Path(f"/proc/{plugin.proc.pid}/status").read_text()
    hwm = int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1]) * 1024
    assert hwm < 512 * MI, hwm
    assert control_daemons(pipe), "the GPU lost its daemon"


def test_deleting_the_pid_file_starts_no_second_daemon(node, kubelet, plugin_factory, containers):
    """Attack 4: each deletion of the pid file must not leave a root daemon behind and start another."""
    plugin_factory("2=mps,exclusive")
    doc, pipe = mps_claim(node, kubelet)
    before = control_daemons(pipe)
    assert len(before) == 1, before
    for _ in range(2):
        containers.run(doc, "remove", f"{names.MPS_CONTAINER_PIPE_DIR}/{PID_FILE}")
        time.sleep(WATCH_PASSES_S / 2)
    assert control_daemons(pipe) == before


def test_fallocate_past_the_region_end_fills_only_the_claims_own_share(
    node, kubelet, plugin_factory, containers
):
    """Attack 5: fallocate(FALLOC_FL_KEEP_SIZE) on the read-write region allocates blocks past its end
    (st_size unchanged): the host must hold no more of them than the claim's own small share."""
    # `on`: runc runs in this test's mount namespace (whether the node init's is readable or not here).
    plugin_factory("1=soft,exclusive", extra=("--region-fs", "on"))
    claim = soft_claim(node, "s")
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    doc = spec_of(node, claim[2])
    region = node.plugin_dir / "claims" / claim[2] / "region" / "region"
    size = region.stat().st_size
    done = containers.run(doc, "fallocate", env_of(doc)["CARVE_REGION"], str(256 * MI))
    assert done.returncode == 0, done.stderr
    st = region.stat()
    assert st.st_size == size
    assert st.st_blocks * 512 <= regionfs.FS_BYTES, f"{st.st_blocks * 512} bytes on the host; {done.stdout}"
    # The other tenants' prepares still find room.
    other = soft_claim(node, "s2", memory="1Gi")
    assert kubelet.prepare([other])[other[2]]["error"] == ""


def test_a_forged_control_socket_neither_stalls_nor_refuses_another_tenant(
    node, kubelet, plugin_factory, containers
):
    """Attack 6: a tenant puts its own listener at the control socket, answering get_server_list with 64
    copies of pid 1 and never get_client_list. Another tenant's container (another uid, the spec's
    mps-user hook) must start, and soon."""
    plugin_factory("2=mps,exclusive")
    doc, _pipe = mps_claim(node, kubelet)
    forger, out, cid = containers.start(doc, "forge", names.MPS_CONTAINER_PIPE_DIR, "60")
    try:
        deadline = time.monotonic() + 30
        while "bind-control" not in out.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "bind-control" in out.read_text(), out.read_text()
        started = time.monotonic()
        try:
            victim = containers.run(doc, "remove", "/tmp/nothing", uid=1000, hooks=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the victim's container was not created in 60 s; the forger: {out.read_text()}")
        took = time.monotonic() - started
        assert victim.returncode == 0, victim.stderr
        assert took < 30, took
    finally:
        containers.finish(forger, cid)


def test_blocks_past_the_region_end_are_punched_where_the_region_is_not_capped(
    node, kubelet, plugin_factory, containers
):
    """Attack 5 where the plugin may not mount (`--region-fs off`): the region watcher frees what a tenant
    allocated past the end within a pass or two."""
    plugin_factory("1=soft,exclusive", extra=("--region-fs", "off", "--region-interval", "0.2"))
    claim = soft_claim(node, "s")
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    doc = spec_of(node, claim[2])
    region = node.plugin_dir / "claims" / claim[2] / "region" / "region"
    done = containers.run(doc, "fallocate", env_of(doc)["CARVE_REGION"], str(64 * MI))
    assert "fallocate ok" in done.stdout, done.stdout  # the plain directory takes it...
    page = os.sysconf("SC_PAGE_SIZE")
    limit = -(-region.stat().st_size // page) * page
    deadline = time.monotonic() + 10
    while region.stat().st_blocks * 512 > limit and time.monotonic() < deadline:
        time.sleep(0.1)
    assert region.stat().st_blocks * 512 <= limit  # ...and the watcher gives it back
