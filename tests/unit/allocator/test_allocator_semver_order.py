"""Semantic versions as Kubernetes' semver library reads, orders and prints them (driver/allocator/semver.py):
semver 2.0.0's precedence, build metadata ignored, `semver(s, true)`'s normalizing, and the refusals."""

from __future__ import annotations

import itertools

import pytest

from driver.allocator import semver as sv

# semver.org section 11's example, in precedence order
ORDERED = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
           "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "1.10.0", "2.0.0"]


@pytest.mark.parametrize(("a", "b"), list(itertools.combinations(ORDERED, 2)))
def test_precedence_follows_semver_2(a, b):
    x, y = sv.parse(a), sv.parse(b)
    assert x.compare(y) == -1 and y.compare(x) == 1
    assert x < y and y > x and not y < x and not x > y
    assert x != y


def test_build_metadata_does_not_count_and_equal_versions_hash_alike():
    a, b = sv.parse("1.2.3+build.1"), sv.parse("1.2.3+other")
    assert a == b and hash(a) == hash(b) and a.compare(b) == 0 and not a < b and not a > b
    assert a != "1.2.3" and a != sv.parse("1.2.4")
    assert sv.parse("1.2.3-1") == sv.parse("1.2.3-1+x")
    assert sv.parse("1.2.3-2") < sv.parse("1.2.3-10") < sv.parse("1.2.3-a")  # numeric, then alphanumeric


def test_ordering_against_another_type_is_no_overload():
    with pytest.raises(TypeError):
        _ = sv.parse("1.0.0") < 1
    with pytest.raises(TypeError):
        _ = sv.parse("1.0.0") > "0.1.0"


@pytest.mark.parametrize(("text", "parts", "printed"), [
    ("1.2.3", (1, 2, 3, (), ""), "1.2.3"),
    ("0.0.0", (0, 0, 0, (), ""), "0.0.0"),
    ("1.2.3-rc.1", (1, 2, 3, ("rc", "1"), ""), "1.2.3-rc.1"),
    ("1.2.3+b.5", (1, 2, 3, (), "b.5"), "1.2.3+b.5"),
    ("10.20.30-a-b.0+x-y", (10, 20, 30, ("a-b", "0"), "x-y"), "10.20.30-a-b.0+x-y"),
])
def test_a_version_reads_its_parts_and_prints_back(text, parts, printed):
    v = sv.parse(text)
    assert (v.major, v.minor, v.patch, v.pre, v.build) == parts
    assert str(v) == printed and repr(v) == f"Semver({printed!r})"
    assert sv.is_semver(text)


@pytest.mark.parametrize(("text", "normalized"), [
    ("v1.2", "1.2.0"), ("1", "1.0.0"), ("01.002.3", "1.2.3"), ("v1.2.3-rc.1", "1.2.3-rc.1"),
    ("1.2+b", "1.2.0+b"), ("1.2.3", "1.2.3"),
])
def test_normalizing_reads_the_loose_forms(text, normalized):
    assert str(sv.parse(text, True)) == normalized
    assert sv.is_semver(text, True)


@pytest.mark.parametrize("text", ["v1.2", "1", "01.2.3", "1.2.3-01", "1.2.3-", "1.2.3+", "1.2.3.4", "", "x"])
def test_a_loose_or_broken_version_is_refused_without_normalizing(text):
    with pytest.raises(sv.SemverError, match="is not a semantic version"):
        sv.parse(text)
    assert not sv.is_semver(text)


@pytest.mark.parametrize("text", ["x", "1.2.3.4", "v", "1.x"])
def test_what_normalizing_cannot_read_is_refused(text):
    with pytest.raises(sv.SemverError):
        sv.parse(text, True)
    assert not sv.is_semver(text, True)


def test_a_non_string_is_refused_saying_its_type():
    with pytest.raises(sv.SemverError, match="version must be a string, not int"):
        sv.parse(1)
    assert not sv.is_semver(1) and not sv.is_semver(None, True)
