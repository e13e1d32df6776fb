"""p4runtime-shell against `nicflow p4 runtime` (run by tests/p4_runtime.rs).

Usage: p4_runtime_client.py HOST:PORT P4INFO_TXT PROGRAM_P4 PORT_A PORT_B

Sets the pipeline (P4Info = what `nicflow p4 p4info` printed, device config =
the P4-16 source), inserts the Netronome tutorial's ipv6_lpm entries (addresses
moved into 2001:db8::/32, ports = the bridge's port numbers), reads them back,
modifies and deletes one, sets the default action, and checks that a malformed
entry is refused without changing anything. Prints one "ok: ..." line per check
and exits non-zero on the first mismatch.
"""
import ipaddress
import sys
import traceback

import grpc
import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import P4RuntimeWriteException

ADDR, P4INFO, PROGRAM = sys.argv[1], sys.argv[2], sys.argv[3]
PORT_A, PORT_B = int(sys.argv[4]), int(sys.argv[5])

# The tutorial's user_config.json rules, in the lab prefix: fc00::1 -> 2001:db8:fc00::1.
RULES = [
    ("2001:db8:fc00::1", "00:15:4d:00:00:00", PORT_A),
    ("2001:db8:fc00::2", "00:15:4d:00:00:01", PORT_B),
    ("2001:db8:fcf0:12::100", "00:15:4d:00:00:01", PORT_B),
    ("2001:db8:fcf0:23::6006", "00:15:4d:00:00:02", PORT_A),
    ("2001:db8:fc00::3", "00:15:4d:00:00:02", PORT_A),
    ("2001:db8:fc20::2", "08:00:27:dd:dd:dd", PORT_B),
]


def ok(what):
    print("ok:", what, flush=True)


def entries():
    out = {}
    te = sh.TableEntry("MyIngress.ipv6_lpm")
    for e in te.read():
        dst = e.match["hdr.ipv6.dst_addr"]
        value = int.from_bytes(dst.exact.value, "big")
        params = {p: int.from_bytes(e.action[p].value, "big") for p in ("dstAddr", "port")}
        out[str(ipaddress.IPv6Address(value))] = (e.action.action_name, params)
    return out


def mac(m):
    return int(m.replace(":", ""), 16)


def main():
    sh.setup(device_id=1, grpc_addr=ADDR, election_id=(0, 1),
             config=sh.FwdPipeConfig(P4INFO, PROGRAM), verbose=False)
    ok("SetForwardingPipelineConfig with nicflow's P4Info and the P4-16 source")

    for dst, dmac, port in RULES:
        te = sh.TableEntry("MyIngress.ipv6_lpm")(action="MyIngress.ipv6_forward")
        te.match["hdr.ipv6.dst_addr"] = dst
        te.action["dstAddr"] = dmac
        te.action["port"] = str(port)
        te.insert()
    ok("inserted %d tutorial entries" % len(RULES))

    got = entries()
    want = {str(ipaddress.IPv6Address(d)): ("MyIngress.ipv6_forward", {"dstAddr": mac(m), "port": p})
            for d, m, p in RULES}
    assert got == want, "read back %r, expected %r" % (got, want)
    ok("wildcard read returns the %d entries with their actions" % len(got))

    # Specific read by match.
    te = sh.TableEntry("MyIngress.ipv6_lpm")
    te.match["hdr.ipv6.dst_addr"] = RULES[1][0]
    one = list(te.read())
    assert len(one) == 1 and int.from_bytes(one[0].action["port"].value, "big") == PORT_B, one
    ok("read by match returns one entry")

    # Duplicate insert: ALREADY_EXISTS.
    te = sh.TableEntry("MyIngress.ipv6_lpm")(action="MyIngress.ipv6_forward")
    te.match["hdr.ipv6.dst_addr"] = RULES[0][0]
    te.action["dstAddr"] = RULES[0][1]
    te.action["port"] = str(PORT_A)
    try:
        te.insert()
        raise AssertionError("duplicate insert succeeded")
    except P4RuntimeWriteException as e:
        codes = [err.canonical_code for _, err in e.errors]
        assert codes == [6], codes  # ALREADY_EXISTS
    ok("duplicate insert -> ALREADY_EXISTS")

    # Malformed entry: a 16-bit port parameter given 17 bits. Refused, nothing changes.
    before = entries()
    te = sh.TableEntry("MyIngress.ipv6_lpm")(action="MyIngress.ipv6_forward")
    te.match["hdr.ipv6.dst_addr"] = "2001:db8:fc00::99"
    te.action["dstAddr"] = "00:15:4d:00:00:09"
    refused = False
    try:
        te.action["port"] = str(1 << 16)
        te.insert()
    except P4RuntimeWriteException as e:
        codes = [err.canonical_code for _, err in e.errors]
        assert codes in ([3], [11]), codes  # INVALID_ARGUMENT / OUT_OF_RANGE
        refused = True
    except Exception as e:  # the shell may refuse the value before sending
        print("(client-side refusal: %s)" % e, flush=True)
        refused = True
    assert refused, "a 17-bit value for a 16-bit parameter was accepted"
    # The same through a raw write, so the server (not the shell) refuses it.
    from p4.v1 import p4runtime_pb2
    req = p4runtime_pb2.WriteRequest(device_id=1, election_id=p4runtime_pb2.Uint128(high=0, low=1))
    u = req.updates.add()
    u.type = p4runtime_pb2.Update.INSERT
    good = sh.TableEntry("MyIngress.ipv6_lpm")(action="MyIngress.ipv6_forward")
    good.match["hdr.ipv6.dst_addr"] = "2001:db8:fc00::99"
    good.action["dstAddr"] = "00:15:4d:00:00:09"
    good.action["port"] = "1"
    good._update_msg()
    u.entity.table_entry.CopyFrom(good._entry)
    u.entity.table_entry.action.action.params[1].value = (1 << 16).to_bytes(3, "big")
    try:
        sh.client.stub.Write(req)
        raise AssertionError("server accepted a 17-bit port")
    except grpc.RpcError as e:
        assert e.code() in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INVALID_ARGUMENT,
                            grpc.StatusCode.OUT_OF_RANGE), e
    assert entries() == before, "a refused entry changed the table"
    ok("malformed entry (param too wide) refused by the server, table unchanged")

    # Modify one entry, delete another.
    te = sh.TableEntry("MyIngress.ipv6_lpm")(action="MyIngress.ipv6_forward")
    te.match["hdr.ipv6.dst_addr"] = RULES[5][0]
    te.action["dstAddr"] = "08:00:27:ee:ee:ee"
    te.action["port"] = str(PORT_A)
    te.modify()
    got = entries()
    assert got[RULES[5][0]][1] == {"dstAddr": mac("08:00:27:ee:ee:ee"), "port": PORT_A}, got
    ok("modify replaced the action parameters")
    te = sh.TableEntry("MyIngress.ipv6_lpm")
    te.match["hdr.ipv6.dst_addr"] = RULES[4][0]
    te.delete()
    got = entries()
    assert RULES[4][0] not in got and len(got) == len(RULES) - 1, got
    ok("delete by match removed one entry")

    # Default entry: modify, read back.
    te = sh.TableEntry("MyIngress.ipv6_lpm")(is_default=True, action="NoAction")
    te.modify()
    d = list(sh.TableEntry("MyIngress.ipv6_lpm")(is_default=True).read())
    assert len(d) == 1 and d[0].action.action_name == "NoAction", d
    ok("default action set to NoAction and read back")
    te = sh.TableEntry("MyIngress.ipv6_lpm")(is_default=True, action="MyIngress.drop")
    te.modify()
    ok("default action back to MyIngress.drop")

    sh.teardown()
    print("DONE", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
