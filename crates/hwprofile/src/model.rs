//! The input of the model: a datapath flow as Open vSwitch 3.1's
//! `dpif-netlink` would hand it to `netdev_tc_flow_put()` with
//! `other_config:hw-offload=true` — a masked match (OVS's `struct match`
//! reduced to the fields a datapath flow carries) and ODP actions — plus
//! what each port of the bridge is on the modelled NIC.
//!
//! The caller (nicflow's `offload::profile`) builds these from its own
//! datapath flows, turning nicflow's differences into OVS's form (a
//! register match after recirculation is a distinct `recirc_id` in OVS, a
//! tunnel flow matches the outer header exactly as OVS's `tnl_wc_init`).

use serde::Serialize;

/// A value and its mask (1 bits are matched). A zero mask is "not
/// matched", whatever the value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Masked<T> {
    pub value: T,
    pub mask: T,
}

/// The integer operations the checks need on any field width.
pub trait Bits: Copy + Default + PartialEq {
    fn zero() -> Self {
        Self::default()
    }
    fn all_ones() -> Self;
}
macro_rules! bits {
    ($($t:ty),*) => {$(impl Bits for $t { fn all_ones() -> Self { <$t>::MAX } })*};
}
bits!(u8, u16, u32, u64, u128);
impl Bits for [u8; 6] {
    fn all_ones() -> Self {
        [0xff; 6]
    }
}

impl<T: Bits> Masked<T> {
    pub fn exact(value: T) -> Self {
        Masked {
            value,
            mask: T::all_ones(),
        }
    }
    /// Not matched at all.
    pub fn is_wild(&self) -> bool {
        self.mask == T::zero()
    }
    /// Every bit matched.
    pub fn is_exact(&self) -> bool {
        self.mask == T::all_ones()
    }
    /// Some bits matched, not all.
    pub fn is_partial(&self) -> bool {
        !self.is_wild() && !self.is_exact()
    }
}

/// The tunnel types OVS 3.1 offloads through TC (`vxlan_sys_*`,
/// `genevesys_*` devices; the flower filter sits on the tunnel device's
/// ingress block, reached by the NIC driver through an indirect block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TunnelType {
    Vxlan,
    Geneve,
}

/// What a bridge port is on the modelled NIC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PortKind {
    /// The eSwitch uplink (the physical port): a tunnel's underlay.
    Uplink,
    /// A VF (or SF) representor of the same eSwitch; nicflow's VF
    /// representors and plain ports are modelled as these.
    Representor,
    /// An OVS tunnel vport (its netdev is `vxlan_sys_<port>` /
    /// `genev_sys_<port>`), `dst_port` its UDP port.
    Tunnel { tunnel: TunnelType, dst_port: u16 },
    /// An OVS internal port (a host netdev on no NIC).
    Internal,
    /// Anything else (a TAP, an AF_PACKET port on a non-NIC device): no
    /// NIC holds flows from or to it. The string says what it is.
    Other { what: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Port {
    /// The datapath port number (`in_port(N)`, `output:N`).
    pub no: u32,
    pub name: String,
    pub kind: PortKind,
}

/// The outer header a flow received on a tunnel port matches
/// (OVS's `flow_tnl`, `tunnel(...)` in a datapath flow).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TunnelMatch {
    pub tun_id: Masked<u64>,
    pub ipv4_src: Masked<u32>,
    pub ipv4_dst: Masked<u32>,
    pub ipv6_src: Masked<u128>,
    pub ipv6_dst: Masked<u128>,
    pub tos: Masked<u8>,
    pub ttl: Masked<u8>,
    pub tp_src: Masked<u16>,
    pub tp_dst: Masked<u16>,
    /// OVS's `FLOW_TNL_F_*` bits (DONT_FRAGMENT 1, CSUM 2, KEY 4, OAM 8).
    pub flags: Masked<u16>,
    /// Geneve options matched: (class, type, value bytes, mask bytes).
    pub geneve_opts: Vec<GeneveOpt>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GeneveOpt {
    pub class: u16,
    pub typ: u8,
    /// The option's data (a multiple of 4 bytes) and its mask.
    pub value: Vec<u8>,
    pub mask: Vec<u8>,
}

/// An 802.1Q/802.1ad tag matched (outermost first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VlanMatch {
    pub tpid: u16,
    /// VID in the low 12 bits, PCP in the top 3, CFI (tag present) 0x1000.
    pub tci: Masked<u16>,
}

/// OVS's `CS_*` connection-state bits (`lib/packets.h`).
pub mod cs {
    pub const NEW: u32 = 1 << 0;
    pub const ESTABLISHED: u32 = 1 << 1;
    pub const RELATED: u32 = 1 << 2;
    pub const REPLY_DIR: u32 = 1 << 3;
    pub const INVALID: u32 = 1 << 4;
    pub const TRACKED: u32 = 1 << 5;
    pub const SRC_NAT: u32 = 1 << 6;
    pub const DST_NAT: u32 = 1 << 7;
}

/// The masked match of a datapath flow: the fields of OVS's `struct flow`
/// a kernel datapath flow can carry. `recirc_id` and `in_port` are always
/// exact in a datapath flow.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DpMatch {
    pub recirc_id: u32,
    pub in_port: u32,
    pub dp_hash: Masked<u32>,
    /// `skb_mark` (OVS's `pkt_mark`).
    pub pkt_mark: Masked<u32>,
    /// `skb_priority`.
    pub skb_priority: Masked<u32>,
    pub ct_state: Masked<u32>,
    pub ct_zone: Masked<u16>,
    pub ct_mark: Masked<u32>,
    pub ct_label: Masked<u128>,
    /// Any of the original-direction tuple fields (`ct_nw_src`, ...,
    /// `ct_tp_dst`) matched: `ct_tuple4(...)` / `ct_tuple6(...)`.
    pub ct_tuple_matched: bool,
    /// Received on a tunnel port: the outer header's match.
    pub tunnel: Option<TunnelMatch>,
    pub eth_src: Masked<[u8; 6]>,
    pub eth_dst: Masked<[u8; 6]>,
    /// Tags matched, outermost first (at most 2).
    pub vlans: Vec<VlanMatch>,
    pub eth_type: Masked<u16>,
    pub ipv4_src: Masked<u32>,
    pub ipv4_dst: Masked<u32>,
    pub ipv6_src: Masked<u128>,
    pub ipv6_dst: Masked<u128>,
    pub ipv6_label: Masked<u32>,
    pub nw_proto: Masked<u8>,
    /// The whole TOS / traffic-class byte (DSCP and ECN).
    pub nw_tos: Masked<u8>,
    pub nw_ttl: Masked<u8>,
    /// OVS's `FLOW_NW_FRAG_ANY` 1, `FLOW_NW_FRAG_LATER` 2.
    pub nw_frag: Masked<u8>,
    pub tp_src: Masked<u16>,
    pub tp_dst: Masked<u16>,
    pub tcp_flags: Masked<u16>,
    /// ARP: opcode is `nw_proto`, SPA/TPA are `ipv4_src`/`ipv4_dst` (as
    /// in OVS's `struct flow`); these are SHA/THA (and ND's SLL/TLL).
    pub arp_sha: Masked<[u8; 6]>,
    pub arp_tha: Masked<[u8; 6]>,
    pub nd_target: Masked<u128>,
}

/// A header rewrite as OVS 3.1 emits it in a datapath flow: the kernel
/// datapath's `set_masked(...)` of one header (OVS's
/// `commit_set_*_action` writes one action per header).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "header")]
pub enum SetHeader {
    Eth {
        src: Masked<[u8; 6]>,
        dst: Masked<[u8; 6]>,
    },
    Ipv4 {
        src: Masked<u32>,
        dst: Masked<u32>,
        tos: Masked<u8>,
        ttl: Masked<u8>,
    },
    Ipv6 {
        src: Masked<u128>,
        dst: Masked<u128>,
        tclass: Masked<u8>,
        hlimit: Masked<u8>,
        label: Masked<u32>,
    },
    Tcp {
        src: Masked<u16>,
        dst: Masked<u16>,
    },
    Udp {
        src: Masked<u16>,
        dst: Masked<u16>,
    },
    Sctp {
        src: Masked<u16>,
        dst: Masked<u16>,
    },
    /// ARP / ND rewrites (`set(arp(...))`, `set(nd(...))`): OVS's TC
    /// translation has no pedit for them.
    Arp,
    Nd,
    /// `skb_mark` (`set(skb_mark(..))`).
    SkbMark(Masked<u32>),
    /// `skb_priority`.
    SkbPriority(u32),
}

/// The outer header of `set(tunnel(...))` before an output to a tunnel port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TunnelSet {
    pub tun_id: u64,
    pub ipv4_src: u32,
    pub ipv4_dst: u32,
    pub ipv6_src: u128,
    pub ipv6_dst: u128,
    pub tos: u8,
    pub ttl: u8,
    pub tp_dst: u16,
    /// `FLOW_TNL_F_*`.
    pub flags: u16,
    pub geneve_opts: Vec<GeneveOpt>,
}

/// NAT of a `ct(nat(...))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NatKind {
    /// `nat` alone: apply the connection's existing NAT.
    Existing,
    Src,
    Dst,
}

/// `ct(...)` in a datapath flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CtAction {
    pub zone: u16,
    pub commit: bool,
    pub force: bool,
    /// (value, mask)
    pub mark: Option<(u32, u32)>,
    pub label: Option<(u128, u128)>,
    pub nat: Option<NatKind>,
    /// `helper=` (an ALG such as ftp).
    pub helper: Option<String>,
}

/// An ODP action of a datapath flow, as OVS 3.1 would have emitted it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum DpAction {
    /// `output:N` (to a tunnel port after a [`DpAction::SetTunnel`]).
    Output {
        port: u32,
    },
    /// `set(tunnel(...))`: the outer header of the next tunnel output.
    SetTunnel(TunnelSet),
    Set(SetHeader),
    PushVlan {
        tpid: u16,
        tci: u16,
    },
    PopVlan,
    Ct(CtAction),
    CtClear,
    /// `recirc(N)`.
    Recirc {
        id: u32,
    },
    /// `meter(N)`.
    Meter {
        id: u32,
        /// The meter's first band drops: OVS 3.1 makes a TC police action
        /// only of such a meter (`meter_tc_set_policer`).
        drop_band: bool,
    },
    /// `userspace(...)`: a copy to the controller (or sFlow/IPFIX).
    Userspace,
    /// `sample(...)`.
    Sample,
    /// `hash(...)` (select groups, bond).
    Hash,
    /// `check_pkt_len(...)`.
    CheckPktLen,
    /// `clone(...)`.
    Clone,
    /// `trunc(N)`.
    Trunc,
    /// `push_mpls` / `pop_mpls` / `set(mpls)`.
    Mpls,
    /// Anything the model has no entry for, named.
    Other {
        name: String,
    },
}

/// A datapath flow with the ports it names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DpFlow {
    pub matching: DpMatch,
    /// Empty: drop.
    pub actions: Vec<DpAction>,
}
