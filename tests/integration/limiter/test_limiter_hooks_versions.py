"""The limiter's symbol table (native/src/hooks.h) against NVIDIA's header: each row's version is one at
which cudaTypedefs.h declares that entry point (PFN_<name>_v<version>, `_ptsz` for the per-thread-stream
variants). cuGetProcAddress resolves a name by version; a row whose version is off (10001 for
cuGraphLaunch's 10000) makes the limiter miss the driver's answer at the real version and leave that entry
point unlimited where the driver hands out internal addresses (a survivor of generated mutants)."""

from __future__ import annotations

import re
from pathlib import Path

import nvidia

REPO = Path(__file__).resolve().parents[3]
# every row of the CUDA table; the version as written (a bare number: anything else is an error below)
ROW = re.compile(r"\b([HA])\(\s*(cu\w+)\s*,\s*(cu\w+)\s*,"
                 r"\s*([^,()]*(?:\([^)]*\))?[^,()]*?)\s*,\s*([01])\s*\)")


def _header(name: str) -> str:
    for root in nvidia.__path__:
        for header in sorted(Path(root).glob(f"*/include/{name}")):
            return header.read_text()
    raise AssertionError(f"{name} is not in the nvidia wheels: run `make native` (it installs them)")


def test_every_hook_rows_version_is_one_nvidia_declares_for_its_name():
    declared = set(re.findall(r"\bPFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\b", _header("cudaTypedefs.h")))
    aliases = set(re.findall(r"^#define (cu\w+) +(cu\w+)\s*$", _header("cuda.h"), re.M))
    rows = ROW.findall((REPO / "native" / "src" / "hooks.h").read_text())
    assert len(rows) >= 30, "hooks.h rows not found: the parse is broken"
    wrong = []
    for kind, symbol, base, version, per_thread in rows:
        if kind == "A":  # another name for a listed symbol: cuda.h maps the name to it (CUDA 12.0's renames)
            if (base, symbol) not in aliases:
                wrong.append(f"{base} as {symbol}")
            continue
        if not version.isdigit():
            wrong.append(f"{base} at {version!r}")
            continue
        variants = {(base, version, "_ptsz"), (base, version, "_ptds")} if per_thread == "1" else {
            (base, version, "")}
        if not variants & declared:
            wrong.append(f"{base} at {version}{' (per-thread)' if per_thread == '1' else ''}")
    assert not wrong, f"hooks.h versions cudaTypedefs.h does not declare: {wrong}"


def test_every_cuda_row_says_whether_it_is_a_per_thread_variant_and_names_its_base():
    # The per-thread column picks the hook for a cuGetProcAddress answer that is not the driver's export (by
    # name, version and stream flags): a row that says otherwise than its name hands a per-thread caller the
    # legacy-stream hook, or the reverse.
    text = (REPO / "native" / "src" / "hooks.h").read_text()
    cuda = text[text.index("#define CARVE_CUDA_HOOKS") : text.index("#define CARVE_NVML_HOOKS")]
    written = re.findall(r"^\s+[HA]\(", cuda, re.M)
    rows = ROW.findall(cuda)
    assert len(rows) == len(written), "a row does not parse (a per-thread column other than 0 or 1)"
    wrong = []
    for kind, symbol, base, _, per_thread in rows:
        if kind == "A":
            continue
        if per_thread != ("1" if symbol.endswith(("_ptsz", "_ptds")) else "0"):
            wrong.append(f"{symbol}: per_thread {per_thread}")
        if base != re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", symbol):
            wrong.append(f"{symbol}: base {base}")
    assert not wrong, wrong
