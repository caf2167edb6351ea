"""docs/health.md's XID table is what the health policy does: each XID it lists as ignored leaves the GPU
healthy, each it lists as unhealthy taints it and is described with the table's meaning; and of two causes
seen on one GPU the graver names its taint (a lost GPU over pages pending over a failed event wait over an
XID), whatever the order they come in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from driver.plugin.health.policy import (
    CAUSE_EVENT_ERROR,
    CAUSE_LOST,
    CAUSE_PAGES,
    HealthBook,
    describe,
    xid_cause,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "health.md"
GENERIC = "a GPU error the driver reports as critical"


def _table() -> dict[int, tuple[str, str]]:
    """XID -> (meaning, carve's action) from the doc's `| XID | meaning | carve |` rows."""
    rows: dict[int, tuple[str, str]] = {}
    for line in DOC.read_text().splitlines():
        m = re.fullmatch(r"\| ([\d, ]+) \| (.+?) \| (ignored|unhealthy) \|", line.strip())
        if m:
            numbers = [int(n) for n in m.group(1).split(",")]
            for n in numbers:
                rows[n] = (m.group(2), m.group(3))
    return rows


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9-]+", text.lower())) - {"the", "a"}


TABLE = _table()


def test_the_doc_lists_the_xids_the_policy_knows():
    # the parse itself: six application XIDs and the fatal ones the doc names
    assert sorted(n for n, (_, act) in TABLE.items() if act == "ignored") == [13, 31, 43, 45, 68, 109]
    assert sorted(n for n, (_, act) in TABLE.items() if act == "unhealthy") == [
        48,
        62,
        63,
        64,
        74,
        79,
        92,
        94,
        95,
        119,
        120,
    ]


@pytest.mark.parametrize("xid", sorted(n for n, (_, act) in TABLE.items() if act == "ignored"))
def test_an_xid_the_doc_calls_the_applications_leaves_the_gpu_healthy(xid):
    assert xid_cause(xid, ()) is None


@pytest.mark.parametrize("xid", sorted(n for n, (_, act) in TABLE.items() if act == "unhealthy"))
def test_an_xid_the_doc_calls_fatal_taints_the_gpu_and_is_described_with_the_docs_meaning(xid):
    assert xid_cause(xid, ()) == f"xid-{xid}"
    text = describe(f"xid-{xid}")
    assert text.startswith(f"critical XID {xid}: ")
    meaning = text.removeprefix(f"critical XID {xid}: ")
    assert meaning != GENERIC, f"XID {xid} has no meaning of its own"
    assert _words(meaning) <= _words(TABLE[xid][0]), (meaning, TABLE[xid][0])


def test_an_xid_the_doc_does_not_list_is_fatal_with_the_generic_meaning():
    assert xid_cause(77, ()) == "xid-77"
    assert describe("xid-77") == f"critical XID 77: {GENERIC}"


GRAVITY = ["xid-79", CAUSE_EVENT_ERROR, CAUSE_PAGES, CAUSE_LOST]  # least grave first


@pytest.mark.parametrize("lesser,graver", [(a, b) for i, a in enumerate(GRAVITY) for b in GRAVITY[i + 1 :]])
def test_the_graver_of_two_causes_names_the_taint_in_either_order(lesser, graver):
    for first, second in ((lesser, graver), (graver, lesser)):
        book = HealthBook(recovery_s=10)
        book.track("GPU-a", 0)
        assert book.observe("GPU-a", first, now=1) is not None
        assert book.observe("GPU-a", second, now=2) is None  # unhealthy already: no second flip
        assert book.unhealthy() == {0: graver}, (first, second)


def test_a_later_xid_replaces_an_earlier_one():
    book = HealthBook(recovery_s=10)
    book.track("GPU-a", 0)
    book.observe("GPU-a", "xid-79", now=1)
    book.observe("GPU-a", "xid-48", now=2)
    assert book.unhealthy() == {0: "xid-48"}
