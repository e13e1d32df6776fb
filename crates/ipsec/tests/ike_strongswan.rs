//! Interoperability of nicflow's IKEv2 with strongSwan's charon (5.9.x).
//!
//! Two network namespaces joined by a veth: charon in one (own config
//! directory, own vici socket, kernel-libipsec for ESP because this kernel
//! has no ESP crypto), and this test's `IkeSession` pumped through plain UDP
//! sockets on ports 500/4500 in the other, exactly as the daemon will do on
//! its underlay. Because `std` cannot switch namespaces, the test re-runs
//! itself inside the nicflow namespace (`ip netns exec`), marked by the
//! `NFIKE_INNER` variable.
//!
//! Proven: IKE_SA_INIT + IKE_AUTH both ways (with charon's forced UDP
//! encapsulation, so the float to 4500), SPIs and keys equal to charon's
//! (keys from charon's level-4 CHD log), child rekey initiated by either
//! side, IKE rekey by either side, liveness checks, delete by either side,
//! and a wrong PSK refused with a clear reason and no SA on either side.
//!
//! Skipped (with a message) unless run as root with strongSwan installed:
//! `apt-get install strongswan-charon strongswan-swanctl
//! libcharon-extra-plugins libstrongswan-extra-plugins
//! libstrongswan-standard-plugins`.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nicflow_ipsec::ike::*;

const NF_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 1);
const SW_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
const PSK: &str = "nicflow-lab-psk";
const CHARON: &str = "/usr/lib/ipsec/charon";
const LIBIPSEC: &str = "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so";
const TEST_NAME: &str = "strongswan_interop";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn must(args: &[&str]) {
    let o = run(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The two namespaces and their veth, removed on drop (also on panic).
struct Lab {
    ns_nf: String,
    ns_sw: String,
    dir: PathBuf,
}

impl Lab {
    fn create() -> Self {
        let id = std::process::id();
        let lab = Lab {
            ns_nf: format!("nfike-nf-{id}"),
            ns_sw: format!("nfike-sw-{id}"),
            dir: std::env::temp_dir().join(format!("nfike-{id}")),
        };
        let (va, vb) = (format!("nfike{id}a"), format!("nfike{id}b"));
        std::fs::create_dir_all(&lab.dir).unwrap();
        must(&["ip", "netns", "add", &lab.ns_nf]);
        must(&["ip", "netns", "add", &lab.ns_sw]);
        must(&[
            "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
        ]);
        must(&["ip", "link", "set", &va, "netns", &lab.ns_nf]);
        must(&["ip", "link", "set", &vb, "netns", &lab.ns_sw]);
        for (ns, dev, ip) in [(&lab.ns_nf, &va, NF_IP), (&lab.ns_sw, &vb, SW_IP)] {
            must(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]);
            must(&["ip", "-n", ns, "link", "set", dev, "up"]);
            must(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        lab
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // The inner run kills charon; this is the backstop if it could not.
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("charon.pid")) {
            let _ = run(&["kill", "-TERM", pid.trim()]);
            std::thread::sleep(Duration::from_millis(300));
            let _ = run(&["kill", "-KILL", pid.trim()]);
        }
        let _ = run(&["ip", "netns", "del", &self.ns_nf]);
        let _ = run(&["ip", "netns", "del", &self.ns_sw]);
        if std::env::var_os("NFIKE_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[test]
fn strongswan_interop() {
    if let Some(dir) = std::env::var_os("NFIKE_INNER") {
        inner(Path::new(&dir), &std::env::var("NFIKE_NS_SW").unwrap());
        return;
    }
    if !is_root() {
        eprintln!("skipping ike_strongswan: needs root (creates network namespaces)");
        return;
    }
    if !Path::new(CHARON).exists()
        || !Path::new(LIBIPSEC).exists()
        || !have("swanctl")
        || !have("ip")
    {
        eprintln!(
            "skipping ike_strongswan: strongSwan not installed (apt-get install strongswan-charon \
             strongswan-swanctl libcharon-extra-plugins libstrongswan-extra-plugins libstrongswan-standard-plugins)"
        );
        return;
    }
    let lab = Lab::create();
    let exe = std::env::current_exe().unwrap();
    let status = Command::new("ip")
        .args(["netns", "exec", &lab.ns_nf])
        .arg(&exe)
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env("NFIKE_INNER", &lab.dir)
        .env("NFIKE_NS_SW", &lab.ns_sw)
        .status()
        .unwrap();
    if !status.success() {
        let log = std::fs::read_to_string(lab.dir.join("charon.log")).unwrap_or_default();
        let tail: Vec<_> = log
            .lines()
            .rev()
            .take(80)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        eprintln!("---- charon.log (tail) ----\n{}", tail.join("\n"));
    }
    assert!(status.success(), "interop run inside the namespace failed");
}

/// charon in its namespace, with its own configuration directory.
struct Charon {
    dir: PathBuf,
    child: Child,
}

impl Charon {
    fn start(dir: &Path, ns: &str) -> Self {
        let tpl = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/strongswan");
        let conf = std::fs::read_to_string(tpl.join("strongswan.conf.in"))
            .unwrap()
            .replace("@DIR@", dir.to_str().unwrap());
        std::fs::write(dir.join("strongswan.conf"), conf).unwrap();
        write_swanctl(dir, PSK);
        // A private /run, so charon's fixed pid file cannot clash with any
        // other charon on the machine.
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
            ])
            .arg(format!("mount -t tmpfs tmpfs /run && exec {CHARON}"))
            .env("STRONGSWAN_CONF", dir.join("strongswan.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::fs::write(dir.join("charon.pid"), child.id().to_string()).unwrap();
        let c = Charon {
            dir: dir.to_path_buf(),
            child,
        };
        let t = Instant::now();
        while !dir.join("charon.vici").exists() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "charon did not open its vici socket"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(300));
        c.load();
        c
    }

    fn uri(&self) -> String {
        format!("unix://{}", self.dir.join("charon.vici").display())
    }

    fn load(&self) {
        let o = self.swanctl(&[
            "--load-all",
            "--clear",
            "--file",
            self.dir.join("swanctl.conf").to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "swanctl --load-all: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }

    fn swanctl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("swanctl");
        c.args(args).args(["--uri", &self.uri()]);
        c
    }

    fn swanctl(&self, args: &[&str]) -> Output {
        self.swanctl_cmd(args).output().unwrap()
    }

    /// `swanctl --list-sas --raw`, flattened to key=value pairs in order.
    fn sas(&self) -> Vec<(String, String)> {
        let o = self.swanctl(&["--list-sas", "--raw"]);
        String::from_utf8_lossy(&o.stdout)
            .split(|c: char| c.is_whitespace() || c == '{' || c == '}')
            .filter_map(|t| {
                t.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()
    }

    fn sa_values(&self, key: &str) -> Vec<String> {
        self.sas()
            .into_iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .collect()
    }

    /// (spi-in, spi-out) of the child SAs in state INSTALLED (charon keeps
    /// rekeyed ones as DELETED for a few seconds).
    fn installed(&self) -> Vec<(u32, u32)> {
        let mut state = String::new();
        let mut spi_in = 0;
        let mut out = Vec::new();
        for (k, v) in self.sas() {
            match k.as_str() {
                "state" => state = v,
                "spi-in" => spi_in = u32::from_str_radix(&v, 16).unwrap(),
                "spi-out" if state == "INSTALLED" => {
                    out.push((spi_in, u32::from_str_radix(&v, 16).unwrap()))
                }
                _ => {}
            }
        }
        out
    }

    /// One established IKE SA with one installed child SA.
    fn assert_up(&self) {
        let states = self.sa_values("state");
        assert_eq!(
            states.iter().filter(|s| *s == "ESTABLISHED").count(),
            1,
            "{states:?}"
        );
        assert_eq!(self.installed().len(), 1, "{:?}", self.sas());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("charon.log")).unwrap_or_default()
    }
}

impl Drop for Charon {
    fn drop(&mut self) {
        let _ = run(&["kill", "-TERM", &self.child.id().to_string()]);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_file(self.dir.join("charon.pid"));
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.dir.join("charon.pid"));
    }
}

fn write_swanctl(dir: &Path, psk: &str) {
    write_swanctl_with(dir, psk, "aes128gcm16-prfsha256-x25519", "aes128gcm16");
}

fn write_swanctl_with(dir: &Path, psk: &str, ike: &str, esp: &str) {
    let tpl = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/strongswan/swanctl.conf.in");
    let conf = std::fs::read_to_string(tpl)
        .unwrap()
        .replace("@CHARON_IP@", &SW_IP.to_string())
        .replace("@NICFLOW_IP@", &NF_IP.to_string())
        .replace("@PSK@", psk)
        .replace("aes128gcm16-prfsha256-x25519", ike)
        .replace(
            "esp_proposals = aes128gcm16",
            &format!("esp_proposals = {esp}"),
        );
    std::fs::write(dir.join("swanctl.conf"), conf).unwrap();
}

/// The nicflow side: an `IkeSession` on UDP sockets, pumped the way the
/// daemon pumps it from its underlay port.
struct Nic {
    s: IkeSession,
    u500: UdpSocket,
    u4500: UdpSocket,
    events: Vec<IkeEvent>,
}

impl Nic {
    fn new(initiator: bool, psk: &str) -> Self {
        Self::with_key_len(initiator, psk, 16)
    }

    fn with_key_len(initiator: bool, psk: &str, key_len: usize) -> Self {
        let mut cfg = IkeConfig::new(NF_IP, SW_IP, psk.as_bytes().to_vec());
        cfg.esp_aead_key_len = key_len;
        cfg.initiator = initiator;
        cfg.child_ts = ChildTs::host_tunnel();
        cfg.lifetimes.retransmit_timeout = Duration::from_millis(500);
        cfg.lifetimes.retransmit_tries = 4;
        cfg.lifetimes.dpd = Duration::from_secs(2);
        let bind = |p| {
            let u = UdpSocket::bind(SocketAddrV4::new(NF_IP, p)).unwrap();
            u.set_nonblocking(true).unwrap();
            u
        };
        let (u500, u4500) = (bind(IKE_PORT), bind(NAT_T_PORT));
        Nic {
            s: IkeSession::new(cfg, Instant::now()),
            u500,
            u4500,
            events: Vec::new(),
        }
    }

    fn step(&mut self) {
        while let Some(d) = self.s.poll_transmit() {
            let sock = if d.src_port == NAT_T_PORT {
                &self.u4500
            } else {
                &self.u500
            };
            sock.send_to(&d.payload, SocketAddrV4::new(SW_IP, d.dst_port))
                .unwrap();
        }
        let mut buf = [0u8; 65536];
        let mut got = false;
        for (sock, port) in [(&self.u500, IKE_PORT), (&self.u4500, NAT_T_PORT)] {
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                got = true;
                self.s.input(from.port(), port, &buf[..n], Instant::now());
            }
        }
        self.s.tick(Instant::now());
        while let Some(e) = self.s.poll_event() {
            eprintln!("nicflow event: {e:?}");
            self.events.push(e);
        }
        if !got {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn run_until(&mut self, what: &str, timeout: Duration, pred: impl Fn(&[IkeEvent]) -> bool) {
        let t = Instant::now();
        while !pred(&self.events) {
            assert!(
                t.elapsed() < timeout,
                "timed out waiting for {what}; events: {:?}",
                self.events
            );
            self.step();
        }
    }

    fn run_for(&mut self, d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            self.step();
        }
    }

    /// Runs a swanctl command while pumping (it blocks until the exchange
    /// it starts is done, which needs us to answer).
    fn run_cmd(&mut self, mut cmd: Command) -> Output {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "swanctl hangs");
            self.step();
        }
        self.run_for(Duration::from_millis(200));
        child.wait_with_output().unwrap()
    }

    fn take(&mut self) -> Vec<IkeEvent> {
        std::mem::take(&mut self.events)
    }
}

fn child_up(ev: &[IkeEvent]) -> Option<(ChildKeys, ChildKeys, bool)> {
    ev.iter().find_map(|e| match e {
        IkeEvent::ChildSaUp {
            outbound,
            inbound,
            encap_udp,
            mode,
        } => {
            assert_eq!(*mode, ChildMode::Tunnel);
            Some((outbound.clone(), inbound.clone(), *encap_udp))
        }
        _ => None,
    })
}

fn rekeyed(ev: &[IkeEvent]) -> Option<(u32, ChildKeys, ChildKeys)> {
    ev.iter().find_map(|e| match e {
        IkeEvent::ChildSaRekeyed {
            old_inbound_spi,
            outbound,
            inbound,
            ..
        } => Some((*old_inbound_spi, outbound.clone(), inbound.clone())),
        _ => None,
    })
}

fn failed(ev: &[IkeEvent]) -> Option<String> {
    ev.iter().find_map(|e| match e {
        IkeEvent::IkeFailed { reason } => Some(reason.clone()),
        _ => None,
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Keys charon derived for child SAs, from its level-4 log: a line
/// "encryption initiator key => 20 bytes @ 0x..." followed by hex dump lines
/// "   0: AB D6 ...  ascii".
fn charon_child_keys(log: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cur: Option<(String, usize)> = None;
    for line in log.lines().filter(|l| l.contains("[CHD]")) {
        let body = line.splitn(3, ' ').nth(2).unwrap_or("").trim_start();
        if let Some((k, want)) = cur.as_mut() {
            if let Some((off, rest)) = body.split_once(": ") {
                if off.chars().all(|c| c.is_ascii_digit()) {
                    // At most 16 bytes a line, then the ASCII column.
                    for b in rest.split_whitespace().take(16) {
                        if k.len() / 2 == *want
                            || b.len() != 2
                            || !b.chars().all(|c| c.is_ascii_hexdigit())
                        {
                            break;
                        }
                        k.push_str(&b.to_lowercase());
                    }
                    if k.len() / 2 == *want {
                        keys.push(cur.take().unwrap().0);
                    }
                    continue;
                }
            }
            cur = None;
        }
        if let Some((_, rest)) = body.split_once(" key => ") {
            if let Some(n) = rest.split_whitespace().next().and_then(|n| n.parse().ok()) {
                cur = Some((String::new(), n));
            }
        }
    }
    keys
}

/// Asserts charon's only installed child SA has these SPIs and that its
/// log shows the same keys.
fn assert_charon_has(c: &Charon, out: &ChildKeys, inb: &ChildKeys) {
    // charon's inbound SA is our outbound one and vice versa.
    assert_eq!(c.installed(), [(out.spi, inb.spi)], "{:?}", c.sas());
    let keys = charon_child_keys(&c.log());
    assert!(
        !keys.is_empty(),
        "charon's log (chd = 4) shows no child keys"
    );
    for k in [out, inb] {
        assert!(
            keys.contains(&hex(&k.key)),
            "charon derived no key equal to ours for SPI {:08x}",
            k.spi
        );
    }
}

fn inner(dir: &Path, ns_sw: &str) {
    let charon = Charon::start(dir, ns_sw);

    // 1. nicflow initiates.
    eprintln!("== nicflow initiates");
    let mut nic = Nic::new(true, PSK);
    nic.run_until("ChildSaUp", Duration::from_secs(15), |e| {
        child_up(e).is_some()
    });
    let ev = nic.take();
    assert!(ev.contains(&IkeEvent::IkeUp));
    let (out, inb, encap) = child_up(&ev).unwrap();
    assert!(
        encap,
        "charon's encap=yes fakes NAT: ESP must be UDP-encapsulated"
    );
    charon.assert_up();
    assert_eq!(
        charon.sa_values("remote-port"),
        ["4500"],
        "IKE floated to 4500"
    );
    assert_charon_has(&charon, &out, &inb);

    // 2. nicflow rekeys the child; the old one is deleted at both ends.
    eprintln!("== nicflow rekeys the child SA");
    nic.s.rekey_child(inb.spi, Instant::now());
    nic.run_until("child rekey + delete", Duration::from_secs(15), |e| {
        e.iter()
            .any(|x| matches!(x, IkeEvent::ChildSaDeleted { .. }))
    });
    let ev = nic.take();
    let (old_in, out2, inb2) = rekeyed(&ev).expect("ChildSaRekeyed");
    assert_eq!(old_in, inb.spi);
    assert!(ev.contains(&IkeEvent::ChildSaDeleted {
        inbound_spi: inb.spi,
        outbound_spi: out.spi
    }));
    nic.run_for(Duration::from_millis(300));
    assert_charon_has(&charon, &out2, &inb2);

    // 3. charon rekeys the child.
    eprintln!("== charon rekeys the child SA");
    let o = nic.run_cmd(charon.swanctl_cmd(&["--rekey", "--child", "nicflow"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    nic.run_until(
        "charon's child rekey + delete",
        Duration::from_secs(15),
        |e| {
            e.iter()
                .any(|x| matches!(x, IkeEvent::ChildSaDeleted { .. }))
        },
    );
    let ev = nic.take();
    let (old_in, out3, inb3) = rekeyed(&ev).expect("ChildSaRekeyed");
    assert_eq!(old_in, inb2.spi);
    assert_charon_has(&charon, &out3, &inb3);

    // 4. IKE SA rekey, by charon then by nicflow; the child survives and a
    // child rekey afterwards proves both sides agree on the new SK_d.
    eprintln!("== charon rekeys the IKE SA");
    let spi_before = charon.sa_values("initiator-spi");
    let o = nic.run_cmd(charon.swanctl_cmd(&["--rekey", "--ike", "nicflow"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    nic.run_for(Duration::from_secs(1));
    assert_ne!(charon.sa_values("initiator-spi"), spi_before);
    charon.assert_up();
    eprintln!("== nicflow rekeys the IKE SA");
    let spi_before = charon.sa_values("initiator-spi");
    nic.s.rekey_ike(Instant::now());
    nic.run_for(Duration::from_secs(1));
    assert_ne!(charon.sa_values("initiator-spi"), spi_before);
    charon.assert_up();
    let ev = nic.take();
    assert!(
        !ev.iter().any(|e| matches!(
            e,
            IkeEvent::IkeDown | IkeEvent::IkeFailed { .. } | IkeEvent::ChildSaDeleted { .. }
        )),
        "{ev:?}"
    );
    nic.s.rekey_child(inb3.spi, Instant::now());
    nic.run_until(
        "child rekey on the rekeyed IKE SA",
        Duration::from_secs(15),
        |e| {
            e.iter()
                .any(|x| matches!(x, IkeEvent::ChildSaDeleted { .. }))
        },
    );
    let (_, out4, inb4) = rekeyed(&nic.take()).expect("ChildSaRekeyed");
    assert_charon_has(&charon, &out4, &inb4);

    // 5. Liveness: a few DPD rounds (dpd = 2 s) answered by charon.
    eprintln!("== liveness checks");
    nic.run_for(Duration::from_secs(5));
    assert!(nic.s.is_established());
    assert!(nic.take().is_empty());

    // 6. nicflow closes: charon has nothing left.
    eprintln!("== nicflow deletes the IKE SA");
    nic.s.close(Instant::now());
    nic.run_until("IkeDown", Duration::from_secs(10), |e| {
        e.contains(&IkeEvent::IkeDown)
    });
    nic.run_for(Duration::from_millis(300));
    assert!(charon.sa_values("state").is_empty(), "{:?}", charon.sas());
    drop(nic);

    // 7. charon initiates, nicflow only responds; charon deletes.
    eprintln!("== charon initiates");
    let mut nic = Nic::new(false, PSK);
    let o =
        nic.run_cmd(charon.swanctl_cmd(&["--initiate", "--child", "nicflow", "--timeout", "20"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let ev = nic.take();
    assert!(ev.contains(&IkeEvent::IkeUp), "{ev:?}");
    let (out, inb, encap) = child_up(&ev).expect("ChildSaUp");
    assert!(encap);
    assert_charon_has(&charon, &out, &inb);
    eprintln!("== charon rekeys the child SA it initiated");
    let o = nic.run_cmd(charon.swanctl_cmd(&["--rekey", "--child", "nicflow"]));
    assert!(o.status.success());
    nic.run_until("child rekey + delete", Duration::from_secs(15), |e| {
        e.iter()
            .any(|x| matches!(x, IkeEvent::ChildSaDeleted { .. }))
    });
    let (_, out2, inb2) = rekeyed(&nic.take()).expect("ChildSaRekeyed");
    assert_charon_has(&charon, &out2, &inb2);
    eprintln!("== charon deletes the IKE SA");
    let o =
        nic.run_cmd(charon.swanctl_cmd(&["--terminate", "--ike", "nicflow", "--timeout", "10"]));
    assert!(o.status.success());
    nic.run_until("IkeDown", Duration::from_secs(10), |e| {
        e.contains(&IkeEvent::IkeDown)
    });
    assert!(nic.take().contains(&IkeEvent::ChildSaDeleted {
        inbound_spi: inb2.spi,
        outbound_spi: out2.spi
    }));
    drop(nic);

    // 8. Wrong PSK, both directions: refused with a clear reason, no SA.
    eprintln!("== wrong PSK, nicflow initiates");
    let mut nic = Nic::new(true, "not-the-psk");
    nic.run_until("IkeFailed", Duration::from_secs(15), |e| {
        failed(e).is_some()
    });
    nic.run_for(Duration::from_millis(300));
    let ev = nic.take();
    let reason = failed(&ev).unwrap();
    assert!(reason.contains("AUTHENTICATION_FAILED"), "{reason}");
    assert!(
        !ev.iter()
            .any(|e| matches!(e, IkeEvent::IkeUp | IkeEvent::ChildSaUp { .. })),
        "{ev:?}"
    );
    assert!(!nic.s.is_established());
    assert!(charon.sa_values("state").is_empty(), "{:?}", charon.sas());
    drop(nic);

    eprintln!("== wrong PSK, charon initiates");
    let mut nic = Nic::new(false, "not-the-psk");
    let o =
        nic.run_cmd(charon.swanctl_cmd(&["--initiate", "--child", "nicflow", "--timeout", "20"]));
    assert!(
        !o.status.success(),
        "charon must fail: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let ev = nic.take();
    let reason = failed(&ev).expect("IkeFailed");
    assert!(reason.contains("pre-shared keys differ"), "{reason}");
    assert!(
        !ev.iter()
            .any(|e| matches!(e, IkeEvent::IkeUp | IkeEvent::ChildSaUp { .. })),
        "{ev:?}"
    );
    assert!(!nic.s.is_established());
    assert!(charon.sa_values("state").is_empty(), "{:?}", charon.sas());
    drop(nic);

    // 9. charon only does P-256 and AES-256: our Curve25519 KE draws
    // INVALID_KE_PAYLOAD and we redo IKE_SA_INIT with group 19.
    eprintln!("== charon wants ECP-256 and AES-256-GCM");
    write_swanctl_with(dir, PSK, "aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    charon.load();
    let mut nic = Nic::with_key_len(true, PSK, 32);
    nic.run_until("ChildSaUp", Duration::from_secs(15), |e| {
        child_up(e).is_some()
    });
    let (out, inb, _) = child_up(&nic.take()).unwrap();
    assert_eq!(out.key.len(), 36);
    assert_eq!(charon.sa_values("dh-group"), ["ECP_256"]);
    assert_eq!(charon.sa_values("encr-keysize"), ["256", "256"]);
    assert_charon_has(&charon, &out, &inb);
    assert!(
        charon
            .log()
            .contains("DH group CURVE_25519 unacceptable, requesting ECP_256"),
        "INVALID_KE_PAYLOAD round"
    );
    nic.s.close(Instant::now());
    nic.run_until("IkeDown", Duration::from_secs(10), |e| {
        e.contains(&IkeEvent::IkeDown)
    });
    eprintln!("== all strongSwan interop checks passed");
}
