//! Several networks per pod (the Multus model): network A puts `eth0` on
//! bridge br0 (198.19.50.0/24), network B puts `net1` on bridge br1
//! (198.19.51.0/24) in the same pods; each attachment is added, checked and
//! deleted on its own, as Multus calls its delegates.
//!
//! ```text
//!   p1 eth0 --br0pf0vf*-- br0 --br0pf0vf*-- eth0 p2
//!   p1 net1 --br1pf0vf*-- br1 --br1pf0vf*-- net1 p2
//! ```

use super::common::NsLab;
use super::{addr_of, can_run, netns_path, vfs_of, with_prev, Cni};
use serde_json::{json, Value};

fn net(lab: &NsLab, name: &str, bridge: &str, subnet: &str, routes: Value) -> Value {
    let d = lab.dir();
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "type": "nicflow",
        "bridge": bridge,
        "socket": lab.sock(),
        "dataDir": d.join("nicflow-data"),
        "ipam": {
            "type": "host-local",
            "ranges": [[{ "subnet": subnet }]],
            "routes": routes,
            "dataDir": d.join("ipam"),
        }
    })
}

#[test]
fn cni_two_networks_per_pod() {
    if !can_run() {
        return;
    }
    let _serial = super::serial();
    let mut lab = NsLab::new("nfcni", "m", &["sw", "p1", "p2"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    lab.cli(&["add-br", "br1"]).unwrap();
    let cni = Cni::new(&lab);
    let a = net(
        &lab,
        &format!("{}-a", lab.prefix()),
        "br0",
        "198.19.50.0/24",
        json!([{ "dst": "198.18.0.0/15" }]),
    );
    let b = net(
        &lab,
        &format!("{}-b", lab.prefix()),
        "br1",
        "198.19.51.0/24",
        json!([]),
    );
    let (p1, p2) = (netns_path(&lab, "p1"), netns_path(&lab, "p2"));
    let add = |id: &str, ifname: &str, ns: &str, conf: &Value| {
        cni.must_if(&lab, "ADD", id, ifname, Some(ns), conf)
    };
    let a1 = add("pod1", "eth0", &p1, &a);
    let a2 = add("pod2", "eth0", &p2, &a);
    let b1 = add("pod1", "net1", &p1, &b);
    let b2 = add("pod2", "net1", &p2, &b);
    assert_eq!(b1["interfaces"][0]["name"], "net1", "{b1}");
    assert!(addr_of(&b1).starts_with("198.19.51."), "{b1}");
    assert!(addr_of(&a1).starts_with("198.19.50."), "{a1}");
    // Each network's VFs on its own bridge, two per bridge.
    let (v0, v1) = (vfs_of(&lab, "br0"), vfs_of(&lab, "br1"));
    assert_eq!(v0.len(), 2, "{v0:?}");
    assert!(v0.iter().all(|v| v["name"] == "eth0"), "{v0:?}");
    assert_eq!(v1.len(), 2, "{v1:?}");
    assert!(v1.iter().all(|v| v["name"] == "net1"), "{v1:?}");
    // The representor in B's result is br1's.
    assert!(
        b1["interfaces"][1]["name"]
            .as_str()
            .unwrap()
            .starts_with("br1pf0vf"),
        "{b1}"
    );

    // Traffic on each network, each over its own interface.
    for (from, to, dev) in [
        ("p1", addr_of(&a2), "eth0"),
        ("p2", addr_of(&a1), "eth0"),
        ("p1", addr_of(&b2), "net1"),
        ("p2", addr_of(&b1), "net1"),
    ] {
        let r = lab.must(from, &["ip", "route", "get", &to]);
        assert!(r.contains(&format!("dev {dev}")), "{r}");
        lab.ping(from, &to)
            .unwrap_or_else(|e| panic!("{from} -> {to}: {e}\n{}", lab.daemon_log()));
    }
    let check = |id: &str, ifname: &str, ns: &str, conf: &Value, prev: &Value| {
        cni.run_if("CHECK", id, ifname, Some(ns), &with_prev(conf, prev))
            .0
    };
    assert!(check("pod1", "eth0", &p1, &a, &a1));
    assert!(check("pod1", "net1", &p1, &b, &b1));
    // CHECK of one network against the other's result fails.
    assert!(!check("pod1", "net1", &p1, &b, &a1));

    // DEL pod1's net1: eth0 keeps working, pod2's net1 too.
    cni.must_if(&lab, "DEL", "pod1", "net1", Some(&p1), &b);
    assert!(!lab.link_exists("p1", "net1"));
    assert!(lab.link_exists("p1", "eth0") && lab.link_exists("p2", "net1"));
    assert_eq!(vfs_of(&lab, "br1").len(), 1);
    assert_eq!(vfs_of(&lab, "br0").len(), 2);
    assert!(lab.pings("p1", &addr_of(&a2), 3), "{}", lab.daemon_log());
    assert!(!lab.pings("p2", &addr_of(&b1), 2));
    assert!(check("pod1", "eth0", &p1, &a, &a1));
    assert!(!check("pod1", "net1", &p1, &b, &b1));
    // DEL again: nothing left, success.
    cni.must_if(&lab, "DEL", "pod1", "net1", Some(&p1), &b);

    // Back on B, then DEL pod1's eth0: net1 keeps working.
    let b1 = add("pod1", "net1", &p1, &b);
    cni.must_if(&lab, "DEL", "pod1", "eth0", Some(&p1), &a);
    assert!(!lab.link_exists("p1", "eth0"));
    assert!(lab.pings("p1", &addr_of(&b2), 3), "{}", lab.daemon_log());
    assert!(lab.pings("p2", &addr_of(&b1), 3));
    assert!(!lab.pings("p2", &addr_of(&a1), 2));
    assert!(check("pod1", "net1", &p1, &b, &b1));

    // The rest, and nothing left anywhere.
    cni.must_if(&lab, "DEL", "pod1", "net1", Some(&p1), &b);
    cni.must_if(&lab, "DEL", "pod2", "net1", Some(&p2), &b);
    cni.must_if(&lab, "DEL", "pod2", "eth0", Some(&p2), &a);
    assert!(vfs_of(&lab, "br0").is_empty() && vfs_of(&lab, "br1").is_empty());
    for n in [a["name"].as_str().unwrap(), b["name"].as_str().unwrap()] {
        let ipam = lab.dir().join("ipam").join(n);
        let left: Vec<_> = std::fs::read_dir(&ipam)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|f| f.starts_with("198."))
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "{n}: {left:?}");
        let rec = lab.dir().join("nicflow-data").join(n);
        assert_eq!(std::fs::read_dir(&rec).map(|d| d.count()).unwrap_or(0), 0);
    }
}
