//! Per-entry idle timeouts (P4Runtime's `idle_timeout_ns`): an entry's own
//! timeout wins over the table's, 0 means never, and tables without idle
//! timeout support refuse one.

mod interp_support;

use nicflow_p4::runtime::{EntrySpec, KeyMatch};
use num_bigint::BigUint;

const PROG: &str = r#"#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etype; }
struct headers { ethernet_t eth; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers hdr, inout metadata m) { apply { } }
control I(inout headers hdr, inout metadata m, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table aged { key = { hdr.eth.dst : exact; } actions = { fwd; } support_timeout = true; }
    table plain { key = { hdr.eth.src : exact; } actions = { fwd; } }
    apply { aged.apply(); plain.apply(); }
}
control E(inout headers hdr, inout metadata m, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata m) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), C(), D()) main;
"#;

fn entry(key: u64) -> EntrySpec {
    EntrySpec {
        keys: vec![KeyMatch::Exact(BigUint::from(key))],
        action: "fwd".into(),
        params: vec![(String::new(), BigUint::from(1u32))],
        priority: None,
    }
}

#[test]
fn an_entrys_own_timeout_wins_and_zero_never_expires() {
    let Some(c) = interp_support::corpus() else {
        return;
    };
    let mut p =
        nicflow_p4::source::load_source("idle.p4", PROG, &[c.join("include")], None).unwrap();
    let own = p.table_add("aged", entry(1)).unwrap();
    let never = p.table_add("aged", entry(2)).unwrap();
    let table_default = p.table_add("aged", entry(3)).unwrap();
    p.set_entry_idle_timeout("aged", own, Some(2_000_000_000))
        .unwrap();
    p.set_entry_idle_timeout("aged", never, Some(0)).unwrap();
    assert_eq!(p.entry_idle_timeout("aged", own), Some(2_000_000_000));
    assert_eq!(p.entry_idle_timeout("aged", table_default), None);
    let t0 = p.clock_ns();
    let ids = |v: Vec<(String, u64)>| v.into_iter().map(|(_, id)| id).collect::<Vec<_>>();
    assert!(p.expired_entries(t0 + 1_000_000_000).is_empty());
    assert_eq!(ids(p.expired_entries(t0 + 3_000_000_000)), vec![own]);
    // The table's default (30 s) for the third; never for the second.
    assert_eq!(
        ids(p.expired_entries(t0 + 31_000_000_000)),
        vec![own, table_default]
    );
    assert_eq!(
        ids(p.expired_entries(t0 + 1_000_000_000_000)),
        vec![own, table_default]
    );
    // Back to the table's timeout.
    p.set_entry_idle_timeout("aged", never, None).unwrap();
    assert_eq!(ids(p.expired_entries(t0 + 31_000_000_000)).len(), 3);
    // A deleted entry's timeout goes with it.
    p.table_delete("aged", own).unwrap();
    assert!(p.set_entry_idle_timeout("aged", own, Some(1)).is_err());
    assert_eq!(p.entry_idle_timeout("aged", own), None);
}

#[test]
fn a_table_without_idle_timeouts_refuses_a_nonzero_one() {
    let Some(c) = interp_support::corpus() else {
        return;
    };
    let mut p =
        nicflow_p4::source::load_source("idle.p4", PROG, &[c.join("include")], None).unwrap();
    let id = p.table_add("plain", entry(7)).unwrap();
    let e = p
        .set_entry_idle_timeout("plain", id, Some(5_000_000_000))
        .unwrap_err();
    assert!(e.to_string().contains("idle timeouts"), "{e}");
    assert_eq!(p.entry_idle_timeout("plain", id), None);
    // 0 (never) is what such an entry has anyway: accepted.
    p.set_entry_idle_timeout("plain", id, Some(0)).unwrap();
    assert!(p.expired_entries(u64::MAX).is_empty());
}
