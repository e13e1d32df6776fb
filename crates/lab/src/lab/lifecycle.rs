//! `up`, `down` and `exec`: turning a topology into namespaces, veths and
//! running switches, and back into nothing.
//!
//! `up` works in phases — namespaces, veth pairs, host settings, addresses
//! and routes, then one daemon per switch — and records every object in
//! the [state file](super::state) before creating it. If a step fails, `up`
//! runs `down` itself, so a failed `up` leaves nothing behind either.
//! `down` is idempotent and does not need the state file: what it cannot
//! read from the record it finds by name (see [`super::names`]) and, for
//! daemons, by command line.

use super::names::{self, Side};
use super::state::{DaemonRecord, IfaceRecord, LabState, VethRecord};
use super::sys;
use super::topology::{Endpoint, Link, SwitchSpec, Topology};
use super::{LabError, LabOptions};
use nicflow_api::config::{BridgeConfig, Config, PortConfig};
use nicflow_api::proto::Request;
use nicflow_os::{self as os, link::VethEnd, netlink::Rtnl};
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest unix socket path (`sun_path` is 108 bytes with the NUL).
const SOCKET_PATH_MAX: usize = 107;

/// What `up` built.
#[derive(Clone, Debug)]
pub struct UpReport {
    pub state: LabState,
    /// `(switch, port, why)` for every port the daemon did not attach.
    pub unattached: Vec<(String, String, String)>,
    /// Human summary lines (hosts, links, switches).
    lines: Vec<String>,
}

impl fmt::Display for UpReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "lab {} is up (state in {})",
            self.state.lab,
            self.state.dir.display()
        )?;
        for l in &self.lines {
            writeln!(f, "  {l}")?;
        }
        for (sw, port, why) in &self.unattached {
            writeln!(
                f,
                "  warning: switch {sw}: port {port} is not attached: {why}"
            )?;
        }
        Ok(())
    }
}

/// What `down` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DownReport {
    pub lab: String,
    /// Running daemons stopped (pids), and the subset that needed SIGKILL.
    pub daemons: Vec<u32>,
    pub killed: Vec<u32>,
    /// Other processes found running inside the lab's namespaces, stopped.
    pub processes: Vec<u32>,
    pub namespaces: Vec<String>,
    /// Root-namespace veth ends deleted by name.
    pub links: Vec<String>,
    /// Whether a state file was found (if not, `down` went by names alone).
    pub had_state: bool,
}

impl fmt::Display for DownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.daemons.is_empty()
            && self.processes.is_empty()
            && self.namespaces.is_empty()
            && self.links.is_empty()
        {
            return writeln!(f, "lab {}: nothing to remove", self.lab);
        }
        writeln!(
            f,
            "lab {} is down: stopped {} daemon(s) and {} other process(es){}, deleted {} namespace(s) and {} root-namespace link(s)",
            self.lab,
            self.daemons.len(),
            self.processes.len(),
            if self.killed.is_empty() {
                String::new()
            } else {
                format!(" ({} with SIGKILL)", self.killed.len())
            },
            self.namespaces.len(),
            self.links.len()
        )
    }
}

/// Bring lab `topo` up: namespaces, veths, addresses, routes, one daemon
/// per switch. Returns once every daemon answers on its control socket.
///
/// # Errors
/// [`LabError::AlreadyUp`] if the lab (or leftovers of it) exists; any
/// failing step otherwise — after which everything created so far has been
/// removed again (if that cleanup fails too, [`LabError::UpFailed`] carries
/// both errors).
pub fn up(topo: &Topology, opts: &LabOptions) -> Result<UpReport, LabError> {
    let dir = opts.lab_dir(&topo.name);
    check_not_up(topo, &dir)?;
    if !opts.nicflow_bin.is_file() {
        return Err(LabError::Binary {
            path: opts.nicflow_bin.display().to_string(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    for sw in &topo.switches {
        let sock = dir.join(format!("{}.sock", sw.name));
        if sock.as_os_str().len() > SOCKET_PATH_MAX {
            return Err(LabError::Invalid {
                path: "<topology>".into(),
                errors: vec![format!(
                    "switch {}: control socket path {} is longer than {SOCKET_PATH_MAX} bytes; use a shorter state root or names",
                    sw.name,
                    sock.display()
                )],
            });
        }
    }
    let mut st = LabState {
        lab: topo.name.clone(),
        dir: dir.clone(),
        nodes: topo.namespaces().into_iter().collect(),
        ..Default::default()
    };
    match build(topo, opts, &mut st) {
        Ok(report) => Ok(report),
        Err(error) => {
            tracing::warn!(
                "lab {}: up failed ({error}); removing what it created",
                topo.name
            );
            match down(&topo.name, opts) {
                Ok(_) => Err(error),
                Err(cleanup) => Err(LabError::UpFailed {
                    error: Box::new(error),
                    cleanup: Box::new(cleanup),
                }),
            }
        }
    }
}

fn check_not_up(topo: &Topology, dir: &Path) -> Result<(), LabError> {
    let what = if LabState::path(dir).exists() {
        Some(format!("its state file {}", LabState::path(dir).display()))
    } else {
        let nss: Vec<String> = sys::list_namespaces()?
            .into_iter()
            .filter(|n| names::is_lab_namespace(&topo.name, n))
            .collect();
        let links: Vec<String> = sys::list_links()?
            .into_iter()
            .filter(|n| names::is_lab_veth(&topo.name, n))
            .collect();
        let daemons = sys::find_daemons(dir);
        if nss.is_empty() && links.is_empty() && daemons.is_empty() {
            None
        } else {
            Some(format!(
                "leftovers: namespaces [{}], links [{}], daemon pids {daemons:?}",
                nss.join(" "),
                links.join(" ")
            ))
        }
    };
    match what {
        Some(what) => Err(LabError::AlreadyUp {
            lab: topo.name.clone(),
            what,
        }),
        None => Ok(()),
    }
}

fn build(topo: &Topology, opts: &LabOptions, st: &mut LabState) -> Result<UpReport, LabError> {
    let lab = &topo.name;
    std::fs::create_dir_all(&st.dir).map_err(|source| LabError::State {
        path: st.dir.display().to_string(),
        source,
    })?;
    st.save()?;

    // 1. Namespaces, each with its loopback up.
    for (_, ns) in topo.namespaces() {
        st.namespaces.push(ns.clone());
        st.save()?;
        os::netns::add(&ns)?;
    }

    // 2. Veth pairs, each end created directly in its namespace.
    let mut root = Rtnl::open(None)?;
    for l in &topo.links {
        let rec = VethRecord {
            link: l.index,
            a: iface_record(topo, l, Side::A),
            b: iface_record(topo, l, Side::B),
        };
        st.veths.push(rec.clone());
        st.save()?;
        let end = |r: &IfaceRecord| VethEnd {
            name: r.name.clone(),
            mtu: l.mtu,
            mac: None,
            netns: r.netns.clone(),
            queues: None,
        };
        os::link::add_veth(&mut root, &end(&rec.a), &end(&rec.b))?;
    }

    // 3. Host sysctls: after the interfaces exist (so per-interface keys
    //    work), before they get addresses and come up.
    for h in &topo.hosts {
        let ns = names::namespace(lab, &h.name);
        for (k, v) in &h.sysctls {
            sys::sysctl(Some(&ns), k, v)?;
        }
    }

    // 4. Configure and raise every end.
    let mut lines = Vec::new();
    for l in &topo.links {
        let rec = st.veths.iter().find(|v| v.link == l.index).cloned();
        let rec = rec.expect("recorded above");
        for (end, ifr) in [(&l.a, &rec.a), (&l.b, &rec.b)] {
            configure_end(topo, l, end, ifr)?;
        }
        lines.push(format!(
            "link {}: {} ({}) <-> {} ({})",
            l.index + 1,
            l.a,
            rec.a.name,
            l.b,
            rec.b.name
        ));
    }

    // 5. Routes, once every address is in place.
    for h in &topo.hosts {
        if h.routes.is_empty() {
            continue;
        }
        let ns = names::namespace(lab, &h.name);
        let mut rt = Rtnl::open(Some(&ns))?;
        for r in &h.routes {
            os::route::add_via(&mut rt, r.dst.map(|d| (d.addr, d.prefix)), r.via)?;
        }
    }
    for h in &topo.hosts {
        let addrs: Vec<String> = topo
            .links
            .iter()
            .flat_map(|l| [&l.a, &l.b])
            .filter_map(|e| match e {
                Endpoint::Host {
                    host,
                    iface,
                    addresses,
                } if *host == h.name => Some(format!(
                    "{iface} {}",
                    addresses
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                )),
                _ => None,
            })
            .collect();
        lines.push(format!(
            "host {}: namespace {}; {}",
            h.name,
            names::namespace(lab, &h.name),
            addrs.join("; ")
        ));
    }

    // 6. One daemon per switch, started with its ports in its config file.
    let mut unattached = Vec::new();
    for sw in &topo.switches {
        let rec = start_daemon(topo, sw, opts, st)?;
        for (port, why) in unattached_ports(&rec) {
            unattached.push((sw.name.clone(), port, why));
        }
        lines.push(format!(
            "switch {}: {}, pid {}, socket {}, log {}",
            sw.name,
            match &rec.netns {
                Some(ns) => format!("namespace {ns}"),
                None => "root namespace".to_string(),
            },
            rec.pid.unwrap_or_default(),
            rec.socket.display(),
            rec.log.display()
        ));
    }
    st.complete = true;
    st.save()?;
    Ok(UpReport {
        state: st.clone(),
        unattached,
        lines,
    })
}

/// Name and namespace of one end of link `l`.
fn iface_record(topo: &Topology, l: &Link, side: Side) -> IfaceRecord {
    let end = match side {
        Side::A => &l.a,
        Side::B => &l.b,
    };
    match end {
        Endpoint::Host { host, iface, .. } => IfaceRecord {
            name: iface.clone(),
            netns: Some(names::namespace(&topo.name, host)),
        },
        Endpoint::Switch { switch, .. } => IfaceRecord {
            name: names::veth_name(&topo.name, l.index, side),
            netns: topo.namespace_of(switch),
        },
    }
}

fn configure_end(
    topo: &Topology,
    l: &Link,
    end: &Endpoint,
    ifr: &IfaceRecord,
) -> Result<(), LabError> {
    let ns = ifr.netns.as_deref();
    let dev = ifr.name.as_str();
    let mut rt = Rtnl::open(ns)?;
    match end {
        Endpoint::Host { addresses, .. } => {
            if !l.offload {
                // Full frames with finished checksums for the switch's
                // AF_PACKET sockets: no checksum offload, hence no TSO.
                // (`ethtool -K DEV tx off`.)
                os::ethtool::set(ns, dev, os::ethtool::is_tx_checksum, false)?;
            }
            let other = if std::ptr::eq(end, &l.a) { &l.b } else { &l.a };
            let to_xdp_switch = match other {
                Endpoint::Switch { switch, .. } => {
                    topo.switch(switch).is_some_and(|s| s.xdp_offload())
                }
                Endpoint::Host { .. } => false,
            };
            if l.gro.unwrap_or(to_xdp_switch) {
                // NAPI on the host end, so frames the switch's XDP program
                // redirects into this veth are delivered (veth_xdp_xmit
                // drops them otherwise; the switch would keep such flows
                // in userspace).
                if let Err(e) = os::ethtool::set(ns, dev, os::ethtool::is_gro, true) {
                    tracing::warn!(
                        "{dev}: could not turn GRO on ({e}); flows into it stay in userspace"
                    );
                }
            }
            for a in addresses {
                // IPv6 without duplicate address detection: the address is
                // usable at once, and a lab has no duplicates (validated).
                os::addr::add(&mut rt, dev, a.addr, a.prefix, a.addr.is_ipv6())?;
            }
        }
        Endpoint::Switch { switch, port, .. } => {
            // The switch's kernel side stays silent: no IPv6 link-local
            // address, router solicitations or MLD from the port itself.
            let key = format!("net.ipv6.conf.{dev}.disable_ipv6");
            if let Err(e) = sys::sysctl(ns, &key, "1") {
                tracing::debug!("{e} (ignored: IPv6 may be off)");
            }
            let alias = format!("nicflow lab {} switch {switch} port {port}", topo.name);
            os::link::set_alias(&mut rt, dev, &alias)?;
        }
    }
    os::link::set_up(&mut rt, dev)?;
    Ok(())
}

/// The daemon config for one switch: its bridges, their rules, and a port
/// per link end, backed by the generated veth end.
pub fn daemon_config(topo: &Topology, sw: &SwitchSpec) -> Config {
    let ports = topo.switch_ports(&sw.name);
    Config {
        bridges: sw
            .bridges
            .iter()
            .map(|b| BridgeConfig {
                name: b.name.clone(),
                flows: b.flows.clone(),
                ports: ports
                    .iter()
                    .filter(|(br, _, _)| *br == b.name)
                    .map(|(_, port, iface)| PortConfig {
                        name: port.clone(),
                        iface: iface.clone(),
                        kind: sw.port_type,
                        options: sw.port_options.clone().into(),
                    })
                    .collect(),
                offload: sw.offload,
                offload_options: sw.offload_options.clone(),
                vfs: Vec::new(),
                openflow: Default::default(),
                flow_limit: None,
            })
            .collect(),
        ssl: None,
    }
}

fn start_daemon(
    topo: &Topology,
    sw: &SwitchSpec,
    opts: &LabOptions,
    st: &mut LabState,
) -> Result<DaemonRecord, LabError> {
    let dir = st.dir.clone();
    let mut rec = DaemonRecord {
        switch: sw.name.clone(),
        netns: topo.namespace_of(&sw.name),
        config: dir.join(format!("{}.toml", sw.name)),
        socket: if sw.dpu {
            dpu_socket(&topo.name, &sw.name)
        } else {
            dir.join(format!("{}.sock", sw.name))
        },
        log: dir.join(format!("{}.log", sw.name)),
        pid: None,
    };
    daemon_config(topo, sw)
        .save(&rec.config)
        .map_err(|e| LabError::State {
            path: rec.config.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })?;
    st.daemons.push(rec.clone());
    st.save()?;

    let log_err = |source| LabError::State {
        path: rec.log.display().to_string(),
        source,
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&rec.log)
        .map_err(log_err)?;
    let log2 = log.try_clone().map_err(log_err)?;
    let bin = opts.nicflow_bin.as_os_str();
    let argv: Vec<&OsStr> = vec![
        bin,
        OsStr::new("--socket"),
        rec.socket.as_os_str(),
        OsStr::new("daemon"),
        OsStr::new("--config"),
        rec.config.as_os_str(),
    ];
    let mut cmd = sys::in_ns(rec.netns.as_deref(), &argv);
    cmd.stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .env_remove("NICFLOW_SOCK");
    // SAFETY: setsid(2) is async-signal-safe and touches no memory; it
    // detaches the daemon from our session and terminal, so it outlives
    // `nicflow lab up` and a Ctrl-C in that terminal.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let line = sys::describe(&cmd);
    let mut child = cmd.spawn().map_err(|source| LabError::Spawn {
        cmd: line.clone(),
        source,
    })?;
    rec.pid = Some(child.id());
    if let Some(r) = st.daemons.iter_mut().find(|d| d.switch == sw.name) {
        r.pid = rec.pid;
    }
    st.save()?;

    // Ready when the socket answers `show`. The daemon opens its ports
    // before it answers, logging each; on a loaded machine forty ports can
    // take longer than the timeout, so the deadline runs from the daemon's
    // last log line: a daemon still making progress is given the time, a
    // silent one fails after `ready_timeout`.
    let mut deadline = Instant::now() + opts.ready_timeout;
    let mut log_len = 0u64;
    let mut last = String::from("no answer yet");
    loop {
        let len = std::fs::metadata(&rec.log).map_or(0, |m| m.len());
        if len > log_len {
            log_len = len;
            deadline = Instant::now() + opts.ready_timeout;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(LabError::DaemonNotReady {
                switch: sw.name.clone(),
                why: format!("it exited ({status}) before its socket answered"),
                log: rec.log.display().to_string(),
                tail: sys::tail(&rec.log, 20),
            });
        }
        if sw.dpu || rec.socket.exists() {
            match sys::request_in(rec.netns.as_deref(), &rec.socket, &Request::Show) {
                Ok(r) if r.ok => break,
                Ok(r) => last = r.error.unwrap_or_else(|| "request failed".into()),
                Err(e) => last = format!("{e:#}"),
            }
        }
        if Instant::now() >= deadline {
            return Err(LabError::DaemonNotReady {
                switch: sw.name.clone(),
                why: format!(
                    "{} did not answer within {:?} of the daemon's last log line ({last})",
                    rec.socket.display(),
                    opts.ready_timeout
                ),
                log: rec.log.display().to_string(),
                tail: sys::tail(&rec.log, 20),
            });
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    // The child runs on; `down` stops it by pid (dropping `Child` neither
    // kills nor waits).
    drop(child);
    Ok(rec)
}

/// Ports the daemon lists without an OpenFlow port number, with the
/// reason from its log when there is one.
fn unattached_ports(rec: &DaemonRecord) -> Vec<(String, String)> {
    let Ok(resp) = sys::request_in(rec.netns.as_deref(), &rec.socket, &Request::Show) else {
        return Vec::new();
    };
    let log = std::fs::read_to_string(&rec.log).unwrap_or_default();
    let mut out = Vec::new();
    for br in resp.data.as_array().into_iter().flatten() {
        for p in br["ports"].as_array().into_iter().flatten() {
            if p["ofport"].is_null() {
                let name = p["name"].as_str().unwrap_or("?").to_string();
                let why = log
                    .lines()
                    .rev()
                    .find(|l| l.contains(&format!("port {name}:")))
                    .and_then(|l| l.split_once(&format!("port {name}: ")))
                    .map(|(_, why)| why.trim().to_string())
                    .unwrap_or_else(|| format!("see {}", rec.log.display()));
                out.push((name, why));
            }
        }
    }
    out
}

/// Stop lab `lab` and remove everything it created: daemons (SIGTERM, then
/// SIGKILL after `opts.stop_timeout`), any other process still running in
/// the lab's namespaces (same treatment), the namespaces (and with them
/// their veth ends), root-namespace veth ends, and the state directory.
///
/// Idempotent: a lab that is not up, or half up, is fine. Without a state
/// file it goes by names: namespaces `nf-<lab>-*`, links with the lab's veth
/// prefix, daemons whose socket lies in the lab's state directory.
///
/// # Errors
/// A command that failed for a reason other than "already gone", or objects
/// that were still there after deletion ([`LabError::Leftovers`]).
pub fn down(lab: &str, opts: &LabOptions) -> Result<DownReport, LabError> {
    // The name becomes a path that is removed and a prefix that is matched:
    // never act on one that a topology could not have.
    if !super::topology::valid_lab_name(lab) {
        return Err(LabError::Invalid {
            path: "<lab name>".into(),
            errors: vec![format!("`{lab}` is not a lab name")],
        });
    }
    let dir = opts.lab_dir(lab);
    let state = match LabState::load(&dir) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("{e}; going by names");
            None
        }
    };
    let mut report = DownReport {
        lab: lab.to_string(),
        had_state: state.is_some(),
        ..Default::default()
    };
    let state = state.unwrap_or_default();

    // 1. Daemons: recorded pids and any daemon serving a socket in `dir`.
    let mut pids: Vec<u32> = state.daemons.iter().filter_map(|d| d.pid).collect();
    pids.extend(sys::find_daemons(&dir));
    pids.sort_unstable();
    pids.dedup();
    let stop = sys::stop_daemons(&pids, &dir, opts.stop_timeout);
    let undead = stop.undead;
    report.daemons = stop
        .stopped
        .into_iter()
        .filter(|p| !undead.contains(p))
        .collect();
    report.killed = stop.killed;
    // A daemon in the root namespace pins its fast path under
    // /sys/fs/bpf (one in a lab namespace runs in a private mount
    // namespace and pins nothing); one stopped with SIGKILL left its pins,
    // which would hold its programs and maps forever: remove them, with
    // the upcall pairs (in the root namespace) of its TC ports.
    for d in state.daemons.iter().filter(|d| d.netns.is_none()) {
        let root = nicflow_port::pin::default_root(&d.socket);
        if root.exists() {
            let gone = nicflow_port::pin::clean_root(&root);
            tracing::info!(root = %root.display(), ?gone, "removed the pins of a killed daemon");
        }
    }

    // 2. Whatever else runs inside the lab's namespaces (programs started
    //    with `lab exec`, like a daemonized `iperf3 -s -D`): they belong to
    //    the lab, and would keep a deleted namespace alive.
    let mut nss: Vec<String> = sys::list_namespaces()?
        .into_iter()
        .filter(|n| names::is_lab_namespace(lab, n) || state.namespaces.contains(n))
        .collect();
    nss.sort();
    let mut others = Vec::new();
    for ns in &nss {
        match sys::netns_pids(ns) {
            Ok(p) => others.extend(p),
            Err(e) if sys::is_missing(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let stop = sys::stop(&others, |_| true, opts.stop_timeout);
    report.processes = stop.stopped;
    report.killed.extend(stop.killed);
    let mut undead = undead;
    undead.extend(stop.undead);

    // 3. Namespaces (their veth ends go with them).
    for ns in &nss {
        match os::netns::del(ns) {
            Ok(()) => report.namespaces.push(ns.clone()),
            Err(e) if e.is_missing() => {}
            Err(e) => return Err(e.into()),
        }
    }

    // 4. Veth ends left in the root namespace (switches in `root`; or a peer
    //    whose namespace is still held open by some process).
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut root = Rtnl::open(None)?;
    loop {
        let links: Vec<String> = sys::list_links()?
            .into_iter()
            .filter(|n| names::is_lab_veth(lab, n))
            .collect();
        let nss_left: Vec<String> = nss
            .iter()
            .filter(|n| sys::namespace_exists(n))
            .cloned()
            .collect();
        if links.is_empty() && nss_left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(LabError::Leftovers {
                lab: lab.to_string(),
                what: format!(
                    "links [{}], namespaces [{}]",
                    links.join(" "),
                    nss_left.join(" ")
                ),
            });
        }
        for l in &links {
            match os::link::del(&mut root, l) {
                Ok(()) => {
                    if !report.links.contains(l) {
                        report.links.push(l.clone());
                    }
                }
                Err(e) if e.is_missing() => {}
                Err(e) => return Err(e.into()),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !undead.is_empty() {
        return Err(LabError::Leftovers {
            lab: lab.to_string(),
            what: format!("pids {undead:?} survived SIGKILL"),
        });
    }

    // 5. The state directory (config, log, socket, record).
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(LabError::State {
                path: dir.display().to_string(),
                source,
            })
        }
    }
    Ok(report)
}

/// Every lab with a state file under `opts.state_root`.
pub fn labs(opts: &LabOptions) -> Result<Vec<LabState>, LabError> {
    let rd = match std::fs::read_dir(&opts.state_root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(LabError::State {
                path: opts.state_root.display().to_string(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        if let Ok(Some(s)) = LabState::load(&e.path()) {
            out.push(s);
        }
    }
    out.sort_by(|a, b| a.lab.cmp(&b.lab));
    Ok(out)
}

/// The namespace `exec` runs in for `node` (a host, or a switch with its
/// own namespace). With a topology the lab is that one; without, the lab
/// is found among the labs that are up, and must be unique.
///
/// # Errors
/// [`LabError::UnknownNode`], [`LabError::NotUp`], [`LabError::Ambiguous`].
pub fn node_namespace(
    topo: Option<&Topology>,
    node: &str,
    opts: &LabOptions,
) -> Result<String, LabError> {
    let ns = match topo {
        Some(t) => t.namespace_of(node).ok_or_else(|| LabError::UnknownNode {
            node: node.to_string(),
            labs: t.name.clone(),
        })?,
        None => {
            let labs = labs(opts)?;
            let hits: Vec<(&str, &str)> = labs
                .iter()
                .filter_map(|s| s.nodes.get(node).map(|ns| (s.lab.as_str(), ns.as_str())))
                .collect();
            match hits[..] {
                [(_, ns)] => ns.to_string(),
                [] => {
                    return Err(LabError::UnknownNode {
                        node: node.to_string(),
                        labs: if labs.is_empty() {
                            "none are up".to_string()
                        } else {
                            labs.iter()
                                .map(|s| s.lab.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        },
                    })
                }
                _ => {
                    return Err(LabError::Ambiguous {
                        node: node.to_string(),
                        labs: hits.iter().map(|(l, _)| *l).collect::<Vec<_>>().join(", "),
                    })
                }
            }
        }
    };
    if !sys::namespace_exists(&ns) {
        return Err(LabError::NotUp {
            what: format!("namespace {ns} of `{node}` does not exist"),
        });
    }
    Ok(ns)
}

fn exec_command<S: AsRef<OsStr>>(
    topo: Option<&Topology>,
    node: &str,
    argv: &[S],
    opts: &LabOptions,
) -> Result<Command, LabError> {
    if argv.is_empty() {
        return Err(LabError::NoCommand);
    }
    let ns = node_namespace(topo, node, opts)?;
    Ok(sys::in_ns(Some(&ns), argv))
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Run `argv` inside `node`'s namespace with our stdin/stdout/stderr and
/// return its exit code (128 + N if signal N ended it).
pub fn exec<S: AsRef<OsStr>>(
    topo: Option<&Topology>,
    node: &str,
    argv: &[S],
    opts: &LabOptions,
) -> Result<i32, LabError> {
    let mut cmd = exec_command(topo, node, argv, opts)?;
    let status = cmd.status().map_err(|source| LabError::Spawn {
        cmd: sys::describe(&cmd),
        source,
    })?;
    Ok(exit_code(status))
}

/// Run `argv` inside `node`'s namespace and capture its output. A non-zero
/// exit is not an error here: look at `Output::status`.
pub fn exec_output<S: AsRef<OsStr>>(
    topo: Option<&Topology>,
    node: &str,
    argv: &[S],
    opts: &LabOptions,
) -> Result<Output, LabError> {
    let mut cmd = exec_command(topo, node, argv, opts)?;
    cmd.stdin(Stdio::null())
        .output()
        .map_err(|source| LabError::Spawn {
            cmd: sys::describe(&cmd),
            source,
        })
}

/// The control socket of a DPU-mode switch: abstract, in its namespace.
pub fn dpu_socket(lab: &str, switch: &str) -> PathBuf {
    PathBuf::from(format!("@nicflow-{lab}-{switch}"))
}

/// The control socket of switch `switch` of lab `lab`.
pub fn switch_socket(lab: &str, switch: &str, opts: &LabOptions) -> PathBuf {
    opts.lab_dir(lab).join(format!("{switch}.sock"))
}
