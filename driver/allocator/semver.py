"""Semantic versions (semver 2.0.0) for version attributes and the CEL semver library.

Device attributes of kind `version` must be strict semver 2.0.0 (the API server checks that), and
selectors compare them with `semver(...)`, `compareTo`, `isGreaterThan`, `isLessThan`. Precedence
follows the spec: numeric major.minor.patch, then pre-release identifiers (a release is greater
than its pre-releases), build metadata ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
# What `semver(s, true)` accepts before normalising: optional "v", 1-3 numeric parts with
# optional leading zeros, then the usual pre-release and build parts.
_LOOSE = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?((?:-|\+).*)?$")


class SemverError(ValueError):
    """A string that is not a semantic version."""


@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: str = ""
    text: str = ""  # as written (eq=False: the class compares by _key, which leaves it out)

    def _key(self) -> tuple:
        # A release sorts after all its pre-releases; numeric identifiers sort before alphanumeric.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, not self.pre, pre)

    def compare(self, other: Semver) -> int:
        a, b = self._key(), other._key()
        return (a > b) - (a < b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash(self._key())

    # Ordering a version against another type is "no such overload" in CEL: NotImplemented makes Python
    # raise TypeError, which cel-python turns into a CEL error that `&&` and `||` can absorb (an
    # AttributeError would escape the evaluator as a Python crash).
    def __lt__(self, other: object) -> bool:
        return self.compare(other) < 0 if isinstance(other, Semver) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self.compare(other) > 0 if isinstance(other, Semver) else NotImplemented

    def __str__(self) -> str:
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            s += "-" + ".".join(self.pre)
        if self.build:
            s += "+" + self.build
        return s

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


def parse(text: str, normalize: bool = False) -> Semver:
    """Strict semver 2.0.0; with normalize, also "v1.2", "1", "01.002.3" (as Kubernetes' semver(s, true))."""
    if not isinstance(text, str):
        raise SemverError(f"version must be a string, not {type(text).__name__}")
    if normalize:
        loose = _LOOSE.match(text)
        if loose:
            major, minor, patch, rest = loose.groups()
            text = f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{rest or ''}"
    m = _SEMVER.match(text)
    if not m:
        raise SemverError(f"{text!r} is not a semantic version (expected MAJOR.MINOR.PATCH, e.g. 8.0.0)")
    major, minor, patch, pre, build = m.groups()
    return Semver(int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else (), build or "", text)


def is_semver(text: object, normalize: bool = False) -> bool:
    if not isinstance(text, str):
        return False
    try:
        parse(text, normalize)
    except SemverError:
        return False
    return True
