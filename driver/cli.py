"""The `carve` command: one subcommand per component, each defined next to the code it runs.

A subcommand module exposes `add_arguments(parser)` and `run(args) -> int`. Every long flag gets an
environment twin (`--node-name` <-> `CARVE_NODE_NAME`) that sets its default, so DaemonSets can
configure the plugin through env alone. A twin is checked exactly as its flag is (type, choices), and a
bad value is an error naming the variable, raised before anything else (`--help` included): a DaemonSet
with a typo in its env must not start with a default the operator did not choose.

Boolean flags have one form everywhere: `--leader-elect` / `--no-leader-elect`
(argparse.BooleanOptionalAction), and their twins take true/false (also 1/0, yes/no, on/off).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from driver import __version__

# Defined outside this module so `python -m driver.cli` and `driver.cli` share one class.
from driver.errors import CliError, not_text, yaml_error

__all__ = ["LOG_LEVELS", "CliError", "main"]

# The levels driver/plugin/logfmt.py understands; every --log-level takes exactly these.
LOG_LEVELS = ("error", "warn", "info", "debug")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

# subcommand -> (module, one-line help). Modules are imported only when chosen, so `carve slices`
# does not pay for grpc and `carve plugin` does not pay for the simulator.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("driver.gpu.command", "print the GPU inventory of this node (NVML or fake GPUs)"),
    "slices": ("driver.devices.command", "print the ResourceSlices a node would publish"),
    "status": ("driver.status.command", "show who holds which GPU: one row per allocated device"),
    "plugin": ("driver.plugin.command", "run the DRA kubelet plugin"),
    "controller": ("driver.controller.command", "run the strategy controller (plans each GPU's strategy)"),
    "device-plugin": ("driver.legacy.command", "run the legacy device plugin (clusters without DRA)"),
    "scheduler-extender": ("driver.legacy.extender.command", "run the legacy scheduler extender"),
    "convert": ("driver.convert.command", "HAMi pod specs to ResourceClaimTemplates + pod specs"),
    "allocate": ("driver.allocator.command", "allocate ResourceClaims against ResourceSlices (dry run)"),
    "simulate": ("driver.simulate.command", "simulate a workload trace under each sharing strategy"),
    "demo": ("driver.demo", "run the end-to-end demo on fake GPUs"),
}


class HelpFormatter(argparse.HelpFormatter):
    """Help that shows each flag's default, unless its text already says it or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text.lower()
            or default in (None, "", [], argparse.SUPPRESS)
            or not action.option_strings
            or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
        ):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, list) else default
        if isinstance(default, bool):
            shown = "true" if default else "false"
        # Escape % so argparse's own %-formatting leaves the value alone.
        return f"{text} (default: {str(shown).replace('%', '%%')})"


def env_twin(option: str) -> str:
    """`--node-name` -> `CARVE_NODE_NAME`."""
    return "CARVE_" + option.lstrip("-").replace("-", "_").upper()


def parse_bool(raw: str, name: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise CliError(f"{name}={raw!r}: not a boolean; use true or false")


def _convert(action: argparse.Action, raw: str, name: str) -> Any:
    """One value of a twin, converted and checked as argparse checks the flag's value."""
    value: Any = raw
    if callable(action.type):
        try:
            value = action.type(raw)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
            kind = getattr(action.type, "__name__", "value")
            detail = str(e) if isinstance(e, argparse.ArgumentTypeError) else f"not a valid {kind}"
            raise CliError(f"{name}={raw!r}: {detail} (as {action.option_strings[-1]})") from None
    if action.choices is not None and value not in action.choices:
        allowed = ", ".join(map(str, action.choices))
        raise CliError(f"{name}={raw!r}: not one of {allowed} (as {action.option_strings[-1]})")
    return value


def apply_env_defaults(parser: argparse.ArgumentParser, environ: dict[str, str] | None = None) -> None:
    """Set each long option's default from its CARVE_* twin, when that variable is set.

    Raises CliError naming the variable when its value would be refused on the command line."""
    env = os.environ if environ is None else environ
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")]
        if not longs or action.dest in ("help", "version"):
            continue
        name = env_twin(longs[0])
        if action.help and name not in action.help:
            action.help = f"{action.help} [env {name}]"
        raw = env.get(name)
        if raw is None:
            continue
        if isinstance(action, (argparse.BooleanOptionalAction, argparse._StoreTrueAction)):
            action.default = parse_bool(raw, name)
        elif isinstance(action, argparse._StoreFalseAction):
            action.default = not parse_bool(raw, name)
        elif action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
            action.default = [_convert(action, v, name) for v in raw.split(",") if v]
        else:
            action.default = _convert(action, raw, name)
        action.required = False


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="carve", description="GPU sharing for Kubernetes DRA.", formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"carve {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sp)
            apply_env_defaults(sp)
            sp.set_defaults(_run=module.run)
    return parser


def _quiet_stdout() -> None:
    # The reader went away (`carve inspect | head -1`): point stdout at /dev/null so the interpreter's
    # final flush does not raise a second BrokenPipeError on the way out.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    command = chosen if chosen in SUBCOMMANDS else None
    try:
        parser = build_parser(command)
    except CliError as e:
        print(f"carve {command or ''}: {e}".replace(" :", ":"), file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        rc = int(args._run(args) or 0)
        sys.stdout.flush()
        return rc
    except CliError as e:
        print(f"carve {args.command}: {e}", file=sys.stderr)
        return 2
    except yaml.YAMLError as e:
        print(f"carve {args.command}: {yaml_error('input', e)}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as e:  # any other file read as text (a kubeconfig, a node config, stdin)
        print(f"carve {args.command}: {not_text('input', e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _quiet_stdout()
        return 141  # as a shell reports a process killed by SIGPIPE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
