//! Offloading datapath flows out of the userspace fast path.
//!
//! Place in a frame's path: the userspace datapath ([`crate::datapath`])
//! caches *datapath flows* — a masked [`FlowKey`](nicflow_flow::FlowKey)
//! match plus a flat [`DpAction`](crate::datapath::DpAction) list built by
//! the slow path ([`crate::ofproto`]). An offload engine holds copies of
//! those flows *below* userspace, where a frame meets them before it ever
//! reaches a port's socket:
//!
//! ```text
//! wire -> veth/driver -> netif_receive_skb -> TC ingress `tc_dp`
//!            hit:  rewrite + bpf_redirect_peer / bpf_redirect, the skb
//!                  keeps its GSO and checksum state
//!            miss: the port's upcall veth -> port::tc (AF_PACKET) ->
//!                  datapath -> may install the flow back
//! wire -> driver -> XDP program `xdp_dp` (offload::xdp)
//!            hit:  rewrite + XDP_REDIRECT to the output port / XDP_DROP
//!            miss: XSKMAP -> AF_XDP socket -> port::afxdp -> datapath (EMC,
//!                  megaflow cache, upcall to ofproto) -> may install the
//!                  new flow back into the engine
//! ```
//!
//! * [`xdp`]: the in-kernel eBPF engines (one datapath in `bpf/dp_core.h`,
//!   attached at XDP or at TC ingress; map layout, flow encoding, loader,
//!   counters).
//! * [`manager`]: one engine per bridge attached to its AF_XDP ports, and
//!   the per-flow decision (offload, or stay in userspace with a reason);
//!   the datapath reaches it through `datapath::FlowOffload`.
//! * [`netdev`]: which devices accept redirected frames.
//!
//! See `docs/offload.md`.

pub mod manager;
pub mod netdev;
pub mod pin;
pub mod xdp;

pub use manager::{engine_config, ManagerCounters, OffloadManager};

/// A bridge's offload setting (`offload = "auto" | "tc" | "xdp" | "none"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffloadMode {
    /// The default: ports of type `auto` open as TC ports and run in the
    /// TC engine (interfaces keep TSO and checksum offload); AF_XDP ports
    /// (`type=afxdp`) run in the XDP engine.
    #[default]
    Auto,
    /// The TC engine only.
    Tc,
    /// The XDP engine only; ports of type `auto` open as AF_XDP ports.
    Xdp,
    /// Userspace only; ports of type `auto` open as AF_XDP ports.
    None,
}

impl OffloadMode {
    pub fn as_str(self) -> &'static str {
        match self {
            OffloadMode::Auto => "auto",
            OffloadMode::Tc => "tc",
            OffloadMode::Xdp => "xdp",
            OffloadMode::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<OffloadMode> {
        match s {
            "auto" => Some(OffloadMode::Auto),
            "tc" => Some(OffloadMode::Tc),
            "xdp" => Some(OffloadMode::Xdp),
            "none" => Some(OffloadMode::None),
            _ => None,
        }
    }

    /// Does a port of type `auto` open as a TC port under this mode?
    pub fn auto_ports_are_tc(self) -> bool {
        matches!(self, OffloadMode::Auto | OffloadMode::Tc)
    }
}
