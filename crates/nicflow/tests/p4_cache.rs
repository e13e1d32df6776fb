//! The P4 slow path's cache, on p4c's own programs (../shared/p4-corpus):
//! cache hits reach the program's counters and entries, a table change
//! removes exactly the flows of the tables it touched, and a bad entry
//! changes nothing.

mod common;

use nicflow::datapath::DpAction;
use nicflow_dataplane::p4::stf::CachedTarget;
use nicflow_p4::stf::{self, StfTarget};
use nicflow_p4::Pipeline;
use std::path::{Path, PathBuf};

fn corpus() -> Option<PathBuf> {
    let found = nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))]);
    if found.is_none() {
        common::skipped(
            "no P4 corpus (shared/p4-corpus beside the checkout, or $NICFLOW_P4_CORPUS)",
        );
    }
    found
}

fn load(c: &Path, prog: &str) -> Pipeline {
    Pipeline::load(&c.join(prog), &[c.join("include")], None).unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn add(t: &mut CachedTarget, line: &str) {
    let test = stf::parse("inline", line).unwrap();
    t.apply(&test.commands[0].1).unwrap();
}

#[test]
fn cache_hits_are_credited_to_the_programs_counter() {
    let Some(c) = corpus() else { return };
    let mut t = CachedTarget::new(load(&c, "psa/psa-basic-counter-bmv2.p4"), &[1, 4]).unwrap();
    let pkt = hex("000000000001 000000000000 ffff");
    for _ in 0..10 {
        let out = t.send(4, &pkt).unwrap();
        assert_eq!(out.len(), 1);
    }
    let p4 = t.bridge.p4().unwrap();
    assert_eq!(p4.stats.runs, 1, "one upcall, nine cache hits");
    t.bridge.p4_push_stats();
    let (packets, _) = t
        .bridge
        .p4()
        .unwrap()
        .pipeline()
        .counter_read("counter", 256)
        .unwrap();
    assert_eq!(packets, 10, "every packet counted once, hits included");
    // Pushing again adds nothing.
    t.bridge.p4_push_stats();
    let (again, _) = t
        .bridge
        .p4()
        .unwrap()
        .pipeline()
        .counter_read("counter", 256)
        .unwrap();
    assert_eq!(again, 10);
}

/// routing.p4 packet to 10.99.0.1 (routing.stf) and one to another /8.
const TO_10: &str = "0090fb65 d6fe0203 04050601 08004500 001c0001 00004011 656c0b00 00010a63 000104d3 10e10008 d4c5";

#[test]
fn routing_flows_are_masked_and_a_table_change_removes_only_its_flows() {
    let Some(c) = corpus() else { return };
    let mut t = CachedTarget::new(load(&c, "pna/routing.p4"), &[0, 1, 2]).unwrap();
    add(
        &mut t,
        "add Main.fib_table prefix:0x0a000000/8 Main.set_nhid(index:0x1)",
    );
    add(
        &mut t,
        "add Main.nh_table nh_index:0x1 Main.set_nh(dmac:0x133713371337, port:0x1)",
    );
    let pkt = hex(TO_10);
    assert_eq!(t.send(0, &pkt).unwrap()[0].0, 1);
    // Another address in 10/8 and another source: same flow (the lpm read
    // only the top 8 bits; the source was never read).
    let mut other = pkt.clone();
    other[26..30].copy_from_slice(&[0xc6, 0x12, 0, 9]); // src 198.18.0.9
    other[33] = 0x77; // dst 10.99.0.119
                      // Keep the IPv4 checksum right for the new addresses.
    fix_ipv4_checksum(&mut other);
    assert_eq!(t.send(0, &other).unwrap().len(), 1);
    assert_eq!(
        t.bridge.p4().unwrap().stats.runs,
        1,
        "second packet hit the megaflow"
    );
    let flows: Vec<_> = t.bridge.dp_flows().collect();
    assert_eq!(flows.len(), 1);
    use nicflow_flow::Field;
    let m = &flows[0].matching;
    assert_eq!(
        m.get(Field::NwDst),
        (0x0a00_0000, 0xff00_0000),
        "dst masked to the /8"
    );
    assert_eq!(m.get(Field::NwSrc).1, 0, "source never read");
    assert_eq!(m.get(Field::NwTtl).1, 0xff, "TTL read (ttl > 1, ttl - 1)");
    assert!(flows[0]
        .actions
        .contains(&DpAction::SetEthDst([0x13, 0x37, 0x13, 0x37, 0x13, 0x37])));
    // A refused entry (wrong width) changes nothing: the flow stays.
    let bad = stf::parse(
        "inline",
        "add Main.nh_table nh_index:0x1ffffffff Main.set_nh(dmac:0x1, port:0x1)",
    )
    .unwrap();
    assert!(t.apply(&bad.commands[0].1).is_err());
    assert_eq!(t.bridge.dp_flows().count(), 1);
    // A fib entry that matches the flow's keys (10.99/16 inside its 10/8)
    // removes the flow (its run applied fib_table) and the next packet
    // gets the new next hop.
    add(
        &mut t,
        "add Main.nh_table nh_index:0x2 Main.set_nh(dmac:0x020000000002, port:0x2)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 1, "nh_index 2 cannot match");
    add(
        &mut t,
        "add Main.fib_table prefix:0x0a630000/16 Main.set_nhid(index:0x2)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 0);
    // A frame the parser rejects applies no table: its (drop) flow
    // survives a table change; the IP flow, which applied fib_table, goes.
    let mut arp = pkt.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert!(t.send(0, &arp).unwrap().is_empty());
    assert_eq!(t.send(0, &pkt).unwrap()[0].0, 2);
    assert_eq!(t.bridge.dp_flows().count(), 2);
    add(
        &mut t,
        "add Main.fib_table prefix:0x0a630000/24 Main.set_nhid(index:0x1)",
    );
    let left: Vec<_> = t.bridge.dp_flows().collect();
    assert_eq!(left.len(), 1, "only the flow that applied fib_table went");
    assert!(left[0].actions.is_empty(), "the drop flow stayed");
}

/// routing.p4 on ports 0-2 with 10.0.0.0/8 -> next hop 1 -> port 1.
fn routing_10_via_port_1(c: &Path) -> CachedTarget {
    let mut t = CachedTarget::new(load(c, "pna/routing.p4"), &[0, 1, 2]).unwrap();
    add(
        &mut t,
        "add Main.fib_table prefix:0x0a000000/8 Main.set_nhid(index:0x1)",
    );
    add(
        &mut t,
        "add Main.nh_table nh_index:0x1 Main.set_nh(dmac:0x020000000001, port:0x1)",
    );
    t
}

/// routing.p4's TO_10 with another destination (IPv4 checksum fixed).
fn to(dst: [u8; 4]) -> Vec<u8> {
    let mut p = hex(TO_10);
    p[30..34].copy_from_slice(&dst);
    fix_ipv4_checksum(&mut p);
    p
}

/// Rewrites the IPv4 header checksum of an untagged Ethernet frame whose
/// 20-byte IPv4 header starts at byte 14.
fn fix_ipv4_checksum(p: &mut [u8]) {
    p[24..26].fill(0);
    let mut sum = 0u32;
    for i in (14..34).step_by(2) {
        sum += u32::from(u16::from_be_bytes([p[i], p[i + 1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

fn runs(t: &CachedTarget) -> u64 {
    t.bridge.p4().unwrap().stats.runs
}

/// The id of `table`'s runtime entry whose first key is `value`.
fn entry_id(t: &CachedTarget, table: &str, value: u64) -> u64 {
    let p4 = t.bridge.p4().unwrap();
    let es = p4.pipeline().table_entries(table).unwrap();
    es.iter()
        .find(|e| match &e.spec.keys[0] {
            nicflow_p4::KeyMatch::Exact(v) | nicflow_p4::KeyMatch::Lpm(v, _) => *v == value.into(),
            _ => false,
        })
        .map(|e| e.id)
        .unwrap()
}

fn delete(t: &mut CachedTarget, table: &str, id: u64) {
    t.bridge
        .p4_change(|p4| {
            p4.change_table(table, |pl, name| {
                pl.table_delete(name, id).map_err(|e| e.to_string())
            })
        })
        .unwrap()
        .unwrap();
}

/// Issue 32: a table change revalidates exactly the cached flows it
/// could affect. Adds that cannot match a flow's keys, deletes of
/// entries it did not hit and default-action changes of tables it hit
/// leave it cached (its packets still hit in the datapath, no second
/// run); the others remove it and its next packet gets the new result.
#[test]
fn table_changes_remove_only_the_flows_they_could_affect() {
    let Some(c) = corpus() else { return };
    let mut t = routing_10_via_port_1(&c);
    let ten = to([10, 99, 0, 1]);
    let eleven = to([11, 0, 0, 1]);
    assert_eq!(t.send(0, &ten).unwrap()[0].0, 1);
    // 11.0.0.1 misses fib_table (default: next hop 0) and nh_table (drop).
    assert!(t.send(0, &eleven).unwrap().is_empty());
    assert_eq!(runs(&t), 2);
    assert_eq!(t.bridge.dp_flows().count(), 2);

    // 12/8 can match neither flow's destination: both stay.
    add(
        &mut t,
        "add Main.fib_table prefix:0x0c000000/8 Main.set_nhid(index:0x1)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 2);
    assert_eq!(t.send(0, &ten).unwrap()[0].0, 1);
    assert!(t.send(0, &eleven).unwrap().is_empty());
    assert_eq!(runs(&t), 2, "both packets hit their cached flows");
    let kept = t.bridge.p4().unwrap().stats.kept;
    assert!(kept >= 2, "kept {kept}");

    // Deleting the entry no flow hit changes nothing.
    let twelve = entry_id(&t, "Main.fib_table", 0x0c00_0000);
    delete(&mut t, "Main.fib_table", twelve);
    assert_eq!(t.bridge.dp_flows().count(), 2);

    // nh_table's default changes what the 11/8 flow (a miss) does, not
    // what the 10/8 flow (a hit) does.
    add(
        &mut t,
        "setdefault Main.nh_table Main.set_nh(dmac:0x020000000002, port:0x2)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 1);
    assert_eq!(t.send(0, &ten).unwrap()[0].0, 1);
    assert_eq!(runs(&t), 2, "the 10/8 flow stayed");
    let out = t.send(0, &eleven).unwrap();
    assert_eq!(out[0].0, 2, "the 11/8 flow ran again: the new default");
    assert_eq!(runs(&t), 3);

    // 11.0.0.0/8 matches the 11/8 flow only.
    add(
        &mut t,
        "add Main.fib_table prefix:0x0b000000/8 Main.set_nhid(index:0x1)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 1);
    assert_eq!(t.send(0, &eleven).unwrap()[0].0, 1, "now via next hop 1");
    assert_eq!(t.send(0, &ten).unwrap()[0].0, 1);
    assert_eq!(runs(&t), 4, "one more run: the 11/8 flow's");

    // Deleting the entry both hit (next hop 1) removes both; their next
    // packets take nh_table's default (port 2).
    let nh1 = entry_id(&t, "Main.nh_table", 1);
    delete(&mut t, "Main.nh_table", nh1);
    assert_eq!(t.bridge.dp_flows().count(), 0);
    assert_eq!(t.send(0, &ten).unwrap()[0].0, 2);
    assert_eq!(t.send(0, &eleven).unwrap()[0].0, 2);
    assert_eq!(runs(&t), 6);
    // The runs stayed counted once per packet: no rerun by revalidation.
    let p4 = t.bridge.p4().unwrap();
    assert!(p4.stats.stale >= 4, "stale {}", p4.stats.stale);
}

/// A control-plane change of a table that its change log does not
/// describe (`pipeline_mut_for` and an edit no table operation records)
/// removes the flows that applied the table, and only those: the log
/// cannot say the change leaves them alone.
#[test]
fn a_change_the_log_does_not_describe_removes_the_tables_flows() {
    let Some(c) = corpus() else { return };
    let mut t = routing_10_via_port_1(&c);
    let ten = to([10, 99, 0, 1]);
    assert_eq!(t.send(0, &ten).unwrap()[0].0, 1);
    assert_eq!(t.bridge.dp_flows().count(), 1);
    // Marked changed, nothing logged (what a future edit through the
    // raw pipeline would look like).
    t.bridge
        .p4_change(|p4| {
            p4.pipeline_mut_for(&["Main.nh_table"]);
        })
        .unwrap();
    assert_eq!(t.bridge.dp_flows().count(), 0, "the flow applied nh_table");
    assert_eq!(t.send(0, &ten).unwrap()[0].0, 1);
    assert_eq!(runs(&t), 2, "its next packet ran the program again");
}

/// PNA `add_on_miss`: learning a new connection adds an entry to the
/// table every established connection's flow applied; the entry (exact
/// on the new connection) cannot match them, so their flows stay.
#[test]
fn learning_a_connection_keeps_the_other_connections_flows() {
    let Some(c) = corpus() else { return };
    let mut t = CachedTarget::new(load(&c, "pna/pna-dpdk-add_on_miss0.p4"), &[0, 1]).unwrap();
    add(&mut t, "add ipv4_host dst_addr:0xc6120002 send(port:0x1)");
    // TCP 198.18.0.1:sport -> 198.18.0.2:80.
    let conn = |sport: u16| {
        let mut p = hex("020000000002 020000000001 0800 \
             45000028 00010000 4006 0000 c6120001 c6120002 \
             03e8 0050 00000000 00000000 5002 2000 0000 0000");
        p[34..36].copy_from_slice(&sport.to_be_bytes());
        p
    };
    let src_low = |out: &[(u32, Vec<u8>)]| out[0].1[11];
    let n = 8u16;
    for s in 0..n {
        let p = conn(1000 + s);
        assert_eq!(src_low(&t.send(0, &p).unwrap()), 0xa5, "miss: learned");
        assert_eq!(src_low(&t.send(0, &p).unwrap()), 0xf1, "hit, cached");
    }
    assert_eq!(runs(&t), 2 * u64::from(n), "two runs per connection");
    // Every connection's cached flow survived the later learnings.
    for s in 0..n {
        assert_eq!(src_low(&t.send(0, &conn(1000 + s)).unwrap()), 0xf1);
    }
    let p4 = t.bridge.p4().unwrap();
    assert_eq!(p4.stats.runs, 2 * u64::from(n), "all hits in the datapath");
    assert_eq!(p4.stats.stale, 0);
    assert_eq!(
        p4.pipeline().table_entries("ct_tcp_table").unwrap().len(),
        usize::from(n)
    );
}

/// PNA `add_on_miss` (p4c's pna-dpdk-add_on_miss0.p4): the first packet
/// of a connection misses, the program adds the entry (that run is not
/// cached); the second hits the new entry and is cached; once the entry
/// has been idle past the timeout the bridge's tick deletes it (a learned
/// entry ages out) and the flow that applied the table goes with it.
#[test]
fn add_on_miss_learns_then_ages_out_with_its_flows() {
    let Some(c) = corpus() else { return };
    let mut t = CachedTarget::new(load(&c, "pna/pna-dpdk-add_on_miss0.p4"), &[0, 1]).unwrap();
    add(&mut t, "add ipv4_host dst_addr:0xc6120002 send(port:0x1)");
    t.bridge
        .p4_change(|p4| p4.pipeline_mut().set_idle_timeout(1_000_000_000))
        .unwrap();
    // TCP 198.18.0.1:1000 -> 198.18.0.2:80.
    let pkt = hex("020000000002 020000000001 0800 \
         45000028 00010000 4006 0000 c6120001 c6120002 \
         03e8 0050 00000000 00000000 5002 2000 0000 0000");
    let src_low = |out: &[(u32, Vec<u8>)]| out[0].1[11];
    assert_eq!(src_low(&t.send(0, &pkt).unwrap()), 0xa5, "miss: learned");
    assert_eq!(
        src_low(&t.send(0, &pkt).unwrap()),
        0xf1,
        "hit the learned entry"
    );
    assert_eq!(src_low(&t.send(0, &pkt).unwrap()), 0xf1);
    let p4 = t.bridge.p4().unwrap();
    assert_eq!(p4.stats.runs, 2, "the third packet took the cached flow");
    assert_eq!(p4.slow_path_reasons().get("p4-add-entry"), Some(&1));
    assert_eq!(
        p4.pipeline().table_entries("ct_tcp_table").unwrap().len(),
        1
    );
    // Idle for longer than the timeout: the entry and its flow go.
    let later = std::time::Instant::now() + std::time::Duration::from_secs(5);
    t.bridge.tick(later);
    let p4 = t.bridge.p4().unwrap();
    assert!(p4
        .pipeline()
        .table_entries("ct_tcp_table")
        .unwrap()
        .is_empty());
    assert!(
        t.bridge.dp_flows().all(|f| !f
            .actions
            .iter()
            .any(|a| matches!(a, DpAction::SetEthSrc(_)))),
        "the flow that applied the learned entry went"
    );
    assert_eq!(src_low(&t.send(0, &pkt).unwrap()), 0xa5, "learned again");
}

/// Issue 32: a learning revalidates only the flows that applied the
/// table it changed, and must not skip one of them. With per-table
/// (coarse) revalidation every such flow goes at a learning: the
/// established connection's flow must go (its next packet runs the
/// program again), while a UDP flow, which never applied
/// `ct_tcp_table`, stays cached.
#[test]
fn learning_revalidates_every_flow_of_the_changed_table_and_no_other() {
    let Some(c) = corpus() else { return };
    let mut t = CachedTarget::new(load(&c, "pna/pna-dpdk-add_on_miss0.p4"), &[0, 1]).unwrap();
    add(&mut t, "add ipv4_host dst_addr:0xc6120002 send(port:0x1)");
    t.bridge
        .p4_change(|p4| p4.set_coarse_revalidation(true))
        .unwrap();
    let conn = |sport: u16| {
        let mut p = hex("020000000002 020000000001 0800 \
             45000028 00010000 4006 0000 c6120001 c6120002 \
             03e8 0050 00000000 00000000 5002 2000 0000 0000");
        p[34..36].copy_from_slice(&sport.to_be_bytes());
        p
    };
    // UDP 198.18.0.1:1000 -> 198.18.0.2:53: ipv4_host only.
    let udp = hex("020000000002 020000000001 0800 \
         4500001c 00010000 4011 0000 c6120001 c6120002 \
         03e8 0035 0008 0000");
    let src_low = |out: &[(u32, Vec<u8>)]| out[0].1[11];
    let a = conn(1000);
    assert_eq!(src_low(&t.send(0, &a).unwrap()), 0xa5, "miss: learned");
    assert_eq!(src_low(&t.send(0, &a).unwrap()), 0xf1, "hit, cached");
    assert_eq!(t.send(0, &udp).unwrap()[0].0, 1, "udp: sent");
    assert_eq!(t.send(0, &udp).unwrap()[0].0, 1);
    assert_eq!(runs(&t), 3, "both flows cached");
    assert_eq!(t.bridge.dp_flows().count(), 2);

    // Learning another connection changes ct_tcp_table: the flows that
    // applied it are named, not every flow walked.
    let scoped = t.bridge.dp_stats().scoped_revalidations;
    assert_eq!(src_low(&t.send(0, &conn(1001)).unwrap()), 0xa5);
    assert_eq!(runs(&t), 4);
    assert_eq!(
        t.bridge.dp_stats().scoped_revalidations,
        scoped + 1,
        "a scoped revalidation"
    );
    assert_eq!(
        t.bridge.dp_flows().count(),
        1,
        "the flow that applied ct_tcp_table went, the UDP flow stayed"
    );
    assert_eq!(t.send(0, &udp).unwrap()[0].0, 1);
    assert_eq!(runs(&t), 4, "the UDP flow was not touched");
    assert_eq!(src_low(&t.send(0, &a).unwrap()), 0xf1);
    assert_eq!(runs(&t), 5, "the connection's flow ran again");
    assert!(t.bridge.p4().unwrap().stats.stale >= 1);
}

/// One of nicflow's own test programs (tests/p4/), with the corpus's
/// architecture includes.
fn own(c: &Path, name: &str) -> CachedTarget {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/p4")
        .join(name);
    CachedTarget::new(load(c, path.to_str().unwrap()), &[0, 1, 2]).unwrap()
}

/// Ethernet + IPv4 (checksum right) + a TCP header to `dport`.
fn tcp4(src: [u8; 4], dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut p = hex("020000000009 020000000008 0800 \
         45000028 00010000 4006 0000 00000000 00000000 \
         1234 0000 00000000 00000000 5002 2000 0000 0000");
    p[26..30].copy_from_slice(&src);
    p[30..34].copy_from_slice(&dst);
    p[36..38].copy_from_slice(&dport.to_be_bytes());
    fix_ipv4_checksum(&mut p);
    p
}

/// (port, low byte of the destination MAC) of the one copy sent.
fn sent(t: &mut CachedTarget, p: &[u8]) -> (u32, u8) {
    let out = t.send(0, p).unwrap();
    assert_eq!(out.len(), 1, "{out:02x?}");
    (out[0].0, out[0].1[5])
}

/// Issue 32, priorities (acl_prio.p4, ternary): an added entry that may
/// match a flow's packets takes it only if it outranks the entry the run
/// hit; a lower priority, or an equal one (the tie goes to the entry
/// first in table order: the program's initial entries come first)
/// leaves the flow cached; a higher one removes it. A clear removes the
/// runtime entries only: a flow that hit an initial entry stays.
#[test]
fn an_added_entry_that_cannot_outrank_the_hit_keeps_the_flow() {
    let Some(c) = corpus() else { return };
    let mut t = own(&c, "acl_prio.p4");
    // 198.18.0.1 -> 10.0.0.1: the initial priority-10 entry (198.18/16).
    let a = tcp4([198, 18, 0, 1], [10, 0, 0, 1], 80);
    // 10.0.0.9 -> 198.19.0.1, TCP: the initial priority-5 entry.
    let b = tcp4([10, 0, 0, 9], [198, 19, 0, 1], 80);
    assert_eq!(sent(&mut t, &a), (1, 0x01));
    assert_eq!(sent(&mut t, &b), (2, 0x02));
    assert_eq!(runs(&t), 2);
    // Matches a's packets, priority 5 < 10: a stays; b (hit at 5, source
    // not 198.18.0/24) stays too.
    add(
        &mut t,
        "add acl 5 src:0xc6120000&&&0xffffff00 dst:0&&&0 protocol:0&&&0 fwd(port:0, dmac:0x020000000003)",
    );
    // Priority 10, a's packets: the tie goes to the initial entry.
    add(
        &mut t,
        "add acl 10 src:0&&&0 dst:0x0a000000&&&0xff000000 protocol:0&&&0 fwd(port:0, dmac:0x020000000004)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 2, "neither can win");
    assert_eq!(sent(&mut t, &a), (1, 0x01));
    assert_eq!(sent(&mut t, &b), (2, 0x02));
    assert_eq!(runs(&t), 2, "both hit their cached flows");
    assert!(t.bridge.p4().unwrap().stats.kept >= 2);
    // Priority 11 on a's packets: a goes, b (another source) stays.
    add(
        &mut t,
        "add acl 11 src:0xc6120000&&&0xffff0000 dst:0&&&0 protocol:6&&&0xff fwd(port:2, dmac:0x020000000005)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 1, "a's flow went");
    assert_eq!(sent(&mut t, &a), (2, 0x05), "the new entry won");
    assert_eq!(sent(&mut t, &b), (2, 0x02));
    assert_eq!(runs(&t), 3, "a ran again, b hit its flow");
    // A clear: a (now on a runtime entry) goes, b (initial entry) stays.
    t.bridge
        .p4_change(|p4| {
            p4.change_table("acl", |pl, n| pl.table_clear(n).map_err(|e| e.to_string()))
        })
        .unwrap()
        .unwrap();
    assert_eq!(t.bridge.dp_flows().count(), 1);
    assert_eq!(sent(&mut t, &b), (2, 0x02));
    assert_eq!(runs(&t), 3, "b's flow stayed");
    assert_eq!(sent(&mut t, &a), (1, 0x01), "a back on the initial entry");
    assert_eq!(runs(&t), 4);
}

/// Issue 32, prefix lengths (range_lpm.p4's `route`, lpm): a shorter
/// prefix that may match a flow's packets cannot beat the prefix the run
/// hit (the flow stays); a longer one can (it goes); for a run that
/// missed, any prefix that may match wins, the shortest included.
#[test]
fn an_added_prefix_shorter_than_the_hit_keeps_the_flow() {
    let Some(c) = corpus() else { return };
    let mut t = own(&c, "range_lpm.p4");
    add(&mut t, "add route dst:0x0a000000/8 set_port(port:2)");
    let ten = tcp4([198, 18, 0, 1], [10, 1, 2, 3], 80);
    let eleven = tcp4([198, 18, 0, 1], [11, 1, 2, 3], 80);
    assert_eq!(sent(&mut t, &ten).0, 2);
    assert_eq!(sent(&mut t, &eleven).0, 0, "missed: default port 0");
    assert_eq!(runs(&t), 2);
    // 10.0.0.0/7 holds 10.1.2.3 and 11.1.2.3: shorter than the /8 (the
    // 10/8 flow stays), and the 11/8 flow had missed (it goes).
    add(&mut t, "add route dst:0x0a000000/7 set_port(port:1)");
    assert_eq!(t.bridge.dp_flows().count(), 1);
    assert_eq!(sent(&mut t, &ten).0, 2);
    assert_eq!(runs(&t), 2, "the 10/8 flow stayed");
    assert_eq!(sent(&mut t, &eleven).0, 1, "the /7 now");
    assert_eq!(runs(&t), 3);
    // 10.1.0.0/16: longer, holds 10.1.2.3: the 10/8 flow goes.
    add(&mut t, "add route dst:0x0a010000/16 set_port(port:0)");
    assert_eq!(sent(&mut t, &ten).0, 0);
    assert_eq!(sent(&mut t, &eleven).0, 1);
    assert_eq!(runs(&t), 4, "only the 10/8 flow ran again");
}

/// Issue 32, range keys compared per key (range_lpm.p4's `svc`): the
/// initial entry masks the destination port with 0xffef, so a flow of
/// port 0x0100 also holds port 0x0110 and nothing in between. A range
/// entry between the two (0x0101..0x010f) cannot match the flow's
/// packets, although the flow's span (0x0100..0x0110) overlaps it: the
/// flow stays. A range holding 0x0110 removes it.
#[test]
fn a_range_between_a_flows_keys_keeps_the_flow() {
    let Some(c) = corpus() else { return };
    let mut t = own(&c, "range_lpm.p4");
    add(&mut t, "add route dst:0x0a000000/8 set_port(port:2)");
    let p100 = tcp4([198, 18, 0, 1], [10, 1, 2, 3], 0x0100);
    let p110 = tcp4([198, 18, 0, 1], [10, 1, 2, 3], 0x0110);
    assert_eq!(sent(&mut t, &p100), (2, 0xaa), "the initial entry");
    assert_eq!(sent(&mut t, &p110), (2, 0xaa), "same flow");
    assert_eq!(runs(&t), 1);
    add(
        &mut t,
        "add svc 20 dport:0x0101->0x010f src:0/0 tag(dmac:0x0200000000bb)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 1, "between the flow's keys");
    assert_eq!(sent(&mut t, &p110), (2, 0xaa));
    assert_eq!(runs(&t), 1);
    add(
        &mut t,
        "add svc 20 dport:0x0110->0x0120 src:0/0 tag(dmac:0x0200000000cc)",
    );
    assert_eq!(t.bridge.dp_flows().count(), 0, "0x0110 is in the range");
    assert_eq!(sent(&mut t, &p110), (2, 0xcc));
    assert_eq!(sent(&mut t, &p100), (2, 0xaa));
}
