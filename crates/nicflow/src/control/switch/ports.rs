//! Ports: `add-port` and `del-port`, and the checks an interface passes
//! before anything is opened on it (an interface is attached once; a
//! bridge has at most one uplink).

use super::{open_port, Switch, SwitchError};
use crate::bridge::BridgeError;
use crate::control::config::{PortConfig, PortType};
use crate::control::proto::{PortOptions, Response};
use crate::control::vf;
use serde_json::json;

impl Switch {
    /// `add-port`: every check first (type, uplink, interface in use, name), then
    /// the port opens, then the file is written (or the port goes again).
    pub(super) fn add_port(
        &mut self,
        bridge: String,
        iface: String,
        kind: String,
        name: Option<String>,
        options: PortOptions,
    ) -> Result<Response, SwitchError> {
        let kind = PortType::parse(&kind).ok_or(SwitchError::UnknownPortType(kind))?;
        let name = name.unwrap_or_else(|| iface.clone());
        if kind == PortType::Uplink {
            self.check_new_uplink(&bridge, &iface)?;
        }
        self.bridge(&bridge)?;
        let mut options = options;
        let tunnel = matches!(kind, PortType::Vxlan | PortType::Geneve);
        if let Some(u) = options.get("underlay").filter(|_| tunnel) {
            // OVS's userspace-tunnelling layout: the underlay address on a
            // bridge's internal port (`br-phy`). The tunnel reads and writes
            // that port's Linux side with a packet socket, so what it sends
            // enters that bridge as from its internal port and leaves by
            // the bridge's own forwarding (NORMAL to the physical port), and
            // what the bridge delivers to the internal port reaches it.
            if self.config.is_internal_iface(u) && options.get("underlay_type").is_none() {
                options.insert("underlay_type", "afpacket");
            }
        }
        self.check_new_iface(kind, &iface, &options)?;
        let mode = self.mode_of(&bridge);
        // A bare reservation ([`Switch::reserve_ofport`]) is not a port yet.
        let configured = self.configured(&bridge, &name);
        let br = self.bridge(&bridge)?;
        if br.port_map().0.contains_key(&name) && (configured || br.attached(&name).is_some()) {
            return Err(SwitchError::PortExists { bridge, port: name });
        }
        let pc = PortConfig {
            name,
            iface,
            kind,
            options,
        };
        let port = open_port(&pc, mode).map_err(SwitchError::OpenPort)?;
        let opened = port.kind();
        let no = br.add_port(port)?;
        if let Some(bc) = self.config.bridge_mut(&bridge) {
            bc.ports.push(pc.clone());
        }
        if kind == PortType::Uplink {
            self.uplink_kinds.insert(bridge.clone(), opened);
        }
        if let Err(e) = self.persist() {
            // Not saved: take the port back out, as if never added.
            if let Some(br) = self.bridges.get_mut(&bridge) {
                let _ = br.del_port(&pc.name);
            }
            if let Some(bc) = self.config.bridge_mut(&bridge) {
                bc.ports.retain(|p| p.name != pc.name);
            }
            if kind == PortType::Uplink {
                self.uplink_kinds.remove(&bridge);
            }
            return Err(e);
        }
        if kind == PortType::Uplink {
            let text = format!(
                "uplink {} (netdev {}, {opened}) flavour physical port 0 pfnum 0 ofport {no}\n",
                pc.name, pc.iface
            );
            return Ok(Response::ok(
                text,
                json!({ "ofport": no, "flavour": "physical", "port_kind": opened }),
            ));
        }
        // Say what `auto` became.
        Ok(Response::ok(
            format!("port {} ({}, {opened}) ofport {no}\n", pc.name, pc.iface),
            json!({ "ofport": no, "port_kind": opened }),
        ))
    }

    /// Reserve port number `no` for the next `add-port` of `name` on
    /// `bridge` (`nicflow vswitchd`: OVS's `ofport_request`, and the number a
    /// port had before a restart). `false` when the number is taken.
    pub fn reserve_ofport(&mut self, bridge: &str, name: &str, no: u32) -> bool {
        self.bridges
            .get_mut(bridge)
            .is_some_and(|b| b.reserve_port_as(name, no))
    }

    /// A port or VF representor of that name is in the configuration.
    fn configured(&self, bridge: &str, name: &str) -> bool {
        self.config.bridge(bridge).is_some_and(|b| {
            b.ports.iter().any(|p| p.name == name) || b.vfs.iter().any(|v| v.representor == name)
        })
    }

    /// Drop a reservation [`Switch::reserve_ofport`] made whose port did
    /// not open (a configured or attached port is left alone).
    pub fn unreserve_ofport(&mut self, bridge: &str, name: &str) {
        let configured = self.configured(bridge, name);
        if let Some(b) = self.bridges.get_mut(bridge) {
            if !configured && b.attached(name).is_none() {
                let _ = b.del_port(name);
            }
        }
    }

    /// `del-port`: written first (its rules in the words they will have then), then detached.
    pub(super) fn del_port(
        &mut self,
        bridge: String,
        name: String,
    ) -> Result<Response, SwitchError> {
        if let Some(v) = self.vf_by_representor(&bridge, &name) {
            return Err(SwitchError::PortIsRepresentor {
                vf: v.name.clone(),
                bridge,
                port: name,
            });
        }
        if !self.bridge(&bridge)?.port_map().0.contains_key(&name) {
            return Err(BridgeError::NoSuchPort(name).into());
        }
        // Written first (its rules in the words they will have
        // then): a deletion the file cannot record is not made.
        let mut old_ports = None;
        let mut was_uplink = false;
        if let Some(bc) = self.config.bridge_mut(&bridge) {
            was_uplink = bc.uplink().is_some_and(|u| u.name == name);
            old_ports = Some(bc.ports.clone());
            bc.ports.retain(|p| p.name != name);
        }
        if let Err(e) = self.persist_without(Some((&bridge, &name))) {
            if let (Some(bc), Some(ports)) = (self.config.bridge_mut(&bridge), old_ports) {
                bc.ports = ports;
            }
            return Err(e);
        }
        self.bridge(&bridge)?.del_port(&name)?;
        if was_uplink {
            self.uplink_kinds.remove(&bridge);
        }
        self.detached.remove(&(bridge, name));
        Ok(Response::ok("", json!(null)))
    }

    /// `add-port --type uplink`: refused (before anything is opened) when
    /// the bridge already has an uplink, or when the interface is already
    /// in use by a port, a VF representor or a tunnel underlay of any
    /// bridge.
    fn check_new_uplink(&self, bridge: &str, iface: &str) -> Result<(), SwitchError> {
        let bc = self
            .config
            .bridge(bridge)
            .ok_or_else(|| SwitchError::NoBridge(bridge.to_string()))?;
        if let Some(u) = bc.uplink() {
            return Err(SwitchError::SecondUplink {
                bridge: bridge.to_string(),
                name: u.name.clone(),
                iface: u.iface.clone(),
            });
        }
        vf::check_ifname(iface, "uplink interface")?;
        for b in &self.config.bridges {
            for p in &b.ports {
                let underlay = matches!(p.kind, PortType::Vxlan | PortType::Geneve)
                    && p.options.get("underlay").map(String::as_str) == Some(iface);
                if underlay {
                    return Err(SwitchError::UplinkIsUnderlay {
                        iface: iface.to_string(),
                        port: p.name.clone(),
                        bridge: b.name.clone(),
                    });
                }
                if p.iface == iface && !matches!(p.kind, PortType::Vxlan | PortType::Geneve) {
                    return Err(SwitchError::UplinkIsPort {
                        iface: iface.to_string(),
                        port: p.name.clone(),
                        bridge: b.name.clone(),
                    });
                }
            }
            if let Some(v) = b.vfs.iter().find(|v| v.representor == iface) {
                return Err(SwitchError::UplinkIsRepresentor {
                    iface: iface.to_string(),
                    vf: v.name.clone(),
                    bridge: b.name.clone(),
                });
            }
        }
        Ok(())
    }

    /// `add-port`: an interface is attached once. Refused (before anything
    /// is opened) when it is already a port or VF representor of any bridge
    /// or a tunnel's underlay, and a tunnel's underlay when it is a port or
    /// representor (tunnel ports share underlays): two ports on one
    /// interface take each other's traffic, and deleting one removes the
    /// other's upcall veth.
    fn check_new_iface(
        &self,
        kind: PortType,
        iface: &str,
        options: &PortOptions,
    ) -> Result<(), SwitchError> {
        if matches!(kind, PortType::Vxlan | PortType::Geneve) {
            if let Some(u) = options.get("underlay") {
                if self.config.is_internal_iface(u) {
                    return Ok(());
                }
                if let Some(user) = self.config.iface_user(u, false) {
                    return Err(SwitchError::UnderlayInUse {
                        iface: u.to_string(),
                        user,
                    });
                }
            }
            return Ok(());
        }
        match self.config.iface_user(iface, true) {
            Some(user) => Err(SwitchError::IfaceInUse {
                iface: iface.to_string(),
                user,
            }),
            None => Ok(()),
        }
    }

    /// The devlink-style entry of a bridge's uplink (flavour `physical`).
    pub(super) fn uplink_json(&self, bridge: &str, u: &PortConfig) -> serde_json::Value {
        let no = self.ofport(bridge, &u.name);
        json!({
            "name": u.name, "netdev": u.iface, "type": u.kind.as_str(),
            "port_kind": self.uplink_kinds.get(bridge),
            "ofport": no, "flavour": "physical", "port": 0, "pfnum": 0,
        })
    }
}
