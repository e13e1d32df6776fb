//! Property tests: [`Classifier`] against the [`LinearClassifier`] oracle,
//! and the wildcard-tracking guarantee. Lives inside the crate so it can also
//! check internal invariants after every mutation.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::{select, Index};

use crate::{masked_eq, Classifier, FieldRange, LinearClassifier, RuleId};

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
                // Keys sharing a bucket hash cannot be split apart: with
                // 3-bit hashes a chain may stay over the limit (answers
                // are checked all the same).
                if !crate::classifier::TINY_BUCKET_HASH.with(std::cell::Cell::get) {
                    assert!(self.cls.max_chain_len() <= limit);
                }
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

/// Sets [`crate::classifier::TINY_BUCKET_HASH`] on this thread for as long
/// as it lives (and clears it on a failed assertion's unwind too).
struct TinyHash;

impl TinyHash {
    fn on() -> TinyHash {
        crate::classifier::TINY_BUCKET_HASH.with(|t| t.set(true));
        TinyHash
    }
}

impl Drop for TinyHash {
    fn drop(&mut self) {
        crate::classifier::TINY_BUCKET_HASH.with(|t| t.set(false));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Masked keys that share a bucket hash (a real 32-bit collision, made
    /// constant here with 3-bit hashes) share a chain: answers, wildcards
    /// and the invariants must not notice, in either mode.
    #[test]
    fn bucket_hash_collisions_change_no_answer(
        rules in prop_oneof![distinct_rules(), tied_rules()],
        probes in prop::collection::vec(probe(), 1..16),
        noises in prop::collection::vec(prop_oneof![
            prop::array::uniform4(any::<u64>()),
            key(),
        ], 1..8),
        removals in prop::collection::vec(any::<bool>(), 48),
        merge in merge_mode(),
    ) {
        let _tiny = TinyHash::on();
        for mode in modes(merge) {
            let mut p = Pair::build(mode, &rules);
            let keys: Vec<Key> = probes.iter().map(|pr| resolve(pr, &rules)).collect();
            for k in &keys {
                p.same(k);
                check_wc(&p, k, &noises);
            }
            p.remove_some(&removals);
            p.check();
            for k in &keys {
                p.same(k);
                check_wc(&p, k, &noises);
            }
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

// ---------------------------------------------------------------------------
// Port ranges (`insert_ranges`): against a brute-force scan, and the
// wildcard guarantee.
// ---------------------------------------------------------------------------

/// The two 16-bit range fields of the test keys: word 2's top quarter (where
/// a common mask also looks) and word 3's low quarter.
const RANGE_FIELDS: [(u8, u8); 2] = [(2, 48), (3, 0)];

/// Bounds from a small alphabet (prefix edges, neighbours of each other)
/// most of the time, so ranges overlap, nest and touch.
fn bound() -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => select(&[0u16, 1, 2, 3, 4, 7, 8, 0xff, 0x100, 0x3ff, 0x400, 0x7fff, 0x8000, 0xfffe, 0xffff][..]),
        1 => any::<u16>(),
    ]
}

#[derive(Clone, Debug)]
struct RangedRule {
    key: Key,
    mask: Key,
    ranges: Vec<FieldRange>,
}

fn ranged_rule() -> impl Strategy<Value = RangedRule> {
    (
        key(),
        mask(),
        prop::collection::vec((0..2usize, bound(), bound()), 0..=2),
    )
        .prop_map(|(key, mask, rs)| {
            let mut ranges: Vec<FieldRange> = Vec::new();
            for (f, a, b) in rs {
                let (word, shift) = RANGE_FIELDS[f];
                if ranges.iter().all(|r| r.word != word) {
                    ranges.push(FieldRange {
                        word,
                        shift,
                        lo: a.min(b),
                        hi: a.max(b),
                    });
                }
            }
            RangedRule { key, mask, ranges }
        })
}

impl RangedRule {
    /// The meaning of the rule, computed without the classifier: the key
    /// agrees with the rule's key under the mask *outside* the range fields,
    /// and each range field lies in its range.
    fn matches(&self, k: &Key) -> bool {
        let mut m = self.mask;
        for r in &self.ranges {
            m[r.word as usize] &= !(0xffffu64 << r.shift);
        }
        masked_eq(k, &self.key, &m) && self.ranges.iter().all(|r| r.contains(k))
    }
}

/// Keys near the rules' range bounds (and their bits elsewhere), so range
/// tests go both ways.
fn ranged_probe(rules: &[RangedRule], pick: &Index, edge: u8, noise: &Key) -> Key {
    if rules.is_empty() {
        return *noise;
    }
    let r = pick.get(rules);
    let mut k: Key = std::array::from_fn(|w| (r.key[w] & r.mask[w]) | (noise[w] & !r.mask[w]));
    for fr in &r.ranges {
        let v = match edge % 5 {
            0 => fr.lo.wrapping_sub(1),
            1 => fr.lo,
            2 => fr.hi,
            3 => fr.hi.wrapping_add(1),
            _ => noise[0] as u16,
        };
        let w = fr.word as usize;
        k[w] = (k[w] & !(0xffffu64 << fr.shift)) | (u64::from(v) << fr.shift);
    }
    k
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Distinct priorities (rule i has priority i + 1, so the answer is the
    /// matching rule of highest index): every lookup equals the brute-force
    /// scan, before and after removals, and every key agreeing with a looked
    /// up key on `lookup_wc`'s mask gets the same answer.
    #[test]
    fn ranges_match_brute_force_and_wildcards_are_sound(
        rules in prop::collection::vec(ranged_rule(), 0..40),
        probes in prop::collection::vec((any::<Index>(), 0u8..5, key()), 1..24),
        noises in prop::collection::vec(key(), 4),
        removals in prop::collection::vec(any::<bool>(), 40),
        merge in merge_mode(),
    ) {
        for mode in modes(merge) {
            let mut cls: Classifier<W, u32> = match mode {
                Mode::Tss => Classifier::new(),
                Mode::Merge(relax, limit) => {
                    Classifier::with_relax(RELAXES[relax]).with_collision_limit(limit)
                }
            };
            let mut live: Vec<Option<RuleId>> = Vec::new();
            for (i, r) in rules.iter().enumerate() {
                let (id, old) = cls.insert_ranges(&r.key, &r.mask, &r.ranges, i as u32 + 1, i as u32).unwrap();
                prop_assert!(old.is_none());
                live.push(Some(id));
            }
            cls.check_invariants();
            let keys: Vec<Key> = probes.iter().map(|(p, e, n)| ranged_probe(&rules, p, *e, n)).collect();
            for round in 0..2 {
                let expect = |k: &Key| {
                    (0..rules.len()).rev().find(|&i| live[i].is_some() && rules[i].matches(k)).map(|i| i as u32)
                };
                for k in &keys {
                    let mut wc = [0u64; W];
                    let got = cls.lookup_wc(k, &mut wc).map(|r| *r.1);
                    prop_assert_eq!(got, expect(k), "key {:x?} ({:?}, round {})", k, mode, round);
                    prop_assert_eq!(cls.lookup(k).map(|r| *r.1), got);
                    for noise in &noises {
                        let k2: Key = std::array::from_fn(|w| (k[w] & wc[w]) | (noise[w] & !wc[w]));
                        prop_assert_eq!(expect(&k2), got,
                            "{:x?} agrees with {:x?} on wc {:x?} but matches differently ({:?})", k2, k, wc, mode);
                    }
                    // Every range bound's neighbours too: the likeliest
                    // keys to cross a range edge inside the megaflow.
                    for r in rules.iter().flat_map(|r| &r.ranges) {
                        for v in [r.lo.wrapping_sub(1), r.lo, r.hi, r.hi.wrapping_add(1)] {
                            let w = r.word as usize;
                            let mut k2 = *k;
                            k2[w] = (k2[w] & !(0xffffu64 << r.shift)) | (u64::from(v) << r.shift);
                            if masked_eq(k, &k2, &wc) {
                                prop_assert_eq!(expect(&k2), got, "edge {:x?} in wc {:x?}", k2, wc);
                            }
                        }
                    }
                }
                for (i, rm) in removals.iter().enumerate().take(rules.len()) {
                    if *rm && round == 0 {
                        if let Some(id) = live[i].take() {
                            prop_assert_eq!(cls.remove(id), Some(i as u32));
                        }
                    }
                }
                cls.check_invariants();
            }
        }
    }
}

#[test]
fn ranges_replace_and_reject() {
    let mut c: Classifier<W, u32> = Classifier::with_relax(|_| [0; W]).with_collision_limit(1);
    let r = |lo, hi| FieldRange {
        word: 3,
        shift: 0,
        lo,
        hi,
    };
    let (a, _) = c
        .insert_ranges(&[0; W], &[0; W], &[r(10, 20)], 5, 1)
        .unwrap();
    // Same match and priority: replaced.
    let (b, old) = c
        .insert_ranges(&[0; W], &[0; W], &[r(10, 20)], 5, 2)
        .unwrap();
    assert_eq!(old, Some(1));
    assert!(!c.contains(a) && c.contains(b));
    assert_eq!(c.ranges(b), Some(&[r(10, 20)][..]));
    // Other ranges: other matches, however many (no table tells them apart).
    for i in 0..5u16 {
        c.insert_ranges(&[0; W], &[0; W], &[r(30 + i, 40 + i)], 4, 10 + u32::from(i))
            .unwrap();
    }
    c.check_invariants();
    assert_eq!(c.len(), 6);
    assert_eq!(c.lookup(&[0, 0, 0, 15]).map(|r| *r.1), Some(2));
    assert_eq!(c.lookup(&[0, 0, 0, 44]).map(|r| *r.1), Some(14));
    assert_eq!(c.lookup(&[0, 0, 0, 45]), None);
    // A prefix block is a mask: 0..=65535 is no condition at all.
    let (d, _) = c
        .insert_ranges(&[0; W], &[0; W], &[r(0, 0xffff)], 1, 99)
        .unwrap();
    assert_eq!(c.ranges(d), Some(&[][..]));
    assert_eq!(c.find_exact(&[0; W], &[0; W], 1), Some(d));
    // Refused, and nothing changed.
    let n = c.len();
    assert!(c.insert_ranges(&[0; W], &[0; W], &[r(5, 4)], 1, 0).is_err());
    assert!(c
        .insert_ranges(&[0; W], &[0; W], &[r(1, 4), r(2, 3)], 1, 0)
        .is_err());
    assert!(c
        .insert_ranges(&[0; W], &[0; W], &[FieldRange { word: 4, ..r(1, 2) }], 1, 0)
        .is_err());
    assert!(c
        .insert_ranges(&[0; W], &[0; W], &[r(1, 2); 3], 1, 0)
        .is_err());
    assert_eq!(c.len(), n);
}

#[test]
fn range_wildcards_are_the_decisive_prefix() {
    let mut c: Classifier<W, u32> = Classifier::with_relax(|_| [0; W]);
    let r = FieldRange {
        word: 3,
        shift: 0,
        lo: 1000,
        hi: 1999,
    };
    c.insert_ranges(&[0; W], &[0; W], &[r], 1, 1).unwrap();
    // 1024 lies in the aligned block 1024..=1535 (/7 of 16 bits).
    let mut wc = [0u64; W];
    assert!(c.lookup_wc(&[0, 0, 0, 1024], &mut wc).is_some());
    assert_eq!(wc[3], 0xfe00);
    // 3000 parts from 1999 at bit 4 (from the top): /5 decides "above".
    let mut wc = [0u64; W];
    assert!(c.lookup_wc(&[0, 0, 0, 3000], &mut wc).is_none());
    assert_eq!(wc[3], 0xf800);
}
