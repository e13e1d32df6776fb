//! Synthetic rule sets and keys for benchmarks, shared by `benches/` and the
//! `nicflow bench classifier` report so both measure the same thing.
//!
//! Rules are IPv4 5-tuple ACL entries over a 20-word (160-byte) key. The
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
pub const WORDS: usize = 20;
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
    let mut c = Classifier::new();
    for (i, (k, m, p)) in rules.iter().enumerate() {
        c.insert(k, m, *p, i);
    }
    c
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
