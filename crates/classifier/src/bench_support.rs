//! Synthetic rule sets and keys for benchmarks, shared by `benches/` and the
//! `nicflow bench classifier` report so both measure the same thing.
//!
//! Rules are IPv4 5-tuple ACL entries over a 32-word (256-byte) key. The
//! fields sit where `nicflow-flow`'s `FlowKey` puts them on a little-endian
//! host, so the masks touch the same words as real OpenFlow matches would:
//!
//! | field      | word               | bits   | rule mask                    |
//! |------------|--------------------|--------|------------------------------|
//! | `dl_type`  | [`DL_TYPE_WORD`]  = 9  | 48..64 | exact (0x0800)           |
//! | `tp_src`   | [`TP_SRC_WORD`]   = 12 | 48..64 | exact or wildcard        |
//! | `nw_src`   | [`NW_ADDR_WORD`]  = 13 | 0..32  | prefix /8, /16, /24, /32 |
//! | `nw_dst`   | [`NW_ADDR_WORD`]  = 13 | 32..64 | prefix /8, /16, /24, /32 |
//! | `tp_dst`   | [`TP_DST_WORD`]   = 18 | 32..48 | exact or wildcard        |
//! | `nw_proto` | [`NW_PROTO_WORD`] = 19 | 0..8   | exact (6 or 17)          |
//!
//! Every other word is zero in keys and masks. That gives at most
//! 4 * 4 * 2 * 2 = 64 distinct masks (subtables). Priorities are uniform in
//! 1..=65535, the worst case for the priority early exit.
//!
//! Deterministic for a given seed (a private SplitMix64, independent of any
//! `rand` version).

use std::collections::HashSet;

use crate::{Classifier, LinearClassifier};

/// Key width of the benchmark rules, same as `FlowKey`.
pub const WORDS: usize = 39;
pub const DL_TYPE_WORD: usize = 9;
pub const DL_TYPE_SHIFT: u32 = 48;
pub const TP_SRC_WORD: usize = 12;
pub const TP_SRC_SHIFT: u32 = 48;
/// `nw_src` in bits 0..32, `nw_dst` in bits 32..64.
pub const NW_ADDR_WORD: usize = 13;
pub const TP_DST_WORD: usize = 18;
pub const TP_DST_SHIFT: u32 = 32;
pub const NW_PROTO_WORD: usize = 19;

/// Protocol used by [`gen_keys_missing`]; no generated rule uses it.
pub const MISS_PROTO: u64 = 132; // SCTP

/// `(key, mask, priority)`.
pub type BenchRule = ([u64; WORDS], [u64; WORDS], u32);

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn prefix_mask(len: u32) -> u64 {
    if len == 0 {
        0
    } else {
        u64::from(u32::MAX << (32 - len))
    }
}

/// A random IPv4 5-tuple key with protocol `proto`.
fn random_key(rng: &mut SplitMix64, proto: u64) -> [u64; WORDS] {
    let mut k = [0u64; WORDS];
    k[DL_TYPE_WORD] = 0x0800 << DL_TYPE_SHIFT;
    k[TP_SRC_WORD] = rng.below(1 << 16) << TP_SRC_SHIFT;
    k[NW_ADDR_WORD] = rng.next();
    k[TP_DST_WORD] = rng.below(1 << 16) << TP_DST_SHIFT;
    k[NW_PROTO_WORD] = proto;
    k
}

/// `n` distinct rules (no two share key and mask, so inserting them all
/// yields exactly `n` rules).
pub fn gen_5tuple_rules(n: usize, seed: u64) -> Vec<BenchRule> {
    const PREFIXES: [u32; 4] = [8, 16, 24, 32];
    let mut rng = SplitMix64(seed);
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let proto = if rng.below(2) == 0 { 6 } else { 17 };
        let key = random_key(&mut rng, proto);
        let mut mask = [0u64; WORDS];
        mask[DL_TYPE_WORD] = 0xffff << DL_TYPE_SHIFT;
        mask[NW_PROTO_WORD] = 0xff;
        let src = prefix_mask(PREFIXES[rng.below(4) as usize]);
        let dst = prefix_mask(PREFIXES[rng.below(4) as usize]);
        mask[NW_ADDR_WORD] = src | (dst << 32);
        if rng.below(2) == 0 {
            mask[TP_SRC_WORD] = 0xffff << TP_SRC_SHIFT;
        }
        if rng.below(2) == 0 {
            mask[TP_DST_WORD] = 0xffff << TP_DST_SHIFT;
        }
        let key = crate::apply_mask(&key, &mask);
        let priority = 1 + rng.below(65535) as u32;
        if seen.insert((key, mask)) {
            out.push((key, mask, priority));
        }
    }
    out
}

/// `n` keys, each matching a randomly chosen rule of `rules` (it may match
/// a higher-priority rule too). Bits outside that rule's mask are random.
pub fn gen_keys_hitting(rules: &[BenchRule], n: usize, seed: u64) -> Vec<[u64; WORDS]> {
    assert!(!rules.is_empty() || n == 0, "cannot hit an empty rule set");
    let mut rng = SplitMix64(seed ^ 0x005e_ed0f_4175);
    (0..n)
        .map(|_| {
            let (key, mask, _) = &rules[rng.below(rules.len() as u64) as usize];
            let noise = random_key(&mut rng, 6);
            std::array::from_fn(|i| key[i] | (noise[i] & !mask[i]))
        })
        .collect()
}

/// `n` IPv4 keys that match no rule of [`gen_5tuple_rules`]: they carry
/// protocol [`MISS_PROTO`], and every rule matches the protocol exactly.
/// Such a lookup probes every subtable.
pub fn gen_keys_missing(n: usize, seed: u64) -> Vec<[u64; WORDS]> {
    let mut rng = SplitMix64(seed ^ 0x0dd_ba11);
    (0..n).map(|_| random_key(&mut rng, MISS_PROTO)).collect()
}

/// A classifier holding `rules`; rule `i` has value `i`.
pub fn build_classifier(rules: &[BenchRule]) -> Classifier<WORDS, usize> {
    fill(Classifier::new(), rules)
}

/// A TupleMerge classifier (relaxation [`relax_flowkey_5tuple`], collision
/// limit `limit`) holding `rules`; rule `i` has value `i`.
pub fn build_classifier_merge(rules: &[BenchRule], limit: usize) -> Classifier<WORDS, usize> {
    fill(
        Classifier::with_relax(relax_flowkey_5tuple).with_collision_limit(limit),
        rules,
    )
}

fn fill(mut c: Classifier<WORDS, usize>, rules: &[BenchRule]) -> Classifier<WORDS, usize> {
    for (i, (k, m, p)) in rules.iter().enumerate() {
        c.insert(k, m, *p, i);
    }
    c
}

// Byte offsets of the relaxed fields in `nicflow-flow`'s `FlowKey`
// (`#[repr(C)]`, 37 words; checked against the real struct by a test).
const TP_SRC_OFFSET: usize = 102; // word 12, bytes 6..8
const NW_SRC_OFFSET: usize = 104; // word 13, bytes 0..4
const NW_DST_OFFSET: usize = 108; // word 13, bytes 4..8
const IPV6_SRC_OFFSET: usize = 112; // words 14-15
const IPV6_DST_OFFSET: usize = 128; // words 16-17
const TP_DST_OFFSET: usize = 148; // word 18, bytes 4..6

/// IPv4 prefix lengths a table mask keeps, longest first: a rule's prefix
/// is cut to the longest of these it contains. Measured against {16, 8}:
/// equal on the uniform benchmark rules, 25-40% faster lookups at 20k-100k
/// rules when all addresses share a /8 or /16 (as real ACLs do).
const IPV4_TABLE_PREFIXES: [u32; 3] = [24, 16, 8];
/// Same for IPv6, in bytes (/64, /32).
const IPV6_TABLE_PREFIX_BYTES: [usize; 2] = [8, 4];

/// TupleMerge relaxation for `FlowKey` masks (`Classifier::with_relax`).
///
/// Returns a subset of `mask` (it only ever removes bits, so it is valid for
/// any mask, prefix or not) in which:
///
/// * `nw_src` and `nw_dst` (IPv4, also ARP SPA/TPA) are cut to the longest
///   of /24, /16, /8, /0 that the field's mask contains;
/// * `ipv6_src` and `ipv6_dst` are cut to the longest of /64, /32, /0;
/// * `tp_src` and `tp_dst` (also ICMP type/code) are wildcarded;
/// * every other bit is kept: rules differing there never share a table.
///
/// So the relaxed masks of an IPv4 5-tuple ACL take at most 16 shapes
/// however many masks the ACL has, and TupleMerge shares tables further
/// (3 tables for 100,000 benchmark rules); the bits left out are compared
/// in the bucket chains, whose length the collision limit bounds. The cuts
/// were chosen by measurement (see `IPV4_TABLE_PREFIXES`).
///
/// Fields are addressed by their byte offset in `FlowKey`, with
/// native-endian words, so it is correct on any host.
pub fn relax_flowkey_5tuple(mask: &[u64; WORDS]) -> [u64; WORDS] {
    let mut b = [0u8; WORDS * 8];
    for (chunk, w) in b.chunks_exact_mut(8).zip(mask) {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    for off in [NW_SRC_OFFSET, NW_DST_OFFSET] {
        let field: &mut [u8; 4] = (&mut b[off..off + 4]).try_into().expect("4 bytes");
        let m = u32::from_ne_bytes(*field);
        let cut = IPV4_TABLE_PREFIXES
            .iter()
            .map(|&len| prefix_mask(len) as u32)
            .find(|&p| m & p == p)
            .unwrap_or(0);
        *field = cut.to_ne_bytes();
    }
    for off in [IPV6_SRC_OFFSET, IPV6_DST_OFFSET] {
        let field = &mut b[off..off + 16];
        let keep = IPV6_TABLE_PREFIX_BYTES
            .iter()
            .copied()
            .find(|&n| field[..n].iter().all(|&x| x == 0xff))
            .unwrap_or(0);
        field[keep..].fill(0);
    }
    b[TP_SRC_OFFSET..TP_SRC_OFFSET + 2].fill(0);
    b[TP_DST_OFFSET..TP_DST_OFFSET + 2].fill(0);
    std::array::from_fn(|i| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes")))
}

/// Cut of an IPv4 prefix length in [`relax_flowkey_tm`], as the TupleMerge
/// reference's `Relax` does it: /32 to /28, /25-/31 minus 3, /17-/24 minus 2,
/// /9-/16 minus 1, /0-/8 kept.
fn tm_cut(len: u32) -> u32 {
    match len {
        32 => 28,
        25..=31 => len - 3,
        17..=24 => len - 2,
        9..=16 => len - 1,
        _ => len,
    }
}

/// TupleMerge relaxation for `FlowKey` masks modelled on the TupleMerge
/// authors' reference (`TupleMergeOnline.cpp`, `Relax`):
///
/// * IPv4 `nw_src`/`nw_dst` (the prefix part of each field's mask): when one
///   prefix is more than 4 bits longer than the other, the shorter address
///   and its transport port are left out of the table mask altogether;
///   the remaining prefixes are shortened a little (/32 to /28, /25-/31 by
///   3, /17-/24 by 2, /9-/16 by 1);
/// * `tp_src`/`tp_dst` (also ICMP type/code) are kept when matched exactly,
///   wildcarded otherwise (a port range expanded into prefixes is compared
///   in the bucket chain, not hashed);
/// * IPv6 addresses as in [`relax_flowkey_5tuple`]; every other bit kept.
///
/// Returns a subset of `mask`, so it is valid for any mask.
pub fn relax_flowkey_tm(mask: &[u64; WORDS]) -> [u64; WORDS] {
    let mut b = [0u8; WORDS * 8];
    for (chunk, w) in b.chunks_exact_mut(8).zip(mask) {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    let field32 = |b: &[u8], off: usize| u32::from_ne_bytes(b[off..off + 4].try_into().expect("4"));
    let field16 = |b: &[u8], off: usize| u16::from_ne_bytes(b[off..off + 2].try_into().expect("2"));
    let src_len = field32(&b, NW_SRC_OFFSET).leading_ones();
    let dst_len = field32(&b, NW_DST_OFFSET).leading_ones();
    let (mut src_cut, mut dst_cut) = (tm_cut(src_len), tm_cut(dst_len));
    let (mut keep_sport, mut keep_dport) = (
        field16(&b, TP_SRC_OFFSET) == u16::MAX,
        field16(&b, TP_DST_OFFSET) == u16::MAX,
    );
    if dst_len > src_len + 4 {
        src_cut = 0;
        keep_sport = false;
    } else if src_len > dst_len + 4 {
        dst_cut = 0;
        keep_dport = false;
    }
    for (off, cut) in [(NW_SRC_OFFSET, src_cut), (NW_DST_OFFSET, dst_cut)] {
        b[off..off + 4].copy_from_slice(&(prefix_mask(cut) as u32).to_ne_bytes());
    }
    for off in [IPV6_SRC_OFFSET, IPV6_DST_OFFSET] {
        let field = &mut b[off..off + 16];
        let keep = IPV6_TABLE_PREFIX_BYTES
            .iter()
            .copied()
            .find(|&n| field[..n].iter().all(|&x| x == 0xff))
            .unwrap_or(0);
        field[keep..].fill(0);
    }
    if !keep_sport {
        b[TP_SRC_OFFSET..TP_SRC_OFFSET + 2].fill(0);
    }
    if !keep_dport {
        b[TP_DST_OFFSET..TP_DST_OFFSET + 2].fill(0);
    }
    let out: [u64; WORDS] = std::array::from_fn(|i| {
        u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
    });
    // Prefix lengths computed from the prefix part only: intersect, so
    // that a non-prefix mask still yields a subset.
    std::array::from_fn(|i| out[i] & mask[i])
}

/// The linear reference holding `rules`; rule `i` has value `i`.
pub fn build_linear(rules: &[BenchRule]) -> LinearClassifier<WORDS, usize> {
    let mut c = LinearClassifier::new();
    for (i, (k, m, p)) in rules.iter().enumerate() {
        c.insert(k, m, *p, i);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_mode_on_benchmark_rules() {
        let rules = gen_5tuple_rules(3000, 7);
        let tss = build_classifier(&rules);
        let merge = build_classifier_merge(&rules, 4);
        assert_eq!(merge.len(), 3000);
        assert!(
            merge.n_subtables() < 12,
            "{} tables for 3000 rules",
            merge.n_subtables()
        );
        merge.check_invariants();
        assert!(merge.max_chain_len() <= 4);
        let prio =
            |c: &Classifier<WORDS, usize>, k: &[u64; WORDS]| c.lookup(k).map(|r| rules[*r.1].2);
        for k in gen_keys_hitting(&rules, 500, 8) {
            assert!(merge.lookup(&k).is_some());
            // Priorities may tie in these rules: compare priorities.
            assert_eq!(prio(&tss, &k), prio(&merge, &k));
            let mut wc = [0; WORDS];
            let r = merge.lookup_wc(&k, &mut wc).map(|r| r.0);
            // Flip every bit outside wc: same answer.
            let k2: [u64; WORDS] = std::array::from_fn(|i| k[i] ^ !wc[i]);
            assert_eq!(merge.lookup(&k2).map(|r| r.0), r);
        }
        for k in gen_keys_missing(300, 9) {
            assert_eq!(merge.lookup(&k), None);
        }
    }

    #[test]
    fn relaxation_only_removes_bits() {
        let mut rng = SplitMix64(5);
        for _ in 0..2000 {
            let mask: [u64; WORDS] = std::array::from_fn(|_| match rng.below(4) {
                0 => 0,
                1 => !0,
                _ => rng.next(),
            });
            let r = relax_flowkey_5tuple(&mask);
            assert!(crate::mask_is_subset(&r, &mask));
            assert_eq!(relax_flowkey_5tuple(&r), r, "not idempotent");
        }
    }

    #[test]
    fn tm_relaxation_only_removes_bits() {
        let mut rng = SplitMix64(6);
        for _ in 0..2000 {
            let mask: [u64; WORDS] = std::array::from_fn(|_| match rng.below(4) {
                0 => 0,
                1 => !0,
                _ => rng.next(),
            });
            assert!(crate::mask_is_subset(&relax_flowkey_tm(&mask), &mask));
        }
        // /32 -> /28 and /30 -> /27; exact ports kept, a port prefix dropped.
        let mut m = [0u64; WORDS];
        m[NW_ADDR_WORD] = 0xffff_fffc_ffff_ffff; // src /32, dst /30
        m[TP_SRC_WORD] = 0xffff << TP_SRC_SHIFT;
        m[TP_DST_WORD] = 0xfc00 << TP_DST_SHIFT;
        let r = relax_flowkey_tm(&m);
        assert_eq!(r[NW_ADDR_WORD], 0xffff_ffe0_ffff_fff0);
        assert_eq!(r[TP_SRC_WORD], m[TP_SRC_WORD]);
        assert_eq!(r[TP_DST_WORD], 0);
        // src /32 against dst /8: the destination and its port drop out.
        m[NW_ADDR_WORD] = 0xff00_0000_ffff_ffff;
        m[TP_DST_WORD] = 0xffff << TP_DST_SHIFT;
        let r = relax_flowkey_tm(&m);
        assert_eq!(r[NW_ADDR_WORD], 0x0000_0000_ffff_fff0);
        assert_eq!(r[TP_DST_WORD], 0);
    }

    /// The field positions documented above and used by the relaxation are
    /// those of the real `FlowKey`.
    #[test]
    fn flowkey_layout() {
        use nicflow_flow::{FlowKey, FlowMask, FLOW_WORDS};
        assert_eq!(FLOW_WORDS, WORDS);
        let k = FlowKey {
            dl_type: 0x0800,
            tp_src: 0x1234,
            nw_src: 0x0a01_0203,
            nw_dst: 0xc0a8_0001,
            tp_dst: 0x0050,
            nw_proto: 6,
            ..FlowKey::default()
        };
        let w = k.words();
        assert_eq!(w[DL_TYPE_WORD], 0x0800 << DL_TYPE_SHIFT);
        assert_eq!(w[TP_SRC_WORD], 0x1234 << TP_SRC_SHIFT);
        assert_eq!(w[NW_ADDR_WORD], 0xc0a8_0001_0a01_0203);
        assert_eq!(w[TP_DST_WORD], 0x0050 << TP_DST_SHIFT);
        assert_eq!(w[NW_PROTO_WORD], 6);

        // A mask touching every relaxed field and some kept ones.
        let mut m = FlowMask::catchall();
        m.0.in_port = u32::MAX;
        m.0.dl_type = 0xffff;
        m.0.dl_dst = [0xff; 6];
        m.0.nw_proto = 0xff;
        m.0.nw_src = 0xffff_ff00; // /24
        m.0.nw_dst = 0xfff0_0000; // /12
        m.0.tp_src = 0xffff;
        m.0.tp_dst = 0xff00;
        m.0.tcp_flags = 0x0fff;
        m.0.ipv6_label = 0xf_ffff;
        m.0.arp_tha = [0xff; 6];
        m.0.ipv6_src = [0xff; 16]; // /128
        m.0.ipv6_dst[..6].fill(0xff); // /48
        let r = FlowKey::from_words(&relax_flowkey_5tuple(m.words()));
        assert_eq!(r.nw_src, 0xffff_ff00);
        assert_eq!(r.nw_dst, 0xff00_0000);
        assert_eq!((r.tp_src, r.tp_dst), (0, 0));
        let mut v6_64 = [0u8; 16];
        v6_64[..8].fill(0xff);
        let mut v6_32 = [0u8; 16];
        v6_32[..4].fill(0xff);
        assert_eq!(r.ipv6_src, v6_64);
        assert_eq!(r.ipv6_dst, v6_32);
        // Everything else untouched.
        let mut expect = m.0;
        expect.nw_dst = 0xff00_0000;
        expect.tp_src = 0;
        expect.tp_dst = 0;
        expect.ipv6_src = v6_64;
        expect.ipv6_dst = v6_32;
        assert_eq!(r, expect);
        // The benchmark masks: prefixes cut, ports dropped.
        for (_, mask, _) in gen_5tuple_rules(200, 3) {
            let r = relax_flowkey_5tuple(&mask);
            assert_eq!((r[TP_SRC_WORD], r[TP_DST_WORD]), (0, 0));
            assert_eq!(r[DL_TYPE_WORD], mask[DL_TYPE_WORD]);
            assert_eq!(r[NW_PROTO_WORD], mask[NW_PROTO_WORD]);
            for half in [r[NW_ADDR_WORD] as u32, (r[NW_ADDR_WORD] >> 32) as u32] {
                assert!([8, 16, 24].contains(&half.count_ones()));
                assert_eq!(half.leading_ones(), half.count_ones());
            }
        }
    }

    #[test]
    fn generators() {
        let rules = gen_5tuple_rules(2000, 1);
        assert_eq!(rules.len(), 2000);
        assert_eq!(rules, gen_5tuple_rules(2000, 1));
        let c = build_classifier(&rules);
        let l = build_linear(&rules);
        assert_eq!(c.len(), 2000);
        assert!(c.n_subtables() <= 64 && c.n_subtables() > 40);
        for k in gen_keys_hitting(&rules, 300, 2) {
            let hit = c.lookup(&k).map(|r| *r.1);
            assert!(hit.is_some());
            assert_eq!(hit, l.lookup(&k).map(|r| *r.1));
        }
        for k in gen_keys_missing(300, 3) {
            assert_eq!(c.lookup(&k), None);
        }
    }
}
