//! A reusable namespace lab for the measurement experiments.
//!
//! Every experiment (`nicflow bench streams`, `containers`, `ovs-l3`,
//! `table-scale`, ...) starts here: [`Testbed::up`] builds N client/server
//! host pairs around one switch of the engine under test, the experiment
//! runs its traffic inside the hosts' namespaces and reads CPU counters
//! around it ([`super::cpu`]), and dropping the [`Testbed`] removes every
//! namespace, veth and daemon it created. It generalises the two-host lab
//! of `bench forward` (`bench::forward`) to N pairs and to arbitrary rules,
//! and reuses its pieces: the engines ([`Engine`]), the host offload setting
//! ([`HostOffload`]), the private Open vSwitch ([`Ovs`]) and the lab
//! ([`nicflow::lab`]).
//!
//! # Layout
//!
//! ```text
//!  c1 (eth0) ──── p1 ┐                     ┌ p2 ──── (eth0) s1
//!  c2 (eth0) ──── p3 ┤  switch "sw"        ├ p4 ──── (eth0) s2
//!  ...               │  (nicflow / bridge  │ ...
//!  cN (eth0) ─ p(2N-1)┘   / OVS br0)       └ p(2N) ─ (eth0) sN
//! ```
//!
//! * Client `ci` (1-based) is namespace `nf-<lab>-ci`, interface `eth0`,
//!   198.18.1.i/16 and 2001:db8::1:i/64 (i in hex); server `si` is
//!   `nf-<lab>-si`, 198.18.2.i/16 and 2001:db8::2:i/64. All hosts share one
//!   L2 segment. `pairs = 1` is the two-host case of `bench forward`.
//! * The switch's ports are named `p1 .. p2N`: client i on `p(2i-1)`,
//!   server i on `p(2i)`, with OpenFlow port numbers equal to the digits
//!   (nicflow numbers ports in the order the lab adds them; OVS gets
//!   `ofport_request`). The *same names* are valid in rules for nicflow and
//!   OVS, so one rule text drives both.
//! * Rules ([`Rules`]): `Explicit` is `in_port=p(2i-1),actions=output:p(2i)`
//!   and back for every pair (no learning, as `bench forward`); `Normal` is
//!   `priority=0,actions=normal`; `Custom` is any list of `ovs-ofctl` flow
//!   lines, applied after the lab is up through [`Testbed::add_flows`] (so
//!   identically for nicflow and OVS). Custom lines may use placeholders,
//!   expanded by [`Testbed::expand`]: `{c1}`/`{s1}` (port name),
//!   `{c1.mac}`, `{c1.ip4}`, `{c1.ip6}`, `{c1.ofport}` and the same for
//!   servers. The Linux bridge has no rules: it is a learning bridge
//!   whatever the spec says, and [`Testbed::add_flows`] fails for it.
//!
//! # Names and cleanup
//!
//! Lab names are `<prefix><pid>x<seq><engine tag>` (at most 24 bytes):
//! `prefix` is the experiment's (1-6 lowercase letters, not starting with
//! `fwd`, which `bench forward` owns), `pid` this process, `seq` a counter
//! so one process can hold several testbeds. `up` first removes labs with
//! the same prefix whose pid is dead (a run killed with SIGKILL), and the
//! private OVS directories of dead runs. Drop stops OVS, then `lab::down`
//! stops the nicflow daemon and every process still running in the lab's
//! namespaces (iperf3 servers, sockperf, generators) and deletes the
//! namespaces and the state directory — including [`Testbed::scratch_dir`].
//!
//! # Example
//!
//! ```no_run
//! use nicflow_bench::testbed::{Rules, Testbed, TestbedSpec};
//! use nicflow_bench::forward::{Engine, HostOffload};
//! let spec = TestbedSpec {
//!     rules: Rules::Custom(vec![
//!         "priority=10,ip,in_port={c1},actions=mod_dl_dst:{s1.mac},output:{s1}".into(),
//!         "priority=10,in_port={s1},actions=output:{c1}".into(),
//!         "priority=5,arp,actions=normal".into(),
//!     ]),
//!     ..TestbedSpec::new(Engine::Ovs, 1, "ovsl")
//! };
//! let tb = Testbed::up(&spec)?;
//! let dst = tb.server(0).ip4.to_string(); // 198.18.2.1
//! let mut cmd = tb.client_cmd(0, &["ping", "-c", "1", &dst]); // runs inside c1
//! let _ = cmd.status();
//! tb.add_flows(&["priority=20,udp,actions=drop".into()])?;
//! drop(tb); // everything removed
//! # Ok::<(), anyhow::Error>(())
//! ```

use super::forward::ovs::{self, Ovs, OvsBridge};
use super::forward::{interrupted, Engine, HostOffload};
use super::lab::Lab;
use super::overlay::{rtnl_in, NetStep};
use anyhow::{bail, Context};
use nicflow::control::proto::Request;
use nicflow::lab::{self, sys, LabOptions, Topology};
use nicflow::os;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Most pairs a testbed holds (addresses use one byte for the index).
pub const MAX_PAIRS: usize = 250;

/// The bridge every engine's switch calls its bridge.
pub const BRIDGE: &str = "br0";

/// Which rules the switch runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rules {
    /// Pairwise forwarding by port, both directions, no learning.
    Explicit,
    /// `priority=0,actions=normal` (MAC learning); OVS's own default.
    Normal,
    /// `ovs-ofctl` flow lines (placeholders allowed, see the module doc),
    /// installed after the lab is up; nothing else is installed.
    Custom(Vec<String>),
}

/// What to build.
#[derive(Clone, Debug)]
pub struct TestbedSpec {
    pub engine: Engine,
    /// Client/server host pairs, 1..=[`MAX_PAIRS`].
    pub pairs: usize,
    /// Host-side veth offloads, the same for every engine.
    pub host_offload: HostOffload,
    pub rules: Rules,
    /// Lab name prefix of the experiment: 1-6 lowercase letters, not
    /// starting with `fwd`.
    pub prefix: String,
    /// OVS `userspace-tso-enable` (netdev-linux ports only). None: on
    /// exactly when host offloads are on, as `bench forward --ovs-tso auto`.
    pub ovs_tso: Option<bool>,
    /// The `nicflow` binary for the daemon. None: `NICFLOW_BIN`, else the
    /// running executable.
    pub nicflow_bin: Option<PathBuf>,
    /// The XDP engine's `offload_options` (map sizes, `counters`); only
    /// the `nicflow-xdp` engine reads them.
    pub offload_options: Vec<(String, String)>,
}

impl TestbedSpec {
    /// Defaults: host offloads at kernel defaults, explicit rules, OVS TSO
    /// auto, the running `nicflow` binary.
    pub fn new(engine: Engine, pairs: usize, prefix: &str) -> TestbedSpec {
        TestbedSpec {
            engine,
            pairs,
            host_offload: HostOffload::Default,
            rules: Rules::Explicit,
            prefix: prefix.to_string(),
            ovs_tso: None,
            nicflow_bin: None,
            offload_options: Vec::new(),
        }
    }
}

/// Client or server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// One lab host.
#[derive(Clone, Debug)]
pub struct Host {
    /// `c1`, `s1`, ...
    pub name: String,
    /// The network namespace (`ip netns exec <netns> ...`).
    pub netns: String,
    /// Its interface towards the switch (`eth0`).
    pub iface: String,
    pub ip4: Ipv4Addr,
    pub ip6: Ipv6Addr,
    /// MAC of `iface`, as the kernel assigned it (`aa:bb:..`).
    pub mac: String,
    /// The switch port it is attached to (`p1`, ...).
    pub port: String,
    /// OpenFlow port number of `port`.
    pub ofport: u32,
    /// The switch-side interface of the link (in the switch namespace).
    pub switch_iface: String,
}

/// A built lab. Dropping it tears everything down.
pub struct Testbed {
    spec: TestbedSpec,
    /// Names the lab, owns the xdp-redirect process and brings the switch
    /// lab down on drop.
    lab: Lab,
    lab_opts: LabOptions,
    clients: Vec<Host>,
    servers: Vec<Host>,
    switch_netns: String,
    switch_pid: Option<u32>,
    ovs: Option<Ovs>,
    /// Setup commands worth showing in a report.
    commands: Vec<String>,
    torn_down: bool,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn valid_prefix(p: &str) -> bool {
    (1..=6).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_lowercase()) && !p.starts_with("fwd")
}

/// Address of host `i` (1-based) of `role`.
pub fn host_ip4(role: Role, i: usize) -> Ipv4Addr {
    let net = match role {
        Role::Client => 1,
        Role::Server => 2,
    };
    Ipv4Addr::new(198, 18, net, i as u8)
}

pub fn host_ip6(role: Role, i: usize) -> Ipv6Addr {
    let net = match role {
        Role::Client => 1,
        Role::Server => 2,
    };
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, net, i as u16)
}

/// Port name and number of host `i` (1-based) of `role`.
pub fn host_port(role: Role, i: usize) -> (String, u32) {
    let n = match role {
        Role::Client => 2 * i - 1,
        Role::Server => 2 * i,
    };
    (format!("p{n}"), n as u32)
}

fn host_name(role: Role, i: usize) -> String {
    match role {
        Role::Client => format!("c{i}"),
        Role::Server => format!("s{i}"),
    }
}

/// The pairwise rules of [`Rules::Explicit`].
pub fn explicit_rules(pairs: usize) -> Vec<String> {
    let mut v = Vec::new();
    for i in 1..=pairs {
        let (c, _) = host_port(Role::Client, i);
        let (s, _) = host_port(Role::Server, i);
        v.push(format!("in_port={c},actions=output:{s}"));
        v.push(format!("in_port={s},actions=output:{c}"));
    }
    v
}

/// A TOML basic string (quotes, backslashes and control characters
/// escaped).
fn toml_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The lab topology: hosts c1..cN, s1..sN, and either a nicflow switch
/// `sw` (rules in its config) or a plain namespace `sw` holding the
/// switch-side ends for the bridge and OVS.
fn topology_text(spec: &TestbedSpec, lab: &str) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "name = \"{lab}\"");
    let roles = |i| [(Role::Client, i), (Role::Server, i)];
    for i in 1..=spec.pairs {
        for (role, i) in roles(i) {
            let _ = writeln!(
                t,
                "[[host]]\nname = \"{}\"\nsysctl = {{ \"net.ipv6.conf.all.accept_ra\" = 0 }}",
                host_name(role, i)
            );
        }
    }
    let nicflow = spec.engine.nicflow_port_type();
    if let Some(port_type) = nicflow {
        let flows: Vec<String> = match &spec.rules {
            Rules::Explicit => explicit_rules(spec.pairs),
            Rules::Normal => vec!["priority=0,actions=normal".into()],
            // Installed after up, when MACs are known.
            Rules::Custom(_) => Vec::new(),
        };
        let flows: Vec<String> = flows.iter().map(|f| toml_str(f)).collect();
        let mut switch_opts = spec
            .engine
            .nicflow_switch_toml(spec.host_offload == HostOffload::Off);
        if matches!(spec.engine, Engine::NicflowXdp | Engine::NicflowTc)
            && !spec.offload_options.is_empty()
        {
            let kv: Vec<String> = spec
                .offload_options
                .iter()
                .map(|(k, v)| format!("{k} = {}", toml_str(v)))
                .collect();
            let _ = writeln!(switch_opts, "offload_options = {{ {} }}", kv.join(", "));
        }
        let _ = writeln!(
            t,
            "[[switch]]\nname = \"sw\"\nport_type = \"{}\"\n{}[[switch.bridge]]\nname = \"{BRIDGE}\"\nflows = [{}]",
            port_type.as_str(),
            switch_opts,
            flows.join(", ")
        );
    } else {
        // Switch-side ends with IPv6 off, so the kernel sends nothing
        // from them (as a nicflow switch's ends).
        let mut sysctl = String::from("\"net.ipv6.conf.all.accept_ra\" = 0");
        for k in 1..=2 * spec.pairs {
            let _ = write!(sysctl, ", \"net.ipv6.conf.p{k}.disable_ipv6\" = 1");
        }
        let _ = writeln!(t, "[[host]]\nname = \"sw\"\nsysctl = {{ {sysctl} }}");
    }
    for i in 1..=spec.pairs {
        for (role, i) in roles(i) {
            let addrs = format!(
                "[\"{}/16\", \"{}/64\"]",
                host_ip4(role, i),
                host_ip6(role, i)
            );
            let (port, _) = host_port(role, i);
            let name = host_name(role, i);
            if nicflow.is_some() {
                let _ = writeln!(
                    t,
                    "[[link]]\na = \"{name}:eth0\"\nb = \"sw:{port}\"\naddresses = {addrs}\noffload = true"
                );
            } else {
                // XDP redirects into a veth arrive only if the peer runs
                // NAPI: GRO on the host ends for the xdp-redirect engine.
                let gro = if spec.engine == Engine::XdpRedirect {
                    "\ngro = true"
                } else {
                    ""
                };
                let _ = writeln!(
                    t,
                    "[[link]]\na = \"{name}:eth0\"\nb = \"sw:{port}\"\na_addresses = {addrs}\nb_addresses = []\noffload = true{gro}"
                );
            }
        }
    }
    t
}

/// The MAC of `iface` in `ns`, as `ip link` prints it (`02:00:...`).
pub fn read_mac(ns: &str, iface: &str) -> anyhow::Result<String> {
    let l = rtnl_in(ns, |rt| os::link::get(rt, iface))?;
    l.address
        .filter(|a| !a.is_empty())
        .map(|a| {
            a.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        })
        .with_context(|| format!("no MAC for {iface} in {ns}"))
}

/// Remove labs of `prefix` left by dead processes (SIGKILLed runs), and
/// private OVS directories of dead runs. Returns what was removed. (The
/// same as [`super::lab::reap_stale`], which [`Testbed::up`] calls.)
pub fn reap_stale(prefix: &str, lab_opts: &LabOptions) -> Vec<String> {
    super::lab::reap_stale(prefix, Some(lab_opts))
}

impl Testbed {
    /// Build the lab, start the switch, install the rules, and check that
    /// every port is attached. On error everything created is removed.
    pub fn up(spec: &TestbedSpec) -> anyhow::Result<Testbed> {
        if !valid_prefix(&spec.prefix) {
            bail!(
                "testbed prefix `{}`: 1-6 lowercase letters, not starting with `fwd`",
                spec.prefix
            );
        }
        if spec.pairs == 0 || spec.pairs > MAX_PAIRS {
            bail!("testbed pairs {}: 1..={MAX_PAIRS}", spec.pairs);
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("the testbed creates namespaces and veths: run as root");
        }
        if spec.engine.is_ovs() && !ovs::installed() {
            bail!("Open vSwitch is not installed (apt-get install openvswitch-switch)");
        }
        let bin = match (&spec.nicflow_bin, std::env::var_os("NICFLOW_BIN")) {
            (Some(b), _) => b.clone(),
            (None, Some(b)) => PathBuf::from(b),
            (None, None) => super::nicflow_bin()?,
        };
        let lab_opts = LabOptions::with_binary(bin);
        // Reaps stale labs of the prefix and names this one.
        let mut bench_lab = Lab::create(
            "the testbed",
            &spec.prefix,
            spec.engine.tag(),
            Some(&lab_opts),
        )?;
        let lab = bench_lab.name().to_string();
        let text = topology_text(spec, &lab);
        let topo = Topology::parse(&text).with_context(|| format!("testbed topology {lab}"))?;
        let switch_netns = topo.namespace_of("sw").context("switch namespace")?;
        tracing::info!(
            "testbed {lab}: {} pair(s) through {}",
            spec.pairs,
            spec.engine.name()
        );
        let report = lab::up(&topo, &lab_opts).with_context(|| format!("lab up {lab}"))?;
        // From here on, Drop cleans up.
        bench_lab.own_switch_lab(lab_opts.clone());
        let mut tb = Testbed {
            spec: spec.clone(),
            lab: bench_lab,
            lab_opts,
            clients: Vec::new(),
            servers: Vec::new(),
            switch_netns,
            switch_pid: None,
            ovs: None,
            commands: Vec::new(),
            torn_down: false,
        };
        let nic_ports = topo.switch_ports("sw");
        for i in 1..=spec.pairs {
            for role in [Role::Client, Role::Server] {
                let name = host_name(role, i);
                let netns = topo
                    .namespace_of(&name)
                    .with_context(|| format!("namespace of {name}"))?;
                let (port, ofport) = host_port(role, i);
                let switch_iface = if spec.engine.is_nicflow() {
                    nic_ports
                        .iter()
                        .find(|(_, p, _)| *p == port)
                        .map(|(_, _, iface)| iface.clone())
                        .with_context(|| format!("switch port {port}"))?
                } else {
                    port.clone()
                };
                let mac = read_mac(&netns, "eth0")?;
                let h = Host {
                    name,
                    netns,
                    iface: "eth0".into(),
                    ip4: host_ip4(role, i),
                    ip6: host_ip6(role, i),
                    mac,
                    port,
                    ofport,
                    switch_iface,
                };
                match role {
                    Role::Client => tb.clients.push(h),
                    Role::Server => tb.servers.push(h),
                }
            }
        }
        if spec.host_offload == HostOffload::Off {
            for h in tb.clients.iter().chain(&tb.servers) {
                // `ethtool -K eth0 tx off`.
                os::ethtool::set(Some(&h.netns), "eth0", os::ethtool::is_tx_checksum, false)
                    .with_context(|| format!("host offloads off in {}", h.name))?;
            }
        }
        if interrupted() {
            bail!("interrupted");
        }
        tb.start_switch(&report)?;
        if let Rules::Custom(lines) = &spec.rules {
            let lines = lines.clone();
            if !spec.engine.is_nicflow() && !spec.engine.is_ovs() {
                tracing::info!(
                    "testbed {lab}: {} has no rules; custom rules ignored",
                    spec.engine.name()
                );
            } else {
                tb.add_flows(&lines)?;
            }
        }
        Ok(tb)
    }

    fn start_switch(&mut self, report: &lab::UpReport) -> anyhow::Result<()> {
        let engine = self.spec.engine;
        let ports: Vec<String> = (1..=2 * self.spec.pairs).map(|k| format!("p{k}")).collect();
        if engine.is_nicflow() {
            if let Some((_, port, why)) = report.unattached.first() {
                bail!("nicflow port {port} not attached: {why}");
            }
            self.switch_pid = report.state.daemons.first().and_then(|d| d.pid);
            self.commands.push(format!(
                "nicflow daemon in {} ({} ports, port type {})",
                self.switch_netns,
                ports.len(),
                engine
                    .nicflow_port_type()
                    .map(|p| p.as_str())
                    .unwrap_or("?")
            ));
        } else if engine.is_ovs() {
            let tso = self
                .spec
                .ovs_tso
                .unwrap_or(self.spec.host_offload == HostOffload::Default);
            let br = OvsBridge {
                userspace_tso: engine == Engine::Ovs && tso,
                port_type: (engine == Engine::OvsAfxdp).then_some("afxdp"),
                ports,
                // Rules below, through add-flows (one command for all).
                flows: None,
            };
            let o = Ovs::start(&self.switch_netns, self.lab.name(), &br)
                .map_err(anyhow::Error::msg)
                .context("starting Open vSwitch")?;
            self.switch_pid = o.vswitchd_pid();
            self.commands.extend(o.commands.iter().cloned());
            self.ovs = Some(o);
            let initial = match &self.spec.rules {
                Rules::Explicit => Some(explicit_rules(self.spec.pairs)),
                Rules::Custom(_) => Some(Vec::new()),
                Rules::Normal => None,
            };
            if let Some(rules) = initial {
                let mgmt = self.ovs_mgmt()?;
                let o = self.ovs.as_mut().context("ovs")?;
                o.run(false, &["ovs-ofctl", "del-flows", &mgmt])
                    .map_err(anyhow::Error::msg)?;
                if !rules.is_empty() {
                    self.add_flows(&rules)?;
                }
            }
        } else if engine == Engine::LinuxBridge {
            // The kernel bridge: learning, no STP, every port enslaved.
            let ns = self.switch_netns.clone();
            let mut steps = vec![NetStep::Bridge(BRIDGE.into())];
            steps.extend(ports.iter().map(|p| NetStep::master(p, BRIDGE)));
            steps.push(NetStep::Up(BRIDGE.into()));
            let commands = &mut self.commands;
            rtnl_in(&ns, |rt| {
                for st in &steps {
                    st.apply(rt)?;
                    commands.push(format!("ip -n {ns} {}", st.words().join(" ")));
                }
                Ok(())
            })?;
        } else if engine == Engine::XdpRedirect {
            let pairs: Vec<(String, String)> = (1..=self.spec.pairs)
                .map(|i| (host_port(Role::Client, i).0, host_port(Role::Server, i).0))
                .collect();
            let child = super::xdp_baseline::start(&self.switch_netns, &pairs)?;
            self.switch_pid = Some(child.id());
            self.commands.push(format!(
                "nicflow bench xdp-redirect {} (in {}; bpf/xdp_redirect_min.c attached natively)",
                pairs
                    .iter()
                    .map(|(a, b)| format!("{a}={b}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                self.switch_netns
            ));
            self.lab.adopt("xdp-redirect", child);
        } else {
            // A new engine must say here how its switch is built, rather
            // than silently being measured as something else.
            bail!(
                "the testbed does not know how to start engine {}",
                engine.name()
            );
        }
        Ok(())
    }

    /// `ovs-appctl ARGS` against this testbed's private ovs-vswitchd
    /// (`dpctl/dump-conntrack`, ...); an error for other engines.
    pub fn ovs_appctl(&mut self, args: &[&str]) -> anyhow::Result<String> {
        let o = self.ovs.as_mut().context("no OVS in this testbed")?;
        let target = format!("{}/vswitchd.ctl", o.dir.display());
        let mut argv = vec!["ovs-appctl", "-t", &target];
        argv.extend_from_slice(args);
        o.run(false, &argv).map_err(|e| anyhow::anyhow!(e))
    }

    fn ovs_mgmt(&self) -> anyhow::Result<String> {
        let o = self.ovs.as_ref().context("no OVS in this testbed")?;
        Ok(format!("unix:{}/{BRIDGE}.mgmt", o.dir.display()))
    }

    /// Replace the placeholders `{c1}`, `{s1}` (port names), `{c1.mac}`,
    /// `{c1.ip4}`, `{c1.ip6}`, `{c1.ofport}` (and `s`) in a rule line.
    pub fn expand(&self, line: &str) -> String {
        let mut out = String::with_capacity(line.len());
        let mut rest = line;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else {
                out.push_str(&rest[open..]);
                return out;
            };
            let key = &after[..close];
            match self.placeholder(key) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push('{');
                    out.push_str(key);
                    out.push('}');
                }
            }
            rest = &after[close + 1..];
        }
        out.push_str(rest);
        out
    }

    fn placeholder(&self, key: &str) -> Option<String> {
        let (host, field) = key.split_once('.').unwrap_or((key, ""));
        let (list, num) = match host.as_bytes().first()? {
            b'c' => (&self.clients, &host[1..]),
            b's' => (&self.servers, &host[1..]),
            _ => return None,
        };
        let i: usize = num.parse().ok()?;
        let h = list.get(i.checked_sub(1)?)?;
        Some(match field {
            "" => h.port.clone(),
            "mac" => h.mac.clone(),
            "ip4" => h.ip4.to_string(),
            "ip6" => h.ip6.to_string(),
            "ofport" => h.ofport.to_string(),
            _ => return None,
        })
    }

    /// Add rules at run time (placeholders expanded): nicflow through the
    /// lab's control socket (the `nicflow add-flows` request, all or
    /// nothing), OVS with `ovs-ofctl add-flows` from a file. Fails for the
    /// Linux bridge, which has no rules.
    pub fn add_flows(&self, lines: &[String]) -> anyhow::Result<()> {
        self.load_lines(lines, "flows")
    }

    /// Add groups at run time, one `ovs-ofctl add-group` line each
    /// (placeholders expanded): nicflow through the `add-groups` request
    /// (all or nothing), OVS with `ovs-ofctl -O OpenFlow13 add-groups`.
    /// Add groups before the rules that name them. Fails for the Linux
    /// bridge.
    pub fn add_groups(&self, lines: &[String]) -> anyhow::Result<()> {
        self.load_lines(lines, "groups")
    }

    /// `add-flows` / `add-groups` (`what`: "flows" or "groups") on
    /// whichever switch the lab runs.
    fn load_lines(&self, lines: &[String], what: &str) -> anyhow::Result<()> {
        let text: Vec<String> = lines.iter().map(|l| self.expand(l)).collect();
        let text = text.join("\n");
        let verb = format!("add-{what}");
        if self.spec.engine.is_nicflow() {
            let sock = lab::switch_socket(self.lab.name(), "sw", &self.lab_opts);
            let bridge = BRIDGE.to_string();
            let req = if what == "groups" {
                Request::AddGroups { bridge, text }
            } else {
                Request::AddFlows { bridge, text }
            };
            let r = nicflow::control::daemon::request(&sock, &req)
                .with_context(|| format!("nicflow {verb}"))?;
            if !r.ok {
                bail!(
                    "nicflow {verb}: {}",
                    r.error.unwrap_or_else(|| "failed".into())
                );
            }
            Ok(())
        } else if let Some(o) = &self.ovs {
            let file = o
                .dir
                .join(format!("{what}-{}.txt", SEQ.fetch_add(1, Ordering::SeqCst)));
            std::fs::write(&file, text + "\n")
                .with_context(|| format!("writing {}", file.display()))?;
            let mgmt = self.ovs_mgmt()?;
            let f = file.display().to_string();
            // Groups need OpenFlow 1.1+ on the wire.
            let mut args = vec!["ovs-ofctl"];
            if what == "groups" {
                args.extend(["-O", "OpenFlow13"]);
            }
            args.extend([verb.as_str(), &mgmt, &f]);
            let mut c = sys::in_ns(None, &args);
            sys::run(&mut c).with_context(|| format!("ovs-ofctl {verb}"))?;
            let _ = std::fs::remove_file(&file);
            Ok(())
        } else {
            bail!("{} has no {what} to add", self.spec.engine.name())
        }
    }

    /// Delete every rule (nicflow `del-flows`, `ovs-ofctl del-flows`).
    pub fn del_flows(&self) -> anyhow::Result<()> {
        if self.spec.engine.is_nicflow() {
            let sock = lab::switch_socket(self.lab.name(), "sw", &self.lab_opts);
            let r = nicflow::control::daemon::request(
                &sock,
                &Request::DelFlows {
                    bridge: BRIDGE.into(),
                    filter: None,
                },
            )?;
            if !r.ok {
                bail!("nicflow del-flows: {}", r.error.unwrap_or_default());
            }
            Ok(())
        } else if self.ovs.is_some() {
            let mgmt = self.ovs_mgmt()?;
            sys::run(&mut sys::in_ns(None, &["ovs-ofctl", "del-flows", &mgmt]))?;
            Ok(())
        } else {
            bail!("{} has no rules", self.spec.engine.name())
        }
    }

    pub fn spec(&self) -> &TestbedSpec {
        &self.spec
    }
    /// The `nicflow` binary this testbed's daemons run (for `gen`/`sink`).
    pub fn nicflow_bin(&self) -> &Path {
        &self.lab_opts.nicflow_bin
    }
    pub fn engine(&self) -> Engine {
        self.spec.engine
    }
    pub fn pairs(&self) -> usize {
        self.spec.pairs
    }
    /// The lab's name (prefix of its namespaces `nf-<lab>-...`).
    pub fn lab_name(&self) -> &str {
        self.lab.name()
    }
    /// Client `i`, 0-based (`c1` is `client(0)`).
    pub fn client(&self, i: usize) -> &Host {
        &self.clients[i]
    }
    /// Server `i`, 0-based (`s1` is `server(0)`).
    pub fn server(&self, i: usize) -> &Host {
        &self.servers[i]
    }
    pub fn clients(&self) -> &[Host] {
        &self.clients
    }
    pub fn servers(&self) -> &[Host] {
        &self.servers
    }
    /// The namespace of the switch's ports (and of the nicflow / OVS
    /// daemons).
    pub fn switch_netns(&self) -> &str {
        &self.switch_netns
    }
    /// The switch process (nicflow daemon, ovs-vswitchd); None for the
    /// kernel bridge.
    pub fn switch_pid(&self) -> Option<u32> {
        self.switch_pid
    }
    /// Setup commands (OVS, bridge) for reports.
    pub fn commands(&self) -> &[String] {
        &self.commands
    }
    /// The nicflow daemon's control socket (`nicflow --socket ...`).
    pub fn nicflow_socket(&self) -> Option<PathBuf> {
        self.spec
            .engine
            .is_nicflow()
            .then(|| lab::switch_socket(self.lab.name(), "sw", &self.lab_opts))
    }
    /// A directory for the experiment's temporary files, removed with the
    /// lab.
    pub fn scratch_dir(&self) -> anyhow::Result<PathBuf> {
        let d = self.lab_opts.lab_dir(self.lab.name()).join("scratch");
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    }
    /// `argv` inside client `i`'s namespace (0-based).
    pub fn client_cmd<S: AsRef<std::ffi::OsStr>>(&self, i: usize, argv: &[S]) -> Command {
        sys::in_ns(Some(&self.clients[i].netns), argv)
    }
    /// `argv` inside server `i`'s namespace (0-based).
    pub fn server_cmd<S: AsRef<std::ffi::OsStr>>(&self, i: usize, argv: &[S]) -> Command {
        sys::in_ns(Some(&self.servers[i].netns), argv)
    }
    /// Whether client `i` reaches server `i` (3 IPv4 pings, 1 s timeout).
    pub fn ping(&self, i: usize) -> bool {
        let dst = self.servers[i].ip4.to_string();
        sys::run(&mut self.client_cmd(
            i,
            &["ping", "-n", "-q", "-c", "3", "-i", "0.1", "-W", "1", &dst],
        ))
        .is_ok()
    }
    /// Engine counters after a run (nicflow `stats`, OVS port and PMD
    /// stats), for reports.
    pub fn diagnostics(&self) -> serde_json::Value {
        if let Some(sock) = self.nicflow_socket() {
            match nicflow::control::daemon::request(&sock, &Request::Stats) {
                Ok(r) => serde_json::json!({ "stats": r.data, "text": r.text }),
                Err(e) => serde_json::json!({ "error": format!("{e:#}") }),
            }
        } else if let Some(o) = &self.ovs {
            o.diagnostics()
        } else {
            serde_json::Value::Null
        }
    }

    /// Tear down now and report failures (Drop does the same, logging).
    pub fn down(mut self) -> anyhow::Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> anyhow::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut errs = Vec::new();
        if let Some(mut o) = self.ovs.take() {
            if let Err(e) = o.stop() {
                errs.push(e);
            }
        }
        // SIGTERM to xdp-redirect (it detaches its program and exits),
        // then the switch lab down.
        if let Err(e) = self.lab.teardown() {
            errs.push(format!("{e:#}"));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            bail!(
                "tearing down testbed {}: {}",
                self.lab.name(),
                errs.join("; ")
            )
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!("{e:#}");
        }
    }
}

/// Parse an `--engines` list (`nicflow` means nicflow-tc, the defaults). Any
/// engine [`Engine::parse`] knows is accepted, so engines added there show
/// up in every experiment without changing it.
pub fn parse_engines(list: &str) -> anyhow::Result<Vec<Engine>> {
    parse_engine_list(list, "", |e| {
        if e == "nicflow" {
            Some(Engine::NicflowTc)
        } else {
            Engine::parse(e)
        }
    })
}

/// Any experiment's `--engines` list: comma-separated names read by
/// `parse`, each kept once in the order given; an unknown name is an error
/// naming it (and `known`, when not empty), an empty list too.
pub fn parse_engine_list<T: PartialEq>(
    list: &str,
    known: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> anyhow::Result<Vec<T>> {
    let mut v = Vec::new();
    for e in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(e) = parse(e) else {
            if known.is_empty() {
                bail!("unknown engine `{e}`");
            }
            bail!("unknown engine `{e}` ({known})");
        };
        if !v.contains(&e) {
            v.push(e);
        }
    }
    if v.is_empty() {
        bail!("no engines");
    }
    Ok(v)
}

/// Parse `default`/`on` or `off`.
pub fn parse_host_offload(s: &str) -> anyhow::Result<HostOffload> {
    match s {
        "default" | "on" => Ok(HostOffload::Default),
        "off" => Ok(HostOffload::Off),
        h => bail!("--host-offload {h}: default or off"),
    }
}

/// Parse a comma-separated list of positive integers (`1,4,12`).
pub fn parse_counts(s: &str) -> anyhow::Result<Vec<usize>> {
    let v: Vec<usize> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<usize>()
                .with_context(|| format!("`{x}` is not a count"))
        })
        .collect::<anyhow::Result<_>>()?;
    if v.is_empty() || v.contains(&0) {
        bail!("`{s}`: give positive counts");
    }
    Ok(v)
}

// ---------------------------------------------------------------------------
// iperf3 between a pair
// ---------------------------------------------------------------------------

/// A persistent `iperf3 -s` in a server's namespace (killed on drop). It
/// serves one test at a time, test after test, so its CPU can be read from
/// `/proc/<pid>/stat` around each.
pub struct IperfServer {
    child: std::process::Child,
    pub pid: u32,
    pub port: u16,
}

impl Drop for IperfServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running iperf3 client.
pub struct IperfClient {
    child: std::process::Child,
    pub pid: u32,
    pub command: String,
    out: PathBuf,
}

/// What one iperf3 client run gave.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct IperfResult {
    pub error: Option<String>,
    pub command: String,
    /// Bytes the receiver got, and its rate.
    pub bytes: u64,
    pub gbps: f64,
    pub receiver_s: f64,
    pub retransmits: Option<u64>,
    /// The client process's own CPU (wait4 rusage).
    pub user_s: f64,
    pub system_s: f64,
}

impl Testbed {
    /// Start `iperf3 -s -p port` in server `pair` (0-based) and wait until
    /// it listens.
    pub fn start_iperf_server(&self, pair: usize, port: u16) -> anyhow::Result<IperfServer> {
        let p = port.to_string();
        let mut child = self
            .server_cmd(pair, &["iperf3", "-s", "-p", &p])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting iperf3 -s")?;
        let ns = &self.servers[pair].netns;
        let filter = format!("sport = :{port}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let up = sys::run(&mut sys::in_ns(Some(ns), &["ss", "-Hltn", &filter]))
                .map(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
                .unwrap_or(false);
            if up {
                break;
            }
            if std::time::Instant::now() >= deadline || matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("iperf3 server in {ns} did not start listening");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(IperfServer {
            pid: child.id(),
            child,
            port,
        })
    }

    /// Start an iperf3 TCP client in client `pair` towards server `pair`
    /// (`-P streams`, `-t seconds`, JSON into `dir`).
    pub fn spawn_iperf_client(
        &self,
        pair: usize,
        port: u16,
        seconds: u64,
        streams: usize,
        dir: &std::path::Path,
    ) -> anyhow::Result<IperfClient> {
        let argv: Vec<String> = vec![
            "iperf3".into(),
            "-c".into(),
            self.servers[pair].ip4.to_string(),
            "-p".into(),
            port.to_string(),
            "-t".into(),
            seconds.to_string(),
            "-P".into(),
            streams.to_string(),
            "-J".into(),
            "--connect-timeout".into(),
            "3000".into(),
        ];
        let out = dir.join(format!("iperf-{pair}-{port}-{streams}.json"));
        IperfClient::spawn(&self.clients[pair].netns, &argv, out)
    }
}

impl IperfClient {
    /// Start `argv` (an iperf3 client with `-J`) in namespace `netns`, its
    /// JSON report into `out` (read and removed by [`Self::finish`]).
    pub fn spawn(netns: &str, argv: &[String], out: PathBuf) -> anyhow::Result<IperfClient> {
        let f = std::fs::File::create(&out).with_context(|| format!("{}", out.display()))?;
        let command = format!("ip netns exec {netns} {}", argv.join(" "));
        let child = sys::in_ns(Some(netns), argv)
            .stdin(std::process::Stdio::null())
            .stdout(f)
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting `{command}`"))?;
        Ok(IperfClient {
            pid: child.id(),
            child,
            command,
            out,
        })
    }

    /// Wait (at most until `deadline`) and read the result.
    pub fn finish(self, deadline: std::time::Instant) -> IperfResult {
        let (by_itself, _ok, user_s, system_s) = super::cpu::wait_rusage(self.child, deadline);
        let mut r = IperfResult {
            command: self.command,
            user_s,
            system_s,
            ..Default::default()
        };
        let json: serde_json::Value = std::fs::read_to_string(&self.out)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(serde_json::Value::Null);
        let _ = std::fs::remove_file(&self.out);
        if !by_itself {
            r.error = Some(if interrupted() {
                "interrupted".into()
            } else {
                "iperf3 client did not finish in time".into()
            });
            return r;
        }
        if let Some(e) = json["error"].as_str() {
            r.error = Some(format!("iperf3: {e}"));
            return r;
        }
        let recv = &json["end"]["sum_received"];
        if recv.is_null() {
            r.error = Some("iperf3 gave no result".into());
            return r;
        }
        r.bytes = recv["bytes"].as_u64().unwrap_or(0);
        r.gbps = recv["bits_per_second"].as_f64().unwrap_or(0.0) / 1e9;
        r.receiver_s = recv["seconds"].as_f64().unwrap_or(0.0);
        r.retransmits = json["end"]["sum_sent"]["retransmits"].as_u64();
        if r.bytes == 0 {
            r.error = Some("nothing arrived".into());
        }
        r
    }
}

/// rx packets of `iface` in `ns` (`ip -j -s link`), 0 if unreadable.
pub fn rx_packets(ns: &str, iface: &str) -> u64 {
    super::forward::measure::IfaceCounters::read(ns, iface)
        .map(|c| c.rx_packets)
        .unwrap_or(0)
}

/// Frames pair `i`'s veths dropped for want of ring space: the
/// `*xdp_xmit_errors` counters of `ethtool -S` (XDP redirects into a veth
/// whose peer's 256-slot ring is full, `veth_xdp_xmit`) plus `tx_dropped`
/// (a veth transmitting into a peer that runs XDP puts the skb in that
/// same ring and drops it when full), summed over the two switch-side
/// ports and the two hosts' `eth0`. TCP sees these drops as losses.
pub fn veth_ring_drops(tb: &Testbed, i: usize) -> u64 {
    let sw = tb.switch_netns().to_string();
    let (c, s) = (tb.client(i), tb.server(i));
    [
        (sw.clone(), host_port(Role::Client, i + 1).0),
        (sw, host_port(Role::Server, i + 1).0),
        (c.netns.clone(), c.iface.clone()),
        (s.netns.clone(), s.iface.clone()),
    ]
    .iter()
    .map(|(ns, dev)| {
        let xmit_errors = os::ethtool::stats(Some(ns), dev)
            .map(|s| sum_xdp_xmit_errors(&s))
            .unwrap_or(0);
        let tx_dropped = rtnl_in(ns, |rt| os::link::get(rt, dev))
            .ok()
            .and_then(|l| l.stats)
            .map_or(0, |st| st.tx_dropped);
        xmit_errors + tx_dropped
    })
    .sum()
}

/// Sum of the `...xdp_xmit_errors` counters of a driver's statistics.
fn sum_xdp_xmit_errors(stats: &[(String, u64)]) -> u64 {
    stats
        .iter()
        .filter(|(k, _)| k.ends_with("xdp_xmit_errors"))
        .map(|(_, v)| v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdp_xmit_error_lines() {
        let t: Vec<(String, u64)> = [
            ("peer_ifindex", 737),
            ("rx_queue_0_xdp_tx_errors", 4),
            ("tx_queue_0_xdp_xmit", 10),
            ("tx_queue_0_xdp_xmit_errors", 7),
            ("tx_queue_1_xdp_xmit_errors", 2),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec();
        assert_eq!(sum_xdp_xmit_errors(&t), 9);
    }

    #[test]
    fn names_addresses_ports() {
        assert_eq!(host_ip4(Role::Client, 3), Ipv4Addr::new(198, 18, 1, 3));
        assert_eq!(host_ip4(Role::Server, 20), Ipv4Addr::new(198, 18, 2, 20));
        assert_eq!(host_ip6(Role::Server, 10).to_string(), "2001:db8::2:a");
        assert_eq!(host_port(Role::Client, 1), ("p1".into(), 1));
        assert_eq!(host_port(Role::Server, 2), ("p4".into(), 4));
        assert_eq!(
            explicit_rules(1),
            vec![
                "in_port=p1,actions=output:p2",
                "in_port=p2,actions=output:p1"
            ]
        );
        assert!(valid_prefix("str"));
        assert!(!valid_prefix("fwd"));
        assert!(!valid_prefix("a1"));
        assert!(!valid_prefix("toolong"));
    }

    #[test]
    fn topology_parses_for_every_engine() {
        for engine in [
            Engine::NicflowAfpacket,
            Engine::NicflowAfxdp,
            Engine::LinuxBridge,
            Engine::Ovs,
        ] {
            for rules in [
                Rules::Explicit,
                Rules::Normal,
                Rules::Custom(vec!["actions=drop".into()]),
            ] {
                let spec = TestbedSpec {
                    rules,
                    ..TestbedSpec::new(engine, 20, "tst")
                };
                let lab = format!("tst{}x99{}", u32::MAX, engine.tag());
                assert!(lab.len() <= 24, "{lab}");
                let t = topology_text(&spec, &lab);
                let topo = Topology::parse(&t).unwrap_or_else(|e| panic!("{engine:?}: {e}\n{t}"));
                assert_eq!(topo.hosts.len(), 40 + usize::from(!engine.is_nicflow()));
            }
        }
    }
    /// Builds real labs: root, Open vSwitch and a release `nicflow` in
    /// `NICFLOW_BIN`. `cargo test -p nicflow --lib -- --ignored testbed_custom`.
    #[test]
    #[ignore]
    fn testbed_custom_rules_on_nicflow_and_ovs() {
        for engine in [Engine::NicflowAfpacket, Engine::Ovs] {
            let spec = TestbedSpec {
                rules: Rules::Custom(vec![
                    "priority=10,in_port={c1},actions=output:{s1}".into(),
                    "priority=10,in_port={s1},actions=output:{c1}".into(),
                ]),
                ..TestbedSpec::new(engine, 2, "tbt")
            };
            let tb = Testbed::up(&spec).unwrap();
            assert!(tb.ping(0), "{engine:?}: pair 1 forwarded");
            assert!(!tb.ping(1), "{engine:?}: pair 2 has no rule");
            let line = format!(
                "priority=20,ip,in_port={{c2}},nw_dst={},actions=mod_dl_dst:{{s2.mac}},output:{{s2}}",
                tb.server(1).ip4
            );
            assert!(tb.expand(&line).contains(&tb.server(1).mac));
            tb.add_flows(&[
                "priority=10,in_port={c2},actions=output:{s2}".into(),
                "priority=10,in_port={s2},actions=output:{c2}".into(),
            ])
            .unwrap();
            assert!(tb.ping(1), "{engine:?}: pair 2 after add_flows");
            let ns = tb.client(0).netns.clone();
            tb.down().unwrap();
            assert!(!sys::namespace_exists(&ns));
        }
    }
}
