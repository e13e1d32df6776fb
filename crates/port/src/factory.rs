//! The port factory: a port's configuration in, an open port out.
//!
//! Place in the system: the daemon opens every port of a bridge through
//! [`open`] (as OVS's `netdev_open(name, type)` picks a `netdev_class`), and
//! a tunnel port opens its underlay through it too; the port types below
//! know nothing of the daemon that asks.

use crate::Port;
use nicflow_api::config::{PortConfig, PortType};
use nicflow_api::OffloadMode;

/// An AF_PACKET port; options are the `AfPacketOptions` fields as
/// `key=value` (block_size, block_count, frame_size, block_timeout_ms,
/// promisc, disable_offloads, vnet_hdr, rx_ring).
fn open_afpacket(pc: &PortConfig) -> Result<Box<dyn Port>, String> {
    use crate::afpacket::{AfPacketOptions, AfPacketPort};
    let mut o = AfPacketOptions::default();
    for (k, v) in &pc.options {
        let num = || {
            v.parse::<u32>()
                .map_err(|_| format!("port {}: option {k}={v}: not a number", pc.name))
        };
        let flag = || match v {
            "true" | "yes" | "1" => Ok(true),
            "false" | "no" | "0" => Ok(false),
            _ => Err(format!(
                "port {}: option {k}={v}: expected true or false",
                pc.name
            )),
        };
        match k.as_str() {
            "block_size" => o.block_size = num()?,
            "block_count" => o.block_count = num()?,
            "frame_size" => o.frame_size = num()?,
            "block_timeout_ms" => o.block_timeout_ms = num()?,
            "promisc" => o.promisc = flag()?,
            "disable_offloads" => o.disable_offloads = flag()?,
            "vnet_hdr" => o.vnet_hdr = flag()?,
            "rx_ring" => o.rx_ring = flag()?,
            _ => return Err(format!("port {}: unknown afpacket option `{k}`", pc.name)),
        }
    }
    let mut p = AfPacketPort::open(&pc.iface, o).map_err(|e| e.to_string())?;
    p.set_name(&pc.name);
    Ok(Box::new(p))
}

/// Open the Linux side of the port `pc` describes on a bridge whose ports
/// open for `mode` ([`BridgeConfig::port_mode`](nicflow_api::config::BridgeConfig::port_mode)): types `auto` and
/// `uplink` become a TC port under `auto`/`tc` (unless given AF_XDP
/// options), else an AF_XDP port with its AF_PACKET fallback; only the
/// configuration and `show` know an uplink as such. Every port is opened
/// under the bridge's name for it (`pc.name`) and reports its own kind
/// (`tc`, or `afpacket` after an AF_XDP fallback), with no wrapper in
/// between.
pub fn open(pc: &PortConfig, mode: OffloadMode) -> Result<Box<dyn Port>, String> {
    // `auto` (and the uplink, a NIC port like any other) is a TC port under
    // offload auto/tc unless AF_XDP port options ask for an AF_XDP port.
    let afxdp_options = pc.options.keys().any(|k| k != "csum_complete");
    let kind = match pc.kind {
        PortType::Auto | PortType::Uplink if mode.auto_ports_are_tc() && !afxdp_options => {
            PortType::Tc
        }
        PortType::Auto => PortType::Afxdp,
        k => k,
    };
    Ok(match kind {
        PortType::Tc => {
            // `csum_complete` tells the XDP engine about senders'
            // checksums; a TC port needs no such hint (the skb says).
            if let Some((k, _)) = pc.options.iter().find(|(k, _)| *k != "csum_complete") {
                return Err(format!(
                    "port {}: a TC port has no option `{k}` (type=afxdp or afpacket take options)",
                    pc.name
                ));
            }
            let mut p = crate::tc::TcPort::open(&pc.iface).map_err(|e| e.to_string())?;
            p.set_name(&pc.name);
            Box::new(p)
        }
        PortType::Auto => unreachable!("resolved above"),
        PortType::Tap | PortType::Internal => {
            let mut t = crate::tap::TapPort::open(&pc.name, &pc.iface)
                .map_err(|e| format!("tap {}: {e}", pc.iface))?;
            if pc.kind == PortType::Internal {
                t.set_internal();
            }
            Box::new(t)
        }
        PortType::Afpacket => open_afpacket(pc)?,
        PortType::Patch => {
            if let Some((k, _)) = pc.options.iter().find(|(k, _)| *k != "peer") {
                return Err(format!(
                    "port {}: a patch port has no option `{k}`",
                    pc.name
                ));
            }
            let peer = pc
                .options
                .get("peer")
                .ok_or_else(|| format!("port {}: a patch port needs options:peer", pc.name))?;
            Box::new(crate::patch::PatchPort::open(&pc.name, peer).map_err(|e| e.to_string())?)
        }
        PortType::Vxlan | PortType::Geneve => {
            use crate::tunnel::{TunnelConfig, TunnelPort};
            use nicflow_packet::tunnel::TunnelKind;
            let tk = if pc.kind == PortType::Vxlan {
                TunnelKind::Vxlan
            } else {
                TunnelKind::Geneve
            };
            let cfg = TunnelConfig::from_options(tk, &pc.options)
                .map_err(|e| format!("port {}: {e}", pc.name))?;
            Box::new(
                TunnelPort::open(&pc.name, cfg, mode)
                    .map_err(|e| format!("port {}: {e}", pc.name))?,
            )
        }
        PortType::Afxdp | PortType::Uplink => {
            // `auto` under offload xdp|none lands here: it takes the AF_XDP
            // options too.
            use crate::afxdp::{AfXdpOptions, AfXdpPort};
            let o = AfXdpOptions::from_pairs(pc.options.iter().map(|(k, v)| (k.as_str(), v)))
                .map_err(|e| format!("port {}: {e}", pc.name))?;
            match AfXdpPort::open(&pc.iface, o) {
                Ok(mut p) => {
                    p.set_name(&pc.name);
                    Box::new(p)
                }
                // AF_PACKET is the fallback when AF_XDP cannot be used at
                // all (no AF_XDP in the kernel, XDP refused in both modes).
                Err(e) => {
                    tracing::warn!(
                        port = %pc.name,
                        iface = %pc.iface,
                        "AF_XDP unavailable ({e}); falling back to an AF_PACKET port"
                    );
                    let fallback = PortConfig {
                        kind: PortType::Afpacket,
                        options: Default::default(),
                        ..pc.clone()
                    };
                    open_afpacket(&fallback)?
                }
            }
        }
    })
}
