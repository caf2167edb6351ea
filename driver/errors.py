"""Errors shared across components."""


class CliError(Exception):
    """A usage error the user can fix; `carve` prints it as one line and exits 2."""


def yaml_error(label: str, error: Exception) -> str:
    """`f.yaml:3:7: invalid YAML: mapping values are not allowed here`: where the parser stopped (1-based)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    named = getattr(mark, "name", "") or ""
    if label == "input" and named and not named.startswith("<"):
        label = named  # PyYAML names the file it read from (a kubeconfig, say)
    if mark is None:
        return f"{label}: invalid YAML: {problem}"
    return f"{label}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {problem}"


def not_text(label: str, error: UnicodeDecodeError) -> str:
    """`trace.yaml: not UTF-8 text: byte 0xff at offset 0`: YAML and JSON input is UTF-8 (a binary file, an
    export in another encoding)."""
    bad = error.object[error.start : error.start + 1] if isinstance(error.object, bytes) else b""
    byte = f"byte 0x{bad.hex()}" if bad else "a byte"
    return f"{label}: not UTF-8 text: {byte} at offset {error.start}"
