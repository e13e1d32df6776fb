//! What one run of the program depended on and did, beyond its output
//! bytes: the raw material the bridge turns into a cached megaflow
//! (PISCES-style). The interpreter fills a [`Trace`] while a packet goes
//! through parser, controls and deparser; the bridge reads it to build
//! the match mask (packet bits read, input port) and decides whether the
//! decision may be cached at all (`uncacheable`).

/// A range of bits of the packet *as received*: offset from the first bit
/// of the frame and length, both in bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BitRange {
    pub offset: u32,
    pub len: u32,
}

/// Numeric id of an entry in one table (unique within the table for the
/// pipeline's life; never reused).
pub type EntryId = u64;

/// One table application: which table (fully qualified name) and which
/// entry hit (`None`: miss, the default action ran).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableApply {
    /// Shared with the table's definition: recording an apply clones a
    /// pointer, not the name (two per packet on the routing program).
    pub table: std::sync::Arc<str>,
    pub entry: Option<EntryId>,
    /// The table's index in the pipeline: revalidation finds its change
    /// log without a name lookup per cached flow.
    pub index: u32,
    /// Where the key values this lookup used are in [`Trace::keys`]
    /// (one per key, in the table's key order); empty when the pipeline
    /// was not recording them (see `Pipeline::record_table_keys`), in
    /// which case a change of the table removes the flow as before.
    pub keys: std::ops::Range<u32>,
}

/// One key value a table lookup used, and the bits of it the lookup
/// examined. Every packet of the megaflow a run becomes has the same key
/// on the examined bits (they are in the mask); the other bits may
/// differ from packet to packet. Revalidation needs both: a new entry
/// leaves the flow alone only if it can match none of those keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupKey {
    pub value: u128,
    pub examined: u128,
}

/// A counter cell the run incremented: an indexed counter
/// (`Counter`/`counter`) or a direct counter (entry of a table).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CounterRef {
    /// Indexed counter, by fully qualified instance name.
    Indexed { name: String, index: u64 },
    /// Direct counter of `table`'s entry `entry` (`None`: the default
    /// action's cell, if the target keeps one).
    Direct {
        table: String,
        entry: Option<EntryId>,
    },
}

/// Where a span of an output frame's bits came from: bits the deparser
/// emitted (or the payload behind the parsed headers) at bit `out` of the
/// frame, `len` bits, that still hold the packet's bits from bit `from` as
/// received — or `None` when the program wrote them (a constant, action
/// data, a computed value). The cache needs it: a field written with the
/// value it already had looks unchanged in the bytes, yet must become a
/// `set` action for other packets of the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmitSpan {
    pub out: u32,
    pub len: u32,
    pub from: Option<u32>,
}

/// Where the bits `[at, at + len)` of a frame described by `prov` came
/// from: pieces of (length, bit offset in the received packet, or `None`
/// where the program wrote them). Used when a later pipeline (PSA egress)
/// parses the frame an earlier one built: its offsets are mapped back to
/// the packet as received.
pub fn map_back(prov: &[EmitSpan], at: u32, len: u32) -> Vec<(u32, Option<u32>)> {
    let mut out = Vec::new();
    let end = at.saturating_add(len);
    let mut x = at;
    while x < end {
        match prov.iter().find(|s| x >= s.out && x < s.out + s.len) {
            Some(s) => {
                let n = (s.out + s.len).min(end) - x;
                out.push((n, s.from.map(|f| f + (x - s.out))));
                x += n;
            }
            None => {
                out.push((end - x, None));
                x = end;
            }
        }
    }
    out
}

/// Everything the bridge needs to cache (or refuse to cache) one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// Packet bits the run's decisions or written values depended on,
    /// sorted and merged (overlapping/adjacent ranges joined).
    pub read_bits: Vec<BitRange>,
    /// The run read the input port (istd.input_port,
    /// standard_metadata.ingress_port, ...).
    pub in_port_read: bool,
    /// Set when a checksum extern read or wrote packet data: the datapath
    /// must recompute checksums instead of matching on the bits.
    pub checksum_recomputed: bool,
    /// `Some(tag)` when the decision depends on per-packet state and must
    /// not be cached (`p4-register`, `p4-meter`, `p4-random`, ...).
    pub uncacheable: Option<String>,
    /// Tables applied, in order, with the entry hit.
    pub tables: Vec<TableApply>,
    /// The key values of the applies in `tables` (each apply names its
    /// range), recorded only when the pipeline traces for a cache: a
    /// table change revalidates a cached flow against them.
    pub keys: Vec<LookupKey>,
    /// Counter cells incremented (to credit cache hits later).
    pub counters: Vec<CounterRef>,
    /// The run ended on an internal error (counted drop); the message.
    pub error: Option<String>,
    /// Tables the run changed (`add_entry` on an `add_on_miss` table):
    /// cached flows that applied them must be revalidated, whatever else
    /// the run did.
    pub tables_changed: Vec<String>,
    /// Provenance of the last frame the deparser built (see [`EmitSpan`]).
    pub emitted: Vec<EmitSpan>,
    /// How many frames the deparser built in this run (clones,
    /// recirculations and multicast build several).
    pub frames: u32,
    /// Bytes the parser required to be present (extract, lookahead,
    /// advance) on the packet as received: a cached decision holds only
    /// for packets at least this long (shorter ones fail to parse).
    pub min_packet_len: u32,
}

impl Trace {
    /// Records that the run depended on `len` bits at `offset`.
    pub fn read(&mut self, offset: u32, len: u32) {
        if len == 0 {
            return;
        }
        self.read_bits.push(BitRange { offset, len });
    }

    /// The key values table apply `a` (one of `tables`) used; empty when
    /// they were not recorded.
    pub fn apply_keys(&self, a: &TableApply) -> &[LookupKey] {
        self.keys
            .get(a.keys.start as usize..a.keys.end as usize)
            .unwrap_or(&[])
    }

    /// Marks the run uncacheable; the first reason is kept.
    pub fn set_uncacheable(&mut self, tag: impl Into<String>) {
        if self.uncacheable.is_none() {
            self.uncacheable = Some(tag.into());
        }
    }

    /// Sorts and merges `read_bits` (called once at the end of a run).
    pub fn normalize(&mut self) {
        // Merged in place (no second vector per packet).
        self.read_bits.sort_unstable();
        let rs = &mut self.read_bits;
        let mut kept = 0usize;
        for i in 0..rs.len() {
            let r = rs[i];
            if kept > 0 {
                let last = &mut rs[kept - 1];
                let end = last.offset + last.len;
                if r.offset <= end {
                    let new_end = end.max(r.offset + r.len);
                    last.len = new_end - last.offset;
                    continue;
                }
            }
            rs[kept] = r;
            kept += 1;
        }
        rs.truncate(kept);
    }

    /// True when the bit range `[offset, offset+len)` is wholly covered by
    /// the recorded reads (tests and the bridge's sanity checks use it).
    pub fn covers(&self, offset: u32, len: u32) -> bool {
        let mut want = offset;
        let end = offset + len;
        let mut rs = self.read_bits.clone();
        rs.sort();
        for r in rs {
            if r.offset <= want && r.offset + r.len > want {
                want = r.offset + r.len;
            }
            if want >= end {
                return true;
            }
        }
        want >= end
    }

    /// True when any recorded read overlaps `[offset, offset+len)`.
    pub fn touches(&self, offset: u32, len: u32) -> bool {
        self.read_bits
            .iter()
            .any(|r| r.offset < offset + len && offset < r.offset + r.len)
    }
}

#[cfg(test)]
mod normalize_tests {
    use super::{BitRange, Trace};

    /// The merge as it was (into a second vector), as the reference.
    fn merged(mut rs: Vec<BitRange>) -> Vec<BitRange> {
        rs.sort();
        let mut out: Vec<BitRange> = Vec::new();
        for r in rs {
            if let Some(last) = out.last_mut() {
                let end = last.offset + last.len;
                if r.offset <= end {
                    last.len = end.max(r.offset + r.len) - last.offset;
                    continue;
                }
            }
            out.push(r);
        }
        out
    }

    #[test]
    fn in_place_merge_equals_the_reference() {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n) as u32
        };
        for _ in 0..5000 {
            let n = next(12);
            let rs: Vec<BitRange> = (0..n)
                .map(|_| BitRange {
                    offset: next(200),
                    len: next(40) + 1,
                })
                .collect();
            let mut t = Trace {
                read_bits: rs.clone(),
                ..Trace::default()
            };
            t.normalize();
            assert_eq!(t.read_bits, merged(rs));
        }
    }
}
