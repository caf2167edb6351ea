"""hack/mutation_packages.yaml (packages, their files and the tests that own them) and
hack/mutants_allowed.yaml (survivors equivalent to the code), read and checked."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import yaml

from .mutant import Mutant

ROOT = Path(__file__).resolve().parents[2]
PACKAGES_FILE = ROOT / "hack" / "mutation_packages.yaml"
ALLOWED_FILE = ROOT / "hack" / "mutants_allowed.yaml"


class ConfigError(Exception):
    """hack/mutation_packages.yaml or hack/mutants_allowed.yaml is malformed; names the entry and field."""


@dataclass(frozen=True)
class Owner:
    files: tuple[str, ...]
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Package:
    name: str
    owners: tuple[Owner, ...]
    goal: int | None = None
    build: str = ""
    # What `build` makes that the tests load (a compiled package): a mutant that builds to the same code and
    # data as the unmutated tree is equivalent by construction (execute.fingerprint), so it is not run.
    artifact: str = ""

    def owner_of(self, path: str) -> Owner | None:
        return next((o for o in self.owners if any(fnmatch.fnmatchcase(path, g) for g in o.files)), None)

    def files(self) -> list[str]:
        out = set()
        for o in self.owners:
            for g in o.files:
                out.update(str(p.relative_to(ROOT)) for p in ROOT.glob(g) if p.is_file())
        return sorted(out)


@dataclass(frozen=True)
class Allowed:
    path: str
    original: str
    mutated: str
    reason: str

    def matches(self, m: Mutant) -> bool:
        # `mutated: "*"`: every mutant of the line (a line whose effect no test can observe, said in reason)
        return (m.path == self.path and m.original_line.strip() == self.original.strip()
                and (self.mutated.strip() == "*" or m.mutated_line.strip() == self.mutated.strip()))


def _strings(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: a non-empty list of strings")
    return tuple(value)


def load_packages(path: Path | None = None) -> list[Package]:
    path = path or PACKAGES_FILE
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("packages"), list):
        raise ConfigError(f"{path}: expected a mapping with a 'packages' list")
    out = []
    for i, p in enumerate(raw["packages"]):
        where = f"{path}: packages[{i}]"
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise ConfigError(f"{where}.name: missing")
        if not isinstance(p.get("owners"), list) or not p["owners"]:
            raise ConfigError(f"{where}.owners: a non-empty list")
        owners = []
        for j, o in enumerate(p["owners"]):
            if not isinstance(o, dict):
                raise ConfigError(f"{where}.owners[{j}]: expected a mapping")
            tests = _strings(o.get("tests"), f"{where}.owners[{j}].tests")
            for t in tests:
                if not (ROOT / t.split("::")[0]).exists():
                    raise ConfigError(f"{where}.owners[{j}].tests: {t} does not exist")
            owners.append(Owner(_strings(o.get("files"), f"{where}.owners[{j}].files"), tests))
        goal = p.get("goal")
        if goal is not None and not (isinstance(goal, int) and 0 <= goal <= 100):
            raise ConfigError(f"{where}.goal: a percentage (0-100)")
        build, artifact = str(p.get("build") or ""), str(p.get("artifact") or "")
        if artifact and not build:
            raise ConfigError(f"{where}.artifact: only a package with a build has an artifact")
        out.append(Package(p["name"], tuple(owners), goal, build, artifact))
    return out


def load_allowed(path: Path | None = None) -> list[Allowed]:
    path = path or ALLOWED_FILE
    if not path.exists():
        return []
    raw = yaml.safe_load(path.read_text()) or {}
    entries = raw.get("allowed") if isinstance(raw, dict) else None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: 'allowed' must be a list")
    out = []
    for i, e in enumerate(entries):
        where = f"{path}: allowed[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: expected a mapping")
        for key in ("file", "original", "mutated", "reason"):
            if not isinstance(e.get(key), str) or not e[key].strip():
                raise ConfigError(f"{where}.{key}: missing (each allowed survivor says why it is equivalent)")
        out.append(Allowed(e["file"], e["original"], e["mutated"], e["reason"]))
    return out
