//! Every value the plugin puts in a path is checked as the CNI spec says
//! (issue 28, item 4): a network `name` like `../../x` or `/abs`, a
//! container ID or interface name with `/`, a relative `dataDir` are the
//! spec's error JSON (code 7 for the configuration, 4 for the `CNI_*`
//! variables), a non-zero exit, and nothing created anywhere; a failed ADD
//! with good names leaves nothing behind either (no directory, record,
//! address, VF).

use super::common::NsLab;
use super::{can_run, ipam_files, netns_path, vfs, Cni};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Every path under `d` (recursively), sorted.
fn tree(d: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.filter_map(Result::ok) {
            let p = e.path();
            v.push(p.clone());
            if p.is_dir() && !p.is_symlink() {
                v.extend(tree(&p));
            }
        }
    }
    v.sort();
    v
}

/// Removes the paths a plugin without the checks would have written
/// outside the lab (so a run against the old code cleans up too).
struct Outside(Vec<PathBuf>);

impl Drop for Outside {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

#[test]
fn cni_names_stay_inside_data_dir() {
    if !can_run() {
        return;
    }
    let _serial = super::serial();
    let lab = NsLab::new("nfcni", "n", &["sw", "p1"]);
    let mut lab = lab;
    lab.restart_daemon();
    lab.cli(&["add-br", "br0"]).unwrap();
    let cni = Cni::new(&lab);
    let conf = super::net_conf(&lab, "1.0.0");
    let data = lab.dir().join("nicflow-data");
    let p1 = netns_path(&lab, "p1");
    // `dataDir/../../NAME` is /tmp/NAME (the lab is /tmp/PREFIX).
    let up = format!("{}-escape", lab.prefix());
    let abs = std::env::temp_dir().join(format!("{}-abs", lab.prefix()));
    let outside = Outside(vec![std::env::temp_dir().join(&up), abs.clone()]);
    let before = tree(lab.dir());

    let long = "n".repeat(256);
    let bad_names = [
        format!("../../{up}"),
        abs.display().to_string(),
        "a/b".to_string(),
        "..".to_string(),
        ".hidden".to_string(),
        "-x".to_string(),
        long,
        String::new(),
    ];
    for name in &bad_names {
        let mut c = conf.clone();
        c["name"] = json!(name);
        for cmd in ["ADD", "DEL"] {
            let (ok, e) = cni.run(cmd, "pod1", Some(&p1), &c);
            assert!(!ok, "{cmd} with name {name:?} succeeded: {e}");
            assert_eq!(e["code"], 7, "{cmd} {name:?}: {e}");
            assert!(e["msg"].as_str().unwrap().contains("`name`"), "{e}");
        }
    }
    let mut bad_confs = Vec::new();
    for (key, v) in [
        ("bridge", json!("br/0")),
        ("bridge", json!("..")),
        ("dataDir", json!("relative/data")),
        ("dataDir", json!(format!("{}/../x", lab.dir().display()))),
    ] {
        let mut c = conf.clone();
        c[key] = v;
        bad_confs.push((key, c));
    }
    let mut ipam_up = conf.clone();
    ipam_up["ipam"]["type"] = json!("..");
    bad_confs.push(("ipam type", ipam_up));
    for (key, c) in &bad_confs {
        let (ok, e) = cni.run("ADD", "pod1", Some(&p1), c);
        assert!(!ok && e["code"] == 7, "{key}: {e}");
    }
    for (id, ifname) in [
        ("../../x", "eth0"),
        ("..", "eth0"),
        ("a/b", "eth0"),
        (".x", "eth0"),
        ("pod1", "../e"),
        ("pod1", "a/b"),
        ("pod1", "eth0123456789abc"),
        ("pod1", ".."),
    ] {
        let (ok, e) = cni.run_if("ADD", id, ifname, Some(&p1), &conf);
        assert!(!ok && e["code"] == 4, "{id:?} {ifname:?}: {e}");
    }
    let (ok, e) = cni.run("ADD", &"c".repeat(250), Some(&p1), &conf);
    assert!(!ok && e["code"] == 4, "{e}");
    // Nothing made, inside the lab or outside it.
    for p in &outside.0 {
        assert!(!p.exists(), "{} was created", p.display());
    }
    assert_eq!(tree(lab.dir()), before);
    assert!(vfs(&lab).is_empty());
    assert!(!lab.link_exists("p1", "eth0"));

    // A failed ADD with good names (the IPAM plugin fails after the VF and
    // the record are made) removes all it made: VF, record, directories.
    let mut no_ipam = conf.clone();
    no_ipam["ipam"]["type"] = json!("no-such-ipam");
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &no_ipam);
    assert!(!ok, "{e}");
    assert!(e["code"].as_u64().is_some(), "{e}");
    assert!(vfs(&lab).is_empty());
    assert!(!lab.link_exists("p1", "eth0"));
    assert!(!data.exists(), "left behind: {:?}", tree(&data));
    // IPv6 address for a policed pod: refused after IPAM ran; its lease is
    // released too.
    let mut v6 = conf.clone();
    v6["ipam"]["ranges"] = json!([[{ "subnet": "2001:db8:50::/64" }]]);
    v6["runtimeConfig"] = json!({ "networkPolicy": { "ingress": [] } });
    let (ok, e) = cni.run("ADD", "pod1", Some(&p1), &v6);
    assert!(!ok && e["code"] == 7, "{e}");
    assert!(vfs(&lab).is_empty());
    assert!(!data.exists(), "left behind: {:?}", tree(&data));
    assert!(
        ipam_files(&lab).is_empty()
            && !tree(&lab.dir().join("ipam")).iter().any(|p| p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("2001"))),
        "{:?}",
        tree(&lab.dir().join("ipam"))
    );

    // A good ADD records inside dataDir/NAME; DEL takes the directory away.
    cni.must(&lab, "ADD", "pod1", Some(&p1), &conf);
    let rec = data.join(lab.prefix()).join("pod1-eth0.json");
    assert!(rec.exists(), "{:?}", tree(&data));
    cni.must(&lab, "DEL", "pod1", Some(&p1), &conf);
    assert!(!data.join(lab.prefix()).exists(), "{:?}", tree(&data));
    assert!(vfs(&lab).is_empty());
}
