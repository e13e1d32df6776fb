//! OXM: OpenFlow 1.3's type-length-value match fields, to and from a
//! nicflow [`Match`].
//!
//! A controller's `FLOW_MOD` carries its match as a list of OXM TLVs; the
//! decoder here turns that list into the same [`Match`] the rule parser
//! (`nicflow-ofctl`) builds from `ovs-ofctl` text, checking what OpenFlow
//! requires on the way, with OpenFlow's error codes:
//!
//! * an unknown header, or a field nicflow does not have → `OFPBMC_BAD_FIELD`
//! * a wrong length → `OFPBMC_BAD_LEN`
//! * a mask on a field that takes none → `OFPBMC_BAD_MASK`
//! * value bits set where the mask is 0 → `OFPBMC_BAD_WILDCARDS`
//! * a value out of the field's range → `OFPBMC_BAD_VALUE`
//! * a field before its prerequisite (`tcp_dst` before `ip_proto=6`)
//!   → `OFPBMC_BAD_PREREQ`
//! * a field given twice → `OFPBMC_DUP_FIELD`
//!
//! Encoding writes fields in Open vSwitch's order (`nx_put_raw`), choosing
//! the OXM name where OpenFlow 1.3 has one and the NXM name otherwise, so a
//! match read from OVS-encoded bytes encodes back to the same bytes.
//! Bits OpenFlow cannot express are left out: `recirc_id`, `tun_flags`
//! other than OAM, and fields whose prerequisites the match lacks (as
//! `nx_put_raw` does; e.g. `ct_tp_src` without a non-zero `ct_nw_proto`).

pub mod table;

pub use table::{OxmField, OxmId, Pre};

use crate::error::{e, BadAction, BadMatch, OfpError};
use crate::wire::{self, Reader};
use nicflow_flow::{Field, Match, Prereq};
use table::CLASS_EXPERIMENTER;

/// `OFPMT_OXM`.
pub const OFPMT_OXM: u16 = 1;

/// Where an OXM appears: errors differ (`OFPBMC_*` in a match,
/// `OFPBAC_BAD_SET_*` in an action).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    Match,
    Action,
}

impl Ctx {
    fn bad_field(self) -> OfpError {
        match self {
            Ctx::Match => e::bmc(BadMatch::BAD_FIELD),
            Ctx::Action => e::bac(BadAction::BAD_SET_TYPE),
        }
    }
    fn bad_len(self) -> OfpError {
        match self {
            Ctx::Match => e::BMC_BAD_LEN,
            Ctx::Action => e::bac(BadAction::BAD_SET_LEN),
        }
    }
}

/// An OXM/NXM header as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OxmHeader {
    pub id: OxmId,
    pub hasmask: bool,
    /// `oxm_length`: payload bytes (plus 4 for the experimenter id).
    pub length: u8,
}

impl OxmHeader {
    pub fn read(r: &mut Reader<'_>) -> Result<OxmHeader, OfpError> {
        let h = r.u32()?;
        let class = (h >> 16) as u16;
        let length = h as u8;
        let experimenter = if class == CLASS_EXPERIMENTER {
            if length < 4 {
                return Err(r.short_error());
            }
            Some(r.u32()?)
        } else {
            None
        };
        Ok(OxmHeader {
            id: OxmId {
                class,
                field: ((h >> 9) & 0x7f) as u8,
                experimenter,
            },
            hasmask: h & 0x100 != 0,
            length,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let h = (u32::from(self.id.class) << 16)
            | (u32::from(self.id.field & 0x7f) << 9)
            | (u32::from(self.hasmask) << 8)
            | u32::from(self.length);
        wire::put_u32(out, h);
        if let Some(x) = self.id.experimenter {
            wire::put_u32(out, x);
        }
    }

    /// Bytes of value (+ mask) after the header.
    pub fn payload_len(&self) -> usize {
        usize::from(self.length) - if self.id.experimenter.is_some() { 4 } else { 0 }
    }

    /// The header for `field` with a value of its size (and a mask if
    /// `hasmask`).
    pub fn for_field(field: OxmField, prefer_nxm: bool, hasmask: bool) -> OxmHeader {
        let id = field.id(prefer_nxm);
        let bytes = field.def().bytes * if hasmask { 2 } else { 1 };
        OxmHeader {
            id,
            hasmask,
            length: bytes + if id.experimenter.is_some() { 4 } else { 0 },
        }
    }
}

/// One decoded TLV: values right-aligned, as the wire has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OxmEntry {
    pub field: OxmField,
    pub value: u128,
    pub mask: Option<u128>,
}

fn get_value(r: &mut Reader<'_>, n: usize) -> Result<u128, OfpError> {
    Ok(r.bytes(n)?
        .iter()
        .fold(0u128, |v, &b| (v << 8) | u128::from(b)))
}

pub(crate) fn put_value(out: &mut Vec<u8>, v: u128, n: usize) {
    out.extend_from_slice(&v.to_be_bytes()[16 - n..]);
}

/// Read a header naming a field nicflow has (for `reg_move`, `output_reg`,
/// `ct(zone=FIELD)`): `(field, hasmask)`.
pub fn read_field_header(r: &mut Reader<'_>, ctx: Ctx) -> Result<(OxmField, bool), OfpError> {
    let h = OxmHeader::read(r)?;
    let f = OxmField::from_id(h.id).ok_or(ctx.bad_field())?;
    let k = if h.hasmask { 2 } else { 1 };
    let want = usize::from(f.def().bytes) * k;
    // A bare header of variable-length `tun_metadata<N>` (in `move:`)
    // carries OVS's maximum length, 124 bytes, not the mapped one: any
    // length up to that names the field (the bit range is checked against
    // nicflow's 4-byte slot by the caller).
    let variable = matches!(f, OxmField::TunMetadata(_))
        && (1..=124 * k).contains(&h.payload_len())
        && h.payload_len() % k == 0;
    if h.payload_len() != want && !variable {
        return Err(ctx.bad_len());
    }
    Ok((f, h.hasmask))
}

/// Write the header of `field` (no payload).
pub fn write_field_header(out: &mut Vec<u8>, field: OxmField, prefer_nxm: bool) {
    OxmHeader::for_field(field, prefer_nxm, false).write(out);
}

/// Read one TLV. Masks are only checked for consistency here (value bits
/// under a 0 mask bit → `OFPBMC_BAD_WILDCARDS`); whether the field takes a
/// mask at all is the caller's business (matches and `reg_load2` differ).
pub fn read_entry(r: &mut Reader<'_>, ctx: Ctx) -> Result<OxmEntry, OfpError> {
    let h = OxmHeader::read(r)?;
    let field = OxmField::from_id(h.id);
    // The payload is consumed even for an unknown field, so the error is
    // about the field and not about the length.
    let payload = r.bytes(h.payload_len())?;
    let field = field.ok_or(ctx.bad_field())?;
    let mut n = usize::from(field.def().bytes);
    // `tun_metadata<N>` is variable-length in Open vSwitch: the header's
    // length is the value's (as mapped by the TLV table, or as short as
    // the value when ovs-ofctl has no map). nicflow's slots hold 4-byte
    // options, so 1..=4 bytes are read right-aligned (the missing high
    // bytes are zero in the value and, for an exact match, matched as
    // zero; a short mask leaves them wildcarded); longer options are
    // `OFPBMC_BAD_LEN`.
    if let OxmField::TunMetadata(_) = field {
        let k = if h.hasmask { 2 } else { 1 };
        let per = payload.len() / k;
        if (1..=n).contains(&per) && per * k == payload.len() {
            n = per;
        }
    }
    if payload.len() != n * if h.hasmask { 2 } else { 1 } {
        return Err(ctx.bad_len());
    }
    let mut p = Reader::new(payload, ctx.bad_len());
    let value = get_value(&mut p, n)?;
    let mask = if h.hasmask {
        let m = get_value(&mut p, n)?;
        if value & !m != 0 {
            return Err(match ctx {
                Ctx::Match => e::bmc(BadMatch::BAD_WILDCARDS),
                Ctx::Action => e::bac(BadAction::BAD_SET_ARGUMENT),
            });
        }
        Some(m)
    } else {
        None
    };
    Ok(OxmEntry { field, value, mask })
}

/// Write one TLV (`mask: None` = exact).
pub fn write_entry(
    out: &mut Vec<u8>,
    field: OxmField,
    prefer_nxm: bool,
    value: u128,
    mask: Option<u128>,
) {
    OxmHeader::for_field(field, prefer_nxm, mask.is_some()).write(out);
    let n = usize::from(field.def().bytes);
    put_value(out, value, n);
    if let Some(m) = mask {
        put_value(out, m, n);
    }
}

/// Add one decoded TLV to a match, with OpenFlow's checks.
pub fn apply_entry(m: &mut Match, e: OxmEntry) -> Result<(), OfpError> {
    let d = e.field.def();
    if e.mask.is_some() && !d.maskable {
        return Err(e::bmc(BadMatch::BAD_MASK));
    }
    if e.value & !d.valid != 0 {
        return Err(e::bmc(BadMatch::BAD_VALUE));
    }
    // "No tag" (present bit matched as 0) with other TCI bits set can
    // never match a packet.
    if matches!(e.field, OxmField::VlanTci | OxmField::VlanVid) {
        let mask = e.mask.unwrap_or(u128::MAX);
        if mask & 0x1000 != 0 && e.value & 0x1000 == 0 && e.value != 0 {
            return Err(e::bmc(BadMatch::BAD_VALUE));
        }
    }
    if !d.pre.satisfied(m.key(), &m.mask().0) {
        return Err(e::bmc(BadMatch::BAD_PREREQ));
    }
    let wire_mask = e.mask.unwrap_or(u128::MAX) & d.valid;
    let (_, cur_mask) = m.get(d.field);
    if cur_mask & d.bits != 0 {
        return Err(e::bmc(BadMatch::DUP_FIELD));
    }
    let nf_mask = if wire_mask == d.valid {
        d.bits
    } else {
        e.field.to_nicflow(wire_mask) & d.bits
    };
    let nf_value = e.field.to_nicflow(e.value) & nf_mask;
    m.set(d.field, nf_value, nf_mask);
    Ok(())
}

/// Decode a list of OXM TLVs (the body of an `ofp_match`).
pub fn decode_fields(bytes: &[u8]) -> Result<Match, OfpError> {
    let mut r = Reader::new(bytes, e::BMC_BAD_LEN);
    let mut m = Match::catchall();
    while !r.is_empty() {
        let entry = read_entry(&mut r, Ctx::Match)?;
        apply_entry(&mut m, entry)?;
    }
    normalize(&mut m);
    Ok(m)
}

/// Drop what Open vSwitch drops from a match it reads: see [`decode_fields`].
pub fn normalize(m: &mut Match) {
    // Open vSwitch keeps `ct_nw_proto`, `ct_tp_src` and `ct_tp_dst` in a
    // rule only with a non-zero `ct_nw_proto` (`nx_put_raw`); nicflow's
    // text parser drops them the same way, so a rule means the same
    // whether it came as text or as OXM.
    if m.get(Field::CtNwProto).0 == 0 {
        for f in [Field::CtNwProto, Field::CtTpSrc, Field::CtTpDst] {
            m.clear(f);
        }
    }
}

/// Decode an `ofp_match` (type, length, TLVs, padding to 8 bytes).
pub fn decode_match(r: &mut Reader<'_>) -> Result<Match, OfpError> {
    let start = r.remaining();
    let ty = r.u16().map_err(|_| e::BMC_BAD_LEN)?;
    let len = usize::from(r.u16().map_err(|_| e::BMC_BAD_LEN)?);
    if ty != OFPMT_OXM {
        return Err(e::bmc(BadMatch::BAD_TYPE));
    }
    if len < 4 || start < len.next_multiple_of(8) {
        return Err(e::BMC_BAD_LEN);
    }
    let fields = r.bytes(len - 4).map_err(|_| e::BMC_BAD_LEN)?;
    r.pad(len.next_multiple_of(8) - len)
        .map_err(|_| e::BMC_BAD_LEN)?;
    decode_fields(fields)
}

/// Encode an `ofp_match` with padding.
pub fn encode_match(m: &Match, out: &mut Vec<u8>) {
    let start = out.len();
    wire::put_u16(out, OFPMT_OXM);
    wire::put_u16(out, 0);
    encode_fields(m, out);
    let len = wire::len16(out, start);
    wire::patch_u16(out, start + 2, len);
    wire::pad8_from(out, start);
}

/// Writes TLVs in Open vSwitch's order.
struct Put<'a> {
    m: &'a Match,
    out: &'a mut Vec<u8>,
}

impl Put<'_> {
    /// The field's value and mask in wire terms.
    fn get(&self, f: OxmField) -> (u128, u128) {
        let d = f.def();
        let (v, m) = self.m.get(d.field);
        (f.from_nicflow(v), f.from_nicflow(m & d.bits))
    }

    /// Exact if every bit nicflow has of the field is masked (or the field
    /// takes no mask), masked if some are, nothing if none.
    fn masked(&mut self, f: OxmField) {
        let d = f.def();
        let (v, m) = self.get(f);
        if m == 0 {
            return;
        }
        if !d.maskable || m == f.from_nicflow(d.bits) {
            write_entry(self.out, f, false, v, None);
        } else {
            write_entry(self.out, f, false, v & m, Some(m));
        }
    }

    /// Exact, whatever the mask, if any bit is masked.
    fn exact(&mut self, f: OxmField) {
        let (v, m) = self.get(f);
        if m != 0 {
            write_entry(self.out, f, false, v, None);
        }
    }

    fn has(&self, f: Field) -> bool {
        self.m.get(f).1 != 0
    }
}

/// Encode a match as TLVs only (no `ofp_match` header, no padding).
pub fn encode_fields(m: &Match, out: &mut Vec<u8>) {
    use OxmField as F;
    let mut p = Put { m, out };
    let k = m.key();

    p.exact(F::InPort);
    p.masked(F::EthSrc);
    p.masked(F::EthDst);
    p.masked(F::EthType);

    // 802.1Q, as nx_put_raw: vid (with the present bit) then pcp only if
    // the match says a tag is present. A TCI match OXM cannot say (PCP bits
    // without "tag present") goes as NXM_OF_VLAN_TCI, which OpenFlow 1.3
    // matches may carry.
    let (tci, tci_mask) = m.get(Field::VlanTci);
    let pcp_mask = tci_mask & 0xe000;
    let tagged = tci_mask & 0x1000 != 0 && tci & 0x1000 != 0;
    if pcp_mask == 0 || (pcp_mask == 0xe000 && tagged) {
        let vid_mask = tci_mask & 0x1fff;
        if vid_mask == 0x1fff {
            write_entry(p.out, F::VlanVid, false, tci & 0x1fff, None);
        } else if vid_mask != 0 {
            write_entry(p.out, F::VlanVid, false, tci & vid_mask, Some(vid_mask));
        }
        if pcp_mask != 0 {
            write_entry(p.out, F::VlanPcp, false, (tci >> 13) & 7, None);
        }
    } else {
        p.masked(F::VlanTci);
    }

    let dl = if m.mask().0.dl_type != 0 {
        k.dl_type
    } else {
        0
    };
    if dl == 0x0800 || dl == 0x86dd {
        if dl == 0x0800 {
            p.masked(F::Ipv4Src);
            p.masked(F::Ipv4Dst);
        } else {
            p.masked(F::Ipv6Src);
            p.masked(F::Ipv6Dst);
        }
        p.masked(F::IpFrag);
        let tos_mask = m.mask().0.nw_tos;
        if tos_mask & 0xfc != 0 {
            write_entry(p.out, F::IpDscp, false, u128::from(k.nw_tos >> 2), None);
        }
        if tos_mask & 0x03 != 0 {
            write_entry(p.out, F::IpEcn, false, u128::from(k.nw_tos & 3), None);
        }
        p.exact(F::IpTtl);
        p.masked(F::Ipv6Label);
        if p.has(Field::NwProto) {
            p.exact(F::IpProto);
            match k.nw_proto {
                6 => {
                    p.masked(F::TcpSrc);
                    p.masked(F::TcpDst);
                    p.masked(F::TcpFlags);
                }
                17 => {
                    p.masked(F::UdpSrc);
                    p.masked(F::UdpDst);
                }
                132 => {
                    p.masked(F::SctpSrc);
                    p.masked(F::SctpDst);
                }
                1 if dl == 0x0800 => {
                    p.exact(F::Icmpv4Type);
                    p.exact(F::Icmpv4Code);
                }
                58 if dl == 0x86dd => {
                    p.exact(F::Icmpv6Type);
                    p.exact(F::Icmpv6Code);
                    // As OVS's nx_put_raw: the target for either ND
                    // message, the SLL for a solicitation, the TLL for an
                    // advertisement (the prerequisites decide).
                    let mk = &m.mask().0;
                    if Prereq::Nd.satisfied(k, mk) {
                        p.masked(F::NdTarget);
                    }
                    if Prereq::NdSolicit.satisfied(k, mk) {
                        p.masked(F::NdSll);
                    }
                    if Prereq::NdAdvert.satisfied(k, mk) {
                        p.masked(F::NdTll);
                    }
                }
                _ => {}
            }
        }
    } else if dl == 0x0806 {
        p.exact(F::ArpOp);
        p.masked(F::ArpSpa);
        p.masked(F::ArpTpa);
        p.masked(F::ArpSha);
        p.masked(F::ArpTha);
    }

    p.masked(F::TunId);
    p.masked(F::TunFlags);
    p.masked(F::TunSrc);
    p.masked(F::TunDst);
    for i in 0..8 {
        p.masked(F::TunMetadata(i));
    }
    for i in 0..16 {
        p.masked(F::Reg(i));
    }
    p.masked(F::PktMark);
    p.exact(F::ConjId);
    p.masked(F::CtState);
    p.masked(F::CtZone);
    p.masked(F::CtMark);
    p.masked(F::CtLabel);
    p.masked(F::CtNwSrc);
    p.masked(F::CtIpv6Src);
    p.masked(F::CtNwDst);
    p.masked(F::CtIpv6Dst);
    if k.ct_nw_proto != 0 {
        p.exact(F::CtNwProto);
        p.masked(F::CtTpSrc);
        p.masked(F::CtTpDst);
    }
    p.masked(F::Metadata);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// OVS names `tun_metadata0` in `move:` with its maximum length (124):
    /// ovn-controller's `move:NXM_NX_REG14[0..14]->NXM_NX_TUN_METADATA0[16..30]`
    /// was OFPBAC_BAD_SET_LEN.
    #[test]
    fn tun_metadata_header_is_variable_length() {
        let read = |h: &str| {
            let b = hex(h);
            read_field_header(&mut Reader::new(&b, e::BAC_BAD_LEN), Ctx::Action)
        };
        for h in ["0001507c", "00015004", "00015001"] {
            assert_eq!(read(h), Ok((OxmField::TunMetadata(0), false)), "{h}");
        }
        assert!(read("0001507d").is_err()); // 125 bytes
        assert!(read("00010208").is_err()); // reg1 is 4 bytes, exactly
    }

    #[test]
    fn errors() {
        let bad = |h: &str| decode_fields(&hex(h)).unwrap_err();
        // tcp_dst without prerequisites
        assert_eq!(bad("80001c02 0050"), e::bmc(BadMatch::BAD_PREREQ));
        // ipv6_nd_target on icmp6 without type 135/136, and with type 135
        // but code 1; nd_tll (OXM 33) on a solicitation.
        let icmp6 = "80000a02 86dd 80001401 3a";
        let target = "80003e10 20010db8000000000000000000000002";
        assert_eq!(
            bad(&format!("{icmp6} {target}")),
            e::bmc(BadMatch::BAD_PREREQ)
        );
        assert_eq!(
            bad(&format!("{icmp6} 80003a01 87 80003c01 01 {target}")),
            e::bmc(BadMatch::BAD_PREREQ)
        );
        assert_eq!(
            bad(&format!("{icmp6} 80003a01 87 80004206 020000000001")),
            e::bmc(BadMatch::BAD_PREREQ)
        );
        let ok = decode_fields(&hex(&format!(
            "{icmp6} 80003a01 87 {target} 80004006 020000000001"
        )))
        .unwrap();
        assert_eq!(ok.key().nd_target[15], 2);
        assert_eq!(ok.key().arp_sha, [2, 0, 0, 0, 0, 1]);
        // unknown field (OXM_OF_MPLS_LABEL)
        assert_eq!(bad("80004404 00000001"), e::bmc(BadMatch::BAD_FIELD));
        // duplicate eth_type
        assert_eq!(
            bad("80000a02 0800 80000a02 0800"),
            e::bmc(BadMatch::DUP_FIELD)
        );
        // value bit outside mask
        assert_eq!(
            bad("80000a02 0800 80001708 0a000001 ffffff00"),
            e::bmc(BadMatch::BAD_WILDCARDS)
        );
        // masked eth_type
        assert_eq!(bad("80000b04 0800 ffff"), e::bmc(BadMatch::BAD_MASK));
        // dscp out of range
        assert_eq!(
            bad("80000a02 0800 80001001 40"),
            e::bmc(BadMatch::BAD_VALUE)
        );
        // truncated
        assert_eq!(bad("80000a02 08"), e::BMC_BAD_LEN);
        // wrong length for a known field
        assert_eq!(bad("80000a04 08000000"), e::BMC_BAD_LEN);
    }

    #[test]
    fn tcp_match_round_trips() {
        // eth_type=ip, ip_proto=6, tcp_dst=80, ONF tcp_flags=+syn/+syn
        let b = hex("80000a02 0800 80001401 06 80001c02 0050 ffff5508 4f4e4600 0002 0002");
        let m = decode_fields(&b).unwrap();
        assert_eq!(m.get(Field::TpDst), (80, 0xffff));
        assert_eq!(m.get(Field::TcpFlags), (2, 2));
        let mut out = Vec::new();
        encode_fields(&m, &mut out);
        assert_eq!(out, b);
    }
}
