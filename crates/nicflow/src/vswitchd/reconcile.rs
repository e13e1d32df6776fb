//! Converge the switch to the database: every change goes through
//! [`Switch::handle`] (the same requests the CLI sends), so validation,
//! rollback and the port factory are the CLI's. Bridges and ports the
//! database does not list are removed, missing ones added, changed ones
//! re-opened; an interface that cannot be opened keeps its error (written
//! back as `ofport=-1` and `error`) and does not stop the others.

use super::desired::{Bridge as DBridge, Desired, Iface};
use super::netdev;
use crate::control::proto::{PortOptions, Request};
use crate::control::switch::Switch;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What was applied for one interface: the database's view of it (so a
/// change re-opens it) and the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedIface {
    pub kind: String,
    pub options: BTreeMap<String, String>,
    /// The port number, or why the interface is not open.
    pub result: Result<u32, String>,
    /// The Linux interface the port sits on (a tunnel's underlay: none of its own).
    pub netdev: Option<String>,
}

/// What was applied for one bridge.
#[derive(Debug, Clone, Default)]
pub struct AppliedBridge {
    pub fail_mode: String,
    pub protocols: String,
    pub controllers: Vec<String>,
    pub ifaces: BTreeMap<String, AppliedIface>,
    /// Why the bridge itself could not be created (its interfaces say it too).
    pub error: Option<String>,
}

/// The reconciler's memory of what it applied, and of what it has logged.
#[derive(Debug, Default)]
pub struct Applied {
    pub bridges: BTreeMap<String, AppliedBridge>,
    /// Errors already logged (an error is logged once, not at every update).
    logged: BTreeSet<String>,
}

/// The datapath types that mean nicflow's datapath.
pub const DATAPATH_TYPES: [&str; 2] = ["netdev", "system"];
/// The interface types nicflow opens.
pub const IFACE_TYPES: [&str; 5] = ["geneve", "internal", "patch", "system", "vxlan"];

/// `$OVS_RUNDIR/<bridge>.mgmt`.
pub fn mgmt_path(rundir: &Path, bridge: &str) -> PathBuf {
    rundir.join(format!("{bridge}.mgmt"))
}

impl Applied {
    fn log_once(&mut self, what: &str, e: &str) {
        let key = format!("{what}: {e}");
        if self.logged.insert(key) {
            tracing::warn!("vswitchd: {what}: {e}");
        }
    }

    /// Converge `sw` to `d`.
    /// `prev_ofport`: each interface's `ofport` in the database now (the
    /// number a port keeps across a restart of nicflow when no
    /// `ofport_request` says otherwise, as in OVS).
    pub fn reconcile(
        &mut self,
        sw: &mut Switch,
        d: &Desired,
        rundir: &Path,
        prev_ofport: &BTreeMap<String, i64>,
    ) {
        // Bridges the database does not list (or made by the CLI) go.
        let extra: Vec<String> = sw
            .bridges()
            .map(|b| b.name.clone())
            .filter(|n| !d.bridges.contains_key(n))
            .collect();
        for name in extra {
            let r = sw.handle(Request::DelBr {
                bridge: name.clone(),
            });
            match r.error {
                None => tracing::info!("vswitchd: deleted bridge {name}"),
                Some(e) => self.log_once(&format!("deleting bridge {name}"), &e),
            }
        }
        self.bridges.retain(|n, _| d.bridges.contains_key(n));
        // Ports no longer listed go before any is added: an interface moved
        // from one bridge to another in one transaction is free by then.
        for b in d.bridges.values() {
            let stale: Vec<String> = sw
                .bridges()
                .find(|x| x.name == b.name)
                .map(|x| {
                    x.port_map()
                        .0
                        .keys()
                        // Reservations (`ofport_request`) are not ports.
                        .filter(|n| x.attached(n).is_some() && !b.ifaces.contains_key(*n))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            for name in stale {
                self.del_port(sw, &b.name, &name);
            }
        }
        // Every bridge with its settings first, then the ports: a bridge's
        // `.mgmt` socket and controllers (and its fail mode) are in place
        // before the first port opens, as in ovs-vswitchd, so that
        // ovn-controller finds br-int at once after a restart instead of
        // backing off while other bridges' ports (each a kernel engine to
        // load and attach) are opened.
        let mut ready = Vec::new();
        for b in d.bridges.values() {
            if self.bridge(sw, b, rundir) {
                ready.push(b);
            }
        }
        for b in ready {
            let mut ab = self.bridges.remove(&b.name).unwrap_or_default();
            self.ports(sw, b, &mut ab, prev_ofport);
            self.mtus(b, &ab);
            self.bridges.insert(b.name.clone(), ab);
        }
    }

    /// The bridge itself and its settings; false when it cannot exist
    /// (its ports then carry the bridge's error).
    fn bridge(&mut self, sw: &mut Switch, b: &DBridge, rundir: &Path) -> bool {
        let exists = sw.bridges().any(|x| x.name == b.name);
        let dp_ok =
            b.datapath_type.is_empty() || DATAPATH_TYPES.contains(&b.datapath_type.as_str());
        if !dp_ok {
            let e = format!(
                "bridge {}: datapath_type `{}` is not supported (netdev and system both mean nicflow's datapath)",
                b.name, b.datapath_type
            );
            if exists {
                sw.handle(Request::DelBr {
                    bridge: b.name.clone(),
                });
            }
            self.fail_bridge(b, e);
            return false;
        }
        if !exists {
            let r = sw.handle(Request::AddBr {
                bridge: b.name.clone(),
            });
            if let Some(e) = r.error {
                self.fail_bridge(b, format!("bridge {}: {e}", b.name));
                return false;
            }
            tracing::info!("vswitchd: created bridge {}", b.name);
            self.bridges.insert(
                b.name.clone(),
                AppliedBridge {
                    fail_mode: "standalone".into(),
                    ..Default::default()
                },
            );
        }
        let mut ab = self
            .bridges
            .remove(&b.name)
            .unwrap_or_else(|| AppliedBridge {
                fail_mode: "standalone".into(),
                ..Default::default()
            });
        ab.error = None;
        self.settings(sw, b, &mut ab, rundir);
        self.bridges.insert(b.name.clone(), ab);
        true
    }

    fn fail_bridge(&mut self, b: &DBridge, e: String) {
        self.log_once(&format!("bridge {}", b.name), &e);
        let ifaces = b
            .ifaces
            .values()
            .map(|i| {
                (
                    i.name.clone(),
                    AppliedIface {
                        kind: i.kind.clone(),
                        options: i.options.clone(),
                        result: Err(e.clone()),
                        netdev: None,
                    },
                )
            })
            .collect();
        self.bridges.insert(
            b.name.clone(),
            AppliedBridge {
                ifaces,
                error: Some(e),
                ..Default::default()
            },
        );
    }

    fn ports(
        &mut self,
        sw: &mut Switch,
        b: &DBridge,
        ab: &mut AppliedBridge,
        prev_ofport: &BTreeMap<String, i64>,
    ) {
        let present: BTreeSet<String> = sw
            .bridges()
            .find(|x| x.name == b.name)
            .map(|x| {
                x.port_map()
                    .0
                    .keys()
                    .filter(|n| x.attached(n).is_some())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        ab.ifaces.retain(|n, _| b.ifaces.contains_key(n));
        for i in b.ifaces.values() {
            let valid = |n: i64| (1..=0xfeff).contains(&n).then_some(n as u32);
            let requested = i.ofport_request.and_then(valid);
            let same = ab.ifaces.get(&i.name).is_some_and(|a| {
                a.kind == i.kind
                    && a.options == i.options
                    && requested.is_none_or(|n| a.result == Ok(n))
            });
            let open = ab.ifaces.get(&i.name).is_some_and(|a| a.result.is_ok());
            if same && open && present.contains(&i.name) {
                continue;
            }
            if present.contains(&i.name) {
                self.del_port(sw, &b.name, &i.name);
            }
            let hint = requested.or_else(|| prev_ofport.get(&i.name).copied().and_then(valid));
            // The number (asked for, or held before a restart) is reserved
            // first; a port that does not open gives it back.
            let add = |sw: &mut Switch, req| {
                if let Some(n) = hint {
                    sw.reserve_ofport(&b.name, &i.name, n);
                }
                sw.handle(req)
            };
            let (result, netdev) = match port_request(&b.name, i) {
                Ok((req, netdev)) => match add(sw, req) {
                    r if r.ok => {
                        let no = r.data.get("ofport").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
                        tracing::info!(
                            "vswitchd: bridge {}: added interface {} ({}) as ofport {no}",
                            b.name,
                            i.name,
                            if i.kind.is_empty() { "system" } else { &i.kind }
                        );
                        (Ok(no), netdev)
                    }
                    r => {
                        sw.unreserve_ofport(&b.name, &i.name);
                        (
                            Err(r.error.unwrap_or_else(|| "request failed".into())),
                            netdev,
                        )
                    }
                },
                Err(e) => (Err(e), None),
            };
            if let Err(e) = &result {
                // The error names the interface (it is written to its row).
                self.log_once(&format!("bridge {}", b.name), e);
            }
            ab.ifaces.insert(
                i.name.clone(),
                AppliedIface {
                    kind: i.kind.clone(),
                    options: i.options.clone(),
                    result,
                    netdev,
                },
            );
        }
    }

    /// `mtu_request` of the open system and internal interfaces of `b`, set
    /// on the device when it differs (as OVS's netdev-linux does); then
    /// internal interfaces without one follow the smallest MTU of the
    /// bridge's system interfaces, as OVS's bridge MTU does. A refusal is
    /// logged once and leaves the port as it is.
    fn mtus(&mut self, b: &DBridge, ab: &AppliedBridge) {
        let open = |i: &Iface| {
            ab.ifaces.get(&i.name).is_some_and(|a| a.result.is_ok())
                && matches!(i.kind.as_str(), "" | "system" | "internal")
        };
        for i in b.ifaces.values().filter(|i| open(i)) {
            if let Some(m) = i.mtu_request {
                self.set_mtu(&i.name, m);
            }
        }
        let bridge_mtu = b
            .ifaces
            .values()
            .filter(|i| open(i) && i.kind != "internal")
            .filter_map(|i| netdev::link_info(&i.name).map(|l| l.mtu))
            .min();
        if let Some(m) = bridge_mtu {
            for i in b.ifaces.values().filter(|i| open(i)) {
                if i.kind == "internal" && i.mtu_request.is_none() {
                    self.set_mtu(&i.name, m);
                }
            }
        }
    }

    fn set_mtu(&mut self, dev: &str, mtu: i64) {
        if netdev::link_info(dev).is_none_or(|l| l.mtu == mtu) {
            return;
        }
        let out = std::process::Command::new("ip")
            .args(["link", "set", "dev", dev, "mtu", &mtu.to_string()])
            .output();
        let what = format!("interface {dev}: mtu {mtu}");
        match out {
            Ok(o) if o.status.success() => tracing::info!("vswitchd: {what}"),
            Ok(o) => self.log_once(&what, String::from_utf8_lossy(&o.stderr).trim()),
            Err(e) => self.log_once(&what, &e.to_string()),
        }
    }

    fn del_port(&mut self, sw: &mut Switch, bridge: &str, name: &str) {
        let r = sw.handle(Request::DelPort {
            bridge: bridge.to_string(),
            name: name.to_string(),
        });
        match r.error {
            None => tracing::info!("vswitchd: bridge {bridge}: deleted port {name}"),
            Some(e) => self.log_once(&format!("bridge {bridge}: deleting port {name}"), &e),
        }
    }

    fn settings(&mut self, sw: &mut Switch, b: &DBridge, ab: &mut AppliedBridge, rundir: &Path) {
        if ab.fail_mode != b.fail_mode {
            let r = sw.handle(Request::SetFailMode {
                bridge: b.name.clone(),
                mode: b.fail_mode.clone(),
            });
            match r.error {
                None => ab.fail_mode = b.fail_mode.clone(),
                Some(e) => self.log_once(&format!("bridge {}: fail_mode", b.name), &e),
            }
        }
        if ab.protocols != b.protocols {
            // Unset means every version (OVS's default); nicflow answers the
            // ones it speaks.
            let value = if b.protocols.is_empty() {
                "OpenFlow10,OpenFlow11,OpenFlow12,OpenFlow13,OpenFlow14,OpenFlow15".to_string()
            } else {
                b.protocols.clone()
            };
            let r = sw.handle(Request::Set {
                bridge: b.name.clone(),
                key: "protocols".into(),
                value,
            });
            match r.error {
                None => ab.protocols = b.protocols.clone(),
                Some(e) => self.log_once(&format!("bridge {}: protocols", b.name), &e),
            }
        }
        // The management socket is a listener beside the controllers (a
        // listener counts for no fail mode, as in OVS).
        let mut targets = b.controllers.clone();
        targets.push(format!("punix:{}", mgmt_path(rundir, &b.name).display()));
        if ab.controllers != targets {
            let r = sw.handle(Request::SetController {
                bridge: b.name.clone(),
                targets: targets.clone(),
            });
            match r.error {
                None => ab.controllers = targets,
                Some(e) => self.log_once(&format!("bridge {}: controllers", b.name), &e),
            }
        }
    }
}

/// The request that opens interface `i` on `bridge`, and the Linux
/// interface it sits on; or why it cannot be opened.
fn port_request(bridge: &str, i: &Iface) -> Result<(Request, Option<String>), String> {
    if let Some(r) = &i.refused {
        return Err(r.clone());
    }
    let req = |kind: &str, options: PortOptions| Request::AddPort {
        bridge: bridge.to_string(),
        iface: i.name.clone(),
        kind: kind.to_string(),
        name: Some(i.name.clone()),
        options,
    };
    match i.kind.as_str() {
        "" | "system" => {
            // The text ovs-vswitchd writes for a missing device.
            if netdev::link_info(&i.name).is_none() {
                return Err(format!(
                    "could not open network device {} (No such device)",
                    i.name
                ));
            }
            Ok((req("auto", PortOptions::new()), Some(i.name.clone())))
        }
        "internal" => Ok((req("internal", PortOptions::new()), Some(i.name.clone()))),
        "vxlan" | "geneve" => {
            let (opts, underlay) =
                tunnel_options(&i.options).map_err(|e| format!("interface {}: {e}", i.name))?;
            Ok((req(&i.kind, opts), Some(underlay)))
        }
        "patch" => {
            let mut o = PortOptions::new();
            for (k, v) in &i.options {
                o.insert(k.clone(), v.clone());
            }
            Ok((req("patch", o), None))
        }
        other => Err(format!(
            "interface {}: type `{other}` is not supported by nicflow (system, internal, vxlan, geneve, patch)",
            i.name
        )),
    }
}

/// A tunnel's OVS options as nicflow's: without `local_ip` the source and
/// the underlay interface come from the route to `remote_ip`, as in OVS.
fn tunnel_options(o: &BTreeMap<String, String>) -> Result<(PortOptions, String), String> {
    let remote = o
        .get("remote_ip")
        .ok_or("a tunnel needs options:remote_ip")?;
    if remote == "flow" {
        return Err("remote_ip=flow is not supported by nicflow".into());
    }
    let route = netdev::route_to(remote)?;
    let mut out = PortOptions::new();
    for (k, v) in o {
        match k.as_str() {
            "df_default" => out.insert("df", v.clone()),
            "in_key" | "out_key" => {
                return Err(format!(
                    "option {k}: separate in/out keys are not supported by nicflow"
                ))
            }
            _ => out.insert(k.clone(), v.clone()),
        }
    }
    if !o.contains_key("local_ip") {
        out.insert("local_ip", route.src.clone());
    }
    out.insert("underlay", route.dev.clone());
    Ok((out, route.dev))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_ovsdb::Uuid;

    fn iface(kind: &str, opts: &[(&str, &str)]) -> Iface {
        Iface {
            uuid: Uuid(1),
            name: "nfvsd-none0".into(),
            kind: kind.into(),
            options: opts
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ofport_request: None,
            mtu_request: None,
            refused: None,
        }
    }

    #[test]
    fn unsupported_interfaces_say_why() {
        let e = |i| port_request("br0", &i).unwrap_err();
        assert!(e(iface("dpdk", &[])).contains("type `dpdk` is not supported"));
        assert!(e(iface("vxlan", &[])).contains("remote_ip"));
        assert!(e(iface("geneve", &[("remote_ip", "flow")])).contains("remote_ip=flow"));
        assert_eq!(
            e(iface("", &[])).to_string(),
            "could not open network device nfvsd-none0 (No such device)"
        );
    }
}
