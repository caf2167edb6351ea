"""`carve allocate` end to end from files: 600 claims against the slices of 100 nodes x 8 A100.

Each node has 4 MIG GPUs and 4 soft-sliced GPUs; its ResourceSlices are one multi-document YAML file
(and, in a second run, one JSON List), next to carve's own DeviceClasses (deviceclasses/). The command
runs as a process, as a user runs it, so reading files, parsing, allocating and printing are all timed.
Baselines in the same run: the slice YAML parsed by PyYAML's pure-Python loader (what `carve allocate`
used before) and by libyaml's CSafeLoader, against carve's loader (driver/allocator/yaml_load.py), per
MB of a tenth of the files. CPU seconds are printed next to wall seconds: this machine is shared.
Asserts only that the work was done: every claim allocated, to a device of its class (and of its MIG
profile), no MIG instance handed out twice, and the same result from YAML and from JSON.

The full size takes a minute on a shared 2-core CI machine, so by default this runs a tenth of it (60
claims, 10 nodes) and prints the extrapolation (reading and allocating are both linear in the nodes at a
fixed number of claims per node); set CARVE_BENCH_FULL=1 for the full size.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

from driver.allocator import yaml_load
from driver.devices.catalog import fake_gpu
from driver.devices.slices import build_slices

FULL = os.environ.get("CARVE_BENCH_FULL", "") not in ("", "0")
SCALE = 1 if FULL else 10
NODES = 100 // SCALE
CLAIMS = 600 // SCALE
REPO = Path(__file__).resolve().parents[2]


def _slices(node: str) -> list[dict]:
    gpus = [fake_gpu("A100-80GB", i, node) for i in range(8)]
    return build_slices(node, gpus, {i: "mig" if i < 4 else "soft" for i in range(8)}, k8s_version="1.36")


def _claims(seed: int = 11) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(CLAIMS):
        if rng.random() < 0.6:
            request = {"deviceClassName": "vgpu.carve.dev", "capacity": {"requests": {
                "memory": f"{rng.choice([2, 4, 8, 12])}Gi", "cores": str(rng.choice([10, 20, 30]))}}}
        else:
            profile = rng.choice(["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"])
            request = {"deviceClassName": "mig.carve.dev", "selectors": [{"cel": {
                "expression": f'device.attributes["gpu.carve.dev"].profile == "{profile}"'}}]}
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": f"claim-{i}", "namespace": "bench"},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}})
    return out


def _carve(*args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds, the finished process) of one `carve allocate`."""
    entry = "import sys; from driver.cli import main; sys.exit(main())"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", entry, "allocate", *args], capture_output=True, text=True,
                       timeout=600, cwd=REPO)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), r


def _parse_s_per_mb(files: list[Path], load) -> float:
    texts = [f.read_text() for f in files]
    started = time.process_time()
    for text in texts:
        load(text)
    return (time.process_time() - started) / (sum(len(t) for t in texts) / 1e6)


def _check(r: subprocess.CompletedProcess, claims: list[dict]) -> None:
    assert r.returncode == 0, r.stderr[-2000:]
    items = json.loads(r.stdout)["items"]
    assert len(items) == len(claims)
    exclusive: set[tuple[str, str]] = set()
    for item, claim in zip(items, claims, strict=True):
        (result,) = item["status"]["allocation"]["devices"]["results"]
        request = claim["spec"]["devices"]["requests"][0]["exactly"]
        device = (result["pool"], result["device"])
        if request["deviceClassName"] == "mig.carve.dev":
            profile = request["selectors"][0]["cel"]["expression"].split('"')[-2]
            assert f"-mig-{profile.replace('.', '')}-" in result["device"], (item["metadata"], result)
            assert device not in exclusive, f"{device} allocated twice"
            exclusive.add(device)
        else:
            assert "shareID" in result and "-mig-" not in result["device"], result


def test_carve_allocate_600_claims_from_files(tmp_path: Path) -> None:
    yaml_dir, json_dir = tmp_path / "slices-yaml", tmp_path / "slices-json"
    yaml_dir.mkdir()
    json_dir.mkdir()
    for n in range(NODES):
        node = f"node-{n:03d}"
        slices = _slices(node)
        (yaml_dir / f"{node}.yaml").write_text(yaml.dump_all(slices, Dumper=yaml.CSafeDumper))
        as_list = {"apiVersion": "v1", "kind": "List", "items": slices}
        (json_dir / f"{node}.json").write_text(json.dumps(as_list))
    claims = _claims()
    claims_file = tmp_path / "claims.yaml"
    claims_file.write_text(yaml.dump_all(claims, Dumper=yaml.CSafeDumper))
    size_mb = sum(f.stat().st_size for f in yaml_dir.iterdir()) / 1e6

    common = ["--classes", str(REPO / "deviceclasses"), "--claims", str(claims_file), "-o", "json"]
    yaml_s, yaml_cpu, r = _carve("--slices", str(yaml_dir), *common)
    _check(r, claims)
    json_s, json_cpu, r_json = _carve("--slices", str(json_dir), *common)
    _check(r_json, claims)
    assert json.loads(r_json.stdout) == json.loads(r.stdout)

    sample = sorted(yaml_dir.iterdir())[: max(1, NODES // 10)]
    ours = _parse_s_per_mb(sample, yaml_load.load_all)
    libyaml = _parse_s_per_mb(sample, lambda t: list(yaml.load_all(t, Loader=yaml.CSafeLoader)))
    python = _parse_s_per_mb(sample, lambda t: list(yaml.load_all(t, Loader=yaml.SafeLoader)))

    print(f"\ncarve allocate: {CLAIMS} claims against {NODES} nodes x 8 A100 (4 MIG + 4 soft each), "
          f"{size_mb:.1f} MB of slice YAML")
    for what, wall, cpu in (("YAML", yaml_s, yaml_cpu), ("JSON", json_s, json_cpu)):
        print(f"  end to end, {what} slices: {wall:6.2f} s wall, {cpu:6.2f} s CPU  "
              f"({CLAIMS / wall:6.1f} claims/s)")
    print(f"  parsing slice YAML, CPU s per MB: carve {ours:.3f}, libyaml CSafeLoader {libyaml:.3f} "
          f"({libyaml / ours:.1f}x), pure-Python SafeLoader {python:.3f} ({python / ours:.1f}x)")
    if not FULL:
        print(f"  extrapolated to {CLAIMS * SCALE} claims on {NODES * SCALE} nodes: at most "
              f"~{yaml_s * SCALE:.0f} s (YAML), ~{json_s * SCALE:.0f} s (JSON), start-up counted {SCALE} "
              "times; run it with CARVE_BENCH_FULL=1")
