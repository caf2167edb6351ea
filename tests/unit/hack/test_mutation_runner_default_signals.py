"""The owner tests of a mutant run with SIGHUP, SIGINT, SIGQUIT and SIGTERM at their defaults, whatever the
runner inherited (hack/mutation/execute.py run_tests). A runner started under nohup passed SIGHUP on ignored
to every process the tests started, and the limiter's liveness probe `kill(pid, 0)` mutated to `kill(pid, 1)`
survived: the probed process shrugged the hangup off (found by the seventeenth session's native/src runs)."""

from __future__ import annotations

import signal
import sys

from mutation import config, execute

# The test writes which of the four signals its process ignores, from the kernel's SigIgn mask (Python keeps
# an inherited SIG_IGN and installs its own handler for SIGINT only where the disposition was the default).
TEST = """
import pathlib, signal

def test_dispositions():
    status = pathlib.Path("/proc/self/status").read_text()
    mask = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigIgn:")), 16)
    four = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
    ignored = [s.name for s in four if mask >> (s - 1) & 1]
    (pathlib.Path(__file__).parent / "ignored.txt").write_text(" ".join(ignored))
"""


def test_signals_ignored_by_the_runner_are_default_in_the_tests(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "ROOT", tmp_path)
    (tmp_path / "test_signals.py").write_text(TEST)
    # as nohup and a background job leave them; pytest's own SIGINT handler is put back after
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in execute.DEFAULT_SIGNALS}
    try:
        got, detail, _ = execute.run_tests(("test_signals.py",), 60, sys.executable)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert got == "passed", detail
    assert (tmp_path / "ignored.txt").read_text() == ""
