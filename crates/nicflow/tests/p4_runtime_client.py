"""p4runtime-shell against `nicflow p4 runtime` (run by tests/p4_runtime.rs).

Usage: p4_runtime_client.py MODE HOST:PORT ELECTION [ARGS...]; MODE is
  tutorial P4INFO_TXT PROGRAM_P4 PORT_A PORT_B
  refuse P4INFO_TXT PROGRAM_P4      (a P4Info of another program: INVALID_ARGUMENT)
  adopt P4INFO_TXT PROGRAM_P4       (p4c's P4Info, other ids: adopted)
  counters_fill P4INFO_TXT PROGRAM_P4 PORT_B
  counters_read PORT_A              (after the test sent traffic)
  idle PORT_B                       (gives the dmac entry a 2-s TTL, waits for its notification)
  pktio P4INFO_TXT PROGRAM_P4 NS_H1 NS_H2 PORT_A PORT_B
                                    (PacketIn from h1, PacketOut to h2, through the CPU port)

`tutorial` sets the pipeline (P4Info = what `nicflow p4 p4info` printed, device config =
the P4-16 source), inserts the Netronome tutorial's ipv6_lpm entries (addresses
moved into 2001:db8::/32, ports = the bridge's port numbers), reads them back,
modifies and deletes one, sets the default action, and checks that a malformed
entry is refused without changing anything. Prints one "ok: ..." line per check
and exits non-zero on the first mismatch.
"""
import ipaddress
import os
import subprocess
import sys
import time
import traceback

import grpc
import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import P4RuntimeWriteException

from p4.v1 import p4runtime_pb2

MODE, ADDR, ELECTION = sys.argv[1], sys.argv[2], int(sys.argv[3])
ARGS = sys.argv[4:]
# The bridge's port numbers (tutorial mode).
PORT_A, PORT_B = (int(ARGS[2]), int(ARGS[3])) if MODE == "tutorial" else (0, 0)

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


def setup(p4info=None, program=None):
    config = sh.FwdPipeConfig(p4info, program) if p4info else None
    sh.setup(device_id=1, grpc_addr=ADDR, election_id=(0, ELECTION), config=config, verbose=False)


def tutorial(p4info, program, _port_a, _port_b):
    setup(p4info, program)
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
    req = p4runtime_pb2.WriteRequest(device_id=1, election_id=p4runtime_pb2.Uint128(high=0, low=ELECTION))
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


def refuse(p4info, program):
    # The shell's setup() exits on a refused config: the client it wraps instead.
    from p4runtime_sh.p4runtime import P4RuntimeClient
    client = P4RuntimeClient(1, ADDR, (0, ELECTION))
    try:
        client.set_fwd_pipe_config(p4info, program)
    except Exception as e:
        inner = getattr(e, "grpc_error", e)
        assert hasattr(inner, "code") and inner.code() == grpc.StatusCode.INVALID_ARGUMENT, \
            "expected INVALID_ARGUMENT, got %r" % (e,)
        assert "not in the program" in inner.details(), inner.details()
        ok("a P4Info of another program -> INVALID_ARGUMENT (%s...)" % inner.details()[:80])
        client.tear_down()
        return
    raise AssertionError("a P4Info of another program was accepted")


def adopt(p4info, program):
    setup(p4info, program)
    info = sh.client.get_p4info()
    tid = [t.preamble.id for t in info.tables if t.preamble.name == "ingress.test1"]
    assert tid, info
    ok("p4c's P4Info (its own ids) adopted; ingress.test1 has id %d" % tid[0])
    te = sh.TableEntry("ingress.test1")(action="ingress.setb1")
    te.match["hdrs.data.f1"] = "0x00000101&&&0x0000ffff"
    te.action["port"] = "2"
    te.action["val"] = "0x7f"
    te.priority = 5
    te.insert()
    got = [e for e in sh.TableEntry("ingress.test1").read()]
    assert len(got) == 1, got
    m = got[0].match["hdrs.data.f1"].ternary
    assert int.from_bytes(m.value, "big") == 0x101 and int.from_bytes(m.mask, "big") == 0xffff, got[0]
    assert got[0].priority == 5 and got[0].action.action_name == "ingress.setb1", got[0]
    assert int.from_bytes(got[0].action["val"].value, "big") == 0x7f, got[0]
    ok("ternary entry with priority through p4c's ids: inserted and read back")
    sh.teardown()


def dmac_entry(port_b, ttl_ns):
    """The counters program's dmac entry (00:00:00:00:00:02 -> port_b, priority 10)."""
    te = sh.TableEntry("I.dmac")(action="I.fwd")
    te.match["hdr.eth.dst"] = "00:00:00:00:00:02&&&ff:ff:ff:ff:ff:ff"
    te.action["port"] = port_b
    te.priority = 10
    te.idle_timeout_ns = ttl_ns
    return te


def counters_fill(p4info, program, port_b):
    setup(p4info, program)
    dmac_entry(port_b, 0).insert()
    ok("dmac entry inserted (idle_timeout_ns 0: never expires)")
    never = sh.TableEntry("I.dmac")(action="I.drop")
    never.match["hdr.eth.dst"] = "00:00:00:00:00:09&&&ff:ff:ff:ff:ff:ff"
    never.priority = 5
    never.idle_timeout_ns = 0
    never.insert()
    ok("second dmac entry inserted (idle_timeout_ns 0)")
    reg = [r for r in sh.client.get_p4info().registers if r.preamble.name == "I.last_type"][0]
    u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    u.entity.register_entry.register_id = reg.preamble.id
    u.entity.register_entry.index.index = 1
    u.entity.register_entry.data.bitstring = b"\x12\x34"
    sh.client.write_update(u)
    ok("register cell written")
    sh.teardown()


def counters_read(port_a):
    setup()
    te = sh.TableEntry("I.dmac")
    te.counter_data.packet_count = 0
    te.priority = 10
    te.time_since_last_hit.elapsed_ns = 0
    got = list(te.read())
    assert len(got) == 1, got
    assert got[0].idle_timeout_ns == 0, got[0]
    elapsed = got[0].time_since_last_hit.elapsed_ns
    assert 0 <= elapsed < 20_000_000_000, got[0]
    ok("idle_timeout_ns read back; time_since_last_hit %.2f s after the pings" % (elapsed / 1e9))
    pk = got[0].counter_data.packet_count
    assert pk > 0 and got[0].counter_data.byte_count >= 60 * pk, got[0]
    ok("table entry counter_data (direct counter): %d packets" % pk)
    d = [c.msg() for c in sh.DirectCounterEntry("I.dmac_hits").read()
         if c.msg().table_entry.priority == 10]
    assert len(d) == 1 and d[0].data.packet_count == pk, d
    ok("DirectCounterEntry read: %d packets" % pk)
    c = sh.CounterEntry("I.port_pkts")
    c.index = int(port_a)
    cells = [x.msg() for x in c.read()]
    assert len(cells) == 1 and cells[0].data.packet_count >= pk, cells
    ok("CounterEntry port_pkts[%s]: %d packets" % (port_a, cells[0].data.packet_count))
    allc = [x.msg() for x in sh.CounterEntry("I.port_pkts").read()]
    assert len(allc) == 16, len(allc)
    ok("CounterEntry wildcard read: 16 cells")
    reg = [r for r in sh.client.get_p4info().registers if r.preamble.name == "I.last_type"][0]
    cells = []
    for rep in sh.client.read_one(p4runtime_pb2.Entity(
            register_entry=p4runtime_pb2.RegisterEntry(register_id=reg.preamble.id))):
        cells.extend(rep.entities)
    vals = {c.register_entry.index.index: int.from_bytes(c.register_entry.data.bitstring, "big")
            for c in cells}
    assert vals.get(1) == 0x1234, vals
    assert vals.get(0) in (0x0800, 0x86dd, 0x0806), vals
    ok("RegisterEntry wildcard read: %r" % vals)
    sh.teardown()


def idle(port_b):
    setup()
    info = sh.client.get_p4info()
    t = [t for t in info.tables if t.preamble.name == "I.dmac"][0]
    assert t.idle_timeout_behavior == t.NOTIFY_CONTROL, t
    # The entry never expired (TTL 0); with a TTL of 2 s it goes idle.
    dmac_entry(port_b, 2_000_000_000).modify()
    ok("dmac entry modified: idle_timeout_ns 2 s")
    msg = sh.client.get_stream_packet("idle_timeout_notification", timeout=30)
    assert msg is not None, "no idle-timeout notification within 30 s"
    n = msg.idle_timeout_notification
    assert len(n.table_entry) == 1, n
    e = n.table_entry[0]
    assert e.table_id == t.preamble.id and e.priority == 10, e
    assert e.idle_timeout_ns == 2_000_000_000, e
    m = e.match[0].ternary
    assert int.from_bytes(m.value, "big") == 2 and int.from_bytes(m.mask, "big") == (1 << 48) - 1, e
    assert n.timestamp > 0, n
    ok("IdleTimeoutNotification for the dmac entry")

    # PacketOut: this program has no packet_out controller header.
    pkt = p4runtime_pb2.StreamMessageRequest()
    pkt.packet.payload = bytes.fromhex("000000000002" "020000000001" "0800") + b"x" * 46
    sh.client.stream_out_q.put(pkt)
    err = sh.client.get_stream_packet("unknown", timeout=5)  # the shell files StreamError there
    assert err is not None, "no StreamError for a PacketOut"
    assert err.error.canonical_code == 12 and "packet_out" in err.error.message, err  # UNIMPLEMENTED
    ok("PacketOut without a packet_out header -> StreamError UNIMPLEMENTED")
    sh.teardown()


# Sends one raw frame (hex) out of eth0 in a namespace (stdlib only).
SEND_RAW = ("import socket,sys; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
            "s.bind(('eth0', 0)); s.send(bytes.fromhex(sys.argv[1]))")
# Prints the first frame of EtherType 0x88b6 seen on eth0 (hex), within 10 s.
RECV_RAW = ("import socket; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88b6)); "
            "s.bind(('eth0', 0x88b6)); s.settimeout(10); print('GOT', s.recv(2048).hex(), flush=True)")


def pktio(p4info, program, ns1, ns2, port_a, port_b):
    setup(p4info, program)
    names = sorted(m.preamble.name for m in sh.client.get_p4info().controller_packet_metadata)
    assert names == ["packet_in", "packet_out"], names
    ok("P4Info with packet_in and packet_out controller metadata")

    pin = sh.PacketIn()
    frame = bytes.fromhex("020000000099" "020000000001" "88b5") + b"nicflow packet-in test" + bytes(28)
    got = []
    for _ in range(3):
        subprocess.run(["ip", "netns", "exec", ns1, "python3", "-c", SEND_RAW, frame.hex()], check=True)
        got = [m.packet for m in pin.sniff(timeout=2) if m.packet.payload == frame]
        if got:
            break
    assert got, "no PacketIn carrying h1's frame"
    info = sh.client.get_p4info()
    md = [m for m in info.controller_packet_metadata if m.preamble.name == "packet_in"][0]
    port_id = [f.id for f in md.metadata if f.name == "ingress_port"][0]
    ports = [int.from_bytes(m.value, "big") for m in got[0].metadata if m.metadata_id == port_id]
    assert ports == [int(port_a)], (ports, got[0])
    ok("PacketIn: h1's frame, header stripped, metadata ingress_port=%s" % port_a)

    out = bytes.fromhex("020000000002" "020000000099" "88b6") + b"nicflow packet-out test" + bytes(27)
    rx = subprocess.Popen(["ip", "netns", "exec", ns2, "python3", "-c", RECV_RAW],
                          stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    for _ in range(5):
        po = sh.PacketOut(payload=out)
        po.metadata["egress_port"] = port_b
        po.send()
        try:
            rx.wait(timeout=1)
            break
        except subprocess.TimeoutExpired:
            pass
    line = rx.communicate(timeout=15)[0]
    assert line.strip() == "GOT " + out.hex(), line
    ok("PacketOut(egress_port=%s) through the program: h2 received the payload unchanged" % port_b)

    # A metadata value wider than the field is refused by the server.
    bad = p4runtime_pb2.StreamMessageRequest()
    bad.packet.payload = out
    po_md = [m for m in info.controller_packet_metadata if m.preamble.name == "packet_out"][0]
    eg = [f.id for f in po_md.metadata if f.name == "egress_port"][0]
    bad.packet.metadata.add(metadata_id=eg, value=b"\x7f\xff")
    sh.client.stream_out_q.put(bad)
    err = sh.client.get_stream_packet("unknown", timeout=5)
    assert err is not None and err.error.canonical_code == 3, err  # INVALID_ARGUMENT
    ok("PacketOut with egress_port wider than 9 bits -> StreamError INVALID_ARGUMENT")
    sh.teardown()


if __name__ == "__main__":
    try:
        {"tutorial": tutorial, "refuse": refuse, "adopt": adopt,
         "counters_fill": counters_fill, "counters_read": counters_read, "idle": idle,
         "pktio": pktio}[MODE](*ARGS)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        # The shell's stream thread would keep the process alive: leave hard.
        os._exit(1)
    print("DONE", flush=True)
    os._exit(0)
