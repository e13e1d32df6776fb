//! What a run records for the megaflow cache: the packet bits the
//! decisions depended on, the input port, checksum recomputation, the
//! tables hit and why a run cannot be cached.

mod interp_support;
use interp_support::load;
use nicflow_p4::runtime::{EntrySpec, KeyMatch};
use num_bigint::BigUint;

fn hex(s: &str) -> Vec<u8> {
    let h: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn routing() -> Option<nicflow_p4::Pipeline> {
    let mut p = load("pna/routing.p4")?;
    p.table_add(
        "fib_table",
        EntrySpec {
            keys: vec![KeyMatch::Lpm(BigUint::from(0x0a000000u32), 8)],
            action: "set_nhid".into(),
            params: vec![("index".into(), BigUint::from(1u8))],
            priority: None,
        },
    )
    .unwrap();
    p.table_add(
        "Main.nh_table",
        EntrySpec {
            keys: vec![KeyMatch::Exact(BigUint::from(1u8))],
            action: "Main.set_nh".into(),
            params: vec![
                ("dmac".into(), BigUint::from(0x133713371337u64)),
                ("port".into(), BigUint::from(1u8)),
            ],
            priority: None,
        },
    )
    .unwrap();
    Some(p)
}

const ROUTING_PKT: &str =
    "0090fb65 d6fe0203 04050601 08004500 001c0001 00004011 656c0b00 00010a63 000104d3 10e10008 d4c5";

#[test]
fn routing_trace_records_what_mattered() {
    let Some(mut p) = routing() else { return };
    let out = p.process(0, &hex(ROUTING_PKT), 5);
    assert_eq!(out.outputs.len(), 1, "{:?}", out.trace);
    let t = &out.trace;
    // Ethertype (bits 96..112), TTL (byte 22), the /8 of dstAddr (byte 30).
    assert!(
        t.covers(96, 16),
        "ethertype not recorded: {:?}",
        t.read_bits
    );
    assert!(t.covers(176, 8), "ttl not recorded: {:?}", t.read_bits);
    assert!(t.covers(240, 8), "dst /8 not recorded: {:?}", t.read_bits);
    // Not the host part of the destination, not the identification, not
    // the checksum (recomputed), not the source MAC.
    assert!(
        !t.touches(248, 24),
        "dst host bits recorded: {:?}",
        t.read_bits
    );
    assert!(
        !t.touches(144, 16),
        "identification recorded: {:?}",
        t.read_bits
    );
    assert!(
        !t.touches(192 + 16, 16),
        "checksum recorded: {:?}",
        t.read_bits
    );
    assert!(!t.touches(48, 48), "source MAC recorded: {:?}", t.read_bits);
    assert!(t.checksum_recomputed);
    assert!(!t.in_port_read);
    // Ethernet + IPv4 must be present for the decision to hold.
    assert_eq!(t.min_packet_len, 34);
    assert_eq!(t.uncacheable, None);
    assert_eq!(t.tables.len(), 2);
    assert_eq!(&*t.tables[0].table, "Main.fib_table");
    assert!(t.tables[0].entry.is_some());
    assert!(t.error.is_none());
}

#[test]
fn routing_miss_records_the_first_differing_prefix_bit() {
    let Some(mut p) = routing() else { return };
    // dst 11.99.0.1: differs from 10/8 at the last bit of the first byte.
    let pkt = ROUTING_PKT
        .replace("0a63 0001", "0b63 0001")
        .replace("0a63000104d3", "0b63000104d3");
    let mut bytes = hex(&pkt);
    bytes[30] = 0x0b;
    let out = p.process(0, &bytes, 5);
    let t = &out.trace;
    assert!(t.covers(240, 8), "{:?}", t.read_bits);
    assert!(!t.touches(248, 24), "{:?}", t.read_bits);
    assert_eq!(t.tables[0].entry, None);
    // Miss: default set_nhid(0) -> nh_table miss -> drop.
    assert!(out.outputs.is_empty());
}

#[test]
fn routing_non_ip_is_dropped_and_reads_only_the_ethertype() {
    let Some(mut p) = routing() else { return };
    let mut b = hex(ROUTING_PKT);
    b[12] = 0x86;
    b[13] = 0xdd;
    let out = p.process(0, &b, 5);
    assert!(out.outputs.is_empty());
    assert!(out.trace.covers(96, 16));
    assert!(!out.trace.touches(112, 1000));
    assert!(out.trace.uncacheable.is_none());
}

#[test]
fn short_packet_is_uncacheable_parser_error() {
    let Some(mut p) = routing() else { return };
    let b = hex(ROUTING_PKT);
    let out = p.process(0, &b[..20], 5);
    assert!(out.outputs.is_empty());
    assert_eq!(out.trace.uncacheable.as_deref(), Some("p4-parser-error"));
}

#[test]
fn ipip_reads_the_input_port() {
    let Some(mut p) = load("pna/ipip.p4") else {
        return;
    };
    p.table_add(
        "fwd_table",
        EntrySpec {
            keys: vec![KeyMatch::Exact(BigUint::from(0u8))],
            action: "set_ipip".into(),
            params: vec![
                ("src".into(), BigUint::from(0x02020202u32)),
                ("dst".into(), BigUint::from(0x02040408u32)),
                ("port".into(), BigUint::from(1u8)),
            ],
            priority: None,
        },
    )
    .unwrap();
    let out = p.process(
        0,
        &hex("0090fb65 d6fe0203 04050601 08004500 001c0001 00004011 666c0a00 00010a63 000104d3 10e10008 d5c5"),
        1,
    );
    assert_eq!(out.outputs.len(), 1);
    assert!(out.trace.in_port_read);
    // The inner header is a copy of the outer: its bits are recorded.
    assert!(out.trace.covers(112, 160), "{:?}", out.trace.read_bits);
}

#[test]
fn register_program_is_uncacheable() {
    let Some(mut p) = load("psa/psa-register-read-write-2-bmv2.p4") else {
        return;
    };
    let out = p.process(
        4,
        &hex("cafe 0000 01 00 010000000000 ffff deadbeef deadbeef deadbeef deadbeef"),
        1,
    );
    assert_eq!(out.outputs.len(), 1);
    assert_eq!(out.trace.uncacheable.as_deref(), Some("p4-register"));
}

#[test]
fn psa_counter_is_listed_and_credited() {
    let Some(mut p) = load("psa/psa-basic-counter-bmv2.p4") else {
        return;
    };
    let ex = p.externs();
    assert!(!ex.is_empty(), "no counters found");
    let pkt = hex("000000000001 000000000002 0800 45000014 00000000 40000000 0a000001 0a000002");
    let out = p.process(0, &pkt, 1);
    assert!(out.trace.error.is_none(), "{:?}", out.trace.error);
    if let Some(nicflow_p4::trace::CounterRef::Indexed { name, index }) =
        out.trace.counters.first().cloned()
    {
        let (pk, by) = p.counter_read(&name, index).unwrap();
        assert_eq!(pk, 1);
        assert_eq!(by, pkt.len() as u64);
        p.credit(&out.trace, 10, 1000, 2);
        let (pk2, by2) = p.counter_read(&name, index).unwrap();
        assert_eq!(pk2, 11);
        assert_eq!(by2, by + 1000);
    } else {
        panic!("no counter in trace {:?}", out.trace);
    }
}

/// Revalidation records every lookup's key values (`record_table_keys`),
/// but a run already known to be uncacheable (here: a register read)
/// becomes no flow: its lookups record nothing.
#[test]
fn an_uncacheable_run_records_no_lookup_keys() {
    let Some(c) = interp_support::corpus() else {
        return;
    };
    let src = r#"
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
struct headers { ethernet_t ethernet; }
struct metadata {}
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  state start { pkt.extract(hdr.ethernet); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply {} }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
  register<bit<8>>(4) r;
  table t {
    key = { hdr.ethernet.etherType: exact; }
    actions = { NoAction; }
    default_action = NoAction();
  }
  apply {
    bit<8> x = 0;
    if (hdr.ethernet.src == 1) { r.read(x, 0); }
    t.apply();
    sm.egress_spec = 1;
  }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply {} }
control CC(inout headers hdr, inout metadata meta) { apply {} }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;
    let dir = std::env::temp_dir().join(format!("nicflow-p4-nokeys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nokeys.p4");
    std::fs::write(&path, src).unwrap();
    let mut p = nicflow_p4::Pipeline::load(&path, &[c.join("include")], None).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    p.record_table_keys(true);
    // Source 1 reads the register first: uncacheable, no keys.
    let out = p.process(0, &hex("000000000002 000000000001 0800"), 1);
    assert!(out.trace.uncacheable.is_some(), "{:?}", out.trace);
    assert_eq!(out.trace.tables.len(), 1);
    assert!(out.trace.tables[0].keys.is_empty());
    assert!(out.trace.keys.is_empty());
    // Another source: cacheable, its key recorded.
    let out = p.process(0, &hex("000000000002 000000000009 0800"), 2);
    assert!(out.trace.uncacheable.is_none(), "{:?}", out.trace);
    assert_eq!(out.trace.apply_keys(&out.trace.tables[0]).len(), 1);
}
