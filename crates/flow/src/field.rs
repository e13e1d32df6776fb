//! Named fields of a [`FlowKey`], as the rule language and `set_field` see them.
//!
//! One table drives matching, printing and rewriting, so the rule parser, the
//! slow path's `set_field` and the datapath's rewrite all agree on widths and
//! prerequisites. Several names may share storage (OVS does the same): the ARP
//! opcode lives in `nw_proto`, ARP sender/target IPs in `nw_src`/`nw_dst`,
//! ICMP type/code in `tp_src`/`tp_dst`, the ND link-layer address options
//! in `arp_sha`/`arp_tha`; each name carries its own
//! prerequisite so `arp_spa` cannot be used on an IPv4 rule.

use crate::key::FlowKey;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Protocol prerequisites a match must establish before a field may be used,
/// mirroring Open vSwitch's `mf_prereqs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prereq {
    None,
    /// dl_type=0x0800 or 0x86dd
    Ip,
    /// dl_type=0x0800
    Ipv4,
    /// dl_type=0x86dd
    Ipv6,
    /// dl_type=0x0806 or 0x8035 (ARP or RARP, as OVS's `MFP_ARP`: OVN
    /// matches `rarp,arp_op=3` for its RARP handling)
    Arp,
    /// dl_type=0x0800, 0x0806 or 0x8035 (`nw_src`/`nw_dst`)
    Ipv4OrArp,
    /// IP and nw_proto in {6, 17, 132}
    TcpUdpSctp,
    /// IP and nw_proto=6
    Tcp,
    /// IPv4 and nw_proto=1
    Icmp,
    /// IPv6 and nw_proto=58
    Icmpv6,
    /// IPv4 or IPv6 and nw_proto in {1, 58}: generic ICMP type/code storage
    AnyIcmp,
    /// An IPv6 neighbor solicitation or advertisement: ICMPv6 with the
    /// type matched exactly at 135 or 136 and the code, if matched, 0
    /// (OVS's `MFP_ND`, for `nd_target`).
    Nd,
    /// A neighbor solicitation (type 135, code 0 if matched): `nd_sll`
    /// (`MFP_ND_SOLICIT`).
    NdSolicit,
    /// A neighbor advertisement (type 136, code 0 if matched): `nd_tll`
    /// (`MFP_ND_ADVERT`).
    NdAdvert,
    /// The match says the packet belongs to a valid tracked connection
    /// (OVS's `MFP_CT_VALID`): one of `+new`, `+est`, `+rel`, `+rpl`,
    /// `+snat`, `+dnat`, or `+trk` together with `-inv`. Needed by the
    /// connection tuple fields (`ct_nw_src`, ...).
    CtValid,
    /// [`Prereq::CtValid`] on an IPv4 packet (`ct_nw_src/dst`, OVS's CTv4).
    CtValidIpv4,
    /// [`Prereq::CtValid`] on an IPv6 packet (`ct_ipv6_src/dst`, CTv6).
    CtValidIpv6,
}

impl Prereq {
    /// Does `key` under `mask` (a rule's match) establish this prerequisite?
    /// Only exactly matched `dl_type` / `nw_proto` count, as in OVS.
    pub fn satisfied(self, key: &FlowKey, mask: &FlowKey) -> bool {
        let dl = |t: u16| mask.dl_type == 0xffff && key.dl_type == t;
        let ip = || dl(0x0800) || dl(0x86dd);
        let proto = |p: u8| mask.nw_proto == 0xff && key.nw_proto == p;
        match self {
            Prereq::None => true,
            Prereq::Ip => ip(),
            Prereq::Ipv4 => dl(0x0800),
            Prereq::Ipv6 => dl(0x86dd),
            Prereq::Arp => dl(0x0806) || dl(0x8035),
            Prereq::Ipv4OrArp => dl(0x0800) || dl(0x0806) || dl(0x8035),
            Prereq::TcpUdpSctp => ip() && (proto(6) || proto(17) || proto(132)),
            Prereq::Tcp => ip() && proto(6),
            Prereq::Icmp => dl(0x0800) && proto(1),
            Prereq::Icmpv6 => dl(0x86dd) && proto(58),
            Prereq::AnyIcmp => (dl(0x0800) && proto(1)) || (dl(0x86dd) && proto(58)),
            Prereq::Nd | Prereq::NdSolicit | Prereq::NdAdvert => {
                // ICMP type/code live in tp_src/tp_dst (8 bits used). The
                // key is stored masked, so an unmatched code reads 0.
                let ty = |t: u16| mask.tp_src & 0xff == 0xff && key.tp_src & 0xff == t;
                let code_ok = key.tp_dst & mask.tp_dst & 0xff == 0;
                let types = match self {
                    Prereq::NdSolicit => ty(135),
                    Prereq::NdAdvert => ty(136),
                    _ => ty(135) || ty(136),
                };
                dl(0x86dd) && proto(58) && code_ok && types
            }
            Prereq::CtValid => {
                let set = key.ct_state & mask.ct_state;
                let not_inv = mask.ct_state & 0x10 != 0 && key.ct_state & 0x10 == 0;
                set & 0xcf != 0 || (set & 0x20 != 0 && not_inv)
            }
            Prereq::CtValidIpv4 => Prereq::CtValid.satisfied(key, mask) && dl(0x0800),
            Prereq::CtValidIpv6 => Prereq::CtValid.satisfied(key, mask) && dl(0x86dd),
        }
    }

    /// Does it ask for a valid tracked connection (and so for `ct_state`)?
    pub fn needs_ct(self) -> bool {
        matches!(
            self,
            Prereq::CtValid | Prereq::CtValidIpv4 | Prereq::CtValidIpv6
        )
    }

    /// Human words for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Prereq::None => "nothing",
            Prereq::Ip => "ip or ipv6",
            Prereq::Ipv4 => "ip",
            Prereq::Ipv6 => "ipv6",
            Prereq::Arp => "arp or rarp",
            Prereq::Ipv4OrArp => "ip, arp or rarp",
            Prereq::TcpUdpSctp => "tcp, udp or sctp",
            Prereq::Tcp => "tcp",
            Prereq::Icmp => "icmp",
            Prereq::Icmpv6 => "icmp6",
            Prereq::AnyIcmp => "icmp or icmp6",
            Prereq::Nd => "icmp6 with icmp_type=135 or icmp_type=136 (and icmp_code=0 if matched)",
            Prereq::NdSolicit => "icmp6 with icmp_type=135 (and icmp_code=0 if matched)",
            Prereq::NdAdvert => "icmp6 with icmp_type=136 (and icmp_code=0 if matched)",
            Prereq::CtValid => "ct_state with +trk-inv, +new, +est, +rel, +rpl, +snat or +dnat",
            Prereq::CtValidIpv4 => {
                "ip and ct_state with +trk-inv, +new, +est, +rel, +rpl, +snat or +dnat"
            }
            Prereq::CtValidIpv6 => {
                "ipv6 and ct_state with +trk-inv, +new, +est, +rel, +rpl, +snat or +dnat"
            }
        }
    }
}

/// How a field's value is written in rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// Decimal or 0x-hex integer.
    Int,
    /// Printed in hex (metadata, registers, tun_id, tcp_flags...).
    Hex,
    Mac,
    Ipv4,
    Ipv6,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FieldError {
    #[error("unknown field `{0}`")]
    Unknown(String),
}

/// `tun_metadata0..7`.
const TUN_METADATA: [&str; 8] = [
    "tun_metadata0",
    "tun_metadata1",
    "tun_metadata2",
    "tun_metadata3",
    "tun_metadata4",
    "tun_metadata5",
    "tun_metadata6",
    "tun_metadata7",
];

/// A matchable (and, where [`Field::settable`], writable) field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    InPort,
    Metadata,
    /// `reg0`-`reg15`, 32 bits each.
    Reg(u8),
    /// `xreg0`-`xreg7`: registers 2i (high half) and 2i+1 as one 64-bit
    /// field, as OVS's `flow_get_xreg`.
    XReg(u8),
    /// `xxreg0`-`xxreg3`: registers 4i..4i+3 as one 128-bit field, 4i the
    /// most significant.
    XXReg(u8),
    TunId,
    TunSrc,
    TunDst,
    /// Tunnel flags (`TUN_F_*` of the packet crate: oam 1, df 2, csum 4,
    /// key 8). Matchable, not settable.
    TunFlags,
    /// `tun_metadata0..7`: a 4-byte Geneve option mapped to slot N by the
    /// tunnel port's TLV map (0 when the option is absent).
    TunMetadata(u8),
    DlSrc,
    DlDst,
    DlType,
    VlanTci,
    NwSrc,
    NwDst,
    NwProto,
    NwTos,
    NwTtl,
    NwFrag,
    Ipv6Src,
    Ipv6Dst,
    Ipv6Label,
    TpSrc,
    TpDst,
    TcpFlags,
    ArpOp,
    ArpSpa,
    ArpTpa,
    ArpSha,
    ArpTha,
    IcmpType,
    IcmpCode,
    Icmpv6Type,
    Icmpv6Code,
    /// The target address of an IPv6 neighbor solicitation/advertisement
    /// (`nd_target`, 128 bits; `FlowKey::nd_target`).
    NdTarget,
    /// The source link-layer address option of a neighbor solicitation
    /// (`nd_sll`; stored in `arp_sha`, as in OVS). Zero when absent.
    NdSll,
    /// The target link-layer address option of a neighbor advertisement
    /// (`nd_tll`; stored in `arp_tha`). Zero when absent.
    NdTll,
    /// Connection-tracking state bits filled by a `ct` action (OVS values:
    /// new 0x01, est 0x02, rel 0x04, rpl 0x08, inv 0x10, trk 0x20, snat
    /// 0x40, dnat 0x80). Matchable only: a packet gets them from the tracker.
    CtState,
    CtZone,
    CtMark,
    /// 128 bits, stored in network order.
    CtLabel,
    /// The tracked connection's original-direction tuple.
    CtNwSrc,
    CtNwDst,
    /// The same for IPv6 connections.
    CtIpv6Src,
    CtIpv6Dst,
    CtNwProto,
    CtTpSrc,
    CtTpDst,
    /// OVS's `pkt_mark`: packet metadata (see `FlowKey::pkt_mark`).
    PktMark,
    /// Datapath-only (see `FlowKey::recirc_id`); rules cannot match it.
    RecircId,
    /// OVS's `conj_id`: the id of the complete conjunctive match the packet
    /// is looked up under (see `FlowKey::conj_id`). Matchable, not settable.
    ConjId,
}

/// ct_state flag names in bit order, as `ovs-ofctl` writes them.
pub const CT_STATE_FLAGS: &[(&str, u32)] = &[
    ("new", 0x01),
    ("est", 0x02),
    ("rel", 0x04),
    ("rpl", 0x08),
    ("inv", 0x10),
    ("trk", 0x20),
    ("snat", 0x40),
    ("dnat", 0x80),
];

/// Register `i` (0-15) of a key; indexes wrap rather than panic.
#[inline]
fn reg(k: &FlowKey, i: u8) -> u32 {
    let i = usize::from(i & 15);
    if i < 8 {
        k.regs[i]
    } else {
        k.regs_hi[i - 8]
    }
}

#[inline]
fn reg_mut(k: &mut FlowKey, i: u8) -> &mut u32 {
    let i = usize::from(i & 15);
    if i < 8 {
        &mut k.regs[i]
    } else {
        &mut k.regs_hi[i - 8]
    }
}

impl Field {
    /// Every field, in canonical printing order (OVS prints L2 before L3 before L4).
    pub const ALL: &'static [Field] = &[
        Field::TunId,
        Field::TunSrc,
        Field::TunDst,
        Field::TunFlags,
        Field::TunMetadata(0),
        Field::TunMetadata(1),
        Field::TunMetadata(2),
        Field::TunMetadata(3),
        Field::TunMetadata(4),
        Field::TunMetadata(5),
        Field::TunMetadata(6),
        Field::TunMetadata(7),
        Field::Metadata,
        Field::Reg(0),
        Field::Reg(1),
        Field::Reg(2),
        Field::Reg(3),
        Field::Reg(4),
        Field::Reg(5),
        Field::Reg(6),
        Field::Reg(7),
        Field::Reg(8),
        Field::Reg(9),
        Field::Reg(10),
        Field::Reg(11),
        Field::Reg(12),
        Field::Reg(13),
        Field::Reg(14),
        Field::Reg(15),
        Field::PktMark,
        Field::InPort,
        Field::VlanTci,
        Field::DlSrc,
        Field::DlDst,
        Field::DlType,
        Field::NwSrc,
        Field::NwDst,
        Field::ArpSpa,
        Field::ArpTpa,
        Field::Ipv6Src,
        Field::Ipv6Dst,
        Field::Ipv6Label,
        Field::NwProto,
        Field::ArpOp,
        Field::NwTos,
        Field::NwTtl,
        Field::NwFrag,
        Field::ArpSha,
        Field::ArpTha,
        Field::TpSrc,
        Field::TpDst,
        Field::IcmpType,
        Field::IcmpCode,
        Field::Icmpv6Type,
        Field::Icmpv6Code,
        Field::NdTarget,
        Field::NdSll,
        Field::NdTll,
        Field::TcpFlags,
        Field::RecircId,
        Field::ConjId,
        Field::CtState,
        Field::CtZone,
        Field::CtMark,
        Field::CtLabel,
        Field::CtNwSrc,
        Field::CtNwDst,
        Field::CtIpv6Src,
        Field::CtIpv6Dst,
        Field::CtNwProto,
        Field::CtTpSrc,
        Field::CtTpDst,
    ];

    /// The `ovs-ofctl` name.
    pub fn name(self) -> &'static str {
        const REGS: [&str; 16] = [
            "reg0", "reg1", "reg2", "reg3", "reg4", "reg5", "reg6", "reg7", "reg8", "reg9",
            "reg10", "reg11", "reg12", "reg13", "reg14", "reg15",
        ];
        const XREGS: [&str; 8] = [
            "xreg0", "xreg1", "xreg2", "xreg3", "xreg4", "xreg5", "xreg6", "xreg7",
        ];
        const XXREGS: [&str; 4] = ["xxreg0", "xxreg1", "xxreg2", "xxreg3"];
        match self {
            Field::InPort => "in_port",
            Field::Metadata => "metadata",
            Field::Reg(i) => REGS[(i & 15) as usize],
            Field::XReg(i) => XREGS[(i & 7) as usize],
            Field::XXReg(i) => XXREGS[(i & 3) as usize],
            Field::TunId => "tun_id",
            Field::TunSrc => "tun_src",
            Field::TunDst => "tun_dst",
            Field::TunFlags => "tun_flags",
            Field::TunMetadata(i) => TUN_METADATA[(i & 7) as usize],
            Field::DlSrc => "dl_src",
            Field::DlDst => "dl_dst",
            Field::DlType => "dl_type",
            Field::VlanTci => "vlan_tci",
            Field::NwSrc => "nw_src",
            Field::NwDst => "nw_dst",
            Field::NwProto => "nw_proto",
            Field::NwTos => "nw_tos",
            Field::NwTtl => "nw_ttl",
            Field::NwFrag => "nw_frag",
            Field::Ipv6Src => "ipv6_src",
            Field::Ipv6Dst => "ipv6_dst",
            Field::Ipv6Label => "ipv6_label",
            Field::TpSrc => "tp_src",
            Field::TpDst => "tp_dst",
            Field::TcpFlags => "tcp_flags",
            Field::ArpOp => "arp_op",
            Field::ArpSpa => "arp_spa",
            Field::ArpTpa => "arp_tpa",
            Field::ArpSha => "arp_sha",
            Field::ArpTha => "arp_tha",
            Field::IcmpType => "icmp_type",
            Field::IcmpCode => "icmp_code",
            Field::Icmpv6Type => "icmpv6_type",
            Field::Icmpv6Code => "icmpv6_code",
            Field::NdTarget => "nd_target",
            Field::NdSll => "nd_sll",
            Field::NdTll => "nd_tll",
            Field::CtState => "ct_state",
            Field::CtZone => "ct_zone",
            Field::CtMark => "ct_mark",
            Field::CtLabel => "ct_label",
            Field::CtNwSrc => "ct_nw_src",
            Field::CtNwDst => "ct_nw_dst",
            Field::CtIpv6Src => "ct_ipv6_src",
            Field::CtIpv6Dst => "ct_ipv6_dst",
            Field::PktMark => "pkt_mark",
            Field::CtNwProto => "ct_nw_proto",
            Field::CtTpSrc => "ct_tp_src",
            Field::CtTpDst => "ct_tp_dst",
            Field::RecircId => "recirc_id",
            Field::ConjId => "conj_id",
        }
    }

    /// Look a field up by any of its names (ovs-ofctl and OXM-style aliases).
    pub fn from_name(name: &str) -> Result<Field, FieldError> {
        let f = match name {
            "in_port" => Field::InPort,
            "metadata" => Field::Metadata,
            "tun_id" | "tunnel_id" => Field::TunId,
            "tun_src" => Field::TunSrc,
            "tun_dst" => Field::TunDst,
            "tun_flags" => Field::TunFlags,
            "dl_src" | "eth_src" => Field::DlSrc,
            "dl_dst" | "eth_dst" => Field::DlDst,
            "dl_type" | "eth_type" => Field::DlType,
            "vlan_tci" => Field::VlanTci,
            "nw_src" | "ip_src" => Field::NwSrc,
            "nw_dst" | "ip_dst" => Field::NwDst,
            "nw_proto" | "ip_proto" => Field::NwProto,
            "nw_tos" => Field::NwTos,
            "nw_ttl" => Field::NwTtl,
            "nw_frag" => Field::NwFrag,
            "ipv6_src" => Field::Ipv6Src,
            "ipv6_dst" => Field::Ipv6Dst,
            "ipv6_label" => Field::Ipv6Label,
            "tp_src" => Field::TpSrc,
            "tp_dst" => Field::TpDst,
            "tcp_flags" => Field::TcpFlags,
            "arp_op" => Field::ArpOp,
            "arp_spa" => Field::ArpSpa,
            "arp_tpa" => Field::ArpTpa,
            "arp_sha" => Field::ArpSha,
            "arp_tha" => Field::ArpTha,
            "icmp_type" => Field::IcmpType,
            "icmp_code" => Field::IcmpCode,
            "icmpv6_type" => Field::Icmpv6Type,
            "icmpv6_code" => Field::Icmpv6Code,
            "nd_target" | "ipv6_nd_target" | "NXM_NX_ND_TARGET" | "OXM_OF_IPV6_ND_TARGET" => {
                Field::NdTarget
            }
            "nd_sll" | "ipv6_nd_sll" | "NXM_NX_ND_SLL" | "OXM_OF_IPV6_ND_SLL" => Field::NdSll,
            "nd_tll" | "ipv6_nd_tll" | "NXM_NX_ND_TLL" | "OXM_OF_IPV6_ND_TLL" => Field::NdTll,
            "ct_state" | "NXM_NX_CT_STATE" => Field::CtState,
            "ct_zone" | "NXM_NX_CT_ZONE" => Field::CtZone,
            "ct_mark" | "NXM_NX_CT_MARK" => Field::CtMark,
            "ct_label" | "NXM_NX_CT_LABEL" => Field::CtLabel,
            "ct_nw_src" | "NXM_NX_CT_NW_SRC" => Field::CtNwSrc,
            "ct_nw_dst" | "NXM_NX_CT_NW_DST" => Field::CtNwDst,
            "ct_ipv6_src" | "NXM_NX_CT_IPV6_SRC" => Field::CtIpv6Src,
            "ct_ipv6_dst" | "NXM_NX_CT_IPV6_DST" => Field::CtIpv6Dst,
            "pkt_mark" | "NXM_NX_PKT_MARK" => Field::PktMark,
            "ct_nw_proto" | "NXM_NX_CT_NW_PROTO" => Field::CtNwProto,
            "ct_tp_src" | "NXM_NX_CT_TP_SRC" => Field::CtTpSrc,
            "ct_tp_dst" | "NXM_NX_CT_TP_DST" => Field::CtTpDst,
            "recirc_id" => Field::RecircId,
            "conj_id" => Field::ConjId,
            "NXM_OF_IN_PORT" | "OXM_OF_IN_PORT" => Field::InPort,
            "OXM_OF_METADATA" => Field::Metadata,
            "NXM_OF_ETH_SRC" | "OXM_OF_ETH_SRC" => Field::DlSrc,
            "NXM_OF_ETH_DST" | "OXM_OF_ETH_DST" => Field::DlDst,
            "NXM_OF_ETH_TYPE" | "OXM_OF_ETH_TYPE" => Field::DlType,
            "NXM_OF_IP_SRC" | "OXM_OF_IPV4_SRC" => Field::NwSrc,
            "NXM_OF_IP_DST" | "OXM_OF_IPV4_DST" => Field::NwDst,
            "NXM_OF_IP_PROTO" | "OXM_OF_IP_PROTO" => Field::NwProto,
            "NXM_OF_TCP_SRC" | "NXM_OF_UDP_SRC" | "OXM_OF_TCP_SRC" | "OXM_OF_UDP_SRC" => {
                Field::TpSrc
            }
            "NXM_OF_TCP_DST" | "NXM_OF_UDP_DST" | "OXM_OF_TCP_DST" | "OXM_OF_UDP_DST" => {
                Field::TpDst
            }
            "NXM_NX_IPV6_SRC" | "OXM_OF_IPV6_SRC" => Field::Ipv6Src,
            "NXM_NX_IPV6_DST" | "OXM_OF_IPV6_DST" => Field::Ipv6Dst,
            "NXM_NX_TUN_ID" => Field::TunId,
            _ => {
                // Register families: (prefixes, count, constructor).
                type Family = (&'static [&'static str], u8, fn(u8) -> Field);
                const FAMILIES: [Family; 3] = [
                    (&["NXM_NX_REG", "reg"], 16, Field::Reg),
                    (&["OXM_OF_PKT_REG", "xreg"], 8, Field::XReg),
                    (&["NXM_NX_XXREG", "xxreg"], 4, Field::XXReg),
                ];
                for (prefixes, count, make) in FAMILIES {
                    for p in prefixes {
                        if let Some(n) = name.strip_prefix(p) {
                            let canonical = n.len() == 1 || (n.len() == 2 && !n.starts_with('0'));
                            if let Ok(i) = n.parse::<u8>() {
                                if i < count && canonical {
                                    return Ok(make(i));
                                }
                            }
                        }
                    }
                }
                if let Some(i) = TUN_METADATA.iter().position(|n| *n == name) {
                    return Ok(Field::TunMetadata(i as u8));
                }
                return Err(FieldError::Unknown(name.to_string()));
            }
        };
        Ok(f)
    }

    /// Width in bits; values and masks wider than this are out of range.
    pub fn bits(self) -> u32 {
        match self {
            Field::InPort => 32,
            Field::Metadata | Field::TunId => 64,
            Field::Reg(_) | Field::TunSrc | Field::TunDst | Field::TunMetadata(_) => 32,
            Field::XReg(_) => 64,
            Field::XXReg(_) => 128,
            Field::DlSrc
            | Field::DlDst
            | Field::ArpSha
            | Field::ArpTha
            | Field::NdSll
            | Field::NdTll => 48,
            Field::NdTarget => 128,
            Field::DlType | Field::VlanTci | Field::TpSrc | Field::TpDst | Field::TunFlags => 16,
            Field::NwSrc | Field::NwDst | Field::ArpSpa | Field::ArpTpa => 32,
            Field::NwProto | Field::NwTos | Field::NwTtl => 8,
            Field::ArpOp => 8,
            Field::NwFrag => 2,
            Field::Ipv6Src | Field::Ipv6Dst => 128,
            Field::Ipv6Label => 20,
            Field::TcpFlags => 12,
            Field::IcmpType | Field::IcmpCode | Field::Icmpv6Type | Field::Icmpv6Code => 8,
            Field::CtState
            | Field::CtMark
            | Field::CtNwSrc
            | Field::CtNwDst
            | Field::RecircId
            | Field::ConjId
            | Field::PktMark => 32,
            Field::CtIpv6Src | Field::CtIpv6Dst => 128,
            Field::CtZone | Field::CtTpSrc | Field::CtTpDst => 16,
            Field::CtNwProto => 8,
            Field::CtLabel => 128,
        }
    }

    /// All-ones mask of this field's width.
    pub fn full_mask(self) -> u128 {
        let b = self.bits();
        if b == 128 {
            u128::MAX
        } else {
            (1u128 << b) - 1
        }
    }

    pub fn prereq(self) -> Prereq {
        match self {
            Field::NwSrc | Field::NwDst => Prereq::Ipv4OrArp,
            Field::NwProto | Field::NwTos | Field::NwTtl | Field::NwFrag => Prereq::Ip,
            Field::Ipv6Src | Field::Ipv6Dst | Field::Ipv6Label => Prereq::Ipv6,
            Field::TpSrc | Field::TpDst => Prereq::TcpUdpSctp,
            Field::TcpFlags => Prereq::Tcp,
            Field::ArpOp | Field::ArpSpa | Field::ArpTpa | Field::ArpSha | Field::ArpTha => {
                Prereq::Arp
            }
            Field::IcmpType | Field::IcmpCode => Prereq::Icmp,
            Field::Icmpv6Type | Field::Icmpv6Code => Prereq::Icmpv6,
            Field::NdTarget => Prereq::Nd,
            Field::NdSll => Prereq::NdSolicit,
            Field::NdTll => Prereq::NdAdvert,
            Field::CtNwSrc | Field::CtNwDst => Prereq::CtValidIpv4,
            Field::CtIpv6Src | Field::CtIpv6Dst => Prereq::CtValidIpv6,
            Field::CtNwProto | Field::CtTpSrc | Field::CtTpDst => Prereq::CtValid,
            _ => Prereq::None,
        }
    }

    /// May `set_field` write it? (Fields derived from parsing — frag bits,
    /// TCP flags, dl_type — may not, as in OVS.) `ipv6_label` may not
    /// either, unlike OVS: nicflow's datapaths have no flow-label rewrite,
    /// and a write that is accepted and does nothing is worse than a
    /// refusal (`OFPBAC_BAD_SET_ARGUMENT` over OpenFlow).
    pub fn settable(self) -> bool {
        !matches!(
            self,
            Field::DlType
                | Field::Ipv6Label
                | Field::NwFrag
                | Field::TcpFlags
                | Field::NwProto
                | Field::TunFlags
                | Field::CtState
                | Field::CtZone
                | Field::CtMark
                | Field::CtLabel
                | Field::CtNwSrc
                | Field::CtNwDst
                | Field::CtIpv6Src
                | Field::CtIpv6Dst
                | Field::CtNwProto
                | Field::CtTpSrc
                | Field::CtTpDst
                | Field::RecircId
                | Field::ConjId
        )
    }

    pub fn kind(self) -> ValueKind {
        match self {
            Field::DlSrc
            | Field::DlDst
            | Field::ArpSha
            | Field::ArpTha
            | Field::NdSll
            | Field::NdTll => ValueKind::Mac,
            Field::NwSrc
            | Field::NwDst
            | Field::ArpSpa
            | Field::ArpTpa
            | Field::TunSrc
            | Field::TunDst
            | Field::CtNwSrc
            | Field::CtNwDst => ValueKind::Ipv4,
            Field::Ipv6Src
            | Field::Ipv6Dst
            | Field::CtIpv6Src
            | Field::CtIpv6Dst
            | Field::NdTarget => ValueKind::Ipv6,
            Field::Metadata
            | Field::Reg(_)
            | Field::XReg(_)
            | Field::XXReg(_)
            | Field::TunMetadata(_)
            | Field::TunId
            | Field::VlanTci
            | Field::DlType
            | Field::TcpFlags
            | Field::TunFlags
            | Field::Ipv6Label
            | Field::CtState
            | Field::CtMark
            | Field::CtLabel
            | Field::PktMark
            | Field::RecircId => ValueKind::Hex,
            _ => ValueKind::Int,
        }
    }

    /// Read the field from a key, right-aligned and limited to the field's
    /// width (ICMP type/code live in 16-bit storage but are 8 bits wide).
    #[inline]
    pub fn read(self, k: &FlowKey) -> u128 {
        self.read_storage(k) & self.full_mask()
    }

    #[inline]
    fn read_storage(self, k: &FlowKey) -> u128 {
        let mac = |m: &[u8; 6]| {
            let mut b = [0u8; 8];
            b[2..].copy_from_slice(m);
            u64::from_be_bytes(b) as u128
        };
        match self {
            Field::InPort => k.in_port as u128,
            Field::Metadata => k.metadata as u128,
            Field::Reg(i) => reg(k, i) as u128,
            Field::XReg(i) => ((reg(k, 2 * i) as u128) << 32) | reg(k, 2 * i + 1) as u128,
            Field::XXReg(i) => (0..4).fold(0u128, |v, j| (v << 32) | reg(k, 4 * i + j) as u128),
            Field::TunId => k.tun_id as u128,
            Field::TunSrc => k.tun_src as u128,
            Field::TunDst => k.tun_dst as u128,
            Field::TunFlags => k.tun_flags as u128,
            Field::TunMetadata(i) => k.tun_metadata[(i & 7) as usize] as u128,
            Field::DlSrc => mac(&k.dl_src),
            Field::DlDst => mac(&k.dl_dst),
            Field::ArpSha | Field::NdSll => mac(&k.arp_sha),
            Field::ArpTha | Field::NdTll => mac(&k.arp_tha),
            Field::NdTarget => u128::from_be_bytes(k.nd_target),
            Field::DlType => k.dl_type as u128,
            Field::VlanTci => k.vlan_tci as u128,
            Field::NwSrc | Field::ArpSpa => k.nw_src as u128,
            Field::NwDst | Field::ArpTpa => k.nw_dst as u128,
            Field::NwProto | Field::ArpOp => k.nw_proto as u128,
            Field::NwTos => k.nw_tos as u128,
            Field::NwTtl => k.nw_ttl as u128,
            Field::NwFrag => k.nw_frag as u128,
            Field::Ipv6Src => u128::from_be_bytes(k.ipv6_src),
            Field::Ipv6Dst => u128::from_be_bytes(k.ipv6_dst),
            Field::Ipv6Label => k.ipv6_label as u128,
            Field::TpSrc | Field::IcmpType | Field::Icmpv6Type => k.tp_src as u128,
            Field::TpDst | Field::IcmpCode | Field::Icmpv6Code => k.tp_dst as u128,
            Field::TcpFlags => k.tcp_flags as u128,
            Field::CtState => k.ct_state as u128,
            Field::CtZone => k.ct_zone as u128,
            Field::CtMark => k.ct_mark as u128,
            Field::CtLabel => u128::from_be_bytes(k.ct_label),
            Field::CtNwSrc => k.ct_nw_src as u128,
            Field::CtNwDst => k.ct_nw_dst as u128,
            Field::CtIpv6Src => u128::from_be_bytes(k.ct_ipv6_src),
            Field::CtIpv6Dst => u128::from_be_bytes(k.ct_ipv6_dst),
            Field::PktMark => k.pkt_mark as u128,
            Field::CtNwProto => k.ct_nw_proto as u128,
            Field::CtTpSrc => k.ct_tp_src as u128,
            Field::CtTpDst => k.ct_tp_dst as u128,
            Field::RecircId => k.recirc_id as u128,
            Field::ConjId => k.conj_id as u128,
        }
    }

    /// Write the field into a key; bits beyond the field's width are ignored.
    #[inline]
    pub fn write(self, k: &mut FlowKey, v: u128) {
        let v = v & self.full_mask();
        let mac = |v: u128| {
            let b = (v as u64).to_be_bytes();
            let mut m = [0u8; 6];
            m.copy_from_slice(&b[2..]);
            m
        };
        match self {
            Field::InPort => k.in_port = v as u32,
            Field::Metadata => k.metadata = v as u64,
            Field::Reg(i) => *reg_mut(k, i) = v as u32,
            Field::XReg(i) => {
                *reg_mut(k, 2 * i) = (v >> 32) as u32;
                *reg_mut(k, 2 * i + 1) = v as u32;
            }
            Field::XXReg(i) => {
                for j in 0..4u8 {
                    *reg_mut(k, 4 * i + j) = (v >> (32 * (3 - j))) as u32;
                }
            }
            Field::TunId => k.tun_id = v as u64,
            Field::TunSrc => k.tun_src = v as u32,
            Field::TunDst => k.tun_dst = v as u32,
            Field::TunFlags => k.tun_flags = v as u16,
            Field::TunMetadata(i) => k.tun_metadata[(i & 7) as usize] = v as u32,
            Field::DlSrc => k.dl_src = mac(v),
            Field::DlDst => k.dl_dst = mac(v),
            Field::ArpSha | Field::NdSll => k.arp_sha = mac(v),
            Field::ArpTha | Field::NdTll => k.arp_tha = mac(v),
            Field::NdTarget => k.nd_target = v.to_be_bytes(),
            Field::DlType => k.dl_type = v as u16,
            Field::VlanTci => k.vlan_tci = v as u16,
            Field::NwSrc | Field::ArpSpa => k.nw_src = v as u32,
            Field::NwDst | Field::ArpTpa => k.nw_dst = v as u32,
            Field::NwProto | Field::ArpOp => k.nw_proto = v as u8,
            Field::NwTos => k.nw_tos = v as u8,
            Field::NwTtl => k.nw_ttl = v as u8,
            Field::NwFrag => k.nw_frag = v as u8,
            Field::Ipv6Src => k.ipv6_src = v.to_be_bytes(),
            Field::Ipv6Dst => k.ipv6_dst = v.to_be_bytes(),
            Field::Ipv6Label => k.ipv6_label = v as u32,
            Field::TpSrc | Field::IcmpType | Field::Icmpv6Type => k.tp_src = v as u16,
            Field::TpDst | Field::IcmpCode | Field::Icmpv6Code => k.tp_dst = v as u16,
            Field::TcpFlags => k.tcp_flags = v as u16,
            Field::CtState => k.ct_state = v as u32,
            Field::CtZone => k.ct_zone = v as u16,
            Field::CtMark => k.ct_mark = v as u32,
            Field::CtLabel => k.ct_label = v.to_be_bytes(),
            Field::CtNwSrc => k.ct_nw_src = v as u32,
            Field::CtNwDst => k.ct_nw_dst = v as u32,
            Field::CtIpv6Src => k.ct_ipv6_src = v.to_be_bytes(),
            Field::CtIpv6Dst => k.ct_ipv6_dst = v.to_be_bytes(),
            Field::PktMark => k.pkt_mark = v as u32,
            Field::CtNwProto => k.ct_nw_proto = v as u8,
            Field::CtTpSrc => k.ct_tp_src = v as u16,
            Field::CtTpDst => k.ct_tp_dst = v as u16,
            Field::RecircId => k.recirc_id = v as u32,
            Field::ConjId => k.conj_id = v as u32,
        }
    }

    /// Print a value the way `ovs-ofctl` does for this field.
    pub fn fmt_value(self, v: u128, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            ValueKind::Int => write!(f, "{v}"),
            ValueKind::Hex => write!(f, "{v:#x}"),
            ValueKind::Ipv4 => write!(f, "{}", Ipv4Addr::from(v as u32)),
            ValueKind::Ipv6 => write!(f, "{}", Ipv6Addr::from(v)),
            ValueKind::Mac => {
                let b = (v as u64).to_be_bytes();
                write!(
                    f,
                    "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                    b[2], b[3], b[4], b[5], b[6], b[7]
                )
            }
        }
    }

    /// [`Field::fmt_value`] into a `String`.
    pub fn value_to_string(self, v: u128) -> String {
        struct D(Field, u128);
        impl fmt::Display for D {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt_value(self.1, f)
            }
        }
        D(self, v).to_string()
    }
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    #[test]
    fn read_write_every_field() {
        for &f in Field::ALL {
            let mut k = FlowKey::default();
            let v = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128 & f.full_mask();
            f.write(&mut k, v);
            assert_eq!(f.read(&k), v, "{}", f.name());
            assert_eq!(Field::from_name(f.name()).unwrap(), f);
        }
    }

    #[test]
    fn mac_printing() {
        let mut k = FlowKey::default();
        k.dl_src = [0, 0x11, 0x22, 0x33, 0x44, 0xff];
        assert_eq!(
            Field::DlSrc.value_to_string(Field::DlSrc.read(&k)),
            "00:11:22:33:44:ff"
        );
    }

    #[test]
    fn prereqs() {
        let mut k = FlowKey::default();
        let mut m = FlowKey::default();
        assert!(!Prereq::TcpUdpSctp.satisfied(&k, &m));
        k.dl_type = 0x0800;
        m.dl_type = 0xffff;
        k.nw_proto = 17;
        m.nw_proto = 0xff;
        assert!(Prereq::TcpUdpSctp.satisfied(&k, &m));
        assert!(!Prereq::Tcp.satisfied(&k, &m));
        assert!(Prereq::Ipv4OrArp.satisfied(&k, &m));
    }

    /// OVN installs `rarp,arp_op=3` (OVS's MFP_ARP is ARP or RARP); it was
    /// refused with OFPBMC_BAD_PREREQ.
    #[test]
    fn rarp_satisfies_arp_fields() {
        let mut k = FlowKey::default();
        let mut m = FlowKey::default();
        m.dl_type = 0xffff;
        for (t, ok) in [(0x0806, true), (0x8035, true), (0x0800, false)] {
            k.dl_type = t;
            assert_eq!(Field::ArpOp.prereq().satisfied(&k, &m), ok, "{t:#x}");
        }
    }

    #[test]
    fn nd_prereqs() {
        let mut k = FlowKey {
            dl_type: 0x86dd,
            nw_proto: 58,
            ..FlowKey::default()
        };
        let mut m = FlowKey {
            dl_type: 0xffff,
            nw_proto: 0xff,
            ..FlowKey::default()
        };
        // The type must be matched.
        assert!(!Prereq::Nd.satisfied(&k, &m));
        k.tp_src = 135;
        m.tp_src = 0xff;
        assert!(Prereq::Nd.satisfied(&k, &m));
        assert!(Prereq::NdSolicit.satisfied(&k, &m));
        assert!(!Prereq::NdAdvert.satisfied(&k, &m));
        // A matched code must be 0.
        m.tp_dst = 0xff;
        assert!(Prereq::Nd.satisfied(&k, &m));
        k.tp_dst = 1;
        assert!(!Prereq::Nd.satisfied(&k, &m));
        k.tp_dst = 0;
        k.tp_src = 136;
        assert!(Prereq::NdAdvert.satisfied(&k, &m));
        assert!(!Prereq::NdSolicit.satisfied(&k, &m));
        k.tp_src = 128;
        assert!(!Prereq::Nd.satisfied(&k, &m));
        // ICMP (v4) type 135 is not ND.
        k.tp_src = 135;
        k.dl_type = 0x0800;
        k.nw_proto = 1;
        assert!(!Prereq::Nd.satisfied(&k, &m));
        // nd_sll and arp_sha share storage, as in OVS.
        let mut key = FlowKey::default();
        Field::NdSll.write(&mut key, 0x0200_0000_0001);
        assert_eq!(key.arp_sha, [2, 0, 0, 0, 0, 1]);
        assert_eq!(Field::ArpSha.read(&key), 0x0200_0000_0001);
        Field::NdTarget.write(&mut key, 1);
        assert_eq!(key.nd_target[15], 1);
    }
}
