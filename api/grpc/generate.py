"""Generates the Python gRPC stubs in api/grpc/ from the .proto files in api/proto/ (`make protos`).

The generated modules are committed so that neither grpcio-tools nor protoc is needed at run time; a test
regenerates into a temporary directory and fails when the committed files differ. grpc_tools emits
`import dra_v1_pb2 as ...` in each *_pb2_grpc.py, which only works with api/grpc on sys.path; we rewrite
it to a package-relative import so the stubs load as `api.grpc.dra_v1_pb2_grpc`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

API_DIR = Path(__file__).resolve().parents[1]
PROTO_DIR = API_DIR / "proto"
GRPC_DIR = API_DIR / "grpc"

# `import foo_pb2 as foo__pb2` at the start of a line; only bare module names, never dotted ones.
_BARE_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


class GenerateError(Exception):
    """protoc failed; the message carries its exit status."""


def proto_files(proto_dir: Path = PROTO_DIR) -> list[Path]:
    return sorted(proto_dir.glob("*.proto"))


def generated_names(proto: Path) -> list[str]:
    """File names protoc writes for one .proto: message module, its type stub and the service module."""
    stem = proto.stem
    return [f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"]


def relative_imports(source: str) -> str:
    return _BARE_IMPORT.sub(r"from . import \1 as \2", source)


def generate(out_dir: Path = GRPC_DIR, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Run protoc on every .proto of proto_dir into out_dir; returns the files written."""
    # Imported here so that importing this module (e.g. for proto_files) needs no grpcio-tools.
    import importlib.resources

    from grpc_tools import protoc

    protos = proto_files(proto_dir)
    if not protos:
        raise GenerateError(f"no .proto files in {proto_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"--proto_path={proto_dir}",
        f"--proto_path={well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(p.name for p in protos),
    ]
    status = protoc.main(args)
    if status != 0:
        raise GenerateError(f"protoc exited with status {status} for {', '.join(p.name for p in protos)}")
    written: list[Path] = []
    for proto in protos:
        for name in generated_names(proto):
            path = out_dir / name
            if name.endswith("_pb2_grpc.py"):
                path.write_text(relative_imports(path.read_text()))
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api.grpc.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GRPC_DIR, help="output directory (default: api/grpc)")
    args = parser.parse_args(argv)
    try:
        written = generate(args.out)
    except GenerateError as e:
        print(f"generate: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
