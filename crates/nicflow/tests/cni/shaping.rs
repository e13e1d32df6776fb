//! Bandwidth limits enforced by the bridge (OpenFlow meters), from the
//! `bandwidth` capability's keys in `runtimeConfig`: the path the
//! reference bandwidth plugin's qdiscs miss (see chain.rs) is limited too.
//!
//! ```text
//!   sw nfgw0 198.19.50.1 --+
//!   p1 eth0 (10 Mbit/s in, 10 Mbit/s out) --+ br0
//!   p2 eth0 (no limit) --+
//! ```

use super::common::{have, skipped, NsLab};
use super::{
    addr_of, bg, can_run, gateway_port, iperf_mbps, netns_path, rules_with, with_prev, Cni,
};
use serde_json::{json, Value};

const LIMIT_MBPS: f64 = 10.0;

fn limited(c: &Value) -> Value {
    let mut c = c.clone();
    c["runtimeConfig"] = json!({ "bandwidth": {
        "ingressRate": 10_000_000, "ingressBurst": 1_000_000,
        "egressRate": 10_000_000, "egressBurst": 1_000_000,
    }});
    c
}

/// The meters of br0, one string each (`dump-meters` prints a meter's
/// bands on the lines after its `meter=N` line).
fn meters(lab: &NsLab) -> Vec<String> {
    let text = lab.cli(&["dump-meters", "br0"]).unwrap();
    let mut v: Vec<String> = Vec::new();
    for l in text.lines() {
        if l.trim_start().starts_with("meter=") {
            v.push(l.to_string());
        } else if let Some(last) = v.last_mut() {
            last.push_str(l);
        }
    }
    v
}

#[test]
fn cni_bandwidth_meters() {
    if !can_run() {
        return;
    }
    let _serial = super::serial();
    if !have("iperf3") {
        skipped("`iperf3` not installed");
        return;
    }
    let mut lab = NsLab::new("nfcni", "b", &["sw", "p1", "p2"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    gateway_port(&lab, "br0", "nfgw0", "198.19.50.1/24");
    let cni = Cni::new(&lab);
    let mut plain = super::net_conf(&lab, "1.0.0");
    plain["ipam"]["routes"] = json!([]);
    let (p1, p2) = (netns_path(&lab, "p1"), netns_path(&lab, "p2"));
    let r2 = cni.must(&lab, "ADD", "pod2", Some(&p2), &plain);
    let a2 = addr_of(&r2);

    // A bad limit: code 7 naming the field, nothing made.
    let mut bad = plain.clone();
    bad["runtimeConfig"] = json!({ "bandwidth": { "egressBurst": 1000 } });
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &bad);
    assert!(!ok && e["code"] == 7, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("`runtimeConfig.bandwidth.egressBurst`"),
        "{e}"
    );
    assert!(!lab.link_exists("p1", "eth0") && meters(&lab).is_empty());

    let conf = limited(&plain);
    let r1 = cni.must(&lab, "ADD", "pod1", Some(&p1), &conf);
    let a1 = addr_of(&r1);
    let cookie = nicflow::cni::policy::cookie(lab.prefix(), "pod1", "eth0");
    let m = meters(&lab);
    assert_eq!(m.len(), 2, "{m:?}");
    assert!(m.iter().all(|l| l.contains("rate=10000")), "{m:?}");
    // Two meter rules (besides the anti-spoofing ones, priority 600xx).
    let limits = rules_with(&lab, cookie)
        .into_iter()
        .filter(|l| !l.contains("priority=600"))
        .count();
    assert_eq!(limits, 2);
    cni.must(&lab, "CHECK", "pod1", Some(&p1), &with_prev(&conf, &r1));

    let _s = [
        bg(&lab, "p1", &["iperf3", "-s"]),
        bg(&lab, "p2", &["iperf3", "-s"]),
        bg(&lab, "sw", &["iperf3", "-s"]),
    ];
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Unlimited pod: the baseline, well above the limit.
    let base = iperf_mbps(&lab, "p2", "198.19.50.1");
    let runs = [
        ("pod -> limited pod", iperf_mbps(&lab, "p2", &a1)),
        ("node -> limited pod", iperf_mbps(&lab, "sw", &a1)),
        ("limited pod -> node", iperf_mbps(&lab, "p1", "198.19.50.1")),
        ("limited pod -> pod", iperf_mbps(&lab, "p1", &a2)),
    ];
    eprintln!("limit {LIMIT_MBPS} Mbit/s each way; unlimited pod -> node {base:.1} Mbit/s");
    for (what, r) in runs {
        eprintln!("{what}: {r:.1} Mbit/s");
        assert!(
            r < 1.5 * LIMIT_MBPS && r > 0.5,
            "{what}: {r:.1} Mbit/s\n{}",
            lab.daemon_log()
        );
    }
    assert!(base > 3.0 * LIMIT_MBPS, "baseline {base:.1} Mbit/s");

    // DEL: the meters and the rules go.
    cni.must(&lab, "DEL", "pod1", Some(&p1), &conf);
    assert!(meters(&lab).is_empty(), "{:?}", meters(&lab));
    assert!(rules_with(&lab, cookie).is_empty());

    // With a policy as well: the policy's passes name the meters.
    let mut both = conf.clone();
    both["runtimeConfig"]["networkPolicy"] = json!({ "ingress": [
        { "from": [{ "ipBlock": { "cidr": "198.19.50.0/24" } }],
          "ports": [{ "protocol": "TCP", "port": 5201 }] }
    ]});
    let r1 = cni.must(&lab, "ADD", "pod1", Some(&p1), &both);
    let a1 = addr_of(&r1);
    let rules = rules_with(&lab, cookie);
    assert!(
        rules
            .iter()
            .any(|l| l.contains("tp_dst=5201") && l.contains("meter:")),
        "{rules:?}"
    );
    cni.must(&lab, "CHECK", "pod1", Some(&p1), &with_prev(&both, &r1));
    let r = iperf_mbps(&lab, "p2", &a1);
    eprintln!("pod -> limited pod with policy: {r:.1} Mbit/s");
    assert!(r < 1.5 * LIMIT_MBPS && r > 0.5, "{r:.1} Mbit/s");
    assert!(
        !lab.pings("p2", &a1, 2),
        "ping is not allowed by the policy"
    );
    // A meter deleted by hand (its rules go with it): CHECK says so, and
    // DEL still finds the other meter (rules and record).
    let first: String = meters(&lab)[0]
        .trim_start()
        .trim_start_matches("meter=")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    lab.cli(&["del-meters", "br0", &format!("meter={first}")])
        .unwrap();
    assert_eq!(meters(&lab).len(), 1);
    let (ok, e) = cni.run("CHECK", "pod1", Some(&p1), &with_prev(&both, &r1));
    assert!(!ok && e["msg"].as_str().unwrap().contains("rules"), "{e}");
    // DEL without the configuration's runtimeConfig: the rules and the
    // meters they name are found by the cookie.
    cni.must(&lab, "DEL", "pod1", Some(&p1), &plain);
    assert!(meters(&lab).is_empty(), "{:?}", meters(&lab));
    assert!(rules_with(&lab, cookie).is_empty());
    cni.must(&lab, "DEL", "pod2", Some(&p2), &plain);
}
