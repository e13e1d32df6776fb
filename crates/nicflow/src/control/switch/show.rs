//! `show`: every bridge with its ports, uplink, VFs, offload mode and
//! controllers, as `ovs-vsctl show` and `devlink port show` print them.

use super::Switch;
use crate::control::proto::Response;
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt::Write as _;

impl Switch {
    /// `show`: the configuration as the switch runs it (ports that are not
    /// attached say so).
    pub(super) fn show(&self) -> Response {
        let mut text = String::new();
        let mut data = Vec::new();
        for bc in &self.config.bridges {
            let _ = writeln!(text, "Bridge {}", bc.name);
            let br = self.bridges.get(&bc.name);
            let mut ports = Vec::new();
            for pc in &bc.ports {
                let no = br.and_then(|b| b.attached(&pc.name));
                let state = match no {
                    Some(n) => format!("ofport {n}"),
                    None => "not attached".to_string(),
                };
                let _ = writeln!(
                    text,
                    "    Port {} ({}: {}) {}",
                    pc.name,
                    pc.kind.as_str(),
                    pc.iface,
                    state
                );
                // Keys (ESP, PSK) are never printed: `iter` shows them
                // as `(secret)`.
                let options: BTreeMap<&str, &str> =
                    pc.options.iter().map(|(k, v)| (k.as_str(), v)).collect();
                for (k, v) in &options {
                    let _ = writeln!(text, "        {k}={v}");
                }
                ports.push(json!({
                    "name": pc.name, "iface": pc.iface, "type": pc.kind.as_str(),
                    "ofport": no, "options": options,
                }));
            }
            let mode = if br.is_some_and(|b| b.offload_enabled()) {
                "xdp"
            } else {
                "none"
            };
            let _ = writeln!(
                text,
                "    offload: {mode} (configured: {})",
                bc.offload.unwrap_or_default().as_str()
            );
            // As `ovs-vsctl show` prints them.
            let controllers = self.openflow.status(&bc.name);
            for c in &controllers {
                let _ = writeln!(text, "    Controller \"{}\"", c.target);
                if c.connected > 0 {
                    let _ = writeln!(text, "        is_connected: true");
                }
            }
            if let Some(m) = bc.openflow.fail_mode {
                let _ = writeln!(text, "    fail_mode: {}", m.as_str());
            }
            let uplink = bc.uplink().map(|u| {
                let j = self.uplink_json(&bc.name, u);
                let state = match j["ofport"].as_u64() {
                    Some(n) => format!("ofport {n}"),
                    None => "not attached".to_string(),
                };
                let kind = self.uplink_kinds.get(&bc.name).copied().unwrap_or("afxdp");
                let _ = writeln!(
                    text,
                    "    uplink {}: netdev {} ({kind}) flavour physical port 0 pfnum 0 {state}",
                    u.name, u.iface
                );
                j
            });
            let mut vfs = Vec::new();
            for v in &bc.vfs {
                let j = self.vf_json(&bc.name, v);
                let state = match j["ofport"].as_u64() {
                    Some(n) => format!("ofport {n}"),
                    None => "not attached".to_string(),
                };
                let kind = self
                    .rep_kinds
                    .get(&v.representor)
                    .copied()
                    .unwrap_or(v.rep_type.as_str());
                let _ = writeln!(
                    text,
                    "    vf {}: netdev {} ({kind}) flavour pcivf pfnum 0 vfnum {} {state}",
                    v.index, v.representor, v.index
                );
                let ips = if v.ips.is_empty() {
                    "-".to_string()
                } else {
                    v.ips.join(",")
                };
                let _ = writeln!(
                    text,
                    "        function: name {} netns {} hw_addr {} ips {ips}",
                    v.name, v.namespace, v.mac
                );
                vfs.push(j);
            }
            data.push(json!({ "name": bc.name, "ports": ports, "offload": mode,
                "controllers": controllers,
                "fail_mode": bc.openflow.fail_mode.map(|m| m.as_str()),
                "offload_configured": bc.offload.unwrap_or_default().as_str(),
                "uplink": uplink, "vfs": vfs }));
        }
        Response::ok(text, json!(data))
    }
}
