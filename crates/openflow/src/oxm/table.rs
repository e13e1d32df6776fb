//! The OXM/NXM fields nicflow understands: wire ids, sizes, prerequisites
//! and where each lands in a nicflow [`Field`].
//!
//! Numbers are Open vSwitch's (`include/openvswitch/meta-flow.h`): NXM
//! class 0x0000 (`NXM_OF_*`) and 0x0001 (`NXM_NX_*`), OpenFlow basic class
//! 0x8000 (`OXM_OF_*`), packet registers 0x8001 (`OXM_OF_PKT_REG*`, the
//! 64-bit `xreg`s) and the ONF experimenter field `ONFOXM_ET_TCP_FLAGS`.
//! Several wire fields may share one nicflow field, at a shift and under a
//! bit mask: OXM `ip_dscp` is the 6 high bits of `nw_tos`, `vlan_pcp` bits
//! 13-15 of `vlan_tci`, `vlan_vid` its low 13 bits (OFPVID_PRESENT 0x1000
//! is the same bit as nicflow's "tag present" `VLAN_CFI`).

use nicflow_flow::{Field, FlowKey, Prereq};

pub const CLASS_NXM0: u16 = 0x0000;
pub const CLASS_NXM1: u16 = 0x0001;
pub const CLASS_BASIC: u16 = 0x8000;
pub const CLASS_PKT_REGS: u16 = 0x8001;
pub const CLASS_EXPERIMENTER: u16 = 0xffff;
/// `ONF_VENDOR_ID`.
pub const ONF_EXPERIMENTER: u32 = 0x4f4e_4600;
/// `NX_VENDOR_ID`.
pub const NX_EXPERIMENTER: u32 = 0x0000_2320;

/// Which field an OXM/NXM header names, without its mask bit and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OxmId {
    pub class: u16,
    /// 7 bits.
    pub field: u8,
    /// Only for class 0xffff.
    pub experimenter: Option<u32>,
}

const fn nxm0(field: u8) -> Option<OxmId> {
    Some(OxmId {
        class: CLASS_NXM0,
        field,
        experimenter: None,
    })
}
const fn nxm1(field: u8) -> Option<OxmId> {
    Some(OxmId {
        class: CLASS_NXM1,
        field,
        experimenter: None,
    })
}
const fn basic(field: u8) -> Option<OxmId> {
    Some(OxmId {
        class: CLASS_BASIC,
        field,
        experimenter: None,
    })
}

/// What a match must establish before a field may appear (OVS's
/// `mf_prereqs`, restricted to what nicflow parses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pre {
    None,
    /// `vlan_vid` matched with OFPVID_PRESENT set.
    VlanVid,
    Ip,
    Ipv4,
    Ipv6,
    Arp,
    Tcp,
    Udp,
    Sctp,
    Icmpv4,
    Icmpv6,
    /// An IPv6 neighbor solicitation or advertisement (`nd_target`).
    Nd,
    /// A neighbor solicitation (`nd_sll`).
    NdSolicit,
    /// A neighbor advertisement (`nd_tll`).
    NdAdvert,
    /// A valid tracked connection (`ct_state` with +trk-inv, +new, ...).
    Ct,
    /// ... of an IPv4 packet.
    CtIpv4,
    /// ... of an IPv6 packet.
    CtIpv6,
}

impl Pre {
    pub fn satisfied(self, key: &FlowKey, mask: &FlowKey) -> bool {
        let ip_proto =
            |p: u8| Prereq::Ip.satisfied(key, mask) && mask.nw_proto == 0xff && key.nw_proto == p;
        match self {
            Pre::None => true,
            Pre::VlanVid => mask.vlan_tci & 0x1000 != 0 && key.vlan_tci & 0x1000 != 0,
            Pre::Ip => Prereq::Ip.satisfied(key, mask),
            Pre::Ipv4 => Prereq::Ipv4.satisfied(key, mask),
            Pre::Ipv6 => Prereq::Ipv6.satisfied(key, mask),
            Pre::Arp => Prereq::Arp.satisfied(key, mask),
            Pre::Tcp => ip_proto(6),
            Pre::Udp => ip_proto(17),
            Pre::Sctp => ip_proto(132),
            Pre::Icmpv4 => Prereq::Icmp.satisfied(key, mask),
            Pre::Icmpv6 => Prereq::Icmpv6.satisfied(key, mask),
            Pre::Nd => Prereq::Nd.satisfied(key, mask),
            Pre::NdSolicit => Prereq::NdSolicit.satisfied(key, mask),
            Pre::NdAdvert => Prereq::NdAdvert.satisfied(key, mask),
            Pre::Ct => Prereq::CtValid.satisfied(key, mask),
            Pre::CtIpv4 => Prereq::CtValidIpv4.satisfied(key, mask),
            Pre::CtIpv6 => Prereq::CtValidIpv6.satisfied(key, mask),
        }
    }
}

/// A field as OpenFlow names it on the wire. Some nicflow fields have
/// several wire names (`NXM_OF_TCP_SRC`, `OXM_OF_TCP_SRC`, `OXM_OF_UDP_SRC`
/// all land in `tp_src`), some wire fields are parts of one nicflow field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OxmField {
    /// `OXM_OF_IN_PORT`, 32-bit port.
    InPort,
    /// `NXM_OF_IN_PORT`, 16-bit OpenFlow 1.0 port (0xff00.. are reserved
    /// ports, widened to 0xffffff00..).
    NxInPort,
    Metadata,
    EthDst,
    EthSrc,
    EthType,
    /// `NXM_OF_VLAN_TCI`: the whole TCI with the "present" bit.
    VlanTci,
    /// `OXM_OF_VLAN_VID`: VID | OFPVID_PRESENT.
    VlanVid,
    VlanPcp,
    /// `NXM_OF_IP_TOS`: the TOS byte's DSCP bits in place (`tos & 0xfc`).
    IpTos,
    /// `OXM_OF_IP_DSCP`: DSCP shifted down (0..63).
    IpDscp,
    IpEcn,
    IpTtl,
    IpFrag,
    IpProto,
    Ipv4Src,
    Ipv4Dst,
    TcpSrc,
    TcpDst,
    UdpSrc,
    UdpDst,
    SctpSrc,
    SctpDst,
    Icmpv4Type,
    Icmpv4Code,
    ArpOp,
    ArpSpa,
    ArpTpa,
    ArpSha,
    ArpTha,
    Ipv6Src,
    Ipv6Dst,
    Ipv6Label,
    Icmpv6Type,
    Icmpv6Code,
    /// `OXM_OF_IPV6_ND_TARGET` / `NXM_NX_ND_TARGET`.
    NdTarget,
    /// `OXM_OF_IPV6_ND_SLL` / `NXM_NX_ND_SLL`.
    NdSll,
    /// `OXM_OF_IPV6_ND_TLL` / `NXM_NX_ND_TLL`.
    NdTll,
    TunId,
    TunSrc,
    TunDst,
    /// Only the OAM flag (bit 0) is public in OVS.
    TunFlags,
    /// `NXM_NX_TUN_METADATA0..7`, 4 bytes each in nicflow.
    TunMetadata(u8),
    /// `NXM_NX_REG0..15`.
    Reg(u8),
    /// `OXM_OF_PKT_REG0..7` (= `xreg0..7`).
    XReg(u8),
    /// `NXM_NX_XXREG0..3`.
    XXReg(u8),
    TcpFlags,
    CtState,
    CtZone,
    CtMark,
    CtLabel,
    CtNwProto,
    CtNwSrc,
    CtNwDst,
    CtIpv6Src,
    CtIpv6Dst,
    CtTpSrc,
    CtTpDst,
    /// `NXM_NX_PKT_MARK`.
    PktMark,
    /// `NXM_NX_CONJ_ID` (not maskable).
    ConjId,
}

/// Static facts about one [`OxmField`].
#[derive(Clone, Copy, Debug)]
pub struct Def {
    pub name: &'static str,
    /// Value size on the wire, in bytes.
    pub bytes: u8,
    pub maskable: bool,
    /// Legacy NXM header (class 0 or 1), if any.
    pub nxm: Option<OxmId>,
    /// Standard or experimenter OXM header usable in OpenFlow 1.3, if any.
    pub oxm: Option<OxmId>,
    pub pre: Pre,
    /// Where the value lands in nicflow: `(wire << shift) & bits` of `field`.
    pub field: Field,
    pub shift: u8,
    pub bits: u128,
    /// Wire values with bits outside this are `OFPBMC_BAD_VALUE`.
    pub valid: u128,
}

const fn ones(bytes: u8) -> u128 {
    if bytes >= 16 {
        u128::MAX
    } else {
        (1u128 << (bytes as u32 * 8)) - 1
    }
}

#[allow(clippy::too_many_arguments)]
const fn d(
    name: &'static str,
    bytes: u8,
    maskable: bool,
    nxm: Option<OxmId>,
    oxm: Option<OxmId>,
    pre: Pre,
    field: Field,
) -> Def {
    Def {
        name,
        bytes,
        maskable,
        nxm,
        oxm,
        pre,
        field,
        shift: 0,
        bits: ones(bytes),
        valid: ones(bytes),
    }
}

impl OxmField {
    /// Every field, in no particular order (lookups scan this).
    pub fn all() -> impl Iterator<Item = OxmField> {
        use OxmField::*;
        const FIXED: &[OxmField] = &[
            InPort, NxInPort, Metadata, EthDst, EthSrc, EthType, VlanTci, VlanVid, VlanPcp, IpTos,
            IpDscp, IpEcn, IpTtl, IpFrag, IpProto, Ipv4Src, Ipv4Dst, TcpSrc, TcpDst, UdpSrc,
            UdpDst, SctpSrc, SctpDst, Icmpv4Type, Icmpv4Code, ArpOp, ArpSpa, ArpTpa, ArpSha,
            ArpTha, Ipv6Src, Ipv6Dst, Ipv6Label, Icmpv6Type, Icmpv6Code, NdTarget, NdSll, NdTll,
            TunId, TunSrc, TunDst, TunFlags, TcpFlags, CtState, CtZone, CtMark, CtLabel, CtNwProto,
            CtNwSrc, CtNwDst, CtIpv6Src, CtIpv6Dst, CtTpSrc, CtTpDst, PktMark, ConjId,
        ];
        FIXED
            .iter()
            .copied()
            .chain((0..8).map(TunMetadata))
            .chain((0..16).map(Reg))
            .chain((0..8).map(XReg))
            .chain((0..4).map(XXReg))
    }

    pub fn def(self) -> Def {
        use OxmField as F;
        use Pre as P;
        match self {
            F::InPort => d("in_port", 4, false, None, basic(0), P::None, Field::InPort),
            F::NxInPort => Def {
                bits: 0xffff_ffff,
                ..d("in_port", 2, false, nxm0(0), None, P::None, Field::InPort)
            },
            F::Metadata => d(
                "metadata",
                8,
                true,
                None,
                basic(2),
                P::None,
                Field::Metadata,
            ),
            F::EthDst => d("eth_dst", 6, true, nxm0(1), basic(3), P::None, Field::DlDst),
            F::EthSrc => d("eth_src", 6, true, nxm0(2), basic(4), P::None, Field::DlSrc),
            F::EthType => d(
                "eth_type",
                2,
                false,
                nxm0(3),
                basic(5),
                P::None,
                Field::DlType,
            ),
            F::VlanTci => d("vlan_tci", 2, true, nxm0(4), None, P::None, Field::VlanTci),
            F::VlanVid => Def {
                bits: 0x1fff,
                valid: 0x1fff,
                ..d("vlan_vid", 2, true, None, basic(6), P::None, Field::VlanTci)
            },
            F::VlanPcp => Def {
                shift: 13,
                bits: 0xe000,
                valid: 0x7,
                ..d(
                    "vlan_pcp",
                    1,
                    false,
                    None,
                    basic(7),
                    P::VlanVid,
                    Field::VlanTci,
                )
            },
            F::IpTos => Def {
                bits: 0xfc,
                valid: 0xfc,
                ..d("ip_tos", 1, false, nxm0(5), None, P::Ip, Field::NwTos)
            },
            F::IpDscp => Def {
                shift: 2,
                bits: 0xfc,
                valid: 0x3f,
                ..d("ip_dscp", 1, false, None, basic(8), P::Ip, Field::NwTos)
            },
            F::IpEcn => Def {
                bits: 0x03,
                valid: 0x03,
                ..d("ip_ecn", 1, false, nxm1(28), basic(9), P::Ip, Field::NwTos)
            },
            F::IpTtl => d("ip_ttl", 1, false, nxm1(29), None, P::Ip, Field::NwTtl),
            F::IpFrag => Def {
                bits: 0x03,
                ..d("ip_frag", 1, true, nxm1(26), None, P::Ip, Field::NwFrag)
            },
            F::IpProto => d(
                "ip_proto",
                1,
                false,
                nxm0(6),
                basic(10),
                P::Ip,
                Field::NwProto,
            ),
            F::Ipv4Src => d(
                "ipv4_src",
                4,
                true,
                nxm0(7),
                basic(11),
                P::Ipv4,
                Field::NwSrc,
            ),
            F::Ipv4Dst => d(
                "ipv4_dst",
                4,
                true,
                nxm0(8),
                basic(12),
                P::Ipv4,
                Field::NwDst,
            ),
            F::TcpSrc => d("tcp_src", 2, true, nxm0(9), basic(13), P::Tcp, Field::TpSrc),
            F::TcpDst => d(
                "tcp_dst",
                2,
                true,
                nxm0(10),
                basic(14),
                P::Tcp,
                Field::TpDst,
            ),
            F::UdpSrc => d(
                "udp_src",
                2,
                true,
                nxm0(11),
                basic(15),
                P::Udp,
                Field::TpSrc,
            ),
            F::UdpDst => d(
                "udp_dst",
                2,
                true,
                nxm0(12),
                basic(16),
                P::Udp,
                Field::TpDst,
            ),
            F::SctpSrc => d("sctp_src", 2, true, None, basic(17), P::Sctp, Field::TpSrc),
            F::SctpDst => d("sctp_dst", 2, true, None, basic(18), P::Sctp, Field::TpDst),
            F::Icmpv4Type => d(
                "icmpv4_type",
                1,
                false,
                nxm0(13),
                basic(19),
                P::Icmpv4,
                Field::IcmpType,
            ),
            F::Icmpv4Code => d(
                "icmpv4_code",
                1,
                false,
                nxm0(14),
                basic(20),
                P::Icmpv4,
                Field::IcmpCode,
            ),
            F::ArpOp => Def {
                bits: 0xff,
                valid: 0xff,
                ..d(
                    "arp_op",
                    2,
                    false,
                    nxm0(15),
                    basic(21),
                    P::Arp,
                    Field::ArpOp,
                )
            },
            F::ArpSpa => d(
                "arp_spa",
                4,
                true,
                nxm0(16),
                basic(22),
                P::Arp,
                Field::ArpSpa,
            ),
            F::ArpTpa => d(
                "arp_tpa",
                4,
                true,
                nxm0(17),
                basic(23),
                P::Arp,
                Field::ArpTpa,
            ),
            F::ArpSha => d(
                "arp_sha",
                6,
                true,
                nxm1(17),
                basic(24),
                P::Arp,
                Field::ArpSha,
            ),
            F::ArpTha => d(
                "arp_tha",
                6,
                true,
                nxm1(18),
                basic(25),
                P::Arp,
                Field::ArpTha,
            ),
            F::Ipv6Src => d(
                "ipv6_src",
                16,
                true,
                nxm1(19),
                basic(26),
                P::Ipv6,
                Field::Ipv6Src,
            ),
            F::Ipv6Dst => d(
                "ipv6_dst",
                16,
                true,
                nxm1(20),
                basic(27),
                P::Ipv6,
                Field::Ipv6Dst,
            ),
            F::Ipv6Label => Def {
                bits: 0xfffff,
                valid: 0xfffff,
                ..d(
                    "ipv6_label",
                    4,
                    true,
                    nxm1(27),
                    basic(28),
                    P::Ipv6,
                    Field::Ipv6Label,
                )
            },
            F::Icmpv6Type => d(
                "icmpv6_type",
                1,
                false,
                nxm1(21),
                basic(29),
                P::Icmpv6,
                Field::Icmpv6Type,
            ),
            F::Icmpv6Code => d(
                "icmpv6_code",
                1,
                false,
                nxm1(22),
                basic(30),
                P::Icmpv6,
                Field::Icmpv6Code,
            ),
            F::NdTarget => d(
                "nd_target",
                16,
                true,
                nxm1(23),
                basic(31),
                P::Nd,
                Field::NdTarget,
            ),
            F::NdSll => d(
                "nd_sll",
                6,
                true,
                nxm1(24),
                basic(32),
                P::NdSolicit,
                Field::NdSll,
            ),
            F::NdTll => d(
                "nd_tll",
                6,
                true,
                nxm1(25),
                basic(33),
                P::NdAdvert,
                Field::NdTll,
            ),
            F::TunId => d(
                "tun_id",
                8,
                true,
                nxm1(16),
                basic(38),
                P::None,
                Field::TunId,
            ),
            F::TunSrc => d("tun_src", 4, true, nxm1(31), None, P::None, Field::TunSrc),
            F::TunDst => d("tun_dst", 4, true, nxm1(32), None, P::None, Field::TunDst),
            F::TunFlags => Def {
                bits: 0x1,
                valid: 0x1,
                ..d(
                    "tun_flags",
                    2,
                    true,
                    nxm1(104),
                    None,
                    P::None,
                    Field::TunFlags,
                )
            },
            F::TunMetadata(i) => d(
                "tun_metadata",
                4,
                true,
                nxm1(40 + (i & 7)),
                None,
                P::None,
                Field::TunMetadata(i & 7),
            ),
            F::Reg(i) => d(
                "reg",
                4,
                true,
                nxm1(i & 15),
                None,
                P::None,
                Field::Reg(i & 15),
            ),
            F::XReg(i) => d(
                "xreg",
                8,
                true,
                None,
                Some(OxmId {
                    class: CLASS_PKT_REGS,
                    field: i & 7,
                    experimenter: None,
                }),
                P::None,
                Field::XReg(i & 7),
            ),
            F::XXReg(i) => d(
                "xxreg",
                16,
                true,
                nxm1(111 + (i & 3)),
                None,
                P::None,
                Field::XXReg(i & 3),
            ),
            F::TcpFlags => Def {
                bits: 0x0fff,
                valid: 0x0fff,
                ..d(
                    "tcp_flags",
                    2,
                    true,
                    nxm1(34),
                    Some(OxmId {
                        class: CLASS_EXPERIMENTER,
                        field: 42,
                        experimenter: Some(ONF_EXPERIMENTER),
                    }),
                    P::Tcp,
                    Field::TcpFlags,
                )
            },
            F::CtState => Def {
                bits: 0xff,
                valid: 0xff,
                ..d(
                    "ct_state",
                    4,
                    true,
                    nxm1(105),
                    None,
                    P::None,
                    Field::CtState,
                )
            },
            F::CtZone => d("ct_zone", 2, false, nxm1(106), None, P::None, Field::CtZone),
            F::CtMark => d("ct_mark", 4, true, nxm1(107), None, P::None, Field::CtMark),
            F::CtLabel => d(
                "ct_label",
                16,
                true,
                nxm1(108),
                None,
                P::None,
                Field::CtLabel,
            ),
            F::CtNwProto => d(
                "ct_nw_proto",
                1,
                false,
                nxm1(119),
                None,
                P::Ct,
                Field::CtNwProto,
            ),
            F::CtNwSrc => d(
                "ct_nw_src",
                4,
                true,
                nxm1(120),
                None,
                P::CtIpv4,
                Field::CtNwSrc,
            ),
            F::CtNwDst => d(
                "ct_nw_dst",
                4,
                true,
                nxm1(121),
                None,
                P::CtIpv4,
                Field::CtNwDst,
            ),
            F::CtIpv6Src => d(
                "ct_ipv6_src",
                16,
                true,
                nxm1(122),
                None,
                P::CtIpv6,
                Field::CtIpv6Src,
            ),
            F::CtIpv6Dst => d(
                "ct_ipv6_dst",
                16,
                true,
                nxm1(123),
                None,
                P::CtIpv6,
                Field::CtIpv6Dst,
            ),
            F::PktMark => d("pkt_mark", 4, true, nxm1(33), None, P::None, Field::PktMark),
            F::ConjId => d("conj_id", 4, false, nxm1(37), None, P::None, Field::ConjId),
            F::CtTpSrc => d("ct_tp_src", 2, true, nxm1(124), None, P::Ct, Field::CtTpSrc),
            F::CtTpDst => d("ct_tp_dst", 2, true, nxm1(125), None, P::Ct, Field::CtTpDst),
        }
    }

    /// The field a header names, if nicflow has it.
    pub fn from_id(id: OxmId) -> Option<OxmField> {
        OxmField::all().find(|f| {
            let d = f.def();
            d.nxm == Some(id) || d.oxm == Some(id)
        })
    }

    /// The id to write: OpenFlow 1.3 prefers the OXM name where one exists
    /// (matches, `set_field`); Nicira actions (`reg_load`, `reg_move`)
    /// prefer the NXM name, as Open vSwitch does.
    pub fn id(self, prefer_nxm: bool) -> OxmId {
        let d = self.def();
        let (a, b) = if prefer_nxm {
            (d.nxm, d.oxm)
        } else {
            (d.oxm, d.nxm)
        };
        a.or(b).expect("every field has a wire id")
    }

    /// Width of the wire value in bits (for `ofs_nbits` checks).
    pub fn wire_bits(self) -> u32 {
        self.def().bytes as u32 * 8
    }

    /// The wire value as nicflow stores it (before masking to `bits`).
    pub fn to_nicflow(self, v: u128) -> u128 {
        match self {
            OxmField::NxInPort if v >= 0xff00 => v | 0xffff_0000,
            _ => v << self.def().shift,
        }
    }

    /// The nicflow value as it goes on the wire.
    pub fn from_nicflow(self, v: u128) -> u128 {
        let d = self.def();
        match self {
            OxmField::NxInPort => {
                if v >= 0xffff_ff00 {
                    v & 0xffff
                } else {
                    v.min(0xffff)
                }
            }
            _ => ((v & d.bits) >> d.shift) & ones(d.bytes),
        }
    }

    /// The best wire field to name nicflow field `f` in an action
    /// (`reg_load`, `reg_move`, `ct(zone=...)`): the whole field, so
    /// offsets are the same on both sides. `None` if it has no
    /// single-field wire name.
    pub fn for_nicflow(f: Field) -> Option<OxmField> {
        use OxmField as F;
        Some(match f {
            // Open vSwitch names in_port in actions by its 16-bit NXM name
            // (OXM_OF_IN_PORT may not be set at all).
            Field::InPort => F::NxInPort,
            Field::Metadata => F::Metadata,
            Field::Reg(i) => F::Reg(i),
            Field::XReg(i) => F::XReg(i),
            Field::XXReg(i) => F::XXReg(i),
            Field::TunId => F::TunId,
            Field::TunSrc => F::TunSrc,
            Field::TunDst => F::TunDst,
            Field::TunMetadata(i) => F::TunMetadata(i),
            Field::DlSrc => F::EthSrc,
            Field::DlDst => F::EthDst,
            Field::DlType => F::EthType,
            Field::VlanTci => F::VlanTci,
            Field::NwSrc => F::Ipv4Src,
            Field::NwDst => F::Ipv4Dst,
            Field::NwProto => F::IpProto,
            Field::NwTtl => F::IpTtl,
            Field::NwFrag => F::IpFrag,
            Field::Ipv6Src => F::Ipv6Src,
            Field::Ipv6Dst => F::Ipv6Dst,
            Field::Ipv6Label => F::Ipv6Label,
            Field::TpSrc => F::TcpSrc,
            Field::TpDst => F::TcpDst,
            Field::TcpFlags => F::TcpFlags,
            Field::ArpOp => F::ArpOp,
            Field::ArpSpa => F::ArpSpa,
            Field::ArpTpa => F::ArpTpa,
            Field::ArpSha => F::ArpSha,
            Field::ArpTha => F::ArpTha,
            Field::IcmpType => F::Icmpv4Type,
            Field::IcmpCode => F::Icmpv4Code,
            Field::Icmpv6Type => F::Icmpv6Type,
            Field::Icmpv6Code => F::Icmpv6Code,
            Field::NdTarget => F::NdTarget,
            Field::NdSll => F::NdSll,
            Field::NdTll => F::NdTll,
            Field::CtState => F::CtState,
            Field::CtZone => F::CtZone,
            Field::CtMark => F::CtMark,
            Field::CtLabel => F::CtLabel,
            Field::CtNwSrc => F::CtNwSrc,
            Field::CtNwDst => F::CtNwDst,
            Field::CtNwProto => F::CtNwProto,
            Field::CtIpv6Src => F::CtIpv6Src,
            Field::CtIpv6Dst => F::CtIpv6Dst,
            Field::PktMark => F::PktMark,
            Field::ConjId => F::ConjId,
            Field::CtTpSrc => F::CtTpSrc,
            Field::CtTpDst => F::CtTpDst,
            // nw_tos as a whole byte has no wire name (NXM_OF_IP_TOS is its
            // DSCP bits only); flags and datapath fields have none either.
            Field::NwTos | Field::TunFlags | Field::RecircId => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_round_trip() {
        let all: Vec<_> = OxmField::all().collect();
        for (i, a) in all.iter().enumerate() {
            let da = a.def();
            for id in [da.nxm, da.oxm].into_iter().flatten() {
                assert_eq!(OxmField::from_id(id), Some(*a), "{a:?}");
                for b in &all[i + 1..] {
                    let db = b.def();
                    assert!(db.nxm != Some(id) && db.oxm != Some(id), "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn value_mapping() {
        assert_eq!(OxmField::IpDscp.to_nicflow(0x3f), 0xfc);
        assert_eq!(OxmField::IpDscp.from_nicflow(0xfe), 0x3f);
        assert_eq!(OxmField::VlanPcp.from_nicflow(0xb005), 5);
        assert_eq!(OxmField::NxInPort.to_nicflow(0xfffe), 0xffff_fffe);
        assert_eq!(OxmField::NxInPort.from_nicflow(0xffff_fffe), 0xfffe);
    }
}
