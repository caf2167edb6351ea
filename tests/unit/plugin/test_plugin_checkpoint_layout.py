"""The checkpoint's claim layout is dataclasses.asdict's (less the uid): claim_to_json builds it by hand for
speed (docs/performance.md), and must not drift from the records when a field is added."""

from __future__ import annotations

import json
from dataclasses import asdict

from hypothesis import given
from hypothesis import strategies as st

from driver.plugin.state.checkpoint import (
    ClaimRecord,
    DeviceRecord,
    MigRecord,
    claim_from_json,
    claim_to_json,
)

TEXT = st.text(max_size=6)
MIGS = st.builds(
    MigRecord,
    TEXT,
    TEXT,
    st.integers(0, 7),
    st.none() | st.integers(0, 14),
    st.none() | TEXT,
    st.none() | st.integers(0, 7),
)
DEVICES = st.builds(
    DeviceRecord,
    st.lists(TEXT, max_size=2),
    TEXT,
    TEXT,
    st.none() | TEXT,
    st.lists(TEXT, max_size=2),
    TEXT,
    TEXT,
    st.none() | MIGS,
    st.booleans(),
)
CLAIMS = st.builds(
    ClaimRecord,
    st.just("uid-1"),
    TEXT,
    TEXT,
    st.sampled_from(["PrepareStarted", "PrepareCompleted"]),
    st.lists(DEVICES, max_size=3),
    st.lists(TEXT, max_size=2),
)


@given(CLAIMS)
def test_claim_to_json_is_asdict_without_the_uid(claim):
    expected = asdict(claim)
    expected.pop("uid")
    assert json.dumps(claim_to_json(claim)) == json.dumps(expected)  # same keys, same order, same values


@given(CLAIMS)
def test_a_claim_survives_its_round_trip(claim):
    assert claim_from_json(claim.uid, json.loads(json.dumps(claim_to_json(claim)))) == claim
