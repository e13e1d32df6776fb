"""p4runtime-shell driven against nicflow's P4Runtime server (run by tests/shell.rs).

Usage: shell_client.py HOST:PORT CORPUS_DIR
Uses p4runtime-shell's Python API (p4runtime_sh.shell) the way a controller
script would, plus its P4RuntimeClient for raw messages the shell has no verb
for. Prints one "ok: ..." line per check and exits non-zero on the first
mismatch (an AssertionError with what differed).
"""
import logging
import os
import sys
import traceback

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2
from p4.config.v1 import p4info_pb2  # noqa: F401  (the shell needs it loaded)
import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeWriteException

ADDR = sys.argv[1]
CORPUS = sys.argv[2]
DEVICE = 1


def ok(what):
    print("ok:", what, flush=True)


def expect_write_error(fn, code, what):
    try:
        fn()
    except P4RuntimeWriteException as e:
        codes = [err.canonical_code for _, err in e.errors]
        assert codes == [code], "%s: expected %s, got %s (%s)" % (
            what, code_pb2.Code.Name(code), [code_pb2.Code.Name(c) for c in codes], e)
        ok(what + " -> " + code_pb2.Code.Name(code))
        return
    raise AssertionError(what + ": write succeeded, expected " + code_pb2.Code.Name(code))


def expect_rpc_error(fn, code, what):
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, "%s: expected %s, got %s (%s)" % (what, code, e.code(), e.details())
        ok("%s -> %s" % (what, code.name))
        return
    except Exception as e:  # the shell wraps some errors
        inner = getattr(e, "grpc_error", None)
        if inner is not None:
            assert inner.code() == code, "%s: expected %s, got %s" % (what, code, inner.code())
            ok("%s -> %s" % (what, code.name))
            return
        raise
    raise AssertionError(what + ": succeeded, expected " + code.name)


def read_raw(client, entity):
    out = []
    for rep in client.read_one(entity):
        out.extend(rep.entities)
    return out


def setup(p4info, program, election=(0, 1)):
    sh.setup(device_id=DEVICE, grpc_addr=ADDR, election_id=election,
             config=sh.FwdPipeConfig(CORPUS + "/" + p4info, CORPUS + "/" + program),
             verbose=False)


def ternary_tables():
    setup("v1model/ternary2-bmv2.p4.p4info.txtpb", "v1model/ternary2-bmv2.p4")
    ok("setup: arbitration (primary), SetForwardingPipelineConfig VERIFY_AND_COMMIT, "
       "GetForwardingPipelineConfig P4INFO_AND_COOKIE")
    client = sh.client
    assert client.api_version().startswith("1."), client.api_version()
    ok("Capabilities: p4runtime_api_version " + client.api_version())

    # Device config round trip.
    req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
        device_id=DEVICE,
        response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.DEVICE_CONFIG_AND_COOKIE)
    rep = client.stub.GetForwardingPipelineConfig(req)
    with open(CORPUS + "/v1model/ternary2-bmv2.p4", "rb") as f:
        assert rep.config.p4_device_config == f.read(), "device config differs"
    assert not rep.config.HasField("p4info"), "DEVICE_CONFIG_AND_COOKIE returned a p4info"
    ok("GetForwardingPipelineConfig DEVICE_CONFIG_AND_COOKIE returns the program text")
    req.response_type = p4runtime_pb2.GetForwardingPipelineConfigRequest.ALL
    rep = client.stub.GetForwardingPipelineConfig(req)
    assert rep.config.HasField("p4info") and rep.config.p4_device_config, "ALL incomplete"
    assert [t.preamble.name for t in rep.config.p4info.tables][:2] == ["ingress.test1", "ingress.ex1"]
    ok("GetForwardingPipelineConfig ALL")
    req.device_id = 99
    expect_rpc_error(lambda: client.stub.GetForwardingPipelineConfig(req),
                     grpc.StatusCode.NOT_FOUND, "GetForwardingPipelineConfig on unknown device 99")

    te = sh.TableEntry("ingress.test1")(action="ingress.setb1")
    te.match["hdrs.data.f1"] = "0x01020304&&&0xffff00ff"
    te.priority = 10
    te.action["port"] = "3"
    te.action["val"] = "0x7f"
    te.insert()
    ok("TableEntry insert (ternary key, priority, action params)")

    got = [e.msg() for e in sh.TableEntry("ingress.test1").read()]
    assert len(got) == 1, got
    m = got[0]
    assert m.priority == 10 and len(m.match) == 1, m
    assert m.match[0].ternary.value == bytes([1, 2, 0, 4]), m.match[0]
    assert m.match[0].ternary.mask == bytes([0xff, 0xff, 0, 0xff]), m.match[0]
    assert m.action.action.action_id == sh.context.get_obj_id(sh.P4Type.action, "ingress.setb1")
    params = {p.param_id: p.value for p in m.action.action.params}
    assert params == {1: b"\x03", 2: b"\x7f"}, params
    ok("TableEntry read back: key, mask, priority, action and params identical")

    expect_write_error(te.insert, code_pb2.ALREADY_EXISTS, "insert of an existing entry")

    te2 = sh.TableEntry("ingress.test1")(action="ingress.noop")
    te2.match["hdrs.data.f1"] = "0x01020304&&&0xffff00ff"
    te2.priority = 10
    te2.modify()
    got = [e.msg() for e in sh.TableEntry("ingress.test1").read()]
    assert len(got) == 1 and got[0].action.action.action_id == \
        sh.context.get_obj_id(sh.P4Type.action, "ingress.noop"), got
    ok("TableEntry modify changes the action")

    te3 = sh.TableEntry("ingress.test1")(action="ingress.noop")
    te3.match["hdrs.data.f1"] = "0x05&&&0xff"
    te3.priority = 10
    expect_write_error(te3.modify, code_pb2.NOT_FOUND, "modify of a missing entry")
    te3.priority = 0
    expect_write_error(te3.insert, code_pb2.INVALID_ARGUMENT, "insert without priority in a ternary table")

    # Second table, then a wildcard read over all tables (table_id 0).
    ex = sh.TableEntry("ingress.ex1")(action="ingress.act1")
    ex.match["hdrs.extra[0].h"] = "0x0800&&&0xff00"
    ex.priority = 1
    ex.action["val"] = "1"
    ex.insert()
    everything = read_raw(client, p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry()))
    ids = sorted(e.table_entry.table_id for e in everything)
    want = sorted([sh.context.get_obj_id(sh.P4Type.table, "ingress.test1"),
                   sh.context.get_obj_id(sh.P4Type.table, "ingress.ex1")])
    assert ids == want, (ids, want)
    ok("wildcard read (table_id 0) returns the entries of every table")

    # Default action.
    d = sh.TableEntry("ingress.test1")(is_default=True, action="ingress.setb1")
    d.action["port"] = "5"
    d.action["val"] = "6"
    d.modify()
    got = [e.msg() for e in sh.TableEntry("ingress.test1")(is_default=True).read()]
    assert len(got) == 1 and got[0].is_default_action, got
    assert {p.param_id: p.value for p in got[0].action.action.params} == {1: b"\x05", 2: b"\x06"}, got
    ok("default action modify and read back")
    expect_write_error(d.insert, code_pb2.INVALID_ARGUMENT, "insert of a default entry")

    # Raw updates the shell would refuse to build: a batch with per-update errors.
    tid = sh.context.get_obj_id(sh.P4Type.table, "ingress.tbl1")
    aid = sh.context.get_obj_id(sh.P4Type.action, "ingress.setbyte")
    fid = sh.context.get_mf_id("ingress.tbl1", "hdrs.data.f2")

    def entry(value, param):
        e = p4runtime_pb2.TableEntry(table_id=tid, priority=1)
        fm = e.match.add()
        fm.field_id = fid
        fm.ternary.value = value
        fm.ternary.mask = b"\xff\xff\xff\xff"
        e.action.action.action_id = aid
        p = e.action.action.params.add()
        p.param_id = 1
        p.value = param
        return e

    wr = p4runtime_pb2.WriteRequest()
    for e in (entry(b"\x00\x00\x00\x09", b"\x00\x01"),   # padded: accepted, stored canonical
              entry(b"\x01\x00\x00\x00\x00", b"\x01"),   # 40-bit value for a 32-bit field
              entry(b"\x00\x00\x00\x0a", b"\x01\x00")):  # 9-bit value for an 8-bit param
        u = wr.updates.add()
        u.type = p4runtime_pb2.Update.INSERT
        u.entity.table_entry.CopyFrom(e)
    # p4runtime-shell 0.0.6's P4RuntimeErrorIterator loops forever on the OK
    # entries P4Runtime puts in the details for the updates that succeeded, so
    # the mixed batch goes through the stub and the details are decoded here.
    wr.device_id = DEVICE
    wr.election_id.low = client.election_id[1]
    try:
        client.stub.Write(wr)
        raise AssertionError("batch with bad updates succeeded")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNKNOWN, e
        st = None
        for k, v in e.trailing_metadata():
            if k == "grpc-status-details-bin":
                st = status_pb2.Status.FromString(v)
        assert st is not None, "no grpc-status-details-bin"
        errs = []
        for a in st.details:
            err = p4runtime_pb2.Error()
            assert a.Unpack(err), a
            errs.append(err.canonical_code)
        assert errs == [code_pb2.OK, code_pb2.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT], errs
    got = [e.msg() for e in sh.TableEntry("ingress.tbl1").read()]
    assert len(got) == 1 and got[0].match[0].ternary.value == b"\x09", got
    assert got[0].action.action.params[0].value == b"\x01", got
    ok("CONTINUE_ON_ERROR batch: good update applied (canonicalized), bad ones reported per index in Status details")

    # Arbitration: a second controller with a higher election id takes over.
    other = P4RuntimeClient(DEVICE, ADDR, (0, 2))
    note = client.get_stream_packet("arbitration", timeout=2)
    assert note is not None and note.arbitration.status.code == code_pb2.ALREADY_EXISTS, note
    assert note.arbitration.election_id.low == 2, note
    ok("old primary notified it is now a backup (ALREADY_EXISTS, election_id 2)")
    expect_rpc_error(lambda: client.write_update(p4runtime_pb2.Update(
        type=p4runtime_pb2.Update.DELETE,
        entity=p4runtime_pb2.Entity(table_entry=entry(b"\x09", b"\x01")))),
        grpc.StatusCode.PERMISSION_DENIED, "write from a backup")
    assert len(list(sh.TableEntry("ingress.tbl1").read())) == 1
    ok("a backup can still read")
    other.tear_down()
    note = client.get_stream_packet("arbitration", timeout=2)
    assert note is not None and note.arbitration.status.code == code_pb2.NOT_FOUND, note
    ok("primary left: no automatic failover, the backup is told there is no primary (NOT_FOUND)")
    client.election_id = (0, 3)  # used by the client for its next writes too
    req = p4runtime_pb2.StreamMessageRequest()
    req.arbitration.device_id = DEVICE
    req.arbitration.election_id.low = 3
    client.stream_out_q.put(req)
    note = client.get_stream_packet("arbitration", timeout=2)
    assert note is not None and note.arbitration.status.code == code_pb2.OK, note
    ok("re-arbitration with a higher election id (3) makes the shell primary again")

    for t in ("ingress.test1", "ingress.ex1", "ingress.tbl1"):
        sh.TableEntry(t).read(function=lambda x: x.delete())
    assert read_raw(client, p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())) == []
    ok("delete of every entry read back")
    expect_write_error(te.delete, code_pb2.NOT_FOUND, "delete of a missing entry")

    # Packet-out: the test target echoes it back as a packet-in.
    pkt = p4runtime_pb2.StreamMessageRequest()
    pkt.packet.payload = b"\x02\x00\x00\x00\x00\x01hello"
    md = pkt.packet.metadata.add()
    md.metadata_id = 1
    md.value = b"\x05"
    client.stream_out_q.put(pkt)
    back = client.get_stream_packet("packet", timeout=2)
    assert back is not None and back.packet.payload == pkt.packet.payload, back
    assert [(m.metadata_id, m.value) for m in back.packet.metadata] == [(1, b"\x05")], back
    ok("PacketOut reaches the target; its PacketIn reaches the primary with metadata")
    sh.teardown()


def const_table():
    # The server remembers the highest election id of the role (3 by now):
    # each later session announces a higher one to be primary.
    setup("v1model/table-entries-lpm-bmv2.p4.p4info.txtpb", "v1model/table-entries-lpm-bmv2.p4",
          election=(0, 10))
    te = sh.TableEntry("ingress.t_lpm")(action="ingress.a_with_control_params")
    te.match["h.h.l"] = "0x10/4"
    te.action["x"] = "1"
    expect_write_error(te.insert, code_pb2.PERMISSION_DENIED, "insert into a const table")
    sh.teardown()


def counters():
    setup("psa/psa-basic-counter-bmv2.p4.p4info.txtpb", "psa/psa-basic-counter-bmv2.p4",
          election=(0, 11))
    cells = [c.msg() for c in sh.CounterEntry("cIngress.counter").read()]
    assert len(cells) == 1024 and all(c.data.packet_count == 0 for c in cells), len(cells)
    ok("CounterEntry wildcard read: 1024 cells, all zero")
    c = sh.CounterEntry("cIngress.counter")
    c.index = 3
    c.packet_count = 7
    c.modify()
    one = sh.CounterEntry("cIngress.counter")
    one.index = 3
    got = [x.msg() for x in one.read()]
    assert len(got) == 1 and got[0].index.index == 3 and got[0].data.packet_count == 7, got
    ok("CounterEntry modify (set to 7) and read of one index")
    bad = sh.CounterEntry("cIngress.counter")
    bad.index = 5000
    expect_rpc_error(lambda: list(bad.read()), grpc.StatusCode.OUT_OF_RANGE, "counter read past its size")
    sh.teardown()


def registers():
    setup("psa/psa-register-read-write-2-bmv2.p4.p4info.txtpb", "psa/psa-register-read-write-2-bmv2.p4",
          election=(1, 0))
    client = sh.client
    regs = client.get_p4info().registers  # the shell has no register verb
    assert [r.preamble.name for r in regs] == ["MyIC.reg"], regs
    rid = regs[0].preamble.id
    u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    u.entity.register_entry.register_id = rid
    u.entity.register_entry.index.index = 4
    u.entity.register_entry.data.bitstring = b"\x12\x34"
    client.write_update(u)
    cells = read_raw(client, p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry(register_id=rid)))
    vals = {c.register_entry.index.index: c.register_entry.data.bitstring for c in cells}
    assert vals == {0: b"\x00", 1: b"\x00", 2: b"\x00", 3: b"\x00", 4: b"\x12\x34", 5: b"\x00"}, vals
    ok("RegisterEntry write and wildcard read")
    sh.teardown()


def main():
    logging.basicConfig(level=logging.WARNING)
    try:
        ternary_tables()
        const_table()
        counters()
        registers()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        # The shell's stream thread would keep the process alive: leave hard.
        os._exit(1)
    print("shell_client: all checks passed", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
