"""How `carve allocate` reads its files (driver/allocator/command.py), in process: directories as kubectl -f
takes them, YAML and JSON documents and List items, each error one line naming the file and document,
the kinds each flag keeps, templates as the claims they create, unknown request fields refused and HAMi's
MiB written as bytes warned about."""

from __future__ import annotations

import json

import pytest
import yaml

from driver.allocator import command
from driver.cli import CliError


def test_a_directory_stands_for_its_yaml_and_json_files_sorted(tmp_path):
    for name in ("b.yaml", "a.json", "c.yml", "notes.txt"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "sub.yaml").mkdir()
    assert command.expand([str(tmp_path), "-", "x.yaml"], "--slices") == [
        str(tmp_path / "a.json"),
        str(tmp_path / "b.yaml"),
        str(tmp_path / "c.yml"),
        "-",
        "x.yaml",
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        CliError, match=r"^--classes .*empty: directory holds no \.yaml, \.yml, \.json files$"
    ):
        command.expand([str(empty)], "--classes")


def _docs(tmp_path, text, name="f.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return [(where.replace(str(path), "F"), obj) for where, obj in command.documents(str(path))]


def test_documents_are_numbered_and_list_items_named(tmp_path):
    text = (
        "a: 1\n---\n---\nkind: ResourceSliceList\nitems:\n- {b: 2}\n- {c: 3}\n---\nkind: Thing\nitems: [1]\n"
    )
    assert _docs(tmp_path, text) == [
        ("F document 1", {"a": 1}),
        ("F document 3 item 1", {"b": 2}),
        ("F document 3 item 2", {"c": 3}),
        ("F document 4", {"kind": "Thing", "items": [1]}),
    ]
    assert _docs(tmp_path, json.dumps([{"a": 1}, {"b": 2}]), "f.json") == [
        ("F document 1", {"a": 1}),
        ("F document 2", {"b": 2}),
    ]
    assert _docs(tmp_path, '  {"a": 1}', "g.json") == [("F document 1", {"a": 1})]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("- 1\n", "F document 1: expected an object, got list"),
        ("kind: XList\nitems: [1]\n", "F document 1 item 1: expected an object"),
        ("a: [\n", "F: not valid YAML or JSON: "),
        ('{"a": ', "F: not valid YAML or JSON: Expecting value"),
    ],
)
def test_a_bad_document_is_one_line_naming_the_file_and_document(tmp_path, text, error):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(CliError) as e:
        list(command.documents(str(path)))
    message = str(e.value).replace(str(path), "F")
    assert message.startswith(error) and "\n" not in message


def test_an_unreadable_file_names_the_reason(tmp_path):
    with pytest.raises(CliError, match=r"missing\.yaml: cannot read: No such file or directory$"):
        list(command.documents(str(tmp_path / "missing.yaml")))


def _write(tmp_path, name, *docs):
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_each_flag_keeps_its_kinds_and_notes_the_rest(tmp_path, capsys):
    path = _write(
        tmp_path,
        "all.yaml",
        {"kind": "DeviceClass", "metadata": {"name": "a"}},
        {"metadata": {"name": "bare"}},
        {"kind": "Pod", "metadata": {"name": "p1", "namespace": "ns"}},
        {"kind": "Pod", "metadata": {"name": "p2"}},
        {"kind": "ConfigMap", "metadata": {"name": "m"}},
        {"kind": "Secret", "metadata": {"name": "s"}},
    )
    loader = command.Loader()
    got = loader.load("--classes", [path], ("DeviceClass",))
    assert [obj["metadata"]["name"] for _, obj in got] == ["a", "bare"]  # a bare object is the flag's kind
    loader.note()
    assert capsys.readouterr().err == (
        "carve allocate: skipped 4 object(s) of kinds it does not read: Pod ns/p1 "
        f"({path} document 3); Pod p2 ({path} document 4); ConfigMap m ({path} document 5); 1 more\n"
    )
    quiet = command.Loader()
    quiet.load(
        "--classes",
        [_write(tmp_path, "one.yaml", {"kind": "DeviceClass", "metadata": {"name": "a"}})],
        ("DeviceClass",),
    )
    quiet.note()
    assert capsys.readouterr().err == ""
    few = command.Loader()
    few.load(
        "--classes",
        [_write(tmp_path, "few.yaml", {"kind": "Pod", "metadata": {"name": "p"}})],
        ("DeviceClass",),
    )
    few.note()
    assert capsys.readouterr().err.endswith(
        f"skipped 1 object(s) of kinds it does not read: Pod p ({tmp_path}/few.yaml document 1)\n"
    )


def test_an_object_without_a_name_or_given_twice_is_refused_naming_both_places(tmp_path):
    nameless = _write(tmp_path, "n.yaml", {"kind": "DeviceClass", "metadata": {}})
    with pytest.raises(CliError, match=r"n\.yaml document 1: DeviceClass: metadata\.name is missing$"):
        command.Loader().load("--classes", [nameless], ("DeviceClass",))
    first = _write(tmp_path, "a.yaml", {"kind": "DeviceClass", "metadata": {"name": "x"}})
    second = _write(tmp_path, "b.yaml", {"kind": "DeviceClass", "metadata": {"name": "x"}})
    with pytest.raises(CliError) as e:
        command.Loader().load("--classes", [first, second], ("DeviceClass",))
    assert (
        str(e.value) == f"{second} document 1: DeviceClass x is given twice: here and in {first} document 1"
    )
    same_name_other_ns = _write(
        tmp_path,
        "c.yaml",
        {"kind": "ResourceClaim", "metadata": {"name": "x", "namespace": "a"}},
        {"kind": "ResourceClaim", "metadata": {"name": "x", "namespace": "b"}},
    )
    assert len(command.Loader().load("--claims", [same_name_other_ns], ("ResourceClaim",))) == 2


def test_an_object_nested_too_deep_stops_a_slice_file_but_not_a_claim_file(tmp_path):
    deep: dict = {}
    node = deep
    for _ in range(200):
        node["x"] = {}
        node = node["x"]
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": deep}))
    with pytest.raises(CliError, match="nested deeper than"):
        command.Loader().load("--slices", [str(path)], ("ResourceSlice",))
    path.write_text(
        json.dumps({"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "n"}, "spec": deep})
    )
    ((_, stand_in),) = command.Loader().load("--claims", [str(path)], ("ResourceClaim",))
    assert stand_in["metadata"] == {"name": "c", "namespace": "n"} and command.UNDECODABLE in stand_in


def test_a_claim_template_becomes_the_claim_it_would_create():
    template = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns", "uid": "u"},
        "spec": {"metadata": {"labels": {"a": "b"}}, "spec": {"devices": {"requests": []}}},
    }
    claim = command.as_claim(template)
    assert claim == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "t", "namespace": "ns", "labels": {"a": "b"}},
        "spec": {"devices": {"requests": []}},
    }
    claim["spec"]["devices"]["requests"].append(1)
    assert template["spec"]["spec"]["devices"]["requests"] == []  # a copy
    plain = {"kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {"x": [1]}}
    copied = command.as_claim(plain)
    assert copied == plain and copied["spec"] is not plain["spec"]


def _claim(*requests):
    return {"spec": {"devices": {"requests": list(requests)}}}


@pytest.mark.parametrize(
    ("claim", "error"),
    [
        (
            _claim({"name": "r", "exact": {}}),
            "spec.devices.requests[0].exact: unknown field; one of exactly, firstAvailable, name",
        ),
        (
            _claim({"name": "r", "exactly": {"deviceClassName": "c", "capacity": {"request": {}}}}),
            "spec.devices.requests[0].exactly.capacity.request: unknown field; one of requests",
        ),
        (
            _claim({"name": "r", "exactly": {"deviceClassName": "c", "cnt": 1}}),
            "spec.devices.requests[0].exactly.cnt: unknown field; one of adminAccess, allocationMode, "
            "capacity, count, deviceClassName, selectors, tolerations",
        ),
        (
            _claim({"name": "r", "firstAvailable": [{"name": "a"}, {"name": "b", "adminAccess": True}]}),
            "spec.devices.requests[0].firstAvailable[1].adminAccess: unknown field; one of allocationMode, "
            "capacity, count, deviceClassName, name, selectors, tolerations",
        ),
        (
            _claim({"name": "r", "firstAvailable": [{"name": "a", "capacity": {"limits": {}}}]}),
            "spec.devices.requests[0].firstAvailable[0].capacity.limits: unknown field; one of requests",
        ),
        (_claim("x", {"name": "r", "bogus": 1}), "spec.devices.requests[1].bogus: unknown field"),
    ],
)
def test_an_unknown_request_field_is_refused_naming_its_path(claim, error):
    with pytest.raises(command.ModelError) as e:
        command.check_request_fields(claim)
    assert str(e.value).startswith(error)


def test_known_request_fields_pass():
    command.check_request_fields(
        _claim(
            {
                "name": "r",
                "exactly": {
                    "deviceClassName": "c",
                    "selectors": [],
                    "allocationMode": "ExactCount",
                    "count": 1,
                    "adminAccess": True,
                    "tolerations": [],
                    "capacity": {"requests": {"memory": "1Gi"}},
                },
            },
            {
                "name": "s",
                "firstAvailable": [{"name": "a", "deviceClassName": "c", "capacity": {"requests": {}}}],
            },
        )
    )
    command.check_request_fields({"spec": {"devices": {"requests": "x"}}})  # read_claim words that one
    command.check_request_fields({})


def test_a_memory_request_under_one_mib_is_warned_about_as_hamis_mib():
    claim = _claim(
        {"name": "r", "exactly": {"capacity": {"requests": {"memory": 4096}}}},
        {
            "name": "s",
            "firstAvailable": [
                {"name": "a", "capacity": {"requests": {"memory": "1Mi"}}},
                {"name": "b", "capacity": {"requests": {"memory": "1048575"}}},
            ],
        },
        {"name": "t", "exactly": {"capacity": {"requests": {"memory": "bad"}}}},
        {"name": "u", "exactly": {"capacity": {"requests": {"memory": 0}}}},
        {"name": "v", "exactly": {}},
        "x",
    )
    assert command.hami_memory_warnings("W", claim) == [
        "W: spec.devices.requests[0].exactly.capacity.requests.memory: 4096 is 4096 bytes; HAMi's "
        "nvidia.com/gpumem counts MiB, carve takes a quantity: write 4096Mi for 4096 MiB",
        "W: spec.devices.requests[1].firstAvailable[1].capacity.requests.memory: '1048575' is 1048575 bytes; "
        "HAMi's nvidia.com/gpumem counts MiB, carve takes a quantity: write 1048575Mi for 1048575 MiB",
    ]
    assert command.hami_memory_warnings("W", {"spec": {"devices": {"requests": "x"}}}) == []


def test_an_object_whose_metadata_is_not_a_map_has_no_name(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("kind: DeviceClass\nmetadata: [1]\n")
    with pytest.raises(CliError, match=r"c\.yaml document 1: DeviceClass: metadata\.name is missing$"):
        command.Loader().load("--classes", [str(path)], ("DeviceClass",))
