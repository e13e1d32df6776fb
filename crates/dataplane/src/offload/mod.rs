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
pub mod profile;
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

#[cfg(test)]
mod tests {
    use nicflow_port::hook::{AfXdpHook, OffloadHook, TcHook, TunnelHook, UnderlayView};
    use std::net::Ipv4Addr;
    use std::rc::Rc;

    struct View;
    impl UnderlayView for View {
        fn mac(&self) -> [u8; 6] {
            [2, 0, 0, 0, 0, 1]
        }
        fn mtu(&self) -> usize {
            1500
        }
        fn resolve(&self, _: Ipv4Addr, _: Ipv4Addr) -> Option<[u8; 6]> {
            None
        }
    }

    fn hook(csum: bool, underlay: OffloadHook) -> TunnelHook {
        let opts: nicflow_api::proto::PortOptions = [
            ("remote_ip", "198.18.0.2"),
            ("local_ip", "198.18.0.1"),
            ("underlay", "ul"),
            ("key", "flow"),
            ("csum", if csum { "true" } else { "false" }),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        TunnelHook {
            cfg: nicflow_port::tunnel::TunnelConfig::from_options(
                nicflow_packet::tunnel::TunnelKind::Geneve,
                &opts,
            )
            .unwrap(),
            underlay_iface: "ul".into(),
            underlay: Box::new(underlay),
            view: Rc::new(View),
        }
    }

    /// ovn-controller's `csum=true` Geneve ports run in the TC engine; XDP
    /// still refuses them, with its own reason.
    #[test]
    fn checksummed_tunnels_are_refused_by_xdp_only() {
        let tc = || {
            OffloadHook::Tc(TcHook {
                ifindex: 3,
                iface: "ul".into(),
                upcall_ifindex: 4,
                peer_elsewhere: true,
            })
        };
        let xdp = || {
            OffloadHook::AfXdp(AfXdpHook {
                ifindex: 3,
                queue: 0,
                xsk_fd: -1,
                csum_complete: false,
                native: true,
                link: None,
            })
        };
        assert_eq!(super::tunnel_refusal(&hook(true, tc())), None);
        assert_eq!(super::tunnel_refusal(&hook(false, tc())), None);
        assert_eq!(
            super::tunnel_refusal(&hook(true, xdp())),
            Some("tunnel:udp-csum-xdp")
        );
        assert_eq!(super::tunnel_refusal(&hook(false, xdp())), None);
    }
}
