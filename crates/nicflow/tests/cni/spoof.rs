//! Anti-spoofing on every CNI attachment (issue 28, item 3): a pod that
//! takes a peer's address or MAC does not get past the peer's policy, its
//! gratuitous ARP does not reach other neighbour tables, IPv6 from a
//! wrong source is dropped, and a policed pod gets no IPv6 at all (IPv6
//! policy is not built, so it must not fail open).
//!
//! ```text
//!   sw nfgw0 198.19.50.1 --+
//!   p2 eth0 (allowed)    --+ br0 --+-- p1 eth0: policy: from p2's address, UDP 9000
//!   p3 eth0 (attacker)   --+
//! ```
//!
//! Receivers log every datagram (`SOURCE PAYLOAD`) to a file of the lab, so
//! the test sees what arrived and from where.

use super::common::NsLab;
use super::{addr_of, can_run, gateway_port, netns_path, rules_with, with_prev, Cni};
use serde_json::{json, Value};
use std::path::PathBuf;

/// UDP receivers in node `n`: IPv4 on 9000, IPv6 on 9001 (v6 only), each
/// datagram appended to the returned file as `SOURCE PAYLOAD`.
fn receiver(lab: &NsLab, n: &str) -> (super::Bg, PathBuf) {
    let log = lab.dir().join(format!("recv-{n}.log"));
    std::fs::write(&log, "").unwrap();
    let code = format!(
        "import socket,select\n\
         a=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); a.bind(('0.0.0.0',9000))\n\
         b=socket.socket(socket.AF_INET6,socket.SOCK_DGRAM)\n\
         b.setsockopt(socket.IPPROTO_IPV6,socket.IPV6_V6ONLY,1); b.bind(('::',9001))\n\
         f=open('{}','a',buffering=1)\n\
         while True:\n r,_,_=select.select([a,b],[],[])\n for s in r:\n  d,x=s.recvfrom(2048)\n  \
         f.write(x[0].split('%')[0]+' '+d.decode()+'\\n')\n",
        log.display()
    );
    let b = super::bg(lab, n, &["python3", "-c", &code]);
    let t0 = std::time::Instant::now();
    while !lab
        .exec(n, &["ss", "-Hlun", "sport = :9001"])
        .is_ok_and(|o| !o.trim().is_empty())
    {
        assert!(t0.elapsed().as_secs() < 10, "no receiver in {n}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    (b, log)
}

/// One datagram `payload` from node `n` (source `src` if given, bound
/// with IP_FREEBIND/IPV6_FREEBIND) to `dst` (a link-local one through
/// eth0), then a moment for it to arrive.
fn send(lab: &NsLab, n: &str, src: Option<&str>, dst: &str, payload: &str) {
    let (fam, port) = if dst.contains(':') {
        ("AF_INET6", 9001)
    } else {
        ("AF_INET", 9000)
    };
    let code = format!(
        "import socket\n\
         fam=socket.{fam}; v6=fam==socket.AF_INET6\n\
         s=socket.socket(fam,socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.IPPROTO_IPV6 if v6 else socket.IPPROTO_IP, 78 if v6 else 15, 1)\n\
         i=socket.if_nametoindex('eth0')\n\
         src={src:?}\n\
         if src: s.bind((src,0,0,i) if v6 else (src,0))\n\
         s.sendto(b'{payload}',('{dst}',{port},0,i) if v6 else ('{dst}',{port}))\n",
        src = src.unwrap_or("")
    );
    lab.must(n, &["python3", "-c", &code]);
    std::thread::sleep(std::time::Duration::from_millis(600));
}

fn got(log: &PathBuf) -> String {
    std::fs::read_to_string(log).unwrap()
}

/// A gratuitous ARP from node `n` claiming `ip` for `mac` (a request and
/// a reply, both broadcast), written on a packet socket: what a pod with
/// CAP_NET_RAW can send whatever its interface's addresses.
fn garp(lab: &NsLab, n: &str, mac: &str, ip: &str) {
    let code = format!(
        "import socket\n\
         m=bytes.fromhex('{m}'); a=socket.inet_aton('{ip}')\n\
         s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW); s.bind(('eth0',0))\n\
         for op,tha in ((1,b'\\0'*6),(2,b'\\xff'*6)):\n \
         s.send(b'\\xff'*6+m+b'\\x08\\x06'+b'\\x00\\x01\\x08\\x00\\x06\\x04'+bytes([0,op])+m+a+tha+a)\n",
        m = mac.replace(':', "")
    );
    lab.must(n, &["python3", "-c", &code]);
    std::thread::sleep(std::time::Duration::from_millis(500));
}

/// Packets counted by the drop rules among `rules`.
fn dropped(rules: &[String]) -> u64 {
    rules
        .iter()
        .filter(|l| l.ends_with("actions=drop"))
        .filter_map(|l| {
            let n = l.split("n_packets=").nth(1)?;
            n.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn mac_of(r: &Value) -> String {
    r["interfaces"][0]["mac"].as_str().unwrap().to_string()
}

/// The EUI-64 link-local address of `mac`.
fn link_local(mac: &str) -> String {
    nicflow::cni::portsec::link_local(nicflow::cni::portsec::parse_mac(mac).unwrap()).to_string()
}

/// Wait until `eth0` of node `n` has link-local `ll` usable (not tentative).
fn wait_ll(lab: &NsLab, n: &str, ll: &str) {
    let t0 = std::time::Instant::now();
    loop {
        let a = lab.must(n, &["ip", "-6", "addr", "show", "dev", "eth0"]);
        if a.contains(ll) && !a.contains("tentative") {
            return;
        }
        assert!(t0.elapsed().as_secs() < 10, "{n}: no {ll}: {a}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn cni_anti_spoofing() {
    if !can_run() {
        return;
    }
    let _serial = super::serial();
    for t in ["python3", "ss"] {
        if !super::common::have(t) {
            super::common::skipped(&format!("`{t}` not installed"));
            return;
        }
    }
    let mut lab = NsLab::new("nfcni", "s", &["sw", "p1", "p2", "p3"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    gateway_port(&lab, "br0", "nfgw0", "198.19.50.1/24");
    let cni = Cni::new(&lab);
    let mut plain = super::net_conf(&lab, "1.0.0");
    plain["ipam"]["routes"] = json!([]);
    let (p1, p2, p3) = (
        netns_path(&lab, "p1"),
        netns_path(&lab, "p2"),
        netns_path(&lab, "p3"),
    );
    let r2 = cni.must(&lab, "ADD", "pod2", Some(&p2), &plain);
    let r3 = cni.must(&lab, "ADD", "pod3", Some(&p3), &plain);
    let (a2, a3) = (addr_of(&r2), addr_of(&r3));
    let (m2, m3) = (mac_of(&r2), mac_of(&r3));
    let mut policed = plain.clone();
    policed["runtimeConfig"] = json!({ "networkPolicy": { "ingress": [
        { "from": [{ "ipBlock": { "cidr": format!("{a2}/32") } }],
          "ports": [{ "protocol": "UDP", "port": 9000 }] } ] } });
    let r1 = cni.must(&lab, "ADD", "pod1", Some(&p1), &policed);
    let (a1, m1) = (addr_of(&r1), mac_of(&r1));
    for (id, p, c, r) in [
        ("pod1", &p1, &policed, &r1),
        ("pod2", &p2, &plain, &r2),
        ("pod3", &p3, &plain, &r3),
    ] {
        cni.must(&lab, "CHECK", id, Some(p), &with_prev(c, r));
    }
    let cookie3 = nicflow::cni::policy::cookie(lab.prefix(), "pod3", "eth0");
    let cookie1 = nicflow::cni::policy::cookie(lab.prefix(), "pod1", "eth0");
    eprintln!("pod3 rules:\n{}", rules_with(&lab, cookie3).join("\n"));
    let (_r1, log1) = receiver(&lab, "p1");
    let (_r2, log2) = receiver(&lab, "p2");

    // The allowed peer gets through.
    send(&lab, "p2", None, &a1, "legit1");
    assert!(
        got(&log1).contains(&format!("{a2} legit1")),
        "{}\n{}",
        got(&log1),
        lab.daemon_log()
    );

    // (3a) p3 takes p2's address (and knows p1's MAC, so no ARP is
    // needed): its datagram from p2's address must not arrive.
    lab.must(
        "p3",
        &["ip", "addr", "add", &format!("{a2}/32"), "dev", "eth0"],
    );
    lab.must(
        "p3",
        &["ip", "neigh", "replace", &a1, "lladdr", &m1, "dev", "eth0"],
    );
    let before = dropped(&rules_with(&lab, cookie3));
    send(&lab, "p3", Some(&a2), &a1, "spoof-ip");
    assert!(!got(&log1).contains("spoof-ip"), "{}", got(&log1));
    let after = dropped(&rules_with(&lab, cookie3));
    assert!(after > before, "the drop is counted: {before} -> {after}");
    lab.must(
        "p3",
        &["ip", "addr", "del", &format!("{a2}/32"), "dev", "eth0"],
    );

    // (3b) A policed pod has no IPv6: none on its interface, none in
    // through the switch even when the pod turns IPv6 back on, none out.
    let ll1 = link_local(&m1);
    let a = lab.must("p1", &["ip", "-6", "addr", "show", "dev", "eth0"]);
    assert!(!a.contains("inet6"), "policed pod has IPv6: {a}");
    lab.must(
        "p1",
        &["sysctl", "-qw", "net.ipv6.conf.eth0.disable_ipv6=0"],
    );
    wait_ll(&lab, "p1", &ll1);
    lab.must(
        "p2",
        &[
            "ip", "-6", "neigh", "replace", &ll1, "lladdr", &m1, "dev", "eth0",
        ],
    );
    send(&lab, "p2", None, &ll1, "v6-in");
    assert!(!got(&log1).contains("v6-in"), "{}", got(&log1));
    let ll2 = link_local(&m2);
    wait_ll(&lab, "p2", &ll2);
    lab.must(
        "p1",
        &[
            "ip", "-6", "neigh", "replace", &ll2, "lladdr", &m2, "dev", "eth0",
        ],
    );
    send(&lab, "p1", None, &ll2, "v6-out");
    assert!(!got(&log2).contains("v6-out"), "{}", got(&log2));
    assert!(
        rules_with(&lab, cookie1)
            .iter()
            .any(|l| l.contains("ipv6") && l.ends_with("drop") && !l.contains("n_packets=0,")),
        "{:?}",
        rules_with(&lab, cookie1)
    );

    // IPv6 of unpoliced pods works from their own link-local, not from
    // another source.
    let ll3 = link_local(&m3);
    wait_ll(&lab, "p3", &ll3);
    lab.must(
        "p3",
        &[
            "ip", "-6", "neigh", "replace", &ll2, "lladdr", &m2, "dev", "eth0",
        ],
    );
    send(&lab, "p3", None, &ll2, "v6-ok");
    assert!(
        got(&log2).contains(&format!("{ll3} v6-ok")),
        "{}\n{}",
        got(&log2),
        lab.daemon_log()
    );
    for src in ["fe80::bad", "2001:db8:5::3"] {
        lab.must(
            "p3",
            &[
                "ip",
                "addr",
                "add",
                &format!("{src}/64"),
                "dev",
                "eth0",
                "nodad",
            ],
        );
        send(&lab, "p3", Some(src), &ll2, "v6-spoof");
        assert!(!got(&log2).contains("v6-spoof"), "{src}: {}", got(&log2));
        lab.must(
            "p3",
            &["ip", "addr", "del", &format!("{src}/64"), "dev", "eth0"],
        );
    }

    // (3a) p3 takes p2's MAC as well: still nothing arrives, and the
    // bridge does not learn p2's MAC on p3's port.
    lab.must("p3", &["ip", "link", "set", "eth0", "address", &m2]);
    lab.must(
        "p3",
        &["ip", "addr", "add", &format!("{a2}/32"), "dev", "eth0"],
    );
    send(&lab, "p3", Some(&a2), &a1, "spoof-mac");
    assert!(!got(&log1).contains("spoof-mac"), "{}", got(&log1));
    lab.must(
        "p3",
        &["ip", "addr", "del", &format!("{a2}/32"), "dev", "eth0"],
    );
    lab.must("p3", &["ip", "link", "set", "eth0", "address", &m3]);

    // ARP spoofing: with the node and p1 holding p2's MAC for p2's
    // address, p3's gratuitous ARP for that address changes neither.
    lab.ping("sw", &a2)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    lab.ping("p1", &a2).unwrap();
    // Past the neighbour lock time (1 s), so an update would be taken.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    garp(&lab, "p3", &m3, &a2);
    for n in ["sw", "p1"] {
        let nb = lab.must(n, &["ip", "neigh", "show", &a2]);
        assert!(
            nb.contains(&m2) && !nb.contains(&m3),
            "{n}'s neighbour entry for {a2} poisoned: {nb}"
        );
    }

    // The allowed peer still gets through, and so does the attacker with
    // its own address to a pod without a policy.
    send(&lab, "p2", None, &a1, "legit2");
    assert!(
        got(&log1).contains(&format!("{a2} legit2")),
        "{}",
        got(&log1)
    );
    lab.ping("p3", &a2)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    let _ = a3;

    // DEL removes every rule of the attachments.
    for (id, p, c) in [
        ("pod1", &p1, &policed),
        ("pod2", &p2, &plain),
        ("pod3", &p3, &plain),
    ] {
        cni.must(&lab, "DEL", id, Some(p), c);
    }
    let left: Vec<String> = lab
        .cli(&["dump-flows", "br0"])
        .unwrap()
        .lines()
        .filter(|l| l.contains("cookie=0xcf"))
        .map(str::to_string)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
