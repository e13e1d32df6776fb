//! Hardware profiles on a live bridge: the TC engine emulating a SmartNIC
//! (`offload = "profile:NAME"`) keeps a flow the NIC would refuse in
//! userspace with the NIC's own reason and still forwards it; a flow the
//! NIC holds runs in the TC engine; `offload-plan` gives the same verdicts
//! and changes nothing; a bad profile or bridge is refused by name.
//!
//! Root only. The lab is `o<pid>h`, torn down by its guard.

mod common;

use common::oflab::*;
use nicflow::control::proto::Request;
use serde_json::Value;

/// The reason the nfp driver gives for an ICMP type match
/// (`drivers/net/ethernet/netronome/nfp/flower/offload.c:
/// nfp_flower_calculate_key_layers`, Linux 6.1: ICMP keys are outside
/// `NFP_FLOWER_WHITELIST_DISSECTOR`).
const NFP_ICMP: &str = "unsupported offload: match not supported";

fn by_proto<'a>(flows: &'a [Value], proto: &str) -> Vec<&'a Value> {
    flows
        .iter()
        .filter(|f| f["match"].as_str().unwrap_or("").contains(proto))
        .collect()
}

#[test]
fn a_profile_keeps_what_the_nic_refuses_in_userspace_and_forwards_it() {
    if !privileged() || !common::have("iperf3") {
        common::skipped("needs root and iperf3");
        return;
    }
    let lab = Lab::up(
        "h",
        r#"offload = "profile:agilio""#,
        &[
            "priority=20,icmp,icmp_type=8,actions=normal",
            "priority=20,icmp,icmp_type=0,actions=normal",
            "priority=10,actions=normal",
        ],
    );
    let out = lab.exec("h1", &["ping", "-c", "5", "-i", "0.2", "198.18.0.2"]);
    assert!(out.contains(" 0% packet loss"), "{out}");
    lab.exec("h2", &["iperf3", "-s", "-D", "-1"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = lab.exec("h1", &["iperf3", "-c", "198.18.0.2", "-t", "1"]);
    assert!(out.contains("receiver"), "{out}");

    let flows = lab.dp_flows();
    let icmp = by_proto(&flows, "icmp");
    assert!(icmp.len() >= 2, "{flows:#?}");
    for f in &icmp {
        assert_eq!(f["engine"], "userspace", "{f}");
        assert_eq!(
            f["not_offloaded"].as_str(),
            Some(format!("agilio/driver: {NFP_ICMP}").as_str()),
            "{f}"
        );
        // Forwarded in userspace: every echo and reply counted there.
        assert!(f["packets"].as_u64().unwrap() >= 4, "{f}");
    }
    let tcp = by_proto(&flows, "tcp");
    assert!(!tcp.is_empty(), "{flows:#?}");
    assert!(
        tcp.iter()
            .any(|f| f["engine"] == "tc" && f["kernel_packets"].as_u64().unwrap_or(0) > 1000),
        "the NIC holds TCP: {tcp:#?}"
    );

    // `stats` shows the emulated NIC: its refusals by stage, its resources.
    let st = lab.stats();
    let prof = &st["offload"]["profile"];
    assert_eq!(prof["profile"], "agilio", "{st:#}");
    assert!(
        prof["refused"]["driver"].as_u64().unwrap_or(0) >= 2,
        "{st:#}"
    );
    assert!(
        prof["resources"]["mask_ids"]["used"].as_u64().unwrap() >= 1,
        "{st:#}"
    );

    // The plan agrees, flow by flow, and changes nothing.
    let plan = lab.req(Request::OffloadPlan {
        bridge: "br0".into(),
        profile: "agilio".into(),
    });
    assert_eq!(plan["bridge"], "br0");
    assert_eq!(plan["profile"], "agilio");
    let pflows = plan["flows"].as_array().unwrap();
    assert_eq!(pflows.len(), flows.len(), "{plan:#}");
    for (p, f) in pflows.iter().zip(&flows) {
        assert_eq!(p["match"], f["match"], "same flows, same order");
        assert_eq!(p["actions"], f["actions"]);
        let refused = f["not_offloaded"].as_str();
        assert_eq!(p["offloadable"], refused.is_none(), "{p} vs {f}");
        if let Some(r) = refused {
            assert!(r.ends_with(p["reason"].as_str().unwrap()), "{p} vs {f}");
        } else {
            assert_eq!(p["reason"], "", "{p}");
        }
    }
    for p in pflows
        .iter()
        .filter(|p| p["match"].as_str().unwrap().contains("icmp"))
    {
        assert_eq!(p["stage"], "driver", "{p}");
        assert_eq!(
            p["source"],
            "drivers/net/ethernet/netronome/nfp/flower/offload.c:nfp_flower_calculate_key_layers",
            "{p}"
        );
    }
    let masks = &plan["resources"]["mask_ids"];
    assert!(masks["used"].as_u64().unwrap() >= 1, "{plan:#}");
    assert_eq!(masks["limit"], 255, "{plan:#}");
    let pred = &plan["prediction"];
    let (all, nic) = (
        pred["packets"].as_f64().unwrap(),
        pred["packets_on_nic"].as_f64().unwrap(),
    );
    assert!(all > 0.0 && nic > 0.0 && nic < all, "{pred:#}");
    let after = lab.dp_flows();
    for (a, f) in after.iter().zip(&flows) {
        assert_eq!(a["engine"], f["engine"], "offload-plan changed a flow");
    }

    // Every profile answers for the same bridge.
    for name in ["cx7", "bf2", "bf3"] {
        let plan = lab.req(Request::OffloadPlan {
            bridge: "br0".into(),
            profile: name.into(),
        });
        assert_eq!(plan["flows"].as_array().unwrap().len(), flows.len());
    }
    // A bad profile or bridge: an error naming it.
    for (bridge, profile, want) in [("br0", "cx8", "cx8"), ("nobr", "cx7", "nobr")] {
        let resp = nicflow::control::daemon::request(
            &lab.socket,
            &Request::OffloadPlan {
                bridge: bridge.into(),
                profile: profile.into(),
            },
        )
        .unwrap();
        assert!(!resp.ok);
        assert!(resp.error.unwrap().contains(want));
    }
}

/// OVS's stateful firewall under `profile:cx7`: the NIC holds the `ct`
/// pass and the `+est` pass (not the `+new` one: mlx5 refuses matching on
/// ct_state +new), so an established TCP connection runs in the TC engine
/// and takes an entry of the NIC's conntrack table; switching the mode at
/// run time (`set offload=...`) takes effect both ways.
#[test]
fn established_connections_under_a_profile_and_switching_modes() {
    if !privileged() || !common::have("iperf3") {
        common::skipped("needs root and iperf3");
        return;
    }
    let lab = Lab::up(
        "hc",
        "",
        &[
            "table=0,priority=1,actions=drop",
            "table=0,priority=10,arp,actions=normal",
            "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)",
            "table=1,priority=1,actions=drop",
            "table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,actions=ct(commit),output:p2",
            "table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2",
            "table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1",
        ],
    );
    let set = |mode: &str| {
        lab.req(Request::Set {
            bridge: "br0".into(),
            key: "offload".into(),
            value: mode.into(),
        })
    };
    set("profile:cx7");
    assert_eq!(lab.stats()["offload"]["profile"]["profile"], "cx7");
    lab.exec("hc2", &["iperf3", "-s", "-D", "-1"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = lab.stats()["engines"]["tc_packets"].as_u64().unwrap_or(0);
    let client = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.ns("hc1")])
        .args(["iperf3", "-c", "198.18.0.2", "-t", "4"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("iperf3 -c");
    // Read while the connection lives: its entry holds the NIC's ct table.
    std::thread::sleep(std::time::Duration::from_millis(3000));
    let st = lab.stats();
    let out = client.wait_with_output().expect("iperf3 -c");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("receiver"), "{out}");
    let after = st["engines"]["tc_packets"].as_u64().unwrap_or(0);
    assert!(
        after - before > 1000,
        "established traffic in the TC engine under cx7: {} packets\n{:#?}",
        after - before,
        lab.dp_flows()
    );
    let prof = &st["offload"]["profile"];
    assert!(
        prof["resources"]["ct_zones"]["used"].as_u64().unwrap() >= 1,
        "{prof:#}"
    );
    let flows = lab.dp_flows();
    let new: Vec<_> = flows
        .iter()
        .filter(|f| f["match"].as_str().unwrap().contains("+new"))
        .collect();
    assert!(!new.is_empty(), "{flows:#?}");
    // The +new pass is nicflow's own userspace flow (it runs ct); a NIC
    // would refuse it too: offload-plan says so in mlx5's words.
    let plan = lab.req(Request::OffloadPlan {
        bridge: "br0".into(),
        profile: "cx7".into(),
    });
    for p in plan["flows"].as_array().unwrap() {
        if p["match"].as_str().unwrap().contains("+new") {
            assert_eq!(
                p["reason"], "matching on ct_state +new isn't supported",
                "{p}"
            );
        }
    }
    // Back to the defaults: no emulated NIC any more.
    set("auto");
    assert!(lab.stats()["offload"]["profile"].is_null());
    assert_eq!(lab.stats()["offload"]["mode"], "auto");
}
