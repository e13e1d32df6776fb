//! The daemon's state: bridges with their real ports, and the config file
//! that mirrors them.
//!
//! Every [`Request`] is applied here in one piece on the daemon's single
//! thread, so a request is atomic with respect to traffic: the poll loop
//! cannot forward a packet halfway through a change. A request that fails
//! changes nothing; one that succeeds is persisted before it is
//! acknowledged.
//!
//! [`Switch::apply`] is a table: one line per request, naming the handler.
//! Each handler lives in the module of its subject, so `add-port` is in
//! [`ports`], `set-controller` in [`controllers`]:
//!
//! | module | requests |
//! | --- | --- |
//! | [`bridges`] | `add-br`, `del-br` |
//! | [`ports`] | `add-port`, `del-port` (and the checks an interface passes first) |
//! | [`vfs`] | `add-vf`, `del-vf` (and a VF's return at startup) |
//! | [`rules`] | `add-flow`, `add-flows`, `del-flows`, `dump-flows` |
//! | [`groups`] | `add-group`, `add-groups`, `mod-group`, `del-groups`, `dump-groups`, `dump-group-stats` |
//! | [`meters`] | `add-meter`, `mod-meter`, `del-meters`, `dump-meters`, `meter-stats` |
//! | [`conntrack`] | `dump-conntrack`, `flush-conntrack`, `conntrack-stats` |
//! | [`datapath`] | `dump-dp-flows` |
//! | [`settings`] | `set` (`offload`, `protocols`, `flow_limit`) |
//! | [`offload`] | putting a bridge in an offload mode (`set offload`, startup, `add-br`) |
//! | [`controllers`] | `set-controller`, `del-controller`, `get-controller`, `set-fail-mode`, `get-fail-mode` |
//! | [`ssl`] | `set-ssl`, `get-ssl`, `del-ssl` |
//! | [`show`] | `show` |
//! | [`stats`] | `stats` |
//! | [`persist`] | writing the config file, and undoing a change it cannot record |
//!
//! Every handler returns a [`SwitchError`] on failure; its text is the
//! error reply.

mod bridges;
mod conntrack;
mod controllers;
mod datapath;
mod error;
mod groups;
mod meters;
mod offload;
mod p4;
mod persist;
mod plan;
mod ports;
mod rules;
mod settings;
mod show;
mod ssl;
mod stats;
mod vfs;

pub use error::SwitchError;
pub use offload::{apply_offload, OffloadFailure, VerifierLog};

use super::config::{BridgeConfig, Config, PortType};
use super::proto::{Request, Response};
use super::vf;
use crate::bridge::Bridge;
use crate::datapath::DatapathConfig;
use crate::offload::OffloadMode;
use controllers::parse_targets;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vfs::restore_vf;

pub use nicflow_api::config::DEFAULT_FLOW;

/// Ports open through the port crate's factory.
pub use crate::port::open as open_port;

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
    /// The daemon's CPU per userspace packet, sampled every tick
    /// (`offload-plan`'s host cost).
    cost: plan::CostSampler,
    /// Bridges whose adopted kernel engine waits for its ports and rules
    /// (`Bridge::adoption_pending`): since when, and when a controller last
    /// changed their rules.
    adoption_watch: BTreeMap<String, (Instant, Option<Instant>)>,
}

/// A pending adoption ends this long after a controller last changed the
/// bridge's rules (it has reprogrammed the bridge)...
const ADOPTION_SETTLE: Duration = Duration::from_secs(2);
/// ...or this long after it began, controller or not.
const ADOPTION_MAX_WAIT: Duration = Duration::from_secs(30);

fn now() -> Instant {
    Instant::now()
}

impl Switch {
    /// Build every bridge, port, VF and rule of `config`. A port that cannot
    /// be opened, or a VF whose namespace is gone or whose pair cannot be
    /// recreated, is logged and left out of this run (kept in the config).
    pub fn new(config: Config, config_path: Option<PathBuf>) -> Result<Switch, SwitchError> {
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
            cost: Default::default(),
            adoption_watch: BTreeMap::new(),
        };
        if let Some(ssl) = &config.ssl {
            if let Err(e) = sw.openflow.set_ssl(ssl) {
                tracing::error!("ssl: {e}");
            }
        }
        for bc in &config.bridges {
            sw.open_bridge(bc)?;
        }
        sw.config = config;
        Ok(sw)
    }

    /// Build one configured bridge at startup: its ports and VFs (a
    /// missing one is kept under its name and number, not attached), then
    /// its meters, groups and rules, its offload mode and controllers.
    /// `self.config` is still empty here: [`Switch::new`] sets it once
    /// every bridge is built.
    fn open_bridge(&mut self, bc: &BridgeConfig) -> Result<(), SwitchError> {
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
                    let no = br.add_port(p)?;
                    if pc.kind == PortType::Uplink {
                        tracing::info!(bridge = %bc.name, "uplink {} ({}, {kind}) attached as ofport {no}", pc.name, pc.iface);
                        self.uplink_kinds.insert(bc.name.clone(), kind);
                    }
                }
                Err(e) => {
                    // Kept under its name and number: its rules load,
                    // and the tick attaches it when the interface is back.
                    tracing::error!(bridge = %bc.name, "port {}: {e}; not attached (kept in the config, attached when its interface appears)", pc.name);
                    br.reserve_port(&pc.name)?;
                    self.detached
                        .insert((bc.name.clone(), pc.name.clone()), (e, now()));
                }
            }
        }
        for vfc in &bc.vfs {
            match restore_vf(&bc.name, &mut br, vfc, bc.port_mode()) {
                Ok((no, kind)) => {
                    tracing::info!(bridge = %bc.name, "VF {} ({}) attached as ofport {no}", vfc.name, vfc.representor);
                    self.rep_kinds.insert(vfc.representor.clone(), kind);
                }
                Err(e) => {
                    tracing::error!(bridge = %bc.name, "VF {}: {e}", vfc.name);
                    if br.attached(&vfc.representor).is_none()
                        && !br.port_map().0.contains_key(&vfc.representor)
                    {
                        br.reserve_port(&vfc.representor)?;
                    }
                    self.detached.insert(
                        (bc.name.clone(), vfc.representor.clone()),
                        (e.to_string(), now()),
                    );
                }
            }
        }
        // Meters and groups first: the rules that name them load after them.
        let (meters, groups, text) = super::config::split_groups(&bc.flows);
        for m in &meters {
            br.add_meter_str(m, false, now())
                .map_err(|source| SwitchError::LoadMeter {
                    bridge: bc.name.clone(),
                    meter: m.clone(),
                    source,
                })?;
        }
        br.add_groups_str(&groups, false, now())
            .map_err(|source| SwitchError::LoadGroups {
                bridge: bc.name.clone(),
                source,
            })?;
        br.add_flows_str(&text, now())
            .map_err(|source| SwitchError::LoadFlows {
                bridge: bc.name.clone(),
                source,
            })?;
        // A refused program is logged and leaves the bridge at none.
        let _ = apply_offload(
            &mut br,
            bc.offload.unwrap_or_default(),
            &bc.offload_options,
            self.config_path.as_deref(),
        );
        self.bridges.insert(bc.name.clone(), br);
        if bc.openflow.protocols.is_some() {
            let v = settings::protocol_versions(bc.openflow.protocols.as_deref());
            self.openflow.set_protocols(&bc.name, &v, now());
        }
        if !bc.openflow.controllers.is_empty() || bc.openflow.fail_mode.is_some() {
            let r = parse_targets(&bc.openflow.controllers)
                .map_err(SwitchError::from)
                .and_then(|t| {
                    let mode = bc.openflow.fail_mode.unwrap_or_default();
                    Ok(self.openflow.configure(&bc.name, &t, mode, now())?)
                });
            if let Err(e) = r {
                tracing::error!(bridge = %bc.name, "controllers: {e}");
            }
        }
        Ok(())
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

    fn bridge(&mut self, name: &str) -> Result<&mut Bridge, SwitchError> {
        self.bridges
            .get_mut(name)
            .ok_or_else(|| SwitchError::NoBridge(name.to_string()))
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
        for name in &changed {
            if self.bridges.get(name).is_some_and(|b| b.adoption_pending()) {
                self.adoption_watch
                    .entry(name.clone())
                    .or_insert((now, None))
                    .1 = Some(now);
            }
        }
    }

    /// Once a second: a bridge whose adopted kernel engine kept forwarding
    /// while it was rebuilt empty (`nicflow vswitchd` after a restart: the
    /// database gives the ports, the controller the rules) finishes the
    /// take-over once its controller has reprogrammed it
    /// ([`ADOPTION_SETTLE`] after its last rule change) or after
    /// [`ADOPTION_MAX_WAIT`]: the kernel flows are then judged against the
    /// rules the controller installed, not against an empty table, so
    /// established traffic is not cut while the control plane comes back.
    fn finish_adoptions(&mut self, now: Instant) {
        let bridges = &self.bridges;
        self.adoption_watch.retain(|n, _| bridges.contains_key(n));
        for (name, b) in self.bridges.iter_mut() {
            if !b.adoption_pending() {
                self.adoption_watch.remove(name);
                continue;
            }
            let (since, rules) = *self
                .adoption_watch
                .entry(name.clone())
                .or_insert((now, None));
            let settled = rules.is_some_and(|t| now.duration_since(t) >= ADOPTION_SETTLE);
            if settled || now.duration_since(since) >= ADOPTION_MAX_WAIT {
                tracing::info!(bridge = %name, settled, "finishing the adoption of the kernel engine");
                b.finish_adoption();
                self.adoption_watch.remove(name);
            }
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
        let packets = self.bridges.values().map(|b| b.dp_stats().packets).sum();
        self.cost.sample(plan::process_cpu_s(), packets);
        self.reattach(now);
        self.finish_adoptions(now);
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
                let e = e.to_string();
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
                    PortType::Tap | PortType::Internal | PortType::Patch => true,
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
            let r = open_port(&pc, mode)
                .map_err(SwitchError::OpenPort)
                .and_then(|p| {
                    let kind = p.kind();
                    Ok((br.add_port(p)?, kind))
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
    fn note_detached(&mut self, key: (String, String), e: SwitchError, retry: Instant) {
        let e = e.to_string();
        if self.detached.get(&key).is_none_or(|(old, _)| *old != e) {
            tracing::warn!(bridge = %key.0, "port {} still not attached: {e}", key.1);
        }
        self.detached.insert(key, (e, retry));
    }
    pub fn handle(&mut self, req: Request) -> Response {
        match self.apply(req) {
            Ok(r) => r,
            Err(e) => Response::err(e),
        }
    }

    /// The request table: each request goes to its handler (see the
    /// module list above for where each lives).
    fn apply(&mut self, req: Request) -> Result<Response, SwitchError> {
        match req {
            Request::AddBr { bridge } => self.add_br(bridge),
            Request::DelBr { bridge } => self.del_br(bridge),
            Request::AddPort {
                bridge,
                iface,
                kind,
                name,
                options,
            } => self.add_port(bridge, iface, kind, name, options),
            Request::DelPort { bridge, name } => self.del_port(bridge, name),
            Request::AddVf {
                bridge,
                namespace,
                name,
                mac,
                ips,
                rep_type,
            } => self.add_vf(bridge, namespace, name, mac, ips, rep_type),
            Request::DelVf { bridge, name } => self.del_vf(&bridge, &name),
            Request::AddFlow { bridge, flow } => self.add_flow(bridge, flow),
            Request::AddFlows { bridge, text } => self.add_flows(bridge, text),
            Request::DelFlows { bridge, filter } => self.del_flows(bridge, filter),
            Request::DumpFlows { bridge } => self.dump_flows(bridge),
            Request::DumpDpFlows { bridge } => self.dump_dp_flows(bridge),
            Request::OffloadPlan { bridge, profile } => self.offload_plan(&bridge, &profile),
            Request::P4 { bridge, op } => self.p4(bridge, op),
            Request::AddGroup { bridge, group } => self.add_group(bridge, group),
            Request::AddGroups { bridge, text } => self.add_groups(bridge, text),
            Request::ModGroup { bridge, group } => self.mod_group(bridge, group),
            Request::DelGroups { bridge, filter } => self.del_groups(bridge, filter),
            Request::DumpGroups { bridge } => self.dump_groups(bridge),
            Request::DumpGroupStats { bridge } => self.dump_group_stats(bridge),
            Request::AddMeter { bridge, meter } => self.add_meter(bridge, meter),
            Request::ModMeter { bridge, meter } => self.mod_meter(bridge, meter),
            Request::DelMeters { bridge, filter } => self.del_meters(bridge, filter),
            Request::DumpMeters { bridge } => self.dump_meters(bridge),
            Request::MeterStats { bridge, filter } => self.meter_stats(bridge, filter),
            Request::DumpConntrack {
                bridge,
                zone,
                verbose,
                stats,
            } => self.dump_conntrack(bridge, zone, verbose, stats),
            Request::FlushConntrack {
                bridge,
                zone,
                filter,
            } => self.flush_conntrack(bridge, zone, filter),
            Request::ConntrackStats { bridge } => self.conntrack_stats(bridge),
            Request::Show => Ok(self.show()),
            Request::Stats => Ok(self.stats()),
            Request::Set { bridge, key, value } => self.set(bridge, key, value),
            Request::SetController { bridge, targets } => self.set_controller(bridge, targets),
            Request::DelController { bridge } => self.del_controller(bridge),
            Request::GetController { bridge } => self.get_controller(bridge),
            Request::SetFailMode { bridge, mode } => self.set_fail_mode(bridge, mode),
            Request::GetFailMode { bridge } => self.get_fail_mode(bridge),
            Request::SetSsl {
                private_key,
                certificate,
                ca_cert,
            } => self.set_ssl(private_key, certificate, ca_cert),
            Request::GetSsl => Ok(self.get_ssl()),
            Request::DelSsl => self.del_ssl(),
        }
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
