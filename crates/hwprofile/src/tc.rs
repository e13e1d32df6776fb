//! The second form of a flow: the TC flower filter Open vSwitch 3.1's
//! `netdev_tc_flow_put()` would install (`struct tc_flower` of
//! `lib/tc.h`), which is what the NIC driver's `FLOW_CLS_REPLACE` sees.
//! [`crate::ovs::gate`] turns a [`DpFlow`](crate::model::DpFlow) into one
//! or refuses; the drivers ([`crate::mlx5`], [`crate::nfp`]) check it.
//!
//! OVS's mapping (v3.1.0 `lib/netdev-offload-tc.c`): `recirc_id` -> the
//! filter's chain; the match's fields -> flower keys (the same masked
//! values: the match is kept as a [`DpMatch`]); a flow received on a
//! tunnel port sits on the tunnel device (`indev` is that port) and
//! matches `enc_*` keys; ODP actions -> TC actions below, in order.

use crate::model::{CtAction, DpMatch, GeneveOpt, Port, TunnelType};
use serde::Serialize;

/// A header field rewritten by a pedit key (OVS's `flower_pedit_map`:
/// one TC pedit key per 32-bit word; these are the fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeditField {
    EthSrc,
    EthDst,
    Ipv4Src,
    Ipv4Dst,
    Ipv4Tos,
    Ipv4Ttl,
    Ipv6Src,
    Ipv6Dst,
    Ipv6Tclass,
    Ipv6Hlimit,
    TcpSport,
    TcpDport,
    UdpSport,
    UdpDport,
}

/// A TC action of the filter, in the order OVS writes them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum TcAction {
    /// `mirred egress redirect|mirror dev PORT` (`ingress`: OVS's output to
    /// an internal port is `mirred ingress`).
    Mirred {
        port: Port,
        ingress: bool,
    },
    /// `tunnel_key set` before a mirred to a tunnel device.
    TunnelSet {
        tunnel: TunnelType,
        id: u64,
        ipv4_src: u32,
        ipv4_dst: u32,
        ipv6_src: u128,
        ipv6_dst: u128,
        tos: u8,
        ttl: u8,
        tp_dst: u16,
        /// `nocsum` not set: the outer UDP checksum is computed.
        csum: bool,
        dont_frag: bool,
        opts: Vec<GeneveOpt>,
    },
    /// `pedit` keys, one per field rewritten (a header's fields in one
    /// pedit action, as OVS merges a flow's rewrites into one).
    Pedit {
        fields: Vec<PeditField>,
    },
    /// `csum` after a pedit of an IP or L4 header (OVS adds it:
    /// `csum_update_flag`); the `TCA_CSUM_UPDATE_FLAG_*` bits.
    Csum {
        flags: u32,
    },
    VlanPush {
        tpid: u16,
        vid: u16,
        prio: u8,
    },
    VlanPop,
    Ct(CtAction),
    CtClear,
    /// `goto chain N` (OVS's `recirc(N)`).
    Goto {
        chain: u32,
    },
    /// `police index N` (OVS's `meter(N)`; the meter is a shared police
    /// action created when the meter is).
    Police {
        meter: u32,
    },
    /// `gact drop` (a flow without actions).
    Drop,
}

/// `TCA_CSUM_UPDATE_FLAG_*` (`include/uapi/linux/tc_act/tc_csum.h`).
pub mod csum_flag {
    pub const IPV4HDR: u32 = 1;
    pub const ICMP: u32 = 2;
    pub const IGMP: u32 = 4;
    pub const TCP: u32 = 8;
    pub const UDP: u32 = 16;
    pub const UDPLITE: u32 = 32;
    pub const SCTP: u32 = 64;
}

/// The filter OVS would install.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TcFlower {
    /// The TC chain: the datapath flow's `recirc_id`.
    pub chain: u32,
    /// The device the filter is on (the flow's `in_port`; a tunnel port's
    /// flows sit on its `*_sys_*` device).
    pub indev: Port,
    /// The flower keys: the datapath flow's match less `recirc_id` and
    /// `in_port`, with `tunnel` as the `enc_*` keys.
    pub key: DpMatch,
    pub actions: Vec<TcAction>,
}
