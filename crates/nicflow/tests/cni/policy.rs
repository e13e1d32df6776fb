//! Pod network policy: NetworkPolicy-shaped ingress allow rules (given to
//! one pod through `runtimeConfig.networkPolicy`) become conntrack flow
//! rules on br0 at ADD, under a cookie of the attachment, and go at DEL.
//!
//! ```text
//!   sw nfgw0 198.19.50.1 --+
//!   p2 eth0 (allowed)    --+ br0 --+-- p1 eth0: servers on 8080 and 8081, policy:
//!   p3 eth0 (excepted)   --+       |     from 198.19.50.0/24 except p3, TCP 8080
//!                                  |     from 198.19.50.1/32, any port
//! ```

use super::common::NsLab;
use super::{
    addr_of, can_run, curl, gateway_port, http_server, netns_path, rules_with, vfs, with_prev, Cni,
};
use serde_json::{json, Value};

fn conf(lab: &NsLab) -> Value {
    let mut c = super::net_conf(lab, "1.0.0");
    c["ipam"]["routes"] = json!([]);
    c
}

/// A UDP echo server on `port` in node `n`.
fn udp_echo(lab: &NsLab, n: &str, port: u16) -> super::Bg {
    let code = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.bind(('0.0.0.0',{port}))\nwhile True:\n d,a=s.recvfrom(2048)\n s.sendto(d,a)\n"
    );
    let b = super::bg(lab, n, &["python3", "-c", &code]);
    let t0 = std::time::Instant::now();
    while !lab
        .exec(n, &["ss", "-Hlun", &format!("sport = :{port}")])
        .is_ok_and(|o| !o.trim().is_empty())
    {
        assert!(t0.elapsed().as_secs() < 10, "no UDP server on {port}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    b
}

/// One datagram from node `n` to `addr:port` on a connected socket:
/// `echo` (answered), `refused` (an ICMP port unreachable came back) or
/// `timeout`.
fn udp_probe(lab: &NsLab, n: &str, addr: &str, port: u16) -> String {
    let code = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(1.5)\n\
         s.connect(('{addr}',{port}))\ns.send(b'x')\ntry:\n s.recv(2048); print('echo')\n\
         except ConnectionRefusedError: print('refused')\nexcept socket.timeout: print('timeout')\n"
    );
    lab.must(n, &["python3", "-c", &code]).trim().to_string()
}

/// br0's rules without their counters, to compare before and after.
fn all_rules(lab: &NsLab) -> Vec<String> {
    lab.cli(&["dump-flows", "br0"])
        .unwrap()
        .lines()
        .map(|l| {
            l.split([' ', ','])
                .filter(|t| {
                    ![
                        "duration=",
                        "n_packets=",
                        "n_bytes=",
                        "idle_age=",
                        "hard_age=",
                    ]
                    .iter()
                    .any(|p| t.starts_with(p))
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn cni_ingress_policy() {
    if !can_run() {
        return;
    }
    let _serial = super::serial();
    for t in ["curl", "python3", "ss"] {
        if !super::common::have(t) {
            super::common::skipped(&format!("`{t}` not installed"));
            return;
        }
    }
    let mut lab = NsLab::new("nfcni", "p", &["sw", "p1", "p2", "p3"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    gateway_port(&lab, "br0", "nfgw0", "198.19.50.1/24");
    let cni = Cni::new(&lab);
    let plain = conf(&lab);
    let (p1, p2, p3) = (
        netns_path(&lab, "p1"),
        netns_path(&lab, "p2"),
        netns_path(&lab, "p3"),
    );
    // The bridge's rules with no pod (every pod has anti-spoofing rules).
    let empty = all_rules(&lab);
    let r2 = cni.must(&lab, "ADD", "pod2", Some(&p2), &plain);
    let r3 = cni.must(&lab, "ADD", "pod3", Some(&p3), &plain);
    let (a2, a3) = (addr_of(&r2), addr_of(&r3));
    let before = all_rules(&lab);

    // A bad policy: code 7 naming the field, and nothing changed.
    let mut bad = plain.clone();
    bad["runtimeConfig"] = json!({ "networkPolicy": { "ingress": [
        { "from": [{ "ipBlock": { "cidr": "198.19.50.0/24", "except": ["198.20.0.1/32"] } }] }
    ]}});
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &bad);
    assert!(!ok && e["code"] == 7, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("`runtimeConfig.networkPolicy.ingress[0].from[0].ipBlock.except[0]`"),
        "{e}"
    );
    bad["runtimeConfig"] =
        json!({ "networkPolicy": { "ingress": [{ "ports": [{ "port": "http" }] }] } });
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &bad);
    assert!(!ok && e["code"] == 7, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("ports[0].port"), "{e}");
    assert_eq!(vfs(&lab).len(), 2);
    assert!(!lab.link_exists("p1", "eth0"));
    assert_eq!(all_rules(&lab), before);
    assert_eq!(super::ipam_files(&lab).len(), 2);

    // pod1 with its policy.
    let mut with_policy = plain.clone();
    with_policy["runtimeConfig"] = json!({ "networkPolicy": { "ingress": [
        { "from": [{ "ipBlock": { "cidr": "198.19.50.0/24", "except": [format!("{a3}/32")] } }],
          "ports": [{ "protocol": "TCP", "port": 8080 }, { "protocol": "UDP", "port": 9000 }] },
        { "from": [{ "ipBlock": { "cidr": "198.19.50.1/32" } }] }
    ]}});
    let r1 = cni.must(&lab, "ADD", "pod1", Some(&p1), &with_policy);
    let a1 = addr_of(&r1);
    let cookie = nicflow::cni::policy::cookie(lab.prefix(), "pod1", "eth0");
    let rules = rules_with(&lab, cookie);
    eprintln!("policy rules:\n{}", rules.join("\n"));
    assert!(
        rules
            .iter()
            .any(|l| l.contains("ct(commit)") && l.contains("tp_dst=8080")),
        "{rules:?}"
    );
    cni.must(
        &lab,
        "CHECK",
        "pod1",
        Some(&p1),
        &with_prev(&with_policy, &r1),
    );

    let _s1 = http_server(&lab, "p1", 8080);
    let _s2 = http_server(&lab, "p1", 8081);
    let _s3 = http_server(&lab, "p2", 8080);
    let _u1 = udp_echo(&lab, "p1", 9000);
    let _u2 = udp_echo(&lab, "p1", 9001);
    let url = |a: &str, port: u16| format!("http://{a}:{port}/");
    // Allowed source and port.
    assert_eq!(
        curl(&lab, "p2", &url(&a1, 8080), 5)
            .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log())),
        "200"
    );
    // Allowed source, port not allowed: the SYN is dropped (timeout).
    let e = curl(&lab, "p2", &url(&a1, 8081), 2).unwrap_err();
    assert!(e.contains("exit Some(28)"), "{e}");
    // ICMP is not allowed either.
    assert!(!lab.pings("p2", &a1, 2));
    // The excepted source, allowed port: dropped.
    let e = curl(&lab, "p3", &url(&a1, 8080), 2).unwrap_err();
    assert!(e.contains("exit Some(28)"), "{e}");
    // The node's address may use any port (the second rule).
    assert_eq!(curl(&lab, "sw", &url(&a1, 8081), 5).unwrap(), "200");
    // The pod's own connections: egress unaffected, replies come back.
    assert_eq!(curl(&lab, "p1", &url(&a2, 8080), 5).unwrap(), "200");
    assert!(lab.pings("p1", &a3, 2), "{}", lab.daemon_log());
    // UDP: the allowed port answers, another is dropped (no answer, no
    // ICMP error); the ICMP port unreachable for the pod's own datagram to
    // a closed port comes back (+rel), so its socket sees the refusal.
    assert_eq!(udp_probe(&lab, "p2", &a1, 9000), "echo");
    assert_eq!(udp_probe(&lab, "p2", &a1, 9001), "timeout");
    assert_eq!(udp_probe(&lab, "p3", &a1, 9000), "timeout");
    assert_eq!(udp_probe(&lab, "p1", &a2, 9999), "refused");
    // Other pods are unaffected by pod1's policy.
    assert!(lab.pings("p3", &a2, 2));
    // The allowed connection again, after the denied ones (conntrack state
    // for the denied ones was never committed).
    assert_eq!(curl(&lab, "p2", &url(&a1, 8080), 5).unwrap(), "200");
    let ct = lab.cli(&["dump-conntrack", "br0"]).unwrap();
    assert!(ct.contains(&format!("dst={a1}")), "{ct}");
    assert!(!ct.contains(&format!("orig=(src={a3},dst={a1}")), "{ct}");

    // CHECK notices a missing rule.
    let one = format!("cookie={cookie:#x}/{:#x},table=40", u64::MAX);
    lab.cli(&["del-flows", "br0", &one]).unwrap();
    let (ok, e) = cni.run("CHECK", "pod1", Some(&p1), &with_prev(&with_policy, &r1));
    assert!(
        !ok && e["msg"].as_str().unwrap().contains("rules with cookie"),
        "{e}"
    );

    // DEL removes exactly this attachment's rules.
    cni.must(&lab, "DEL", "pod1", Some(&p1), &with_policy);
    assert!(rules_with(&lab, cookie).is_empty());
    assert_eq!(all_rules(&lab), before);
    cni.must(&lab, "DEL", "pod1", Some(&p1), &plain);

    // Without a policy the excepted pod gets in.
    let r1 = cni.must(&lab, "ADD", "pod1", Some(&p1), &plain);
    let a1 = addr_of(&r1);
    assert_eq!(curl(&lab, "p3", &url(&a1, 8081), 5).unwrap(), "200");
    assert!(lab.pings("p2", &a1, 2));
    for (id, p) in [("pod1", &p1), ("pod2", &p2), ("pod3", &p3)] {
        cni.must(&lab, "DEL", id, Some(p), &plain);
    }
    assert!(vfs(&lab).is_empty());
    assert_eq!(all_rules(&lab), empty);
}
