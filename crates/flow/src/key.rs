//! The fixed-layout flow key, its mask, and matches.
//!
//! Layout rules: every field sits at a fixed offset, the struct has no padding
//! (zerocopy's derive refuses to compile otherwise) and its size is a whole
//! number of `u64` words, so a key can be viewed as `[u64; FLOW_WORDS]` for the
//! classifier's masked hashing. Multi-byte integers are stored in host order;
//! addresses (MACs, IPv6) as network-order byte arrays. Fields that often
//! change together share a word, so a typical mask touches few words.
//!
//! Following Open vSwitch, some fields are reused by protocol: for ARP,
//! `nw_proto` holds the low byte of the opcode and `nw_src`/`nw_dst` hold the
//! sender/target protocol addresses; for ICMP/ICMPv6, `tp_src`/`tp_dst` hold
//! type and code; for IPv6 neighbor discovery, `arp_sha`/`arp_tha` hold
//! the source/target link-layer address options. `vlan_tci` carries the 802.1Q TCI with bit 0x1000 (CFI/DEI
//! position) forced on to mean "a tag is present", so `vlan_tci == 0` means
//! untagged, exactly as in OVS.

use std::fmt;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Number of 64-bit words in a [`FlowKey`].
pub const FLOW_WORDS: usize = 39;

/// "A VLAN tag is present" bit inside [`FlowKey::vlan_tci`].
pub const VLAN_CFI: u16 = 0x1000;
/// VLAN ID bits of a TCI.
pub const VLAN_VID_MASK: u16 = 0x0fff;
/// Priority code point bits of a TCI.
pub const VLAN_PCP_MASK: u16 = 0xe000;
pub const VLAN_PCP_SHIFT: u16 = 13;

/// `nw_frag` bit: the packet is an IP fragment (first or later).
pub const FRAG_ANY: u8 = 1;
/// `nw_frag` bit: the packet is a non-first fragment (no L4 header).
pub const FRAG_LATER: u8 = 2;

/// Every field a rule can match, at fixed offsets. See the module docs for
/// the encoding conventions.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C, align(8))]
pub struct FlowKey {
    // word 0
    pub tun_id: u64,
    // word 1
    pub metadata: u64,
    // words 2-5
    pub regs: [u32; 8],
    // word 6
    pub tun_src: u32,
    pub tun_dst: u32,
    // word 7
    pub in_port: u32,
    pub ct_mark: u32,
    // word 8
    pub ct_state: u32,
    pub ct_zone: u16,
    pub tun_flags: u16,
    // word 9
    pub dl_dst: [u8; 6],
    pub dl_type: u16,
    // word 10
    pub dl_src: [u8; 6],
    pub vlan_tci: u16,
    // word 11: ARP sender hardware address; inner (second) VLAN TCI
    pub arp_sha: [u8; 6],
    pub vlan_tci2: u16,
    // word 12
    pub arp_tha: [u8; 6],
    pub tp_src: u16,
    // word 13
    pub nw_src: u32,
    pub nw_dst: u32,
    // words 14-15
    pub ipv6_src: [u8; 16],
    // words 16-17
    pub ipv6_dst: [u8; 16],
    // word 18
    pub ipv6_label: u32,
    pub tp_dst: u16,
    pub tcp_flags: u16,
    // word 19
    pub nw_proto: u8,
    pub nw_tos: u8,
    pub nw_ttl: u8,
    pub nw_frag: u8,
    /// Which recirculation this pass of the packet is (0: as received).
    /// A datapath field only: set by the `recirc` datapath action after
    /// `ct(table=N)`, never matched by rules (OVS's `recirc_id`).
    pub recirc_id: u32,
    // words 20-23: Geneve option values mapped by a tunnel port's TLV map
    // (`tun_metadata0..7`, 4-byte options; 0 = absent).
    pub tun_metadata: [u32; 8],
    // words 24-25: the connection's 128-bit label, network byte order.
    pub ct_label: [u8; 16],
    // word 26: the tracked connection's original-direction tuple
    // (`ct_nw_src`, ...), filled with the other ct fields by a `ct` action.
    pub ct_nw_src: u32,
    pub ct_nw_dst: u32,
    // word 27
    pub ct_tp_src: u16,
    pub ct_tp_dst: u16,
    pub ct_nw_proto: u8,
    pub _pad: Pad<3>,
    // words 28-31: registers 8-15 (0-7 are `regs`, near the front where
    // most masks already touch; these came later and sit at the end so no
    // other field moved).
    pub regs_hi: [u32; 8],
    // words 32-35: the tracked connection's IPv6 original-direction
    // addresses (`ct_ipv6_src/dst`), network byte order; zero for IPv4
    // connections, whose addresses are `ct_nw_src/dst`.
    pub ct_ipv6_src: [u8; 16],
    pub ct_ipv6_dst: [u8; 16],
    // word 36: `pkt_mark`, packet metadata as in Open vSwitch's userspace
    // datapath: 0 on receive, set by `set_field`/`load`/`move`, kept across
    // recirculation, never written into the frame or the socket buffer.
    pub pkt_mark: u32,
    /// The conjunctive match a lookup is repeated under (OVS's `conj_id`):
    /// 0 in every packet's key; the slow path sets it only for the second
    /// lookup after a complete `conjunction(...)` set, and never leaves it in
    /// a datapath key or mask.
    pub conj_id: u32,
    // words 37-38: the target address of an IPv6 neighbor solicitation or
    // advertisement (`nd_target`, network byte order; zero for any other
    // packet). At the end, as the other late fields, so nothing moved. The
    // ND link-layer address options share `arp_sha` (`nd_sll`) and
    // `arp_tha` (`nd_tll`), as in Open vSwitch's `struct flow`.
    pub nd_target: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<FlowKey>() == FLOW_WORDS * 8);

/// The bytes that round a word up (3 in word 27). Keys are hashed (EMC, megaflow
/// buckets) and compared as whole words, so these bytes must be zero in
/// every key; their type makes that hold by construction: the field is
/// public (so `FlowKey { .., ..Default::default() }` works anywhere), but
/// only this module can make a `Pad` that is not zero.
///
/// ```compile_fail
/// let mut k = nicflow_flow::FlowKey::default();
/// k._pad = nicflow_flow::key::Pad::<3>([1, 0, 0]);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct Pad<const N: usize>([u8; N]);

impl<const N: usize> Default for Pad<N> {
    fn default() -> Self {
        Pad([0; N])
    }
}

impl<const N: usize> Pad<N> {
    pub const ZERO: Pad<N> = Pad([0; N]);
}

impl FlowKey {
    /// The key as words, for masked hashing and comparison.
    #[inline]
    pub fn words(&self) -> &[u64; FLOW_WORDS] {
        zerocopy::transmute_ref!(self)
    }

    #[inline]
    pub fn words_mut(&mut self) -> &mut [u64; FLOW_WORDS] {
        zerocopy::transmute_mut!(self)
    }

    #[inline]
    pub fn from_words(w: &[u64; FLOW_WORDS]) -> Self {
        zerocopy::transmute!(*w)
    }

    /// `self & mask`, field by field.
    #[inline]
    pub fn masked(&self, mask: &FlowMask) -> FlowKey {
        let mut out = *self;
        for (o, m) in out.words_mut().iter_mut().zip(mask.0.words()) {
            *o &= *m;
        }
        out
    }

    /// Zero what a `ct` action fills (state, zone, mark, label and the
    /// connection's tuple): the fields a packet loses at `ct_clear` and
    /// that an action list after `ct(table=N)` goes on without.
    pub fn clear_ct(&mut self) {
        self.ct_state = 0;
        self.ct_zone = 0;
        self.ct_mark = 0;
        self.ct_label = [0; 16];
        self.ct_nw_src = 0;
        self.ct_nw_dst = 0;
        self.ct_ipv6_src = [0; 16];
        self.ct_ipv6_dst = [0; 16];
        self.ct_nw_proto = 0;
        self.ct_tp_src = 0;
        self.ct_tp_dst = 0;
    }

    /// Zero what exists only in the userspace pipeline (registers,
    /// `metadata`, `pkt_mark` and the ct fields): a packet entering a kernel
    /// engine has all of them zero, so a kernel key or mask leaves them out.
    pub fn clear_userspace_only(&mut self) {
        self.clear_ct();
        self.regs = [0; 8];
        self.regs_hi = [0; 8];
        self.metadata = 0;
        self.pkt_mark = 0;
        self.conj_id = 0;
    }

    /// The VLAN ID of the outer tag, if any.
    pub fn vlan_vid(&self) -> Option<u16> {
        (self.vlan_tci & VLAN_CFI != 0).then_some(self.vlan_tci & VLAN_VID_MASK)
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only the non-zero fields: a full dump of 256 bytes is unreadable.
        let mut first = true;
        f.write_str("FlowKey{")?;
        for field in crate::Field::ALL {
            let v = field.read(self);
            if v != 0 {
                if !first {
                    f.write_str(",")?;
                }
                first = false;
                write!(f, "{}=", field.name())?;
                field.fmt_value(v, f)?;
            }
        }
        f.write_str("}")
    }
}

/// Which bits of a [`FlowKey`] matter: a 1 bit means "must match".
///
/// Same layout as the key, so `FlowMask.0.nw_src = 0xffffff00` reads naturally.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowMask(pub FlowKey);

impl FlowMask {
    /// Matches nothing specifically: every packet.
    pub const fn catchall() -> Self {
        FlowMask(FlowKey {
            tun_id: 0,
            metadata: 0,
            regs: [0; 8],
            tun_src: 0,
            tun_dst: 0,
            in_port: 0,
            ct_mark: 0,
            ct_state: 0,
            ct_zone: 0,
            tun_flags: 0,
            dl_dst: [0; 6],
            dl_type: 0,
            dl_src: [0; 6],
            vlan_tci: 0,
            arp_sha: [0; 6],
            vlan_tci2: 0,
            arp_tha: [0; 6],
            tp_src: 0,
            nw_src: 0,
            nw_dst: 0,
            ipv6_src: [0; 16],
            ipv6_dst: [0; 16],
            ipv6_label: 0,
            tp_dst: 0,
            tcp_flags: 0,
            nw_proto: 0,
            nw_tos: 0,
            nw_ttl: 0,
            nw_frag: 0,
            recirc_id: 0,
            tun_metadata: [0; 8],
            ct_label: [0; 16],
            ct_nw_src: 0,
            ct_nw_dst: 0,
            ct_tp_src: 0,
            ct_tp_dst: 0,
            ct_nw_proto: 0,
            _pad: Pad::ZERO,
            regs_hi: [0; 8],
            ct_ipv6_src: [0; 16],
            ct_ipv6_dst: [0; 16],
            pkt_mark: 0,
            conj_id: 0,
            nd_target: [0; 16],
        })
    }

    /// Every bit matters (an exact match).
    pub fn exact() -> Self {
        let mut m = FlowMask::catchall();
        for w in m.0.words_mut() {
            *w = u64::MAX;
        }
        m.0._pad = Pad::ZERO;
        m
    }

    #[inline]
    pub fn words(&self) -> &[u64; FLOW_WORDS] {
        self.0.words()
    }

    #[inline]
    pub fn words_mut(&mut self) -> &mut [u64; FLOW_WORDS] {
        self.0.words_mut()
    }

    /// Add the bits of `other` (used to accumulate wildcard tracking).
    pub fn union_with(&mut self, other: &FlowMask) {
        for (a, b) in self.words_mut().iter_mut().zip(other.words()) {
            *a |= *b;
        }
    }

    /// True if every bit set in `self` is also set in `other`.
    pub fn is_subset_of(&self, other: &FlowMask) -> bool {
        self.words()
            .iter()
            .zip(other.words())
            .all(|(a, b)| a & !b == 0)
    }

    pub fn is_catchall(&self) -> bool {
        self.words().iter().all(|w| *w == 0)
    }
}

impl fmt::Debug for FlowMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FlowMask({:?})", self.0)
    }
}

/// A key plus mask; the key is always stored masked, so two equal matches
/// compare equal bytewise.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Match {
    key: FlowKey,
    mask: FlowMask,
}

impl Match {
    pub fn new(key: FlowKey, mask: FlowMask) -> Self {
        Match {
            key: key.masked(&mask),
            mask,
        }
    }

    /// Matches every packet.
    pub fn catchall() -> Self {
        Match::default()
    }

    pub fn key(&self) -> &FlowKey {
        &self.key
    }

    pub fn mask(&self) -> &FlowMask {
        &self.mask
    }

    /// Set a field's value under a field mask (both right-aligned in a u128).
    pub fn set(&mut self, field: crate::Field, value: u128, mask: u128) {
        let old_m = field.read(&self.mask.0);
        let old_v = field.read(&self.key);
        field.write(&mut self.mask.0, old_m | mask);
        field.write(&mut self.key, (old_v & !mask) | (value & mask));
    }

    /// Stop matching a field: value and mask to zero.
    pub fn clear(&mut self, field: crate::Field) {
        field.write(&mut self.mask.0, 0);
        field.write(&mut self.key, 0);
    }

    /// The (value, mask) of a field in this match.
    pub fn get(&self, field: crate::Field) -> (u128, u128) {
        (field.read(&self.key), field.read(&self.mask.0))
    }

    /// Does a packet's key fall under this match?
    #[inline]
    pub fn matches(&self, key: &FlowKey) -> bool {
        key.words()
            .iter()
            .zip(self.mask.words())
            .zip(self.key.words())
            .all(|((k, m), v)| k & m == *v)
    }
}

impl fmt::Debug for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Match{{key:{:?}, mask:{:?}}}", self.key, self.mask)
    }
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    #[test]
    fn words_roundtrip_and_layout() {
        let mut k = FlowKey::default();
        k.tun_id = 0x1122334455667788;
        k.nw_frag = 3;
        let w = *k.words();
        assert_eq!(w[0], 0x1122334455667788);
        assert_eq!(FlowKey::from_words(&w), k);
        assert_eq!(std::mem::offset_of!(FlowKey, nw_proto), 19 * 8);
        assert_eq!(std::mem::offset_of!(FlowKey, nw_src), 13 * 8);
    }

    #[test]
    fn match_masks_key() {
        let mut k = FlowKey::default();
        k.nw_src = 0xc6120001;
        let mut m = FlowMask::catchall();
        m.0.nw_src = 0xffffff00;
        let mt = Match::new(k, m);
        assert_eq!(mt.key().nw_src, 0xc6120000);
        let mut p = FlowKey::default();
        p.nw_src = 0xc61200fe;
        assert!(mt.matches(&p));
        p.nw_src = 0xc6120100;
        assert!(!mt.matches(&p));
    }

    #[test]
    fn subset() {
        let mut a = FlowMask::catchall();
        a.0.nw_src = 0xff000000;
        let mut b = a;
        b.0.tp_dst = 0xffff;
        assert!(a.is_subset_of(&b));
        assert!(!b.is_subset_of(&a));
    }
}
