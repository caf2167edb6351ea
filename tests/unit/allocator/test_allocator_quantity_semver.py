"""Quantity and semver parsing, ordering and printing, against known Kubernetes behaviour."""

import itertools
from fractions import Fraction

import pytest

from driver.allocator import quantity as q
from driver.allocator import semver as sv


@pytest.mark.parametrize(("text", "value"), [
    ("1Gi", 2**30), ("1.5Gi", 3 * 2**29), ("500m", Fraction(1, 2)), ("1k", 1000), ("1M", 10**6),
    ("2Ei", 2 * 2**60), ("1e3", 1000), ("1.5E2", 150), ("-1Ki", -1024), ("+7", 7), (".5", Fraction(1, 2)),
    ("1n", Fraction(1, 10**9)), ("10u", Fraction(1, 10**5)), ("1.", 1),
])
def test_quantity_parses_kubernetes_suffixes(text, value):
    assert q.parse(text).value == value


@pytest.mark.parametrize("text", ["", "1K", "1 Gi", "Gi", "1GB", "1.2.3", "--1", "1e", "0x10", " 1"])
def test_quantity_rejects_what_kubernetes_rejects(text):
    with pytest.raises(q.QuantityError):
        q.parse(text)


def test_quantity_rounds_below_nano_up():
    assert q.parse("0.1n").value == Fraction(1, 10**9)
    assert q.parse("1.0000000001").value == 1 + Fraction(1, 10**9)


@pytest.mark.parametrize(("text", "printed"), [
    ("1.5Gi", "1536Mi"), ("1024Mi", "1Gi"), ("0.5", "500m"), ("1000", "1k"), ("1500", "1500"),
    ("1e3", "1e3"), ("100Mi", "100Mi"), ("1000Mi", "1000Mi"), ("512", "512"), ("2048Ki", "2Mi"),
])
def test_quantity_prints_canonical_form(text, printed):
    assert q.canonical(q.parse(text)) == printed


def test_quantities_compare_by_value_not_format():
    assert q.parse("1Gi") == q.parse("1073741824")
    assert q.parse("1k") == q.parse("1e3")
    assert q.parse("1Gi") > q.parse("1G")
    assert q.parse("999m") < q.parse("1")


def test_semver_precedence_follows_the_spec():
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
             "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.10.0", "2.0.0"]
    parsed = [sv.parse(v) for v in order]
    assert all(a < b for a, b in itertools.pairwise(parsed))
    assert sv.parse("1.0.0+build.5") == sv.parse("1.0.0")


@pytest.mark.parametrize("text", ["1.0", "01.0.0", "v1.0.0", "1.0.0-", "1.0.0-01", ""])
def test_semver_strict_rejects_non_semver(text):
    assert not sv.is_semver(text)


def test_semver_normalize_accepts_short_and_prefixed_versions():
    assert sv.parse("v1.2", normalize=True) == sv.parse("1.2.0")
    assert sv.parse("01.002.3", normalize=True) == sv.parse("1.2.3")
    assert sv.parse("8", normalize=True).major == 8
