//! Helpers shared by the root integration tests that build namespaces and
//! veths by hand (the real-port tests): privilege and tool checks, and
//! running commands with their failures turned into readable errors, and
//! [`NsLab`]: namespaces plus a nicflow daemon in one of them, torn down by
//! a guard.
#![allow(dead_code)]

pub mod dp;
pub mod engine;
pub mod oflab;
pub mod port;
pub mod skip;
pub mod tun;

pub use skip::{have, have_with, is_root, skipped};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Skip (with the message the lab's CI greps for) unless we can build a lab.
pub fn lab_possible() -> bool {
    lab_possible_with(&[])
}

/// [`lab_possible`] that also needs each `(tool, probe argument)` of `extra`
/// (probed with [`have_with`]).
pub fn lab_possible_with(extra: &[(&str, &str)]) -> bool {
    if !is_root() {
        skipped("needs root");
        return false;
    }
    let base = [("ip", "-V"), ("ping", "-V")];
    for &(tool, arg) in base.iter().chain(extra) {
        if !have_with(tool, arg) {
            skipped(&format!("`{tool}` not installed"));
            return false;
        }
    }
    true
}

/// The nicflow binary cargo built for this test.
pub fn nicflow_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nicflow"))
}

pub fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub fn must(args: &[&str]) -> String {
    run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Namespaces `<kind><pid><tag>-<node>` (loopback up), a scratch directory
/// `$TMPDIR/<kind><pid><tag>` and optionally a nicflow daemon running in the
/// node `sw` with socket `<dir>/sw.sock`, config `<dir>/sw.toml` and log
/// `<dir>/sw.log`. Dropping it kills the daemon and every process in its
/// namespaces, deletes the namespaces it created (and has not deleted) and
/// removes the directory, also when an assertion failed.
pub struct NsLab {
    prefix: String,
    dir: PathBuf,
    nodes: Vec<String>,
    daemon: Option<Child>,
}

impl NsLab {
    /// `kind` is the test's own prefix (e.g. `nfov`), `tag` tells labs of
    /// one test binary apart (may be empty).
    pub fn new(kind: &str, tag: &str, nodes: &[&str]) -> NsLab {
        let prefix = format!("{kind}{}{tag}", std::process::id());
        let dir = std::env::temp_dir().join(&prefix);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut lab = NsLab {
            prefix,
            dir,
            nodes: Vec::new(),
            daemon: None,
        };
        for n in nodes {
            lab.add_ns(n);
        }
        lab
    }

    /// Create namespace `n` (loopback up); the guard deletes it.
    pub fn add_ns(&mut self, n: &str) {
        must(&["ip", "netns", "add", &self.ns(n)]);
        self.nodes.push(n.to_string());
        self.must(n, &["ip", "link", "set", "lo", "up"]);
    }

    /// Delete namespace `n` now (it must exist); the guard forgets it.
    pub fn del_ns(&mut self, n: &str) {
        must(&["ip", "netns", "del", &self.ns(n)]);
        self.nodes.retain(|m| m != n);
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The full name of node `n`'s namespace.
    pub fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.prefix)
    }

    /// Run `argv` in node `n`.
    pub fn exec(&self, n: &str, argv: &[&str]) -> Result<String, String> {
        let ns = self.ns(n);
        let mut a = vec!["ip", "netns", "exec", &ns];
        a.extend_from_slice(argv);
        run(&a)
    }

    pub fn must(&self, n: &str, argv: &[&str]) -> String {
        self.exec(n, argv).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A veth pair `a` (in node `an`) -- `b` (in `bn`), both up.
    pub fn veth(&self, a: &str, an: &str, b: &str, bn: &str) {
        let (nsa, nsb) = (self.ns(an), self.ns(bn));
        must(&[
            "ip", "link", "add", a, "netns", &nsa, "type", "veth", "peer", "name", b, "netns", &nsb,
        ]);
        self.must(an, &["ip", "link", "set", a, "up"]);
        self.must(bn, &["ip", "link", "set", b, "up"]);
    }

    /// One ping from node `from`, tried up to ten times.
    pub fn ping(&self, from: &str, to: &str) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..10 {
            match self.exec(from, &["ping", "-c", "1", "-W", "1", to]) {
                Ok(_) => return Ok(()),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Whether node `n` has an interface `dev`.
    pub fn link_exists(&self, n: &str, dev: &str) -> bool {
        run(&["ip", "-n", &self.ns(n), "link", "show", "dev", dev]).is_ok()
    }

    /// The running daemon's pid (`ip netns exec` execs it: same process).
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(|d| d.id())
    }

    pub fn sock(&self) -> PathBuf {
        self.dir.join("sw.sock")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("sw.toml")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("sw.log")
    }

    /// Everything the daemon(s) of this lab wrote so far.
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `nicflow --socket <sock> <args>` (from the test's namespace).
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let sock = self.sock();
        let bin = nicflow_bin();
        let mut a = vec![bin.to_str().unwrap(), "--socket", sock.to_str().unwrap()];
        a.extend_from_slice(args);
        run(&a)
    }

    /// Write `cfg` as the configuration and start the daemon from it.
    pub fn start_daemon(&mut self, cfg: &str) {
        std::fs::write(self.config_path(), cfg).unwrap();
        self.restart_daemon();
    }

    /// Start the daemon in node `sw` from whatever the configuration file
    /// holds now (possibly nothing: the daemon then starts empty), appending
    /// to the log, and wait until it answers on its socket.
    /// `n` pings from host `from` to `to`, 0.2 s apart: all answered?
    pub fn pings(&self, from: &str, to: &str, n: u32) -> bool {
        let n = n.to_string();
        self.exec(from, &["ping", "-n", "-c", &n, "-i", "0.2", "-W", "1", to])
            .is_ok()
    }

    pub fn restart_daemon(&mut self) {
        assert!(self.daemon.is_none(), "daemon already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns("sw")])
            .arg(nicflow_bin())
            .arg("--socket")
            .arg(self.sock())
            .arg("daemon")
            .arg("--config")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting nicflow daemon");
        self.daemon = Some(child);
        let t0 = Instant::now();
        while self.cli(&["show"]).is_err() {
            if t0.elapsed() > Duration::from_secs(10) {
                panic!("daemon did not come up:\n{}", self.daemon_log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM and wait: the daemon closes its ports and exits (panics,
    /// after killing it, if it takes more than ten seconds).
    pub fn stop_daemon(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            // `ip netns exec` execs the daemon: the child is the daemon.
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(d.id() as libc::pid_t, libc::SIGTERM) };
            let t0 = Instant::now();
            while d.try_wait().unwrap().is_none() {
                if t0.elapsed() > Duration::from_secs(10) {
                    let _ = d.kill();
                    let _ = d.wait();
                    panic!("daemon ignored SIGTERM:\n{}", self.daemon_log());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for NsLab {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
        for n in std::mem::take(&mut self.nodes) {
            let ns = self.ns(&n);
            if let Ok(pids) = run(&["ip", "netns", "pids", &ns]) {
                for p in pids.split_whitespace() {
                    let _ = run(&["kill", "-9", p]);
                }
            }
            let _ = run(&["ip", "netns", "del", &ns]);
        }
        // The daemon ran under `ip netns exec` (a private mount namespace:
        // it pins nothing by default); if it pinned anyway, under the
        // default root, its pins go (the links detach, the maps are freed).
        let pins = nicflow_port::pin::default_root(&self.sock());
        if pins.exists() {
            nicflow_port::pin::remove(&pins);
            nicflow_port::pin::remove_empty_root(&pins);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A process's resident set in KiB (`VmRSS`), for memory-bound tests.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// A UDP receiver in a namespace that prints each datagram as a line: it
/// says when it is bound ([`UdpSink::start`] returns only then) and runs
/// until [`UdpSink::finish`], so no fixed sleep or idle timeout races a
/// slow sender (a scapy start takes seconds on a loaded machine). Killed
/// when dropped.
pub struct UdpSink {
    child: Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl UdpSink {
    pub fn start(ns: &str, addr: &str, port: u16) -> UdpSink {
        let script = format!(
            "import socket\ns=socket.socket(2,2)\ns.bind(('{addr}',{port}))\ns.settimeout(600)\n\
             print('ready', flush=True)\n\
             try:\n  while True:\n    print(s.recv(2000).decode(errors='replace'), flush=True)\n\
             except Exception:\n  pass"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "/usr/bin/python3", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut ready = String::new();
        std::io::BufRead::read_line(&mut out, &mut ready).unwrap();
        let sink = UdpSink { child, out };
        assert_eq!(
            ready.trim(),
            "ready",
            "the UDP receiver in {ns} did not start"
        );
        sink
    }

    /// Every line received, once the senders are done: a frame already
    /// sent reaches the socket well within the second waited here.
    pub fn finish(mut self) -> String {
        std::thread::sleep(Duration::from_secs(1));
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut got = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut got);
        got
    }
}

impl Drop for UdpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
