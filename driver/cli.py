"""The `carve` command: one subcommand per component, each defined next to the code it runs.

A subcommand module exposes `add_arguments(parser)` and `run(args) -> int`. Every long flag gets an
environment twin (`--node-name` <-> `CARVE_NODE_NAME`) that sets its default, so DaemonSets can
configure the plugin through env alone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# Defined outside this module so `python -m driver.cli` and `driver.cli` share one class.
from driver.errors import CliError

__all__ = ["CliError", "main"]

# subcommand -> (module, one-line help). Modules are imported only when chosen, so `carve slices`
# does not pay for grpc and `carve plugin` does not pay for the simulator.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("driver.gpu.command", "print the GPU inventory of this node (NVML or fake GPUs)"),
    "slices": ("driver.devices.command", "print the ResourceSlices a node would publish"),
    "plugin": ("driver.plugin.command", "run the DRA kubelet plugin"),
    "device-plugin": ("driver.legacy.command", "run the legacy device plugin (clusters without DRA)"),
    "scheduler-extender": ("driver.legacy.extender.command", "run the legacy scheduler extender"),
    "allocate": ("driver.allocator.command", "allocate ResourceClaims against ResourceSlices (dry run)"),
    "simulate": ("driver.simulate.command", "simulate a workload trace under each sharing strategy"),
    "demo": ("driver.demo", "run the end-to-end demo on fake GPUs"),
}


def env_twin(option: str) -> str:
    """`--node-name` -> `CARVE_NODE_NAME`."""
    return "CARVE_" + option.lstrip("-").replace("-", "_").upper()


def apply_env_defaults(parser: argparse.ArgumentParser) -> None:
    """Set each long option's default from its CARVE_* twin, when that variable is set."""
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or action.dest in ("help", "version"):
            continue
        name = env_twin(longs[0])
        if action.help and name not in action.help:
            action.help = f"{action.help} [env {name}]"
        raw = os.environ.get(name)
        if raw is None:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            action.default = raw.strip().lower() in ("1", "true", "yes", "on")
        elif isinstance(action, argparse._StoreFalseAction):
            action.default = raw.strip().lower() not in ("1", "true", "yes", "on")
        elif action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
            action.default = [v for v in raw.split(",") if v]
        else:
            action.default = action.type(raw) if callable(action.type) else raw
        action.required = False


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carve", description="GPU sharing for Kubernetes DRA.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sp)
            apply_env_defaults(sp)
            sp.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except CliError as e:
        print(f"carve {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
