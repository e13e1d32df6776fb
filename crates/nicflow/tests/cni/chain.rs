//! Chaining: nicflow first in a conflist, then the reference plugins
//! `tuning`, `bandwidth` and `portmap` (/usr/lib/cni), run by `cnitool`
//! inside the node namespace `sw` (where the daemon and the representors
//! live, as a runtime runs the chain in the host namespace).
//!
//! ```text
//!   cl 198.18.70.2 --veth-- sw 198.18.70.1 (ip_forward, iptables DNAT by portmap)
//!                           sw nfgw0 198.19.50.1 (internal port of br0)
//!                           br0 --br0pf0vfN (tbf, ingress qdisc by bandwidth)-- p1 eth0 (mtu 1400 by tuning)
//! ```
//!
//! Measured findings (asserted, so a change shows): the bandwidth plugin's
//! qdiscs are installed but do not shape the VF's traffic (the representor
//! is driven by nicflow's TC program and AF_PACKET socket, which pass
//! beside the qdiscs); portmap 1.1.1's CHECK fails whenever ip6tables is
//! usable, because it looks for its IPv4 rules in ip6tables too
//! (containernetworking/plugins#819), so the chain's CHECK is also run
//! without portmap.

use super::common::{have, skipped, NsLab};
use super::{can_run, cnitool, curl, gateway_port, http_server, iperf_mbps, netns_path, Cni};
use serde_json::{json, Value};
use std::process::Command;

/// Bytes the qdisc `kind` of `dev` (in `sw`) sent, from `tc -s -j`.
fn qdisc_bytes(lab: &NsLab, dev: &str, kind: &str) -> Option<u64> {
    let out = lab
        .exec("sw", &["tc", "-s", "-j", "qdisc", "show", "dev", dev])
        .ok()?;
    let v: Value = serde_json::from_str(&out).ok()?;
    v.as_array()?
        .iter()
        .find(|q| q["kind"] == kind)
        .and_then(|q| q["bytes"].as_u64())
}

#[test]
fn cni_chain_tuning_bandwidth_portmap() {
    if !can_run() {
        return;
    }
    let _serial = super::serial();
    let Some(tool) = cnitool() else {
        skipped("no cnitool (go install github.com/containernetworking/cni/cnitool@v1.3.0)");
        return;
    };
    for t in ["iptables", "tc", "curl", "iperf3", "python3"] {
        if !have(t) {
            skipped(&format!("`{t}` not installed"));
            return;
        }
    }
    for p in ["tuning", "bandwidth", "portmap"] {
        if !std::path::Path::new(super::CNI_DIR).join(p).exists() {
            skipped(&format!("no /usr/lib/cni/{p}"));
            return;
        }
    }
    let mut lab = NsLab::new("nfcni", "c", &["sw", "p1", "p2", "cl"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    gateway_port(&lab, "br0", "nfgw0", "198.19.50.1/24");
    lab.veth("nfcsw", "sw", "nfccl", "cl");
    lab.must(
        "sw",
        &["ip", "addr", "add", "198.18.70.1/24", "dev", "nfcsw"],
    );
    lab.must(
        "cl",
        &["ip", "addr", "add", "198.18.70.2/24", "dev", "nfccl"],
    );
    lab.must(
        "cl",
        &["ip", "route", "add", "198.19.50.0/24", "via", "198.18.70.1"],
    );
    lab.must("sw", &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    let cni = Cni::new(&lab);
    let d = lab.dir().to_path_buf();
    let limit_bps = 10_000_000u64;
    let list = json!({
        "cniVersion": "1.0.0",
        "name": lab.prefix(),
        "plugins": [
            {
                "type": "nicflow", "bridge": "br0", "socket": lab.sock(),
                "dataDir": d.join("nicflow-data"),
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": "198.19.50.0/24", "gateway": "198.19.50.1" }]],
                    "routes": [{ "dst": "198.18.0.0/15" }],
                    "dataDir": d.join("ipam"),
                }
            },
            { "type": "tuning", "mtu": 1400,
              "sysctl": { "net.ipv4.conf.eth0.rp_filter": "2" } },
            { "type": "bandwidth",
              "ingressRate": limit_bps, "ingressBurst": 100_000,
              "egressRate": limit_bps, "egressBurst": 100_000 },
            { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true }
        ]
    });
    let netconf = d.join("netconf");
    std::fs::create_dir_all(&netconf).unwrap();
    std::fs::write(netconf.join("10-chain.conflist"), list.to_string()).unwrap();
    // Pod p1 maps host port 18080, p2 18081.
    let try_run_on = |lab: &NsLab, cmd: &str, pod: &str| -> (bool, String) {
        let host_port = if pod == "p1" { 18080 } else { 18081 };
        let caps = json!({ "portMappings": [
            { "hostPort": host_port, "containerPort": 8080, "protocol": "tcp" }
        ]});
        let out = Command::new("ip")
            .args(["netns", "exec", &lab.ns("sw")])
            .arg(&tool)
            .args([cmd, lab.prefix(), &netns_path(lab, pod)])
            .env("NETCONFPATH", &netconf)
            .env("CNI_PATH", &cni.path)
            .env("CNI_IFNAME", "eth0")
            .env("CAP_ARGS", caps.to_string())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("cnitool {cmd} {pod}: {} {text}", out.status);
        (out.status.success(), text)
    };
    let run_on = |lab: &NsLab, cmd: &str, pod: &str| -> String {
        let (ok, text) = try_run_on(lab, cmd, pod);
        assert!(ok, "cnitool {cmd} {pod}: {text}\n{}", lab.daemon_log());
        text
    };
    let try_run = |lab: &NsLab, cmd: &str| try_run_on(lab, cmd, "p1");
    let run = |lab: &NsLab, cmd: &str| run_on(lab, cmd, "p1");

    // ADD through the whole chain.
    let r: Value = serde_json::from_str(&run(&lab, "add")).unwrap();
    let ifaces = r["interfaces"].as_array().unwrap();
    let pod_if = &ifaces[r["ips"][0]["interface"].as_u64().unwrap() as usize];
    assert_eq!(pod_if["name"], "eth0", "{r}");
    assert_eq!(pod_if["sandbox"], netns_path(&lab, "p1").as_str(), "{r}");
    let rep = ifaces
        .iter()
        .find(|i| i.get("sandbox").is_none() && i["name"].as_str().unwrap().starts_with("br0pf0vf"))
        .unwrap_or_else(|| panic!("no representor in {r}"))["name"]
        .as_str()
        .unwrap()
        .to_string();
    // bandwidth added its ifb device to the result.
    let ifb = ifaces
        .iter()
        .find_map(|i| i["name"].as_str().filter(|n| n.starts_with("bwp")))
        .unwrap_or_else(|| panic!("no bandwidth ifb in {r}"))
        .to_string();
    let v4 = r["ips"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|i| {
            i["address"]
                .as_str()
                .filter(|a| a.starts_with("198.19.50."))
        })
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();

    // tuning: MTU and the sysctl inside the pod.
    let l = lab.must("p1", &["ip", "link", "show", "dev", "eth0"]);
    assert!(l.contains("mtu 1400"), "{l}");
    let rp = lab.must("p1", &["sysctl", "-n", "net.ipv4.conf.eth0.rp_filter"]);
    assert_eq!(rp.trim(), "2");

    // bandwidth: tbf at the representor's root (the pod's ingress), an
    // ingress qdisc redirecting to an ifb with tbf (the pod's egress).
    let q = lab.must("sw", &["tc", "qdisc", "show", "dev", &rep]);
    assert!(q.contains("qdisc tbf") && q.contains("rate 10Mbit"), "{q}");
    assert!(q.contains("qdisc ingress"), "{q}");
    let f = lab.must("sw", &["tc", "filter", "show", "dev", &rep, "ingress"]);
    assert!(f.contains(&ifb), "{f}");
    let q = lab.must("sw", &["tc", "qdisc", "show", "dev", &ifb]);
    assert!(q.contains("qdisc tbf"), "{q}");

    // portmap: the node's address, hostPort 18080 -> the pod's 8080, from
    // another host (PREROUTING DNAT, forwarded) and from the node itself
    // (OUTPUT DNAT).
    let _srv = http_server(&lab, "p1", 8080);
    let nat = lab.must("sw", &["iptables", "-t", "nat", "-S"]);
    assert!(
        nat.contains(&format!("--to-destination {v4}:8080")),
        "{nat}"
    );
    assert_eq!(
        curl(&lab, "cl", "http://198.18.70.1:18080/", 5).unwrap(),
        "200"
    );
    assert_eq!(
        curl(&lab, "sw", "http://198.19.50.1:18080/", 5).unwrap(),
        "200"
    );

    // CHECK runs every plugin's CHECK against the cached result: portmap's
    // fails (upstream bug #819, IPv4 rules looked for in ip6tables), the
    // rest of the chain passes.
    let (ok, text) = try_run(&lab, "check");
    assert!(!ok && text.contains("could not check ipv6 dnat"), "{text}");
    let mut no_portmap = list.clone();
    no_portmap["plugins"].as_array_mut().unwrap().pop();
    std::fs::write(netconf.join("10-chain.conflist"), no_portmap.to_string()).unwrap();
    run(&lab, "check");
    std::fs::write(netconf.join("10-chain.conflist"), list.to_string()).unwrap();

    // Measured: does the reference bandwidth plugin's shaping act on the
    // VF/representor datapath? To the pod it does: the switch sends every
    // frame of a port with a root qdisc through it (the daemon's AF_PACKET
    // sockets drop PACKET_QDISC_BYPASS there, the TC engine uses
    // bpf_redirect), so the representor's tbf holds the pod's ingress
    // limit. From the pod it does not: nicflow's TC program (tcx) takes
    // the frames ahead of the legacy ingress qdisc and its mirred to the
    // ifb. If this starts failing, update docs/cni.md.
    let _s1 = super::bg(&lab, "p1", &["iperf3", "-s"]);
    let _s2 = super::bg(&lab, "sw", &["iperf3", "-s"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let tbf0 = qdisc_bytes(&lab, &rep, "tbf").unwrap_or(0);
    let to_pod = iperf_mbps(&lab, "sw", &v4);
    let tbf_to = qdisc_bytes(&lab, &rep, "tbf").unwrap_or(0);
    let from_pod = iperf_mbps(&lab, "p1", "198.19.50.1");
    let tbf1 = qdisc_bytes(&lab, &rep, "tbf").unwrap_or(0);
    let ifb_bytes = qdisc_bytes(&lab, &ifb, "tbf").unwrap_or(0);
    eprintln!(
        "bandwidth limit 10 Mbit/s each way: measured to pod {to_pod:.0} Mbit/s, \
         from pod {from_pod:.0} Mbit/s; representor tbf sent {} B, ifb tbf sent {ifb_bytes} B",
        tbf1 - tbf0
    );
    let limit = limit_bps as f64 / 1e6;
    assert!(
        to_pod < 1.5 * limit && tbf_to - tbf0 > 1_000_000,
        "to the pod {to_pod:.1} Mbit/s, tbf {} B: update docs/cni.md",
        tbf_to - tbf0
    );
    assert!(
        from_pod > 3.0 * limit,
        "egress shaping now works ({from_pod:.1} Mbit/s): update docs/cni.md"
    );
    // Pod to pod, the flow in the TC engine: its bpf_redirect to the
    // representor goes through the qdisc, so the receiving pod's ingress
    // limit holds (the sender's egress limit still does not act).
    let r2: Value = serde_json::from_str(&run_on(&lab, "add", "p2")).unwrap();
    assert!(r2["interfaces"][1]["name"] != rep.as_str(), "{r2}");
    let pod_to_pod = iperf_mbps(&lab, "p2", &v4);
    let tbf2 = qdisc_bytes(&lab, &rep, "tbf").unwrap_or(0);
    let dp = lab.cli(&["dump-dp-flows", "br0"]).unwrap();
    eprintln!(
        "pod to pod into the limited pod: {pod_to_pod:.1} Mbit/s, representor tbf sent {} B\n{dp}",
        tbf2 - tbf1
    );
    assert!(dp.contains("engine:tc"), "{dp}");
    assert!(
        pod_to_pod < 1.5 * limit && tbf2 - tbf1 > 1_000_000,
        "pod to pod {pod_to_pod:.1} Mbit/s, tbf {} B: update docs/cni.md",
        tbf2 - tbf1
    );
    run_on(&lab, "del", "p2");
    assert!(!lab.link_exists("p2", "eth0"));
    drop((_s1, _s2));

    // DEL through the chain (portmap, bandwidth, tuning, nicflow) removes
    // everything: iptables chains, the ifb, the VF and its representor, the
    // address, the record.
    run(&lab, "del");
    let nat = lab.must("sw", &["iptables", "-t", "nat", "-S"]);
    assert!(!nat.contains(&v4), "{nat}");
    assert!(!lab.link_exists("sw", &ifb));
    assert!(!lab.link_exists("sw", &rep));
    assert!(!lab.link_exists("p1", "eth0"));
    assert!(super::vfs(&lab).is_empty());
    assert!(
        super::ipam_files(&lab).is_empty(),
        "{:?}",
        super::ipam_files(&lab)
    );
    let rec = d.join("nicflow-data").join(lab.prefix());
    assert_eq!(std::fs::read_dir(&rec).map(|d| d.count()).unwrap_or(0), 0);
    assert!(curl(&lab, "cl", "http://198.18.70.1:18080/", 2).is_err());
    // DEL again: still fine.
    run(&lab, "del");
}
