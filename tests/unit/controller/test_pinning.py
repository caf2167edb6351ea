"""Pinning: a GPU whose strategy the admin set (a plugin rule naming it, the node annotation, a pinned
NodePartitioning entry, the plugin's status saying so) is never changed; the others are the controller's,
and return to the plugins' bare default (where the policy allows it) rather than fight it."""

from __future__ import annotations

from support.partitioning import NOW, claim, mig, node_slices, policy, whole

from driver import names
from driver.controller.inputs import build_input, updated_partitioning
from driver.controller.planner import Planner
from driver.devices.rules import parse_rules
from driver.simulate.cluster import device_classes


def _plan(slices, claims, rules=None, partitionings=None, annotations=None, pol=None):
    inp, problems = build_input(
        slices,
        device_classes(),
        claims,
        partitionings or {},
        pol or policy(),
        NOW,
        plugin_rules=parse_rules(rules) if rules else None,
        node_annotations=annotations,
    )
    return inp, problems, Planner().plan(inp)


def _moves(p) -> list[tuple[str, int, str, str]]:
    return [(c.node, c.index, c.from_strategy, c.to_strategy) for c in p.changes]


def test_a_gpu_a_rule_names_by_index_is_never_changed_for_a_claim() -> None:
    slices = node_slices("n1", "2xA100-80GB", "soft")
    _, _, free = _plan(slices, [claim(mig())], rules="soft")
    assert _moves(free) == [("n1", 0, "soft", "mig")]
    inp, _, pinned = _plan(slices, [claim(mig())], rules="0=soft,soft")
    assert inp.nodes[0].pinned_indices == {0}
    assert _moves(pinned) == [("n1", 1, "soft", "mig")]


def test_a_gpu_a_rule_names_by_model_is_never_changed() -> None:
    slices = node_slices("n1", "2xA100-80GB", "soft")
    _, _, p = _plan(slices, [claim(mig())], rules="*A100*=soft,mig")
    assert p.changes == []


def test_the_node_annotation_pins_its_gpus() -> None:
    slices = node_slices("n1", "2xA100-80GB", "soft")
    annotations = {"n1": {names.ANNOTATION_STRATEGY: "soft"}}
    inp, problems, p = _plan(slices, [claim(mig())], rules="soft", annotations=annotations)
    assert not problems and inp.nodes[0].pinned_indices == {0, 1}
    assert p.changes == []


def test_a_malformed_annotation_is_a_problem_and_pins_nothing() -> None:
    slices = node_slices("n1", "1xA100-80GB", "soft")
    inp, problems, _ = _plan(slices, [], annotations={"n1": {names.ANNOTATION_STRATEGY: "0=turbo"}})
    assert inp.nodes[0].pinned == set()
    assert "'0=turbo': unknown strategy 'turbo'" in problems[0]


def test_a_pinned_node_partitioning_entry_stays_while_a_managed_gpu_changes() -> None:
    slices = node_slices("n1", "2xA100-80GB", "soft")
    np = {
        "n1": {
            "metadata": {"name": "n1", "resourceVersion": "3"},
            "spec": {"gpus": [{"index": 0, "strategy": "soft", "pinned": True}]},
        }
    }
    _, _, p = _plan(slices, [claim(mig())], partitionings=np)
    assert _moves(p) == [("n1", 1, "soft", "mig")]
    written = updated_partitioning("n1", np["n1"], p.changes, {1: "mig"}, NOW)
    assert written["spec"]["gpus"] == [
        {"index": 0, "strategy": "soft", "pinned": True},
        {"index": 1, "strategy": "mig"},
    ]


def test_the_plugin_s_status_source_pinned_is_honoured() -> None:
    slices = node_slices("n1", "1xA100-80GB", "soft")
    np = {
        "n1": {
            "metadata": {"name": "n1"},
            "spec": {},
            "status": {"gpus": [{"index": 0, "strategy": "soft", "migMode": "Disabled", "source": "pinned"}]},
        }
    }
    _, _, p = _plan(slices, [claim(mig())], partitionings=np)
    assert p.changes == []


def test_idle_gpus_return_to_the_plugins_bare_default_not_the_policy_s() -> None:
    # `--set plugin.strategy=mig` with the controller on: an idle A100 goes back to mig, not soft.
    slices = node_slices("n1", "2xA100-80GB", {0: "exclusive", 1: "mig"})
    _, _, p = _plan(slices, [], rules="mig")
    assert _moves(p) == [("n1", 0, "exclusive", "mig")]
    _, _, stays = _plan(node_slices("n1", "2xA100-80GB", "mig"), [], rules="mig")
    assert stays.changes == []


def test_a_gpu_that_cannot_run_the_bare_default_returns_to_the_policy_s() -> None:
    slices = node_slices("n1", "1xT4", "exclusive")
    _, _, p = _plan(slices, [], rules="mig")
    assert _moves(p) == [("n1", 0, "exclusive", "soft")]


def test_a_bare_default_the_policy_does_not_allow_is_not_home() -> None:
    slices = node_slices("n1", "1xA100-80GB", "exclusive")
    pol = policy(nodes=[{"allowedStrategies": ["exclusive", "soft"], "defaultStrategy": "soft"}])
    _, _, p = _plan(slices, [], rules="mig", pol=pol)
    assert _moves(p) == [("n1", 0, "exclusive", "soft")]


def test_a_pinned_gpu_is_not_consolidated() -> None:
    slices = node_slices("n1", "2xA100-80GB", "exclusive")
    _, _, p = _plan(slices, [], rules="1=exclusive,soft")
    assert _moves(p) == [("n1", 0, "exclusive", "soft")]
    _, _, busy = _plan(slices, [claim(whole(1))], rules="0=exclusive,1=exclusive")
    assert busy.changes == []
