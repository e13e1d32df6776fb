//! Node-local vs cross-node steering (issue 16): two nodes, each a
//! namespace with its own nicflow daemon and bridge, joined by VXLAN over
//! a veth underlay; pods added through the CNI plugin with one pod network
//! (198.19.64.0/18, node A's pods in 198.19.65.0/24, node B's in
//! 198.19.66.0/24). The network's `steering` sends traffic to the other
//! node's pods over the overlay, out a designated egress port, or nowhere
//! (`local`), and `dump-dp-flows` shows which.
//!
//! ```text
//!  node A (lab a, daemon in `sw`)                  node B (lab b, daemon in `sw`)
//!   a1, a2, a3 --VFs-- br0 --vx0 (u0 198.19.60.1) ==== (u0 198.19.60.2) vx0-- br0 --VF-- b1
//!                       \--eg0 -- x0 (namespace `ex`: counts what the egress path sends)
//! ```

use super::common::{must, NsLab};
use super::{addr_of, can_run, netns_path, Cni};
use serde_json::{json, Value};

/// The network config of one node: the same network name everywhere, the
/// node's own address range and `steering`.
fn conf(lab: &NsLab, name: &str, node: u8, steering: Value) -> Value {
    let d = lab.dir();
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "type": "nicflow",
        "bridge": "br0",
        "socket": lab.sock(),
        "dataDir": d.join("nicflow-data"),
        "steering": steering,
        "ipam": {
            "type": "host-local",
            "ranges": [[{
                "subnet": "198.19.64.0/18",
                "rangeStart": format!("198.19.{node}.10"),
                "rangeEnd": format!("198.19.{node}.99"),
            }]],
            "dataDir": d.join("ipam"),
        }
    })
}

fn steer(node: u8, cross: &str, port: Option<&str>) -> Value {
    let mut s = json!({
        "podCidr": "198.19.64.0/18",
        "nodeCidr": format!("198.19.{node}.0/24"),
        "crossNode": cross,
    });
    if let Some(p) = port {
        s["port"] = json!(p);
    }
    s
}

/// A node: lab with the daemon in `sw`, bridge br0 and its tunnel port.
fn node(tag: &str, pods: &[&str]) -> NsLab {
    let mut nodes = vec!["sw"];
    nodes.extend_from_slice(pods);
    let mut lab = NsLab::new("nfcs", tag, &nodes);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    lab
}

fn tunnel(lab: &NsLab, local: &str, remote: &str) {
    lab.cli(&[
        "add-port",
        "br0",
        "vx0",
        "--type",
        "vxlan",
        "underlay=u0",
        &format!("local_ip={local}"),
        &format!("remote_ip={remote}"),
        "key=6400",
    ])
    .unwrap_or_else(|e| panic!("tunnel port: {e}\n{}", lab.daemon_log()));
}

fn dp_flows(lab: &NsLab) -> String {
    lab.cli(&["dump-dp-flows", "br0"]).unwrap_or_default()
}

/// The OpenFlow port number of bridge port `name` (from `show`).
fn ofport(lab: &NsLab, name: &str) -> String {
    let show = lab.cli(&["show"]).unwrap();
    show.lines()
        .filter(|l| l.split_whitespace().any(|w| w == name))
        .find_map(|l| l.split("ofport ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no port {name} in\n{show}"))
        .to_string()
}

/// The actions (`3`, `drop`) of the IPv4 and ARP datapath flows from
/// representor `rep` to node `node`'s pods (`198.19.<node>.0/24`): the
/// datapath flow's match is the megaflow, so the destination shows as that
/// prefix. (Where nobody answers ARP, as behind the egress port, only ARP
/// flows exist.)
fn dp_actions(lab: &NsLab, rep: &str, node: u8) -> Vec<String> {
    // IPv4 flows may say `ip`, `icmp`, `tcp`... and carry `reg15=0x0`
    // (anti-spoofing reads it) before `in_port`.
    let port = format!(",in_port={rep},");
    let (ip, arp) = (
        format!("nw_dst=198.19.{node}."),
        format!("arp_tpa=198.19.{node}."),
    );
    dp_flows(lab)
        .lines()
        .filter(|l| {
            l.contains(&port)
                && if l.starts_with("arp,") {
                    l.contains(&arp)
                } else {
                    !l.starts_with("ipv6") && !l.starts_with("icmp6") && l.contains(&ip)
                }
        })
        .filter_map(|l| l.split("actions:").nth(1))
        .map(str::to_string)
        .collect()
}

fn rx_packets(lab: &NsLab, n: &str, dev: &str) -> u64 {
    let out = lab.must(
        n,
        &[
            "cat",
            &format!("/sys/class/net/{dev}/statistics/rx_packets"),
        ],
    );
    out.trim().parse().unwrap_or(0)
}

#[test]
fn cni_steering_local_overlay_egress() {
    if !can_run() {
        return;
    }
    let _serial = super::serial();
    let mut a = node("a", &["a1", "a2", "a3", "a4", "a5", "ex"]);
    let b = node("b", &["b1"]);
    // The underlay: one veth between the two nodes' daemon namespaces.
    must(&[
        "ip",
        "link",
        "add",
        "u0",
        "netns",
        &a.ns("sw"),
        "type",
        "veth",
        "peer",
        "name",
        "u0",
        "netns",
        &b.ns("sw"),
    ]);
    a.must("sw", &["ip", "link", "set", "u0", "up"]);
    b.must("sw", &["ip", "link", "set", "u0", "up"]);
    tunnel(&a, "198.19.60.1", "198.19.60.2");
    tunnel(&b, "198.19.60.2", "198.19.60.1");
    // A designated egress port on A, its far end counted in `ex`.
    a.veth("eg0", "sw", "x0", "ex");
    a.cli(&["add-port", "br0", "eg0"]).unwrap();
    let net = format!("{}-pods", a.prefix());
    let cni_a = Cni::new(&a);
    let cni_b = Cni::new(&b);
    let (ca, cb) = (
        conf(&a, &net, 65, steer(65, "overlay", Some("vx0"))),
        conf(&b, &net, 66, steer(66, "overlay", Some("vx0"))),
    );
    let a1 = cni_a.must(&a, "ADD", "a1", Some(&netns_path(&a, "a1")), &ca);
    let a2 = cni_a.must(&a, "ADD", "a2", Some(&netns_path(&a, "a2")), &ca);
    let b1 = cni_b.must(&b, "ADD", "b1", Some(&netns_path(&b, "b1")), &cb);
    let (ip_a1, ip_a2, ip_b1) = (addr_of(&a1), addr_of(&a2), addr_of(&b1));
    assert!(ip_a1.starts_with("198.19.65.") && ip_b1.starts_with("198.19.66."));
    let rep = |r: &Value| r["interfaces"][1]["name"].as_str().unwrap().to_string();
    let (rep_a1, rep_a2) = (rep(&a1), rep(&a2));

    // overlay: same node over the bridge, the other node over vx0.
    assert!(a.pings("a1", &ip_a2, 3), "a1 -> a2\n{}", a.daemon_log());
    assert!(
        a.pings("a1", &ip_b1, 3),
        "a1 -> b1 over the overlay\nA: {}\n{}\nB: {}\n{}\n{}\n{}",
        a.cli(&["dump-flows", "br0"]).unwrap_or_default(),
        dp_flows(&a),
        b.cli(&["dump-flows", "br0"]).unwrap_or_default(),
        dp_flows(&b),
        b.cli(&["show"]).unwrap_or_default(),
        b.daemon_log()
    );
    // The decisions in the datapath: a1's traffic to its node's pods goes
    // to a2's representor, to the other node's out of vx0.
    let (vx0, eg0) = (ofport(&a, "vx0"), ofport(&a, "eg0"));
    let dp_local = dp_actions(&a, &rep_a1, 65);
    assert!(
        dp_local.contains(&ofport(&a, &rep_a2)),
        "a1 -> a2 goes to a2's representor: {dp_local:?}\n{}",
        dp_flows(&a)
    );
    let dp_cross = dp_actions(&a, &rep_a1, 66);
    assert!(
        !dp_cross.is_empty() && dp_cross.iter().all(|x| *x == vx0),
        "a1 -> b1 goes out vx0 (port {vx0}): {dp_cross:?}\n{}",
        dp_flows(&a)
    );
    // The rules say so too: the network's table and the pods' entries.
    let rules = a.cli(&["dump-flows", "br0"]).unwrap();
    assert!(
        rules.contains("table=50") && rules.contains("nw_dst=198.19.64.0/18 actions=output:vx0"),
        "{rules}"
    );

    // egress: the network's cross-node traffic leaves through eg0 (ADD of
    // a pod with the new policy rewrites the network's rules in place).
    let ce = conf(&a, &net, 65, steer(65, "egress", Some("eg0")));
    let a3 = cni_a.must(&a, "ADD", "a3", Some(&netns_path(&a, "a3")), &ce);
    assert!(addr_of(&a3).starts_with("198.19.65."));
    let before = rx_packets(&a, "ex", "x0");
    // Nobody answers on eg0's side: the pings fail, the frames arrive there.
    assert!(!a.pings("a3", &ip_b1, 3));
    let arrived = rx_packets(&a, "ex", "x0") - before;
    assert!(
        arrived >= 3,
        "only {arrived} frames reached the egress port"
    );
    let dp_egress = dp_actions(&a, &rep(&a3), 66);
    assert!(
        !dp_egress.is_empty() && dp_egress.iter().all(|x| *x == eg0),
        "cross-node traffic goes out eg0 (port {eg0}): {dp_egress:?}\n{}",
        dp_flows(&a)
    );
    // Same node still over the bridge.
    assert!(a.pings("a3", &ip_a1, 3), "a3 -> a1\n{}", a.daemon_log());

    // local: the network stays on the node.
    let cl = conf(&a, &net, 65, steer(65, "local", None));
    let a4 = cni_a.must(&a, "ADD", "a4", Some(&netns_path(&a, "a4")), &cl);
    assert!(a.pings("a4", &ip_a1, 3), "a4 -> a1\n{}", a.daemon_log());
    // (The bridge still floods a4's broadcasts for its own node's pods and
    // its IPv6 multicast: only traffic to the other node's pods is dropped.)
    assert!(!a.pings("a4", &ip_b1, 2));
    assert!(!a.pings("a1", &ip_b1, 2));
    let rules = a.cli(&["dump-flows", "br0"]).unwrap();
    assert!(
        rules.contains("nw_dst=198.19.64.0/18 actions=drop"),
        "{rules}"
    );
    let dp_local_only = dp_actions(&a, &rep(&a4), 66);
    assert!(
        !dp_local_only.is_empty() && dp_local_only.iter().all(|x| x == "drop"),
        "local: cross-node traffic dropped: {dp_local_only:?}\n{}",
        dp_flows(&a)
    );

    // Back to the overlay, and DEL: each pod's rule goes with it.
    cni_a.must(&a, "ADD", "a5", Some(&netns_path(&a, "a5")), &ca);
    assert!(
        a.pings("a1", &ip_b1, 3),
        "a1 -> b1 again\n{}",
        a.daemon_log()
    );
    for (id, pod, c) in [
        ("a1", "a1", &ca),
        ("a2", "a2", &ca),
        ("a3", "a3", &ce),
        ("a4", "a4", &cl),
        ("a5", "a5", &ca),
    ] {
        cni_a.must(&a, "DEL", id, Some(&netns_path(&a, pod)), c);
    }
    cni_b.must(&b, "DEL", "b1", Some(&netns_path(&b, "b1")), &cb);
    let rules = a.cli(&["dump-flows", "br0"]).unwrap();
    assert!(
        !rules.contains("in_port=br0pf0vf"),
        "pods' rules left:\n{rules}"
    );
    // The network's rules name no pod and stay.
    assert!(rules.contains("table=50"), "{rules}");
    a.stop_daemon();
}
