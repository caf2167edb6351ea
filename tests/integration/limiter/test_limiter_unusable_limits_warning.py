"""The warning that a claim's limits file is unusable (binding.c, at binding) is logged only when one is: a
pod's stderr is the application's, and a false warning there sends an operator looking for a problem that
is not there. (Only that line is looked for: the limiter also scans the host's /var/run/carve, where a
machine running the plugin may hold other claims' directories it reports on.)"""

from __future__ import annotations

MIB = 1 << 20


def test_a_healthy_claims_process_is_not_warned_of_unusable_limits(claim):
    c = claim().create(memory=64 * MIB)
    out = c.run("alloc", str(1 * MIB))
    assert out.stdout.strip() == "0", out.stderr
    assert "limits file is unusable" not in out.stderr, out.stderr


def test_a_process_with_a_broken_limits_file_is_warned_of_it(claim):
    c = claim().create(memory=64 * MIB)
    c.limits.unlink()
    c.limits.write_bytes(b"not a limits file")
    out = c.run("alloc", str(1 * MIB))
    assert out.stdout.strip() == "2", out.stderr  # fails closed
    assert "warn: a claim's limits file is unusable" in out.stderr, out.stderr
