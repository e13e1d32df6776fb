//! Property tests: [`Classifier`] against the [`LinearClassifier`] oracle,
//! and the wildcard-tracking guarantee. Lives inside the crate so it can also
//! check internal invariants after every mutation.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::{select, Index};

use crate::{masked_eq, Classifier, LinearClassifier, RuleId};

const W: usize = 4;
type Key = [u64; W];

/// Masks shared by many rules, so subtables hold several rules, chains form
/// and early exits happen.
const COMMON_MASKS: [Key; 8] = [
    [!0, 0, 0, 0],
    [!0, !0, 0, 0],
    [0xff00, 0, 0, 0],
    [0, 0, !0, 0],
    [!0, 0, 0xffff_0000_0000_0000, 0],
    [0, 0, 0, 0],
    [!0; 4],
    [0xf, 0xf0, 0, 1],
];

/// Word values from a small alphabet most of the time, so that random keys
/// collide with rules under many masks.
fn word() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..4,
        1 => (0u64..4).prop_map(|x| x * 0x0101_0101_0101_0101),
        1 => Just(!0u64),
        1 => any::<u64>(),
    ]
}

fn key() -> impl Strategy<Value = Key> {
    prop::array::uniform4(word())
}

fn mask() -> impl Strategy<Value = Key> {
    prop_oneof![
        3 => select(&COMMON_MASKS[..]),
        1 => prop::array::uniform4(any::<u64>()),
        1 => prop::array::uniform4(prop_oneof![Just(0u64), Just(!0u64), any::<u64>()]),
    ]
}

/// A lookup key: either arbitrary, or derived from a rule (that rule's bits
/// under its mask, anything elsewhere) so that lookups hit.
#[derive(Clone, Debug)]
enum Probe {
    Random(Key),
    Derived(Index, Key),
}

fn probe() -> impl Strategy<Value = Probe> {
    prop_oneof![
        key().prop_map(Probe::Random),
        (any::<Index>(), prop::array::uniform4(word())).prop_map(|(i, k)| Probe::Derived(i, k)),
    ]
}

fn resolve(p: &Probe, rules: &[(Key, Key, u32)]) -> Key {
    match p {
        Probe::Random(k) => *k,
        Probe::Derived(_, k) if rules.is_empty() => *k,
        Probe::Derived(i, noise) => {
            let (k, m, _) = &rules[i.index(rules.len())];
            std::array::from_fn(|w| (k[w] & m[w]) | (noise[w] & !m[w]))
        }
    }
}

/// Rules with pairwise distinct priorities (random order).
fn distinct_rules() -> impl Strategy<Value = Vec<(Key, Key, u32)>> {
    prop::collection::vec((key(), mask(), any::<u16>()), 0..48).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (k, m, p))| (k, m, (u32::from(p) << 6) | i as u32))
            .collect()
    })
}

/// Rules with priorities in 0..4: ties, replacements and same-key chains.
fn tied_rules() -> impl Strategy<Value = Vec<(Key, Key, u32)>> {
    prop::collection::vec((key(), mask(), 0u32..4), 0..48)
}

/// Relaxations for TupleMerge mode: they drop whole words of the mask
/// (fixed sets, or a set picked by a hash of the mask, so different masks
/// relax differently), or bits within words.
const RELAXES: [fn(&Key) -> Key; 9] = [
    relax_identity,
    relax_everything,
    relax_drop::<0b0001>,
    relax_drop::<0b0110>,
    relax_drop::<0b1010>,
    relax_drop::<0b1101>,
    relax_hashed,
    relax_hashed_inverse,
    relax_low_halves,
];

fn relax_identity(m: &Key) -> Key {
    *m
}

fn relax_everything(_: &Key) -> Key {
    [0; W]
}

fn relax_drop<const DROP: u8>(m: &Key) -> Key {
    std::array::from_fn(|w| if DROP >> w & 1 == 1 { 0 } else { m[w] })
}

fn mask_hash(m: &Key) -> u64 {
    m.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, &x| {
        (h ^ x).wrapping_mul(0x0100_0000_01b3).rotate_left(29)
    })
}

fn relax_hashed(m: &Key) -> Key {
    let h = mask_hash(m);
    std::array::from_fn(|w| if h >> (w + 7) & 1 == 1 { 0 } else { m[w] })
}

/// Returns bits outside the mask too: the classifier must ignore them.
fn relax_hashed_inverse(m: &Key) -> Key {
    let h = mask_hash(m);
    std::array::from_fn(|w| if h >> (w + 7) & 1 == 1 { !0 } else { 0 })
}

fn relax_low_halves(m: &Key) -> Key {
    std::array::from_fn(|w| m[w] & 0xffff_ffff_0000_0000)
}

/// Which classifier a test case runs against.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Tss,
    /// TupleMerge: index into [`RELAXES`], collision limit.
    Merge(usize, usize),
}

fn merge_mode() -> impl Strategy<Value = Mode> {
    (
        0..RELAXES.len(),
        prop_oneof![4 => 1usize..=4, 1 => Just(crate::DEFAULT_COLLISION_LIMIT)],
    )
        .prop_map(|(r, c)| Mode::Merge(r, c))
}

/// Every property runs against both modes.
fn modes(merge: Mode) -> [Mode; 2] {
    [Mode::Tss, merge]
}

struct Pair {
    mode: Mode,
    cls: Classifier<W, u32>,
    lin: LinearClassifier<W, u32>,
    ids: Vec<(RuleId, RuleId)>,
    /// Oracle id -> classifier id.
    to_cls: HashMap<RuleId, RuleId>,
}

impl Pair {
    fn new(mode: Mode) -> Pair {
        let cls = match mode {
            Mode::Tss => Classifier::new(),
            Mode::Merge(relax, limit) => {
                Classifier::with_relax(RELAXES[relax]).with_collision_limit(limit)
            }
        };
        Pair {
            mode,
            cls,
            lin: LinearClassifier::new(),
            ids: Vec::new(),
            to_cls: HashMap::new(),
        }
    }

    fn build(mode: Mode, rules: &[(Key, Key, u32)]) -> Pair {
        let mut p = Pair::new(mode);
        for (i, (k, m, prio)) in rules.iter().enumerate() {
            p.insert(k, m, *prio, i as u32);
        }
        p.check();
        p
    }

    fn insert(&mut self, k: &Key, m: &Key, prio: u32, v: u32) -> (RuleId, RuleId) {
        let (a, ra) = self.cls.insert(k, m, prio, v);
        let (b, rb) = self.lin.insert(k, m, prio, v);
        assert_eq!(ra, rb, "insert replaced differently");
        self.ids.push((a, b));
        self.to_cls.insert(b, a);
        (a, b)
    }

    fn check(&self) {
        self.cls.check_invariants();
        assert_eq!(self.cls.len(), self.lin.len());
        match self.mode {
            Mode::Tss => {
                let mut masks: Vec<Key> = self.lin.iter().map(|r| *r.mask).collect();
                masks.sort();
                masks.dedup();
                assert_eq!(self.cls.n_subtables(), masks.len());
                assert_eq!(self.cls.collision_limit(), None);
            }
            Mode::Merge(_, limit) => {
                assert_eq!(self.cls.collision_limit(), Some(limit));
                assert!(self.cls.max_chain_len() <= limit);
            }
        }
        for r in self.cls.iter() {
            assert_eq!(self.cls.find_exact(r.key, r.mask, r.priority), Some(r.id));
        }
        for r in self.lin.iter() {
            let c = self.cls.rule(self.to_cls[&r.id]).expect("rule lost");
            assert_eq!(
                (c.key, c.mask, c.priority, c.value),
                (r.key, r.mask, r.priority, r.value)
            );
        }
    }

    /// The oracle's answer. Priorities are brute-forced independently of
    /// the classifier; among equal-priority matches, a TSS classifier must
    /// agree with [`LinearClassifier::lookup`] and a TupleMerge classifier
    /// with its own documented tie rank.
    fn expected(&self, k: &Key) -> Option<u32> {
        let rank = |id| self.cls.tie_rank(self.to_cls[&id]).expect("rule lost");
        let ranked = self.lin.lookup_ranked(k, rank).map(|r| (r.0, *r.1));
        let plain = self.lin.lookup(k).map(|r| (r.0, *r.1));
        let prio = |r: Option<(RuleId, u32)>| {
            r.map(|(id, _)| self.lin.iter().find(|x| x.id == id).unwrap().priority)
        };
        assert_eq!(prio(ranked), prio(plain));
        if let Mode::Tss = self.mode {
            assert_eq!(ranked, plain, "tie rank does not model TSS");
        }
        ranked.map(|r| r.1)
    }

    fn same(&self, k: &Key) -> Option<u32> {
        let a = self.cls.lookup(k).map(|r| *r.1);
        let b = self.expected(k);
        assert_eq!(a, b, "lookup mismatch for {k:x?} ({:?})", self.mode);
        a
    }

    fn remove_some(&mut self, which: &[bool]) {
        for (&(a, b), &rm) in self.ids.iter().zip(which) {
            if rm {
                assert_eq!(self.cls.remove(a), self.lin.remove(b));
                assert_eq!(self.cls.remove(a), None);
            }
        }
        self.check();
    }
}

/// The wildcard-tracking guarantee for one key, using the oracle.
fn check_wc(p: &Pair, k: &Key, noises: &[Key]) {
    let mut wc = [0u64; W];
    let r = p.cls.lookup_wc(k, &mut wc).map(|r| *r.1);
    assert_eq!(r, p.expected(k));
    assert_eq!(p.cls.lookup(k).map(|r| *r.1), r);
    for noise in noises {
        let k2: Key = std::array::from_fn(|w| (k[w] & wc[w]) | (noise[w] & !wc[w]));
        assert!(masked_eq(k, &k2, &wc));
        assert_eq!(
            p.expected(&k2),
            r,
            "key {k2:x?} agrees with {k:x?} on wc {wc:x?} but matches differently ({:?})",
            p.mode
        );
        assert_eq!(p.cls.lookup(&k2).map(|r| *r.1), r);
    }
    // Starting from a non-zero wc only adds bits.
    let mut wc2 = [0x8000_0000_0000_0001u64; W];
    p.cls.lookup_wc(k, &mut wc2);
    for w in 0..W {
        assert_eq!(wc2[w], wc[w] | 0x8000_0000_0000_0001);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Key, Key, u32),
    Remove(Index),
    Lookup(Probe),
    RetainOdd,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), mask(), 0u32..6).prop_map(|(k, m, p)| Op::Insert(k, m, p)),
        3 => any::<Index>().prop_map(Op::Remove),
        4 => probe().prop_map(Op::Lookup),
        1 => Just(Op::RetainOdd),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn matches_linear_distinct_priorities(
        rules in distinct_rules(),
        probes in prop::collection::vec(probe(), 1..32),
        removals in prop::collection::vec(any::<bool>(), 48),
        merge in merge_mode(),
    ) {
        for mode in modes(merge) {
            let mut p = Pair::build(mode, &rules);
            let keys: Vec<Key> = probes.iter().map(|pr| resolve(pr, &rules)).collect();
            for k in &keys {
                // No ties: the answer is fully determined by the rule set.
                prop_assert_eq!(p.same(k), p.lin.lookup(k).map(|r| *r.1));
            }
            p.remove_some(&removals);
            for k in &keys {
                prop_assert_eq!(p.same(k), p.lin.lookup(k).map(|r| *r.1));
            }
        }
    }

    #[test]
    fn matches_linear_with_ties(
        rules in tied_rules(),
        probes in prop::collection::vec(probe(), 1..32),
        removals in prop::collection::vec(any::<bool>(), 48),
        merge in merge_mode(),
    ) {
        for mode in modes(merge) {
            let mut p = Pair::build(mode, &rules);
            let keys: Vec<Key> = probes.iter().map(|pr| resolve(pr, &rules)).collect();
            for k in &keys {
                p.same(k);
            }
            p.remove_some(&removals);
            for k in &keys {
                p.same(k);
            }
        }
    }

    #[test]
    fn wildcards_are_sound(
        rules in prop_oneof![distinct_rules(), tied_rules()],
        probes in prop::collection::vec(probe(), 1..16),
        noises in prop::collection::vec(prop_oneof![
            prop::array::uniform4(any::<u64>()),
            key(),
        ], 1..12),
        removals in prop::collection::vec(any::<bool>(), 48),
        merge in merge_mode(),
    ) {
        for mode in modes(merge) {
            let mut p = Pair::build(mode, &rules);
            let keys: Vec<Key> = probes.iter().map(|pr| resolve(pr, &rules)).collect();
            for k in &keys {
                check_wc(&p, k, &noises);
            }
            p.remove_some(&removals);
            for k in &keys {
                check_wc(&p, k, &noises);
            }
        }
    }

    #[test]
    fn random_operation_sequences(
        ops in prop::collection::vec(op(), 1..80),
        merge in merge_mode(),
    ) {
        for mode in modes(merge) {
            let mut p = Pair::new(mode);
            let mut inserted: Vec<(Key, Key, u32)> = Vec::new();
            let mut next_val = 0u32;
            for op in &ops {
                match op {
                    Op::Insert(k, m, prio) => {
                        let (a, _) = p.insert(k, m, *prio, next_val);
                        prop_assert_eq!(p.cls.get(a), Some(&next_val));
                        prop_assert_eq!(p.cls.rule(a).map(|r| (*r.key, *r.mask, r.priority)),
                            Some((crate::apply_mask(k, m), *m, *prio)));
                        inserted.push((*k, *m, *prio));
                        next_val += 1;
                    }
                    Op::Remove(i) if !p.ids.is_empty() => {
                        let (a, b) = p.ids[i.index(p.ids.len())];
                        prop_assert_eq!(p.cls.remove(a), p.lin.remove(b));
                    }
                    Op::Remove(_) => {}
                    Op::Lookup(pr) => {
                        p.same(&resolve(pr, &inserted));
                    }
                    Op::RetainOdd => {
                        p.cls.retain(|_, _, _, _, v| *v % 2 == 1);
                        p.lin.retain(|_, _, _, _, v| *v % 2 == 1);
                    }
                }
                p.check();
            }
            let mut a: Vec<u32> = p.cls.iter().map(|r| *r.value).collect();
            let mut b: Vec<u32> = p.lin.iter().map(|r| *r.value).collect();
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
        }
    }
}

/// Every matching rule at or above `min`, by value, sorted; checked against
/// the oracle, and for every key that agrees with `k` on the bits the call
/// reported in `wc`.
fn check_all_matches(p: &Pair, k: &Key, min: u32, noises: &[Key]) {
    let oracle = |k: &Key| {
        let mut v: Vec<u32> = p
            .lin
            .iter()
            .filter(|r| r.priority >= min && masked_eq(k, r.key, r.mask))
            .map(|r| *r.value)
            .collect();
        v.sort_unstable();
        v
    };
    let mut wc = [0u64; W];
    let mut got = Vec::new();
    p.cls.for_each_match_wc(k, &mut wc, min, |id, prio, v| {
        assert_eq!(p.cls.get(id), Some(v));
        assert!(prio >= min);
        got.push(*v);
    });
    got.sort_unstable();
    assert_eq!(got, oracle(k), "all matches of {k:x?} ({:?})", p.mode);
    for n in noises {
        let mut k2 = *k;
        for i in 0..W {
            k2[i] = (k[i] & wc[i]) | (n[i] & !wc[i]);
        }
        let mut wc2 = [0u64; W];
        let mut got2 = Vec::new();
        p.cls
            .for_each_match_wc(&k2, &mut wc2, min, |_, _, v| got2.push(*v));
        got2.sort_unstable();
        assert_eq!(got2, got, "{k2:x?} agrees with {k:x?} on {wc:x?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn all_matches_agree_with_linear_and_wildcards_are_sound(
        rules in prop_oneof![distinct_rules(), tied_rules()],
        probes in prop::collection::vec(probe(), 1..16),
        noises in prop::collection::vec(key(), 1..8),
        min in prop_oneof![Just(0u32), 0u32..64],
        merge in merge_mode(),
    ) {
        for mode in modes(merge) {
            let p = Pair::build(mode, &rules);
            for pr in &probes {
                check_all_matches(&p, &resolve(pr, &rules), min, &noises);
            }
        }
    }
}
