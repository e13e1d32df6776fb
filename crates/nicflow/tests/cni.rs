//! nicflow as a CNI plugin, driven like a container runtime drives it:
//! `CNI_COMMAND=... nicflow` with a network configuration on stdin (and,
//! when `cnitool` is installed, by the CNI project's own tool).
//!
//! ```text
//!   p1 (eth0 198.19.50.x) --br0pf0vf0--+
//!   p2 (eth0 198.19.50.y) --br0pf0vf1--+ nicflow br0 (namespace sw, normal)
//!   p3 (eth0, by cnitool) --br0pf0vfN--+
//! ```
//!
//! Addresses come from the reference `host-local` IPAM plugin
//! (/usr/lib/cni/host-local, Debian package containernetworking-plugins).
//! Namespaces are `nfcni<pid>-*`; the lab guard deletes them, the daemon
//! and every state directory even when an assertion fails. Needs root;
//! skips with a message otherwise.
//!
//! The modules under tests/cni/ take the rest of the plugin, each in its
//! own lab (`nfcni<pid><tag>-*`): `chain` (nicflow then the reference
//! `tuning`, `bandwidth`, `portmap` through `cnitool`), `multi` (two
//! networks, two bridges, one pod), `policy` (NetworkPolicy-shaped ingress
//! rules with conntrack, real TCP/UDP/ICMP), `shaping` (bandwidth limits as
//! meters on the bridge, measured), `gc` (spec 1.1 STATUS and GC),
//! `steering` (two nodes with their own daemons over VXLAN: local, overlay
//! and egress paths, seen in `dump-dp-flows`).

#[path = "cni/chain.rs"]
mod chain;
mod common;
#[path = "cni/gc.rs"]
mod gc;
#[path = "cni/multi.rs"]
mod multi;
#[path = "cni/names.rs"]
mod names;
#[path = "cni/policy.rs"]
mod policy;
#[path = "cni/shaping.rs"]
mod shaping;
#[path = "cni/spoof.rs"]
mod spoof;
#[path = "cni/steering.rs"]
mod steering;

use common::{lab_possible, nicflow_bin, skipped, NsLab};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const CNI_DIR: &str = "/usr/lib/cni";

struct Cni {
    /// `CNI_PATH`: a directory with `nicflow` (a symlink to the test's
    /// binary), then the reference plugins.
    path: String,
}

impl Cni {
    fn new(lab: &NsLab) -> Cni {
        let bin = lab.dir().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(nicflow_bin(), bin.join("nicflow")).unwrap();
        Cni {
            path: format!("{}:{CNI_DIR}", bin.display()),
        }
    }

    /// Run `CNI_COMMAND=cmd nicflow` (found in CNI_PATH, as runtimes do):
    /// exit success and stdout parsed (Null when empty).
    fn run(&self, cmd: &str, id: &str, netns: Option<&str>, conf: &Value) -> (bool, Value) {
        self.run_if(cmd, id, "eth0", netns, conf)
    }

    /// [`Cni::run`] with interface `ifname` (a pod's second network).
    fn run_if(
        &self,
        cmd: &str,
        id: &str,
        ifname: &str,
        netns: Option<&str>,
        conf: &Value,
    ) -> (bool, Value) {
        let plugin = PathBuf::from(self.path.split(':').next().unwrap()).join("nicflow");
        let mut c = Command::new(plugin);
        c.env("CNI_COMMAND", cmd)
            .env("CNI_CONTAINERID", id)
            .env("CNI_IFNAME", ifname)
            .env("CNI_PATH", &self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match netns {
            Some(n) => c.env("CNI_NETNS", n),
            None => c.env_remove("CNI_NETNS"),
        };
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(conf.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let v = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{cmd}: not JSON ({e}): {text}"))
        };
        eprintln!("CNI {cmd} {id} {ifname}: exit {} {v}", out.status);
        (out.status.success(), v)
    }

    fn must(&self, lab: &NsLab, cmd: &str, id: &str, netns: Option<&str>, conf: &Value) -> Value {
        self.must_if(lab, cmd, id, "eth0", netns, conf)
    }

    fn must_if(
        &self,
        lab: &NsLab,
        cmd: &str,
        id: &str,
        ifname: &str,
        netns: Option<&str>,
        conf: &Value,
    ) -> Value {
        let (ok, v) = self.run_if(cmd, id, ifname, netns, conf);
        assert!(ok, "{cmd} {id} {ifname} failed: {v}\n{}", lab.daemon_log());
        v
    }
}

fn netns_path(lab: &NsLab, n: &str) -> String {
    format!("/var/run/netns/{}", lab.ns(n))
}

fn net_conf(lab: &NsLab, version: &str) -> Value {
    let d = lab.dir();
    json!({
        "cniVersion": version,
        "name": lab.prefix(),
        "type": "nicflow",
        "bridge": "br0",
        "socket": lab.sock(),
        "dataDir": d.join("nicflow-data"),
        "ipam": {
            "type": "host-local",
            "ranges": [[{ "subnet": "198.19.50.0/24", "gateway": "198.19.50.1" }]],
            "routes": [{ "dst": "198.18.0.0/15" }],
            "dataDir": d.join("ipam"),
        }
    })
}

fn vfs(lab: &NsLab) -> Vec<Value> {
    let s: Value = serde_json::from_str(&lab.cli(&["--json", "show"]).unwrap()).unwrap();
    s[0]["vfs"].as_array().cloned().unwrap_or_default()
}

/// The address (no prefix) of an ADD result.
fn addr_of(r: &Value) -> String {
    let a = r["ips"][0]["address"].as_str().unwrap();
    a.split('/').next().unwrap().to_string()
}

fn check_add_result(lab: &NsLab, r: &Value, pod: &str, version: &str) {
    assert_eq!(r["cniVersion"], version, "{r}");
    let i = &r["interfaces"][0];
    assert_eq!(i["name"], "eth0", "{r}");
    assert_eq!(i["sandbox"], netns_path(lab, pod).as_str(), "{r}");
    let mac = i["mac"].as_str().unwrap();
    let ip = &r["ips"][0];
    assert!(
        ip["address"].as_str().unwrap().starts_with("198.19.50."),
        "{r}"
    );
    assert!(ip["address"].as_str().unwrap().ends_with("/24"), "{r}");
    assert_eq!(ip["gateway"], "198.19.50.1", "{r}");
    assert_eq!(ip["interface"], 0, "{r}");
    assert_eq!(r["routes"][0]["dst"], "198.18.0.0/15", "{r}");
    // Empty `dns`: the plugin prints `{}`, libcni (cnitool) drops it.
    assert!(r["dns"].is_object() || r["dns"].is_null(), "{r}");
    // The system agrees: the VF in the pod with that MAC and address.
    let a = lab.must(pod, &["ip", "addr", "show", "dev", "eth0"]);
    assert!(
        a.contains(mac) && a.contains(ip["address"].as_str().unwrap()),
        "{a}"
    );
    let rt = lab.must(pod, &["ip", "route"]);
    assert!(rt.contains("198.18.0.0/15 via 198.19.50.1"), "{rt}");
}

fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = prev.clone();
    c
}

fn ipam_files(lab: &NsLab) -> Vec<String> {
    let dir = lab.dir().join("ipam").join(lab.prefix());
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("198."))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One lab test of this file at a time: each runs a daemon that loads
/// eBPF programs for every port, two restart it (and wait at most ten
/// seconds for it, tests/common), two run iperf3; side by side on a small
/// machine the restarts missed their deadline.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A failed test poisons the lock; the next one still runs.
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn can_run() -> bool {
    if !lab_possible() {
        return false;
    }
    if !Path::new(CNI_DIR).join("host-local").exists() {
        skipped("no /usr/lib/cni/host-local (apt-get install containernetworking-plugins)");
        return false;
    }
    true
}

#[test]
fn cni_add_check_del() {
    if !can_run() {
        return;
    }
    let _serial = serial();
    let mut lab = NsLab::new("nfcni", "", &["sw", "p1", "p2"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    let cni = Cni::new(&lab);
    let conf = net_conf(&lab, "1.0.0");
    let (p1, p2) = (netns_path(&lab, "p1"), netns_path(&lab, "p2"));

    // VERSION.
    let v = cni.must(&lab, "VERSION", "x", None, &conf);
    assert_eq!(
        v["supportedVersions"],
        json!(["0.3.1", "0.4.0", "1.0.0", "1.1.0"]),
        "{v}"
    );

    // ADD two pods: both get an eth0, on one bridge.
    let r1 = cni.must(&lab, "ADD", "pod1", Some(&p1), &conf);
    check_add_result(&lab, &r1, "p1", "1.0.0");
    let r2 = cni.must(&lab, "ADD", "pod2", Some(&p2), &conf);
    check_add_result(&lab, &r2, "p2", "1.0.0");
    assert_ne!(addr_of(&r1), addr_of(&r2));
    let v = vfs(&lab);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v.iter().all(|v| v["name"] == "eth0"), "{v:?}");
    // Two VFs named eth0: del-vf by that name is ambiguous and refused.
    let e = lab.cli(&["del-vf", "br0", "eth0"]).unwrap_err();
    assert!(e.contains("name one by its representor"), "{e}");

    // Pod to pod through the bridge.
    lab.ping("p1", &addr_of(&r2))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    lab.ping("p2", &addr_of(&r1)).unwrap();

    // CHECK: fine as added; a missing address is reported.
    cni.must(&lab, "CHECK", "pod1", Some(&p1), &with_prev(&conf, &r1));
    let mut wrong = r1.clone();
    wrong["ips"][0]["address"] = json!("198.19.50.250/24");
    let (ok, e) = cni.run("CHECK", "pod1", Some(&p1), &with_prev(&conf, &wrong));
    assert!(!ok && e["code"] == 999, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("198.19.50.250"), "{e}");

    // Daemon restart between ADD and DEL: DEL still removes the VF.
    lab.stop_daemon();
    lab.restart_daemon();
    assert_eq!(vfs(&lab).len(), 2);
    assert_eq!(ipam_files(&lab).len(), 2, "{:?}", ipam_files(&lab));
    let d = cni.must(&lab, "DEL", "pod1", Some(&p1), &conf);
    assert!(d.is_null(), "{d}");
    assert!(!lab.link_exists("p1", "eth0"));
    let v = vfs(&lab);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0]["namespace"], lab.ns("p2").as_str());
    assert_eq!(ipam_files(&lab), [addr_of(&r2)]);
    // DEL again, and once without CNI_NETNS: nothing left, still success.
    cni.must(&lab, "DEL", "pod1", Some(&p1), &conf);
    cni.must(&lab, "DEL", "pod1", None, &conf);
    // p2 keeps working; CHECK on the deleted pod fails.
    assert!(lab.link_exists("p2", "eth0"));
    let (ok, _) = cni.run("CHECK", "pod1", Some(&p1), &with_prev(&conf, &r1));
    assert!(!ok);

    // A pod whose namespace vanished before DEL (only the record knows it).
    lab.add_ns("p4");
    let p4 = netns_path(&lab, "p4");
    let r4 = cni.must(&lab, "ADD", "pod4", Some(&p4), &conf);
    assert_eq!(vfs(&lab).len(), 2);
    lab.del_ns("p4");
    cni.must(&lab, "DEL", "pod4", None, &conf);
    assert_eq!(vfs(&lab).len(), 1);
    assert!(!ipam_files(&lab).contains(&addr_of(&r4)));

    // An older spec version: the result converted (IPs carry `version`).
    let old = net_conf(&lab, "0.4.0");
    let r1 = cni.must(&lab, "ADD", "pod1", Some(&p1), &old);
    assert_eq!(r1["cniVersion"], "0.4.0", "{r1}");
    assert_eq!(r1["ips"][0]["version"], "4", "{r1}");
    lab.ping("p1", &addr_of(&r2)).unwrap();
    cni.must(&lab, "CHECK", "pod1", Some(&p1), &with_prev(&old, &r1));
    cni.must(&lab, "DEL", "pod1", Some(&p1), &old);
    cni.must(&lab, "DEL", "pod2", Some(&p2), &conf);
    cni.must(&lab, "DEL", "pod2", Some(&p2), &conf);
    assert!(vfs(&lab).is_empty());
    assert!(ipam_files(&lab).is_empty(), "{:?}", ipam_files(&lab));

    // Errors: CNI error JSON with the spec's codes.
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &json!("{not a config"));
    assert!(!ok && e["code"] == 7, "{e}");
    let mut no_bridge = conf.clone();
    no_bridge.as_object_mut().unwrap().remove("bridge");
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &no_bridge);
    assert!(!ok && e["code"] == 7, "{e}");
    let mut bad_version = conf.clone();
    bad_version["cniVersion"] = json!("0.2.0");
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &bad_version);
    assert!(!ok && e["code"] == 1, "{e}");
    let mut no_daemon = conf.clone();
    no_daemon["socket"] = json!(lab.dir().join("nobody.sock"));
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &no_daemon);
    assert!(!ok && e["code"] == 11, "{e}");
    let (ok, e) = cni.run("ADD", "pod1", Some("/nonexistent/netns"), &conf);
    assert!(!ok && e["code"] == 3, "{e}");
    // Nothing was left behind by the failures.
    assert!(vfs(&lab).is_empty());
    assert!(!lab.link_exists("p1", "eth0"));
    assert!(ipam_files(&lab).is_empty(), "{:?}", ipam_files(&lab));
}

/// `cnitool` from PATH or `go install`'s directory.
fn cnitool() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(h).join("go/bin"));
    }
    dirs.push(PathBuf::from("/root/go/bin"));
    dirs.into_iter()
        .map(|d| d.join("cnitool"))
        .find(|p| p.is_file())
}

#[test]
fn cnitool_add_check_del() {
    if !can_run() {
        return;
    }
    let _serial = serial();
    let Some(tool) = cnitool() else {
        skipped("no cnitool (go install github.com/containernetworking/cni/cnitool@v1.3.0)");
        return;
    };
    let mut lab = NsLab::new("nfcni", "t", &["sw", "p1", "p2"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    let cni = Cni::new(&lab);
    let netconf = lab.dir().join("netconf");
    std::fs::create_dir_all(&netconf).unwrap();
    let mut plugin = net_conf(&lab, "1.0.0");
    let obj = plugin.as_object_mut().unwrap();
    obj.remove("name");
    obj.remove("cniVersion");
    let list = json!({ "cniVersion": "1.0.0", "name": lab.prefix(), "plugins": [plugin] });
    std::fs::write(netconf.join("10-nicflow.conflist"), list.to_string()).unwrap();
    let tool_run = |lab: &NsLab, cmd: &str, pod: &str| -> String {
        let out = Command::new(&tool)
            .args([cmd, lab.prefix(), &netns_path(lab, pod)])
            .env("NETCONFPATH", &netconf)
            .env("CNI_PATH", &cni.path)
            .env("CNI_IFNAME", "eth0")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("cnitool {cmd} {pod}: {} {text}", out.status);
        assert!(
            out.status.success(),
            "cnitool {cmd} {pod}: {text}{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            lab.daemon_log()
        );
        text
    };
    let r1: Value = serde_json::from_str(&tool_run(&lab, "add", "p1")).unwrap();
    let r2: Value = serde_json::from_str(&tool_run(&lab, "add", "p2")).unwrap();
    check_add_result(&lab, &r1, "p1", "1.0.0");
    check_add_result(&lab, &r2, "p2", "1.0.0");
    lab.ping("p1", &addr_of(&r2))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    tool_run(&lab, "check", "p1");
    tool_run(&lab, "check", "p2");
    lab.stop_daemon();
    lab.restart_daemon();
    tool_run(&lab, "del", "p1");
    tool_run(&lab, "del", "p1");
    tool_run(&lab, "del", "p2");
    assert!(vfs(&lab).is_empty());
    assert!(!lab.link_exists("p1", "eth0") && !lab.link_exists("p2", "eth0"));
    assert!(ipam_files(&lab).is_empty(), "{:?}", ipam_files(&lab));
}

/// A process in a namespace, killed when dropped (servers of the chain
/// and policy tests).
struct Bg(std::process::Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `argv` running in node `n` of `lab` until dropped, output discarded.
fn bg(lab: &NsLab, n: &str, argv: &[&str]) -> Bg {
    let child = Command::new("ip")
        .args(["netns", "exec", &lab.ns(n)])
        .args(argv)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    Bg(child)
}

/// Python's HTTP server on `port` (all addresses) in node `n`.
fn http_server(lab: &NsLab, n: &str, port: u16) -> Bg {
    let port = port.to_string();
    let b = bg(
        lab,
        n,
        &[
            "python3",
            "-m",
            "http.server",
            &port,
            "--bind",
            "0.0.0.0",
            "--directory",
            "/",
        ],
    );
    // Listening before the first connection (a refused SYN would look
    // like a policy drop's opposite and confuse the results).
    let t0 = std::time::Instant::now();
    while !lab
        .exec(n, &["ss", "-Hltn", &format!("sport = :{port}")])
        .is_ok_and(|o| !o.trim().is_empty())
    {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "no server on {port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    b
}

/// `curl` from node `n` to `url`: Ok(HTTP status) or Err(why).
fn curl(lab: &NsLab, n: &str, url: &str, timeout_s: u32) -> Result<String, String> {
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.ns(n), "curl", "-s", "-o", "/dev/null"])
        .args(["-w", "%{http_code}", "-m", &timeout_s.to_string(), url])
        .output()
        .map_err(|e| e.to_string())?;
    let code = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(code)
    } else {
        Err(format!(
            "curl {url}: exit {:?}, code {code}",
            out.status.code()
        ))
    }
}

/// The VFs of bridge `br` (`show --json`).
fn vfs_of(lab: &NsLab, br: &str) -> Vec<Value> {
    let s: Value = serde_json::from_str(&lab.cli(&["--json", "show"]).unwrap()).unwrap();
    s.as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == br)
        .and_then(|b| b["vfs"].as_array().cloned())
        .unwrap_or_default()
}

/// A gateway for pods of bridge `br`: an internal port `dev` in node `sw`
/// with `addr` (the node's own address on the pod network).
fn gateway_port(lab: &NsLab, br: &str, dev: &str, addr: &str) {
    lab.cli(&["add-port", br, dev, "--type", "internal"])
        .unwrap();
    lab.must("sw", &["ip", "addr", "add", addr, "dev", dev]);
    lab.must("sw", &["ip", "link", "set", dev, "up"]);
}

/// Rules of br0 carrying `cookie` (`dump-flows` text).
fn rules_with(lab: &NsLab, cookie: u64) -> Vec<String> {
    let tag = format!("cookie={cookie:#x},");
    lab.cli(&["dump-flows", "br0"])
        .unwrap()
        .lines()
        .filter(|l| l.contains(&tag))
        .map(str::to_string)
        .collect()
}

/// iperf3 TCP from node `from` to `to` for two seconds, at most 100
/// Mbit/s offered (enough to tell shaped from unshaped without taking the
/// CPUs from the tests running beside it): Mbit/s received.
fn iperf_mbps(lab: &NsLab, from: &str, to: &str) -> f64 {
    let out = lab.must(from, &["iperf3", "-c", to, "-t", "2", "-b", "100M", "-J"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3: {out}"))
        / 1e6
}
