//! The seed's P4 tutorial end to end: Netronome's `ipv6_forward.p4`
//! (v1model, unmodified, from ../shared/p4-corpus/netronome) as the slow
//! path of a real daemon's bridge, its rules from the tutorial's
//! `user_config.json`, and IPv6 traffic between VFs in namespaces.
//!
//! ```text
//!   c0 (vf0 00:15:4d:00:00:00 2001:db8:fc00::1) --br0pf0vf0--+
//!   c1 (vf1 00:15:4d:00:00:01 2001:db8:fc00::2) --br0pf0vf1--+ nicflow br0 (namespace sw)
//!   c2 (vf2 00:15:4d:00:00:02 2001:db8:fc00::3) --br0pf0vf2--+   slow path: ipv6_forward.p4
//!   c3 (vf3 00:15:4d:00:00:03 2001:db8:fc00::4) --br0pf0vf3--+   (exact match on the IPv6
//!   spare (vf4, vf5, vf6: ports the rules name, no traffic) -+    destination -> MAC + port)
//! ```
//!
//! The program is loaded as written, against p4c's `v1model.p4` (the
//! corpus's `include/`; nicflow accepts the Netronome spellings the
//! program uses: its 16-bit port into the 9-bit `egress_spec`,
//! `mark_to_drop()` without arguments), and the rules' fc00::/7 addresses
//! are moved into 2001:db8::/32 at load time
//! (`nicflow::demo::p4::lab_user_config`).
//!
//! The program's decisions are cached as datapath flows and forwarded by
//! the TC engine (the default offload); their hits are credited back to
//! the table entries. The program drops everything it has no rule for:
//! neighbour discovery too, so the hosts get static neighbours.
//!
//! Every namespace is `nfp4t<pid>-*`; a guard kills the daemon and the
//! processes in them, deletes them and the scratch directory even when an
//! assertion fails. Needs root, `ip`, `ping` and `iperf3`, and the P4
//! corpus; skips with a message otherwise.

mod common;

use common::{lab_possible_with, skipped, NsLab};
use nicflow::demo::p4 as p4demo;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The P4 corpus (`shared/p4-corpus` next to the repository, a worktree
/// of it or the test binary; `NICFLOW_P4_CORPUS` overrides), when it holds
/// the tutorial.
fn corpus() -> Option<PathBuf> {
    let found = p4demo::corpus().or_else(|| {
        nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))])
            .filter(|c| c.join("netronome/ipv6_forward.p4").is_file())
    });
    if found.is_none() {
        skipped("no P4 corpus with netronome/ipv6_forward.p4 (shared/p4-corpus)");
    }
    found
}

/// VF index N: its namespace, MAC and (for the four hosts) the address the
/// rules forward to it (rule to_vf0_N; v0.2 is fc00::3, v0.3 fc00::4).
const HOSTS: [(&str, &str, &str); 4] = [
    ("c0", "00:15:4d:00:00:00", "2001:db8:fc00::1"),
    ("c1", "00:15:4d:00:00:01", "2001:db8:fc00::2"),
    ("c2", "00:15:4d:00:00:02", "2001:db8:fc00::3"),
    ("c3", "00:15:4d:00:00:03", "2001:db8:fc00::4"),
];
/// An address no rule names: the table misses, the default drops.
const NO_RULE: &str = "2001:db8:fc00::77";

fn cli(lab: &NsLab, args: &[&str]) -> String {
    lab.cli(args)
        .unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", lab.daemon_log()))
}

/// `(packets, line)` of the table-dump entry whose key is `addr`.
fn entry_hits(dump: &str, addr: &str) -> (u64, String) {
    let key = format!("[0x{:x}]", u128::from(addr.parse::<Ipv6Addr>().unwrap()));
    let line = dump
        .lines()
        .find(|l| l.contains(&key))
        .unwrap_or_else(|| panic!("no entry {key} ({addr}) in:\n{dump}"))
        .to_string();
    let n = line
        .split(" packets:")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in {line}"));
    (n, line)
}

/// Table-dump lines without their counters (what a refused change must
/// leave as it was).
fn entries_only(dump: &str) -> Vec<String> {
    dump.lines()
        .map(|l| l.split(" packets:").next().unwrap_or(l).to_string())
        .collect()
}

/// The dump-dp-flows lines that match on `addr` as IPv6 destination.
fn flows_to<'a>(dp: &'a str, addr: &str) -> Vec<&'a str> {
    dp.lines()
        .filter(|l| l.contains(&format!("ipv6_dst={addr},")))
        .collect()
}

/// `ping -6` from `from` to `to`, `n` packets 0.2 s apart: the output of a
/// run where every packet was answered (three tries: the first packet of a
/// flow takes the slow path).
fn ping6(lab: &NsLab, from: &str, to: &str, n: u32) -> Result<String, String> {
    let n = n.to_string();
    let mut last = String::new();
    for _ in 0..3 {
        match lab.exec(
            from,
            &["ping", "-6", "-n", "-c", &n, "-i", "0.2", "-W", "1", to],
        ) {
            Ok(out) if out.contains(" 0% packet loss") => return Ok(out),
            Ok(out) => last = out,
            Err(e) => last = e,
        }
    }
    Err(format!("{last}\ndaemon log:\n{}", lab.daemon_log()))
}

#[test]
fn ipv6_forward_tutorial_between_vfs() {
    if !lab_possible_with(&[("iperf3", "-v")]) {
        return;
    }
    let Some(corpus) = corpus() else { return };
    let program = corpus.join("netronome/ipv6_forward.p4");
    let mut lab = NsLab::new("nfp4t", "", &["sw", "c0", "c1", "c2", "c3", "spare"]);
    let include = p4demo::include_dirs(&corpus);
    let mut inc_args: Vec<&str> = Vec::new();
    for d in &include {
        inc_args.extend(["-I", d.to_str().unwrap()]);
    }
    lab.restart_daemon();
    cli(&lab, &["add-br", "br0"]);

    // VFs 0..3 for the hosts, 4..6 because the rules name them too (a rule
    // naming a port the bridge lacks is refused, all or nothing).
    for n in 0..7usize {
        let mac = format!("00:15:4d:00:00:0{n}");
        let ns = lab.ns(HOSTS.get(n).map_or("spare", |h| h.0));
        let ip = HOSTS.get(n).map(|h| format!("{}/64", h.2));
        let mut args = vec!["--json", "add-vf", "br0", &ns, "--mac", &mac];
        if let Some(ip) = &ip {
            args.extend(["--ip", ip.as_str()]);
        }
        let v: serde_json::Value = serde_json::from_str(&cli(&lab, &args)).unwrap();
        assert_eq!(v["name"], format!("vf{n}"), "{v}");
    }

    // The program, unmodified, then the tutorial's rules (lab addresses).
    let mut load = vec!["p4", "load", "br0", program.to_str().unwrap()];
    load.extend(&inc_args);
    let out = cli(&lab, &load);
    assert!(out.contains("v1model") && out.contains("1 tables"), "{out}");
    let original = std::fs::read_to_string(corpus.join("netronome/user_config.json")).unwrap();
    let config = lab.dir().join("user_config.json");
    std::fs::write(&config, p4demo::lab_user_config(&original).unwrap()).unwrap();
    let out = cli(
        &lab,
        &["p4", "load-config", "br0", config.to_str().unwrap()],
    );
    assert!(out.contains("12 rule(s) loaded"), "{out}");
    let info = cli(&lab, &["p4", "info", "br0"]);
    assert!(
        info.contains("ipv6_forward.p4 (v1model)")
            && info.contains("ipv6_lpm")
            && info.contains("ipv6_forward(dstAddr<48>, port<16>)"),
        "{info}"
    );
    // The revalidation line, with its two counts (not their values: a
    // host's IPv6 router solicitation or DAD may have crossed the bridge
    // before the rules came, and its flow gone with the default action).
    let counts: Vec<u64> = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("revalidation kept:"))
        .and_then(|r| r.split_once(" removed:"))
        .map(|(k, r)| {
            [k, r]
                .iter()
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(counts.len(), 2, "{info}");

    // Static neighbours: the program forwards only to the hosts' own
    // addresses, so neighbour solicitations (to ff02::1:ffXX:XXXX) die.
    for (i, (h, _, _)) in HOSTS.iter().enumerate() {
        let dev = format!("vf{i}");
        for (_, mac, addr) in HOSTS.iter().filter(|o| o.0 != *h) {
            lab.must(
                h,
                &[
                    "ip",
                    "-6",
                    "neigh",
                    "replace",
                    addr,
                    "lladdr",
                    mac,
                    "dev",
                    &dev,
                    "nud",
                    "permanent",
                ],
            );
        }
    }
    lab.must(
        "c0",
        &[
            "ip",
            "-6",
            "neigh",
            "replace",
            NO_RULE,
            "lladdr",
            "00:15:4d:00:00:77",
            "dev",
            "vf0",
            "nud",
            "permanent",
        ],
    );

    // Ping between VF0 and VF1 (and VF3 -> VF2) through the program.
    let p01 = ping6(&lab, "c0", HOSTS[1].2, 5).unwrap();
    ping6(&lab, "c1", HOSTS[0].2, 3).unwrap();
    ping6(&lab, "c3", HOSTS[2].2, 3).unwrap();
    eprintln!(
        "ping6 c0 -> c1: {}",
        p01.lines().last().unwrap_or_default().trim()
    );

    // TCP through the cached flows: iperf3 for two seconds.
    lab.must(
        "c1",
        &["iperf3", "-s", "-D", "-1", "-B", HOSTS[1].2, "-p", "5232"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let tcp = lab
        .exec(
            "c0",
            &[
                "iperf3", "-6", "-c", HOSTS[1].2, "-p", "5232", "-t", "2", "-J",
            ],
        )
        .unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", lab.daemon_log()));
    let v: serde_json::Value = serde_json::from_str(&tcp).expect("iperf3 JSON");
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let bytes = v["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0);
    eprintln!(
        "iperf3 -6 c0 -> c1, 2 s: {:.1} Mbit/s ({bytes} bytes)",
        bps / 1e6
    );
    assert!(bytes > 1e6, "iperf3 moved {bytes} bytes:\n{tcp}");

    // The decisions are datapath flows on the IPv6 destination, in the TC
    // engine (later packets forwarded in the kernel).
    let dp = cli(&lab, &["dump-dp-flows", "br0"]);
    eprintln!("dump-dp-flows br0:\n{dp}");
    for addr in [HOSTS[0].2, HOSTS[1].2] {
        let flows = flows_to(&dp, addr);
        assert!(!flows.is_empty(), "no flow to {addr}:\n{dp}");
        assert!(
            flows.iter().any(|l| l.contains("engine:tc")),
            "no flow to {addr} in the TC engine:\n{dp}"
        );
    }

    // Their hits reach the entries: a second burst makes the count grow.
    let before = cli(&lab, &["p4", "table-dump", "br0"]);
    let (n0, _) = entry_hits(&before, HOSTS[1].2);
    assert!(n0 > 0, "entry to_vf0_1 never hit:\n{before}");
    ping6(&lab, "c0", HOSTS[1].2, 5).unwrap();
    let after = cli(&lab, &["p4", "table-dump", "br0"]);
    let (n1, line) = entry_hits(&after, HOSTS[1].2);
    eprintln!("table-dump to_vf0_1: {n0} packets, {n1} after 5 more pings: {line}");
    assert!(n1 >= n0 + 5, "{n0} -> {n1}:\n{after}");
    let (n_back, _) = entry_hits(&after, HOSTS[0].2);
    assert!(n_back >= 5, "entry to_vf0_0:\n{after}");

    // No rule: dropped, and the drop is a flow too.
    assert!(
        lab.exec(
            "c0",
            &["ping", "-6", "-n", "-c", "2", "-i", "0.2", "-W", "1", NO_RULE]
        )
        .is_err(),
        "ping to {NO_RULE} (no rule) answered"
    );
    let dp = cli(&lab, &["dump-dp-flows", "br0"]);
    let drops = flows_to(&dp, NO_RULE);
    assert!(
        drops.iter().any(|l| l.ends_with("actions:drop")),
        "no drop flow for {NO_RULE}:\n{dp}"
    );

    // A program with a syntax error: refused with file:line, the loaded
    // program stays and traffic still flows.
    let bad = lab.dir().join("bad.p4");
    std::fs::write(
        &bad,
        "#include <core.p4>\n#include <v1model.p4>\n\nheader h_t {\n    bit<8> x\n}\n",
    )
    .unwrap();
    let mut load = vec!["p4", "load", "br0", bad.to_str().unwrap()];
    load.extend(&inc_args);
    let e = lab
        .cli(&load)
        .expect_err("loading a program with a syntax error succeeded");
    eprintln!("p4 load bad.p4: {e}");
    assert!(
        e.contains("bad.p4:5:") || e.contains("bad.p4:6:"),
        "no file:line in: {e}"
    );
    let info = cli(&lab, &["p4", "info", "br0"]);
    assert!(info.contains("ipv6_forward.p4 (v1model)"), "{info}");
    ping6(&lab, "c0", HOSTS[1].2, 3).unwrap();

    // A rule naming a port that does not exist: refused naming the rule,
    // and the good rule before it is not kept either.
    let before = cli(&lab, &["p4", "table-dump", "br0"]);
    let bad_config = lab.dir().join("bad_config.json");
    let rule = |name: &str, addr: &str, port: &str| {
        serde_json::json!({
            "name": name,
            "match": {"ipv6.dst_addr": {"value": addr}},
            "action": {"type": "ingress::ipv6_forward",
                       "data": {"dstAddr": {"value": "00:15:4d:00:00:00"},
                                "port": {"value": port}}}
        })
    };
    let json = serde_json::json!({"tables": {"ingress::ipv6_lpm": {"rules": [
        rule("lab_ok", NO_RULE, "v0.0"),
        rule("lab_bad_port", "2001:db8:fc00::78", "v9.9"),
    ]}}});
    std::fs::write(&bad_config, json.to_string()).unwrap();
    let e = lab
        .cli(&["p4", "load-config", "br0", bad_config.to_str().unwrap()])
        .expect_err("a rule with port v9.9 was accepted");
    eprintln!("p4 load-config bad_config.json: {e}");
    assert!(e.contains("lab_bad_port") && e.contains("v9.9"), "{e}");
    let after = cli(&lab, &["p4", "table-dump", "br0"]);
    assert_eq!(entries_only(&before), entries_only(&after));
    assert!(
        lab.exec("c0", &["ping", "-6", "-n", "-c", "1", "-W", "1", NO_RULE])
            .is_err(),
        "{NO_RULE} forwarded after a refused load-config"
    );

    cli(&lab, &["del-br", "br0"]);
    lab.stop_daemon();
}

/// An ICMPv6 echo request from 2001:db8:fc00::1 to `dst` (Ethernet to the
/// tutorial's MAC of VF 1).
fn echo6(dst: &str) -> Vec<u8> {
    let mut f = vec![
        0x00, 0x15, 0x4d, 0, 0, 1, 0x00, 0x15, 0x4d, 0, 0, 0, 0x86, 0xdd,
    ];
    f.extend([0x60, 0, 0, 0, 0, 8, 58, 64]);
    f.extend(HOSTS[0].2.parse::<Ipv6Addr>().unwrap().octets());
    f.extend(dst.parse::<Ipv6Addr>().unwrap().octets());
    f.extend([128, 0, 0, 0, 0, 1, 0, 1]);
    f
}

/// The tutorial against p4c's own `v1model.p4` (the corpus's include/),
/// in process: the program assigns its `bit<16>` port to the 9-bit
/// `egress_spec` and calls `mark_to_drop()` without arguments, which p4c's
/// v1model does not allow but Netronome's compiler does. nicflow runs it
/// as the Netronome dialect means it (docs/p4.md): it must load, and hit
/// and miss must forward and drop without an interpreter error.
#[test]
fn ipv6_forward_against_p4c_v1model_loads_consistently() {
    let Some(corpus) = corpus() else { return };
    let program = corpus.join("netronome/ipv6_forward.p4");
    let mut pl = nicflow_p4::Pipeline::load(&program, &[corpus.join("include")], None)
        .unwrap_or_else(|e| panic!("the tutorial must load against p4c's v1model.p4: {e}"));
    let info = pl.table_info("ipv6_lpm").unwrap();
    let words: Vec<String> = ["ipv6_forward", HOSTS[1].2, "=>", HOSTS[1].1, "2"]
        .iter()
        .map(|w| w.to_string())
        .collect();
    let spec = nicflow_p4::entries::from_cli(&info, &words, &|_| None).unwrap();
    pl.table_add(&info.name, spec).unwrap();
    // A hit (ipv6_forward) and a miss (default drop()).
    for (dst, port) in [(HOSTS[1].2, Some(2)), (NO_RULE, None)] {
        let out = pl.process(1, &echo6(dst), 0);
        assert_eq!(out.trace.error, None, "to {dst}");
        let ports: Vec<u32> = out.outputs.iter().map(|(p, _)| *p).collect();
        assert_eq!(ports, port.into_iter().collect::<Vec<_>>(), "to {dst}");
    }
}
