//! `nicflow vswitchd` as a drop-in ovs-vswitchd, against the real
//! ovsdb-server and ovs-vsctl (Open vSwitch 3.1).
//!
//! The same `ovs-vsctl` script runs once against the real `ovs-vswitchd`
//! (userspace datapath: this kernel has no OVS module) and once against
//! `nicflow vswitchd`, each with a fresh database; `ovsdb-client dump` is
//! compared after every step, ignoring uuids and the columns listed in
//! [`IGNORED`] (each with its reason). Then traffic through ports added with
//! ovs-vsctl, `ovs-ofctl` over the bridge's `.mgmt` socket, kill -9 and
//! restart of nicflow, and an ovsdb-server restart.
//!
//! Everything runs inside a network namespace the test creates (named
//! `nfvsd<pid>...`), with its own OVS_RUNDIR under /tmp; the guard kills
//! every process the test started and removes the namespaces and the
//! directory, also when the test fails. Skipped unless root with the OVS
//! binaries installed.

mod common;
use common::{is_root, nicflow_bin, skipped};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Columns whose values legitimately differ between ovs-vswitchd and
/// nicflow: (table, column, reason). `*` is every table.
const IGNORED: &[(&str, &str, &str)] = &[
    ("*", "_uuid", "row ids differ per database"),
    ("*", "_version", "row versions differ per database"),
    (
        "Open_vSwitch",
        "iface_types",
        "each switch lists the types it opens",
    ),
    (
        "Open_vSwitch",
        "datapath_types",
        "each switch lists its datapaths",
    ),
    (
        "Open_vSwitch",
        "dpdk_version",
        "OVS names its DPDK build (\"none\"); nicflow has no DPDK",
    ),
    (
        "Bridge",
        "datapath_version",
        "OVS names its built-in datapath; nicflow writes none",
    ),
    (
        "Bridge",
        "status",
        "OVS's STP/RSTP status; nicflow has no STP",
    ),
    (
        "Bridge",
        "rstp_status",
        "OVS's RSTP status; nicflow has no RSTP",
    ),
    (
        "Interface",
        "statistics",
        "counters move with traffic and timing",
    ),
    (
        "Interface",
        "status",
        "driver names and tunnel egress details OVS reads via ethtool; not written by nicflow",
    ),
    (
        "Interface",
        "duplex",
        "ethtool data; not written by nicflow",
    ),
    (
        "Interface",
        "link_speed",
        "ethtool data; not written by nicflow",
    ),
    (
        "Interface",
        "link_resets",
        "OVS's carrier change counter; not written by nicflow",
    ),
    (
        "Interface",
        "lacp_current",
        "bond/LACP state; nicflow has no bonds",
    ),
    (
        "Controller",
        "is_connected",
        "connection status; not written by nicflow yet",
    ),
    (
        "Controller",
        "role",
        "connection status; not written by nicflow yet",
    ),
    (
        "Controller",
        "status",
        "connection status; not written by nicflow yet",
    ),
    ("Port", "status", "bond status; nicflow has no bonds"),
    (
        "Port",
        "statistics",
        "not written by either for a plain port",
    ),
];

/// Columns compared by presence or class only, with the reason.
/// - `Bridge.datapath_id`: OVS derives it from the local port's random MAC,
///   nicflow from the bridge name: both must write one.
/// - `Interface.ofport`: numbers are assigned differently (OVS gives the
///   local port 65534, nicflow the next number): both must assign one, or
///   both write -1.
/// - `Interface.ifindex`/`mac_in_use` of internal ports: a fresh device in
///   each run; of tunnel and patch ports, `mac_in_use` is left out (OVS
///   invents an Ethernet address for a vport; nicflow's has none).
/// - `Interface.admin_state`/`link_state` of internal ports: nicflow brings
///   its internal port (a tap it serves) up; OVS leaves it down.
fn normalize(table: &str, row: &mut BTreeMap<String, Value>) {
    let present = |v: &Value| -> Value {
        let empty = v == &serde_json::json!(["set", []]) || v == &serde_json::json!("");
        Value::String(if empty { "(none)" } else { "(some)" }.into())
    };
    if table == "Bridge" {
        if let Some(v) = row.get_mut("datapath_id") {
            *v = present(v);
        }
    }
    if table == "Interface" {
        if let Some(v) = row.get_mut("ofport") {
            *v = match v.as_i64() {
                Some(-1) => Value::String("-1".into()),
                Some(n) if n > 0 => Value::String("assigned".into()),
                _ => v.clone(),
            };
        }
        let kind = row
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if matches!(kind.as_str(), "vxlan" | "geneve" | "patch") {
            row.remove("mac_in_use");
        }
        if matches!(kind.as_str(), "internal" | "vxlan" | "geneve") {
            for c in ["ifindex", "mac_in_use"] {
                if let Some(v) = row.get_mut(c) {
                    *v = present(v);
                }
            }
        }
        if kind == "internal" {
            for c in ["admin_state", "link_state"] {
                row.remove(c);
            }
        }
    }
}

/// Everything the test started, torn down in `Drop`.
struct Lab {
    tag: String,
    dir: PathBuf,
    namespaces: Vec<String>,
    pids: Vec<u32>,
}

impl Lab {
    fn new(name: &str) -> Lab {
        let tag = format!("nfvsd{}{name}", std::process::id() % 100000);
        let dir = PathBuf::from(format!("/tmp/{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut lab = Lab {
            tag: tag.clone(),
            dir,
            namespaces: Vec::new(),
            pids: Vec::new(),
        };
        lab.add_ns(&tag);
        lab
    }

    /// Two host namespaces `<tag>h1`/`<tag>h2` with `SUBNET.1`/`.2`/24
    /// on `e1`/`e2`, whose veth peers `p1`/`p2` wait in the switch's
    /// namespace for ovs-vsctl to add them.
    fn two_hosts(&mut self, subnet: &str) -> (String, String) {
        let (h1, h2) = (format!("{}h1", self.tag), format!("{}h2", self.tag));
        self.add_ns(&h1);
        self.add_ns(&h2);
        let ns = self.ns().to_string();
        for (h, a, b, ip) in [
            (&h1, "p1", "e1", format!("{subnet}.1/24")),
            (&h2, "p2", "e2", format!("{subnet}.2/24")),
        ] {
            must(Command::new("ip").args([
                "-n", &ns, "link", "add", a, "type", "veth", "peer", "name", b, "netns", h,
            ]));
            must(Command::new("ip").args(["-n", &ns, "link", "set", a, "up"]));
            must(Command::new("ip").args(["-n", h, "addr", "add", &ip, "dev", b]));
            must(Command::new("ip").args(["-n", h, "link", "set", b, "up"]));
        }
        (h1, h2)
    }

    fn add_ns(&mut self, ns: &str) {
        must(Command::new("ip").args(["netns", "add", ns]));
        self.namespaces.push(ns.to_string());
        must(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]));
    }

    /// The switch's namespace.
    fn ns(&self) -> &str {
        &self.tag
    }

    /// A command run in the switch's namespace with this lab's OVS dirs.
    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns(), prog])
            .env("OVS_RUNDIR", &self.dir)
            .env("OVS_LOGDIR", &self.dir)
            .env("OVS_DBDIR", &self.dir)
            .stdin(Stdio::null());
        c
    }

    fn db(&self) -> String {
        format!("unix:{}", self.dir.join("db.sock").display())
    }

    fn pidfile(&self, name: &str) -> u32 {
        let p = self.dir.join(name);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(s) = std::fs::read_to_string(&p) {
                if let Ok(pid) = s.trim().parse() {
                    return pid;
                }
            }
            assert!(Instant::now() < deadline, "{} never appeared", p.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A fresh database and its server.
    fn start_db(&mut self, fresh: bool) {
        let conf = self.dir.join("conf.db");
        if fresh {
            let _ = std::fs::remove_file(&conf);
            must(
                Command::new("ovsdb-tool")
                    .arg("create")
                    .arg(&conf)
                    .arg(SCHEMA),
            );
        }
        must(
            self.cmd("ovsdb-server")
                .arg(format!("--remote=p{}", self.db()))
                .arg(format!(
                    "--pidfile={}",
                    self.dir.join("ovsdb-server.pid").display()
                ))
                .arg(format!(
                    "--unixctl={}",
                    self.dir.join("ovsdb.ctl").display()
                ))
                .arg(format!(
                    "--log-file={}",
                    self.dir.join("ovsdb-server.log").display()
                ))
                .args(["--detach", "--no-chdir"])
                .arg(&conf),
        );
        let pid = self.pidfile("ovsdb-server.pid");
        self.pids.push(pid);
        if fresh {
            self.vsctl_ok(&["--no-wait", "init"]);
        }
    }

    fn stop_db(&mut self) {
        let pid = self.pidfile("ovsdb-server.pid");
        stop(pid, libc::SIGTERM);
        self.pids.retain(|p| *p != pid);
    }

    /// Start the switch under test: `real` is ovs-vswitchd.
    fn start_switch(&mut self, real: bool) -> u32 {
        if real {
            must(
                self.cmd("ovs-vswitchd")
                    .arg(self.db())
                    .arg(format!(
                        "--pidfile={}",
                        self.dir.join("ovs-vswitchd.pid").display()
                    ))
                    .arg(format!(
                        "--unixctl={}",
                        self.dir.join("vswitchd.ctl").display()
                    ))
                    .arg(format!(
                        "--log-file={}",
                        self.dir.join("ovs-vswitchd.log").display()
                    ))
                    .args(["--detach", "--no-chdir", "--disable-system"]),
            );
        } else {
            must(
                self.cmd(nicflow_bin().to_str().unwrap())
                    .arg("--socket")
                    .arg(self.dir.join("nicflow.sock"))
                    .args(["vswitchd", "--pidfile", "--detach", "--log-file"]),
            );
        }
        let pid = self.pidfile("ovs-vswitchd.pid");
        self.pids.push(pid);
        pid
    }

    fn stop_switch(&mut self, pid: u32, sig: i32) {
        stop(pid, sig);
        self.pids.retain(|p| *p != pid);
        if sig == libc::SIGKILL {
            let _ = std::fs::remove_file(self.dir.join("ovs-vswitchd.pid"));
        }
    }

    fn vsctl(&self, args: &[&str]) -> Output {
        self.cmd("ovs-vsctl")
            .arg(format!("--db={}", self.db()))
            .arg("--timeout=20")
            .args(args)
            .output()
            .unwrap()
    }

    fn vsctl_ok(&self, args: &[&str]) -> String {
        let o = self.vsctl(args);
        assert!(
            o.status.success(),
            "ovs-vsctl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// `ovsdb-client dump`, tables -> rows (keyed by name or target) with
    /// references replaced by the referenced row's name.
    fn dump(&self) -> BTreeMap<String, BTreeMap<String, BTreeMap<String, Value>>> {
        let out = must(
            self.cmd("ovsdb-client")
                .args(["dump", "-f", "json"])
                .arg(self.db())
                .arg("Open_vSwitch"),
        );
        let mut raw = Vec::new();
        for line in out.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).unwrap();
            let table = v["caption"]
                .as_str()
                .unwrap()
                .trim_end_matches(" table")
                .to_string();
            let heads: Vec<String> = v["headings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_str().unwrap().to_string())
                .collect();
            for row in v["data"].as_array().unwrap() {
                let row: BTreeMap<String, Value> = heads
                    .iter()
                    .cloned()
                    .zip(row.as_array().unwrap().iter().cloned())
                    .collect();
                raw.push((table.clone(), row));
            }
        }
        // uuid -> label
        let mut labels = BTreeMap::new();
        for (t, row) in &raw {
            let uuid = row["_uuid"][1].as_str().unwrap().to_string();
            let name = row
                .get("name")
                .or_else(|| row.get("target"))
                .and_then(Value::as_str)
                .unwrap_or(t)
                .to_string();
            labels.insert(uuid, format!("{t}:{name}"));
        }
        fn relabel(v: &Value, labels: &BTreeMap<String, String>) -> Value {
            match v {
                Value::Array(a) if a.len() == 2 && a[0] == "uuid" => {
                    let u = a[1].as_str().unwrap_or("");
                    Value::String(labels.get(u).cloned().unwrap_or_else(|| "uuid:?".into()))
                }
                Value::Array(a) => {
                    let mut items: Vec<Value> = a.iter().map(|x| relabel(x, labels)).collect();
                    // Sets of relabelled uuids: order by label.
                    if items.iter().all(Value::is_string) {
                        items.sort_by(|x, y| x.as_str().cmp(&y.as_str()));
                    }
                    Value::Array(items)
                }
                other => other.clone(),
            }
        }
        let mut out: BTreeMap<String, BTreeMap<String, BTreeMap<String, Value>>> = BTreeMap::new();
        for (t, row) in raw {
            let key = row
                .get("name")
                .or_else(|| row.get("target"))
                .and_then(Value::as_str)
                .unwrap_or(&t)
                .to_string();
            let mut r: BTreeMap<String, Value> = row
                .iter()
                .filter(|(c, _)| {
                    !IGNORED
                        .iter()
                        .any(|(it, ic, _)| (*it == "*" || *it == t) && ic == c)
                })
                .map(|(c, v)| (c.clone(), relabel(v, &labels)))
                .collect();
            normalize(&t, &mut r);
            out.entry(t).or_default().insert(key, r);
        }
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for pid in self.pids.drain(..).rev() {
            stop(pid, libc::SIGTERM);
        }
        for ns in self.namespaces.drain(..).rev() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
        if std::env::var_os("NICFLOW_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("kept {}", self.dir.display());
        }
    }
}

fn stop(pid: u32, sig: i32) {
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.split_whitespace().nth(2) == Some("Z") {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: as above.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn must(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn possible() -> bool {
    if !is_root() {
        skipped("needs root");
        return false;
    }
    let ok = [
        "ovsdb-server",
        "ovsdb-tool",
        "ovs-vsctl",
        "ovs-vswitchd",
        "ovsdb-client",
        "ovs-ofctl",
    ]
    .iter()
    .all(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) && Path::new(SCHEMA).exists();
    if !ok {
        skipped("Open vSwitch binaries or the vswitch schema missing (openvswitch-switch)");
    }
    ok
}

/// In the switch's namespace: a veth for a system port (`va`, its peer
/// `vb`), and an underlay (`u0` with 198.18.77.1/24, peer `u1`) the
/// tunnels' remotes route through.
fn links(lab: &Lab) {
    let ns = lab.ns();
    let ip = |args: &[&str]| must(Command::new("ip").arg("-n").arg(ns).args(args));
    ip(&[
        "link",
        "add",
        "va",
        "address",
        "02:00:5e:77:00:01",
        "type",
        "veth",
        "peer",
        "name",
        "vb",
    ]);
    ip(&["link", "add", "u0", "type", "veth", "peer", "name", "u1"]);
    ip(&["addr", "add", "198.18.77.1/24", "dev", "u0"]);
    ip(&["link", "set", "u0", "up"]);
    ip(&["link", "set", "u1", "up"]);
}

/// The script: (step, ovs-vsctl arguments).
fn script(ctl_port: u16) -> Vec<(&'static str, Vec<String>)> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        (
            "add-br",
            s(&[
                "add-br",
                "brv",
                "--",
                "set",
                "bridge",
                "brv",
                "datapath_type=netdev",
            ]),
        ),
        ("add-port system", s(&["add-port", "brv", "va"])),
        (
            "add-port internal",
            s(&[
                "add-port",
                "brv",
                "int0",
                "--",
                "set",
                "interface",
                "int0",
                "type=internal",
            ]),
        ),
        (
            "add-port vxlan",
            s(&[
                "add-port",
                "brv",
                "vx0",
                "--",
                "set",
                "interface",
                "vx0",
                "type=vxlan",
                "options:remote_ip=198.18.77.2",
                "options:key=flow",
            ]),
        ),
        (
            "add-port geneve",
            s(&[
                "add-port",
                "brv",
                "ge0",
                "--",
                "set",
                "interface",
                "ge0",
                "type=geneve",
                "options:remote_ip=198.18.77.3",
                "options:key=flow",
                "options:csum=true",
            ]),
        ),
        (
            "mtu_request",
            s(&["set", "interface", "va", "mtu_request=1400"]),
        ),
        (
            "patch pair",
            s(&[
                "add-br",
                "brw",
                "--",
                "set",
                "bridge",
                "brw",
                "datapath_type=netdev",
                "--",
                "add-port",
                "brv",
                "pv",
                "--",
                "set",
                "interface",
                "pv",
                "type=patch",
                "options:peer=pw",
                "--",
                "add-port",
                "brw",
                "pw",
                "--",
                "set",
                "interface",
                "pw",
                "type=patch",
                "options:peer=pv",
            ]),
        ),
        ("set-fail-mode", s(&["set-fail-mode", "brv", "secure"])),
        (
            "protocols",
            s(&["set", "bridge", "brv", "protocols=OpenFlow13,OpenFlow15"]),
        ),
        (
            "set-controller",
            vec![
                "set-controller".into(),
                "brv".into(),
                format!("ptcp:{ctl_port}:127.0.0.1"),
            ],
        ),
        ("del-port", s(&["del-port", "brv", "int0"])),
        ("add-port missing", s(&["add-port", "brv", "nomissing0"])),
        ("del-br", s(&["del-br", "brv"])),
        ("del-br peer", s(&["del-br", "brw"])),
    ]
}

type Dump = BTreeMap<String, BTreeMap<String, BTreeMap<String, Value>>>;

/// Run the script against one switch: per step the exit code, stderr and dump.
fn run_script(real: bool, ctl_port: u16) -> Vec<(String, i32, String, Dump)> {
    let mut lab = Lab::new(if real { "o" } else { "n" });
    links(&lab);
    lab.start_db(true);
    let pid = lab.start_switch(real);
    let mut out = Vec::new();
    for (step, args) in script(ctl_port) {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = lab.vsctl(&a);
        let code = o.status.code().unwrap_or(-1);
        let err =
            String::from_utf8_lossy(&o.stderr).replace(lab.dir.to_str().unwrap(), "$OVS_LOGDIR");
        out.push((step.to_string(), code, err, lab.dump()));
    }
    if !real {
        let log = lab.log("ovs-vswitchd.log");
        // Logged once, not at every update or retry.
        assert_eq!(
            log.matches("could not open network device nomissing0")
                .count(),
            1,
            "{log}"
        );
    }
    lab.stop_switch(pid, libc::SIGTERM);
    out
}

#[test]
fn ovs_vsctl_script_matches_ovs_vswitchd() {
    if !possible() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ovs = run_script(true, port);
    let nf = run_script(false, port);
    let mut diffs = Vec::new();
    for ((step, c1, e1, d1), (_, c2, e2, d2)) in ovs.iter().zip(&nf) {
        assert_eq!(
            c1, c2,
            "step {step}: exit codes (stderr: ovs {e1:?}, nicflow {e2:?})"
        );
        // ovs-vsctl's own complaint (e.g. "Error detected while setting up
        // 'nomissing0'") is the same; the log directory it names is too.
        assert_eq!(e1, e2, "step {step}: ovs-vsctl stderr");
        for t in ["Open_vSwitch", "Bridge", "Port", "Interface", "Controller"] {
            let empty = BTreeMap::new();
            let (r1, r2) = (d1.get(t).unwrap_or(&empty), d2.get(t).unwrap_or(&empty));
            let keys: std::collections::BTreeSet<&String> = r1.keys().chain(r2.keys()).collect();
            for k in keys {
                match (r1.get(k), r2.get(k)) {
                    (Some(a), Some(b)) => {
                        for c in a.keys().chain(b.keys()) {
                            if a.get(c) != b.get(c) {
                                diffs.push(format!(
                                    "step {step}: {t} {k} column {c}: ovs-vswitchd {:?}, nicflow {:?}",
                                    a.get(c),
                                    b.get(c)
                                ));
                            }
                        }
                    }
                    (a, b) => diffs.push(format!(
                        "step {step}: {t} row {k}: ovs-vswitchd {}, nicflow {}",
                        if a.is_some() { "has it" } else { "lacks it" },
                        if b.is_some() { "has it" } else { "lacks it" }
                    )),
                }
            }
        }
    }
    diffs.dedup();
    assert!(diffs.is_empty(), "differences:\n{}", diffs.join("\n"));
    let (_, _, err, _) = &nf[11];
    assert!(
        err.contains("Error detected while setting up 'nomissing0'"),
        "{err}"
    );
}

/// Wait until `f` holds (up to 15 s).
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Ports added with ovs-vsctl forward (ping between two namespaces),
/// ovs-ofctl reaches the bridge over its .mgmt socket, and kill -9 plus a
/// restart of nicflow, then an ovsdb-server restart, leave the same ports
/// (no duplicates) and traffic flowing.
#[test]
fn traffic_mgmt_socket_and_restarts() {
    if !possible() {
        return;
    }
    let mut lab = Lab::new("t");
    let (h1, _h2) = lab.two_hosts("198.18.78");
    lab.start_db(true);
    let pid = lab.start_switch(false);
    lab.vsctl_ok(&[
        "add-br",
        "brt",
        "--",
        "set",
        "bridge",
        "brt",
        "datapath_type=netdev",
    ]);
    lab.vsctl_ok(&["add-port", "brt", "p1"]);
    lab.vsctl_ok(&["add-port", "brt", "p2"]);
    let ping = |from: &str, to: &str| {
        Command::new("ip")
            .args([
                "netns", "exec", from, "ping", "-c", "3", "-i", "0.2", "-W", "1", to,
            ])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(
        ping(&h1, "198.18.78.2"),
        "no ping through ports added with ovs-vsctl"
    );
    let ofports = |lab: &Lab| lab.vsctl_ok(&["--columns=name,ofport", "list", "interface"]);
    let before = ofports(&lab);
    assert!(before.contains("p1") && !before.contains("-1"), "{before}");

    // ovs-ofctl finds the bridge by name: $OVS_RUNDIR/brt.mgmt.
    assert!(lab.dir.join("brt.mgmt").exists());
    let flows = must(
        lab.cmd("ovs-ofctl")
            .args(["-O", "OpenFlow13", "dump-flows", "brt"]),
    );
    assert!(flows.contains("actions=NORMAL"), "{flows}");
    // Several at once: two sessions while a third asks.
    let _c1 = std::os::unix::net::UnixStream::connect(lab.dir.join("brt.mgmt")).unwrap();
    let _c2 = std::os::unix::net::UnixStream::connect(lab.dir.join("brt.mgmt")).unwrap();
    let flows = must(
        lab.cmd("ovs-ofctl")
            .args(["-O", "OpenFlow13", "dump-flows", "brt"]),
    );
    assert!(flows.contains("actions=NORMAL"), "{flows}");

    // nicflow's own port numbers, over the .mgmt socket: "  2(p1): addr:..".
    let of_ports = |lab: &Lab| -> Vec<String> {
        let out = must(
            lab.cmd("ovs-ofctl")
                .args(["-O", "OpenFlow13", "show", "brt"]),
        );
        let mut v: Vec<String> = out
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let (no, rest) = l.split_once('(')?;
                let name = rest.split_once(')')?.0;
                (no.parse::<u32>().is_ok() && name.starts_with('p'))
                    .then(|| format!("{no}({name})"))
            })
            .collect();
        v.sort();
        v
    };
    // Re-added: p1 is now numbered after p2, not in name order.
    lab.vsctl_ok(&["del-port", "brt", "p1"]);
    lab.vsctl_ok(&["add-port", "brt", "p1"]);
    let of_before = of_ports(&lab);
    assert_eq!(of_before.len(), 2, "{of_before:?}");

    // kill -9 and restart: the same ports, once each, under the same
    // numbers (taken from the database, as OVS does), traffic again.
    lab.stop_switch(pid, libc::SIGKILL);
    let pid = lab.start_switch(false);
    let sock = lab.dir.join("nicflow.sock");
    let show = || {
        Command::new(nicflow_bin())
            .arg("--socket")
            .arg(&sock)
            .args(["--json", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    wait_for("ports back after kill -9", || {
        let s = show();
        s.contains("\"p1\"") && s.contains("\"p2\"")
    });
    let s = show();
    for p in ["\"p1\"", "\"p2\""] {
        assert_eq!(s.matches(&format!("\"name\": {p}")).count(), 1, "{s}");
    }
    assert!(
        ping(&h1, "198.18.78.2"),
        "no ping after kill -9 and restart"
    );
    assert_eq!(ofports(&lab).matches("-1").count(), 0);
    assert_eq!(
        of_ports(&lab),
        of_before,
        "port numbers changed across kill -9"
    );

    // ovsdb-server restart: forwarding continues meanwhile, the session
    // comes back and a change made after it is applied.
    let count = |lab: &Lab, what: &str| lab.log("ovs-vswitchd.log").matches(what).count();
    let (changes, connects) = (
        count(&lab, "added interface") + count(&lab, "deleted port"),
        count(&lab, "connected to the database"),
    );
    lab.stop_db();
    assert!(
        ping(&h1, "198.18.78.2"),
        "no ping while ovsdb-server is down"
    );
    lab.start_db(false);
    // Reconnected and converged: nothing re-added or removed.
    wait_for("the session back", || {
        count(&lab, "connected to the database") > connects
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        count(&lab, "added interface") + count(&lab, "deleted port"),
        changes,
        "the reconnect touched ports: {}",
        lab.log("ovs-vswitchd.log")
    );
    lab.vsctl_ok(&["del-port", "brt", "p2"]);
    wait_for("p2 gone", || !show().contains("\"p2\""));
    assert!(!ping(&h1, "198.18.78.2"));
    lab.vsctl_ok(&["add-port", "brt", "p2"]);
    assert!(
        ping(&h1, "198.18.78.2"),
        "no ping after ovsdb-server restart"
    );
    let s = show();
    assert_eq!(s.matches("\"name\": \"p2\"").count(), 1, "{s}");

    // A bad interface gets ofport -1 and an error, the rest stays applied.
    lab.vsctl_ok(&[
        "add-port",
        "brt",
        "bad0",
        "--",
        "set",
        "interface",
        "bad0",
        "type=dpdk",
    ]);
    let bad = lab.vsctl_ok(&["--columns=ofport,error", "list", "interface", "bad0"]);
    assert!(bad.contains("-1") && bad.contains("not supported"), "{bad}");
    assert!(ping(&h1, "198.18.78.2"), "a bad interface broke the others");

    // The Datapath row ovn-controller creates gets nicflow's capabilities.
    lab.vsctl_ok(&[
        "--",
        "--id=@dp",
        "create",
        "Datapath",
        "datapath_version=0",
        "--",
        "set",
        "Open_vSwitch",
        ".",
        "datapaths:netdev=@dp",
    ]);
    wait_for("Datapath capabilities", || {
        let c = lab.vsctl_ok(&["--columns=capabilities", "list", "datapath"]);
        c.contains("ct_zero_snat=\"false\"") && c.contains("recirc=\"true\"")
    });
    // An interface moved to another bridge in one transaction opens there
    // at once (the old port goes first, though `bra` sorts before `brt`).
    lab.vsctl_ok(&[
        "add-br",
        "bra",
        "--",
        "set",
        "bridge",
        "bra",
        "datapath_type=netdev",
    ]);
    // It asks for port 17 there (`ofport_request`), and gets it.
    lab.vsctl_ok(&[
        "del-port",
        "brt",
        "p2",
        "--",
        "add-port",
        "bra",
        "p2",
        "--",
        "set",
        "interface",
        "p2",
        "ofport_request=17",
    ]);
    let moved = lab.vsctl_ok(&["--columns=ofport,error", "list", "interface", "p2"]);
    assert!(moved.contains("ofport              : 17"), "{moved}");
    lab.vsctl_ok(&["del-br", "bra"]);
    lab.vsctl_ok(&["del-br", "brt"]);
    wait_for(".mgmt socket removed with the bridge", || {
        !lab.dir.join("brt.mgmt").exists()
    });
    lab.stop_switch(pid, libc::SIGTERM);
}

/// A VXLAN port configured as ovn-controller writes one (`remote_ip`, no
/// `local_ip`): nicflow takes the source address and the underlay from
/// the route to the remote, and a host behind the bridge pings a Linux
/// VXLAN endpoint in another namespace.
#[test]
fn tunnel_source_and_underlay_come_from_the_route() {
    tunnel_from_route(false);
}

/// OVS's userspace-tunnelling layout: the underlay address sits on
/// `br-phy`'s internal port and the physical port is a port of `br-phy`;
/// tunnel packets leave through br-phy's pipeline (NORMAL) to it, and
/// arrive the same way.
#[test]
fn tunnel_over_a_br_phy_bridge() {
    tunnel_from_route(true);
}

/// A VXLAN port with only `remote_ip` reaches a kernel VXLAN endpoint in
/// namespace r: the source address and the underlay come from the route,
/// on a plain interface or (`br_phy`) on another bridge's internal port.
fn tunnel_from_route(br_phy: bool) {
    if !possible() {
        return;
    }
    let mut lab = Lab::new(if br_phy { "b" } else { "v" });
    let (h1, r) = (format!("{}h1", lab.tag), format!("{}r", lab.tag));
    lab.add_ns(&h1);
    lab.add_ns(&r);
    let ns = lab.ns().to_string();
    let ip = |n: &str, args: &[&str]| must(Command::new("ip").arg("-n").arg(n).args(args));
    // Host h1 behind the bridge.
    ip(
        &ns,
        &[
            "link", "add", "p1", "type", "veth", "peer", "name", "e1", "netns", &h1,
        ],
    );
    ip(&ns, &["link", "set", "p1", "up"]);
    ip(&h1, &["addr", "add", "198.18.80.1/24", "dev", "e1"]);
    ip(&h1, &["link", "set", "e1", "up"]);
    // The underlay: u0 (198.18.79.1) in the switch's namespace, u1
    // (198.18.79.2) in r, which terminates VXLAN 42 in the kernel.
    ip(
        &ns,
        &[
            "link", "add", "u0", "type", "veth", "peer", "name", "u1", "netns", &r,
        ],
    );
    if !br_phy {
        ip(&ns, &["addr", "add", "198.18.79.1/24", "dev", "u0"]);
    }
    ip(&ns, &["link", "set", "u0", "up"]);
    ip(&r, &["addr", "add", "198.18.79.2/24", "dev", "u1"]);
    ip(&r, &["link", "set", "u1", "up"]);
    ip(
        &r,
        &[
            "link",
            "add",
            "vxr",
            "type",
            "vxlan",
            "id",
            "42",
            "remote",
            "198.18.79.1",
            "local",
            "198.18.79.2",
            "dstport",
            "4789",
        ],
    );
    ip(&r, &["addr", "add", "198.18.80.2/24", "dev", "vxr"]);
    ip(&r, &["link", "set", "vxr", "up"]);
    lab.start_db(true);
    let pid = lab.start_switch(false);
    lab.vsctl_ok(&[
        "add-br",
        "brx",
        "--",
        "set",
        "bridge",
        "brx",
        "datapath_type=netdev",
    ]);
    lab.vsctl_ok(&["add-port", "brx", "p1"]);
    if br_phy {
        lab.vsctl_ok(&[
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
        ]);
        lab.vsctl_ok(&["add-port", "br-phy", "u0"]);
        ip(&ns, &["addr", "add", "198.18.79.1/24", "dev", "br-phy"]);
        ip(&ns, &["link", "set", "br-phy", "up"]);
    }
    lab.vsctl_ok(&[
        "add-port",
        "brx",
        "vx0",
        "--",
        "set",
        "interface",
        "vx0",
        "type=vxlan",
        "options:remote_ip=198.18.79.2",
        "options:key=42",
    ]);
    let st = lab.vsctl_ok(&["--columns=ofport,error", "list", "interface", "vx0"]);
    assert!(!st.contains("-1"), "{st}");
    let ok = Command::new("ip")
        .args([
            "netns",
            "exec",
            &h1,
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "2",
            "198.18.80.2",
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "no ping over the VXLAN port: {}\n{}",
        String::from_utf8_lossy(&ok.stdout),
        lab.log("ovs-vswitchd.log")
    );
    if br_phy {
        // The tunnel's packets crossed br-phy's pipeline both ways: its
        // NORMAL rule counted the pings' encapsulated requests and replies
        // (and the underlay's ARP).
        let flows = must(
            lab.cmd("ovs-ofctl")
                .args(["-O", "OpenFlow13", "dump-flows", "br-phy"]),
        );
        let n: u64 = flows
            .split("n_packets=")
            .skip(1)
            .filter_map(|t| t.split(',').next()?.parse::<u64>().ok())
            .sum();
        assert!(n >= 6, "br-phy forwarded {n} packets:\n{flows}");
    }
    // A remote with no route: the port gets the error, the bridge stays.
    lab.vsctl_ok(&[
        "add-port",
        "brx",
        "vx1",
        "--",
        "set",
        "interface",
        "vx1",
        "type=vxlan",
        "options:remote_ip=198.19.255.9",
    ]);
    let st = lab.vsctl_ok(&["--columns=ofport,error", "list", "interface", "vx1"]);
    assert!(st.contains("-1") && st.contains("route"), "{st}");
    lab.stop_switch(pid, libc::SIGTERM);
}

/// Two bridges joined by a patch pair (`type=patch`, `options:peer`): a
/// host on one pings a host on the other; without its peer a patch port
/// carries nothing.
#[test]
fn patch_ports_join_two_bridges() {
    if !possible() {
        return;
    }
    let mut lab = Lab::new("p");
    let (h1, _h2) = lab.two_hosts("198.18.81");
    lab.start_db(true);
    let pid = lab.start_switch(false);
    for (br, p) in [("brp1", "p1"), ("brp2", "p2")] {
        lab.vsctl_ok(&[
            "add-br",
            br,
            "--",
            "set",
            "bridge",
            br,
            "datapath_type=netdev",
        ]);
        lab.vsctl_ok(&["add-port", br, p]);
    }
    let ping = || {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &h1,
                "ping",
                "-c",
                "3",
                "-i",
                "0.2",
                "-W",
                "1",
                "198.18.81.2",
            ])
            .output()
            .unwrap()
            .status
            .success()
    };
    // One side only: nothing crosses.
    lab.vsctl_ok(&[
        "add-port",
        "brp1",
        "pa",
        "--",
        "set",
        "interface",
        "pa",
        "type=patch",
        "options:peer=pb",
    ]);
    assert!(!ping(), "a patch port without its peer carried traffic");
    lab.vsctl_ok(&[
        "add-port",
        "brp2",
        "pb",
        "--",
        "set",
        "interface",
        "pb",
        "type=patch",
        "options:peer=pa",
    ]);
    let st = lab.vsctl_ok(&[
        "--columns=name,ofport,error",
        "list",
        "interface",
        "pa",
        "pb",
    ]);
    assert!(!st.contains("-1"), "{st}");
    assert!(
        ping(),
        "no ping across the patch pair: {}",
        lab.log("ovs-vswitchd.log")
    );
    lab.vsctl_ok(&["del-port", "brp2", "pb"]);
    assert!(!ping(), "traffic crossed after the peer was deleted");
    lab.stop_switch(pid, libc::SIGTERM);
}
