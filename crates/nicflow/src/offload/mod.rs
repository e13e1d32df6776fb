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
//! Only [`xdp`] exists: the in-kernel XDP/eBPF engine of issue 5 (program,
//! map layout, flow encoding, loader, counters). Deciding *which* flows to
//! offload, wiring the engine into the ports and aging flows from its
//! counters (the offload manager) is a later step; see `docs/offload.md`.

pub mod xdp;
