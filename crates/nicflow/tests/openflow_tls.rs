//! Who may drive a bridge over OpenFlow (issue 28, item 5).
//!
//! - `punix:`: the socket is created 0750 even under umask 000, another
//!   user (`nobody`, through `setpriv`) cannot connect, and when the mode
//!   is loosened by hand the daemon still refuses that user by its
//!   credentials (logged, counted in `get-controller`), while root is
//!   served.
//! - `pssl:`: `ovs-ofctl` with a certificate from the configured CA adds
//!   and dumps flows over TLS 1.2 and 1.3; a certificate from another CA,
//!   no certificate, or plain TCP are refused, logged and counted, and
//!   change nothing. `set-ssl` refuses a key file other users can read,
//!   and the key never reaches the log.
//! - `ssl:`: the daemon connects to `ovs-testcontroller` listening on
//!   `pssl:`; the controller's rules arrive; a controller with a
//!   certificate from another CA is refused.
//!
//! The PKI is made with `ovs-pki` (as an OVS deployment makes it) in the
//! lab's directory. Needs root (namespaces `nfts<pid><tag>-sw`, removed
//! by the lab's guard even on failure), `ovs-ofctl`, `ovs-pki`, `openssl`
//! and `setpriv`; the `ssl:` test also `ovs-testcontroller`.

mod common;
use common::{have_with, lab_possible_with, nicflow_bin, skipped, NsLab};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tools(extra: &[(&str, &str)]) -> bool {
    let mut t = vec![
        ("ovs-ofctl", "--version"),
        ("ovs-pki", "--version"),
        ("openssl", "version"),
        ("setpriv", "--version"),
    ];
    t.extend_from_slice(extra);
    lab_possible_with(&t)
}

/// A lab with one namespace `sw` and a daemon in it, bridge br0 without
/// ports.
fn lab(tag: &str) -> (NsLab, Killed) {
    let lab = NsLab::new("nfts", tag, &["sw"]);
    let d = daemon(&lab);
    lab.cli(&["add-br", "br0"]).unwrap();
    (lab, d)
}

/// Start the lab's daemon from its config file, with umask 000 (the
/// daemon must not rely on the umask), and wait until it answers.
fn daemon(lab: &NsLab) -> Killed {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(lab.log_path())
        .unwrap();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns("sw")])
        .arg(nicflow_bin())
        .arg("--socket")
        .arg(lab.sock())
        .arg("daemon")
        .arg("--config")
        .arg(lab.config_path())
        // Every level, so the key check below covers debug output too.
        .env("NICFLOW_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    // SAFETY: umask(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let daemon = Killed(cmd.spawn().expect("starting nicflow daemon"));
    let t0 = Instant::now();
    while lab.cli(&["show"]).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "daemon did not come up:\n{}",
            lab.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `get-controller br0` as JSON: the entry of `target`.
fn target_status(lab: &NsLab, target: &str) -> serde_json::Value {
    let out = lab.cli(&["--json", "get-controller", "br0"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["controllers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["target"] == target)
        .cloned()
        .unwrap_or_else(|| panic!("no {target} in {v}"))
}

fn refused(lab: &NsLab, target: &str) -> (u64, String) {
    let t = target_status(lab, target);
    (
        t["refused"].as_u64().unwrap(),
        t["last_refusal"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn punix_socket_is_0750_and_refuses_other_users() {
    if !tools(&[]) {
        return;
    }
    let (lab, _d) = lab("a");
    let path = lab.dir().join("br0.mgmt");
    let target = format!("punix:{}", path.display());
    let unix = format!("unix:{}", path.display());
    // The lab directory is 0755: `nobody` can reach the socket's name.
    std::fs::set_permissions(lab.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    lab.cli(&["set-controller", "br0", &target]).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(
        mode(&path),
        0o750,
        "punix socket mode {:04o} under umask 000",
        mode(&path)
    );
    // No private directory left next to it.
    let leftovers: Vec<_> = std::fs::read_dir(lab.dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".nfof"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let as_nobody = |args: &[&str]| {
        let mut a = vec![
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "ovs-ofctl",
            "-O",
            "OpenFlow13",
        ];
        a.extend_from_slice(args);
        common::run(&a)
    };
    let add = "priority=7,ip,nw_dst=198.18.0.77,actions=drop";
    // The mode keeps `nobody` out.
    let e = as_nobody(&["add-flow", &unix, add]).expect_err("nobody connected");
    assert!(e.contains("Permission denied"), "{e}");
    // Root is served.
    common::must(&["ovs-ofctl", "-O", "OpenFlow13", "show", &unix]);
    // Loosen the mode by hand: the credentials check still refuses
    // `nobody`, and says so.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (before, _) = refused(&lab, &target);
    assert!(
        as_nobody(&["add-flow", &unix, add]).is_err(),
        "nobody added a flow"
    );
    let (after, why) = refused(&lab, &target);
    assert!(after > before, "refusal not counted ({before} -> {after})");
    assert!(why.contains("neither root nor the daemon's user"), "{why}");
    let text = lab.cli(&["get-controller", "br0"]).unwrap();
    assert!(text.contains("refused: "), "{text}");
    assert!(
        lab.daemon_log().contains("OpenFlow connection refused"),
        "{}",
        lab.daemon_log()
    );
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(!dump.contains("198.18.0.77"), "{dump}");
    // A stale socket file (the daemon gone) is replaced; a regular file
    // is not.
    lab.cli(&["del-controller", "br0"]).unwrap();
    assert!(!path.exists(), "socket left behind");
    std::fs::write(&path, b"not a socket").unwrap();
    let e = lab
        .cli(&["set-controller", "br0", &target])
        .expect_err("replaced a regular file");
    assert!(e.contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
}

/// `ovs-pki` CAs and certificates in `dir`: `pki/` (switchca signs the
/// switch, controllerca the controller) and `rogue/` (another pair of CAs
/// and a controller certificate from it).
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn make(dir: &Path) -> Pki {
        let run = |args: &[&str]| {
            let out = Command::new("ovs-pki")
                .args(args)
                .current_dir(dir)
                .stdin(Stdio::null())
                .output()
                .expect("ovs-pki");
            assert!(
                out.status.success(),
                "ovs-pki {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let pki = format!("--dir={}", dir.join("pki").display());
        let rogue = format!("--dir={}", dir.join("rogue").display());
        run(&[&pki, "init"]);
        run(&[&pki, "req+sign", "sc", "switch"]);
        run(&[&pki, "req+sign", "ctl", "controller"]);
        // ovs-pki names a CA "OVS controllerca CA Certificate (DATE)" to
        // the second: a rogue CA made in the same second would share the
        // real one's name, and the switch would report BadSignature instead
        // of UnknownIssuer. Start the rogue CA in the next second.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        std::thread::sleep(Duration::from_nanos(
            1_000_000_000 - u64::from(now.subsec_nanos()) + 50_000_000,
        ));
        run(&[&rogue, "init"]);
        run(&[&rogue, "req+sign", "rogue", "controller"]);
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn p(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }

    /// `nicflow set-ssl` arguments of the switch.
    fn switch(&self) -> [String; 3] {
        [
            self.p("sc-privkey.pem"),
            self.p("sc-cert.pem"),
            self.p("pki/controllerca/cacert.pem"),
        ]
    }

    /// `--private-key`, `--certificate`, `--ca-cert` of a controller
    /// (`ctl`: signed by the switch's CA; `rogue`: by another).
    fn client(&self, who: &str) -> Vec<String> {
        vec![
            format!("--private-key={}", self.p(&format!("{who}-privkey.pem"))),
            format!("--certificate={}", self.p(&format!("{who}-cert.pem"))),
            format!("--ca-cert={}", self.p("pki/switchca/cacert.pem")),
        ]
    }
}

fn ofctl(
    lab: &NsLab,
    pki: &Pki,
    who: &str,
    extra: &[&str],
    args: &[&str],
) -> Result<String, String> {
    let mut a = vec!["ovs-ofctl", "-O", "OpenFlow13"];
    let c = pki.client(who);
    a.extend(c.iter().map(|s| s.as_str()));
    a.extend_from_slice(extra);
    a.extend_from_slice(args);
    lab.exec("sw", &a)
}

#[test]
fn pssl_serves_ovs_ofctl_with_a_certificate_from_the_ca_only() {
    if !tools(&[]) {
        return;
    }
    let (lab, d) = lab("b");
    let pki = Pki::make(lab.dir());
    let target = "pssl:16670:127.0.0.1";
    let of = "ssl:127.0.0.1:16670";

    // Without set-ssl there is nothing to serve TLS with.
    let e = lab
        .cli(&["set-controller", "br0", target])
        .expect_err("pssl without set-ssl");
    assert!(e.contains("set-ssl"), "{e}");

    // A key others can read is refused, and nothing changes.
    let [key, cert, ca] = pki.switch();
    let loose = lab.dir().join("loose-privkey.pem");
    std::fs::copy(&key, &loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = lab
        .cli(&["set-ssl", loose.to_str().unwrap(), &cert, &ca])
        .expect_err("world-readable key accepted");
    assert!(e.contains("accessible to other users"), "{e}");
    assert!(lab.cli(&["get-ssl"]).unwrap().trim().is_empty());
    // A file that is not a key: refused without quoting it.
    let e = lab
        .cli(&["set-ssl", &cert, &cert, &ca])
        .expect_err("a certificate as the key");
    assert!(e.contains("private key") && !e.contains("MII"), "{e}");

    lab.cli(&["set-ssl", &key, &cert, &ca]).unwrap();
    let get = lab.cli(&["get-ssl"]).unwrap();
    assert!(get.contains(&format!("Private key: {key}")), "{get}");
    assert!(get.contains(&format!("CA Certificate: {ca}")), "{get}");
    let cfg = std::fs::read_to_string(lab.config_path()).unwrap();
    assert!(cfg.contains("[ssl]") && cfg.contains(&key), "{cfg}");
    lab.cli(&["set-controller", "br0", target]).unwrap();

    // The right certificate: add and dump over TLS 1.3 and 1.2.
    let add = "priority=9,ip,nw_dst=198.18.0.9,actions=drop";
    ofctl(
        &lab,
        &pki,
        "ctl",
        &["--ssl-protocols=TLSv1.3"],
        &["add-flow", of, add],
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    for proto in ["--ssl-protocols=TLSv1.3", "--ssl-protocols=TLSv1.2"] {
        let dump = ofctl(&lab, &pki, "ctl", &[proto], &["dump-flows", of])
            .unwrap_or_else(|e| panic!("{proto}: {e}\n{}", lab.daemon_log()));
        assert!(dump.contains("nw_dst=198.18.0.9"), "{proto}: {dump}");
    }
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(dump.contains("nw_dst=198.18.0.9"), "{dump}");
    assert_eq!(refused(&lab, target).0, 0);

    // A certificate from another CA: refused, logged, counted, no change.
    let rogue = "priority=9,ip,nw_dst=198.18.0.66,actions=drop";
    assert!(
        ofctl(&lab, &pki, "rogue", &[], &["add-flow", of, rogue]).is_err(),
        "a certificate from another CA was served"
    );
    let (n, why) = refused(&lab, target);
    assert_eq!(n, 1, "{why}");
    assert!(why.contains("certificate"), "{why}");
    // No certificate at all (openssl s_client without -cert).
    // (It prints the alert; success or not, the switch's count tells.)
    let _ = Command::new("ip")
        .args(["netns", "exec", &lab.ns("sw"), "openssl", "s_client"])
        .args(["-connect", "127.0.0.1:16670", "-CAfile"])
        .arg(pki.p("pki/switchca/cacert.pem"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    // Plain OpenFlow on the TLS port.
    assert!(lab
        .exec(
            "sw",
            &[
                "ovs-ofctl",
                "-O",
                "OpenFlow13",
                "dump-flows",
                "tcp:127.0.0.1:16670"
            ]
        )
        .is_err());
    let t0 = Instant::now();
    let (n, why) = loop {
        let (n, why) = refused(&lab, target);
        if n >= 3 || t0.elapsed() > Duration::from_secs(15) {
            break (n, why);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(n >= 3, "{n} refused, last {why}\n{}", lab.daemon_log());
    let log = lab.daemon_log();
    assert!(log.contains("OpenFlow connection refused"), "{log}");
    assert!(log.contains("peer sent no certificates"), "{log}");
    assert!(log.contains("UnknownIssuer"), "{log}");
    let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
    assert!(!dump.contains("198.18.0.66"), "{dump}");
    // Still serving the right client afterwards.
    ofctl(&lab, &pki, "ctl", &[], &["dump-flows", of]).unwrap();

    // The key never reached the log (any line of its base64 body).
    let key_text = std::fs::read_to_string(&key).unwrap();
    for line in key_text.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!log.contains(line), "key material in the daemon log");
    }
    // del-ssl is refused while pssl is in use.
    let e = lab.cli(&["del-ssl"]).expect_err("del-ssl with pssl in use");
    assert!(e.contains(target), "{e}");

    // A restarted daemon comes back with its TLS files and listener (once
    // the OpenFlow rule is in the config file: written at the next
    // housekeeping tick, docs/openflow.md "Persistence").
    let t0 = Instant::now();
    while !std::fs::read_to_string(lab.config_path())
        .unwrap_or_default()
        .contains("198.18.0.9")
    {
        assert!(t0.elapsed() < Duration::from_secs(5), "rule never written");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(d);
    let _d = daemon(&lab);
    let t0 = Instant::now();
    let dump = loop {
        match ofctl(&lab, &pki, "ctl", &[], &["dump-flows", of]) {
            Ok(d) => break d,
            Err(e) if t0.elapsed() > Duration::from_secs(15) => {
                panic!("{e}\n{}", lab.daemon_log())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    assert!(
        dump.contains("nw_dst=198.18.0.9"),
        "{dump}\nconfig:\n{}\n{}",
        std::fs::read_to_string(lab.config_path()).unwrap_or_default(),
        lab.daemon_log()
    );
}

#[test]
fn ssl_connects_to_a_tls_controller() {
    if !tools(&[]) {
        return;
    }
    let Some(tc) = std::env::var("OVS_TESTCONTROLLER").ok().or_else(|| {
        have_with("ovs-testcontroller", "--version").then(|| "ovs-testcontroller".into())
    }) else {
        skipped("ovs-testcontroller not installed (package openvswitch-testcontroller; or set OVS_TESTCONTROLLER)");
        return;
    };
    let (lab, _d) = lab("c");
    let pki = Pki::make(lab.dir());
    let [key, cert, ca] = pki.switch();
    lab.cli(&["set-ssl", &key, &cert, &ca]).unwrap();
    lab.cli(&["set-fail-mode", "br0", "secure"]).unwrap();
    // The controller presents `who`'s certificate and checks the switch's
    // against the switch CA.
    let start = |who: &str, port: u16| {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(lab.dir().join("tc.log"))
            .unwrap();
        Killed(
            Command::new("ip")
                .args(["netns", "exec", &lab.ns("sw"), &tc, "-O", "OpenFlow13"])
                .arg(format!(
                    "--private-key={}",
                    pki.p(&format!("{who}-privkey.pem"))
                ))
                .arg(format!(
                    "--certificate={}",
                    pki.p(&format!("{who}-cert.pem"))
                ))
                .arg(format!("--ca-cert={}", pki.p("pki/switchca/cacert.pem")))
                .arg(format!(
                    "--unixctl={}",
                    lab.dir().join(format!("tc{port}.ctl")).display()
                ))
                .arg(format!("pssl:{port}:127.0.0.1"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("starting ovs-testcontroller"),
        )
    };
    let tc_log = || std::fs::read_to_string(lab.dir().join("tc.log")).unwrap_or_default();
    let _good = start("ctl", 16671);
    std::thread::sleep(Duration::from_millis(300));
    let target = "ssl:127.0.0.1:16671";
    lab.cli(&["set-controller", "br0", target]).unwrap();
    let t0 = Instant::now();
    while target_status(&lab, target)["connected"].as_u64() != Some(1) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not connected over TLS\n{}\n{}",
            lab.daemon_log(),
            tc_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // HELLO, FEATURES and the controller's table-miss rule came through.
    let t0 = Instant::now();
    loop {
        let dump = lab.cli(&["dump-flows", "br0"]).unwrap();
        if dump.contains("actions=CONTROLLER") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no rule from the controller: {dump}\n{}",
            tc_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A controller whose certificate is from another CA: never connected,
    // refused and counted on the switch's side.
    let _rogue = start("rogue", 16672);
    std::thread::sleep(Duration::from_millis(300));
    let rogue = "ssl:127.0.0.1:16672";
    lab.cli(&["set-controller", "br0", target, rogue]).unwrap();
    let t0 = Instant::now();
    let (n, why) = loop {
        let r = refused(&lab, rogue);
        if r.0 >= 1 || t0.elapsed() > Duration::from_secs(10) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(n >= 1, "rogue controller not refused\n{}", lab.daemon_log());
    assert!(why.contains("UnknownIssuer"), "{why}");
    assert_eq!(target_status(&lab, rogue)["connected"].as_u64(), Some(0));
    assert_eq!(target_status(&lab, target)["connected"].as_u64(), Some(1));
}
