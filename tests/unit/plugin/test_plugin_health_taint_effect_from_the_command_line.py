"""`carve plugin --health-taint-effect None` (a warning-only taint) is published only to an API server of
1.35 or later, which knows the effect; to an older one the GPU's taint is left out rather than refused
whole. The effect comes from the command line, a string of its own, not the literal the code compares it
with: it is compared by value."""

from __future__ import annotations

import argparse

from driver.plugin import command
from driver.plugin.health.policy import CAUSE_LOST, TaintPolicy, check_effect
from driver.plugin.health.taints import health_marks


def policy_from(argv: list[str]) -> TaintPolicy:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args, _rest = parser.parse_known_args(argv)
    return TaintPolicy(
        check_effect(args.health_taint_effect, "--health-taint-effect"),
        check_effect(args.health_lost_effect, "--health-lost-effect"),
    )


def test_a_warning_only_effect_from_the_command_line_waits_for_1_35() -> None:
    # Built at run time as argv holds them, not the module's own "None".
    none = "".join(["No", "ne"])
    policy = policy_from(["--health-taint-effect", none, "--health-lost-effect", none])
    assert health_marks({0: "xid-79", 1: CAUSE_LOST}, policy, taints_off=False, k8s_version="1.34") == {}
    marks = health_marks({0: "xid-79", 1: CAUSE_LOST}, policy, taints_off=False, k8s_version="1.35")
    assert {i: [t["effect"] for t in taints] for i, taints in marks["taints"].items()} == {
        0: ["None"],
        1: ["None"],
    }
