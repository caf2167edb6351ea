"""The plugin's pure NodePartitioning logic: desired strategies, the change record, the status."""

from __future__ import annotations

from dataclasses import dataclass

from api.v1alpha1.partitioning import parse_node_partitioning
from driver.devices.catalog import fake_node
from driver.plugin.mig.partitioning_state import (
    APPLIED,
    APPLYING,
    ChangeRecord,
    desired_strategies,
    layouts_now,
    read_record,
    status_of,
    write_record,
)

GPUS = fake_node("2xA100-80GB,1xT4", "n1")


def _np(*gpus: dict, generation: int = 2):
    return parse_node_partitioning(
        {"metadata": {"name": "n1", "generation": generation}, "spec": {"gpus": list(gpus)}}
    )


@dataclass
class Mode:
    index: int
    uuid: str
    desired: str
    effective: str
    applied: str | None
    mig_enabled: bool
    pending: str = ""


def test_entries_by_index_or_uuid_override_the_flag_and_others_keep_it() -> None:
    got = desired_strategies(
        _np({"index": 0, "strategy": "mig"}, {"uuid": GPUS[2].uuid, "strategy": "soft"}),
        GPUS,
        {0: "exclusive", 1: "exclusive", 2: "exclusive"},
    )
    assert got.strategies == {0: "mig", 1: "exclusive", 2: "soft"} and got.problems == []


def test_entries_the_node_cannot_follow_are_problems_and_ignored() -> None:
    got = desired_strategies(
        _np(
            {"index": 2, "strategy": "mig"},
            {"index": 7, "strategy": "soft"},
            {"index": 1, "strategy": "mig", "migLayout": [{"profile": "5g.60gb"}]},
        ),
        GPUS,
        {0: "soft", 1: "soft", 2: "soft"},
    )
    assert got.strategies == {0: "soft", 1: "soft", 2: "soft"}
    assert [p.split(":")[0] for p in got.problems] == [
        "spec.gpus[0]",
        "spec.gpus[1]",
        "spec.gpus[2].migLayout",
    ]
    assert "Tesla T4" in got.problems[0] and "5g.60gb" in got.problems[2]


def test_a_mig_layout_placement_must_exist_for_its_profile() -> None:
    ok = desired_strategies(
        _np({"index": 0, "strategy": "mig", "migLayout": [{"profile": "3g.40gb", "placement": 4}]}), GPUS, {}
    )
    bad = desired_strategies(
        _np({"index": 0, "strategy": "mig", "migLayout": [{"profile": "3g.40gb", "placement": 2}]}), GPUS, {}
    )
    assert ok.strategies == {0: "mig"} and ok.problems == []
    assert bad.strategies == {} and "no placement 3g.40gb@2" in bad.problems[0]


def test_no_node_partitioning_means_the_flag() -> None:
    assert desired_strategies(None, GPUS, {0: "mig"}).strategies == {0: "mig"}


def test_the_change_record_survives_a_round_trip_and_a_broken_file_reads_as_none(tmp_path) -> None:
    write_record(tmp_path, ChangeRecord(4, {0: "mig", 1: "soft"}, {0: "soft", 1: "soft"}, APPLIED))
    assert read_record(tmp_path) == ChangeRecord(4, {0: "mig", 1: "soft"}, {0: "soft", 1: "soft"}, APPLIED)
    assert (tmp_path / "partitioning.json").stat().st_mode & 0o777 == 0o600
    (tmp_path / "partitioning.json").write_text("{not json")
    assert read_record(tmp_path) is None


def test_the_change_record_keeps_the_layouts_asked_for_before_and_published(tmp_path) -> None:
    new, old = {0: (("3g.40gb", 4), ("1g.10gb", None))}, {0: (("7g.80gb", 0),)}
    record = ChangeRecord(5, {0: "mig"}, {0: "mig"}, APPLYING, new, old, old)
    write_record(tmp_path, record)
    assert read_record(tmp_path) == record
    # A record from before layouts were recorded: none, i.e. every placement (what was published then).
    (tmp_path / "partitioning.json").write_text(
        '{"generation": 2, "state": "applied", "desired": {"0": "mig"}, "previous": {"0": "soft"}}'
    )
    assert read_record(tmp_path) == ChangeRecord(2, {0: "mig"}, {0: "soft"}, APPLIED)


L1, L2 = (("3g.40gb", 4), ("1g.10gb", 0)), (("7g.80gb", 0),)


def test_a_new_layout_waits_while_its_gpu_has_a_prepared_claim() -> None:
    now, waits = layouts_now({0: L1}, {0: L2}, {0: 1, 1: 0})
    assert now == {0: L1} and waits == {0: "waiting for 1 prepared claim (migLayout)"}
    assert layouts_now({0: L1}, {0: L2}, {0: 3})[1] == {0: "waiting for 3 prepared claims (migLayout)"}
    assert layouts_now({0: L1}, {0: L2}, {0: 0}) == ({0: L2}, {})


def test_dropping_or_adding_a_layout_waits_too_and_other_gpus_do_not_hold_it_up() -> None:
    # No layout (every placement) -> a layout, and back: both change what the GPU publishes.
    assert layouts_now({}, {0: L1}, {0: 1}) == ({}, {0: "waiting for 1 prepared claim (migLayout)"})
    assert layouts_now({0: L1}, {}, {0: 2}) == ({0: L1}, {0: "waiting for 2 prepared claims (migLayout)"})
    assert layouts_now({0: L1}, {}, {}) == ({}, {})
    # GPU 1 busy, GPU 0 idle: GPU 0 moves on; GPU 1 keeps its layout, which the spec still asks for.
    assert layouts_now({0: L1, 1: L1}, {0: L2, 1: L1}, {1: 4}) == ({0: L2, 1: L1}, {})


def test_status_reports_a_waiting_layout_like_a_waiting_strategy() -> None:
    modes = {0: Mode(0, "u0", "mig", "mig", "mig", True), 1: Mode(1, "u1", "soft", "soft", "soft", False)}
    status = status_of(modes, GPUS, 7, [], waits={0: "waiting for 1 prepared claim (migLayout)"})
    assert status["gpus"][0] == {
        "index": 0,
        "uuid": "u0",
        "migMode": "Enabled",
        "strategy": "mig",
        "pending": "waiting for 1 prepared claim (migLayout)",
    }
    applied = status["conditions"][0]
    assert (applied["status"], applied["reason"]) == ("False", "WaitingForGPUs")
    assert applied["message"] == "GPU 0: waiting for 1 prepared claim (migLayout)"
    assert status_of(modes, GPUS, 7, [], waits={})["conditions"][0]["status"] == "True"


def test_status_reports_waiting_gpus_resets_and_keeps_transition_times() -> None:
    modes = {
        0: Mode(0, "u0", "mig", "mig", None, False, "waiting for 1 prepared claim"),
        1: Mode(1, "u1", "soft", "soft", "soft", False),
        2: Mode(2, "u2", "exclusive", "exclusive", "exclusive", False),
    }
    first = status_of(modes, GPUS, 3, [])
    assert first["observedGeneration"] == 3
    assert first["gpus"][0] == {
        "index": 0,
        "uuid": "u0",
        "migMode": "Disabled",
        "pending": "waiting for 1 prepared claim",
    }
    assert first["gpus"][2]["migMode"] == "NotSupported" and first["gpus"][1]["strategy"] == "soft"
    applied, degraded = first["conditions"]
    assert (applied["status"], applied["reason"]) == ("False", "WaitingForGPUs")
    assert "GPU 0: waiting for 1 prepared claim" in applied["message"]
    assert degraded["status"] == "False"
    modes[0] = Mode(0, "u0", "mig", "mig", None, False, "needs reset")
    second = status_of(modes, GPUS, 3, [], previous=first)
    assert second["gpus"][0]["migMode"] == "ResetRequired"
    assert second["conditions"][1]["reason"] == "ResetRequired"
    assert second["conditions"][0]["lastTransitionTime"] == applied["lastTransitionTime"]


def test_status_is_applied_when_every_gpu_runs_what_it_can_and_degraded_on_fallback() -> None:
    modes = {0: Mode(0, "u0", "mig", "exclusive", "exclusive", False)}
    status = status_of(modes, GPUS, 1, [])
    applied, degraded = status["conditions"]
    assert applied["status"] == "True" and degraded["reason"] == "FeatureGateOff"
    assert status_of(modes, GPUS, 1, ["spec.gpus[3]: no GPU"])["conditions"][1]["reason"] == "InvalidSpec"


def test_a_valid_mig_layout_is_handed_on_and_overlapping_placements_are_refused() -> None:
    layout = [
        {"profile": "3g.40gb", "placement": 4},
        {"profile": "2g.20gb", "placement": 0},
        {"profile": "1g.10gb"},
    ]
    ok = desired_strategies(_np({"index": 0, "strategy": "mig", "migLayout": layout}), GPUS, {0: "soft"})
    assert ok.strategies == {0: "mig"} and ok.problems == []
    assert ok.layouts == {0: (("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", None))}
    plain = desired_strategies(_np({"index": 0, "strategy": "mig"}), GPUS, {0: "soft"})
    assert plain.layouts == {}  # no layout: every placement
    overlap = [{"profile": "4g.40gb", "placement": 0}, {"profile": "2g.20gb", "placement": 2}]
    bad = desired_strategies(_np({"index": 0, "strategy": "mig", "migLayout": overlap}), GPUS, {0: "soft"})
    assert bad.strategies == {0: "soft"} and bad.layouts == {}
    assert bad.problems == ["spec.gpus[0].migLayout: placements overlap: 4g.40gb@0 and 2g.20gb@2"]


def test_a_gpu_the_rules_pin_follows_only_a_pinned_entry() -> None:
    flag = {0: "mig", 1: "soft", 2: "soft"}
    sources = {0: "pinned", 1: "default", 2: "fallback"}
    got = desired_strategies(
        _np({"index": 0, "strategy": "soft"}, {"index": 1, "strategy": "exclusive"}),
        GPUS,
        flag,
        pinned={0},
        sources=sources,
    )
    assert got.strategies == {0: "mig", 1: "exclusive", 2: "soft"}
    assert got.sources == {0: "pinned", 1: "controller", 2: "fallback"}
    assert got.problems == [
        "spec.gpus[0]: gpu-0 is pinned to mig by the node's strategy rules; only an entry with pinned: true "
        "changes it"
    ]
    admin = desired_strategies(
        _np({"index": 0, "strategy": "soft", "pinned": True}), GPUS, flag, {0}, sources
    )
    assert admin.strategies[0] == "soft" and admin.sources[0] == "pinned" and admin.problems == []


def test_status_says_who_set_each_gpu_and_a_runtime_fallback_is_not_a_gate() -> None:
    modes = {
        0: Mode(0, "u0", "mig", "mig", "mig", True),
        1: FallbackMode(1, "u1", "mig", "soft", "soft", False, fallback="cannot enable MIG mode: refused"),
    }
    status = status_of(modes, GPUS, 1, [], sources={0: "pinned", 1: "default"})
    assert [(g["index"], g["source"]) for g in status["gpus"]] == [(0, "pinned"), (1, "fallback")]
    assert status["conditions"][1]["reason"] == "AsDesired"  # not FeatureGateOff


@dataclass
class FallbackMode(Mode):
    fallback: str = ""
