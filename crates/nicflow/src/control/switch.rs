//! The daemon's state: bridges with their real ports, and the config file
//! that mirrors them.
//!
//! Every [`Request`] is applied here in one piece on the daemon's single
//! thread, so a request is atomic with respect to traffic: the poll loop
//! cannot forward a packet halfway through a change. A request that fails
//! changes nothing; one that succeeds is persisted before it is
//! acknowledged.

use super::config::{BridgeConfig, Config, PortConfig, PortType, VfConfig};
use super::proto::{Request, Response};
use super::vf::{self, VfError, VfSpec};
use crate::bridge::Bridge;
use crate::datapath::DatapathConfig;
use crate::offload::OffloadMode;
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

pub use nicflow_api::config::DEFAULT_FLOW;

/// Ports open through the port crate's factory.
pub use crate::port::open as open_port;

/// Where the verifier log of a refused XDP program is written: next to
/// the config file, else in the temporary directory.
fn verifier_log_path(config_path: Option<&std::path::Path>, bridge: &str) -> PathBuf {
    let dir = config_path
        .and_then(|p| p.parent())
        .filter(|d| !d.as_os_str().is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!("nicflow-{bridge}-xdp_dp.verifier.log"))
}

/// Put `br` in offload mode `mode` (`xdp` with `options` for the map
/// sizes). When the kernel refuses the program the bridge stays at `none`:
/// one log line says so and where the verifier log was saved. `Err` carries
/// that message (for `nicflow set`).
pub fn apply_offload(
    br: &mut Bridge,
    mode: OffloadMode,
    options: &BTreeMap<String, String>,
    config_path: Option<&std::path::Path>,
) -> Result<(), String> {
    match mode {
        OffloadMode::None => {
            br.disable_offload();
            Ok(())
        }
        mode => {
            let cfg = crate::offload::engine_config(options)
                .map_err(|e| format!("bridge {}: {e}", br.name))?;
            match br.enable_offload(cfg, mode) {
                Ok(()) => {
                    tracing::info!(bridge = %br.name, "offload {} on", mode.as_str());
                    Ok(())
                }
                Err(e) => {
                    let mut msg = format!(
                        "bridge {}: offload {} unavailable, falling back to offload=none: {e}",
                        br.name,
                        mode.as_str()
                    );
                    if let Some(log) = e.verifier_log() {
                        let path = verifier_log_path(config_path, &br.name);
                        match std::fs::write(&path, log) {
                            Ok(()) => {
                                let _ = write!(msg, "; verifier log saved to {}", path.display());
                            }
                            Err(w) => {
                                let _ = write!(
                                    msg,
                                    "; could not save the verifier log to {}: {w}",
                                    path.display()
                                );
                            }
                        }
                    }
                    tracing::error!("{msg}");
                    Err(msg)
                }
            }
        }
    }
}

pub struct Switch {
    config: Config,
    config_path: Option<PathBuf>,
    bridges: BTreeMap<String, Bridge>,
    /// Representor name to the kind of port opened on it (`afpacket` when
    /// AF_XDP fell back); absent while a VF is not attached.
    rep_kinds: BTreeMap<String, &'static str>,
    /// Bridge name to the kind of port opened on its uplink (`afxdp`, or
    /// `afpacket` after the fallback); absent while it is not attached.
    uplink_kinds: BTreeMap<String, &'static str>,
    /// Controller connections (`control::openflow`).
    openflow: super::openflow::OpenFlow,
    /// Rules changed over OpenFlow since the config file was last written:
    /// it is written at the next tick (not once per `FLOW_MOD`), and at every
    /// tick after until a write succeeds.
    of_dirty: bool,
    /// Per bridge, its count of rules expired by idle or hard timeout when
    /// the config file was last written: a tick that finds more writes it
    /// again, so an expired rule does not come back at restart.
    expired_written: BTreeMap<String, u64>,
    /// Why each configured port (bridge, port) that is not attached could
    /// not be opened the last time it was tried (logged once per reason),
    /// and when it may be tried again while its interface exists.
    detached: BTreeMap<(String, String), (String, Instant)>,
    /// The last error writing the config file from the tick (logged once).
    tick_write_error: Option<String>,
}

/// A bridge's targets, parsed (the config keeps them as text).
fn parse_targets(list: &[String]) -> Result<Vec<super::openflow::Target>, String> {
    list.iter()
        .map(|t| super::openflow::Target::parse(t))
        .collect()
}

/// Does the list name an active controller (`tcp:`, `unix:`)? Listeners
/// (`ptcp:`, `punix:`) are not controllers for the fail mode, as in OVS.
fn has_active(list: &[String]) -> bool {
    list.iter()
        .filter_map(|t| super::openflow::Target::parse(t).ok())
        .any(|t| !t.passive())
}

/// `protocols=`: a comma list of OpenFlow versions that must include
/// OpenFlow13 (the only one nicflow speaks).
fn check_protocols(v: &str) -> Result<String, String> {
    const KNOWN: [&str; 6] = [
        "OpenFlow10",
        "OpenFlow11",
        "OpenFlow12",
        "OpenFlow13",
        "OpenFlow14",
        "OpenFlow15",
    ];
    let list: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .collect();
    if let Some(bad) = list.iter().find(|x| !KNOWN.contains(x)) {
        return Err(format!(
            "protocols={v}: unknown version `{bad}` (OpenFlow10..OpenFlow15)"
        ));
    }
    if !list.contains(&"OpenFlow13") {
        return Err(format!(
            "protocols={v}: nicflow speaks OpenFlow13 only; the list must include it"
        ));
    }
    Ok(list.join(","))
}

/// Bring back a configured VF at startup: reuse its representor when it
/// still exists, else recreate the pair; then attach the representor.
fn restore_vf(
    bridge: &str,
    br: &mut Bridge,
    vfc: &VfConfig,
    mode: OffloadMode,
) -> Result<(u32, &'static str), String> {
    if !vf::namespace_exists(&vfc.namespace) {
        return Err(format!(
            "namespace `{}` is gone; VF not attached (kept in the config; `nicflow del-vf {bridge} {}` removes it)",
            vfc.namespace, vfc.name
        ));
    }
    if vf::link_exists(None, &vfc.representor) {
        tracing::info!(bridge, vf = %vfc.name, "reusing representor {}", vfc.representor);
        vf::prepare_representor(bridge, vfc).map_err(|e| e.to_string())?;
    } else {
        tracing::info!(bridge, vf = %vfc.name, "recreating the veth pair of {}", vfc.representor);
        vf::create_pair(bridge, vfc).map_err(|e| e.to_string())?;
    }
    let port = open_port(&vfc.port_config(), mode)?;
    let kind = port.kind();
    let no = br.add_port(port).map_err(|e| e.to_string())?;
    Ok((no, kind))
}

fn now() -> Instant {
    Instant::now()
}

impl Switch {
    /// Build every bridge, port, VF and rule of `config`. A port that cannot
    /// be opened, or a VF whose namespace is gone or whose pair cannot be
    /// recreated, is logged and left out of this run (kept in the config).
    pub fn new(config: Config, config_path: Option<PathBuf>) -> Result<Switch, String> {
        // Manually keyed ESP SAs keep their sequence reservations next to
        // the configuration (see port::ipsec).
        crate::port::ipsec::set_state_dir(
            config_path
                .as_deref()
                .and_then(|p| p.parent())
                .filter(|d| !d.as_os_str().is_empty())
                .map(|d| d.join("ipsec-state")),
        );
        // Interfaces a daemon killed before it could restore them get
        // their original features back before any port opens (see
        // port::state).
        crate::port::state::set_dir(Some(
            config_path
                .as_deref()
                .and_then(|p| p.parent())
                .filter(|d| !d.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("/run/nicflow"), PathBuf::from)
                .join("iface-state"),
        ));
        crate::port::state::restore_orphans();
        let mut sw = Switch {
            config: Config::default(),
            config_path,
            bridges: BTreeMap::new(),
            rep_kinds: BTreeMap::new(),
            uplink_kinds: BTreeMap::new(),
            openflow: Default::default(),
            of_dirty: false,
            expired_written: BTreeMap::new(),
            detached: BTreeMap::new(),
            tick_write_error: None,
        };
        if let Some(ssl) = &config.ssl {
            if let Err(e) = sw.openflow.set_ssl(ssl) {
                tracing::error!("ssl: {e}");
            }
        }
        for bc in &config.bridges {
            let mut br = Bridge::new(
                &bc.name,
                DatapathConfig {
                    flow_limit: bc.flow_limit.unwrap_or(crate::datapath::DEFAULT_FLOW_LIMIT),
                    ..Default::default()
                },
            );
            for pc in &bc.ports {
                match open_port(pc, bc.port_mode()) {
                    Ok(p) => {
                        let kind = p.kind();
                        let no = br.add_port(p).map_err(|e| e.to_string())?;
                        if pc.kind == PortType::Uplink {
                            tracing::info!(bridge = %bc.name, "uplink {} ({}, {kind}) attached as ofport {no}", pc.name, pc.iface);
                            sw.uplink_kinds.insert(bc.name.clone(), kind);
                        }
                    }
                    Err(e) => {
                        // Kept under its name and number: its rules load,
                        // and the tick attaches it when the interface is back.
                        tracing::error!(bridge = %bc.name, "port {}: {e}; not attached (kept in the config, attached when its interface appears)", pc.name);
                        br.reserve_port(&pc.name).map_err(|e| e.to_string())?;
                        sw.detached
                            .insert((bc.name.clone(), pc.name.clone()), (e, now()));
                    }
                }
            }
            for vfc in &bc.vfs {
                match restore_vf(&bc.name, &mut br, vfc, bc.port_mode()) {
                    Ok((no, kind)) => {
                        tracing::info!(bridge = %bc.name, "VF {} ({}) attached as ofport {no}", vfc.name, vfc.representor);
                        sw.rep_kinds.insert(vfc.representor.clone(), kind);
                    }
                    Err(e) => {
                        tracing::error!(bridge = %bc.name, "VF {}: {e}", vfc.name);
                        if br.attached(&vfc.representor).is_none()
                            && !br.port_map().0.contains_key(&vfc.representor)
                        {
                            br.reserve_port(&vfc.representor)
                                .map_err(|e| e.to_string())?;
                        }
                        sw.detached
                            .insert((bc.name.clone(), vfc.representor.clone()), (e, now()));
                    }
                }
            }
            // Meters and groups first: the rules that name them load after them.
            let (meters, groups, text) = super::config::split_groups(&bc.flows);
            for m in &meters {
                br.add_meter_str(m, false, now())
                    .map_err(|e| format!("bridge {} meter `{m}`: {e}", bc.name))?;
            }
            br.add_groups_str(&groups, false, now())
                .map_err(|e| format!("bridge {} groups: {e}", bc.name))?;
            br.add_flows_str(&text, now())
                .map_err(|e| format!("bridge {} flows: {e}", bc.name))?;
            // A refused program is logged and leaves the bridge at none.
            let _ = apply_offload(
                &mut br,
                bc.offload.unwrap_or_default(),
                &bc.offload_options,
                sw.config_path.as_deref(),
            );
            sw.bridges.insert(bc.name.clone(), br);
            if !bc.openflow.controllers.is_empty() || bc.openflow.fail_mode.is_some() {
                let r = parse_targets(&bc.openflow.controllers).and_then(|t| {
                    sw.openflow.configure(
                        &bc.name,
                        &t,
                        bc.openflow.fail_mode.unwrap_or_default(),
                        now(),
                    )
                });
                if let Err(e) = r {
                    tracing::error!(bridge = %bc.name, "controllers: {e}");
                }
            }
        }
        sw.config = config;
        Ok(sw)
    }

    pub fn bridges_mut(&mut self) -> impl Iterator<Item = &mut Bridge> {
        self.bridges.values_mut()
    }

    pub fn bridges(&self) -> impl Iterator<Item = &Bridge> {
        self.bridges.values()
    }

    /// What ports of type `auto` open as on bridge `name`
    /// ([`BridgeConfig::port_mode`]).
    fn mode_of(&self, name: &str) -> OffloadMode {
        self.config
            .bridges
            .iter()
            .find(|b| b.name == name)
            .map(|b| b.port_mode())
            .unwrap_or_default()
    }

    fn bridge(&mut self, name: &str) -> Result<&mut Bridge, String> {
        self.bridges
            .get_mut(name)
            .ok_or_else(|| format!("no bridge `{name}`"))
    }

    /// Write the current state to the config file (when there is one).
    /// Rules added over OpenFlow are written too; the fail-open rule
    /// (`control::openflow::FAIL_OPEN_COOKIE`) never is.
    fn persist(&mut self) -> Result<(), String> {
        self.persist_without(None)
    }

    /// [`Switch::persist`], with the rules written as if port `hide`
    /// (bridge, port) were already gone: a deletion is written before it is
    /// made, in the words the file will have after it.
    fn persist_without(&mut self, hide: Option<(&str, &str)>) -> Result<(), String> {
        for bc in self.config.bridges.iter_mut() {
            if let Some(br) = self.bridges.get_mut(&bc.name) {
                let mut names = br.port_map().clone();
                if let Some((_, port)) = hide.filter(|(b, _)| *b == bc.name) {
                    names.0.remove(port);
                }
                let fail_open = self.openflow.fail_open(&bc.name);
                // Meters, then groups, then rules: each loads before what
                // names it.
                bc.flows = br
                    .dump_meters()
                    .iter()
                    .map(nicflow_ofctl::meter::format_meter_spec)
                    .collect();
                bc.flows.extend(br.dump_groups_text());
                bc.flows.extend(
                    br.dump_flows(now())
                        .iter()
                        .filter(|d| {
                            !(fail_open
                                && d.spec.cookie == super::openflow::FAIL_OPEN_COOKIE
                                && d.spec.priority == 0
                                && d.spec.table == 0)
                        })
                        .map(|d| nicflow_ofctl::format_flow(&d.spec, &names)),
                );
            }
        }
        if let Some(p) = &self.config_path {
            self.config
                .save(p)
                .map_err(|e| format!("the change was not made: {e}"))?;
        }
        self.of_dirty = false;
        self.expired_written = self
            .bridges
            .iter()
            .map(|(n, b)| (n.clone(), b.ofproto_stats().rules_expired))
            .collect();
        Ok(())
    }

    /// Run `change` on bridge `bridge`'s rules, groups or meters and write
    /// the config file; when the file cannot be written the bridge gets its
    /// rules back as they were (counters included), so the switch never
    /// runs what the file does not say and the request fails.
    fn change_rules<T>(
        &mut self,
        bridge: &str,
        change: impl FnOnce(&mut Bridge) -> Result<T, String>,
    ) -> Result<T, String> {
        let keep = self.config_path.is_some();
        let br = self.bridge(bridge)?;
        let saved = keep.then(|| br.save_rules());
        let out = change(br)?;
        if let Err(e) = self.persist() {
            if let (Some(s), Some(br)) = (saved, self.bridges.get_mut(bridge)) {
                br.restore_rules(s, now());
            }
            return Err(e);
        }
        Ok(out)
    }

    /// What [`Switch::persist_or_undo`] needs to put a request on bridge `bridge` back:
    /// the configuration and the bridge's rules (only when there is a file
    /// to fail writing).
    fn checkpoint(&mut self, bridge: &str) -> Option<(Config, crate::ofproto::RuleState)> {
        self.config_path.as_ref()?;
        let rules = self.bridges.get_mut(bridge)?.save_rules();
        Some((self.config.clone(), rules))
    }

    /// Write the config file; when that fails, put back what
    /// [`Switch::checkpoint`] saved (configuration, rules, controllers) and
    /// fail.
    fn persist_or_undo(
        &mut self,
        bridge: &str,
        saved: Option<(Config, crate::ofproto::RuleState)>,
    ) -> Result<(), String> {
        let Err(e) = self.persist() else {
            return Ok(());
        };
        if let Some((config, rules)) = saved {
            self.config = config;
            if let Some(br) = self.bridges.get_mut(bridge) {
                br.restore_rules(rules, now());
            }
            if let Err(c) = self.of_configure(bridge) {
                tracing::warn!(bridge, "restoring the controllers: {c}");
            }
        }
        Err(e)
    }

    /// OpenFlow descriptors for the daemon's `poll`.
    pub fn openflow_poll_fds(&self, fds: &mut Vec<libc::pollfd>) {
        self.openflow.poll_fds(fds);
    }

    /// OpenFlow input is waiting beyond one round's share.
    pub fn openflow_backlog(&self) -> bool {
        self.openflow.has_backlog()
    }

    /// Serve the OpenFlow connections (between forwarding batches).
    pub fn openflow_service(&mut self, now: Instant) {
        if self.openflow.is_empty() {
            return;
        }
        let changed = self.openflow.service(&mut self.bridges, now);
        if !changed.is_empty() {
            self.of_dirty = true;
        }
    }

    /// Once a second: probes, port status, fail-open (rules changed over
    /// OpenFlow are written by [`Switch::tick`]).
    pub fn openflow_tick(&mut self, now: Instant) {
        self.openflow.tick(&mut self.bridges, now);
    }

    /// Once a second, after the bridges' own ticks: attach configured ports
    /// whose interface has come back, and write the config file when rules
    /// changed over OpenFlow or expired (idle or hard timeout) since it was
    /// last written — an expired rule must not come back at restart. A
    /// failed write is logged (once per reason) and tried again every tick;
    /// these changes are not undone (a controller has been answered, a
    /// timeout has passed).
    pub fn tick(&mut self, now: Instant) {
        self.reattach(now);
        let expired = self.bridges.iter().any(|(n, b)| {
            b.ofproto_stats().rules_expired != self.expired_written.get(n).copied().unwrap_or(0)
        });
        if !(expired || self.of_dirty) {
            return;
        }
        match self.persist() {
            Ok(()) => {
                if let Some(e) = self.tick_write_error.take() {
                    tracing::info!("config file written again (it had failed: {e})");
                }
            }
            Err(e) => {
                if self.tick_write_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!("writing the config (retried every second): {e}");
                }
                self.tick_write_error = Some(e);
            }
        }
    }

    /// Attach every configured port and VF representor that is not
    /// attached (its interface or namespace was missing) once its interface
    /// (a tunnel's underlay, a VF's namespace) exists, under the port
    /// number it kept; its rules work again from then on. A port whose
    /// interface exists but still fails to open is tried again every 10 s.
    fn reattach(&mut self, now: Instant) {
        const RETRY: std::time::Duration = std::time::Duration::from_secs(10);
        let mut ports = Vec::new();
        let mut vfs = Vec::new();
        for bc in &self.config.bridges {
            let Some(br) = self.bridges.get(&bc.name) else {
                continue;
            };
            let waiting = |name: &str| {
                br.attached(name).is_none()
                    && br.port_map().0.contains_key(name)
                    && self
                        .detached
                        .get(&(bc.name.clone(), name.to_string()))
                        .is_none_or(|(_, at)| now >= *at)
            };
            for pc in bc.ports.iter().filter(|p| waiting(&p.name)) {
                let present = match pc.kind {
                    PortType::Vxlan | PortType::Geneve => pc
                        .options
                        .get("underlay")
                        .is_none_or(|u| vf::link_exists(None, u)),
                    PortType::Tap | PortType::Internal => true,
                    _ => vf::link_exists(None, &pc.iface),
                };
                if present {
                    ports.push((bc.name.clone(), bc.port_mode(), pc.clone()));
                }
            }
            for v in bc.vfs.iter().filter(|v| waiting(&v.representor)) {
                if vf::namespace_exists(&v.namespace) {
                    vfs.push((bc.name.clone(), bc.port_mode(), v.clone()));
                }
            }
        }
        for (bridge, mode, pc) in ports {
            let Some(br) = self.bridges.get_mut(&bridge) else {
                continue;
            };
            let r = open_port(&pc, mode).and_then(|p| {
                let kind = p.kind();
                br.add_port(p)
                    .map(|no| (no, kind))
                    .map_err(|e| e.to_string())
            });
            let key = (bridge.clone(), pc.name.clone());
            match r {
                Ok((no, kind)) => {
                    tracing::info!(bridge = %bridge, "port {} ({}, {kind}) attached as ofport {no}: its interface is back", pc.name, pc.iface);
                    self.detached.remove(&key);
                    if pc.kind == PortType::Uplink {
                        self.uplink_kinds.insert(bridge, kind);
                    }
                }
                Err(e) => self.note_detached(key, e, now + RETRY),
            }
        }
        for (bridge, mode, v) in vfs {
            let Some(br) = self.bridges.get_mut(&bridge) else {
                continue;
            };
            let key = (bridge.clone(), v.representor.clone());
            match restore_vf(&bridge, br, &v, mode) {
                Ok((no, kind)) => {
                    tracing::info!(bridge = %bridge, "VF {} ({}) attached as ofport {no}: its namespace is back", v.name, v.representor);
                    self.detached.remove(&key);
                    self.rep_kinds.insert(v.representor.clone(), kind);
                }
                Err(e) => self.note_detached(key, e, now + RETRY),
            }
        }
    }

    /// Remember why a port could not be attached; log it when the reason
    /// is new.
    fn note_detached(&mut self, key: (String, String), e: String, retry: Instant) {
        if self.detached.get(&key).is_none_or(|(old, _)| *old != e) {
            tracing::warn!(bridge = %key.0, "port {} still not attached: {e}", key.1);
        }
        self.detached.insert(key, (e, retry));
    }

    /// What Open vSwitch does when a bridge gains its first (active)
    /// controller, loses its last one, or changes fail mode without one
    /// (checked against ovs-vswitchd 3.1): every rule goes, and a
    /// standalone bridge without controllers gets `priority=0,actions=normal`
    /// back. Groups stay.
    fn flush_flows(&mut self, bridge: &str) -> Result<(), String> {
        let (active, mode) = self
            .config
            .bridge(bridge)
            .map(|b| {
                (
                    has_active(&b.openflow.controllers),
                    b.openflow.fail_mode.unwrap_or_default(),
                )
            })
            .unwrap_or_default();
        let br = self.bridge(bridge)?;
        br.del_flows_str("").map_err(|e| e.to_string())?;
        if !active && mode == super::openflow::FailMode::Standalone {
            br.add_flow_str(DEFAULT_FLOW, now())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn of_configure(&mut self, bridge: &str) -> Result<(), String> {
        let bc = self
            .config
            .bridge(bridge)
            .ok_or_else(|| format!("no bridge `{bridge}`"))?;
        let targets = parse_targets(&bc.openflow.controllers)?;
        let mode = bc.openflow.fail_mode.unwrap_or_default();
        self.openflow.configure(bridge, &targets, mode, now())
    }

    pub fn handle(&mut self, req: Request) -> Response {
        match self.apply(req) {
            Ok(r) => r,
            Err(e) => Response::err(e),
        }
    }

    fn apply(&mut self, req: Request) -> Result<Response, String> {
        match req {
            Request::AddBr { bridge } => {
                if self.bridges.contains_key(&bridge) {
                    return Err(format!("bridge `{bridge}` already exists"));
                }
                if bridge.is_empty() || bridge.len() > 64 {
                    return Err(format!("bad bridge name `{bridge}`"));
                }
                let mut br = Bridge::new(&bridge, DatapathConfig::default());
                br.add_flow_str(DEFAULT_FLOW, now())
                    .map_err(|e| e.to_string())?;
                let _ = apply_offload(
                    &mut br,
                    OffloadMode::default(),
                    &BTreeMap::new(),
                    self.config_path.as_deref(),
                );
                self.bridges.insert(bridge.clone(), br);
                self.config.bridges.push(BridgeConfig {
                    name: bridge.clone(),
                    flows: Vec::new(),
                    ports: Vec::new(),
                    offload: None,
                    offload_options: BTreeMap::new(),
                    vfs: Vec::new(),
                    openflow: Default::default(),
                    flow_limit: None,
                });
                if let Err(e) = self.persist() {
                    // Not saved: the bridge goes again.
                    self.bridges.remove(&bridge);
                    self.config.bridges.retain(|b| b.name != bridge);
                    return Err(e);
                }
                Ok(Response::ok("", json!(null)))
            }
            Request::DelBr { bridge } => {
                if !self.bridges.contains_key(&bridge) {
                    return Err(format!("no bridge `{bridge}`"));
                }
                // Written first: a deletion the file cannot record is not made.
                let at = self.config.bridges.iter().position(|b| b.name == bridge);
                let bc = at.map(|i| self.config.bridges.remove(i));
                if let Err(e) = self.persist() {
                    if let (Some(i), Some(bc)) = (at, bc) {
                        self.config.bridges.insert(i, bc);
                    }
                    return Err(e);
                }
                // The ports are closed (dropped); now their veth pairs go.
                self.bridges.remove(&bridge);
                for vfc in bc.iter().flat_map(|b| &b.vfs) {
                    vf::delete_pair(&vfc.representor);
                    self.rep_kinds.remove(&vfc.representor);
                }
                self.uplink_kinds.remove(&bridge);
                self.openflow.remove(&bridge);
                self.detached.retain(|(b, _), _| *b != bridge);
                Ok(Response::ok("", json!(null)))
            }
            Request::AddPort {
                bridge,
                iface,
                kind,
                name,
                options,
            } => {
                let kind = PortType::parse(&kind).ok_or_else(|| {
                    format!(
                        "unknown port type `{kind}` (auto, tc, afxdp, afpacket, tap, internal, vxlan, geneve, uplink)"
                    )
                })?;
                let name = name.unwrap_or_else(|| iface.clone());
                if kind == PortType::Uplink {
                    self.check_new_uplink(&bridge, &iface)?;
                }
                self.bridge(&bridge)?;
                self.check_new_iface(kind, &iface, &options)?;
                let mode = self.mode_of(&bridge);
                let br = self.bridge(&bridge)?;
                if br.port_map().0.contains_key(&name) {
                    return Err(format!("bridge {bridge} already has a port `{name}`"));
                }
                let pc = PortConfig {
                    name,
                    iface,
                    kind,
                    options,
                };
                let port = open_port(&pc, mode)?;
                let opened = port.kind();
                let no = br.add_port(port).map_err(|e| e.to_string())?;
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
            Request::DelPort { bridge, name } => {
                if let Some(v) = self.vf_by_representor(&bridge, &name) {
                    return Err(format!(
                        "port {name} is the representor of VF {}; use `nicflow del-vf {bridge} {}`",
                        v.name, v.name
                    ));
                }
                if !self.bridge(&bridge)?.port_map().0.contains_key(&name) {
                    return Err(crate::bridge::BridgeError::NoSuchPort(name).to_string());
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
                self.bridge(&bridge)?
                    .del_port(&name)
                    .map_err(|e| e.to_string())?;
                if was_uplink {
                    self.uplink_kinds.remove(&bridge);
                }
                self.detached.remove(&(bridge, name));
                Ok(Response::ok("", json!(null)))
            }
            Request::Show => Ok(self.show()),
            Request::AddVf {
                bridge,
                namespace,
                name,
                mac,
                ips,
                rep_type,
            } => self.add_vf(
                &bridge,
                VfSpec::parse(
                    &namespace,
                    name.as_deref(),
                    mac.as_deref(),
                    &ips,
                    rep_type.as_deref(),
                )
                .map_err(|e| e.to_string())?,
            ),
            Request::DelVf { bridge, name } => self.del_vf(&bridge, &name),
            Request::AddFlow { bridge, flow } => {
                self.change_rules(&bridge, |br| {
                    br.add_flow_str(&flow, now()).map_err(|e| e.to_string())
                })?;
                Ok(Response::ok("", json!(null)))
            }
            Request::AddFlows { bridge, text } => {
                let n = self.change_rules(&bridge, |br| {
                    br.add_flows_str(&text, now()).map_err(|e| e.to_string())
                })?;
                Ok(Response::ok("", json!({ "added": n })))
            }
            Request::DelFlows { bridge, filter } => {
                let n = self.change_rules(&bridge, |br| {
                    br.del_flows_str(filter.as_deref().unwrap_or(""))
                        .map_err(|e| e.to_string())
                })?;
                Ok(Response::ok("", json!({ "deleted": n })))
            }
            Request::DumpFlows { bridge } => {
                let br = self.bridge(&bridge)?;
                let names = br.port_map().clone();
                let dumps = br.dump_flows(now());
                let mut text = String::new();
                let mut data = Vec::new();
                for d in &dumps {
                    let flow = nicflow_ofctl::format_flow(&d.spec, &names);
                    // The table is said once, among the counters, as
                    // ovs-ofctl dump-flows does.
                    let shown = nicflow_ofctl::FlowSpec {
                        table: 0,
                        ..d.spec.clone()
                    };
                    let _ = writeln!(
                        text,
                        " duration={:.3}s, table={}, n_packets={}, n_bytes={}, idle_age={}, {}",
                        d.duration.as_secs_f64(),
                        d.spec.table,
                        d.n_packets,
                        d.n_bytes,
                        d.idle_age.as_secs(),
                        nicflow_ofctl::format_flow(&shown, &names)
                    );
                    data.push(json!({
                        "table": d.spec.table,
                        "priority": d.spec.priority,
                        "cookie": d.spec.cookie,
                        "flow": flow,
                        "n_packets": d.n_packets,
                        "n_bytes": d.n_bytes,
                        "duration_s": d.duration.as_secs_f64(),
                        "idle_age_s": d.idle_age.as_secs(),
                    }));
                }
                Ok(Response::ok(text, json!(data)))
            }
            Request::DumpDpFlows { bridge } => {
                let br = self.bridge(&bridge)?;
                br.sync_offload();
                let mut text = String::new();
                let mut data = Vec::new();
                for f in br.dump_dp_flows(now()) {
                    let used = f
                        .used
                        .map(|u| format!("{:.3}s", u.as_secs_f64()))
                        .unwrap_or_else(|| "never".into());
                    let why = f
                        .not_offloaded
                        .map(|r| format!(", not_offloaded:{r}"))
                        .unwrap_or_default();
                    let _ = writeln!(
                        text,
                        "{}, packets:{}, bytes:{}, used:{}, engine:{}{}, actions:{}",
                        f.matching, f.packets, f.bytes, used, f.engine, why, f.actions
                    );
                    data.push(json!({
                        "match": f.matching,
                        "actions": f.actions,
                        "packets": f.packets,
                        "bytes": f.bytes,
                        "kernel_packets": f.kernel_packets,
                        "kernel_bytes": f.kernel_bytes,
                        "used_s": f.used.map(|u| u.as_secs_f64()),
                        "engine": f.engine,
                        "not_offloaded": f.not_offloaded,
                    }));
                }
                Ok(Response::ok(text, json!(data)))
            }
            Request::AddGroup { bridge, group } | Request::ModGroup { bridge, group }
                if group.trim().contains('\n') =>
            {
                Err(format!(
                    "one group per request on bridge {bridge}: `{group}`"
                ))
            }
            Request::AddGroup { bridge, group } => {
                self.change_rules(&bridge, |br| {
                    br.add_groups_str(&group, false, now())
                        .map_err(|e| e.to_string())
                })?;
                Ok(Response::ok("", json!(null)))
            }
            Request::ModGroup { bridge, group } => {
                self.change_rules(&bridge, |br| {
                    br.add_groups_str(&group, true, now())
                        .map_err(|e| e.to_string())
                })?;
                Ok(Response::ok("", json!(null)))
            }
            Request::AddMeter { bridge, meter } | Request::ModMeter { bridge, meter }
                if meter.trim().contains('\n') =>
            {
                Err(format!(
                    "one meter per request on bridge {bridge}: `{meter}`"
                ))
            }
            Request::AddMeter { bridge, meter } => {
                self.change_rules(&bridge, |br| {
                    br.add_meter_str(&meter, false, now())
                        .map_err(|e| e.to_string())
                })?;
                Ok(Response::ok("", json!(null)))
            }
            Request::ModMeter { bridge, meter } => {
                self.change_rules(&bridge, |br| {
                    br.add_meter_str(&meter, true, now())
                        .map_err(|e| e.to_string())
                })?;
                Ok(Response::ok("", json!(null)))
            }
            Request::DelMeters { bridge, filter } => {
                let id =
                    nicflow_ofctl::meter::parse_meter_selector(filter.as_deref().unwrap_or(""))
                        .map_err(|e| e.to_string())?;
                let (meters, rules) =
                    self.change_rules(&bridge, |br| Ok(br.del_meters(id, now())))?;
                Ok(Response::ok(
                    "",
                    json!({ "deleted": meters, "rules_deleted": rules }),
                ))
            }
            Request::DumpMeters { bridge } => {
                let meters = self.bridge(&bridge)?.dump_meters();
                let mut text = String::new();
                for m in &meters {
                    let _ = writeln!(text, "{}", nicflow_ofctl::meter::format_meter_config(m));
                }
                let lines: Vec<String> = meters
                    .iter()
                    .map(nicflow_ofctl::meter::format_meter_spec)
                    .collect();
                Ok(Response::ok(text, json!(lines)))
            }
            Request::MeterStats { bridge, filter } => {
                let id =
                    nicflow_ofctl::meter::parse_meter_selector(filter.as_deref().unwrap_or(""))
                        .map_err(|e| e.to_string())?;
                let stats = self.bridge(&bridge)?.meter_stats(id, now());
                let text: String = stats.iter().map(|m| m.format()).collect();
                let data: Vec<_> = stats
                    .iter()
                    .map(|m| {
                        json!({
                            "meter_id": m.meter_id,
                            "flow_count": m.flow_count,
                            "packet_in_count": m.packets_in,
                            "byte_in_count": m.bytes_in,
                            "duration_s": m.duration.as_secs_f64(),
                            "bands": m.bands.iter().map(|(p, b)| json!({"packet_count": p, "byte_count": b})).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                Ok(Response::ok(text, json!(data)))
            }
            Request::AddGroups { bridge, text } => {
                let n = self.change_rules(&bridge, |br| {
                    br.add_groups_str(&text, false, now())
                        .map_err(|e| e.to_string())
                })?;
                Ok(Response::ok("", json!({ "added": n })))
            }
            Request::DelGroups { bridge, filter } => {
                let (groups, rules) = self.change_rules(&bridge, |br| {
                    br.del_groups_str(filter.as_deref().unwrap_or(""))
                        .map_err(|e| e.to_string())
                })?;
                Ok(Response::ok(
                    "",
                    json!({ "deleted": groups, "rules_deleted": rules }),
                ))
            }
            Request::DumpGroups { bridge } => {
                let lines = self.bridge(&bridge)?.dump_groups_text();
                let mut text = String::new();
                for l in &lines {
                    let _ = writeln!(text, " {l}");
                }
                Ok(Response::ok(text, json!(lines)))
            }
            Request::DumpGroupStats { bridge } => {
                let stats = self.bridge(&bridge)?.group_stats(now());
                let mut text = String::new();
                let mut data = Vec::new();
                for g in &stats {
                    let _ = write!(
                        text,
                        " group_id={},duration={:.3}s,ref_count={},packet_count={},byte_count={}",
                        g.group_id,
                        g.duration.as_secs_f64(),
                        g.ref_count,
                        g.packets,
                        g.bytes
                    );
                    for (i, (p, b)) in g.buckets.iter().enumerate() {
                        let _ = write!(text, ",bucket{i}:packet_count={p},byte_count={b}");
                    }
                    text.push('\n');
                    data.push(json!({
                        "group_id": g.group_id,
                        "duration_s": g.duration.as_secs_f64(),
                        "ref_count": g.ref_count,
                        "packet_count": g.packets,
                        "byte_count": g.bytes,
                        "buckets": g.buckets.iter().map(|(p, b)| json!({
                            "packet_count": p, "byte_count": b,
                        })).collect::<Vec<_>>(),
                    }));
                }
                Ok(Response::ok(text, json!(data)))
            }
            Request::DumpConntrack {
                bridge,
                zone,
                verbose,
                stats,
            } => {
                let br = self.bridge(&bridge)?;
                let mut text = String::new();
                let mut data = Vec::new();
                for e in br.conntrack().dump(zone, now()) {
                    let line = e.format(verbose, stats);
                    let _ = writeln!(text, "{line}");
                    data.push(json!(line));
                }
                Ok(Response::ok(text, json!(data)))
            }
            Request::FlushConntrack {
                bridge,
                zone,
                filter,
            } => {
                let mut f = match filter.as_deref() {
                    Some(t) => crate::nf::conntrack::parse_flush_tuple(t)?,
                    None => nicflow_conntrack::FlushFilter::default(),
                };
                f.zone = zone;
                let br = self.bridge(&bridge)?;
                let n = br.flush_conntrack(&f);
                Ok(Response::ok(
                    format!("flushed {n} connection(s)\n"),
                    json!({ "flushed": n }),
                ))
            }
            Request::ConntrackStats { bridge } => {
                let br = self.bridge(&bridge)?;
                let ct = br.conntrack();
                let st = ct.stats();
                let mut text = format!(
                    "connections: {} (limit {})\n  tcp: {}  udp: {}  sctp: {}  icmp: {}  icmpv6: {}  other: {}\ncreated: {}  expired: {}  removed: {}  limit_drops: {}\n",
                    st.connections,
                    ct.config().limit,
                    st.tcp,
                    st.udp,
                    st.sctp,
                    st.icmp,
                    st.icmpv6,
                    st.other,
                    st.created,
                    st.expired,
                    st.removed,
                    st.limit_drops
                );
                let mut invalid = serde_json::Map::new();
                for r in nicflow_conntrack::InvalidReason::ALL {
                    let n = st.invalid_count(r);
                    if n > 0 {
                        let _ = writeln!(text, "invalid {}: {n}", r.name());
                        invalid.insert(r.name().into(), json!(n));
                    }
                }
                Ok(Response::ok(
                    text,
                    json!({
                        "connections": st.connections,
                        "limit": ct.config().limit,
                        "tcp": st.tcp, "udp": st.udp, "sctp": st.sctp,
                        "icmp": st.icmp, "icmpv6": st.icmpv6, "other": st.other,
                        "created": st.created, "expired": st.expired,
                        "removed": st.removed, "limit_drops": st.limit_drops,
                        "invalid": invalid,
                    }),
                ))
            }
            Request::Stats => Ok(self.stats()),
            Request::Set { bridge, key, value } => {
                let config_path = self.config_path.clone();
                match key.as_str() {
                    "offload" => {
                        let mode = OffloadMode::parse(&value).ok_or_else(|| {
                            format!("offload={value}: expected auto, tc, xdp or none")
                        })?;
                        let options = self
                            .config
                            .bridge(&bridge)
                            .map(|b| b.offload_options.clone())
                            .unwrap_or_default();
                        let br = self.bridge(&bridge)?;
                        apply_offload(br, mode, &options, config_path.as_deref())?;
                        let mut old = None;
                        if let Some(bc) = self.config.bridge_mut(&bridge) {
                            old = Some(bc.offload);
                            bc.offload = Some(mode);
                        }
                        if let Err(e) = self.persist() {
                            // Not saved: back to the configured mode.
                            let old = old.flatten();
                            if let Some(bc) = self.config.bridge_mut(&bridge) {
                                bc.offload = old;
                            }
                            let br = self.bridge(&bridge)?;
                            let _ = apply_offload(
                                br,
                                old.unwrap_or_default(),
                                &options,
                                config_path.as_deref(),
                            );
                            return Err(e);
                        }
                        Ok(Response::ok("", json!({ "offload": mode.as_str() })))
                    }
                    "protocols" => {
                        let v = check_protocols(&value)?;
                        self.bridge(&bridge)?;
                        let mut old = None;
                        if let Some(bc) = self.config.bridge_mut(&bridge) {
                            old = bc.openflow.protocols.replace(v.clone());
                        }
                        if let Err(e) = self.persist() {
                            if let Some(bc) = self.config.bridge_mut(&bridge) {
                                bc.openflow.protocols = old;
                            }
                            return Err(e);
                        }
                        Ok(Response::ok("", json!({ "protocols": v })))
                    }
                    "flow_limit" => {
                        // OVS's other_config:flow-limit.
                        let n: usize = value.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                            format!("flow_limit={value}: expected a positive number of flows")
                        })?;
                        self.bridge(&bridge)?.set_flow_limit(n);
                        if let Some(bc) = self.config.bridge_mut(&bridge) {
                            bc.flow_limit = Some(n);
                        }
                        self.persist()?;
                        Ok(Response::ok("", json!({ "flow_limit": n })))
                    }
                    _ => Err(format!(
                        "unknown bridge setting `{key}` (offload, protocols, flow_limit)"
                    )),
                }
            }
            Request::SetController { bridge, targets } => {
                self.bridge(&bridge)?;
                let parsed = parse_targets(&targets)?;
                let saved = self.checkpoint(&bridge);
                let texts: Vec<String> = parsed.iter().map(|t| t.to_string()).collect();
                let mode = self
                    .config
                    .bridge(&bridge)
                    .and_then(|b| b.openflow.fail_mode)
                    .unwrap_or_default();
                self.openflow.configure(&bridge, &parsed, mode, now())?;
                let mut had = false;
                if let Some(bc) = self.config.bridge_mut(&bridge) {
                    had = has_active(&bc.openflow.controllers);
                    bc.openflow.controllers = texts.clone();
                }
                if had != has_active(&texts) {
                    self.flush_flows(&bridge)?;
                }
                self.persist_or_undo(&bridge, saved)?;
                Ok(Response::ok("", json!({ "controllers": texts })))
            }
            Request::DelController { bridge } => {
                self.bridge(&bridge)?;
                let saved = self.checkpoint(&bridge);
                let mut had = false;
                if let Some(bc) = self.config.bridge_mut(&bridge) {
                    had = has_active(&bc.openflow.controllers);
                    bc.openflow.controllers.clear();
                }
                self.of_configure(&bridge)?;
                if had {
                    self.flush_flows(&bridge)?;
                }
                self.persist_or_undo(&bridge, saved)?;
                Ok(Response::ok("", json!(null)))
            }
            Request::GetController { bridge } => {
                self.bridge(&bridge)?;
                let st = self.openflow.status(&bridge);
                let mut text = String::new();
                for t in &st {
                    let _ = writeln!(text, "Controller \"{}\"", t.target);
                    if let Some(why) = &t.last_refusal {
                        let _ = writeln!(text, "    refused: {} (last: {why})", t.refused);
                    }
                    if t.connected > 0 {
                        let _ = writeln!(
                            text,
                            "    is_connected: true ({} connection{}, role {})",
                            t.connected,
                            if t.connected == 1 { "" } else { "s" },
                            t.roles.join(",")
                        );
                    }
                }
                let dropped = self.openflow.async_dropped(&bridge);
                if dropped > 0 {
                    let _ = writeln!(
                        text,
                        "asynchronous messages dropped (slow controllers): {dropped}"
                    );
                }
                Ok(Response::ok(
                    text,
                    json!({ "controllers": st, "async_dropped": dropped }),
                ))
            }
            Request::SetFailMode { bridge, mode } => {
                self.bridge(&bridge)?;
                let m = super::openflow::FailMode::parse(&mode)
                    .ok_or_else(|| format!("fail mode `{mode}`: expected standalone or secure"))?;
                let saved = self.checkpoint(&bridge);
                let mut flush = false;
                if let Some(bc) = self.config.bridge_mut(&bridge) {
                    flush = bc.openflow.fail_mode.unwrap_or_default() != m
                        && !has_active(&bc.openflow.controllers);
                    bc.openflow.fail_mode = Some(m);
                }
                self.of_configure(&bridge)?;
                if flush {
                    self.flush_flows(&bridge)?;
                }
                self.persist_or_undo(&bridge, saved)?;
                Ok(Response::ok("", json!({ "fail_mode": m.as_str() })))
            }
            Request::SetSsl {
                private_key,
                certificate,
                ca_cert,
            } => {
                let files = super::openflow::tls::SslFiles {
                    private_key,
                    certificate,
                    ca_cert,
                };
                self.openflow.set_ssl(&files)?;
                self.config.ssl = Some(files);
                self.persist()?;
                Ok(Response::ok("", json!(null)))
            }
            Request::GetSsl => Ok(match &self.config.ssl {
                Some(f) => Response::ok(
                    format!(
                        "Private key: {}\nCertificate: {}\nCA Certificate: {}\n",
                        f.private_key.display(),
                        f.certificate.display(),
                        f.ca_cert.display()
                    ),
                    json!(f),
                ),
                None => Response::ok("", json!(null)),
            }),
            Request::DelSsl => {
                self.openflow.del_ssl()?;
                self.config.ssl = None;
                self.persist()?;
                Ok(Response::ok("", json!(null)))
            }
            Request::GetFailMode { bridge } => {
                self.bridge(&bridge)?;
                let m = self
                    .config
                    .bridge(&bridge)
                    .and_then(|b| b.openflow.fail_mode);
                Ok(Response::ok(
                    m.map(|m| format!("{}\n", m.as_str())).unwrap_or_default(),
                    json!({ "fail_mode": m.map(|m| m.as_str()) }),
                ))
            }
        }
    }

    /// `add-port --type uplink`: refused (before anything is opened) when
    /// the bridge already has an uplink, or when the interface is already
    /// in use by a port, a VF representor or a tunnel underlay of any
    /// bridge.
    fn check_new_uplink(&self, bridge: &str, iface: &str) -> Result<(), String> {
        let bc = self
            .config
            .bridge(bridge)
            .ok_or_else(|| format!("no bridge `{bridge}`"))?;
        if let Some(u) = bc.uplink() {
            return Err(format!(
                "bridge {bridge} already has an uplink `{}` (netdev {}); a bridge has at most one (`nicflow del-port {bridge} {}` first)",
                u.name, u.iface, u.name
            ));
        }
        vf::check_ifname(iface, "uplink interface").map_err(|e| e.to_string())?;
        for b in &self.config.bridges {
            for p in &b.ports {
                let underlay = matches!(p.kind, PortType::Vxlan | PortType::Geneve)
                    && p.options.get("underlay").map(String::as_str) == Some(iface);
                if underlay {
                    return Err(format!(
                        "interface `{iface}` is the underlay of tunnel port {} of bridge {}; it cannot also be an uplink",
                        p.name, b.name
                    ));
                }
                if p.iface == iface && !matches!(p.kind, PortType::Vxlan | PortType::Geneve) {
                    return Err(format!(
                        "interface `{iface}` is already attached as port {} of bridge {}",
                        p.name, b.name
                    ));
                }
            }
            if let Some(v) = b.vfs.iter().find(|v| v.representor == iface) {
                return Err(format!(
                    "interface `{iface}` is the representor of VF {} of bridge {}; it cannot be an uplink",
                    v.name, b.name
                ));
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
        options: &super::proto::PortOptions,
    ) -> Result<(), String> {
        if matches!(kind, PortType::Vxlan | PortType::Geneve) {
            if let Some(u) = options.get("underlay") {
                if let Some(user) = self.config.iface_user(u, false) {
                    return Err(format!(
                        "interface `{u}` is already attached as {user}; it cannot also be a tunnel's underlay"
                    ));
                }
            }
            return Ok(());
        }
        match self.config.iface_user(iface, true) {
            Some(user) => Err(format!(
                "interface `{iface}` is already attached as {user}; an interface is attached once (`nicflow del-port` it there first)"
            )),
            None => Ok(()),
        }
    }

    /// The devlink-style entry of a bridge's uplink (flavour `physical`).
    fn uplink_json(&self, bridge: &str, u: &PortConfig) -> serde_json::Value {
        let no = self.ofport(bridge, &u.name);
        json!({
            "name": u.name, "netdev": u.iface, "type": u.kind.as_str(),
            "port_kind": self.uplink_kinds.get(bridge),
            "ofport": no, "flavour": "physical", "port": 0, "pfnum": 0,
        })
    }

    fn vf_by_representor(&self, bridge: &str, rep: &str) -> Option<&VfConfig> {
        self.config
            .bridge(bridge)?
            .vfs
            .iter()
            .find(|v| v.representor == rep)
    }

    /// The OpenFlow port number of `port` on `bridge`, if attached.
    fn ofport(&self, bridge: &str, port: &str) -> Option<u32> {
        self.bridges.get(bridge).and_then(|b| b.attached(port))
    }

    fn vf_json(&self, bridge: &str, v: &VfConfig) -> serde_json::Value {
        let no = self.ofport(bridge, &v.representor);
        json!({
            "index": v.index, "name": v.name, "namespace": v.namespace,
            "mac": v.mac, "ips": v.ips, "representor": v.representor,
            "rep_type": v.rep_type.as_str(),
            "port_kind": self.rep_kinds.get(&v.representor),
            "ofport": no, "flavour": "pcivf", "pfnum": 0, "vfnum": v.index,
        })
    }

    /// `add-vf`: every check first, then the pair, the port, the config; a
    /// failure at any step undoes the earlier ones.
    fn add_vf(&mut self, bridge: &str, spec: VfSpec) -> Result<Response, String> {
        let dup = |m: String| Err(VfError::Duplicate(m).to_string());
        if !self.bridges.contains_key(bridge) {
            return Err(format!("no bridge `{bridge}`"));
        }
        if !vf::namespace_exists(&spec.namespace) {
            return Err(VfError::UnknownNamespace(spec.namespace).to_string());
        }
        let existing = self
            .config
            .bridge(bridge)
            .map(|b| b.vfs.as_slice())
            .unwrap_or(&[]);
        let index = (0..=vf::MAX_VF_INDEX)
            .find(|i| !existing.iter().any(|v| v.index == *i))
            .ok_or_else(|| VfError::NoFreeIndex(bridge.to_string()).to_string())?;
        let name = spec.name.unwrap_or_else(|| vf::default_vf_name(index));
        // Interface names are per namespace (every CNI pod has an `eth0`),
        // so VF names are unique per bridge and namespace.
        if existing
            .iter()
            .any(|v| v.name == name && v.namespace == spec.namespace)
        {
            return dup(format!(
                "bridge {bridge} already has a VF `{name}` in namespace {}",
                spec.namespace
            ));
        }
        let representor = vf::representor_name(bridge, index);
        for bc in &self.config.bridges {
            if let Some(v) = bc.vfs.iter().find(|v| v.representor == representor) {
                return dup(format!(
                    "representor name `{representor}` is taken by VF {} of bridge {} (the bridge names' hashes collide; rename a bridge)",
                    v.name, bc.name
                ));
            }
        }
        if let Some(user) = self.config.iface_user(&representor, true) {
            return dup(format!(
                "interface `{representor}` is already attached as {user}"
            ));
        }
        if self.bridges[bridge].port_map().0.contains_key(&representor) {
            return dup(format!(
                "bridge {bridge} already has a port `{representor}`"
            ));
        }
        if vf::link_exists(None, &representor) {
            return dup(format!(
                "interface `{representor}` already exists in the daemon's namespace"
            ));
        }
        if vf::link_exists(Some(&spec.namespace), &name) {
            return dup(format!(
                "namespace {} already has an interface `{name}`",
                spec.namespace
            ));
        }
        let mac = spec.mac.unwrap_or_else(|| vf::default_mac(bridge, index));
        let vfc = VfConfig {
            name,
            index,
            namespace: spec.namespace,
            mac: vf::format_mac(&mac),
            ips: spec.ips,
            representor,
            rep_type: spec.rep_type,
        };
        vf::create_pair(bridge, &vfc).map_err(|e| format!("VF {}: {e}", vfc.name))?;
        let undo = |e: String| {
            vf::delete_pair(&vfc.representor);
            e
        };
        let port = open_port(&vfc.port_config(), self.mode_of(bridge))
            .map_err(|e| undo(format!("representor {}: {e}", vfc.representor)))?;
        let kind = port.kind();
        let no = self
            .bridge(bridge)?
            .add_port(port)
            .map_err(|e| undo(e.to_string()))?;
        if let Some(bc) = self.config.bridge_mut(bridge) {
            bc.vfs.push(vfc.clone());
            bc.vfs.sort_by_key(|v| v.index);
        }
        self.rep_kinds.insert(vfc.representor.clone(), kind);
        if let Err(e) = self.persist() {
            if let Some(br) = self.bridges.get_mut(bridge) {
                let _ = br.del_port(&vfc.representor);
            }
            self.forget_vf(bridge, &vfc.representor);
            return Err(undo(e));
        }
        let text = format!(
            "VF {} (index {}) in namespace {}: mac {}, representor {} ({kind}) ofport {no}\n",
            vfc.name, vfc.index, vfc.namespace, vfc.mac, vfc.representor
        );
        Ok(Response::ok(text, self.vf_json(bridge, &vfc)))
    }

    fn forget_vf(&mut self, bridge: &str, representor: &str) {
        if let Some(bc) = self.config.bridge_mut(bridge) {
            bc.vfs.retain(|v| v.representor != representor);
        }
        self.rep_kinds.remove(representor);
    }

    /// `del-vf`: detach the representor, delete the pair, forget the VF.
    fn del_vf(&mut self, bridge: &str, name: &str) -> Result<Response, String> {
        if !self.bridges.contains_key(bridge) {
            return Err(format!("no bridge `{bridge}`"));
        }
        let vfs = self
            .config
            .bridge(bridge)
            .map(|b| b.vfs.as_slice())
            .unwrap_or(&[]);
        // A representor name is unique; a VF name may repeat across
        // namespaces, and then only the representor says which VF.
        let by_name: Vec<&VfConfig> = vfs.iter().filter(|v| v.name == name).collect();
        let vfc = match vfs.iter().find(|v| v.representor == name) {
            Some(v) => v.clone(),
            None if by_name.len() > 1 => {
                let reps: Vec<&str> = by_name.iter().map(|v| v.representor.as_str()).collect();
                return Err(format!(
                    "bridge {bridge} has {} VFs named `{name}` (in different namespaces); name one by its representor: {}",
                    by_name.len(),
                    reps.join(", ")
                ));
            }
            None => by_name
                .first()
                .map(|v| (*v).clone())
                .ok_or_else(|| format!("bridge {bridge} has no VF `{name}`"))?,
        };
        // Written first: a deletion the file cannot record is not made.
        if let Some(bc) = self.config.bridge_mut(bridge) {
            bc.vfs.retain(|v| v.representor != vfc.representor);
        }
        if let Err(e) = self.persist_without(Some((bridge, &vfc.representor))) {
            if let Some(bc) = self.config.bridge_mut(bridge) {
                bc.vfs.push(vfc.clone());
                bc.vfs.sort_by_key(|v| v.index);
            }
            return Err(e);
        }
        let br = self.bridge(bridge)?;
        if br.port_map().0.contains_key(&vfc.representor) {
            br.del_port(&vfc.representor).map_err(|e| e.to_string())?;
        }
        vf::delete_pair(&vfc.representor);
        self.forget_vf(bridge, &vfc.representor);
        self.detached
            .remove(&(bridge.to_string(), vfc.representor.clone()));
        Ok(Response::ok("", json!(null)))
    }

    fn show(&self) -> Response {
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

    fn stats(&self) -> Response {
        let mut text = String::new();
        let mut data = Vec::new();
        for (name, br) in &self.bridges {
            let s = br.dp_stats();
            let _ = writeln!(text, "bridge {name}:");
            let _ = writeln!(
                text,
                "  datapath: packets:{} emc_hits:{} megaflow_hits:{} upcalls:{} flows:{} installed:{} removed:{} revalidations:{}",
                s.packets,
                s.emc_hits,
                s.megaflow_hits,
                s.upcalls,
                br.n_dp_flows(),
                s.flows_installed,
                s.flows_removed,
                s.revalidations
            );
            // Packets per engine: the userspace datapath saw `s.packets`
            // (misses of the XDP program included); the XDP program
            // finished `hit` frames in the kernel.
            let off = br.offload_status();
            let offload_json = match &off {
                Some(o) => {
                    let e = &o.engine;
                    let tc_hit = o.tc.map_or(0, |t| t.hit);
                    let _ = writeln!(
                        text,
                        "  engines: tc packets:{} xdp packets:{} userspace packets:{}",
                        tc_hit, e.hit, s.packets
                    );
                    if let Some(t) = &o.tc {
                        let _ = writeln!(
                            text,
                            "  offload: tc flows:{} rx:{} hit:{} miss:{} unparsed:{} punt:{} output:{} drop:{} aborted:{} decap:{} encap:{} ports:{}",
                            o.tc_flows,
                            t.rx,
                            t.hit,
                            t.miss,
                            t.unparsed,
                            t.punt,
                            t.output,
                            t.drop,
                            t.aborted,
                            t.decap,
                            t.encap,
                            o.tc_ports.len()
                        );
                    }
                    let _ = writeln!(
                        text,
                        "  offload: xdp flows:{} rx:{} hit:{} miss:{} unparsed:{} punt:{} output:{} drop:{} aborted:{} decap:{} encap:{}",
                        o.xdp_flows,
                        e.rx,
                        e.hit,
                        e.miss,
                        e.unparsed,
                        e.punt,
                        e.output,
                        e.drop,
                        e.aborted,
                        e.decap,
                        e.encap,
                    );
                    // The manager's decisions cover both engines.
                    let _ = writeln!(
                        text,
                        "  offload manager ({}): installed:{} modified:{} removed:{} refused:{}",
                        br.offload_mode_name(),
                        o.manager.installed,
                        o.manager.modified,
                        o.manager.removed,
                        o.manager.refused
                    );
                    if !o.not_offloaded.is_empty() {
                        let _ = writeln!(
                            text,
                            "  not offloaded: {}",
                            o.not_offloaded
                                .iter()
                                .map(|(k, v)| format!("{k}:{v}"))
                                .collect::<Vec<_>>()
                                .join(" ")
                        );
                    }
                    let tc_json = o.tc.map(|t| {
                        json!({
                            "flows": o.tc_flows,
                            "rx": t.rx, "hit": t.hit, "miss": t.miss, "unparsed": t.unparsed,
                            "no_port": t.no_port, "punt": t.punt, "output": t.output,
                            "drop": t.drop, "aborted": t.aborted,
                            "decap": t.decap, "encap": t.encap,
                            "ports": o.tc_ports.iter().map(|(n, peer)| json!({
                                "name": n, "redirect_peer": peer,
                            })).collect::<Vec<_>>(),
                        })
                    });
                    json!({
                        "mode": br.offload_mode_name(),
                        "tc": tc_json,
                        "xdp_flows": o.xdp_flows,
                        "flows": o.kernel_flows,
                        "rx": e.rx, "hit": e.hit, "miss": e.miss, "unparsed": e.unparsed,
                        "no_port": e.no_port, "punt": e.punt, "output": e.output,
                        "drop": e.drop, "aborted": e.aborted,
                        "decap": e.decap, "encap": e.encap,
                        "installed": o.manager.installed, "modified": o.manager.modified,
                        "removed": o.manager.removed, "refused": o.manager.refused,
                        "ports": o.ports.iter().map(|(n, native, target)| json!({
                            "name": n, "native": native, "redirect_target": target,
                        })).collect::<Vec<_>>(),
                        "not_offloaded": o.not_offloaded,
                    })
                }
                None => {
                    let _ = writeln!(
                        text,
                        "  engines: userspace packets:{} (offload none)",
                        s.packets
                    );
                    json!({ "mode": "none" })
                }
            };
            let engines = json!({
                "xdp_packets": off.as_ref().map(|o| o.engine.hit).unwrap_or(0),
                "tc_packets": off.as_ref().and_then(|o| o.tc).map_or(0, |t| t.hit),
                "userspace_packets": s.packets,
            });
            // Every drop: userspace, kernel engines and ports (rings).
            let drops = br.drops();
            let _ = writeln!(
                text,
                "  drops: {}",
                if drops.is_empty() {
                    "none".to_string()
                } else {
                    drops
                        .iter()
                        .map(|(k, v)| format!("{k}:{v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                }
            );
            let l = br.limits();
            let kernel_map = match l.kernel_max_flows {
                Some(max) => format!(
                    "kernel flows:{}/{max} refused_full:{}{} insert_errors:{}",
                    l.kernel_flows,
                    l.kernel_full,
                    if l.kernel_map_full { " (full)" } else { "" },
                    l.kernel_errors
                ),
                None => "kernel flows: (offload none)".to_string(),
            };
            let _ = writeln!(
                text,
                "  limits: flows:{}/{} flow_limit_hits:{}{}  {kernel_map}  conntrack:{}/{} ct_limit_hits:{}  rounds_deferred:{}",
                l.flows,
                l.flow_limit,
                l.flow_limit_hits,
                if l.flow_limit_reached {
                    " (reached)"
                } else {
                    ""
                },
                l.ct_connections,
                l.ct_limit,
                l.ct_limit_hits,
                l.rounds_deferred,
            );
            let limits_json = json!({
                "flow_limit": l.flow_limit, "flows": l.flows,
                "flow_limit_hits": l.flow_limit_hits,
                "kernel_max_flows": l.kernel_max_flows, "kernel_flows": l.kernel_flows,
                "kernel_refused_full": l.kernel_full, "kernel_insert_errors": l.kernel_errors,
                "ct_limit": l.ct_limit, "ct_connections": l.ct_connections,
                "ct_limit_hits": l.ct_limit_hits, "rounds_deferred": l.rounds_deferred,
                "flow_limit_reached": l.flow_limit_reached, "kernel_map_full": l.kernel_map_full,
            });
            let mut ports = Vec::new();
            for (pname, no, ps, extra) in br.port_stats_detailed() {
                let _ = writeln!(
                    text,
                    "  port {no} {pname}: rx pkts:{} bytes:{} drop:{}  tx pkts:{} bytes:{} drop:{}",
                    ps.rx_packets,
                    ps.rx_bytes,
                    ps.rx_dropped,
                    ps.tx_packets,
                    ps.tx_bytes,
                    ps.tx_dropped
                );
                let extra: BTreeMap<&str, u64> = extra.into_iter().collect();
                let nonzero: Vec<String> = extra
                    .iter()
                    .filter(|(_, v)| **v > 0)
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect();
                if !nonzero.is_empty() {
                    let _ = writeln!(text, "    {}", nonzero.join(" "));
                }
                ports.push(json!({
                    "counters": extra,
                    "name": pname, "ofport": no,
                    "rx_packets": ps.rx_packets, "rx_bytes": ps.rx_bytes, "rx_dropped": ps.rx_dropped,
                    "tx_packets": ps.tx_packets, "tx_bytes": ps.tx_bytes, "tx_dropped": ps.tx_dropped,
                }));
            }
            // Configured ports whose interface is missing (see `tick`).
            if let Some(bc) = self.config.bridge(name) {
                let reps = bc.vfs.iter().map(|v| v.representor.as_str());
                for pname in bc.ports.iter().map(|p| p.name.as_str()).chain(reps) {
                    if br.attached(pname).is_none() {
                        let _ = writeln!(text, "  port {pname}: not attached");
                        ports.push(json!({ "name": pname, "ofport": null, "attached": false }));
                    }
                }
            }
            data.push(json!({
                "bridge": name,
                "datapath": {
                    "packets": s.packets, "emc_hits": s.emc_hits,
                    "megaflow_hits": s.megaflow_hits, "upcalls": s.upcalls,
                    "flows": br.n_dp_flows(), "flows_installed": s.flows_installed,
                    "flows_removed": s.flows_removed, "revalidations": s.revalidations,
                    "drops": drops,
                },
                "engines": engines,
                "limits": limits_json,
                "offload": offload_json,
                "ports": ports,
            }));
        }
        Response::ok(text, json!(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A switch whose bridge br0 has an uplink on an interface that does
    /// not exist: the port is left out of the run (logged), the config and
    /// `show` still know it.
    fn switch_with_absent_uplink() -> Switch {
        let cfg = Config::parse(
            "[[bridge]]\nname='br0'\noffload='none'\n[[bridge.port]]\nname='p0'\niface='nfup-absent0'\ntype='uplink'\n[[bridge]]\nname='br1'\noffload='none'\n",
        )
        .unwrap();
        Switch::new(cfg, None).unwrap()
    }

    fn flows(sw: &mut Switch) -> String {
        let r = sw.handle(Request::DumpFlows {
            bridge: "br0".into(),
        });
        assert!(r.ok, "{r:?}");
        r.text
    }

    fn ok(sw: &mut Switch, req: Request) {
        let r = sw.handle(req);
        assert!(r.ok, "{r:?}");
    }

    /// Controllers and fail modes change the rules as in OVS 3.1: only
    /// active controllers count; gaining the first or losing the last one
    /// deletes every rule (NORMAL comes back when standalone without
    /// controllers); changing the fail mode without controllers too.
    #[test]
    fn controllers_and_fail_modes_flush_like_ovs() {
        let cfg = Config::parse(
            "[[bridge]]\nname='br0'\noffload='none'\nflows=['priority=0 actions=NORMAL','priority=5 actions=drop']\n",
        )
        .unwrap();
        let mut sw = Switch::new(cfg, None).unwrap();
        let set = |targets: &[&str]| Request::SetController {
            bridge: "br0".into(),
            targets: targets.iter().map(|t| t.to_string()).collect(),
        };
        // A listener is no controller: nothing changes.
        ok(&mut sw, set(&["ptcp:0:127.0.0.1"]));
        assert_eq!(flows(&mut sw).lines().count(), 2);
        // The first active controller: every rule goes.
        ok(&mut sw, set(&["ptcp:0:127.0.0.1", "tcp:127.0.0.1:1"]));
        assert_eq!(flows(&mut sw), "");
        sw.handle(Request::AddFlow {
            bridge: "br0".into(),
            flow: "priority=5,actions=drop".into(),
        });
        // The last one goes: rules flushed, NORMAL back (standalone).
        ok(
            &mut sw,
            Request::DelController {
                bridge: "br0".into(),
            },
        );
        let f = flows(&mut sw);
        assert!(
            f.contains("priority=0 actions=NORMAL") && f.lines().count() == 1,
            "{f}"
        );
        // Secure without controllers: flushed, nothing added.
        ok(
            &mut sw,
            Request::SetFailMode {
                bridge: "br0".into(),
                mode: "secure".into(),
            },
        );
        assert_eq!(flows(&mut sw), "");
        let r = sw.handle(Request::SetFailMode {
            bridge: "br0".into(),
            mode: "sometimes".into(),
        });
        assert!(!r.ok);
        let r = sw.handle(set(&["tcp:nowhere"]));
        assert!(!r.ok, "{r:?}");
        let r = sw.handle(Request::Set {
            bridge: "br0".into(),
            key: "protocols".into(),
            value: "OpenFlow10".into(),
        });
        assert!(
            !r.ok && r.error.as_deref().unwrap_or("").contains("OpenFlow13"),
            "{r:?}"
        );
        ok(
            &mut sw,
            Request::Set {
                bridge: "br0".into(),
                key: "protocols".into(),
                value: "OpenFlow10,OpenFlow13".into(),
            },
        );
        let bc = sw.config.bridge("br0").unwrap();
        assert_eq!(
            bc.openflow.fail_mode,
            Some(super::super::openflow::FailMode::Secure)
        );
        assert_eq!(
            bc.openflow.protocols.as_deref(),
            Some("OpenFlow10,OpenFlow13")
        );
    }

    fn add_port(sw: &mut Switch, bridge: &str, iface: &str, kind: &str) -> Response {
        sw.handle(Request::AddPort {
            bridge: bridge.into(),
            iface: iface.into(),
            kind: kind.into(),
            name: None,
            options: Default::default(),
        })
    }

    fn show_json(sw: &Switch) -> serde_json::Value {
        serde_json::to_value(sw.show()).unwrap()
    }

    #[test]
    fn show_lists_the_uplink_as_physical() {
        let sw = switch_with_absent_uplink();
        let r = sw.show();
        let j = serde_json::to_value(&r).unwrap();
        let text = j.to_string();
        assert!(
            text.contains("uplink p0: netdev nfup-absent0 (afxdp) flavour physical port 0 pfnum 0 not attached"),
            "{text}"
        );
        let br0 = &j["data"][0];
        assert_eq!(br0["uplink"]["flavour"], "physical", "{j}");
        assert_eq!(br0["uplink"]["netdev"], "nfup-absent0");
        assert_eq!(br0["uplink"]["port"], 0);
        assert_eq!(br0["uplink"]["pfnum"], 0);
        assert!(br0["uplink"]["ofport"].is_null());
        assert_eq!(br0["ports"][0]["type"], "uplink");
        assert!(j["data"][1]["uplink"].is_null(), "{j}");
    }

    #[test]
    fn a_second_uplink_is_refused_before_anything_is_opened() {
        let mut sw = switch_with_absent_uplink();
        let before = show_json(&sw);
        let cfg = sw.config.clone();
        let r = serde_json::to_value(add_port(&mut sw, "br0", "nfup-absent1", "uplink")).unwrap();
        let e = r.to_string();
        assert!(
            e.contains("already has an uplink `p0` (netdev nfup-absent0)")
                && e.contains("at most one"),
            "{e}"
        );
        // The same interface as another bridge's uplink.
        let e = serde_json::to_value(add_port(&mut sw, "br1", "nfup-absent0", "uplink"))
            .unwrap()
            .to_string();
        assert!(
            e.contains("already attached as port p0 of bridge br0"),
            "{e}"
        );
        let e = serde_json::to_value(add_port(&mut sw, "br1", "nfup-absent0", "bogus"))
            .unwrap()
            .to_string();
        assert!(
            e.contains("unknown port type `bogus`") && e.contains("uplink"),
            "{e}"
        );
        assert_eq!(show_json(&sw), before);
        assert_eq!(sw.config, cfg);
    }

    /// Issue 28 item 6: a port whose interface is missing at startup no
    /// longer stops the daemon when a rule names it; it keeps its name and
    /// number, `show` and `stats` say "not attached", its rules stay.
    #[test]
    fn a_missing_port_named_by_rules_is_kept_not_attached() {
        let cfg = Config::parse(
            "[[bridge]]\nname='br0'\noffload='none'\nflows=['priority=10,in_port=p1,actions=output:p2','priority=10,in_port=p2,actions=output:p1']\n[[bridge.port]]\nname='p1'\niface='nfmiss-absent1'\ntype='afpacket'\n[[bridge.port]]\nname='p2'\niface='nfmiss-absent2'\ntype='afpacket'\n",
        )
        .unwrap();
        let mut sw = Switch::new(cfg, None).expect("the daemon starts");
        let f = flows(&mut sw);
        assert!(
            f.contains("in_port=p1 actions=output:p2")
                && f.contains("in_port=p2 actions=output:p1"),
            "{f}"
        );
        let show = sw.show().text;
        assert!(
            show.contains("Port p1 (afpacket: nfmiss-absent1) not attached")
                && show.contains("Port p2 (afpacket: nfmiss-absent2) not attached"),
            "{show}"
        );
        let stats = serde_json::to_value(sw.stats()).unwrap();
        assert!(
            stats.to_string().contains("port p2: not attached"),
            "{stats}"
        );
        assert_eq!(stats["data"][0]["ports"][1]["attached"], false, "{stats}");
        // The numbers are kept for when they come back, in config order.
        let br = &sw.bridges["br0"];
        assert_eq!(br.port_map().0["p1"], 1);
        assert_eq!(br.port_map().0["p2"], 2);
        assert_eq!(br.attached("p2"), None);
        // A second port of that name is still refused; del-port removes it.
        let r = sw.handle(Request::AddPort {
            bridge: "br0".into(),
            iface: "nfmiss-other".into(),
            kind: "afpacket".into(),
            name: Some("p2".into()),
            options: Default::default(),
        });
        assert!(
            !r.ok
                && r.error
                    .as_deref()
                    .unwrap()
                    .contains("already has a port `p2`"),
            "{r:?}"
        );
        ok(
            &mut sw,
            Request::DelPort {
                bridge: "br0".into(),
                name: "p2".into(),
            },
        );
        assert!(!sw.show().text.contains("Port p2"));
    }

    /// Issue 28 item 7: an interface is attached once, whatever the bridge,
    /// port name or type; nothing changes when refused.
    #[test]
    fn an_interface_is_attached_once() {
        let cfg = Config::parse(
            "[[bridge]]\nname='br0'\noffload='none'\n[[bridge.port]]\nname='p1'\niface='nfdup-absent1'\ntype='afpacket'\n[[bridge.port]]\nname='vx'\niface='vx'\ntype='vxlan'\noptions={underlay='nfdup-under',remote_ip='198.18.0.1',local_ip='198.18.0.2'}\n[[bridge]]\nname='br1'\noffload='none'\n",
        )
        .unwrap();
        let mut sw = Switch::new(cfg, None).unwrap();
        let before = show_json(&sw);
        let cfg = sw.config.clone();
        let try_add = |sw: &mut Switch,
                       bridge: &str,
                       iface: &str,
                       kind: &str,
                       name: Option<&str>,
                       options: &[(&str, &str)]| {
            let r = sw.handle(Request::AddPort {
                bridge: bridge.into(),
                iface: iface.into(),
                kind: kind.into(),
                name: name.map(String::from),
                options: options
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            });
            assert!(!r.ok, "{r:?}");
            r.error.unwrap()
        };
        for (bridge, name) in [("br1", None), ("br0", Some("p9")), ("br1", Some("x"))] {
            for kind in ["afpacket", "auto", "tc", "afxdp", "uplink"] {
                let e = try_add(&mut sw, bridge, "nfdup-absent1", kind, name, &[]);
                assert!(
                    e.contains(
                        "interface `nfdup-absent1` is already attached as port p1 of bridge br0"
                    ),
                    "{kind}: {e}"
                );
            }
        }
        // A tunnel's underlay is not a port, and a port is not an underlay.
        let e = try_add(&mut sw, "br1", "nfdup-under", "afpacket", None, &[]);
        assert!(
            e.contains("the underlay of tunnel port vx of bridge br0"),
            "{e}"
        );
        let e = try_add(
            &mut sw,
            "br1",
            "vx2",
            "geneve",
            None,
            &[("underlay", "nfdup-absent1")],
        );
        assert!(
            e.contains("already attached as port p1 of bridge br0") && e.contains("underlay"),
            "{e}"
        );
        assert_eq!(show_json(&sw), before);
        assert_eq!(sw.config, cfg);
    }

    /// The rules of br0 as `dump-flows --json` names them (no durations).
    fn rule_list(sw: &mut Switch) -> Vec<serde_json::Value> {
        let r = sw.handle(Request::DumpFlows {
            bridge: "br0".into(),
        });
        r.data
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["flow"].clone())
            .collect()
    }

    /// A switch whose config file cannot be written (its directory cannot
    /// be created, even by root).
    fn unwritable_switch() -> Switch {
        let cfg = Config::parse(
            "[[bridge]]\nname='br0'\noffload='none'\nflows=['priority=0 actions=NORMAL','priority=5,tcp,actions=drop','meter=1,kbps,bands=type=drop,rate=1000','group_id=1,type=all,bucket=actions=drop']\n",
        )
        .unwrap();
        Switch::new(cfg, Some("/proc/nicflow-no-such-dir/sw.toml".into())).unwrap()
    }

    /// Issue 28 item 8: a change the config file cannot record is not
    /// made, for every request that writes the file.
    #[test]
    fn a_change_that_cannot_be_written_is_not_made() {
        let mut sw = unwritable_switch();
        let flows0 = rule_list(&mut sw);
        let show0 = show_json(&sw);
        let meters0 = sw.bridges["br0"].dump_meters();
        let groups0 = sw.bridges["br0"].dump_groups_text();
        let br = |s: &str| s.to_string();
        let requests = vec![
            Request::AddFlow {
                bridge: br("br0"),
                flow: br("priority=9,udp,actions=drop"),
            },
            Request::AddFlows {
                bridge: br("br0"),
                text: br("priority=9,udp,actions=drop\npriority=5,tcp,actions=NORMAL"),
            },
            Request::DelFlows {
                bridge: br("br0"),
                filter: None,
            },
            Request::DelFlows {
                bridge: br("br0"),
                filter: Some(br("tcp")),
            },
            Request::AddGroup {
                bridge: br("br0"),
                group: br("group_id=2,type=all,bucket=actions=drop"),
            },
            Request::ModGroup {
                bridge: br("br0"),
                group: br("group_id=1,type=all,bucket=actions=NORMAL"),
            },
            Request::AddGroups {
                bridge: br("br0"),
                text: br("group_id=3,type=all,bucket=actions=drop"),
            },
            Request::DelGroups {
                bridge: br("br0"),
                filter: None,
            },
            Request::AddMeter {
                bridge: br("br0"),
                meter: br("meter=2,kbps,bands=type=drop,rate=10"),
            },
            Request::ModMeter {
                bridge: br("br0"),
                meter: br("meter=1,kbps,bands=type=drop,rate=5"),
            },
            Request::DelMeters {
                bridge: br("br0"),
                filter: None,
            },
            Request::AddBr { bridge: br("br9") },
            Request::DelBr { bridge: br("br0") },
            Request::Set {
                bridge: br("br0"),
                key: br("offload"),
                value: br("auto"),
            },
            Request::Set {
                bridge: br("br0"),
                key: br("protocols"),
                value: br("OpenFlow10,OpenFlow13"),
            },
            Request::SetController {
                bridge: br("br0"),
                targets: vec![br("tcp:127.0.0.1:1")],
            },
            Request::SetFailMode {
                bridge: br("br0"),
                mode: br("secure"),
            },
        ];
        for req in requests {
            let what = format!("{req:?}");
            let r = sw.handle(req);
            assert!(!r.ok, "{what}: {r:?}");
            let e = r.error.unwrap();
            assert!(
                e.contains("the change was not made") && e.contains("sw.toml"),
                "{what}: {e}"
            );
            assert_eq!(rule_list(&mut sw), flows0, "{what}");
            assert_eq!(show_json(&sw), show0, "{what}");
            assert_eq!(sw.bridges["br0"].dump_meters(), meters0, "{what}");
            assert_eq!(sw.bridges["br0"].dump_groups_text(), groups0, "{what}");
            assert!(sw.openflow.status("br0").is_empty(), "{what}");
        }
    }

    /// Issue 28 item 8: a rule that expired is written out of the config
    /// file by the next tick, so it does not come back at restart; a timed
    /// rule that has not expired is kept (its timer restarts then).
    #[test]
    fn expired_rules_leave_the_config_file() {
        let dir = std::env::temp_dir().join(format!("nicflow-expire-{}", std::process::id()));
        let path = dir.join("sw.toml");
        let cfg = Config::parse("[[bridge]]\nname='br0'\noffload='none'\n").unwrap();
        let mut sw = Switch::new(cfg, Some(path.clone())).unwrap();
        for flow in [
            "priority=7,hard_timeout=1,udp,actions=drop",
            "priority=8,idle_timeout=1,tcp,actions=drop",
            "priority=9,hard_timeout=600,icmp,actions=drop",
        ] {
            ok(
                &mut sw,
                Request::AddFlow {
                    bridge: "br0".into(),
                    flow: flow.into(),
                },
            );
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("hard_timeout=1,") && text.contains("idle_timeout=1,"),
            "{text}"
        );
        let later = now() + std::time::Duration::from_secs(2);
        for br in sw.bridges_mut() {
            br.tick(later);
        }
        sw.tick(later);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("timeout=1,"), "{text}");
        assert!(text.contains("hard_timeout=600"), "{text}");
        let again = Switch::new(Config::load(&path).unwrap(), None).unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
