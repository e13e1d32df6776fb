//! Differential test of the P4 cache: random packet sequences through a
//! bridge in P4 mode (cache in front of the interpreter) and through the
//! interpreter alone must give the same frames on the same ports, packet
//! by packet. A wrong megaflow mask (a bit the decision depended on left
//! out) shows up as a later packet taking an earlier packet's flow and
//! coming out differently. Seeded: the seed is printed, `NICFLOW_SEED=N`
//! reruns one; each failure found becomes a fixed case below.

mod common;

use nicflow_dataplane::p4::stf::CachedTarget;
use nicflow_p4::stf::{self, StfTarget};
use nicflow_p4::Pipeline;
use num_bigint::BigUint;
use rand::{Rng, SeedableRng};
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

/// A program with entries (STF `add`/`setdefault` lines) and its ports.
struct Case {
    prog: &'static str,
    entries: &'static str,
    ports: &'static [u32],
    /// The program's decisions are cacheable: the test must see flows
    /// cached, or it would only compare the interpreter with itself.
    must_cache: bool,
}

const CASES: &[Case] = &[
    Case {
        prog: "pna/routing.p4",
        entries: "add Main.fib_table prefix:0xc6120000/16 Main.set_nhid(index:0x1)\n\
                  add Main.fib_table prefix:0xc6128000/17 Main.set_nhid(index:0x2)\n\
                  add Main.fib_table prefix:0xc6128100/24 Main.set_nhid(index:0x3)\n\
                  add Main.fib_table prefix:0xc6130001/32 Main.set_nhid(index:0x2)\n\
                  add Main.nh_table nh_index:0x1 Main.set_nh(dmac:0x020000000001, port:0x1)\n\
                  add Main.nh_table nh_index:0x2 Main.set_nh(dmac:0x020000000002, port:0x2)\n\
                  add Main.nh_table nh_index:0x3 Main.set_nh(dmac:0x020000000003, port:0x0)\n\
                  add Main.nh_table nh_index:0x0 Main.set_nh(dmac:0x0200000000ff, port:0x2)\n",
        ports: &[0, 1, 2],
        must_cache: true,
    },
    Case {
        prog: "pna/simple_l3.p4",
        entries: "add ingress.nh_table dstAddr:0xc6120001 ingress.send_nh(port:0x1, srcMac:0x000102030405, dstMac:0xAABBCCDDEEFF)\n\
                  add ingress.nh_table dstAddr:0xc6128101 ingress.send_nh(port:0x2, srcMac:0x000102030406, dstMac:0xAABBCCDDEE00)\n",
        ports: &[0, 1, 2],
        must_cache: true,
    },
    Case {
        prog: "pna/arp_respond.p4",
        entries: "add ingress.arp_table IPaddr:0xc6120001 ingress.arp_reply(rmac:0x000102030420)\n\
                  add ingress.arp_table IPaddr:0xc6128101 ingress.arp_reply(rmac:0x000102030421)\n",
        ports: &[0, 1, 2],
        must_cache: true,
    },
    Case {
        prog: "pna/ipip.p4",
        entries: "add Main.fwd_table port:0x0 Main.set_ipip(src:0xc6120101, dst:0xc6120202, port:0x1)\n\
                  add Main.fwd_table port:0x1 Main.set_nh(dmac:0x663334354601, port:0x0)\n",
        ports: &[0, 1, 2],
        must_cache: false,
    },
    Case {
        prog: "netronome/ipv6_forward.p4",
        entries: "add ipv6_lpm dst_addr:0x20010db8000000000000000000000001 ipv6_forward(dstAddr:0x00154d000000, port:1)\n\
                  add ipv6_lpm dst_addr:0x20010db8000000000000000000000002 ipv6_forward(dstAddr:0x00154d000001, port:2)\n",
        ports: &[0, 1, 2],
        must_cache: true,
    },
    Case {
        prog: "v1model/checksum-l4-bmv2.p4",
        entries: "",
        ports: &[0, 1, 2],
        must_cache: false,
    },
];

/// A random frame from a few templates whose fields come from small sets,
/// so that many frames share prefixes, tables hit and caches get reused.
fn frame(rng: &mut impl Rng) -> (u32, Vec<u8>) {
    let port = rng.gen_range(0..3);
    let mut f = Vec::new();
    let macs: [[u8; 6]; 3] = [
        [0x02, 0, 0, 0, 0, 1],
        [0xff; 6],
        [0x00, 0x90, 0xfb, 0x65, 0xd6, 0xfe],
    ];
    f.extend_from_slice(&macs[rng.gen_range(0..3)]);
    f.extend_from_slice(&macs[rng.gen_range(0..3)]);
    if rng.gen_bool(0.1) {
        f.extend_from_slice(&[0x81, 0x00, 0x00, rng.gen_range(1..4)]);
    }
    let addrs: [u32; 6] = [
        0xc612_0001,
        0xc612_8101,
        0xc612_80ff,
        0xc613_0001,
        0xc613_0002,
        0x0a00_0001,
    ];
    match rng.gen_range(0..10) {
        0..=5 => {
            f.extend_from_slice(&[0x08, 0x00]);
            let ihl = if rng.gen_bool(0.1) { 6 } else { 5 };
            let proto = [6u8, 17, 1, 4, 47][rng.gen_range(0..5)];
            let l4 = match proto {
                6 => 20,
                17 => 8,
                1 => 8,
                4 => 20,
                _ => 4,
            };
            let total = ihl * 4 + l4 + rng.gen_range(0..8);
            let mut ip = vec![(4 << 4) | ihl as u8, [0u8, 0x10, 0xb8][rng.gen_range(0..3)]];
            ip.extend_from_slice(&(total as u16).to_be_bytes());
            ip.extend_from_slice(&[0, rng.gen_range(0..3), 0, 0]);
            ip.push([0u8, 1, 2, 64, 255][rng.gen_range(0..5)]);
            ip.push(proto);
            ip.extend_from_slice(&[0, 0]);
            ip.extend_from_slice(&addrs[rng.gen_range(0..6)].to_be_bytes());
            ip.extend_from_slice(&addrs[rng.gen_range(0..6)].to_be_bytes());
            if ihl == 6 {
                ip.extend_from_slice(&[1, 1, 1, 0]);
            }
            let mut s = 0u32;
            for c in ip.chunks(2) {
                s += u32::from(u16::from_be_bytes([c[0], c[1]]));
            }
            while s > 0xffff {
                s = (s & 0xffff) + (s >> 16);
            }
            let c = if rng.gen_bool(0.9) {
                !(s as u16)
            } else {
                0x1234
            };
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
            // 0x0100 and 0x0110: the two ports of range_lpm.p4's masked
            // range entry, 0x0108 between them.
            let ports = [53u16, 80, 4789, 1234, 0x0100, 0x0110, 0x0108];
            f.resize(f.len() + (total - ihl * 4), 0);
            let l4o = f.len() - (total - ihl * 4);
            let n = ports.len();
            f[l4o..l4o + 2].copy_from_slice(&ports[rng.gen_range(0..n)].to_be_bytes());
            f[l4o + 2..l4o + 4].copy_from_slice(&ports[rng.gen_range(0..n)].to_be_bytes());
        }
        6..=7 => {
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, rng.gen_range(1..3)]);
            f.extend_from_slice(&macs[rng.gen_range(0..3)]);
            f.extend_from_slice(&addrs[rng.gen_range(0..6)].to_be_bytes());
            f.extend_from_slice(&[0; 6]);
            f.extend_from_slice(&addrs[rng.gen_range(0..6)].to_be_bytes());
        }
        8 => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            f.extend_from_slice(&[0; 12]);
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            f.extend_from_slice(&[0; 11]);
            f.push(rng.gen_range(1..3));
            f.extend_from_slice(&[0, 53, 0, 53, 0, 8, 0, 0]);
        }
        _ => {
            let n = rng.gen_range(0..40);
            f.truncate(rng.gen_range(0..f.len().max(1)));
            for _ in 0..n {
                f.push(rng.gen());
            }
        }
    }
    if rng.gen_bool(0.05) {
        let cut = rng.gen_range(0..f.len().max(1));
        f.truncate(cut);
    }
    (port, f)
}

fn check(c: &Path, case: &Case, seed: u64, n: usize) {
    let inc = vec![c.join("include")];
    let load = || Pipeline::load(&c.join(case.prog), &inc, None).unwrap();
    let entries = stf::parse("entries", case.entries).unwrap();
    let mut alone = load();
    let mut cached = CachedTarget::new(load(), case.ports).unwrap();
    let mut pre = stf::Replication::default();
    for (_, cmd) in &entries.commands {
        stf::apply_to(&mut alone, &mut pre, cmd).unwrap();
        cached.apply(cmd).unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for i in 0..n {
        let (port, pkt) = frame(&mut rng);
        let want: Vec<(u32, Vec<u8>)> = alone
            .process(port, &pkt, i as u64)
            .outputs
            .into_iter()
            .filter(|(p, _)| case.ports.contains(p))
            .collect();
        let mut got = cached.send(port, &pkt).unwrap();
        got.sort_by_key(|(p, _)| *p);
        let mut want = want;
        want.sort_by_key(|(p, _)| *p);
        assert_eq!(
            got, want,
            "{} seed {seed}, packet {i} from port {port}: {:02x?}",
            case.prog, pkt
        );
    }
    let p4 = cached.bridge.p4().unwrap();
    assert!(
        !case.must_cache || p4.stats.cached > 0,
        "{}: nothing was cached, the comparison proves nothing",
        case.prog
    );
    println!(
        "{}: {n} packets, {} runs ({} cached as flows), uncached {:?}",
        case.prog,
        p4.stats.runs,
        p4.stats.cached,
        p4.slow_path_reasons()
    );
}

/// The test's seed: `NICFLOW_SEED` when set, else a fresh one; printed
/// either way (`NICFLOW_SEED=N` replays a failure).
fn seed() -> u64 {
    let seed = std::env::var("NICFLOW_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("NICFLOW_SEED={seed}");
    seed
}

#[test]
fn cache_and_interpreter_agree_on_random_packets() {
    let Some(c) = corpus() else { return };
    let seed = seed();
    for case in CASES {
        check(&c, case, seed, 3000);
    }
}

/// One control-plane change, applied to both pipelines alike.
#[derive(Debug)]
enum Op {
    Add(&'static str, nicflow_p4::EntrySpec),
    Del(&'static str, u64),
    Modify(&'static str, u64, &'static str, Vec<(String, BigUint)>),
    Default(&'static str, &'static str, Vec<(String, BigUint)>),
    Clear(&'static str),
}

impl Op {
    fn table(&self) -> &'static str {
        match self {
            Op::Add(t, _)
            | Op::Del(t, _)
            | Op::Modify(t, ..)
            | Op::Default(t, ..)
            | Op::Clear(t) => t,
        }
    }

    /// An add of action `tag` gets `params` (NoAction none).
    fn with_params(mut self, params: Vec<(String, BigUint)>) -> Op {
        if let Op::Add(_, spec) = &mut self {
            if spec.action == "tag" {
                spec.params = params;
            }
        }
        self
    }

    fn apply(&self, pl: &mut Pipeline) -> Result<(), String> {
        let r = match self {
            Op::Add(t, spec) => pl.table_add(t, spec.clone()).map(|_| ()),
            Op::Del(t, id) => pl.table_delete(t, *id),
            Op::Modify(t, id, a, ps) => pl.table_modify(t, *id, a, ps.clone()),
            Op::Default(t, a, ps) => pl.set_default(t, a, ps.clone()),
            Op::Clear(t) => pl.table_clear(t),
        };
        r.map_err(|e| e.to_string())
    }
}

fn param(v: u128) -> (String, BigUint) {
    (String::new(), BigUint::from(v))
}

/// A table change for routing.p4: lpm routes to next hops, next hops to
/// ports, from small sets so that they often match the packets' keys.
fn routing_op(rng: &mut impl Rng, alone: &Pipeline) -> Op {
    let fib = "Main.fib_table";
    let nh = "Main.nh_table";
    let table = if rng.gen_bool(0.6) { fib } else { nh };
    let ids: Vec<u64> = alone
        .table_entries(table)
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    let nh_params = |rng: &mut dyn rand::RngCore| {
        vec![
            param(0x0200_0000_0000 | u128::from(rng.gen_range(0..4u8))),
            param(u128::from(rng.gen_range(0..3u8))),
        ]
    };
    match rng.gen_range(0..10) {
        0..=3 => {
            let spec = if table == fib {
                let addrs: [u32; 7] = [
                    0xc612_0000,
                    0xc612_8000,
                    0xc612_8100,
                    0xc613_0001,
                    0x0a00_0000,
                    0xc612_80ff,
                    0xc600_0000,
                ];
                let len = [0u32, 8, 15, 16, 17, 24, 25, 31, 32][rng.gen_range(0..9)];
                let a = addrs[rng.gen_range(0..addrs.len())] & (!0u64 << (32 - len)) as u32;
                nicflow_p4::EntrySpec {
                    keys: vec![nicflow_p4::KeyMatch::Lpm(BigUint::from(a), len)],
                    action: "Main.set_nhid".into(),
                    params: vec![param(rng.gen_range(0..4))],
                    priority: None,
                }
            } else {
                nicflow_p4::EntrySpec {
                    keys: vec![nicflow_p4::KeyMatch::Exact(BigUint::from(
                        rng.gen_range(0..5u8),
                    ))],
                    action: "Main.set_nh".into(),
                    params: nh_params(rng),
                    priority: None,
                }
            };
            Op::Add(table, spec)
        }
        4..=5 if !ids.is_empty() => Op::Del(table, ids[rng.gen_range(0..ids.len())]),
        6..=7 if !ids.is_empty() => {
            let id = ids[rng.gen_range(0..ids.len())];
            if table == fib {
                Op::Modify(fib, id, "Main.set_nhid", vec![param(rng.gen_range(0..4))])
            } else if rng.gen_bool(0.2) {
                Op::Modify(nh, id, "Main.drop", vec![])
            } else {
                Op::Modify(nh, id, "Main.set_nh", nh_params(rng))
            }
        }
        8 => {
            if table == fib {
                Op::Default(fib, "Main.set_nhid", vec![param(rng.gen_range(0..4))])
            } else if rng.gen_bool(0.3) {
                Op::Default(nh, "Main.drop", vec![])
            } else {
                Op::Default(nh, "Main.set_nh", nh_params(rng))
            }
        }
        _ => {
            if rng.gen_bool(0.2) {
                Op::Clear(table)
            } else {
                Op::Del(table, u64::MAX)
            }
        }
    }
}

/// A table change for add_on_miss0.p4: host routes (exact) added and
/// deleted, learned connections deleted (the data plane adds them).
fn learner_op(rng: &mut impl Rng, alone: &Pipeline) -> Op {
    let table = if rng.gen_bool(0.5) {
        "ipv4_host"
    } else {
        "ct_tcp_table"
    };
    let ids: Vec<u64> = alone
        .table_entries(table)
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    if table == "ipv4_host" && (ids.is_empty() || rng.gen_bool(0.5)) {
        let addrs: [u32; 4] = [0xc612_0001, 0xc612_8101, 0xc613_0002, 0x0a00_0001];
        let spec = nicflow_p4::EntrySpec {
            keys: vec![nicflow_p4::KeyMatch::Exact(BigUint::from(
                addrs[rng.gen_range(0..4)],
            ))],
            action: "send".into(),
            params: vec![param(rng.gen_range(0..3))],
            priority: None,
        };
        return Op::Add(table, spec);
    }
    match ids.len() {
        0 => Op::Clear(table),
        n if rng.gen_bool(0.8) => Op::Del(table, ids[rng.gen_range(0..n)]),
        n => Op::Modify(table, ids[rng.gen_range(0..n)], "send", vec![param(2)]),
    }
}

/// The ids of `table`'s runtime entries.
fn runtime_ids(alone: &Pipeline, table: &str) -> Vec<u64> {
    alone
        .table_entries(table)
        .unwrap()
        .iter()
        .filter(|e| !e.is_const)
        .map(|e| e.id)
        .collect()
}

/// A priority from a small set, so that ties happen.
fn priority(rng: &mut impl Rng) -> Option<u32> {
    Some([0u32, 5, 10, 10, 15, 20][rng.gen_range(0..6)])
}

/// A table change for acl_prio.p4 (nicflow's own ternary ACL with
/// priorities): entries over the frames' addresses with masks of a few
/// lengths, priorities that tie with each other and with the initial
/// entries (5 and 10).
fn acl_op(rng: &mut impl Rng, alone: &Pipeline) -> Op {
    let t = "acl";
    let ids = runtime_ids(alone, t);
    let fwd = |rng: &mut dyn rand::RngCore| {
        vec![
            param(u128::from(rng.gen_range(0..3u8))),
            param(0x0200_0000_0000 | u128::from(rng.gen_range(0..8u8))),
        ]
    };
    let addr = |rng: &mut dyn rand::RngCore| {
        let a = [0xc612_0001u32, 0xc612_8101, 0xc613_0002, 0x0a00_0001, 0][rng.gen_range(0..5)];
        let m = [
            0u32,
            0xff00_0000,
            0xffff_0000,
            0xffff_ff00,
            0xffff_ffff,
            0x00ff_0000,
        ][rng.gen_range(0..6)];
        nicflow_p4::KeyMatch::Ternary(BigUint::from(a & m), BigUint::from(m))
    };
    match rng.gen_range(0..10) {
        0..=4 => {
            let proto = match rng.gen_range(0..3) {
                0 => nicflow_p4::KeyMatch::Ternary(BigUint::from(0u8), BigUint::from(0u8)),
                1 => nicflow_p4::KeyMatch::Ternary(BigUint::from(6u8), BigUint::from(0xffu8)),
                _ => nicflow_p4::KeyMatch::Ternary(BigUint::from(17u8), BigUint::from(0xffu8)),
            };
            let (action, params) = if rng.gen_bool(0.8) {
                ("fwd", fwd(rng))
            } else {
                ("deny", vec![])
            };
            Op::Add(
                t,
                nicflow_p4::EntrySpec {
                    keys: vec![addr(rng), addr(rng), proto],
                    action: action.into(),
                    params,
                    priority: priority(rng),
                },
            )
        }
        5..=6 if !ids.is_empty() => Op::Del(t, ids[rng.gen_range(0..ids.len())]),
        7 if !ids.is_empty() => {
            let id = ids[rng.gen_range(0..ids.len())];
            if rng.gen_bool(0.2) {
                Op::Modify(t, id, "deny", vec![])
            } else {
                Op::Modify(t, id, "fwd", fwd(rng))
            }
        }
        8 => Op::Default(t, "fwd", fwd(rng)),
        _ => {
            if rng.gen_bool(0.3) {
                Op::Clear(t)
            } else {
                Op::Del(t, u64::MAX)
            }
        }
    }
}

/// A table change for range_lpm.p4 (nicflow's own): lpm routes of many
/// lengths over the frames' addresses, and service entries ranking a
/// range on the destination port and an lpm on the source by priority
/// (bounds around the frames' ports and the masked initial entry's).
fn range_lpm_op(rng: &mut impl Rng, alone: &Pipeline) -> Op {
    let route = rng.gen_bool(0.5);
    let t = if route { "route" } else { "svc" };
    let ids = runtime_ids(alone, t);
    let prefix = |rng: &mut dyn rand::RngCore| {
        let a = [
            0xc612_0000u32,
            0xc612_8100,
            0xc613_0001,
            0x0a00_0000,
            0xc600_0000,
        ][rng.gen_range(0..5)];
        let len = [0u32, 7, 8, 15, 16, 17, 24, 31, 32][rng.gen_range(0..9)];
        let a = a & (!0u64 << (32 - len)) as u32;
        nicflow_p4::KeyMatch::Lpm(BigUint::from(a), len)
    };
    let tag = |rng: &mut dyn rand::RngCore| {
        vec![param(0x0200_0000_00a0 | u128::from(rng.gen_range(0..8u8)))]
    };
    match rng.gen_range(0..10) {
        0..=4 if route => Op::Add(
            t,
            nicflow_p4::EntrySpec {
                keys: vec![prefix(rng)],
                action: if rng.gen_bool(0.8) {
                    "set_port"
                } else {
                    "deny"
                }
                .into(),
                params: if rng.gen_bool(0.8) {
                    vec![param(u128::from(rng.gen_range(0..3u8)))]
                } else {
                    vec![]
                },
                priority: None,
            },
        ),
        0..=4 => {
            let bounds = [
                0u16, 53, 80, 0x0100, 0x0101, 0x0108, 0x010f, 0x0110, 0x0111, 1234, 4789, 0xffff,
            ];
            let (a, b) = (
                bounds[rng.gen_range(0..bounds.len())],
                bounds[rng.gen_range(0..bounds.len())],
            );
            Op::Add(
                t,
                nicflow_p4::EntrySpec {
                    keys: vec![
                        nicflow_p4::KeyMatch::Range(
                            BigUint::from(a.min(b)),
                            BigUint::from(a.max(b)),
                        ),
                        prefix(rng),
                    ],
                    action: if rng.gen_bool(0.8) { "tag" } else { "NoAction" }.into(),
                    params: vec![],
                    priority: priority(rng),
                },
            )
            .with_params(tag(rng))
        }
        5..=6 if !ids.is_empty() => Op::Del(t, ids[rng.gen_range(0..ids.len())]),
        7 if !ids.is_empty() => {
            let id = ids[rng.gen_range(0..ids.len())];
            if route {
                Op::Modify(
                    t,
                    id,
                    "set_port",
                    vec![param(u128::from(rng.gen_range(0..3u8)))],
                )
            } else {
                Op::Modify(t, id, "tag", tag(rng))
            }
        }
        8 if route => Op::Default(
            t,
            "set_port",
            vec![param(u128::from(rng.gen_range(0..3u8)))],
        ),
        8 => Op::Default(t, "tag", tag(rng)),
        _ => {
            if rng.gen_bool(0.3) {
                Op::Clear(t)
            } else {
                Op::Del(t, u64::MAX)
            }
        }
    }
}

/// Table changes interleaved with packets: the cached path (which now
/// keeps the flows a change cannot affect) must still give what the
/// interpreter alone gives, packet by packet.
fn check_with_changes(
    c: &Path,
    prog: &str,
    entries: &str,
    op: fn(&mut rand::rngs::StdRng, &Pipeline) -> Op,
    seed: u64,
    n: usize,
) {
    let ports = [0u32, 1, 2];
    let inc = vec![c.join("include")];
    let load = || Pipeline::load(&c.join(prog), &inc, None).unwrap();
    let entries = stf::parse("entries", entries).unwrap();
    let mut alone = load();
    let mut cached = CachedTarget::new(load(), &ports).unwrap();
    let mut pre = stf::Replication::default();
    for (_, cmd) in &entries.commands {
        stf::apply_to(&mut alone, &mut pre, cmd).unwrap();
        cached.apply(cmd).unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut changes = 0;
    for i in 0..n {
        if rng.gen_bool(0.05) {
            let o = op(&mut rng, &alone);
            let want = o.apply(&mut alone);
            let got = cached
                .bridge
                .p4_change(|p4| p4.change_table(o.table(), |pl, _| o.apply(pl)))
                .unwrap();
            assert_eq!(got.is_ok(), want.is_ok(), "{prog} seed {seed}: {o:?}");
            changes += usize::from(want.is_ok());
        }
        let (port, pkt) = frame(&mut rng);
        let mut want: Vec<(u32, Vec<u8>)> = alone
            .process(port, &pkt, i as u64)
            .outputs
            .into_iter()
            .filter(|(p, _)| ports.contains(p))
            .collect();
        let mut got = cached.send(port, &pkt).unwrap();
        got.sort_by_key(|(p, _)| *p);
        want.sort_by_key(|(p, _)| *p);
        assert_eq!(
            got, want,
            "{prog} seed {seed}, packet {i} from port {port}: {pkt:02x?}"
        );
    }
    let p4 = cached.bridge.p4().unwrap();
    assert!(p4.stats.cached > 0, "{prog}: nothing was cached");
    println!(
        "{prog}: {n} packets, {changes} table changes, {} runs ({} cached), \
         revalidation kept {} and removed {} flows",
        p4.stats.runs, p4.stats.cached, p4.stats.kept, p4.stats.stale
    );
}

#[test]
fn cache_and_interpreter_agree_under_table_changes() {
    let Some(c) = corpus() else { return };
    let seed = seed();
    check_with_changes(
        &c,
        "pna/routing.p4",
        CASES[0].entries,
        routing_op,
        seed,
        4000,
    );
    check_with_changes(
        &c,
        "pna/pna-dpdk-add_on_miss0.p4",
        "add ipv4_host dst_addr:0xc6120002 send(port:0x1)\n\
         add ipv4_host dst_addr:0xc6128101 send(port:0x2)\n",
        learner_op,
        seed,
        4000,
    );
}

/// nicflow's own ternary (priorities, initial entries) and range/lpm
/// programs under random table changes: revalidation keeps a flow only
/// when an added entry cannot outrank what its run hit, and compares
/// range entries with the flow's keys one by one.
#[test]
fn cache_and_interpreter_agree_under_priority_and_range_changes() {
    let Some(c) = corpus() else { return };
    let seed = seed();
    let own = |name: &str| format!("{}/tests/p4/{name}", env!("CARGO_MANIFEST_DIR"));
    check_with_changes(&c, &own("acl_prio.p4"), "", acl_op, seed, 4000);
    check_with_changes(
        &c,
        &own("range_lpm.p4"),
        "add route dst:0xc6120000/16 set_port(port:1)\n\
         add route dst:0x0a000000/8 set_port(port:2)\n\
         add svc 5 dport:0x0050->0x0050 src:0/0 tag(dmac:0x0200000000b0)\n",
        range_lpm_op,
        seed,
        4000,
    );
}
