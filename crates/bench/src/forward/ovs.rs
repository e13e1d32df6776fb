//! A private Open vSwitch for `bench forward`: its own database, daemons,
//! sockets and logs in a temporary directory, started inside the switch
//! namespace, stopped by pid. Nothing touches the system's OVS (its
//! `/var/run/openvswitch`, `/etc/openvswitch` or service).

use super::interrupted;
use nicflow::lab::sys;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where the OVS schema lives on Debian.
pub const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Prefix of every private OVS directory; followed by the bench's pid.
pub const DIR_PREFIX: &str = "nicflow-fwd-ovs-";

/// Whether the OVS programs are installed.
pub fn installed() -> bool {
    [
        "ovs-vswitchd",
        "ovsdb-server",
        "ovsdb-tool",
        "ovs-vsctl",
        "ovs-ofctl",
    ]
    .iter()
    .all(|p| which(p).is_some())
        && Path::new(SCHEMA).is_file()
}

pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// `apt-get install -y openvswitch-switch` if OVS is missing. Idempotent:
/// does nothing when it is there. Returns what it did, for the report.
pub fn ensure_installed(progress: &mut dyn FnMut(&str)) -> Result<Option<String>, String> {
    if installed() {
        return Ok(None);
    }
    progress("Open vSwitch is missing: apt-get install -y openvswitch-switch");
    let cmd = "apt-get install -y -o DPkg::Lock::Timeout=300 openvswitch-switch";
    let mut c = Command::new("apt-get");
    c.args([
        "install",
        "-y",
        "-o",
        "DPkg::Lock::Timeout=300",
        "openvswitch-switch",
    ])
    .env("DEBIAN_FRONTEND", "noninteractive");
    sys::run(&mut c).map_err(|e| format!("installing Open vSwitch: {e}"))?;
    if !installed() {
        return Err(format!(
            "`{cmd}` succeeded but ovs-vswitchd is still missing"
        ));
    }
    Ok(Some(cmd.to_string()))
}

/// `ovs-vswitchd --version`, first line.
pub fn version() -> String {
    Command::new("ovs-vswitchd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "ovs-vswitchd (version unknown)".into())
}

/// A running private OVS. Dropping it stops the daemons and removes the
/// directory.
pub struct Ovs {
    pub dir: PathBuf,
    /// The namespace the daemons (and the bridge's ports) live in.
    pub netns: String,
    /// Every command run, for the report.
    pub commands: Vec<String>,
    stopped: bool,
}

/// How the bridge is built.
#[derive(Clone, Debug)]
pub struct OvsBridge {
    /// `other_config:userspace-tso-enable` (read at vswitchd start).
    pub userspace_tso: bool,
    /// Interface type of the ports: None (netdev-linux) or "afxdp".
    pub port_type: Option<&'static str>,
    /// The switch-side interfaces, ofport 1, 2, ... in this order.
    pub ports: Vec<String>,
    /// OpenFlow rules replacing the default NORMAL rule (None: keep it).
    pub flows: Option<Vec<String>>,
}

impl Ovs {
    pub fn db(&self) -> String {
        format!("--db=unix:{}/db.sock", self.dir.display())
    }

    /// An OVS command with the private directories in its environment.
    fn cmd(&self, netns: Option<&str>, argv: &[&str]) -> Command {
        let mut c = sys::in_ns(netns, argv);
        for k in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR"] {
            c.env(k, &self.dir);
        }
        c
    }

    /// Run an OVS command (inside the switch namespace when `netns`) with
    /// the private directories in its environment; recorded in `commands`.
    pub fn run(&mut self, netns: bool, argv: &[&str]) -> Result<String, String> {
        let ns = netns.then(|| self.netns.clone());
        let mut c = self.cmd(ns.as_deref(), argv);
        let line = sys::describe(&c);
        self.commands.push(line);
        sys::run(&mut c)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .map_err(|e| e.to_string())
    }

    /// Create the database and start ovsdb-server and ovs-vswitchd inside
    /// `netns`, configured by `br`.
    pub fn start(netns: &str, tag: &str, br: &OvsBridge) -> Result<Ovs, String> {
        let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut ovs = Ovs {
            dir,
            netns: netns.to_string(),
            commands: Vec::new(),
            stopped: false,
        };
        // On error `ovs` is dropped, which stops whatever did start.
        ovs.start_inner(br)?;
        Ok(ovs)
    }

    fn start_inner(&mut self, br: &OvsBridge) -> Result<(), String> {
        let d = self.dir.display().to_string();
        let db = self.db();
        self.run(
            false,
            &["ovsdb-tool", "create", &format!("{d}/conf.db"), SCHEMA],
        )?;
        self.run(
            true,
            &[
                "ovsdb-server",
                &format!("--remote=punix:{d}/db.sock"),
                &format!("--pidfile={d}/ovsdb.pid"),
                "--detach",
                &format!("--log-file={d}/ovsdb.log"),
                &format!("--unixctl={d}/ovsdb.ctl"),
                &format!("{d}/conf.db"),
            ],
        )?;
        self.run(false, &["ovs-vsctl", &db, "--no-wait", "init"])?;
        let tso = format!("other_config:userspace-tso-enable={}", br.userspace_tso);
        self.run(
            false,
            &[
                "ovs-vsctl",
                &db,
                "--no-wait",
                "set",
                "Open_vSwitch",
                ".",
                &tso,
            ],
        )?;
        self.run(
            true,
            &[
                "ovs-vswitchd",
                &format!("unix:{d}/db.sock"),
                &format!("--pidfile={d}/vswitchd.pid"),
                "--detach",
                &format!("--log-file={d}/vswitchd.log"),
                &format!("--unixctl={d}/vswitchd.ctl"),
            ],
        )?;
        let mut argv: Vec<String> = ["ovs-vsctl", &db, "--timeout=20", "add-br", "br0"]
            .map(String::from)
            .to_vec();
        argv.extend(["--", "set", "bridge", "br0", "datapath_type=netdev"].map(String::from));
        for (i, p) in br.ports.iter().enumerate() {
            argv.extend(["--", "add-port", "br0", p].map(String::from));
            argv.extend(["--", "set", "Interface", p].map(String::from));
            argv.push(format!("ofport_request={}", i + 1));
            if let Some(t) = br.port_type {
                argv.push(format!("type={t}"));
            }
        }
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        self.run(false, &refs)?;
        // Every port attached, or the reason it is not.
        let deadline = Instant::now() + Duration::from_secs(10);
        for p in br.ports.clone() {
            loop {
                let of = self.run(false, &["ovs-vsctl", &db, "get", "Interface", &p, "ofport"])?;
                let err = self.run(false, &["ovs-vsctl", &db, "get", "Interface", &p, "error"])?;
                let err = err.trim();
                if !err.is_empty() && err != "[]" {
                    return Err(format!("OVS port {p}: {err}"));
                }
                if of.trim().parse::<i64>().is_ok_and(|n| n > 0) {
                    break;
                }
                if Instant::now() >= deadline || interrupted() {
                    return Err(format!("OVS port {p} not attached (ofport {})", of.trim()));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if let Some(flows) = &br.flows {
            let mgmt = format!("unix:{d}/br0.mgmt");
            self.run(false, &["ovs-ofctl", "del-flows", &mgmt])?;
            for f in flows {
                self.run(false, &["ovs-ofctl", "add-flow", &mgmt, f])?;
            }
        }
        Ok(())
    }

    pub fn vswitchd_pid(&self) -> Option<u32> {
        read_pid(&self.dir.join("vswitchd.pid"))
    }

    /// Diagnostics after a run: port counters, PMD/main-thread stats, the
    /// interfaces' status (for afxdp: the XDP mode in use).
    pub fn diagnostics(&self) -> serde_json::Value {
        let d = self.dir.display().to_string();
        let out = |argv: &[&str]| -> String {
            let mut c = self.cmd(None, argv);
            match sys::run(&mut c) {
                Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
                Err(e) => format!("error: {e}"),
            }
        };
        let ctl = format!("--target={d}/vswitchd.ctl");
        serde_json::json!({
            "dump_ports": out(&["ovs-ofctl", "dump-ports", &format!("unix:{d}/br0.mgmt")]),
            "dump_flows": out(&["ovs-ofctl", "dump-flows", &format!("unix:{d}/br0.mgmt")]),
            "pmd_stats": out(&["ovs-appctl", &ctl, "dpif-netdev/pmd-stats-show"]),
            "dp_flows": out(&["ovs-appctl", &ctl, "dpctl/dump-flows"]),
            "interfaces": out(&["ovs-vsctl", &self.db(), "--columns=name,type,status,error,statistics", "list", "Interface"]),
            "log_tail": sys::tail(&self.dir.join("vswitchd.log"), 30),
        })
    }

    /// Stop both daemons (SIGTERM, then SIGKILL) and remove the directory.
    pub fn stop(&mut self) -> Result<(), String> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let r = stop_dir(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
        r
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!("stopping private OVS in {}: {e}", self.dir.display());
        }
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `pid` is an OVS daemon started with files in `dir`.
fn is_ours(pid: u32, dir: &Path) -> bool {
    let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let cmd = String::from_utf8_lossy(&cmd);
    let d = dir.display().to_string();
    (cmd.contains("ovs-vswitchd") || cmd.contains("ovsdb-server")) && cmd.contains(&d)
}

/// Stop the daemons whose pidfiles are in `dir` (vswitchd first).
pub fn stop_dir(dir: &Path) -> Result<(), String> {
    let pids: Vec<u32> = ["vswitchd.pid", "ovsdb.pid"]
        .iter()
        .filter_map(|f| read_pid(&dir.join(f)))
        .collect();
    let r = sys::stop(&pids, |p| is_ours(p, dir), Duration::from_secs(3));
    if r.undead.is_empty() {
        Ok(())
    } else {
        Err(format!("OVS pids {:?} survived SIGKILL", r.undead))
    }
}

/// Private OVS directories left by bench runs that no longer exist
/// (killed with SIGKILL): stop their daemons and remove them.
pub fn reap_stale() -> Vec<String> {
    let mut done = Vec::new();
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
        return done;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(DIR_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || sys::alive(pid) {
            continue;
        }
        let _ = stop_dir(&e.path());
        let _ = std::fs::remove_dir_all(e.path());
        done.push(e.path().display().to_string());
    }
    done
}
