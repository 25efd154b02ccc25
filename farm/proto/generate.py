"""Regenerate the checked-in protobuf/gRPC stubs: ``python -m farm.proto.generate``.

Compiles ``farm.proto`` (the environment protocol) and ``control.proto`` (the
farm control service of ``farm up``).

Needs ``grpcio-tools`` (the ``dev`` extra). The generated modules import each
other as ``farm.proto.farm_pb2``, so we compile from the project root.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    from grpc_tools import protoc  # type: ignore[import-untyped]

    root = Path(__file__).resolve().parents[2]
    args = [
        "protoc",
        f"-I{root}",
        f"--python_out={root}",
        f"--pyi_out={root}",
        f"--grpc_python_out={root}",
        "farm/proto/farm.proto",
        "farm/proto/control.proto",
    ]
    return protoc.main(args)


if __name__ == "__main__":
    sys.exit(main())
