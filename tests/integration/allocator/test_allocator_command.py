"""`carve allocate` end to end: files in, a List of claims out, exit codes 0/1/2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-0"},
         "spec": {"driver": "gpu.carve.dev", "nodeName": "n1",
                  "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "vgpu"}},
                               "allowMultipleAllocations": True,
                               "capacity": {"memory": {"value": "8Gi"}}}]}}
VGPU = 'device.attributes["gpu.carve.dev"].type == "vgpu"'
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "vgpu"},
         "spec": {"selectors": [{"cel": {"expression": VGPU}}]}}


def claim(name, memory):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "vgpu", "capacity": {"requests": {"memory": memory}}}}]}}}


def carve(*args):
    entry = "import sys; from driver.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", entry, "allocate", *args],
                          capture_output=True, text=True, timeout=60)


def write(tmp_path: Path, name: str, *docs) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_allocates_in_order_and_explains_what_does_not_fit(tmp_path):
    slices = write(tmp_path, "slices.yaml", SLICE)
    classes = tmp_path / "classes.json"
    classes.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [CLASS]}))
    claims = write(tmp_path, "claims.yaml", claim("a", "6Gi"), claim("b", "4Gi"))
    r = carve("--slices", slices, "--classes", str(classes), "--claims", claims, "-o", "json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    a, b = out["items"]
    assert a["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] == {"memory": "6Gi"}
    reason = b["metadata"]["annotations"]["allocate.carve.dev/reason"]
    assert "request gpu" in reason and "memory 4Gi requested, 2Gi left" in reason
    assert "status" not in b


def test_all_fitting_claims_exit_zero_in_yaml(tmp_path):
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", write(tmp_path, "k.yaml", claim("a", "1Gi")))
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout)["kind"] == "List"


def test_allocated_claims_hold_their_devices(tmp_path):
    held = claim("old", "8Gi")
    held["status"] = {"allocation": {"devices": {"results": [{
        "request": "gpu", "driver": "gpu.carve.dev", "pool": "n1", "device": "gpu-0",
        "shareID": "11111111-1111-1111-1111-111111111111", "consumedCapacity": {"memory": "8Gi"}}]}}}
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", write(tmp_path, "k.yaml", claim("a", "1Gi")),
              "--allocated", write(tmp_path, "h.yaml", held))
    assert r.returncode == 1


def test_bad_file_is_one_line_naming_file_and_document(tmp_path):
    bad = dict(SLICE, metadata={"name": "n1-1"}, spec={"pool": {"name": "x"}})
    slices = write(tmp_path, "s.yaml", SLICE, bad)
    r = carve("--slices", slices, "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", write(tmp_path, "k.yaml", claim("a", "1Gi")))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "s.yaml document 2" in r.stderr and "driver" in r.stderr


def test_unreadable_yaml_exits_2(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: [unclosed")
    r = carve("--slices", str(path), "--classes", str(path), "--claims", str(path))
    assert r.returncode == 2 and "broken.yaml" in r.stderr


def test_a_file_that_is_not_utf8_is_one_line_naming_the_byte_and_exits_2(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"kind: ResourceSlice\nnote: caf\xe9\n")
    r = carve("--slices", str(path), "--classes", str(path), "--claims", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{path}: not UTF-8 text: byte 0xe9 at offset 29" in r.stderr


REPO = Path(__file__).resolve().parents[3]


def test_pods_next_to_claim_templates_are_skipped_with_one_note(tmp_path):
    soft = dict(SLICE, spec={**SLICE["spec"], "devices": [{**SLICE["spec"]["devices"][0], "capacity": {
        "memory": {"value": "8Gi"}, "cores": {"value": "100"}}}]})
    klass = {**CLASS, "metadata": {"name": "vgpu.carve.dev"}}
    example = str(REPO / "deviceclasses" / "examples" / "soft-slice.yaml")
    r = carve("--slices", write(tmp_path, "s.yaml", soft), "--classes", write(tmp_path, "c.yaml", klass),
              "--claims", example, "-o", "json")
    assert r.returncode == 0, r.stderr
    (item,) = json.loads(r.stdout)["items"]
    assert item["kind"] == "ResourceClaim" and item["metadata"]["name"] == "soft-4gi-30pct"
    assert item["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"] == "4Gi"
    notes = r.stderr.strip().splitlines()
    assert len(notes) == 1 and "Pod soft-4gi-30pct" in notes[0] and "soft-slice.yaml document 2" in notes[0]


def test_classes_may_come_from_a_directory_and_several_files(tmp_path):
    folder = tmp_path / "classes"
    folder.mkdir()
    write(folder, "a.yaml", {**CLASS, "metadata": {"name": "other"}})
    write(folder, "b.json", CLASS)
    (folder / "README.md").write_text("not a manifest")
    extra = write(tmp_path, "extra.yaml", {**CLASS, "metadata": {"name": "third"}})
    k = claim("a", "1Gi")
    k["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "third"
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", str(folder), "--classes", extra,
              "--claims", write(tmp_path, "k.yaml", claim("b", "1Gi"), k))
    assert r.returncode == 0, r.stderr


def test_duplicate_class_names_are_an_error_naming_both_files(tmp_path):
    first, second = write(tmp_path, "one.yaml", CLASS), write(tmp_path, "two.yaml", CLASS)
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", first, "--classes", second,
              "--claims", write(tmp_path, "k.yaml", claim("a", "1Gi")))
    assert r.returncode == 2
    assert "DeviceClass vgpu is given twice" in r.stderr and "one.yaml" in r.stderr and "two.yaml" in r.stderr


def test_the_shipped_class_folder_loads_each_class_once(tmp_path):
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", str(REPO / "deviceclasses"),
              "--claims", str(REPO / "deviceclasses" / "examples"))
    assert r.returncode == 1, r.stderr  # no carve devices of those types here, but every file was read
    assert "is given twice" not in r.stderr
    examples = list((REPO / "deviceclasses" / "examples").glob("*.yaml"))
    assert len(yaml.safe_load(r.stdout)["items"]) == len(examples)


def test_malformed_claim_is_bad_input_naming_the_document(tmp_path):
    bad = claim("a", "1Gi")
    del bad["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", write(tmp_path, "k.yaml", claim("ok", "1Gi"), bad))
    assert r.returncode == 2
    assert "k.yaml document 2" in r.stderr and "deviceClassName" in r.stderr


def test_claims_files_without_any_claim_are_bad_input(tmp_path):
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", write(tmp_path, "k.yaml", CLASS))
    assert r.returncode == 2 and "no ResourceClaim" in r.stderr


def test_a_malformed_claim_fails_alone_and_the_others_are_allocated(tmp_path):
    bad = claim("bad", "1Gi")
    bad["spec"]["devices"]["constraints"] = [{"matchAttribute": 5}]
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", write(tmp_path, "k.yaml", bad, claim("ok", "1Gi")))
    assert r.returncode == 2, r.stderr
    named = "k.yaml document 1: ResourceClaim default/bad: spec.devices.constraints[0].matchAttribute"
    assert named in r.stderr
    out = {c["metadata"]["name"]: c for c in yaml.safe_load(r.stdout)["items"]}
    assert "allocation" in out["ok"]["status"]
    assert out["bad"]["metadata"]["annotations"]["allocate.carve.dev/reason"].startswith("invalid claim: ")
    # The invalid claim comes back as the user wrote it, its reason added: every field kept.
    assert out["bad"]["apiVersion"] == "resource.k8s.io/v1" and out["bad"]["kind"] == "ResourceClaim"
    assert out["bad"]["spec"] == bad["spec"]


def test_a_json_claim_list_with_one_claim_nested_thousands_deep_still_allocates_the_rest(tmp_path):
    deep = claim("deep", "1Gi")
    deep["spec"]["devices"]["config"] = [{"opaque": {"driver": "x", "parameters": {"p": 0}}}]
    items = [json.dumps(claim("ok", "1Gi")),
             json.dumps(deep).replace('{"p": 0}', "[" * 5000 + "]" * 5000)]
    path = tmp_path / "k.json"
    path.write_text('{"apiVersion": "v1", "kind": "List", "items": [' + ",".join(items) + "]}")
    r = carve("--slices", write(tmp_path, "s.yaml", SLICE), "--classes", write(tmp_path, "c.yaml", CLASS),
              "--claims", str(path))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "(ResourceClaim deep): nested deeper than" in r.stderr
    out = {c["metadata"]["name"]: c for c in yaml.safe_load(r.stdout)["items"]}
    assert "allocation" in out["ok"]["status"] and "status" not in out["deep"]
    # carve's stand-in for the unreadable claim is internal: the output is the claim's kind and name
    assert set(out["deep"]) == {"kind", "metadata"}, out["deep"]


def test_a_class_whose_spec_or_metadata_is_not_an_object_is_one_line_exit_2(tmp_path):
    slices, claims = write(tmp_path, "s.yaml", SLICE), write(tmp_path, "k.yaml", claim("a", "1Gi"))
    for name, bad, words in [
        ("spec.yaml", {**CLASS, "spec": "x"}, "DeviceClass vgpu: spec: expected an object, got str 'x'"),
        ("sel.yaml", {**CLASS, "spec": {"selectors": [{"cel": ["x"]}]}},
         "DeviceClass vgpu: spec.selectors[0]: cel.expression is missing"),
        ("meta.yaml", {**CLASS, "metadata": [1]}, "DeviceClass: metadata.name is missing"),
    ]:
        r = carve("--slices", slices, "--classes", write(tmp_path, name, bad), "--claims", claims)
        assert r.returncode == 2, r.stderr
        assert r.stderr == f"carve allocate: {tmp_path / name} document 1: {words}\n"


@pytest.mark.parametrize("flag", ["--slices", "--classes", "--claims"])
def test_each_input_flag_is_required_and_named_when_missing(tmp_path, flag):
    given = {"--slices": write(tmp_path, "s.yaml", SLICE), "--classes": write(tmp_path, "c.yaml", CLASS),
             "--claims": write(tmp_path, "k.yaml", claim("a", "1Gi"))}
    del given[flag]
    r = carve(*[arg for pair in given.items() for arg in pair])
    assert r.returncode == 2
    assert f"the following arguments are required: {flag}" in r.stderr
    assert "Traceback" not in r.stderr
