//! Synthetic rule sets and traffic for the benchmarks and tests.
//!
//! Rules are random IPv4 5-tuple ACL entries: source and destination
//! prefixes of length 8, 16, 24 or 32, TCP or UDP, destination port exact or
//! wildcarded, source port mostly wildcarded. That gives a bounded number of
//! distinct masks (at most 4 x 4 x 2 x 2 x 2 = 128) however many rules
//! there are, as real ACLs do, so tuple space search cost depends on the mask
//! count, not the rule count. Packets are drawn from the rules so that each
//! hits its rule (or one of higher priority that overlaps it).

use nicflow_flow::{Action, Field, FlowKey, FlowMask, Match};
use nicflow_ofctl::FlowSpec;
use nicflow_packet::builder::FrameBuilder;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::Ipv4Addr;

const PREFIXES: [u32; 4] = [8, 16, 24, 32];

fn prefix_mask(len: u32) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len)
    }
}

/// `n` random 5-tuple rules in table 0, each with a distinct priority and
/// `actions=output:out_port`. Addresses come from 198.18.0.0/15 mixed with
/// random high bits so prefixes differ.
pub fn gen_5tuple_rules(n: usize, seed: u64, out_port: u32) -> Vec<FlowSpec> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    let mut seen = std::collections::HashSet::new();
    while out.len() < n {
        let mut key = FlowKey::default();
        let mut mask = FlowMask::catchall();
        key.dl_type = 0x0800;
        mask.0.dl_type = 0xffff;
        key.nw_proto = if rng.gen_bool(0.5) { 6 } else { 17 };
        mask.0.nw_proto = 0xff;
        let sl = PREFIXES[rng.gen_range(0..4)];
        let dl = PREFIXES[rng.gen_range(0..4)];
        key.nw_src = rng.gen();
        mask.0.nw_src = prefix_mask(sl);
        key.nw_dst = rng.gen();
        mask.0.nw_dst = prefix_mask(dl);
        if rng.gen_bool(0.7) {
            key.tp_dst = rng.gen_range(1..65535);
            mask.0.tp_dst = 0xffff;
        }
        if rng.gen_bool(0.2) {
            key.tp_src = rng.gen_range(1024..65535);
            mask.0.tp_src = 0xffff;
        }
        let m = Match::new(key, mask);
        if !seen.insert(m) {
            continue;
        }
        out.push(FlowSpec {
            table: 0,
            priority: 0,
            cookie: out.len() as u64,
            idle_timeout: 0,
            hard_timeout: 0,
            send_flow_rem: false,
            r#match: m,
            actions: vec![Action::Output(out_port)],
        });
    }
    // Distinct priorities 1..=n (capped to the u16 range; beyond 65535 rules
    // priorities repeat, which only matters for overlapping rules).
    for (i, r) in out.iter_mut().enumerate() {
        r.priority = (1 + (i % 65534)) as u16;
    }
    out
}

/// A packet key that falls under `m`: the rule's bits, random elsewhere.
pub fn key_in(m: &Match, rng: &mut StdRng) -> FlowKey {
    let mut k = FlowKey {
        dl_type: 0x0800,
        nw_proto: m.key().nw_proto,
        ..Default::default()
    };
    for f in [Field::NwSrc, Field::NwDst, Field::TpSrc, Field::TpDst] {
        let (v, mask) = m.get(f);
        let r: u128 = rng.gen::<u32>() as u128 & f.full_mask();
        f.write(&mut k, (v & mask) | (r & !mask));
    }
    if k.tp_src == 0 {
        k.tp_src = 1;
    }
    k.nw_ttl = 64;
    k
}

/// A frame for a key made by [`key_in`].
pub fn frame_for(k: &FlowKey, len: usize) -> Vec<u8> {
    let src = Ipv4Addr::from(k.nw_src);
    let dst = Ipv4Addr::from(k.nw_dst);
    let b = FrameBuilder::new([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2]).ipv4(src, dst);
    let b = if k.nw_proto == 6 {
        b.tcp(k.tp_src, k.tp_dst, 0x10)
    } else {
        b.udp(k.tp_src, k.tp_dst)
    };
    let hdr = if k.nw_proto == 6 { 54 } else { 42 };
    let payload = vec![0u8; len.saturating_sub(hdr)];
    b.payload(&payload).build()
}

/// `n_flows` distinct frames, each hitting a rule of `rules`.
pub fn gen_frames(rules: &[FlowSpec], n_flows: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n_flows)
        .map(|_| {
            let r = &rules[rng.gen_range(0..rules.len())];
            frame_for(&key_in(&r.r#match, &mut rng), len)
        })
        .collect()
}

/// Keys (not frames) hitting the rules, for classifier-only timing.
pub fn gen_keys(rules: &[FlowSpec], n: usize, seed: u64) -> Vec<FlowKey> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let r = &rules[rng.gen_range(0..rules.len())];
            let mut k = key_in(&r.r#match, &mut rng);
            k.in_port = 1;
            k
        })
        .collect()
}
