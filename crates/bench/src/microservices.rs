//! `nicflow bench microservices`: document 000's microservices experiment
//! (section 5.2, figure 5.22) without a cluster (issue 16, "Benchmark"):
//! HTTP services in pods on two nodes, driven by `wrk` at fixed connection
//! counts, requests/s and latency p50/p99 per engine.
//!
//! ```text
//!  node n1 (namespace)                              node n2 (namespace)
//!  cl (wrk) ──┐                                      ┌── b2 (nginx)
//!  fe (nginx, SSI) ── br1 ── vx0 ═ u1 ══════ u2 ═ vx0 ── br2
//!  b1 (nginx) ──┘     198.18.70.1      198.18.70.2   └── b3 (nginx)
//!  pods 198.19.1.10.. of 198.19.0.0/16      pods 198.19.2.10.. of the /16
//! ```
//!
//! Each node is a namespace with its own switch (the node's root
//! namespace, in cluster terms); pods are namespaces of their own whose
//! `eth0` is a veth whose other end sits in the node namespace on the
//! node's bridge. Every pod is added with a raw CNI `ADD` (`CNI_NETNS=
//! /run/netns/<pod>`, `CNI_IFNAME=eth0`, `CNI_PATH=/usr/lib/cni`,
//! host-local IPAM) and removed with `DEL` at teardown. IPAM hands node N
//! the addresses 198.19.N.10-250 of the one pod network 198.19.0.0/16
//! (the range's subnet is the /16, so every pod has the whole pod network
//! on-link: the two bridges joined by VXLAN VNI 100 are one L2 segment, the
//! Docker-overlay / flannel-vxlan L2 model). Bridges forward by MAC
//! learning (`priority=0,actions=normal`; the Linux bridge's FDB), so pods
//! of one node talk on the node's bridge and cross-node traffic goes over
//! the tunnel port. The underlay veth has MTU 1550 so pods keep 1500.
//!
//! Engines, the same topology and application for each:
//!
//! * `nicflow`: on each node a `nicflow daemon` in the node namespace
//!   (bridge `br<N>`, defaults: `offload = "auto"`, representors and the
//!   tunnel's underlay TC ports, established flows in the TC engine) with
//!   a VXLAN port `vx0`; pods through the nicflow CNI plugin (the `nicflow`
//!   binary, type `nicflow`, `socket` = that node's daemon). Bridges are
//!   named per node because a VF's default MAC is derived from the bridge
//!   name and the VF index.
//! * `nicflow-nooffload`: the same with `offload = "none"` (representors
//!   and underlay become AF_XDP ports; every packet through the daemon).
//! * `nicflow-bf2`, `nicflow-cx7` (any `nicflow-profile:NAME`): `nicflow`
//!   with `offload = "profile:NAME"`: the TC engine holds only what that
//!   NIC model would ([`super::hwprofile`]). Every TC-based nicflow
//!   engine's samples record the offloaded share and the flows a profile
//!   refused.
//! * `bridge-cni`: the reference `bridge` plugin (run inside the node
//!   namespace, where it creates the pod's veth) with host-local IPAM on a
//!   Linux bridge `br<N>` that also holds a kernel `vxlan` device (id 100,
//!   dstport 4789, dev the underlay, which carries 198.18.70.N/24).
//! * `ovs`: Open vSwitch 3.1's userspace datapath per node (private
//!   database and daemons in the node namespace, [`Ovs`]): `br0` (NORMAL)
//!   with a `vxlan` port, and `br-phy` holding the underlay with the
//!   tunnel endpoint address on it (how the netdev datapath routes and
//!   resolves tunnels). There is no OVS CNI plugin here (ovs-cni is not
//!   packaged), so the bench does what ovs-cni does: a veth into the pod,
//!   the reference host-local plugin for the address (the same IPAM
//!   configuration and CNI protocol), `ovs-vsctl add-port`; DEL undoes
//!   it. The pods send finished checksums (`ethtool -K eth0 tx off`):
//!   OVS's AF_PACKET ports lose the partial-checksum metadata without
//!   userspace TSO, which OVS 3.1 cannot use with tunnels.
//!
//! Application: `fe` runs nginx with SSI: `/` is a page with three
//! `<!--# include virtual="/a/" -->` (`/b/`, `/c/`) includes proxied
//! (HTTP/1.1 keepalive upstreams) to `b1` (same node), `b2` and `b3`
//! (other node); so one client request is four HTTP exchanges, three of
//! them from the front end to backends, two of those cross-node. The
//! backends are nginx serving a 128-byte static page. `wrk` runs in pod
//! `cl` on node 1 (document 000 placed its load generator beside the front
//! end): `-t min(threads, C) -c C -d S --latency`, for each connection
//! count C. Per repetition and engine a fresh lab; the connection counts
//! run in it one after another after a warm-up; engines are interleaved
//! per repetition and every figure is a median over repetitions.
//!
//! Names: namespaces `nfms<pid>x<seq><tag>-n1`, `-n2`, `-cl`, `-fe`, `-b1`..
//! `-b3`; state (daemon sockets, configs, logs, CNI and IPAM state, nginx
//! files) in `$TMPDIR/nfms<pid>x<seq><tag>`. Dropping the lab (also on error
//! and Ctrl-C) runs CNI DEL for every pod, stops nginx and the daemons,
//! kills what is left in the namespaces and deletes them; `up` first
//! removes labs of dead runs.

use super::cpu::{self, Snapshot, Usage};
use super::forward::interrupted;
use super::forward::ovs::{Ovs, OvsBridge};
use super::hwprofile::{self, OffloadSample, Profile, ProfileEngine};
use super::lab::{self, veth_between, wait_ready, Lab, ProcId};
use super::overlay::{apply_steps, rtnl_in, run_in, NetStep};
use super::report::{self, Figure, Series};
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::sys;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Namespace / state directory prefix of this experiment.
pub const PREFIX: &str = "nfms";
/// The overlay's VNI.
pub const VNI: u32 = 100;
/// Underlay MTU: room for VXLAN's 50 bytes around a 1500-byte pod packet.
pub const UNDERLAY_MTU: u32 = 1550;
/// The pod network (one /16; node N allocates from 198.19.N.0/24).
pub const POD_NET: &str = "198.19.0.0/16";
/// The CNI network name.
pub const NETWORK: &str = "nfms-pods";
/// Where the reference plugins are (Debian's containernetworking-plugins).
pub const CNI_PATH: &str = "/usr/lib/cni";
/// Size of a backend's page.
pub const BODY_BYTES: usize = 128;
/// Largest connection count accepted.
pub const MAX_CONNECTIONS: usize = 10_000;
const DEFAULT_CONNECTIONS: &str = "8,32,128";
const DEFAULT_ENGINES: &str = "nicflow,nicflow-nooffload,bridge-cni,ovs";
const TUNNEL: &str = "vx0";

/// The pods: (name, node), in ADD order (so in address order per node).
pub const PODS: [(&str, usize); 5] = [("cl", 1), ("fe", 1), ("b1", 1), ("b2", 2), ("b3", 2)];
/// The backends the front end's `/a/`, `/b/`, `/c/` are proxied to.
pub const BACKENDS: [(&str, &str); 3] = [("a", "b1"), ("b", "b2"), ("c", "b3")];

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Engine {
    /// nicflow defaults: offload auto (TC engine).
    Nicflow,
    /// nicflow with `offload = "none"`.
    NicflowNooffload,
    /// The reference `bridge` CNI plugin, Linux bridge + kernel vxlan.
    BridgeCni,
    /// Open vSwitch userspace datapath with a VXLAN port; pods wired by
    /// the bench as ovs-cni would (veth, host-local IPAM, add-port).
    Ovs,
    /// nicflow with `offload = "profile:NAME"`.
    NicflowProfile(Profile),
}

impl Engine {
    pub const ALL: [Engine; 4] = [
        Engine::Nicflow,
        Engine::NicflowNooffload,
        Engine::BridgeCni,
        Engine::Ovs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Engine::Nicflow => "nicflow",
            Engine::NicflowNooffload => "nicflow-nooffload",
            Engine::BridgeCni => "bridge-cni",
            Engine::Ovs => "ovs",
            Engine::NicflowProfile(p) => p.engine_name(),
        }
    }

    pub fn parse(s: &str) -> Option<Engine> {
        if let Some(p) = Profile::parse_engine(s) {
            return Some(Engine::NicflowProfile(p));
        }
        Engine::ALL.into_iter().find(|e| e.name() == s)
    }

    fn tag(self) -> &'static str {
        match self {
            Engine::Nicflow => "t",
            Engine::NicflowNooffload => "u",
            Engine::BridgeCni => "k",
            Engine::Ovs => "o",
            Engine::NicflowProfile(p) => p.tag(),
        }
    }

    pub fn is_nicflow(self) -> bool {
        matches!(
            self,
            Engine::Nicflow | Engine::NicflowNooffload | Engine::NicflowProfile(_)
        )
    }

    /// nicflow with the TC engine (the defaults, or a profile).
    fn tc(self) -> bool {
        matches!(self, Engine::Nicflow | Engine::NicflowProfile(_))
    }

    fn profile(self) -> Option<Profile> {
        match self {
            Engine::NicflowProfile(p) => Some(p),
            _ => None,
        }
    }

    fn offload(self) -> &'static str {
        match self {
            Engine::NicflowNooffload => "none",
            Engine::NicflowProfile(p) => p.offload(),
            _ => "auto",
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Engines, comma-separated: nicflow, nicflow-nooffload, bridge-cni,
    /// ovs, nicflow-bf2, nicflow-cx7 (nicflow-profile:NAME: nicflow with
    /// offload=profile:NAME).
    #[arg(long, default_value = DEFAULT_ENGINES)]
    pub engines: String,
    /// wrk connection counts, comma-separated.
    #[arg(long, default_value = DEFAULT_CONNECTIONS)]
    pub connections: String,
    /// Repetitions (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds of each wrk run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// wrk threads (at most the connection count).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Options {
    pub engines: Vec<Engine>,
    pub connections: Vec<usize>,
    pub reps: usize,
    pub seconds: u64,
    pub threads: usize,
    pub quick: bool,
}

pub fn parse_engines(list: &str) -> anyhow::Result<Vec<Engine>> {
    let mut v = Vec::new();
    for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let e = Engine::parse(t).with_context(|| {
            format!(
                "unknown engine `{t}` (known: {}, nicflow-bf2, nicflow-cx7, nicflow-profile:NAME)",
                report::join(&Engine::ALL.map(Engine::name), ", ")
            )
        })?;
        if !v.contains(&e) {
            v.push(e);
        }
    }
    if v.is_empty() {
        bail!("no engines given");
    }
    Ok(v)
}

pub fn parse_connections(list: &str) -> anyhow::Result<Vec<usize>> {
    let mut v = Vec::new();
    for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let n: usize = t
            .parse()
            .with_context(|| format!("bad connection count `{t}`"))?;
        if n == 0 || n > MAX_CONNECTIONS {
            bail!("connection count {n}: 1..={MAX_CONNECTIONS}");
        }
        if !v.contains(&n) {
            v.push(n);
        }
    }
    if v.is_empty() {
        bail!("no connection counts given");
    }
    Ok(v)
}

pub fn options(a: &Args) -> anyhow::Result<Options> {
    let mut o = Options {
        engines: parse_engines(&a.engines)?,
        connections: parse_connections(&a.connections)?,
        reps: a.reps.max(1),
        seconds: a.seconds.max(1),
        threads: a.threads.max(1),
        quick: a.run.quick,
    };
    if o.quick {
        o.reps = 1;
        o.seconds = o.seconds.min(3);
        o.connections.truncate(2);
    }
    Ok(o)
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    let measure = || run(&options(args)?);
    report::cli(&args.run, "microservices", measure, figures, markdown)
}

fn progress(s: &str) {
    eprintln!("[microservices] {s}");
}

// ---------------------------------------------------------------------------
// Address plan and configuration text (pure)
// ---------------------------------------------------------------------------

/// Underlay address of node 1 or 2: 198.18.70.N.
pub fn underlay_ip(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 70, node as u8)
}

pub fn underlay_iface(node: usize) -> String {
    format!("u{node}")
}

/// The bridge of node N (nicflow and Linux bridge alike).
pub fn bridge(node: usize) -> String {
    format!("br{node}")
}

/// The nicflow daemon's config on node 1 or 2: one bridge, learning, a
/// VXLAN port to the other node; the pods' representors come from CNI.
pub fn daemon_config(node: usize, engine: Engine) -> String {
    let peer = 3 - node;
    format!(
        "[[bridge]]\nname = \"{}\"\noffload = \"{}\"\nflows = [\"priority=0,actions=normal\"]\n\
         [[bridge.port]]\nname = \"{TUNNEL}\"\niface = \"{TUNNEL}\"\ntype = \"vxlan\"\n\
         options = {{ underlay = \"{}\", local_ip = \"{}\", remote_ip = \"{}\", key = \"{VNI}\" }}\n",
        bridge(node),
        engine.offload(),
        underlay_iface(node),
        underlay_ip(node),
        underlay_ip(peer),
    )
}

/// The CNI network configuration node `node` uses: type `nicflow` (socket
/// and record directory of this lab) or `bridge`; host-local IPAM over the
/// /16 with node N's /24 as its range, state in `dir`.
pub fn net_conf(engine: Engine, node: usize, dir: &Path) -> serde_json::Value {
    let ipam = serde_json::json!({
        "type": "host-local",
        "dataDir": dir.join(format!("ipam-n{node}")),
        "ranges": [[{
            "subnet": POD_NET,
            "rangeStart": format!("198.19.{node}.10"),
            "rangeEnd": format!("198.19.{node}.250"),
            "gateway": format!("198.19.{node}.1"),
        }]],
    });
    if engine.is_nicflow() {
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "type": "nicflow",
            "bridge": bridge(node),
            "socket": dir.join(format!("n{node}.sock")),
            "dataDir": dir.join(format!("cni-n{node}")),
            "ipam": ipam,
        })
    } else if engine == Engine::Ovs {
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "type": "ovs",
            "bridge": "br0",
            "ipam": ipam,
        })
    } else {
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "type": "bridge",
            "bridge": bridge(node),
            "ipam": ipam,
        })
    }
}

/// The `ip` commands (after `ip -n NODE`) of the kernel overlay on node N
/// for `bridge-cni`: underlay address, vxlan device, Linux bridge.
pub fn kernel_steps(node: usize) -> Vec<NetStep> {
    let peer = 3 - node;
    let u = underlay_iface(node);
    let br = bridge(node);
    vec![
        NetStep::Addr {
            dev: u.clone(),
            ip: underlay_ip(node).into(),
            prefix: 24,
        },
        NetStep::Vxlan(nicflow::os::link::Vxlan {
            name: TUNNEL.into(),
            vni: VNI,
            local: underlay_ip(node).into(),
            remote: underlay_ip(peer).into(),
            port: 4789,
            dev: Some(u),
        }),
        NetStep::Bridge(br.clone()),
        NetStep::master(TUNNEL, &br),
        NetStep::Up(TUNNEL.into()),
        NetStep::Up(br),
    ]
}

/// The first IPv4 address of a CNI result (`ips[0].address`, no prefix).
pub fn result_ip(result: &str) -> anyhow::Result<Ipv4Addr> {
    let v: serde_json::Value =
        serde_json::from_str(result).with_context(|| format!("CNI result `{result}`"))?;
    let a = v["ips"]
        .as_array()
        .and_then(|a| a.iter().find_map(|ip| ip["address"].as_str()))
        .with_context(|| format!("CNI result without an address: {result}"))?;
    a.split('/')
        .next()
        .unwrap_or("")
        .parse()
        .with_context(|| format!("CNI result address `{a}`"))
}

fn nginx_common(dir: &Path, workers: usize) -> String {
    let d = dir.display();
    format!(
        "user root;\nworker_processes {workers};\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         daemon off;\nevents {{ worker_connections 16384; }}\n"
    )
}

fn nginx_http_common(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "  access_log off;\n  keepalive_requests 1000000;\n  keepalive_timeout 60s;\n\
         \x20 client_body_temp_path {d}/t_body;\n  proxy_temp_path {d}/t_proxy;\n\
         \x20 fastcgi_temp_path {d}/t_fcgi;\n  uwsgi_temp_path {d}/t_uwsgi;\n  scgi_temp_path {d}/t_scgi;\n"
    )
}

/// A backend's nginx.conf: the static page in `dir/html`.
pub fn backend_conf(dir: &Path) -> String {
    format!(
        "{}http {{\n{}  server {{\n    listen 80 reuseport;\n    root {}/html;\n    location / {{ }}\n  }}\n}}\n",
        nginx_common(dir, 1),
        nginx_http_common(dir),
        dir.display()
    )
}

/// A backend's page: `backend <name>` padded to [`BODY_BYTES`].
pub fn backend_body(name: &str) -> String {
    let mut s = format!("backend {name} ");
    while s.len() < BODY_BYTES - 1 {
        s.push('.');
    }
    s.push('\n');
    s
}

/// The front end's nginx.conf: `/` is an SSI page including `/a/`, `/b/`,
/// `/c/`, each proxied to its backend over keepalive HTTP/1.1.
pub fn frontend_conf(dir: &Path, backends: &[(&str, Ipv4Addr)]) -> String {
    let mut s = nginx_common(dir, 2);
    s.push_str("http {\n");
    s.push_str(&nginx_http_common(dir));
    for (path, ip) in backends {
        let _ = writeln!(
            s,
            "  upstream be_{path} {{ server {ip}:80; keepalive 256; }}"
        );
    }
    let _ = writeln!(
        s,
        "  server {{\n    listen 80 reuseport;\n    root {}/html;\n    location / {{ ssi on; }}",
        dir.display()
    );
    for (path, _) in backends {
        let _ = writeln!(
            s,
            "    location /{path}/ {{ proxy_pass http://be_{path}/; proxy_http_version 1.1; \
             proxy_set_header Connection \"\"; }}"
        );
    }
    s.push_str("  }\n}\n");
    s
}

/// The front end's page: three SSI includes (fetched in parallel).
pub fn frontend_page(paths: &[&str]) -> String {
    let mut s = String::from("<html><body>front end\n");
    for p in paths {
        let _ = writeln!(s, "<!--# include virtual=\"/{p}/\" -->");
    }
    s.push_str("</body></html>\n");
    s
}

// ---------------------------------------------------------------------------
// wrk
// ---------------------------------------------------------------------------

/// What one `wrk --latency` run printed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WrkResult {
    pub requests: u64,
    pub duration_s: f64,
    pub rps: f64,
    /// Latency percentiles in µs.
    pub p50_us: f64,
    pub p75_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    /// Socket errors (connect + read + write + timeout).
    pub socket_errors: u64,
    pub timeouts: u64,
    pub non_2xx: u64,
}

/// A wrk duration (`481.00us`, `1.07ms`, `2.00s`, `1.50m`) in µs.
pub fn parse_wrk_time(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mul) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e6)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * mul)
}

/// Parse `wrk --latency` output.
pub fn parse_wrk(text: &str) -> anyhow::Result<WrkResult> {
    let mut r = WrkResult::default();
    let mut have_rps = false;
    let mut in_dist = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("Latency Distribution") {
            in_dist = true;
            continue;
        }
        if in_dist {
            let mut it = t.split_whitespace();
            match (it.next(), it.next()) {
                (Some(p), Some(v)) if p.ends_with('%') => {
                    let us = parse_wrk_time(v).with_context(|| format!("wrk latency `{t}`"))?;
                    match p {
                        "50%" => r.p50_us = us,
                        "75%" => r.p75_us = us,
                        "90%" => r.p90_us = us,
                        "99%" => r.p99_us = us,
                        _ => {}
                    }
                    continue;
                }
                _ => in_dist = false,
            }
        }
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            r.rps = v.trim().parse().context("wrk Requests/sec")?;
            have_rps = true;
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            r.non_2xx = v.trim().parse().context("wrk Non-2xx")?;
        } else if let Some(v) = t.strip_prefix("Socket errors:") {
            for part in v.split(',') {
                let mut it = part.split_whitespace();
                if let (Some(k), Some(n)) = (it.next(), it.next()) {
                    let n: u64 = n.parse().context("wrk socket errors")?;
                    r.socket_errors += n;
                    if k == "timeout" {
                        r.timeouts = n;
                    }
                }
            }
        } else if t.contains(" requests in ") {
            // `32015 requests in 3.02s, 7.51MB read`
            let mut it = t.split_whitespace();
            r.requests = it
                .next()
                .and_then(|n| n.parse().ok())
                .context("wrk request count")?;
            r.duration_s = it
                .nth(2)
                .map(|d| d.trim_end_matches(','))
                .and_then(parse_wrk_time)
                .map(|us| us / 1e6)
                .context("wrk duration")?;
        }
    }
    if !have_rps {
        bail!("no `Requests/sec:` in wrk's output:\n{text}");
    }
    Ok(r)
}

/// wrk's arguments: threads at most the connections.
pub fn wrk_argv(url: &str, conns: usize, threads: usize, seconds: u64) -> Vec<String> {
    let t = threads.clamp(1, conns.max(1));
    [
        "wrk".to_string(),
        "-t".into(),
        t.to_string(),
        "-c".into(),
        conns.to_string(),
        "-d".into(),
        format!("{seconds}s"),
        "--timeout".into(),
        "5s".into(),
        "--latency".into(),
        url.into(),
    ]
    .to_vec()
}

// ---------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------

struct Daemon {
    proc: ProcId,
    sock: PathBuf,
    node: usize,
}

#[derive(Clone, Debug)]
struct Pod {
    name: &'static str,
    ns: String,
    node: usize,
    ip: Ipv4Addr,
}

/// `dump-dp-flows` of one node, counted by engine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DpFlows {
    pub node: String,
    pub tc: usize,
    pub xdp: usize,
    pub userspace: usize,
    pub reasons: Vec<String>,
    /// The first 64 lines, for the report.
    pub lines: Vec<String>,
}

/// Two nodes, five pods, nginx in a [`Lab`]; Drop removes everything
/// (CNI DEL, nginx and OVS first, then the lab).
pub struct MicroservicesLab {
    lab: Lab,
    engine: Engine,
    daemons: Vec<Daemon>,
    pods: Vec<Pod>,
    nginx: Vec<Child>,
    /// Open vSwitch per node (engine `ovs`).
    ovs: Vec<(usize, Ovs)>,
    pub commands: Vec<String>,
    torn_down: bool,
}

/// Remove labs of this experiment left by dead processes.
pub fn reap_stale() -> Vec<String> {
    lab::reap_stale(PREFIX, None)
}

impl MicroservicesLab {
    fn ns(&self, node: &str) -> String {
        self.lab.ns(node)
    }

    pub fn name(&self) -> &str {
        self.lab.name()
    }

    fn pod(&self, name: &str) -> anyhow::Result<&Pod> {
        self.pods
            .iter()
            .find(|p| p.name == name)
            .with_context(|| format!("no pod {name}"))
    }

    /// Labelled pids for CPU accounting: the daemons.
    pub fn switch_pids(&self) -> Vec<(String, u32)> {
        let mut v: Vec<(String, u32)> = self
            .daemons
            .iter()
            .map(|d| (format!("switch-n{}", d.node), self.lab.pid(d.proc)))
            .collect();
        for (node, o) in &self.ovs {
            if let Some(pid) = o.vswitchd_pid() {
                v.push((format!("switch-n{node}"), pid));
            }
        }
        v
    }

    pub fn up(engine: Engine) -> anyhow::Result<MicroservicesLab> {
        for p in ["wrk", "nginx"] {
            if super::forward::ovs::which(p).is_none() {
                bail!("`{p}` is not installed (apt-get install wrk nginx-light)");
            }
        }
        for p in ["host-local", "bridge"] {
            if !Path::new(CNI_PATH).join(p).is_file() {
                bail!("{CNI_PATH}/{p} is missing (apt-get install containernetworking-plugins)");
            }
        }
        let lab = Lab::create("the microservices lab", PREFIX, engine.tag(), None)?;
        let mut lab = MicroservicesLab {
            lab,
            engine,
            daemons: Vec::new(),
            pods: Vec::new(),
            nginx: Vec::new(),
            ovs: Vec::new(),
            commands: Vec::new(),
            torn_down: false,
        };
        // From here on, Drop cleans up.
        lab.build()?;
        Ok(lab)
    }

    fn add_ns(&mut self, short: &str) -> anyhow::Result<String> {
        self.lab.add_ns(
            short,
            &[
                ("net.ipv6.conf.all.disable_ipv6", "1"),
                ("net.ipv6.conf.default.disable_ipv6", "1"),
            ],
        )
    }

    fn build(&mut self) -> anyhow::Result<()> {
        let (n1, n2) = (self.add_ns("n1")?, self.add_ns("n2")?);
        let end = |name: &str, ns: &str| nicflow::os::link::VethEnd {
            mtu: Some(UNDERLAY_MTU),
            netns: Some(ns.to_string()),
            ..nicflow::os::link::VethEnd::named(name)
        };
        let mut root =
            nicflow::os::netlink::Rtnl::open(None).map_err(|e| anyhow::anyhow!("{e}"))?;
        nicflow::os::link::add_veth(&mut root, &end("u1", &n1), &end("u2", &n2))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        apply_steps(&n1, &[NetStep::Up("u1".into())])?;
        apply_steps(&n2, &[NetStep::Up("u2".into())])?;
        self.commands.push(format!(
            "underlay: veth u1 (node n1) -- u2 (node n2), MTU {UNDERLAY_MTU}"
        ));
        if self.engine.is_nicflow() {
            let bin = super::nicflow_bin()?;
            for node in [1, 2] {
                self.start_daemon(&bin, node)?;
            }
            for node in [1, 2] {
                self.wait_daemon(node)?;
            }
            self.commands.push(format!(
                "ip netns exec <nN> nicflow --socket nN.sock daemon --config nN.toml   \
                 # bridge brN offload={}, flows priority=0,actions=normal, vxlan port {TUNNEL} \
                 (underlay uN, local_ip 198.18.70.N, remote_ip the other node, key {VNI})",
                self.engine.offload()
            ));
        } else if self.engine == Engine::Ovs {
            self.start_ovs()?;
        } else {
            for node in [1, 2] {
                let ns = self.ns(&format!("n{node}"));
                for step in kernel_steps(node) {
                    apply_steps(&ns, std::slice::from_ref(&step))?;
                    self.commands
                        .push(format!("ip -n <n{node}> {}", step.words().join(" ")));
                }
            }
        }
        for node in [1, 2] {
            let conf = net_conf(self.engine, node, self.lab.dir());
            std::fs::write(
                self.lab.dir().join(format!("net-n{node}.json")),
                serde_json::to_string_pretty(&conf)?,
            )?;
            self.commands.push(format!(
                "CNI network config of node n{node}: {}",
                serde_json::to_string(&conf)?
                    .replace(&self.lab.dir().display().to_string(), "$LAB")
            ));
        }
        for (pod, node) in PODS {
            if interrupted() {
                bail!("interrupted");
            }
            let ns = self.add_ns(pod)?;
            let out = self
                .cni("ADD", pod, node, &ns)
                .with_context(|| format!("CNI ADD of pod {pod} on node n{node}"))?;
            let ip = result_ip(&out)?;
            self.pods.push(Pod {
                name: pod,
                ns,
                node,
                ip,
            });
        }
        self.commands.push(format!(
            "pods: CNI_COMMAND=ADD CNI_CONTAINERID=<pod> CNI_NETNS=/run/netns/<pod> CNI_IFNAME=eth0 \
             CNI_PATH={CNI_PATH} {} < net-nN.json   # {}",
            match self.engine {
                Engine::Nicflow | Engine::NicflowNooffload | Engine::NicflowProfile(_) => {
                    "nicflow"
                }
                Engine::BridgeCni => "ip netns exec <nN> /usr/lib/cni/bridge",
                Engine::Ovs =>
                    "(ovs: no OVS CNI plugin here; the bench does what ovs-cni does: veth vPOD in nN -- \
                     eth0 in the pod, `ethtool -K eth0 tx off`, /usr/lib/cni/host-local for the address, \
                     ovs-vsctl add-port br0 vPOD)",
            },
            self.pods
                .iter()
                .map(|p| format!("{} n{} {}", p.name, p.node, p.ip))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        // Every pod reaches every other one (the first ping resolves ARP,
        // across the tunnel for the other node).
        let cl = self.pod("cl")?.ns.clone();
        let fe = self.pod("fe")?.ns.clone();
        let targets: Vec<(String, Ipv4Addr)> = self
            .pods
            .iter()
            .filter(|p| p.name != "cl")
            .map(|p| (p.name.to_string(), p.ip))
            .collect();
        for (from, from_ns) in [("cl", &cl), ("fe", &fe)] {
            for (to, ip) in &targets {
                if to == from {
                    continue;
                }
                self.ping(from_ns, &ip.to_string())
                    .with_context(|| format!("pod {from} cannot ping pod {to} ({ip})"))?;
            }
        }
        self.start_app()?;
        Ok(())
    }

    fn ping(&self, ns: &str, dst: &str) -> anyhow::Result<()> {
        let mut last = String::new();
        for _ in 0..10 {
            if interrupted() {
                bail!("interrupted");
            }
            match run_in(ns, &["ping", "-n", "-q", "-c", "1", "-W", "1", dst]) {
                Ok(_) => return Ok(()),
                Err(e) => last = format!("{e:#}"),
            }
        }
        bail!("{last}\n{}", self.logs())
    }

    /// One CNI invocation for `pod` on `node`: the nicflow binary (type
    /// `nicflow`) from this namespace, or the reference `bridge` plugin
    /// inside the node namespace (it creates the veth where it runs).
    fn cni(&mut self, command: &str, pod: &str, node: usize, ns: &str) -> anyhow::Result<String> {
        let c = match self.engine {
            Engine::Nicflow | Engine::NicflowNooffload | Engine::NicflowProfile(_) => {
                Command::new(super::nicflow_bin()?)
            }
            Engine::BridgeCni => {
                let node_ns = self.ns(&format!("n{node}"));
                sys::in_ns(Some(&node_ns), &[Path::new(CNI_PATH).join("bridge")])
            }
            Engine::Ovs => return self.ovs_pod(command, pod, node, ns),
        };
        self.exec_plugin(c, command, pod, node, ns)
    }

    /// Run a CNI plugin with the `CNI_*` variables and node `node`'s
    /// network configuration on stdin; its stdout.
    fn exec_plugin(
        &self,
        mut c: Command,
        command: &str,
        pod: &str,
        node: usize,
        ns: &str,
    ) -> anyhow::Result<String> {
        let conf = std::fs::read(self.lab.dir().join(format!("net-n{node}.json")))?;
        c.env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", format!("{}-{pod}", self.lab.name()))
            .env("CNI_NETNS", format!("/run/netns/{ns}"))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", CNI_PATH)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().context("starting the CNI plugin")?;
        child
            .stdin
            .take()
            .context("plugin stdin")?
            .write_all(&conf)
            .context("writing the network config to the plugin")?;
        let out = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "CNI {command} exited with {}: {} {}",
                out.status,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(stdout)
    }

    /// `ovs`: what ovs-cni would do for a pod, with the reference
    /// host-local IPAM plugin.
    fn ovs_pod(
        &mut self,
        command: &str,
        pod: &str,
        node: usize,
        ns: &str,
    ) -> anyhow::Result<String> {
        let node_ns = self.ns(&format!("n{node}"));
        let veth = format!("v{pod}");
        let ipam = Command::new(Path::new(CNI_PATH).join("host-local"));
        let o = &mut self
            .ovs
            .iter_mut()
            .find(|(n, _)| *n == node)
            .context("no Open vSwitch on that node")?
            .1;
        let db = o.db();
        if command == "DEL" {
            let mut errs = Vec::new();
            if let Err(e) = o.run(
                false,
                &["ovs-vsctl", &db, "--if-exists", "del-port", "br0", &veth],
            ) {
                errs.push(e);
            }
            let _ = rtnl_in(&node_ns, |rt| nicflow::os::link::del(rt, &veth));
            if let Err(e) = self.exec_plugin(ipam, "DEL", pod, node, ns) {
                errs.push(format!("{e:#}"));
            }
            if errs.is_empty() {
                return Ok(String::new());
            }
            bail!("{}", errs.join("; "));
        }
        veth_between(&veth, &node_ns, "eth0", ns)?;
        // OVS's netdev-linux ports lose CHECKSUM_PARTIAL metadata (no
        // userspace TSO: OVS 3.1 cannot send TSO frames into a tunnel),
        // so the pod sends finished checksums.
        nicflow::os::ethtool::set(
            Some(ns),
            "eth0",
            nicflow::os::ethtool::is_tx_checksum,
            false,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        o.run(
            false,
            &["ovs-vsctl", &db, "--timeout=20", "add-port", "br0", &veth],
        )
        .map_err(anyhow::Error::msg)?;
        let out = self.exec_plugin(ipam, "ADD", pod, node, ns)?;
        let v: serde_json::Value = serde_json::from_str(&out)?;
        let addr = v["ips"][0]["address"]
            .as_str()
            .with_context(|| format!("host-local result without an address: {out}"))?;
        let (ip, prefix) =
            nicflow::os::addr::parse_cidr(addr).map_err(|e| anyhow::anyhow!("{e}"))?;
        apply_steps(
            ns,
            &[
                NetStep::Addr {
                    dev: "eth0".into(),
                    ip,
                    prefix,
                },
                NetStep::Up("eth0".into()),
            ],
        )?;
        Ok(out)
    }

    fn start_ovs(&mut self) -> anyhow::Result<()> {
        for r in super::forward::ovs::reap_stale() {
            tracing::info!("removed leftovers of a dead run: {r}");
        }
        for node in [1, 2] {
            let ns = self.ns(&format!("n{node}"));
            let br = OvsBridge {
                userspace_tso: false,
                port_type: None,
                ports: Vec::new(),
                flows: None,
            };
            let o = Ovs::start(&ns, &format!("{}-n{node}", self.lab.name()), &br)
                .map_err(anyhow::Error::msg)
                .context("starting Open vSwitch")?;
            self.ovs.push((node, o));
            let o = &mut self.ovs.last_mut().context("ovs")?.1;
            let db = o.db();
            let u = underlay_iface(node);
            // The userspace datapath's tunnel endpoint: an address on a
            // netdev bridge holding the underlay (OVS routes and resolves
            // the remote through it).
            o.run(
                false,
                &[
                    "ovs-vsctl",
                    &db,
                    "--timeout=20",
                    "add-br",
                    "br-phy",
                    "--",
                    "set",
                    "bridge",
                    "br-phy",
                    "datapath_type=netdev",
                    "--",
                    "add-port",
                    "br-phy",
                    &u,
                ],
            )
            .map_err(anyhow::Error::msg)?;
            apply_steps(
                &ns,
                &[
                    NetStep::Addr {
                        dev: "br-phy".into(),
                        ip: underlay_ip(node).into(),
                        prefix: 24,
                    },
                    NetStep::Up("br-phy".into()),
                ],
            )?;
            let remote = format!("options:remote_ip={}", underlay_ip(3 - node));
            let key = format!("options:key={VNI}");
            o.run(
                false,
                &[
                    "ovs-vsctl",
                    &db,
                    "--timeout=20",
                    "add-port",
                    "br0",
                    TUNNEL,
                    "--",
                    "set",
                    "interface",
                    TUNNEL,
                    "type=vxlan",
                    &remote,
                    &key,
                ],
            )
            .map_err(anyhow::Error::msg)?;
        }
        self.commands.push(format!(
            "{} per node (private database and daemons in the node namespace): \
             br0 datapath_type=netdev (NORMAL) with the pods' veths and vx0 type=vxlan \
             options:remote_ip=<other node> options:key={VNI}; br-phy datapath_type=netdev \
             with the underlay uN, 198.18.70.N/24 on br-phy; userspace-tso-enable=false",
            super::forward::ovs::version()
        ));
        Ok(())
    }

    fn start_daemon(&mut self, bin: &Path, node: usize) -> anyhow::Result<()> {
        let cfg = self.lab.dir().join(format!("n{node}.toml"));
        std::fs::write(&cfg, daemon_config(node, self.engine))
            .with_context(|| format!("writing {}", cfg.display()))?;
        let sock = self.lab.dir().join(format!("n{node}.sock"));
        let log = self.lab.dir().join(format!("n{node}.log"));
        let proc = self.lab.spawn_daemon(
            format!("switch-n{node}"),
            bin,
            &format!("n{node}"),
            &cfg,
            &sock,
            &log,
        )?;
        self.daemons.push(Daemon { proc, sock, node });
        Ok(())
    }

    fn wait_daemon(&mut self, node: usize) -> anyhow::Result<()> {
        let d = self
            .daemons
            .iter()
            .find(|d| d.node == node)
            .context("daemon")?;
        let (proc, sock) = (d.proc, d.sock.clone());
        let r = wait_ready(self.lab.child_mut(proc), &sock, Duration::from_secs(30));
        r.map_err(|e| anyhow::anyhow!("nicflow daemon on n{node} {e}:\n{}", self.logs()))
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for d in &self.daemons {
            let _ = writeln!(
                s,
                "--- n{} daemon log (last lines) ---\n{}",
                d.node,
                sys::tail(&self.lab.dir().join(format!("n{}.log", d.node)), 20)
            );
        }
        s
    }

    fn start_nginx(
        &mut self,
        pod: &str,
        conf: String,
        html: &[(&str, String)],
    ) -> anyhow::Result<()> {
        let d = self.lab.dir().join(format!("www-{pod}"));
        std::fs::create_dir_all(d.join("html"))?;
        std::fs::create_dir_all(d.join("logs"))?;
        for (f, text) in html {
            std::fs::write(d.join("html").join(f), text)?;
        }
        let conf_path = d.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let ns = self.pod(pod)?.ns.clone();
        let log = std::fs::File::create(d.join("stderr.log"))?;
        let mut child = sys::in_ns(Some(&ns), &["nginx"])
            .arg("-e")
            .arg(d.join("error.log"))
            .arg("-p")
            .arg(&d)
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting nginx")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if run_in(&ns, &["ss", "-Hltn", "sport = :80"]).is_ok_and(|o| !o.trim().is_empty()) {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                bail!(
                    "nginx in pod {pod} exited ({st}): {}",
                    sys::tail(&d.join("stderr.log"), 10)
                );
            }
            if Instant::now() >= deadline || interrupted() {
                let _ = child.kill();
                let _ = child.wait();
                bail!("nginx in pod {pod} did not start listening");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.nginx.push(child);
        Ok(())
    }

    fn start_app(&mut self) -> anyhow::Result<()> {
        for (_, b) in BACKENDS {
            let d = self.lab.dir().join(format!("www-{b}"));
            self.start_nginx(b, backend_conf(&d), &[("index.html", backend_body(b))])?;
        }
        let backends: Vec<(&str, Ipv4Addr)> = BACKENDS
            .iter()
            .map(|(path, b)| Ok((*path, self.pod(b)?.ip)))
            .collect::<anyhow::Result<_>>()?;
        let d = self.lab.dir().join("www-fe");
        let paths: Vec<&str> = BACKENDS.iter().map(|(p, _)| *p).collect();
        self.start_nginx(
            "fe",
            frontend_conf(&d, &backends),
            &[("index.html", frontend_page(&paths))],
        )?;
        self.commands.push(format!(
            "application: nginx {} in pods; fe: SSI page including /a/ /b/ /c/ proxied (keepalive) \
             to b1 (node n1), b2, b3 (node n2); backends: a {BODY_BYTES}-byte static page",
            nginx_version()
        ));
        // One request through the whole chain.
        let url = self.url()?;
        let cl = self.pod("cl")?.ns.clone();
        let mut last = String::new();
        for _ in 0..20 {
            if interrupted() {
                bail!("interrupted");
            }
            match run_in(&cl, &["curl", "-sS", "-m", "3", &url]) {
                Ok(body)
                    if BACKENDS
                        .iter()
                        .all(|(_, b)| body.contains(&format!("backend {b} "))) =>
                {
                    return Ok(())
                }
                Ok(body) => last = format!("incomplete page: {body}"),
                Err(e) => last = format!("{e:#}"),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!("GET {url} from pod cl: {last}\n{}", self.logs())
    }

    pub fn url(&self) -> anyhow::Result<String> {
        Ok(format!("http://{}/", self.pod("fe")?.ip))
    }

    pub fn client_ns(&self) -> anyhow::Result<String> {
        Ok(self.pod("cl")?.ns.clone())
    }

    /// The daemons' control sockets and bridges.
    fn sockets(&self) -> Vec<(&Path, String)> {
        self.daemons
            .iter()
            .map(|d| (d.sock.as_path(), bridge(d.node)))
            .collect()
    }

    /// Frames per engine on every node (None if one cannot be read).
    fn engine_counts(&self) -> Option<Vec<hwprofile::EngineCounts>> {
        self.sockets()
            .iter()
            .map(|(s, b)| hwprofile::read_counts(s, b).ok())
            .collect()
    }

    /// Frames since `before` and the flows now, all nodes together.
    fn offload_sample(
        &self,
        profile: Option<Profile>,
        before: &[hwprofile::EngineCounts],
    ) -> Option<OffloadSample> {
        let mut o = OffloadSample::default();
        for ((s, b), c) in self.sockets().iter().zip(before) {
            let x = hwprofile::sample_after(s, b, profile, *c).ok()?;
            o.frames = o.frames.plus(x.frames);
            o.dp = o.dp.add(&x.dp);
        }
        Some(o)
    }

    /// `dump-dp-flows br<N>` on each node, counted by engine.
    pub fn dp_flows(&self) -> Vec<DpFlows> {
        self.daemons
            .iter()
            .map(|d| {
                let mut f = DpFlows {
                    node: format!("n{}", d.node),
                    ..Default::default()
                };
                match nicflow::control::daemon::request(
                    &d.sock,
                    &Request::DumpDpFlows {
                        bridge: bridge(d.node),
                    },
                ) {
                    Ok(r) => {
                        f.lines = r.text.lines().take(64).map(str::to_string).collect();
                        count_dp_flows(&r.text, &mut f);
                    }
                    Err(e) => f.lines.push(format!("dump-dp-flows failed: {e:#}")),
                }
                f
            })
            .collect()
    }

    fn teardown(&mut self) -> anyhow::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut errs = Vec::new();
        for c in &mut self.nginx {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
        for c in &mut self.nginx {
            let deadline = Instant::now() + Duration::from_secs(3);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.nginx.clear();
        // CNI DEL for every pod, while the daemons still run.
        let pods = std::mem::take(&mut self.pods);
        for p in pods.iter().rev() {
            if let Err(e) = self.cni("DEL", p.name, p.node, &p.ns) {
                errs.push(format!("CNI DEL of pod {}: {e:#}", p.name));
            }
        }
        for (_, mut o) in std::mem::take(&mut self.ovs) {
            if let Err(e) = o.stop() {
                errs.push(e);
            }
        }
        // SIGTERM: the daemons detach their programs and exit.
        if let Err(e) = self.lab.teardown() {
            errs.push(format!("{e:#}"));
        }
        self.daemons.clear();
        if errs.is_empty() {
            Ok(())
        } else {
            bail!("tearing down {}: {}", self.lab.name(), errs.join("; "))
        }
    }

    pub fn down(mut self) -> anyhow::Result<()> {
        self.teardown()
    }
}

impl Drop for MicroservicesLab {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!("{e:#}");
        }
    }
}

/// Count `dump-dp-flows` lines by engine and collect the reasons flows
/// stay in userspace.
pub fn count_dp_flows(text: &str, f: &mut DpFlows) {
    for l in text.lines() {
        if l.contains("engine:xdp") {
            f.xdp += 1;
        } else if l.contains("engine:tc") {
            f.tc += 1;
        } else if l.contains("engine:userspace") {
            f.userspace += 1;
        }
        if let Some(why) = l.split("not_offloaded:").nth(1) {
            // A profile's reason has spaces and commas: it ends where the
            // line's next field does.
            let why = why.split(", actions:").next().unwrap_or("").to_string();
            if !why.is_empty() && !f.reasons.contains(&why) {
                f.reasons.push(why);
            }
        }
    }
    f.reasons.sort();
}

/// The `n` flows with the most packets (`packets:N`), busiest first.
pub fn busiest(lines: &[String], n: usize) -> Vec<&str> {
    let packets = |l: &str| -> u64 {
        l.split("packets:")
            .nth(1)
            .and_then(|x| x.split(',').next())
            .and_then(|x| x.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut v: Vec<&str> = lines.iter().map(String::as_str).collect();
    v.sort_by_key(|l| std::cmp::Reverse(packets(l)));
    v.truncate(n);
    v
}

fn nginx_version() -> String {
    Command::new("nginx")
        .arg("-v")
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stderr)
                .trim()
                .trim_start_matches("nginx version: ")
                .to_string()
        })
        .unwrap_or_default()
}

fn wrk_version() -> String {
    Command::new("wrk")
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.split(" [").next().unwrap_or(l).trim().to_string())
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

/// One wrk run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub engine: Engine,
    pub connections: usize,
    pub rep: usize,
    pub lab: String,
    pub wrk: WrkResult,
    /// Machine CPU over the wrk run.
    pub cpu: Usage,
    /// 1-minute load average before the lab was built.
    pub load1_before: f64,
    /// TC-based nicflow engines: frames per engine during the wrk run and
    /// the datapath flows after it, both nodes.
    #[serde(default)]
    pub offload: Option<OffloadSample>,
}

impl Sample {
    /// Machine-wide busy CPU µs per request.
    pub fn cpu_us_per_request(&self) -> f64 {
        if self.wrk.requests == 0 {
            return f64::NAN;
        }
        self.cpu.busy_s / self.wrk.requests as f64 * 1e6
    }

    /// The switch daemons' CPU µs per request (None for the kernel).
    pub fn switch_us_per_request(&self) -> Option<f64> {
        let s = self.cpu.procs_cpu("switch")?;
        (self.wrk.requests > 0).then(|| s / self.wrk.requests as f64 * 1e6)
    }
}

/// `dump-dp-flows` right after a lab's last wrk run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DpSample {
    pub engine: Engine,
    pub rep: usize,
    pub nodes: Vec<DpFlows>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub options: Options,
    pub machine: String,
    pub wrk_version: String,
    pub samples: Vec<Sample>,
    pub dp_flows: Vec<DpSample>,
    pub failures: Vec<String>,
    pub commands: Vec<String>,
    pub loadavg_start: String,
    pub loadavg_end: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn load1() -> f64 {
    loadavg()
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Run wrk in `ns` and wait for it (killed on Ctrl-C).
fn run_wrk(ns: &str, argv: &[String], seconds: u64) -> anyhow::Result<WrkResult> {
    let mut child = sys::in_ns(Some(ns), argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting wrk")?;
    let deadline = Instant::now() + Duration::from_secs(seconds + 30);
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if interrupted() || Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            if interrupted() {
                bail!("interrupted");
            }
            bail!("wrk did not finish in {}s", seconds + 30);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk exited with {}: {} {}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_wrk(&stdout)
}

pub fn run(opts: &Options) -> anyhow::Result<Results> {
    let mut r = Results {
        options: opts.clone(),
        machine: report::machine_section("perf counters not used"),
        wrk_version: wrk_version(),
        samples: Vec::new(),
        dp_flows: Vec::new(),
        failures: Vec::new(),
        commands: Vec::new(),
        loadavg_start: loadavg(),
        loadavg_end: String::new(),
    };
    for rep in 0..opts.reps {
        for &engine in &opts.engines {
            if interrupted() {
                bail!("interrupted");
            }
            let load = load1();
            progress(&format!(
                "rep {}/{} {}: building the lab (load {load:.2})",
                rep + 1,
                opts.reps,
                engine.name()
            ));
            match one_lab(opts, engine, rep, load, &mut r) {
                Ok(()) => {}
                Err(e) if interrupted() => return Err(e),
                Err(e) => {
                    progress(&format!("{} rep {}: FAILED: {e:#}", engine.name(), rep + 1));
                    r.failures
                        .push(format!("{} rep {}: {e:#}", engine.name(), rep + 1));
                }
            }
        }
    }
    r.loadavg_end = loadavg();
    r.machine = report::machine_section("perf counters not used");
    Ok(r)
}

fn one_lab(
    opts: &Options,
    engine: Engine,
    rep: usize,
    load: f64,
    r: &mut Results,
) -> anyhow::Result<()> {
    let lab = MicroservicesLab::up(engine)?;
    if r.commands
        .iter()
        .all(|c| !c.starts_with(&format!("[{}]", engine.name())))
    {
        for c in &lab.commands {
            r.commands.push(format!("[{}] {c}", engine.name()));
        }
    }
    let ns = lab.client_ns()?;
    let url = lab.url()?;
    // Warm-up: connections, upstream keepalives, ARP, learning, flows.
    let warm = wrk_argv(&url, opts.connections[0], opts.threads, 2);
    run_wrk(&ns, &warm, 2).context("warm-up")?;
    let procs = lab.switch_pids();
    for &c in &opts.connections {
        let argv = wrk_argv(&url, c, opts.threads, opts.seconds);
        let counts = if engine.tc() {
            lab.engine_counts()
        } else {
            None
        };
        let a = Snapshot::take(&procs);
        let w = run_wrk(&ns, &argv, opts.seconds)?;
        let b = Snapshot::take(&procs);
        let offload = counts.and_then(|before| lab.offload_sample(engine.profile(), &before));
        let cpu = Usage::between(&a, &b);
        let s = Sample {
            engine,
            connections: c,
            rep,
            lab: lab.name().to_string(),
            wrk: w,
            cpu,
            load1_before: load,
            offload,
        };
        progress(&format!(
            "{} rep {} {c} connections: {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs, CPU {:.0} µs/req{}{}{}",
            engine.name(),
            rep + 1,
            s.wrk.rps,
            s.wrk.p50_us,
            s.wrk.p99_us,
            s.cpu_us_per_request(),
            s.switch_us_per_request()
                .map(|x| format!(" (switches {x:.1})"))
                .unwrap_or_default(),
            s.offload
                .as_ref()
                .map(|o| format!(
                    ", offloaded {}, {} flows refused by the profile",
                    hwprofile::pct(o.frames.kernel_share()),
                    o.dp.refused
                ))
                .unwrap_or_default(),
            if s.wrk.socket_errors + s.wrk.non_2xx > 0 {
                format!(
                    ", {} socket errors, {} non-2xx",
                    s.wrk.socket_errors, s.wrk.non_2xx
                )
            } else {
                String::new()
            }
        ));
        r.samples.push(s);
    }
    if engine.is_nicflow() {
        let nodes = lab.dp_flows();
        for f in &nodes {
            progress(&format!(
                "{} dump-dp-flows: {} engine:tc, {} engine:xdp, {} engine:userspace ({})",
                f.node,
                f.tc,
                f.xdp,
                f.userspace,
                f.reasons.join(", ")
            ));
        }
        r.dp_flows.push(DpSample { engine, rep, nodes });
    }
    lab.down()
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

fn median_of(
    r: &Results,
    e: Engine,
    c: usize,
    get: impl Fn(&Sample) -> Option<f64>,
) -> Option<f64> {
    let mut v: Vec<f64> = r
        .samples
        .iter()
        .filter(|s| s.engine == e && s.connections == c)
        .filter_map(&get)
        .filter(|x| x.is_finite())
        .collect();
    (!v.is_empty()).then(|| super::median(&mut v))
}

type Getter = fn(&Sample) -> Option<f64>;

const SPECS: [(&str, &str, &str, Getter); 4] = [
    (
        "rps",
        "Requests/s: front end + 3 backends (2 cross-node)",
        "requests/s",
        |s| Some(s.wrk.rps),
    ),
    ("p50", "Median request latency", "p50 latency (ms)", |s| {
        Some(s.wrk.p50_us / 1e3)
    }),
    (
        "p99",
        "99th percentile request latency",
        "p99 latency (ms)",
        |s| Some(s.wrk.p99_us / 1e3),
    ),
    (
        "cpu",
        "Machine CPU per request (wrk, nginx, switches, kernel)",
        "CPU µs per request",
        |s| Some(s.cpu_us_per_request()),
    ),
];

pub fn figures(r: &Results) -> Vec<Figure> {
    SPECS
        .iter()
        .map(|(id, title, y, get)| Figure {
            id: id.to_string(),
            title: title.to_string(),
            x_label: "wrk connections".into(),
            y_label: y.to_string(),
            log_x: true,
            series: r
                .options
                .engines
                .iter()
                .map(|&e| Series {
                    name: e.name().into(),
                    points: r
                        .options
                        .connections
                        .iter()
                        .map(|&c| (c as f64, median_of(r, e, c, get)))
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

/// The TC-based nicflow engines' offloaded share (both nodes, summed over
/// repetitions) and refused flows, per connection count.
fn offload_table(s: &mut String, r: &Results) {
    let o = &r.options;
    let mut rows = Vec::new();
    for &e in &o.engines {
        for &c in &o.connections {
            let ss: Vec<&OffloadSample> = r
                .samples
                .iter()
                .filter(|x| x.engine == e && x.connections == c)
                .filter_map(|x| x.offload.as_ref())
                .collect();
            let Some(off) = hwprofile::combine(&ss) else {
                continue;
            };
            let m = |g: Getter| median_of(r, e, c, g);
            rows.push(vec![
                e.name().to_string(),
                c.to_string(),
                report::cell(m(|s| Some(s.wrk.rps)), 0),
                hwprofile::pct(off.frames.kernel_share()),
                off.frames.total().to_string(),
                report::cell(m(|s| Some(s.cpu.busy_cores() / cpu::cores() * 100.0)), 0),
                report::cell(m(|s| Some(s.cpu_us_per_request())), 0),
                report::cell(m(Sample::switch_us_per_request), 1),
                format!("{} ({})", off.dp.flows, off.dp.kernel_flows),
                off.dp.profile_cell(e.profile().is_some()),
            ]);
        }
    }
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## Offload (TC-based nicflow engines)\n");
    s.push_str(&report::table(
        &[
            ("engine", false),
            ("conns", true),
            ("req/s", true),
            ("offloaded", true),
            ("frames", true),
            ("CPU busy %", true),
            ("CPU µs/req", true),
            ("switch µs/req", true),
            ("dp flows (kernel)", true),
            ("refused by profile: top reasons", false),
        ],
        &rows,
    ));
    let _ = writeln!(
        s,
        "\n{} Both nodes' daemons together; *dp flows (kernel)*: datapath flows of both \
         nodes after a wrk run (those in a kernel engine), largest seen in one repetition.",
        hwprofile::METHOD
    );
}

fn command_line(o: &Options) -> String {
    format!(
        "nicflow bench microservices --engines {} --connections {} --reps {} --seconds {} --threads {}{}",
        report::join(&o.engines.iter().map(|e| e.name()).collect::<Vec<_>>(), ","),
        report::join(&o.connections, ","),
        o.reps,
        o.seconds,
        o.threads,
        if o.quick { " --quick" } else { "" }
    )
}

pub fn markdown(r: &Results, figs: &[Figure]) -> String {
    let o = &r.options;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Microservices across two nodes: nicflow CNI pods vs the reference bridge plugin\n"
    );
    s.push_str(&r.machine);
    let _ = writeln!(
        s,
        "Load average (1/5/15 min) at the start: {}; at the end: {}. The machine is shared \
         with other builds; each sample records the 1-minute load before its lab was built.\n",
        r.loadavg_start, r.loadavg_end
    );
    let _ = writeln!(
        s,
        "## Method\n\n\
         Two nodes (network namespaces n1, n2) joined by a veth underlay (MTU {UNDERLAY_MTU}, \
         198.18.70.1/.2) and a VXLAN overlay (VNI {VNI}); five pods (namespaces) added by CNI ADD: \
         `cl` (wrk), `fe` (nginx front end), `b1` on n1, `b2`, `b3` on n2; host-local IPAM, \
         node N allocating 198.19.N.10-250 of the pod network {POD_NET}. One request of wrk to \
         `fe` is an SSI page with three includes fetched in parallel from `b1` (node-local) and \
         `b2`, `b3` (cross-node) over keepalive HTTP/1.1 upstreams; the backends serve a \
         {BODY_BYTES}-byte page. wrk ({}) in pod `cl` on n1, `-t min({}, C) -c C -d {}s \
         --latency --timeout 5s`, C = {}; after a 2 s warm-up per lab. {} repetition(s); a \
         fresh lab per engine and repetition, engines interleaved; every figure is the median \
         over repetitions. CPU is the machine's busy time (`/proc/stat`) over the wrk run \
         divided by the requests it completed: wrk, nginx, switches and kernel together.\n",
        r.wrk_version,
        o.threads,
        o.seconds,
        report::join(&o.connections, ", "),
        o.reps
    );
    let _ = writeln!(
        s,
        "Engines: `nicflow` — a nicflow daemon per node (defaults: `offload = \"auto\"`, \
         representors and underlay TC ports, established flows in the TC engine), pods from \
         the nicflow CNI plugin; `nicflow-nooffload` — the same with `offload = \"none\"` \
         (AF_XDP ports, every packet through the daemon's userspace datapath); `bridge-cni` — \
         the reference `bridge` plugin on a Linux bridge with a kernel `vxlan` device; `ovs` — \
         Open vSwitch's userspace datapath (netdev) with a `vxlan` port and the tunnel endpoint \
         on a `br-phy` bridge holding the underlay, pods wired by the bench as ovs-cni would \
         (veth, host-local IPAM, `add-port`; pods with `tx off`: finished checksums).\n"
    );
    let _ = writeln!(s, "## Results\n");
    for (f, dec) in figs.iter().zip([0usize, 2, 2, 0]) {
        s.push_str(&f.markdown(dec));
        s.push('\n');
    }
    let busy: Vec<f64> = r
        .samples
        .iter()
        .map(|x| x.cpu.busy_cores() / cpu::cores())
        .collect();
    if !busy.is_empty() && busy.iter().all(|b| *b >= 0.95) {
        let _ = writeln!(
            s,
            "Every wrk run had the machine at 95-100 % busy (this experiment plus whatever else \
             ran), so CPU per request above is close to (cores x seconds) / requests: it follows \
             the request rate and does not isolate what each engine costs; the switches' own \
             CPU per request in the details table does.\n"
        );
    }
    let _ = writeln!(s, "## Details (medians)\n");
    let mut rows = Vec::new();
    for &e in &o.engines {
        for &c in &o.connections {
            let n = r
                .samples
                .iter()
                .filter(|x| x.engine == e && x.connections == c)
                .count();
            if n == 0 {
                continue;
            }
            let m = |g: Getter| median_of(r, e, c, g);
            rows.push(vec![
                e.name().to_string(),
                c.to_string(),
                n.to_string(),
                report::cell(m(|s| Some(s.wrk.rps)), 0),
                report::cell(m(|s| Some(s.wrk.p50_us / 1e3)), 2),
                report::cell(m(|s| Some(s.wrk.p90_us / 1e3)), 2),
                report::cell(m(|s| Some(s.wrk.p99_us / 1e3)), 2),
                report::cell(m(|s| Some((s.wrk.socket_errors + s.wrk.non_2xx) as f64)), 0),
                report::cell(m(|s| Some(s.cpu.busy_cores() / cpu::cores() * 100.0)), 0),
                report::cell(m(|s| Some(s.cpu_us_per_request())), 0),
                report::cell(m(Sample::switch_us_per_request), 1),
                report::cell(m(|s| Some(s.load1_before)), 2),
            ]);
        }
    }
    s.push_str(&report::table(
        &[
            ("engine", false),
            ("conns", true),
            ("reps", true),
            ("req/s", true),
            ("p50 ms", true),
            ("p90 ms", true),
            ("p99 ms", true),
            ("errors", true),
            ("CPU busy %", true),
            ("CPU µs/req", true),
            ("switch µs/req", true),
            ("load1 before", true),
        ],
        &rows,
    ));
    offload_table(&mut s, r);
    if !r.dp_flows.is_empty() {
        let _ = writeln!(
            s,
            "\n## Datapath flows (`dump-dp-flows` right after the last wrk run of a lab)\n"
        );
        let mut rows = Vec::new();
        for d in &r.dp_flows {
            for n in &d.nodes {
                rows.push(vec![
                    d.engine.name().to_string(),
                    (d.rep + 1).to_string(),
                    n.node.clone(),
                    n.tc.to_string(),
                    n.xdp.to_string(),
                    n.userspace.to_string(),
                    if n.reasons.is_empty() {
                        "—".into()
                    } else {
                        n.reasons.join(", ")
                    },
                ]);
            }
        }
        s.push_str(&report::table(
            &[
                ("engine", false),
                ("rep", true),
                ("node", false),
                ("engine:tc", true),
                ("engine:xdp", true),
                ("engine:userspace", true),
                ("not offloaded because", false),
            ],
            &rows,
        ));
        for e in [Engine::Nicflow, Engine::NicflowNooffload] {
            if let Some(d) = r.dp_flows.iter().find(|d| d.engine == e) {
                let _ = writeln!(
                    s,
                    "\nSample, `{}`, node n1, the busiest flows:\n\n```text",
                    e.name()
                );
                if let Some(n) = d.nodes.first() {
                    for l in busiest(&n.lines, 8) {
                        let _ = writeln!(s, "{l}");
                    }
                }
                let _ = writeln!(s, "```");
            }
        }
    }
    let _ = writeln!(
        s,
        "\n## Document 000\n\n\
         Document 000 (section 5.2, table 5.1, figures 5.21-5.22) ran Google's Online Boutique \
         (ten services speaking HTTP and gRPC plus a Locust load generator: 10 processes x \
         10,000 users) on a two-node Kubernetes cluster, its \"second setup\": two servers with \
         a 96-core Xeon Gold 6442Y and a 100 Gbit/s ConnectX-7 each, directly connected; the \
         front end and load generator on node 1 with eight other pods, three services on node \
         2. The pods' secondary interfaces were SR-IOV VFs (offload, through Multus and the \
         SR-IOV device plugin) or a shared virtual Ethernet device (no offload). Its finding: \
         \"Both approaches sustain roughly the same number of requests per second\", CPU use \
         within a few percent, the load generator hitting its own limits first. Its requests/s \
         exist only as the plot of figure 5.22; the text gives no numbers to set beside these. \
         What differs here: one 2-vCPU VM shared with other builds for everything (wrk, four \
         nginx, two switches, the kernel), so the applications, not the network, bound the \
         rate, as in document 000 but with far less CPU; namespaces instead of a cluster; one \
         nginx SSI page fanning out to three nginx backends instead of the Boutique; wrk \
         instead of Locust; software switches on veths instead of an eswitch, and a VXLAN \
         overlay on the cross-node path (document 000's secondary network had none)."
    );
    report::write_list(&mut s, "Failures", &r.failures);
    let _ = writeln!(s, "\n## Commands\n\n```sh\n{}\n```\n", command_line(o));
    for c in &r.commands {
        let _ = writeln!(s, "- {c}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = "Running 3s test @ http://198.19.2.10/
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.08ms    1.51ms  16.19ms   88.88%
    Req/Sec    10.69k     3.61k   18.72k    73.33%
  Latency Distribution
     50%  481.00us
     75%    1.07ms
     90%    2.78ms
     99%    1.20s
  32015 requests in 3.02s, 7.51MB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 7
Requests/sec:  10600.88
Transfer/sec:      2.49MB
";

    #[test]
    fn wrk_output_parses() {
        let r = parse_wrk(WRK).unwrap();
        assert_eq!(r.requests, 32015);
        assert!((r.duration_s - 3.02).abs() < 1e-9);
        assert!((r.rps - 10600.88).abs() < 1e-9);
        assert!((r.p50_us - 481.0).abs() < 1e-9);
        assert!((r.p75_us - 1070.0).abs() < 1e-6);
        assert!((r.p90_us - 2780.0).abs() < 1e-6);
        assert!((r.p99_us - 1.2e6).abs() < 1e-3);
        assert_eq!(r.socket_errors, 5);
        assert_eq!(r.timeouts, 3);
        assert_eq!(r.non_2xx, 7);
        assert!(parse_wrk("unable to connect to 198.19.1.11:80 Connection refused").is_err());
        assert_eq!(parse_wrk_time("2.00m"), Some(120e6));
        assert_eq!(parse_wrk_time("12"), None);
    }

    #[test]
    fn option_parsing() {
        assert_eq!(
            parse_engines("nicflow, bridge-cni,nicflow").unwrap(),
            vec![Engine::Nicflow, Engine::BridgeCni]
        );
        assert!(parse_engines("ovs-dpdk").is_err());
        let p = parse_engines("nicflow,nicflow-bf2,nicflow-profile:cx7").unwrap();
        assert_eq!(
            p,
            vec![
                Engine::Nicflow,
                Engine::NicflowProfile(Profile::Bf2),
                Engine::NicflowProfile(Profile::Cx7)
            ]
        );
        assert_eq!(p[1].name(), "nicflow-bf2");
        assert!(p[1].is_nicflow() && p[1].tc() && !Engine::NicflowNooffload.tc());
        let t = daemon_config(1, p[2]);
        assert!(t.contains("offload = \"profile:cx7\""), "{t}");
        assert_eq!(
            t.replace("profile:cx7", "auto"),
            daemon_config(1, Engine::Nicflow)
        );
        assert!(Engine::ALL
            .iter()
            .all(|e| e.tag() != p[1].tag() && e.tag() != p[2].tag()));
        let j = serde_json::to_string(&p[1]).unwrap();
        assert_eq!(serde_json::from_str::<Engine>(&j).unwrap(), p[1]);
        assert!(parse_engines(" ,").is_err());
        assert_eq!(parse_connections("8,32,128,8").unwrap(), vec![8, 32, 128]);
        assert!(parse_connections("0").is_err());
        assert!(parse_connections("x").is_err());
        assert!(parse_connections("100000").is_err());
        let a = Args {
            engines: DEFAULT_ENGINES.into(),
            connections: DEFAULT_CONNECTIONS.into(),
            reps: 3,
            seconds: 10,
            threads: 2,
            run: crate::RunArgs {
                quick: true,
                ..Default::default()
            },
        };
        let o = options(&a).unwrap();
        assert_eq!(
            (o.reps, o.seconds, o.connections.clone()),
            (1, 3, vec![8, 32])
        );
        assert_eq!(o.engines.len(), 4);
        assert_eq!(
            wrk_argv("http://x/", 1, 2, 5).join(" "),
            "wrk -t 1 -c 1 -d 5s --timeout 5s --latency http://x/"
        );
    }

    #[test]
    fn configs() {
        let d = Path::new("/tmp/lab");
        let c = net_conf(Engine::Nicflow, 2, d);
        assert_eq!(c["type"], "nicflow");
        assert_eq!(c["bridge"], "br2");
        assert_eq!(c["socket"], "/tmp/lab/n2.sock");
        assert_eq!(c["ipam"]["ranges"][0][0]["rangeStart"], "198.19.2.10");
        assert_eq!(c["ipam"]["ranges"][0][0]["subnet"], POD_NET);
        let k = net_conf(Engine::BridgeCni, 1, d);
        assert_eq!(k["type"], "bridge");
        assert!(k.get("socket").is_none());
        let t = daemon_config(1, Engine::NicflowNooffload);
        assert!(t.contains("offload = \"none\""), "{t}");
        assert!(t.contains("remote_ip = \"198.18.70.2\""), "{t}");
        let v: toml::Value = toml::from_str(&daemon_config(2, Engine::Nicflow)).unwrap();
        assert_eq!(v["bridge"][0]["name"].as_str(), Some("br2"));
        assert_eq!(
            result_ip(r#"{"ips":[{"address":"198.19.1.11/16","gateway":"198.19.1.1"}]}"#).unwrap(),
            Ipv4Addr::new(198, 19, 1, 11)
        );
        assert_eq!(backend_body("b1").len(), BODY_BYTES);
        let fe = frontend_conf(d, &[("a", Ipv4Addr::new(198, 19, 1, 12))]);
        assert!(
            fe.contains("upstream be_a { server 198.19.1.12:80; keepalive 256; }"),
            "{fe}"
        );
        assert!(fe.contains("ssi on;"), "{fe}");
        assert!(frontend_page(&["a", "b"]).contains("<!--# include virtual=\"/b/\" -->"));
        let dp = [
            "in_port=a, packets:3, bytes:182, used:3.5s, engine:tc, actions:2",
            "in_port=b, packets:31917, bytes:2, used:0.0s, engine:userspace, not_offloaded:multiple-outputs, actions:1,3",
        ]
        .map(String::from);
        assert_eq!(busiest(&dp, 1), vec![dp[1].as_str()]);
        let mut f = DpFlows::default();
        count_dp_flows(&dp.join("\n"), &mut f);
        assert_eq!((f.tc, f.userspace), (1, 1));
        assert_eq!(f.reasons, vec!["multiple-outputs".to_string()]);
    }
}
