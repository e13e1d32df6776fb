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
//! wire -> driver -> XDP program `xdp_dp` (offload::kernel)
//!            hit:  rewrite + XDP_REDIRECT to the output port / XDP_DROP
//!            miss: XSKMAP -> AF_XDP socket -> port::afxdp -> datapath (EMC,
//!                  megaflow cache, upcall to ofproto) -> may install the
//!                  new flow back into the engine
//! ```
//!
//! * [`kernel`]: the in-kernel eBPF engines, TC and XDP (one datapath in `bpf/dp_core.h`,
//!   attached at XDP or at TC ingress; map layout, flow encoding, loader,
//!   counters).
//! * [`manager`]: one engine per bridge attached to its AF_XDP ports, and
//!   the per-flow decision (offload, or stay in userspace with a reason);
//!   the datapath reaches it through `datapath::FlowOffload`.
//! * [`netdev`]: which devices accept redirected frames.
//! * [`dummy`]: an engine in memory (OVS's dummy offload provider), so
//!   placement, counters and port reasons are tested without root.
//!
//! See `docs/offload.md`.

pub mod dummy;
pub mod manager;
pub mod netdev;
pub use nicflow_port::pin;
pub mod kernel;

pub use manager::{engine_config, ManagerCounters, OffloadManager};

/// Why a tunnel's flows cannot run in any kernel engine, whatever the
/// engine's state: the refusals the kernel manager and the dummy engine
/// share (an encrypted tunnel, a checksummed one on an XDP underlay, an
/// underlay no engine runs on). A checksummed tunnel (`csum=true`) on a TC
/// underlay is offloaded: `tc_dp` writes the outer UDP checksum
/// (docs/offload.md, "Tunnels in TC"); XDP would have to sum every frame
/// it sends and has no checksum state to go by.
pub fn tunnel_refusal(t: &nicflow_port::hook::TunnelHook) -> Option<&'static str> {
    use nicflow_port::hook::OffloadHook;
    if t.cfg.csum && matches!(t.underlay.as_ref(), OffloadHook::AfXdp(_)) {
        Some("tunnel:udp-csum-xdp")
    } else if t.cfg.ipsec.is_some() {
        // AES-GCM does not run in TC or XDP programs.
        Some("tunnel:ipsec")
    } else if !matches!(
        t.underlay.as_ref(),
        OffloadHook::AfXdp(_) | OffloadHook::Tc(_)
    ) {
        Some("tunnel:underlay-afpacket")
    } else {
        None
    }
}

/// Why flows through a port of `kind` (one no engine runs on) stay in
/// userspace: the reason every provider gives for it.
pub fn kind_reason(kind: &str) -> &'static str {
    match kind {
        "afpacket" => "port:afpacket",
        "tap" => "port:tap",
        "internal" => "port:internal",
        "afxdp" => "port:afxdp-not-attached",
        "tc" => "port:tc-engine-off",
        _ => "port:userspace",
    }
}

pub use nicflow_api::OffloadMode;
