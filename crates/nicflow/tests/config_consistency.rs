//! The config file and the running switch agree (issue 28, items 6-8).
//!
//! - A full disk: a request the daemon cannot write to its config file
//!   fails (the CLI exits non-zero) and is not made — checked with real
//!   pings through an `icmp` drop rule, with `dump-flows`, and after a
//!   restart from the file; no temporary file is left behind. The config
//!   lives on a 1 MiB tmpfs mounted for the test on `<lab dir>/cfgfs` and
//!   filled with a file (unmounted by a guard, also on failure).
//! - An interface missing at restart (its veth deleted while the daemon is
//!   down) no longer keeps the daemon down when a rule names its port: the
//!   port is "not attached" in `show` and `stats`, and once the veth is
//!   back the daemon attaches it under the same number and the kept rules
//!   forward through it.
//! - An interface cannot be attached twice (another bridge, the same bridge
//!   under another name), through the control socket or a config file.
//!
//! Needs root; namespaces `nfcc<pid><tag>-*`, removed by the lab's guard.

mod common;
use common::{lab_possible, nicflow_bin, run, NsLab};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A tmpfs of `size` mounted on a directory it creates; unmounted (lazily:
/// the daemon may still hold it) and removed when dropped.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let t = Tmpfs {
            dir: dir.to_path_buf(),
        };
        run(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
            dir.to_str().unwrap(),
        ])
        .unwrap();
        t
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("fill")
    }

    /// Write a file until the file system is full.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.filler()).unwrap();
        let chunk = vec![0xa5u8; 4096];
        loop {
            match f.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        let _ = f.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }

    /// Names of the files in the file system.
    /// The files in the directory, without the daemon's state directory
    /// (`iface-state/`, the interface originals kept next to the config).
    fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "iface-state")
            .collect();
        v.sort();
        v
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = run(&["umount", "-l", self.dir.to_str().unwrap()]);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A daemon in node `sw` of `lab` with its config at `config` (the lab's
/// own starter has a fixed config path); killed when dropped (and by the
/// lab's guard, which kills every process of its namespaces).
struct Daemon(Child);

impl Daemon {
    fn start(lab: &NsLab, config: &Path) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(lab.log_path())
            .unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.ns("sw")])
            .arg(nicflow_bin())
            .arg("--socket")
            .arg(lab.sock())
            .arg("daemon")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let d = Daemon(child);
        let t0 = Instant::now();
        while lab.cli(&["show"]).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "daemon did not come up:\n{}",
                lab.daemon_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    /// SIGTERM, and wait for the exit.
    fn stop(mut self) {
        // SAFETY: kill(2) on our own child (`ip netns exec` execs the daemon).
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let t0 = Instant::now();
        while self.0.try_wait().unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "daemon ignored SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two hosts h1 (198.18.0.1) and h2 (198.18.0.2) on veths p1 and p2 of
/// node `sw`.
fn two_hosts(tag: &str) -> NsLab {
    let lab = NsLab::new("nfcc", tag, &["sw", "h1", "h2"]);
    lab.veth("p1", "sw", "eth0", "h1");
    lab.veth("p2", "sw", "eth0", "h2");
    lab.must("h1", &["ip", "addr", "add", "198.18.0.1/24", "dev", "eth0"]);
    lab.must("h2", &["ip", "addr", "add", "198.18.0.2/24", "dev", "eth0"]);
    lab
}

/// Two pings h1 -> h2 answered (one retry for the first flow's setup)?
fn ping_ok(lab: &NsLab) -> bool {
    lab.pings("h1", "198.18.0.2", 2) || lab.pings("h1", "198.18.0.2", 2)
}

/// Two pings h1 -> h2 all lost?
fn ping_dropped(lab: &NsLab) -> bool {
    lab.exec(
        "h1",
        &[
            "ping",
            "-n",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "1",
            "198.18.0.2",
        ],
    )
    .is_err()
}

fn dump_flows(lab: &NsLab) -> String {
    lab.cli(&["dump-flows", "br0"]).unwrap()
}

/// The datapath's flow limit as `stats --json` reports it.
fn flow_limit(lab: &NsLab) -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&lab.cli(&["--json", "stats"]).unwrap()).unwrap();
    let found = find_key(&v, "flow_limit");
    found.unwrap_or_else(|| panic!("no flow_limit in stats: {v}"))
}

fn find_key(v: &serde_json::Value, key: &str) -> Option<u64> {
    match v {
        serde_json::Value::Object(m) => m
            .get(key)
            .and_then(|x| x.as_u64())
            .or_else(|| m.values().find_map(|x| find_key(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

/// A self-signed key and certificate in `dir` (for `set-ssl`).
fn self_signed(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=nicflow-test",
        ])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_change_the_full_disk_cannot_record_is_not_made() {
    if !lab_possible() {
        return;
    }
    let lab = two_hosts("d");
    let fs = Tmpfs::mount(&lab.dir().join("cfgfs"), "1m");
    let config = fs.dir.join("sw.toml");
    let d = Daemon::start(&lab, &config);
    lab.cli(&["add-br", "br0"]).unwrap();
    // No BPF program to load: restarts are quick.
    lab.cli(&["set", "br0", "offload=none"]).unwrap();
    lab.cli(&["add-port", "br0", "p1"]).unwrap();
    lab.cli(&["add-port", "br0", "p2"]).unwrap();
    assert!(ping_ok(&lab));
    let drop_icmp = "priority=100,icmp,actions=drop";

    // Full: adding the drop rule fails, and it is not in force.
    fs.fill();
    let e = lab.cli(&["add-flow", "br0", drop_icmp]).unwrap_err();
    assert!(!dump_flows(&lab).contains("icmp"), "{}", dump_flows(&lab));
    assert!(ping_ok(&lab), "a refused drop rule drops pings");
    assert!(
        e.contains("the change was not made") && e.contains("No space left"),
        "{e}"
    );

    // Room again: the rule is added, written, in force.
    fs.free();
    lab.cli(&["add-flow", "br0", drop_icmp]).unwrap();
    assert!(ping_dropped(&lab));
    assert!(std::fs::read_to_string(&config).unwrap().contains("icmp"));

    // Full: deleting it fails, and it stays in force.
    fs.fill();
    let e = lab.cli(&["del-flows", "br0", "icmp"]).unwrap_err();
    assert!(e.contains("No space left"), "{e}");
    assert!(dump_flows(&lab).contains("icmp"), "{}", dump_flows(&lab));
    assert!(ping_dropped(&lab), "a refused del-flows took the rule away");
    // Every other kind of change too.
    let show = lab.cli(&["--json", "show"]).unwrap();
    let limit = flow_limit(&lab);
    let pki = lab.dir().join("pki");
    self_signed(&pki);
    let (key, cert) = (pki.join("key.pem"), pki.join("cert.pem"));
    let (key, cert) = (key.to_str().unwrap(), cert.to_str().unwrap());
    for args in [
        &["add-br", "br1"][..],
        &["del-br", "br0"],
        &["del-port", "br0", "p2"],
        &["add-flows", "br0", "/dev/null"],
        &[
            "add-group",
            "br0",
            "group_id=1,type=all,bucket=actions=drop",
        ],
        &["add-meter", "br0", "meter=1,kbps,bands=type=drop,rate=100"],
        &["set-fail-mode", "br0", "secure"],
        &["set", "br0", "flow_limit=7"],
        &["set", "br0", "protocols=OpenFlow13,OpenFlow15"],
        &["set-ssl", key, cert, cert],
    ] {
        let e = lab.cli(args).unwrap_err();
        assert!(e.contains("No space left"), "{args:?}: {e}");
    }
    assert_eq!(lab.cli(&["--json", "show"]).unwrap(), show);
    assert_eq!(flow_limit(&lab), limit, "a refused flow_limit is in force");
    assert_eq!(
        lab.cli(&["get-ssl"]).unwrap().trim(),
        "",
        "a refused set-ssl is kept"
    );
    assert!(ping_dropped(&lab));
    // No temporary file is left behind.
    assert_eq!(fs.files(), ["fill", "sw.toml"]);

    // A restart from the file runs what ran before it.
    let before = dump_flows(&lab);
    d.stop();
    let d = Daemon::start(&lab, &config);
    let strip = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split(", ").skip(5).collect::<Vec<_>>().join(", "))
            .collect()
    };
    assert_eq!(strip(&dump_flows(&lab)), strip(&before));
    assert!(ping_dropped(&lab));

    // Room again: the deletion goes through and survives a restart.
    fs.free();
    lab.cli(&["del-flows", "br0", "icmp"]).unwrap();
    assert!(ping_ok(&lab));
    d.stop();
    let _d = Daemon::start(&lab, &config);
    assert!(!dump_flows(&lab).contains("icmp"));
    assert!(ping_ok(&lab));
    assert_eq!(fs.files(), ["sw.toml"]);
}

#[test]
fn a_port_missing_at_restart_is_not_attached_and_comes_back() {
    if !lab_possible() {
        return;
    }
    let lab = two_hosts("m");
    // The default offload (TC ports); loading the program may take long on
    // a busy machine, hence this test's own daemon starter.
    let d = Daemon::start(&lab, &lab.config_path());
    lab.cli(&["add-br", "br0"]).unwrap();
    lab.cli(&["add-port", "br0", "p1"]).unwrap();
    lab.cli(&["add-port", "br0", "p2"]).unwrap();
    lab.cli(&["del-flows", "br0"]).unwrap();
    lab.cli(&[
        "add-flow",
        "br0",
        "priority=10,in_port=p1,actions=output:p2",
    ])
    .unwrap();
    lab.cli(&[
        "add-flow",
        "br0",
        "priority=10,in_port=p2,actions=output:p1",
    ])
    .unwrap();
    assert!(ping_ok(&lab));

    // p2's veth goes while the daemon is down.
    d.stop();
    lab.must("sw", &["ip", "link", "del", "p2"]);
    let _d = Daemon::start(&lab, &lab.config_path());
    let show = lab.cli(&["show"]).unwrap();
    assert!(
        show.contains("Port p2 (auto: p2) not attached")
            && show.contains("Port p1 (auto: p1) ofport 1"),
        "{show}"
    );
    let stats = lab.cli(&["stats"]).unwrap();
    assert!(stats.contains("port p2: not attached"), "{stats}");
    let flows = dump_flows(&lab);
    assert!(
        flows.contains("in_port=p1 actions=output:p2")
            && flows.contains("in_port=p2 actions=output:p1"),
        "{flows}"
    );

    // Back: attached under its old number, the kept rules forward.
    lab.veth("p2", "sw", "eth0", "h2");
    lab.must("h2", &["ip", "addr", "add", "198.18.0.2/24", "dev", "eth0"]);
    let t0 = Instant::now();
    loop {
        let show = lab.cli(&["show"]).unwrap();
        if show.contains("Port p2 (auto: p2) ofport 2") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{show}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(ping_ok(&lab), "{}", dump_flows(&lab));
    let json = lab.cli(&["--json", "dump-flows", "br0"]).unwrap();
    let rules: serde_json::Value = serde_json::from_str(&json).unwrap();
    let used = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["flow"].as_str().unwrap().contains("in_port=p1"))
        .map(|r| r["n_packets"].as_u64().unwrap());
    assert!(used.is_some_and(|n| n > 0), "{json}");
    assert!(lab.daemon_log().contains("its interface is back"));
}

#[test]
fn an_interface_is_attached_once() {
    if !lab_possible() {
        return;
    }
    let lab = two_hosts("a");
    let d = Daemon::start(&lab, &lab.config_path());
    lab.cli(&["add-br", "br0"]).unwrap();
    lab.cli(&["add-br", "br1"]).unwrap();
    lab.cli(&["add-port", "br0", "p1"]).unwrap();
    lab.cli(&["add-port", "br0", "p2"]).unwrap();
    assert!(ping_ok(&lab));
    let show = lab.cli(&["--json", "show"]).unwrap();
    let config = std::fs::read_to_string(lab.config_path()).unwrap();
    for args in [
        &["add-port", "br1", "p1"][..],
        &["add-port", "br1", "p1", "--type", "afpacket"],
        &["add-port", "br0", "p1", "--name", "again"],
        &["add-port", "br1", "p2", "--type", "uplink", "--name", "up"],
    ] {
        let e = lab.cli(args).unwrap_err();
        assert!(
            e.contains("is already attached as port p") && e.contains("of bridge br0"),
            "{args:?}: {e}"
        );
    }
    assert_eq!(lab.cli(&["--json", "show"]).unwrap(), show);
    assert_eq!(std::fs::read_to_string(lab.config_path()).unwrap(), config);
    // br1 goes without taking anything of br0's with it.
    lab.cli(&["del-br", "br1"]).unwrap();
    assert!(ping_ok(&lab));

    // A config file that attaches one interface twice, or names a bridge
    // twice, is refused: the daemon does not start.
    d.stop();
    let bad = [
        "[[bridge]]\nname='br0'\n[[bridge]]\nname='br0'\n",
        "[[bridge]]\nname='br0'\n[[bridge.port]]\nname='p1'\niface='p1'\ntype='auto'\n\
         [[bridge]]\nname='br1'\n[[bridge.port]]\nname='x'\niface='p1'\ntype='afpacket'\n",
    ];
    for text in bad {
        let path = lab.dir().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &lab.ns("sw")])
            .arg(nicflow_bin())
            .arg("--socket")
            .arg(lab.dir().join("bad.sock"))
            .arg("daemon")
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon started from a config that configures something twice:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(!status.success());
        assert!(
            err.contains("configured twice") || err.contains("attached twice"),
            "{err}"
        );
    }
    // The good file still starts, and forwards.
    let _d = Daemon::start(&lab, &lab.config_path());
    assert!(ping_ok(&lab));
}
