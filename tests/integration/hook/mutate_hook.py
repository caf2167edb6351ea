"""Mutation check of carve-cdi-hook: every small plausible bug must fail at least one hook test.

    .venv/bin/python tests/integration/hook/mutate_hook.py [name ...]

Each mutant is one textual change to native/hook/*.c, built (static, like native/Makefile) into a
temporary directory; the hook tests run against it through CARVE_TEST_HOOK and stop at the first failure.
Prints KILLED or SURVIVED per mutant and exits 1 if one survived (or an EQUIVALENT one was killed).
Needs root (the tests do). Not collected by pytest (no test_ prefix): it takes minutes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HOOK_SRC = REPO / "native/hook"
TESTS = [
    "tests/integration/hook/test_hook_escape.py",
    "tests/integration/hook/test_hook_runc.py",
    "tests/integration/hook/test_hook_preload_glibc.py",
    "tests/integration/hook/test_hook_preload.py",
    "tests/integration/hook/test_hook_links_ldcache.py",
]

# name -> (file, text, replacement): each text must occur exactly once
MUTANTS: dict[str, tuple[str, str, str]] = {
    "no RESOLVE_NO_XDEV": ("contain.c", "RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)", "RESOLVE_NO_MAGICLINKS)"),
    "no RESOLVE_NO_MAGICLINKS": (
        "contain.c",
        "(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS |",
        "(RESOLVE_IN_ROOT |",
    ),
    "no RESOLVE_IN_ROOT": (
        "contain.c",
        "(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS |",
        "(RESOLVE_NO_MAGICLINKS |",
    ),
    "no /proc and /sys detach": ("contain.c", "if (detach_pseudo(rootfd, pseudo[i]) != 0)", "if (0)"),
    "detach only sysfs": ("contain.c", "sf.f_type == PROC_SUPER_MAGIC ||", "0 ||"),
    "ldconfig makes links": ("ldcache.c", 'args[n++] = "-X"; /* no links */', ""),
    "no SONAME filter": ("ldcache_file.c", "if (names_a_path(key)) {", "if (0) {"),
    "SONAME filter misses '..'": ("ldcache_file.c", ' || strcmp(soname, "..") == 0', ""),
    "no comment rule": (
        "preload_list.c",
        "    while (rest > 0) {\n        char *comment",
        "    while (0) {\n        char *comment",
    ),
    "comment scan start advanced": (
        "preload_list.c",
        "        rest -= (size_t)(comment - runp);\n",
        "        rest -= (size_t)(comment - runp);\n        runp = comment;\n",
    ),
    "CR is a separator": ("preload_list.c", 'strsep(&runp, ": \\t\\n")', 'strsep(&runp, ": \\t\\n\\r")'),
    "limiter copies kept": (
        "preload_list.c",
        "            continue; /* the limiter once, first */",
        "            ;",
    ),
    "limiter appended last": ("preload_list.c", 'n += (size_t)sprintf(out, "%s\\n", lib);', "out[0] = 0;"),
    "directory check skipped": ("symlinks.c", "&& S_ISDIR(st.st_mode))", "&& 0)"),
}


# Mutants no test can kill, and why: they must still survive (a kill would mean the reason is wrong).
EQUIVALENT = {
    # magic links live only in procfs, and reaching any procfs from the root crosses a mount point,
    # which RESOLVE_NO_XDEV refuses first: NO_MAGICLINKS is defense in depth
    "no RESOLVE_NO_MAGICLINKS",
}


def build(src: Path, out: Path) -> None:
    sources = sorted(str(p) for p in src.glob("*.c"))
    cmd = ["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-static", "-o", str(out), *sources]
    subprocess.run(cmd, check=True, capture_output=True)


def run(name: str, tmp: Path) -> bool:
    """True when the mutant is killed."""
    file, text, replacement = MUTANTS[name]
    src = tmp / "hook"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(HOOK_SRC, src, ignore=shutil.ignore_patterns("fuzz"))
    path = src / file
    code = path.read_text()
    if code.count(text) != 1:
        raise SystemExit(f"mutant {name!r}: {text!r} occurs {code.count(text)} times in {file}")
    path.write_text(code.replace(text, replacement))
    binary = tmp / "carve-cdi-hook"
    build(src, binary)
    env = {**os.environ, "CARVE_TEST_HOOK": str(binary)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.returncode != 0


def main(argv: list[str]) -> int:
    names = argv or list(MUTANTS)
    survived = []
    with tempfile.TemporaryDirectory(prefix="carve-mutate-") as tmp:
        for name in names:
            killed = run(name, Path(tmp))
            note = " (equivalent, expected)" if name in EQUIVALENT and not killed else ""
            print(f"{'KILLED  ' if killed else 'SURVIVED'} {name}{note}", flush=True)
            if killed == (name in EQUIVALENT):
                survived.append(name)
    print(f"{len(names) - len(survived)} of {len(names)} mutants as expected")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
