"""`carve allocate --allocated`: an allocated claim whose consumedCapacity is not a quantity is bad input,
one line naming its file, document and field (exit 2), never a traceback; driver/allocator/command.py
turns the quantity's ValueError into that line."""

from __future__ import annotations

from test_allocator_command import CLASS, SLICE, carve, claim, write


def _held(memory: object) -> dict:
    held = claim("old", "8Gi")
    held["status"] = {"allocation": {"devices": {"results": [{
        "request": "gpu", "driver": "gpu.carve.dev", "pool": "n1", "device": "gpu-0",
        "shareID": "11111111-1111-1111-1111-111111111111", "consumedCapacity": {"memory": memory}}]}}}
    return held


def test_an_allocated_claims_consumed_capacity_that_is_not_a_quantity_is_one_line_exit_2(tmp_path):
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", write(tmp_path, "k.yaml", claim("a", "1Gi")),
              "--allocated", write(tmp_path, "h.yaml", _held("plenty")))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0
    assert "h.yaml document 1: status.allocation: 'plenty' is not a quantity" in r.stderr
    assert r.stdout == ""


def test_the_same_claim_with_a_quantity_holds_its_memory(tmp_path):
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", write(tmp_path, "k.yaml", claim("a", "1Gi")),
              "--allocated", write(tmp_path, "h.yaml", _held("7Gi")))
    assert r.returncode == 0, r.stderr  # 1Gi of the 8Gi left
