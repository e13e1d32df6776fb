//! STATUS and GC of CNI spec 1.1, raw (as a runtime sends them) and
//! through `cnitool status` / `cnitool gc`, on a 1.1.0 network whose IPAM
//! plugin (Debian 12's host-local) only speaks up to 1.0.0.

use super::common::{skipped, NsLab};
use super::{addr_of, can_run, cnitool, ipam_files, netns_path, vfs, Cni};
use serde_json::json;
use std::process::Command;

#[test]
fn cni_status_and_gc() {
    if !can_run() {
        return;
    }
    let _serial = super::serial();
    let mut lab = NsLab::new("nfcni", "g", &["sw", "p1", "p2", "p3"]);
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    let cni = Cni::new(&lab);
    let conf = super::net_conf(&lab, "1.1.0");
    let (p1, p2, p3) = (
        netns_path(&lab, "p1"),
        netns_path(&lab, "p2"),
        netns_path(&lab, "p3"),
    );
    let v = cni.must(&lab, "VERSION", "x", None, &conf);
    assert!(
        v["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("1.1.0")),
        "{v}"
    );

    // STATUS: ready; not for a bridge the daemon lacks, nor without it.
    assert!(cni.must(&lab, "STATUS", "x", None, &conf).is_null());
    let mut other = conf.clone();
    other["bridge"] = json!("nobr0");
    let (ok, e) = cni.run("STATUS", "x", None, &other);
    assert!(!ok && e["code"] == 50, "{e}");
    let mut old = conf.clone();
    old["cniVersion"] = json!("1.0.0");
    let (ok, e) = cni.run("STATUS", "x", None, &old);
    assert!(!ok && e["code"] == 1 && e["cniVersion"] == "1.0.0", "{e}");

    // Three pods on a 1.1.0 network (host-local is handed 1.0.0); pod2
    // with a policy, so GC must remove its rules too.
    let r1 = cni.must(&lab, "ADD", "pod1", Some(&p1), &conf);
    assert_eq!(r1["cniVersion"], "1.1.0", "{r1}");
    let mut pol = conf.clone();
    pol["runtimeConfig"] = json!({ "networkPolicy": { "ingress": [] } });
    let r2 = cni.must(&lab, "ADD", "pod2", Some(&p2), &pol);
    let r3 = cni.must(&lab, "ADD", "pod3", Some(&p3), &conf);
    let cookie = nicflow::cni::policy::cookie(lab.prefix(), "pod2", "eth0");
    let tag = format!("cookie={cookie:#x},");
    assert!(lab.cli(&["dump-flows", "br0"]).unwrap().contains(&tag));
    assert_eq!(ipam_files(&lab).len(), 3);

    // GC keeping pod1 and pod3: pod2 goes entirely.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([
        { "containerID": "pod1", "ifname": "eth0" },
        { "containerID": "pod3", "ifname": "eth0" },
    ]);
    gc["cni.dev/attachments"] = gc["cni.dev/valid-attachments"].clone();
    assert!(cni.must(&lab, "GC", "x", None, &gc).is_null());
    assert!(!lab.link_exists("p2", "eth0"));
    assert_eq!(vfs(&lab).len(), 2);
    assert!(!lab.cli(&["dump-flows", "br0"]).unwrap().contains(&tag));
    assert!(!ipam_files(&lab).contains(&addr_of(&r2)));
    assert_eq!(ipam_files(&lab).len(), 2);
    lab.ping("p1", &addr_of(&r3))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.daemon_log()));
    // Again: nothing more to do.
    cni.must(&lab, "GC", "x", None, &gc);
    assert_eq!(vfs(&lab).len(), 2);

    let Some(tool) = cnitool() else {
        skipped("no cnitool (go install github.com/containernetworking/cni/cnitool@v1.3.0)");
        return;
    };
    let netconf = lab.dir().join("netconf");
    std::fs::create_dir_all(&netconf).unwrap();
    let mut plugin = conf.clone();
    let o = plugin.as_object_mut().unwrap();
    o.remove("name");
    o.remove("cniVersion");
    let list = json!({ "cniVersion": "1.1.0", "name": lab.prefix(), "plugins": [plugin] });
    std::fs::write(netconf.join("10-gc.conflist"), list.to_string()).unwrap();
    let tool_run = |lab: &NsLab, cmd: &str| {
        let out = Command::new(&tool)
            .args([cmd, lab.prefix(), &p1])
            .env("NETCONFPATH", &netconf)
            .env("CNI_PATH", &cni.path)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("cnitool {cmd}: {} {text}", out.status);
        (out.status.success(), text)
    };
    assert!(tool_run(&lab, "status").0);
    lab.stop_daemon();
    let (ok, e) = cni.run("STATUS", "x", None, &conf);
    assert!(!ok && e["code"] == 50, "{e}");
    let (ok, text) = tool_run(&lab, "status");
    assert!(!ok, "{text}");
    lab.restart_daemon();
    // `cnitool gc` passes no valid attachments: everything of the network
    // goes, also what cnitool itself never added.
    let (ok, text) = tool_run(&lab, "gc");
    assert!(ok, "{text}\n{}", lab.daemon_log());
    assert!(vfs(&lab).is_empty());
    assert!(ipam_files(&lab).is_empty(), "{:?}", ipam_files(&lab));
    assert!(!lab.link_exists("p1", "eth0") && !lab.link_exists("p3", "eth0"));
    let rec = lab.dir().join("nicflow-data").join(lab.prefix());
    assert_eq!(std::fs::read_dir(&rec).map(|d| d.count()).unwrap_or(0), 0);
}
