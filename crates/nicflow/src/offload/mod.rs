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
//! wire -> driver -> XDP program `xdp_dp` (offload::xdp)
//!            hit:  rewrite + XDP_REDIRECT to the output port / XDP_DROP
//!            miss: XSKMAP -> AF_XDP socket -> port::afxdp -> datapath (EMC,
//!                  megaflow cache, upcall to ofproto) -> may install the
//!                  new flow back into the engine
//! ```
//!
//! * [`xdp`]: the in-kernel XDP/eBPF engine (program, map layout, flow
//!   encoding, loader, counters).
//! * [`manager`]: one engine per bridge attached to its AF_XDP ports, and
//!   the per-flow decision (offload, or stay in userspace with a reason);
//!   the datapath reaches it through `datapath::FlowOffload`.
//! * [`netdev`]: which devices accept redirected frames.
//!
//! See `docs/offload.md`.

pub mod manager;
pub mod netdev;
pub mod xdp;

pub use manager::{engine_config, ManagerCounters, OffloadManager};

/// A bridge's offload setting (`offload = "xdp" | "none"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffloadMode {
    /// The XDP engine where it loads (the default), userspace otherwise.
    #[default]
    Xdp,
    /// Userspace only.
    None,
}

impl OffloadMode {
    pub fn as_str(self) -> &'static str {
        match self {
            OffloadMode::Xdp => "xdp",
            OffloadMode::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<OffloadMode> {
        match s {
            "xdp" => Some(OffloadMode::Xdp),
            "none" => Some(OffloadMode::None),
            _ => None,
        }
    }
}
