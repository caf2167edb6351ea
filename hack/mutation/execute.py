"""One mutant in place: written into its file, the package built (C), its owner's tests run, the file put
back whatever happens. A backup beside it (`.<name>.mutate-orig`) makes even a SIGKILLed run recoverable
by the next one, and a lock keeps a second run of the same package in the same tree out."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import config
from .config import Owner, Package
from .mutant import Mutant


def backup_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.mutate-orig")


def restore_leftovers(packages: Iterable[Package]) -> None:
    """A run killed with SIGKILL leaves its backup: put the original back before anything else."""
    for pkg in packages:
        for f in pkg.files():
            backup = backup_of(config.ROOT / f)
            if backup.exists():
                os.replace(backup, config.ROOT / f)
                print(f"restored {f} from a previous interrupted run", flush=True)


@contextmanager
def package_lock(pkg: Package) -> Iterator[bool]:
    """This tree's lock of the package, held for the block; yields False when another run holds it. A
    second run of a package would take the first's backup for a leftover and put it back under the
    first's running tests. (Runs of different packages may share a tree when one's mutants cannot reach
    the other's tests: driver/allocator beside native/src, not native/src beside driver/limits, whose
    tests preload the limiter.)"""
    tag = hashlib.sha256(f"{config.ROOT}\0{pkg.name}".encode()).hexdigest()[:12]
    fd = os.open(Path(tempfile.gettempdir()) / f"carve-mutate-{tag}.lock", os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)  # the lock goes with the descriptor (and with the process, SIGKILLed or not)


# Signals a runner may inherit ignored (nohup: SIGHUP; a script's background job: SIGINT and SIGQUIT) and
# would pass on, ignored, to every process the tests start: a mutant that sends one to a live process (the
# limiter's `kill(pid, 0)` liveness probe as `kill(pid, 1)`) would then survive. The owner tests run with each
# at its default, as on a terminal or in CI. (subprocess's restore_signals resets only SIGPIPE and SIGXFSZ.)
DEFAULT_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)


def _default_signals() -> None:
    for sig in DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def run_tests(tests: tuple[str, ...], timeout: float, python: str) -> tuple[str, str, float]:
    """('passed' | 'failed' | 'timeout', detail, seconds)."""
    cmd = [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    # No bytecode written: a mutant's .pyc carries the source's mtime (seconds) and size, and a mutant of
    # the same size restored within the same second would be run again from it by every later test.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=config.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env, preexec_fn=_default_signals)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.communicate()
        return "timeout", f"timed out after {timeout:.0f}s", time.monotonic() - start
    finally:
        # What the tests started and left behind goes with pytest: a client a mutant made loop forever, whose
        # test timed out or failed first, would otherwise spin on a core through every later mutant's run.
        _kill_group(proc.pid)
    took = time.monotonic() - start
    if proc.returncode == 0:
        return "passed", "", took
    failed = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return "failed", failed[0] if failed else f"pytest exit {proc.returncode}", took


def _kill_group(pgid: int) -> None:
    """SIGKILL pytest's process group (its session: start_new_session), if anything is left in it. A process
    that made a session of its own (a plugin process a test starts that way) is its test's to stop."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _drop_bytecode(target: Path) -> None:
    """The module's cached bytecode, which could be a mutant's from an earlier run (see run_tests)."""
    for pyc in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def build(pkg: Package) -> bool:
    if not pkg.build:
        return True
    return subprocess.run(pkg.build, shell=True, cwd=config.ROOT, capture_output=True,
                          check=False).returncode == 0


def fingerprint(pkg: Package) -> str | None:
    """A digest of what the package's built artifact runs: every section the loader maps (code, data,
    the dynamic symbols), without the debug sections, the static symbol table and the build-id note,
    which change with a line's columns or the build's own hash and not with what the program does. None
    when the package names no artifact, or the artifact cannot be read (then every mutant is run).

    Two builds with the same digest are the same program: a mutant that builds to the unmutated tree's
    is equivalent by construction, and no test can kill it (trivial compiler equivalence, as
    universalmutator prunes the mutants of compiled languages it builds itself; its C rules do not build)."""
    if not pkg.artifact:
        return None
    with tempfile.TemporaryDirectory(prefix="carve-mutate-fp-") as tmp:
        stripped = Path(tmp) / "artifact"
        r = subprocess.run(["objcopy", "--strip-all", "--remove-section=.note.gnu.build-id",
                            str(config.ROOT / pkg.artifact), str(stripped)], capture_output=True, check=False)
        if r.returncode != 0:
            return None
        return hashlib.sha256(stripped.read_bytes()).hexdigest()


def run_mutant(m: Mutant, pkg: Package, owner: Owner, timeout: float, python: str,
               unmutated: str | None = None) -> tuple[str, str]:
    """('killed' | 'survived' | 'invalid' | 'equivalent', detail); the file is restored (and rebuilt) on
    return. `unmutated`: the unmutated tree's fingerprint; a mutant that builds to it is 'equivalent'."""
    target = config.ROOT / m.path
    _drop_bytecode(target)
    original = target.read_bytes()
    backup = backup_of(target)
    backup.write_bytes(original)
    try:
        target.write_text(m.text)
        if not build(pkg):
            return "invalid", "does not build"
        if unmutated is not None and fingerprint(pkg) == unmutated:
            return "equivalent", f"builds to the same {pkg.artifact} as the unmutated tree"
        if m.path.endswith(".py"):
            check = subprocess.run([python, "-m", "py_compile", str(target)], capture_output=True)
            if check.returncode != 0:
                return "invalid", "does not compile"
        verdict, detail, took = run_tests(owner.tests, timeout, python)
        if verdict == "passed":
            return "survived", f"tests passed in {took:.0f}s"
        return "killed", f"{detail} ({took:.0f}s)"
    finally:
        target.write_bytes(original)
        backup.unlink(missing_ok=True)
        _drop_bytecode(target)
        if pkg.build:
            build(pkg)
