//! Connection tracking with real traffic: two namespaces behind a nicflow
//! switch with the defaults, the stateful-firewall tables Open vSwitch
//! documents. h1 may open TCP connections and pings to h2 and gets the
//! replies; h2 can open nothing towards h1. `dump-conntrack` shows the
//! connections in OVS's format, `dump-dp-flows` says why the ct flows stay
//! in userspace, `flush-conntrack` empties the table.
//!
//! Root only; one lab per test (`o<pid><tag>`), torn down by a guard.

mod common;

use common::oflab::*;
use nicflow::control::proto::Request;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FIREWALL: &[&str] = &[
    "table=0,priority=1,actions=drop",
    "table=0,priority=10,arp,actions=normal",
    "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)",
    "table=1,priority=1,actions=drop",
    "table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,actions=ct(commit),output:p2",
    "table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2",
    "table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1",
    "table=1,priority=10,ip,ct_state=+trk+rel,actions=normal",
];

/// A process in a namespace, killed when dropped.
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `argv` running in namespace `ns` until dropped, output discarded.
fn bg(ns: &str, argv: &[&str]) -> Bg {
    let child = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(argv)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    Bg(child)
}

fn http_server(ns: &str, addr: &str) -> Bg {
    bg(
        ns,
        &[
            "python3",
            "-m",
            "http.server",
            "8080",
            "--bind",
            addr,
            "--directory",
            "/",
        ],
    )
}

/// `curl` from `ns` to `url`: Ok(status) or Err(why).
fn curl(ns: &str, url: &str, timeout_s: u32) -> Result<String, String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-s", "-o", "/dev/null"])
        .args(["-w", "%{http_code}", "-m", &timeout_s.to_string(), url])
        .output()
        .map_err(|e| e.to_string())?;
    let code = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(code)
    } else {
        Err(format!("curl exit {:?}, code {code}", out.status.code()))
    }
}

fn ping(ns: &str, to: &str) -> bool {
    Command::new("ip")
        .args([
            "netns", "exec", ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", to,
        ])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Until `f` holds or `limit` passes (servers take a moment to listen).
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The virtual address 198.18.0.100 resolves, in namespace `ns`, to the
/// MAC of lab host `owner` (a load balancer's VIP has no host of its own).
fn vip_on(lab: &Lab, ns: &str, owner: &str) {
    let mac = lab.mac(owner).map(|b| format!("{b:02x}")).join(":");
    common::must(&[
        "ip",
        "netns",
        "exec",
        ns,
        "ip",
        "neigh",
        "replace",
        "198.18.0.100",
        "lladdr",
        &mac,
        "dev",
        "eth0",
        "nud",
        "permanent",
    ]);
}

fn conntrack(lab: &Lab) -> Vec<String> {
    lab.req(Request::DumpConntrack {
        bridge: "br0".into(),
        zone: None,
        verbose: false,
        stats: true,
    })
    .as_array()
    .unwrap()
    .iter()
    .map(|v| v.as_str().unwrap().to_string())
    .collect()
}

#[test]
fn stateful_firewall_with_curl_and_ping() {
    if !privileged() || !common::have("curl") {
        if !common::have("curl") {
            notice("skipping: needs curl");
        }
        return;
    }
    let lab = Lab::up("ct", "", FIREWALL);
    let (h1, h2) = (lab.ns("ct1"), lab.ns("ct2"));
    let _s2 = http_server(&h2, "198.18.0.2");
    let _s1 = http_server(&h1, "198.18.0.1");

    // h1 -> h2: allowed, replies come back.
    assert!(
        eventually(Duration::from_secs(10), || curl(
            &h1,
            "http://198.18.0.2:8080/",
            2
        )
        .is_ok_and(|c| c == "200")),
        "curl h1 -> h2 through the stateful firewall"
    );
    for _ in 0..5 {
        assert_eq!(
            curl(&h1, "http://198.18.0.2:8080/", 3).as_deref(),
            Ok("200")
        );
    }
    assert!(
        ping(&h1, "198.18.0.2"),
        "ping h1 -> h2 (echo tracked, reply +est)"
    );

    // h2 -> h1: new connections are dropped, whatever the protocol.
    assert!(
        curl(&h2, "http://198.18.0.1:8080/", 2).is_err(),
        "h2 must not open connections to h1"
    );
    assert!(!ping(&h2, "198.18.0.1"), "h2 must not ping h1");

    let ct = conntrack(&lab);
    let tcp: Vec<&String> = ct
        .iter()
        .filter(|l| {
            l.starts_with("tcp,orig=(src=198.18.0.1,dst=198.18.0.2,") && l.contains("dport=8080")
        })
        .collect();
    assert!(tcp.len() >= 6, "one connection per curl from h1: {ct:#?}");
    assert!(
        !ct.iter()
            .any(|l| l.contains("orig=(src=198.18.0.2,dst=198.18.0.1")),
        "nothing h2 opened was committed: {ct:#?}"
    );
    assert!(
        ct.iter()
            .any(|l| l.starts_with("icmp,orig=(src=198.18.0.1,dst=198.18.0.2,id=")),
        "the pings are tracked: {ct:#?}"
    );

    // The ct flows run in userspace and say so.
    let flows = lab.dp_flows();
    let ct_flows: Vec<_> = flows
        .iter()
        .filter(|f| f["actions"].as_str().unwrap_or("").contains("ct"))
        .collect();
    assert!(!ct_flows.is_empty(), "{flows:#?}");
    for f in &ct_flows {
        assert_eq!(f["engine"], "userspace", "{f}");
        assert!(
            f["not_offloaded"].as_str().unwrap_or("").starts_with("ct:"),
            "a ct flow says why it stays in userspace: {f}"
        );
    }

    // flush-conntrack by tuple, then all.
    lab.req(Request::FlushConntrack {
        bridge: "br0".into(),
        zone: None,
        filter: Some("ct_nw_proto=1".into()),
    });
    let ct = conntrack(&lab);
    assert!(!ct.iter().any(|l| l.starts_with("icmp,")), "{ct:#?}");
    assert!(ct.iter().any(|l| l.starts_with("tcp,")), "{ct:#?}");
    lab.req(Request::FlushConntrack {
        bridge: "br0".into(),
        zone: None,
        filter: None,
    });
    assert!(conntrack(&lab).is_empty());
    let stats = lab.req(Request::ConntrackStats {
        bridge: "br0".into(),
    });
    assert_eq!(stats["connections"], 0, "{stats}");
    assert!(stats["created"].as_u64().unwrap() >= 7, "{stats}");
}

/// OVS's L4 load balancer with real connections: h1 opens
/// http://198.18.0.100/ (a virtual address nobody owns); nicflow DNATs
/// each connection to one of h2's three addresses, port 8080, and un-NATs
/// the replies, so curl sees the virtual address answer.
#[test]
fn dnat_load_balancer_with_curl() {
    if !privileged() || !common::have("curl") {
        if !common::have("curl") {
            notice("skipping: needs curl");
        }
        return;
    }
    let lab = Lab::up(
        "lb",
        "",
        &[
            "table=0,priority=10,arp,actions=normal",
            "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,nat)",
            "table=1,priority=1,actions=drop",
            "table=1,priority=10,in_port=p1,tcp,nw_dst=198.18.0.100,tp_dst=80,ct_state=+trk+new,actions=ct(commit,nat(dst=198.18.0.10-198.18.0.12:8080)),output:p2",
            "table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2",
            "table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1",
        ],
    );
    let (h1, h2) = (lab.ns("lb1"), lab.ns("lb2"));
    for a in ["198.18.0.10", "198.18.0.11", "198.18.0.12"] {
        common::must(&[
            "ip",
            "netns",
            "exec",
            &h2,
            "ip",
            "addr",
            "add",
            &format!("{a}/24"),
            "dev",
            "eth0",
        ]);
    }
    // The virtual address resolves to h2's MAC on h1 (no host answers ARP
    // for it, as with a real load balancer's VIP on the switch).
    vip_on(&lab, &h1, "lb2");
    let srv = http_server(&h2, "0.0.0.0");
    assert!(
        eventually(Duration::from_secs(10), || curl(
            &h1,
            "http://198.18.0.100/",
            2
        )
        .is_ok_and(|c| c == "200")),
        "curl to the virtual address"
    );
    for _ in 0..11 {
        assert_eq!(curl(&h1, "http://198.18.0.100/", 3).as_deref(), Ok("200"));
    }
    let ct = conntrack(&lab);
    let backends: std::collections::BTreeSet<&str> = ct
        .iter()
        .filter(|l| l.contains("dst=198.18.0.100,") && l.contains("dport=80,"))
        .filter_map(|l| l.split("reply=(src=").nth(1)?.split(',').next())
        .collect();
    assert!(
        backends.len() >= 2 && backends.iter().all(|b| b.starts_with("198.18.0.1")),
        "12 connections over several backends: {backends:?} in {ct:#?}"
    );
    // A long connection through the load balancer: established, it runs
    // in the TC engine with the DNAT rewrite done there (un-NAT too), and
    // TCP only works if both are right.
    if common::have("iperf3") {
        drop(srv);
        let _perf = bg(&h2, &["iperf3", "-s", "-p", "8080"]);
        let before = lab.stats()["engines"]["tc_packets"].as_u64().unwrap_or(0);
        let ok = eventually(Duration::from_secs(10), || {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &h1,
                    "iperf3",
                    "-c",
                    "198.18.0.100",
                    "-p",
                    "80",
                    "-t",
                    "2",
                ])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        assert!(ok, "iperf3 through the DNAT load balancer");
        let after = lab.stats()["engines"]["tc_packets"].as_u64().unwrap_or(0);
        assert!(
            after - before > 1000,
            "NATed established traffic in the TC engine: {} packets",
            after - before
        );
    }
}

/// Established connections move to the kernel engine (the defaults: TC):
/// an iperf3 TCP run through the stateful firewall is forwarded by the TC
/// program after the handshake, its packets are credited to the connection
/// in `dump-conntrack -s`, and the FIN still reaches the tracker, which
/// closes the connection.
#[test]
fn established_connections_run_in_the_kernel() {
    if !privileged() || !common::have("iperf3") {
        if !common::have("iperf3") {
            notice("skipping: needs iperf3");
        }
        return;
    }
    let lab = Lab::up("co", "", FIREWALL);
    let (h1, h2) = (lab.ns("co1"), lab.ns("co2"));
    let _srv = bg(&h2, &["iperf3", "-s", "-B", "198.18.0.2"]);
    let before = lab.stats()["engines"]["tc_packets"].as_u64().unwrap_or(0);
    let mut ok = false;
    for _ in 0..20 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &h1,
                "iperf3",
                "-c",
                "198.18.0.2",
                "-t",
                "2",
                "-J",
            ])
            .output()
            .expect("iperf3 -c");
        // iperf3 -J can exit 0 with {"error": "unable to connect..."}
        // while the server is still starting: that is a retry.
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if out.status.success() && v.get("error").is_none() {
            ok = true;
            let bps = v["end"]["sum_received"]["bits_per_second"].as_f64();
            eprintln!(
                "iperf3 through ct with offload: {:?} Gbit/s {}",
                bps.map(|b| b / 1e9),
                if bps.is_none() {
                    v.to_string()
                } else {
                    String::new()
                }
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(ok, "iperf3 through the stateful firewall");
    std::thread::sleep(Duration::from_millis(1500));
    let after = lab.stats()["engines"]["tc_packets"].as_u64().unwrap_or(0);
    assert!(
        after - before > 1000,
        "the TC program forwarded the established traffic: {} packets",
        after - before
    );
    // iperf3's data connection (the biggest): thousands of packets credited
    // from the kernel, and closed by the FIN the tracker saw.
    let ct = conntrack(&lab);
    let biggest = ct
        .iter()
        .filter(|l| l.starts_with("tcp,") && l.contains("dport=5201,"))
        .max_by_key(|l| orig_packets(l))
        .cloned()
        .unwrap_or_default();
    assert!(
        orig_packets(&biggest) > 1000,
        "kernel packets credited: {biggest}"
    );
    assert!(
        !biggest.contains("state=ESTABLISHED"),
        "the FIN reached the tracker: {biggest}"
    );
}

/// A connection in the kernel must follow its mark: a rule change makes the
/// server's replies commit `ct_mark=1`, and the client's direction, whose
/// kernel entry was decided with mark 0, must stop at once (a new rule
/// drops marked traffic) instead of flowing in the kernel until the
/// connection ends.
#[test]
fn an_offloaded_connection_follows_its_mark() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(
        "cm",
        "",
        &[
            "table=0,priority=10,arp,actions=normal",
            "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)",
            "table=1,priority=1,actions=drop",
            "table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,actions=ct(commit),output:p2",
            "table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2",
            "table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1",
        ],
    );
    let (h1, h2) = (lab.ns("cm1"), lab.ns("cm2"));
    let server = "import socket\n\
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
s.bind(('198.18.0.2', 9000)); s.listen(1); c,_=s.accept()\n\
while True:\n    d=c.recv(100)\n    if not d: break\n    c.sendall(d)\n";
    // The client sends a line every 20 ms for 6 s and prints, per 0.5 s
    // window, how many echoes came back.
    let client = "import socket,time\n\
c=socket.create_connection(('198.18.0.2', 9000)); c.settimeout(0.02)\n\
t0=time.time(); w=[0]*12\n\
while time.time()-t0 < 6:\n    c.sendall(b'x'*10)\n    try:\n        d=c.recv(100)\n        if d: w[min(int((time.time()-t0)*2),11)]+=1\n    except socket.timeout: pass\n    time.sleep(0.02)\n\
print(repr(t0), ' '.join(map(str,w)))\n";
    let _srv = bg(&h2, &["python3", "-c", server]);
    std::thread::sleep(Duration::from_millis(700));
    let cli = Command::new("ip")
        .args(["netns", "exec", &h1, "python3", "-c", client])
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    std::thread::sleep(Duration::from_millis(2500));
    let tc_before = lab.stats()["engines"]["tc_packets"].as_u64().unwrap_or(0);
    assert!(
        tc_before > 20,
        "the connection runs in the TC engine: {tc_before}"
    );
    // Replies now mark their connection; marked client traffic is dropped.
    let changed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for f in [
        "table=1,priority=20,in_port=p2,tcp,ct_state=+trk+est,actions=ct(commit,exec(set_field:0x1->ct_mark)),output:p1",
        "table=1,priority=20,in_port=p1,tcp,ct_state=+trk+est,ct_mark=0x1,actions=drop",
    ] {
        lab.req(Request::AddFlow {
            bridge: "br0".into(),
            flow: f.into(),
        });
    }
    let out = cli.wait_with_output().expect("client output");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut words = text.split_whitespace();
    let t0: f64 = words
        .next()
        .and_then(|w| w.parse().ok())
        .expect("client start");
    let windows: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
    assert_eq!(windows.len(), 12, "{text}");
    // The half-second window the change fell in, from the client's own
    // clock (a loaded machine starts python late: fixed windows would make
    // this test fail by chance).
    let k = (((changed - t0) * 2.0).floor().max(0.0) as usize).min(12);
    assert!(
        k + 2 < 12,
        "the change came too late to see its effect: {k} {windows:?}"
    );
    // Before the change the echoes flowed; from a second after it, none.
    assert!(
        windows[1.min(k)..k].iter().all(|n| *n > 0),
        "echoes before the change (window {k}): {windows:?}"
    );
    assert!(
        windows[k + 2..].iter().all(|n| *n == 0),
        "marked traffic must stop, in the kernel too (change in window {k}): {windows:?}"
    );
    let ct = conntrack(&lab);
    assert!(
        ct.iter()
            .any(|l| l.contains("dport=9000,") && l.contains("mark=1")),
        "{ct:#?}"
    );
}

/// ICMP errors about DNATed connections are translated back (OVS's
/// `nat_inner_packet`, as in its system-traffic.at "conntrack - ICMP
/// related with NAT"): h1 sends UDP on a connected socket to the virtual
/// address 198.18.0.100:53, DNATed to h2's port 9999 where nothing
/// listens. h2's port unreachable quotes 198.18.0.1 -> 198.18.0.2:9999;
/// the reverse direction's `ct(nat)` turns it into an error from the
/// virtual address quoting 198.18.0.1 -> 198.18.0.100:53, so h1's socket
/// gets ECONNREFUSED. Untranslated, h1 would find no socket for the quote
/// and the receive would time out.
#[test]
fn icmp_error_of_dnat_connection_refuses_the_client_socket() {
    if !privileged() {
        return;
    }
    let lab = Lab::up(
        "ie",
        "",
        &[
            "table=0,priority=10,arp,actions=normal",
            "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,nat)",
            "table=1,priority=1,actions=drop",
            "table=1,priority=10,in_port=p1,udp,nw_dst=198.18.0.100,tp_dst=53,ct_state=+trk+new,actions=ct(commit,nat(dst=198.18.0.2:9999)),output:p2",
            "table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2",
            "table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1",
            "table=1,priority=10,in_port=p2,icmp,ct_state=+trk+rel,actions=output:p1",
        ],
    );
    let h1 = lab.ns("ie1");
    // The virtual address resolves to h2's MAC on h1 (nobody owns it).
    vip_on(&lab, &h1, "ie2");
    // Nothing listens on h2:9999.
    let listening = lab.exec("ie2", &["ss", "-Hlun", "sport = :9999"]);
    assert!(listening.trim().is_empty(), "{listening}");
    let client = "import socket\n\
s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
s.connect(('198.18.0.100', 53)); s.settimeout(2); s.send(b'x')\n\
try:\n    s.recv(10); print('data')\n\
except ConnectionRefusedError: print('refused')\n\
except socket.timeout: print('timeout')\n";
    let mut outcomes = Vec::new();
    let refused = eventually(Duration::from_secs(15), || {
        let out = Command::new("ip")
            .args(["netns", "exec", &h1, "python3", "-c", client])
            .output()
            .expect("python3");
        let o = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let refused = o == "refused";
        outcomes.push(o);
        refused
    });
    let ct = conntrack(&lab);
    assert!(
        refused,
        "h1's connected UDP socket must see ECONNREFUSED: {outcomes:?}, {ct:#?}"
    );
    assert!(
        ct.iter().any(
            |l| l.starts_with("udp,orig=(src=198.18.0.1,dst=198.18.0.100,")
                && l.contains("reply=(src=198.18.0.2,dst=198.18.0.1,sport=9999,")
        ),
        "{ct:#?}"
    );
}

/// `n` fresh connections (`curl`) after a conntrack flush, in offload
/// mode `mode`: with `tc`, each is set up in the kernel (its SYN and at
/// most a stray ARP or final ACK in userspace, the rest in the TC engine);
/// with `none`, every packet crosses userspace.
fn counted_connections(lab: &Lab, h1: &str, url: &str, n: u64, mode: &str) {
    // The caller's earlier connections (the warm-up's) must have closed
    // first: curl returns before the server's FIN has crossed the switch,
    // and a FIN or last ACK crossing after the flush below opens an entry
    // picked up mid-stream, one connection too many (the suite saw 7 for
    // 6, 2026-12-05). TIME_WAIT: both FINs and the last ACK were seen.
    // Not fatal if they do not (a SYN of a first, refused attempt may
    // linger): the count the caller asserts names any difference.
    closed_conntrack(lab, None, |ct| {
        ct.iter()
            .filter(|l| l.starts_with("tcp,"))
            .map(|l| state_of(l))
            .collect()
    });
    lab.req(Request::FlushConntrack {
        bridge: "br0".into(),
        zone: None,
        filter: None,
    });
    let before = lab.stats();
    for _ in 0..n {
        assert_eq!(curl(h1, url, 3).as_deref(), Ok("200"), "{mode}");
    }
    let after = lab.stats();
    let d =
        |a: &str, b: &str| after[a][b].as_u64().unwrap_or(0) - before[a][b].as_u64().unwrap_or(0);
    let (user, tc, set_up) = (
        d("engines", "userspace_packets"),
        d("engines", "tc_packets"),
        d("ct_kernel", "set_up"),
    );
    eprintln!("{mode}: {n} connections: userspace {user} packets, tc {tc}, set up {set_up}");
    if mode == "tc" {
        assert_eq!(set_up, n, "each connection set up in the kernel: {after}");
        assert!(user <= 2 * n, "userspace packets {user}, tc {tc}");
        assert!(tc >= 6 * n, "userspace packets {user}, tc {tc}");
    } else {
        assert_eq!(set_up, 0);
        assert!(user >= 6 * n, "userspace packets {user}");
    }
}

/// The conntrack dump once the `n` connections `states` picks out of it
/// (any number: `None`) are all TIME_WAIT, or after 5 s whatever it shows
/// (the caller's asserts then name the difference). curl returns before the server's FIN has
/// crossed the switch, so a dump taken at once can show the last
/// connection CLOSING: with the connection in userspace the daemon is
/// usually faster than curl's exit, with its entries in the kernel the
/// dump's sync can come first (a failure seen in the suite, 2026-12-05).
fn closed_conntrack(
    lab: &Lab,
    n: Option<u64>,
    states: impl Fn(&[String]) -> Vec<String>,
) -> Vec<String> {
    let mut ct = Vec::new();
    let settled = eventually(Duration::from_secs(5), || {
        ct = conntrack(lab);
        let s = states(&ct);
        n.is_none_or(|n| s.len() as u64 == n) && s.iter().all(|s| s == "TIME_WAIT")
    });
    if !settled {
        eprintln!(
            "the 5-s wait for {n:?} TIME_WAIT connections ran out: {:?}",
            states(&ct)
        );
    }
    ct
}

/// The TCP state of a `dump-conntrack` line ("?" when it has none).
fn state_of(l: &str) -> String {
    l.split("state=")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or("?")
        .to_string()
}

/// The connections of `ct` to h2's port `port`, each as "state" with the
/// source port left out (it differs from run to run).
fn states_to(ct: &[String], port: u16) -> Vec<String> {
    let mut v: Vec<String> = ct
        .iter()
        .filter(|l| {
            l.starts_with("tcp,orig=(src=198.18.0.1,dst=198.18.0.2,")
                && l.contains(&format!("dport={port},"))
        })
        .map(|l| state_of(l))
        .collect();
    v.sort();
    v
}

/// The kernel entries (`established:` lines of `dump-dp-flows`) of
/// connections to or from port `port`.
fn kernel_entries(lab: &Lab, port: u16) -> usize {
    lab.dp_flows()
        .iter()
        .filter(|f| {
            let m = f["match"].as_str().unwrap_or("");
            m.starts_with("established:")
                && (m.contains(&format!("tp_dst={port}")) || m.contains(&format!("tp_src={port}")))
        })
        .count()
}

/// Issue 36, set-up in the kernel: once a first connection has cached the
/// flows, a short HTTP connection through the stateful firewall crosses
/// the daemon with its SYN only — the handshake, request, response and
/// close run in the TC engine — and still shows in `dump-conntrack`,
/// TIME_WAIT, as it does with `offload=none` (the differential). A
/// connection held open has kernel entries until `flush-conntrack`, and a
/// rule change removes them before it is acknowledged.
#[test]
fn short_connections_are_set_up_in_the_kernel() {
    if !privileged() || !common::have("curl") {
        if !common::have("curl") {
            notice("skipping: needs curl");
        }
        return;
    }
    let lab = Lab::up("ks", "", FIREWALL);
    // On by default (docs/conntrack.md); set here so the test holds
    // whatever the default. This test is the daemon's own set-up: set-up
    // in the BPF program (on by default too) has its own test below.
    set(&lab, "ct_setup", "on");
    set(&lab, "ct_setup_bpf", "off");
    let (h1, h2) = (lab.ns("ks1"), lab.ns("ks2"));
    let _web = http_server(&h2, "198.18.0.2");
    let url = "http://198.18.0.2:8080/";
    // The first connections go through userspace and cache the flows.
    assert!(
        eventually(Duration::from_secs(10), || curl(&h1, url, 2)
            .is_ok_and(|c| c == "200")),
        "curl h1 -> h2 through the stateful firewall"
    );
    assert_eq!(curl(&h1, url, 3).as_deref(), Ok("200"));
    let n = 5u64;
    let mut runs = Vec::new();
    for mode in ["tc", "none"] {
        set(&lab, "offload", mode);
        // A warm-up connection in this mode (the flows were flushed).
        assert_eq!(curl(&h1, url, 3).as_deref(), Ok("200"));
        counted_connections(&lab, &h1, url, n, mode);
        let ct = closed_conntrack(&lab, Some(n), |ct| states_to(ct, 8080));
        let states = states_to(&ct, 8080);
        assert_eq!(states.len() as u64, n, "{mode}: {ct:#?}");
        // Every packet credited to its connection, kernel ones included.
        for l in ct.iter().filter(|l| l.contains("dport=8080,")) {
            let orig = orig_packets(l);
            assert!(orig >= 5, "{mode}: {l}");
        }
        runs.push(states);
    }
    assert_eq!(runs[0], runs[1], "kernel set-up vs userspace");
    assert!(runs[0].iter().all(|s| s == "TIME_WAIT"), "{runs:?}");

    // A connection held open: entries until a flush, then none.
    set(&lab, "offload", "tc");
    let server = "import socket,time\n\
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
s.bind(('198.18.0.2', 9000)); s.listen(8)\n\
cs=[]\n\
while True:\n    c,_=s.accept(); c.sendall(b'hi'); cs.append(c)\n";
    let _srv = bg(&h2, &["python3", "-c", server]);
    let hold = |secs: u32| {
        bg(
            &h1,
            &[
                "python3",
                "-c",
                &format!(
                    "import socket,time\n\
for i in range(50):\n    try:\n        c=socket.create_connection(('198.18.0.2', 9000)); break\n    except OSError: time.sleep(0.1)\n\
c.recv(10); time.sleep({secs})\n"
                ),
            ],
        )
    };
    // The first one caches the flows of port 9000's connections.
    let _warm = hold(1);
    assert!(
        eventually(Duration::from_secs(10), || states_to(
            &conntrack(&lab),
            9000
        )
        .len()
            == 1),
        "{:#?}",
        conntrack(&lab)
    );
    std::thread::sleep(Duration::from_millis(1500));
    let _c = hold(30);
    assert!(
        eventually(Duration::from_secs(10), || kernel_entries(&lab, 9000) == 3),
        "a held connection's three entries: {:#?}",
        lab.dp_flows()
    );
    assert!(
        eventually(Duration::from_secs(5), || states_to(&conntrack(&lab), 9000)
            .contains(&"ESTABLISHED".to_string())),
        "{:#?}",
        conntrack(&lab)
    );
    lab.req(Request::FlushConntrack {
        bridge: "br0".into(),
        zone: None,
        filter: None,
    });
    assert_eq!(kernel_entries(&lab, 9000), 0, "{:#?}", lab.dp_flows());

    // Another, then a rule change that drops the server's replies: its
    // entries go before the change is acknowledged.
    let _c2 = hold(30);
    assert!(
        eventually(Duration::from_secs(10), || kernel_entries(&lab, 9000) == 3),
        "{:#?}",
        lab.dp_flows()
    );
    lab.req(Request::AddFlow {
        bridge: "br0".into(),
        flow: "table=1,priority=20,in_port=p2,tcp,tp_src=9000,ct_state=+trk+est,actions=drop"
            .into(),
    });
    let left = established_entries(&lab, "tp_src=9000");
    assert!(
        left.is_empty(),
        "the replies' entries must be gone: {left:#?}"
    );
}

/// The load balancer's connections to the VIP in `ct`: each as "state"
/// (the client's port left out), and the backends their replies came from.
fn lb_states(ct: &[String]) -> (Vec<String>, std::collections::BTreeSet<String>) {
    let lines: Vec<&String> = ct
        .iter()
        .filter(|l| {
            l.starts_with("tcp,orig=(src=198.18.0.1,dst=198.18.0.100,") && l.contains("dport=80,")
        })
        .collect();
    let mut states: Vec<String> = lines.iter().map(|l| state_of(l)).collect();
    states.sort();
    let backends = lines
        .iter()
        .filter_map(|l| {
            Some(
                l.split("reply=(src=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .to_string(),
            )
        })
        .collect();
    (states, backends)
}

/// The kernel entries of load-balanced connections: the clients' (to the
/// VIP) and the backends' (from port 8080).
fn lb_entries(lab: &Lab) -> usize {
    lab.dp_flows()
        .iter()
        .filter(|f| {
            let m = f["match"].as_str().unwrap_or("");
            m.starts_with("established:")
                && (m.contains("198.18.0.100") || m.contains("tp_src=8080"))
        })
        .count()
}

/// Issue 36 with DNAT, the bench's load balancer (`--scenario lb`): the
/// VIP's new connections go to a `select` group whose buckets commit them
/// with a backend's DNAT (address and port) and go on to table 2, which
/// rewrites the destination MAC. Once a first connection to a backend has
/// cached the flows, each short HTTP connection crosses the daemon with
/// its SYN only: the TC engine translates the rest both ways (curl's TCP
/// connection to VIP:80 only completes if the backends' answers arrive
/// from VIP:80), and `dump-conntrack` shows the same connections as with
/// `offload=none`. A held connection's entries go on `flush-conntrack`
/// and on a rule change.
#[test]
fn short_lb_connections_are_set_up_in_the_kernel() {
    if !privileged() || !common::have("curl") {
        if !common::have("curl") {
            notice("skipping: needs curl");
        }
        return;
    }
    let lab = Lab::up(
        "kn",
        "",
        &[
            "table=0,priority=1,actions=drop",
            "table=0,priority=10,arp,actions=normal",
            "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,nat)",
            "table=1,priority=1,actions=drop",
            "table=1,priority=10,ip,ct_state=+trk+est,actions=resubmit(,2)",
            "table=2,priority=1,actions=drop",
            "table=2,priority=10,ip,nw_dst=198.18.0.1,actions=output:p1",
        ],
    );
    let (h1, h2) = (lab.ns("kn1"), lab.ns("kn2"));
    let backends = ["198.18.0.10", "198.18.0.11", "198.18.0.12"];
    for a in backends {
        common::must(&[
            "ip",
            "netns",
            "exec",
            &h2,
            "ip",
            "addr",
            "add",
            &format!("{a}/24"),
            "dev",
            "eth0",
        ]);
    }
    // The VIP resolves to a MAC no host has; table 2 writes the backend's.
    common::must(&[
        "ip",
        "netns",
        "exec",
        &h1,
        "ip",
        "neigh",
        "replace",
        "198.18.0.100",
        "lladdr",
        "02:00:00:00:00:64",
        "dev",
        "eth0",
        "nud",
        "permanent",
    ]);
    let mac2 = lab.mac("kn2").map(|b| format!("{b:02x}")).join(":");
    let buckets: Vec<String> = backends
        .iter()
        .map(|b| format!("bucket=actions=ct(commit,nat(dst={b}:8080),table=2)"))
        .collect();
    lab.req(Request::AddGroup {
        bridge: "br0".into(),
        group: format!("group_id=1,type=select,{}", buckets.join(",")),
    });
    let mut flows = vec![
        "table=1,priority=20,in_port=p1,tcp,nw_dst=198.18.0.100,tp_dst=80,ct_state=+trk+new,actions=group:1"
            .to_string(),
    ];
    for b in backends {
        flows.push(format!(
            "table=2,priority=10,ip,nw_dst={b},actions=mod_dl_dst:{mac2},output:p2"
        ));
    }
    for f in flows {
        lab.req(Request::AddFlow {
            bridge: "br0".into(),
            flow: f,
        });
    }
    // Both on by default (docs/conntrack.md); set here so the test holds
    // whatever the default.
    for key in ["ct_setup", "ct_setup_nat"] {
        set(&lab, key, "on");
    }
    let _web = http_server(&h2, "0.0.0.0");
    let url = "http://198.18.0.100/";
    assert!(
        eventually(Duration::from_secs(10), || curl(&h1, url, 2)
            .is_ok_and(|c| c == "200")),
        "curl h1 -> VIP through the load balancer"
    );
    // Until every backend has had a connection through userspace in this
    // mode (the flows were flushed by the mode change): then the
    // originator's flows of every backend are cached.
    let warm = |mode: &str| {
        // Connections of before the mode change would count backends
        // whose flows went with it.
        lab.req(Request::FlushConntrack {
            bridge: "br0".into(),
            zone: None,
            filter: None,
        });
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..60 {
            assert_eq!(curl(&h1, url, 3).as_deref(), Ok("200"), "{mode} warm-up");
            seen.extend(lb_states(&conntrack(&lab)).1);
            if seen.len() == backends.len() {
                return;
            }
        }
        panic!("{mode}: not every backend was chosen: {seen:?}");
    };
    let n = 6u64;
    let mut runs = Vec::new();
    for mode in ["tc", "none"] {
        set(&lab, "offload", mode);
        warm(mode);
        counted_connections(&lab, &h1, url, n, mode);
        let ct = closed_conntrack(&lab, Some(n), |ct| lb_states(ct).0);
        let (states, seen) = lab_states_checked(&ct, n, mode);
        assert!(
            seen.iter().all(|b| backends.contains(&b.as_str())),
            "{mode}: replies from the backends: {ct:#?}"
        );
        runs.push(states);
    }
    assert_eq!(runs[0], runs[1], "kernel set-up vs userspace");
    assert!(runs[0].iter().all(|s| s == "TIME_WAIT"), "{runs:?}");

    // A held connection (opened, no request sent): its three entries
    // until a flush, then none.
    set(&lab, "offload", "tc");
    warm("tc");
    std::thread::sleep(Duration::from_millis(1500));
    let hold = || {
        bg(
            &h1,
            &[
                "python3",
                "-c",
                "import socket,time\n\
c=socket.create_connection(('198.18.0.100', 80)); time.sleep(30)\n",
            ],
        )
    };
    let _c = hold();
    assert!(
        eventually(Duration::from_secs(10), || lb_entries(&lab) == 3),
        "a held connection's three entries: {:#?} {}",
        lab.dp_flows(),
        lab.stats()["ct_kernel"]
    );
    assert!(
        eventually(Duration::from_secs(5), || lb_states(&conntrack(&lab))
            .0
            .contains(&"ESTABLISHED".to_string())),
        "{:#?}",
        conntrack(&lab)
    );
    lab.req(Request::FlushConntrack {
        bridge: "br0".into(),
        zone: None,
        filter: None,
    });
    assert_eq!(lb_entries(&lab), 0, "{:#?}", lab.dp_flows());

    // Another, then a rule change that drops the backends' replies: their
    // entries go before the change is acknowledged.
    let _c2 = hold();
    assert!(
        eventually(Duration::from_secs(10), || lb_entries(&lab) == 3),
        "{:#?}",
        lab.dp_flows()
    );
    lab.req(Request::AddFlow {
        bridge: "br0".into(),
        flow: "table=1,priority=20,in_port=p2,tcp,ct_state=+trk+est,actions=drop".into(),
    });
    let left = established_entries(&lab, "tp_src=8080");
    assert!(
        left.is_empty(),
        "the replies' entries must be gone: {left:#?}"
    );
}

/// `nicflow set br0 KEY=VALUE`.
fn set(lab: &Lab, key: &str, value: &str) {
    lab.req(Request::Set {
        bridge: "br0".into(),
        key: key.into(),
        value: value.into(),
    });
}

/// The packets of a `dump-conntrack` line's original direction (0 when
/// the line has none).
fn orig_packets(l: &str) -> u64 {
    l.split("packets=")
        .nth(1)
        .and_then(|p| p.split(',').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// The kernel entries of established connections (`established:` flows)
/// whose match mentions `needle`.
fn established_entries(lab: &Lab, needle: &str) -> Vec<serde_json::Value> {
    lab.dp_flows()
        .into_iter()
        .filter(|f| {
            f["match"]
                .as_str()
                .is_some_and(|m| m.starts_with("established:") && m.contains(needle))
        })
        .collect()
}

/// [`lb_states`] of `ct`, checked: `n` connections, each with every
/// packet credited (kernel ones included).
fn lab_states_checked(
    ct: &[String],
    n: u64,
    mode: &str,
) -> (Vec<String>, std::collections::BTreeSet<String>) {
    let (states, seen) = lb_states(ct);
    assert_eq!(states.len() as u64, n, "{mode}: {ct:#?}");
    for l in ct.iter().filter(|l| l.contains("dst=198.18.0.100,")) {
        let orig = orig_packets(l);
        assert!(orig >= 5, "{mode}: {l}");
    }
    (states, seen)
}

/// The stateful firewall with the connection's zone and mark: committed
/// in zone 5 with mark 42, the replies and later segments pass only with
/// that mark.
const FIREWALL_ZONE_MARK: &[&str] = &[
    "table=0,priority=1,actions=drop",
    "table=0,priority=10,arp,actions=normal",
    "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=5)",
    "table=1,priority=1,actions=drop",
    "table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,actions=ct(commit,zone=5,exec(set_field:42->ct_mark)),output:p2",
    "table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,ct_mark=42,actions=output:p2",
    "table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,ct_mark=42,actions=output:p1",
    "table=1,priority=10,ip,ct_state=+trk+rel,actions=normal",
];

/// A counter of `stats`' `ct_kernel` (or `engines`) section.
fn counter(stats: &serde_json::Value, section: &str, key: &str) -> u64 {
    stats[section][key].as_u64().unwrap_or(0)
}

/// The TCP connections of `ct` to h2's port 8080 (zone 5), as "state
/// zone mark" with the source port left out.
fn zoned_states(ct: &[String]) -> Vec<String> {
    let mut v: Vec<String> = ct
        .iter()
        .filter(|l| {
            l.starts_with("tcp,orig=(src=198.18.0.1,dst=198.18.0.2,") && l.contains("dport=8080,")
        })
        .map(|l| {
            let zone = l.contains(",zone=5,");
            let mark = l.contains(",mark=42,");
            format!("{} zone5:{zone} mark42:{mark}", state_of(l))
        })
        .collect();
    v.sort();
    v
}

/// [`zoned_states`]' TCP states alone (what [`closed_conntrack`] waits on).
fn zoned_tcp_states(ct: &[String]) -> Vec<String> {
    zoned_states(ct)
        .into_iter()
        .map(|s| s.split(' ').next().unwrap_or("?").to_string())
        .collect()
}

/// Issue 36, set-up in the BPF program (`ct_setup_bpf`): once a
/// connection set up by the daemon has written its template, later short
/// connections through the firewall never reach the daemon — the TC
/// program sets each up at its SYN (`prog_set_up`, `bpf_set_up`; the
/// daemon set up none and saw almost no frame) — and show in
/// `dump-conntrack` in zone 5 with mark 42, TIME_WAIT, every packet
/// credited, exactly as with the setting off (the differential). A rule
/// change removes the template before it is acknowledged: the next SYN
/// goes up (here: to a new rule that drops it). With the program's
/// reports left unread (`hold`) its ring buffer (one page) fills and
/// the SYNs go up instead; read again, every connection the program set
/// up reaches the tracker.
#[test]
fn short_connections_are_set_up_by_the_bpf_program() {
    if !privileged() || !common::have("curl") {
        if !common::have("curl") {
            notice("skipping: needs curl");
        }
        return;
    }
    let lab = Lab::up(
        "kp",
        "offload_options = { ct_events_bytes = \"4096\" }",
        FIREWALL_ZONE_MARK,
    );
    set(&lab, "ct_setup", "on");
    let (h1, h2) = (lab.ns("kp1"), lab.ns("kp2"));
    let _web = http_server(&h2, "198.18.0.2");
    let url = "http://198.18.0.2:8080/";
    assert!(
        eventually(Duration::from_secs(10), || curl(&h1, url, 2)
            .is_ok_and(|c| c == "200")),
        "curl h1 -> h2 through the stateful firewall"
    );
    let n = 5u64;
    let mut runs = Vec::new();
    for bpf in ["on", "off"] {
        set(&lab, "ct_setup_bpf", bpf);
        // Warm-ups: the flows cached, a daemon set-up (which writes the
        // template when on).
        for _ in 0..2 {
            assert_eq!(curl(&h1, url, 3).as_deref(), Ok("200"), "{bpf}");
        }
        closed_conntrack(&lab, None, zoned_tcp_states);
        lab.req(Request::FlushConntrack {
            bridge: "br0".into(),
            zone: None,
            filter: None,
        });
        let before = lab.stats();
        for _ in 0..n {
            assert_eq!(curl(&h1, url, 3).as_deref(), Ok("200"), "{bpf}");
        }
        let ct = closed_conntrack(&lab, Some(n), zoned_tcp_states);
        let after = lab.stats();
        let d = |s: &str, k: &str| counter(&after, s, k) - counter(&before, s, k);
        let (user, tc) = (
            d("engines", "userspace_packets"),
            d("engines", "tc_packets"),
        );
        let (daemon, bpf_n, prog) = (
            d("ct_kernel", "set_up"),
            d("ct_kernel", "bpf_set_up"),
            d("ct_kernel", "prog_set_up"),
        );
        eprintln!(
            "ct_setup_bpf={bpf}: {n} connections: userspace {user} packets, tc {tc}, \
             daemon set-ups {daemon}, program set-ups {prog} (taken in {bpf_n})"
        );
        if bpf == "on" {
            assert_eq!(prog, n, "the program set each up: {after}");
            assert_eq!(bpf_n, n, "and the daemon took each in: {after}");
            assert_eq!(daemon, 0, "no SYN set up by the daemon: {after}");
            assert!(user < n, "userspace packets {user}, tc {tc}");
            assert!(counter(&after, "ct_kernel", "templates") >= 1, "{after}");
        } else {
            assert_eq!(prog + bpf_n, 0, "{after}");
            assert_eq!(daemon, n, "{after}");
            assert_eq!(counter(&after, "ct_kernel", "templates"), 0, "{after}");
        }
        assert_eq!(counter(&after, "ct_kernel", "bpf_undone"), 0, "{after}");
        let states = zoned_states(&ct);
        assert_eq!(states.len() as u64, n, "{bpf}: {ct:#?}");
        for l in ct.iter().filter(|l| l.contains("dport=8080,")) {
            assert!(orig_packets(l) >= 5, "{bpf}: {l}");
        }
        runs.push(states);
    }
    assert_eq!(runs[0], runs[1], "set-up in the program vs by the daemon");
    assert!(
        runs[0]
            .iter()
            .all(|s| s == "TIME_WAIT zone5:true mark42:true"),
        "{runs:?}"
    );

    // A rule change: new connections to 8080 are dropped. The template
    // goes before the change is acknowledged, so the next SYN reaches the
    // new rule (in the program it would still be forwarded).
    set(&lab, "ct_setup_bpf", "on");
    for _ in 0..2 {
        assert_eq!(curl(&h1, url, 3).as_deref(), Ok("200"));
    }
    let s = lab.stats();
    assert!(counter(&s, "ct_kernel", "templates") >= 1, "{s}");
    lab.req(Request::AddFlow {
        bridge: "br0".into(),
        flow: "table=1,priority=20,in_port=p1,tcp,tp_dst=8080,ct_state=+trk+new,actions=drop"
            .into(),
    });
    let s = lab.stats();
    assert_eq!(counter(&s, "ct_kernel", "templates"), 0, "{s}");
    assert!(curl(&h1, url, 2).is_err(), "the new rule drops the SYN");
    let s2 = lab.stats();
    assert_eq!(
        counter(&s2, "ct_kernel", "prog_set_up"),
        counter(&s, "ct_kernel", "prog_set_up"),
        "{s2}"
    );
    lab.req(Request::DelFlows {
        bridge: "br0".into(),
        filter: Some("table=1,in_port=p1,tcp,tp_dst=8080".into()),
    });

    // The ring buffer full: reports left unread, the SYNs beyond one
    // page of them go up (and are set up by the daemon).
    for _ in 0..2 {
        assert_eq!(curl(&h1, url, 3).as_deref(), Ok("200"));
    }
    closed_conntrack(&lab, None, zoned_tcp_states);
    lab.req(Request::FlushConntrack {
        bridge: "br0".into(),
        zone: None,
        filter: None,
    });
    set(&lab, "ct_setup_bpf", "hold");
    let before = lab.stats();
    let m = 24u64;
    for _ in 0..m {
        assert_eq!(curl(&h1, url, 3).as_deref(), Ok("200"));
    }
    let held = lab.stats();
    let d = |a: &serde_json::Value, k: &str| {
        counter(a, "ct_kernel", k) - counter(&before, "ct_kernel", k)
    };
    let (prog, full, daemon) = (
        d(&held, "prog_set_up"),
        d(&held, "prog_ring_full"),
        d(&held, "set_up"),
    );
    eprintln!("held: program set-ups {prog}, ring full {full}, daemon set-ups {daemon}");
    assert!(prog >= 1 && prog < m, "{held}");
    assert!(full >= 1, "the ring filled: {held}");
    assert_eq!(prog + daemon, m, "each SYN set up once: {held}");
    set(&lab, "ct_setup_bpf", "on");
    let ct = closed_conntrack(&lab, Some(m), zoned_tcp_states);
    let after = lab.stats();
    assert_eq!(
        d(&after, "bpf_set_up"),
        prog,
        "every report taken in: {after}"
    );
    assert_eq!(zoned_states(&ct).len() as u64, m, "{ct:#?}");
}
