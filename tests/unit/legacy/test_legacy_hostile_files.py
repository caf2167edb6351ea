"""The files the legacy device plugin reads as root, fed hostile or torn bytes (issue 30): the kubelet's
device checkpoint (PreStartContainer's pod identity), its own owner records and the containers' regions
(the metrics scrape). Each gives an answer or a named error, never another exception, and never blocks.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.legacy.identity import IdentityError, pod_uids_in_checkpoint
from driver.legacy.metrics import OWNER_FILE, AllocationOwner, AllocationsCollector, read_owner, write_owner
from driver.limits import ClaimLimits, DeviceLimit, create_region, write_limits
from driver.plugin.container.edits import ClaimFiles

EXAMPLES = int(os.environ.get("CARVE_HYPOTHESIS_EXAMPLES", "120"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
RESOURCE = "nvidia.com/gpu"

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def checkpoints(draw) -> bytes:
    """The kubelet's format with hostile fields, any JSON, any bytes, or nesting deeper than the stack."""
    kind = draw(st.sampled_from(["kubelet", "json", "bytes", "deep"]))
    if kind == "bytes":
        return draw(st.binary(max_size=256))
    if kind == "deep":
        depth = draw(st.integers(500, 200_000))
        return b'{"Data":{"PodDeviceEntries":' + b"[" * depth + b"]" * depth + b"}}"
    if kind == "json":
        return json.dumps(draw(JSON)).encode()
    entry = st.fixed_dictionaries(
        {
            "PodUID": st.one_of(st.text(max_size=8), JSON),
            "ContainerName": JSON,
            "ResourceName": st.sampled_from([RESOURCE, "other", 7]),
            "DeviceIDs": st.one_of(
                st.lists(st.sampled_from(["gpu-0", "gpu-1", 3]), max_size=3),
                st.dictionaries(st.sampled_from(["0", "1"]), st.one_of(st.lists(st.just("gpu-0")), JSON)),
                JSON,
            ),
        }
    )
    entries = draw(st.one_of(st.lists(entry, max_size=4), JSON))
    return json.dumps({"Data": {"PodDeviceEntries": entries}, "Checksum": draw(JSON)}).encode()


@SETTINGS
@given(raw=checkpoints())
def test_any_kubelet_checkpoint_gives_pod_uids_or_a_named_error(tmp_path, raw):
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_bytes(raw)
    try:
        found = pod_uids_in_checkpoint(path, RESOURCE, ["gpu-0"])
    except IdentityError as e:
        assert str(path) in str(e)
        return
    assert isinstance(found, set) and all(isinstance(u, str) for u in found)


def test_an_oversized_kubelet_checkpoint_is_refused_unread(tmp_path):
    path = tmp_path / "kubelet_internal_checkpoint"
    with open(path, "wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: costs no disk
    with pytest.raises(IdentityError, match="larger than"):
        pod_uids_in_checkpoint(path, RESOURCE, ["gpu-0"])


OWNERS = st.one_of(
    st.binary(max_size=128),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {
            "version": st.sampled_from([1, 2, "1"]),
            "namespace": JSON,
            "pod": JSON,
            "container": JSON,
            "gpus": st.one_of(
                st.lists(st.fixed_dictionaries({"uuid": JSON, "minor": st.integers() | st.floats()})),
                JSON,
            ),
        }
    ).map(lambda v: json.dumps(v).encode()),
    st.integers(500, 100_000).map(lambda n: b"[" * n + b"]" * n),
)


@SETTINGS
@given(raw=OWNERS)
def test_any_owner_record_reads_as_an_owner_or_none(tmp_path, raw):
    (tmp_path / OWNER_FILE).write_bytes(raw)
    got = read_owner(tmp_path)
    assert got is None or isinstance(got, AllocationOwner)


def allocation(root: Path, uid: str = "alloc-1") -> ClaimFiles:
    """What the device plugin leaves for one container: owner record, limits file, region."""
    files = ClaimFiles(root / uid)
    files.region_dir.mkdir(parents=True)
    limits = ClaimLimits((DeviceLimit(1 << 30, 50, "GPU-0"),), "/var/run/carve/alloc-1/region")
    create_region(files.region, limits)
    write_limits(files.limits, limits)
    write_owner(files.root, AllocationOwner("team", "pod", "main", (("GPU-0", 0),)))
    return files


def scrape(root: Path) -> tuple[list, int]:
    """The collector's families, run in a thread so a blocking open fails the test instead of hanging it."""
    collector = AllocationsCollector(root, "node-a")
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(families=list(collector.collect())), daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "the scrape blocked on a container's region"
    return out["families"], collector.region_errors


def test_a_sound_allocation_is_scraped(tmp_path):
    allocation(tmp_path)
    families, errors = scrape(tmp_path)
    assert errors == 0
    assert any(s.value == 1 << 30 for f in families for s in f.samples if f.name.endswith("limit_bytes"))


@pytest.mark.parametrize("swap", ["fifo", "dev-zero", "directory", "oversized", "truncated", "dangling"])
def test_a_hostile_region_is_counted_as_an_error_never_blocks_the_scrape(tmp_path, swap):
    """The container may replace its region file (its directory is mounted read-write) with anything."""
    region = allocation(tmp_path).region
    size = region.stat().st_size
    region.unlink()
    if swap == "fifo":
        os.mkfifo(region)
    elif swap == "dev-zero":
        os.symlink("/dev/zero", region)
    elif swap == "directory":
        region.mkdir()
    elif swap == "oversized":
        with open(region, "wb") as f:
            f.truncate(size * 1000)
    elif swap == "truncated":
        region.write_bytes(b"CARVEREG")
    else:
        os.symlink("/nonexistent", region)
    _families, errors = scrape(tmp_path)
    assert errors == 1


@settings(
    max_examples=max(1, EXAMPLES // 3),  # an allocation's files per example
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(raw=st.binary(min_size=0, max_size=64), offset=st.integers(0, 4096))
def test_a_region_with_any_bytes_at_any_place_never_breaks_the_scrape(tmp_path, raw, offset):
    root = tmp_path / str(abs(hash((raw, offset))))
    region = allocation(root).region
    with open(region, "r+b") as f:
        f.seek(offset)
        f.write(raw)
    families, errors = scrape(root)
    assert errors in (0, 1)
    for family in families:
        for sample in family.samples:
            assert isinstance(sample.value, (int, float))
