#!/usr/bin/env python3
"""Write the P4Runtime protobuf schema as a serialized FileDescriptorSet.

nicflow's P4Runtime server (crates/p4rt) is generated from the message
definitions that the `p4runtime` Python wheel embeds (p4runtime's .proto
sources are not shipped with the crate). This script imports the wheel's
compiled modules, walks every file they depend on (google.rpc, google.protobuf
well-known types included) and writes them, dependencies first, to OUT.

Usage: p4runtime_fds.py OUT_FDS [OUT_VERSION]
  OUT_VERSION, if given, receives the wheel's version (e.g. "1.4.1"), which the
  server reports as its p4runtime_api_version.
Exit status 3 when the wheel is not installed (run `bash scripts/setup.sh`).
"""
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    try:
        from google.protobuf import descriptor_pb2
        from p4.v1 import p4runtime_pb2, p4data_pb2
        from p4.config.v1 import p4info_pb2, p4types_pb2
        from google.rpc import status_pb2, code_pb2
        from google.protobuf import any_pb2
    except ImportError as e:
        sys.stderr.write(
            "p4runtime_fds.py: the p4runtime wheel is missing (%s); "
            "run `bash scripts/setup.sh` (it installs p4runtime and "
            "p4runtime-shell into /opt/nicflow-tools/p4rt-venv)\n" % e)
        return 3
    roots = [m.DESCRIPTOR for m in (p4runtime_pb2, p4data_pb2, p4info_pb2,
                                    p4types_pb2, status_pb2, code_pb2, any_pb2)]
    fds = descriptor_pb2.FileDescriptorSet()
    done = set()

    def visit(fd):
        if fd.name in done:
            return
        done.add(fd.name)
        for dep in fd.dependencies:
            visit(dep)
        proto = fds.file.add()
        fd.CopyToProto(proto)

    for fd in roots:
        visit(fd)
    with open(sys.argv[1], "wb") as f:
        f.write(fds.SerializeToString())
    if len(sys.argv) == 3:
        try:
            from importlib.metadata import version
            v = version("p4runtime")
        except Exception:
            v = "1.3.0"
        with open(sys.argv[2], "w") as f:
            f.write(v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
