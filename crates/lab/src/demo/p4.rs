//! The demo's P4 section: the seed's tutorial program (Netronome's
//! `ipv6_forward.p4`, v1model) as the slow path of a bridge whose ports are
//! VFs, its rules from the tutorial's `user_config.json`.
//!
//! Place in the packet's path: a frame from a VF misses the bridge's
//! caches, runs through the P4 program in the daemon (exact match on the
//! IPv6 destination -> destination MAC + output port), and the decision is
//! cached as a datapath flow that the TC engine then forwards in the
//! kernel; the flow's hits are credited back to the table entry. The
//! corpus (`shared/p4-corpus`, outside the repository) is read in place;
//! the pieces here (the address rewrite of the rules, the include
//! directories) are shared with the `p4_tutorial` test.

use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The P4 corpus: `$NICFLOW_P4_CORPUS`, or `shared/p4-corpus` next to the
/// current directory or the executable (or one of their parents), when it
/// holds the tutorial.
pub fn corpus() -> Option<PathBuf> {
    let env = std::env::var_os("NICFLOW_P4_CORPUS").map(PathBuf::from);
    let mut starts: Vec<PathBuf> = Vec::new();
    if let Ok(d) = std::env::current_dir() {
        starts.push(d);
    }
    if let Ok(e) = std::env::current_exe() {
        starts.push(e);
    }
    let found = starts.iter().flat_map(|s| {
        s.ancestors()
            .map(|a| a.join("shared/p4-corpus"))
            .collect::<Vec<_>>()
    });
    env.into_iter()
        .chain(found)
        .find(|c| c.join("netronome/ipv6_forward.p4").is_file())
}

/// The tutorial's rules with their addresses moved into the lab range.
///
/// `user_config.json` forwards fc00::/7 addresses (`fc00::1`,
/// `fcf0:12::100`, `fc20::2`, ...); inside our namespaces we use only
/// 2001:db8::/32, so every address value gets the prefix `2001:db8:`
/// (`fc00::1` -> `2001:db8:fc00::1`, `fcf0:12::100` ->
/// `2001:db8:fcf0:12::100`): the same rules, ports and MACs at lab
/// addresses. The result is checked: every rule's address is in
/// 2001:db8::/32.
pub fn lab_user_config(original: &str) -> Result<String, String> {
    let text = original.replace("\"fc", "\"2001:db8:fc");
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("user_config.json: {e}"))?;
    let rules = v["tables"]["ingress::ipv6_lpm"]["rules"]
        .as_array()
        .ok_or("user_config.json: no rules for ingress::ipv6_lpm")?;
    for r in rules {
        let a = r["match"]["ipv6.dst_addr"]["value"]
            .as_str()
            .and_then(|a| a.parse::<Ipv6Addr>().ok())
            .ok_or_else(|| format!("rule {}: no IPv6 destination", r["name"]))?;
        if a.segments()[..2] != [0x2001, 0xdb8] {
            return Err(format!("rule {}: {a} is outside 2001:db8::/32", r["name"]));
        }
    }
    Ok(text)
}

/// How many VFs the tutorial's rules name (`v0.0` .. `v0.6`): the bridge
/// needs them all, since a rule naming a missing port is refused and
/// `load-config` is all or nothing.
pub const TUTORIAL_VFS: usize = 7;

/// The include directories to load the tutorial with: the corpus's
/// architecture files, read in place. p4c's `v1model.p4` is used as it
/// is: nicflow's interpreter accepts the program's Netronome spellings
/// (its `bit<16>` port assigned to the 9-bit `egress_spec`,
/// `mark_to_drop()` without arguments) as the Netronome compiler does.
pub fn include_dirs(corpus: &Path) -> Vec<PathBuf> {
    vec![corpus.join("include")]
}

/// The demo's hosts on the P4 bridge: VF index, host, MAC and address (the
/// rules to_vf0_0 and to_vf0_1, moved to the lab range).
const HOSTS: [(usize, &str, &str, &str); 2] = [
    (0, "h1", "00:15:4d:00:00:00", "2001:db8:fc00::1"),
    (1, "h2", "00:15:4d:00:00:01", "2001:db8:fc00::2"),
];

/// An address in the VFs' subnet that no rule names.
const NO_RULE: &str = "2001:db8:fc00::77";

/// The P4 section on the demo's lab: a second bridge `br1` on `sw1` in P4
/// mode, VFs v0.0 in h1 and v0.1 in h2 (v0.2..v0.6 in h2 too, unused),
/// ping and iperf3 over IPv6 between them, and what the switch holds.
pub(super) fn section(
    r: &mut String,
    topo: &crate::lab::Topology,
    opts: &crate::lab::LabOptions,
    sock: &Path,
) -> Result<()> {
    use nicflow_api::client::request;
    use nicflow_api::proto::{P4Op, Request};
    writeln!(
        r,
        "\n-- P4: the seed's tutorial (Netronome ipv6_forward.p4, v1model) between two VFs --"
    )?;
    let Some(corpus) = corpus() else {
        writeln!(
            r,
            "skipped: no P4 corpus (shared/p4-corpus next to the repository, or $NICFLOW_P4_CORPUS)"
        )?;
        return Ok(());
    };
    let ok = |req: Request| -> Result<nicflow_api::proto::Response> {
        let what = format!("{req:?}");
        let resp = request(sock, &req)?;
        if !resp.ok {
            bail!(
                "{}: {}",
                what.chars().take(60).collect::<String>(),
                resp.error.unwrap_or_default()
            );
        }
        Ok(resp)
    };
    let p4 = |op: P4Op| {
        ok(Request::P4 {
            bridge: "br1".into(),
            op,
        })
    };
    let include = include_dirs(&corpus);

    ok(Request::AddBr {
        bridge: "br1".into(),
    })?;
    for n in 0..TUTORIAL_VFS {
        let (host, ip) = match HOSTS.get(n) {
            Some(h) => (h.1, vec![format!("{}/64", h.3)]),
            None => ("h2", vec![]),
        };
        ok(Request::AddVf {
            bridge: "br1".into(),
            namespace: crate::lab::node_namespace(Some(topo), host, opts)?,
            name: Some(format!("p4vf{n}")),
            mac: Some(format!("00:15:4d:00:00:0{n}")),
            ips: ip,
            rep_type: None,
        })?;
    }
    let program = corpus.join("netronome/ipv6_forward.p4");
    let loaded = p4(P4Op::Load {
        path: Some(program.display().to_string()),
        source: None,
        arch: None,
        include: include.iter().map(|d| d.display().to_string()).collect(),
        cpu_port: None,
    })?;
    writeln!(
        r,
        "nicflow p4 load br1 ipv6_forward.p4: {}",
        loaded.text.trim()
    )?;
    let original = std::fs::read_to_string(corpus.join("netronome/user_config.json"))
        .context("reading user_config.json")?;
    let json = lab_user_config(&original).map_err(anyhow::Error::msg)?;
    let cfg = p4(P4Op::LoadConfig { json })?;
    writeln!(
        r,
        "nicflow p4 load-config br1 user_config.json (fc00::/7 moved to 2001:db8:fc..::): {}",
        cfg.text.trim()
    )?;
    // The program forwards only to the hosts' addresses: neighbour
    // discovery (to ff02::1:ff..) is dropped, so the neighbours are static.
    for (i, host, _, _) in HOSTS {
        for (_, _, mac, addr) in HOSTS.iter().filter(|o| o.1 != host) {
            super::lab_out(
                topo,
                host,
                &[
                    "ip",
                    "-6",
                    "neigh",
                    "replace",
                    addr,
                    "lladdr",
                    mac,
                    "dev",
                    &format!("p4vf{i}"),
                    "nud",
                    "permanent",
                ],
                opts,
            )?;
        }
    }
    // The first packet of each direction runs the program: retry once.
    let ping = || {
        super::lab_out(
            topo,
            "h1",
            &["ping", "-6", "-c", "5", "-i", "0.2", "-W", "1", HOSTS[1].3],
            opts,
        )
    };
    let out = ping().or_else(|_| ping())?;
    let rtt = out.lines().last().unwrap_or_default().trim().to_string();
    writeln!(r, "ping h1 -> h2 {}: {rtt}", HOSTS[1].3)?;
    super::lab_out(
        topo,
        "h2",
        &["iperf3", "-s", "-D", "-1", "-B", HOSTS[1].3, "-p", "5232"],
        opts,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let tcp = super::lab_out(
        topo,
        "h1",
        &[
            "iperf3", "-6", "-c", HOSTS[1].3, "-p", "5232", "-t", "2", "-J",
        ],
        opts,
    )?;
    let (gbps, _) = super::iperf_rate(&tcp, false)?;
    writeln!(r, "iperf3 TCP over IPv6 h1 -> h2, 2 s: {gbps:.2} Gbit/s")?;

    // An address no rule names: the table misses, the default action drops.
    super::lab_out(
        topo,
        "h1",
        &[
            "ip",
            "-6",
            "neigh",
            "replace",
            NO_RULE,
            "lladdr",
            "00:15:4d:00:00:77",
            "dev",
            "p4vf0",
            "nud",
            "permanent",
        ],
        opts,
    )?;
    let dropped = crate::lab::exec_output(
        Some(topo),
        "h1",
        &["ping", "-6", "-c", "2", "-i", "0.2", "-W", "1", NO_RULE],
        opts,
    )?;
    writeln!(
        r,
        "ping h1 -> {NO_RULE} (no rule: default action drop): {}",
        if dropped.status.success() {
            "ANSWERED (unexpected)"
        } else {
            "dropped"
        }
    )?;

    let dp = ok(Request::DumpDpFlows {
        bridge: "br1".into(),
    })?;
    let packets = |l: &str| {
        l.split("packets:")
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Unicast first (the hosts' own multicast, dropped, after), busiest first.
    let mut lines: Vec<&str> = dp.text.lines().collect();
    lines.sort_by_key(|l| (l.contains("ipv6_dst=ff02:"), std::cmp::Reverse(packets(l))));
    writeln!(
        r,
        "nicflow dump-dp-flows br1 (unicast first, busiest first):"
    )?;
    for l in lines.iter().take(7) {
        writeln!(r, "  {l}")?;
    }
    let in_tc = lines.iter().filter(|l| l.contains("engine:tc")).count();
    writeln!(
        r,
        "  ({} lines: {in_tc} flows in the TC engine; the drops to ff02:: are the hosts' own neighbour discovery and MLD)",
        lines.len()
    )?;
    let dump = p4(P4Op::TableDump { table: None })?;
    writeln!(r, "nicflow p4 table-dump br1 (entries hit so far):")?;
    for l in dump.text.lines().filter(|l| !l.contains(" packets:0 ")) {
        writeln!(r, "  {l}")?;
    }
    ok(Request::DelBr {
        bridge: "br1".into(),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(addrs: &[&str]) -> String {
        let rules: Vec<String> = addrs
            .iter()
            .map(|a| {
                format!(
                    r#"{{"name": "r", "match": {{ "ipv6.dst_addr" : {{ "value" : "{a}" }} }},
                       "action": {{"type": "ingress::ipv6_forward", "data": {{"port": {{"value": "v0.0"}}}}}}}}"#
                )
            })
            .collect();
        format!(
            r#"{{"tables": {{"ingress::ipv6_lpm": {{"rules": [{}]}}}}}}"#,
            rules.join(",")
        )
    }

    #[test]
    fn tutorial_addresses_move_into_the_lab_range() {
        let out = lab_user_config(&rules(&["fc00::1", "fcf0:12::100", "fc20::2"])).unwrap();
        for a in [
            "2001:db8:fc00::1",
            "2001:db8:fcf0:12::100",
            "2001:db8:fc20::2",
        ] {
            assert!(out.contains(&format!("\"{a}\"")), "{a} in {out}");
        }
        // Ports and the rest are left alone.
        assert!(out.contains("\"v0.0\""), "{out}");
    }

    #[test]
    fn an_address_left_outside_the_lab_range_is_refused() {
        let e = lab_user_config(&rules(&["fc00::1", "2001:db9::1"])).unwrap_err();
        assert!(e.contains("2001:db9::1") && e.contains("outside"), "{e}");
        assert!(lab_user_config("{").is_err());
        assert!(lab_user_config(&rules(&["not-an-address"])).is_err());
    }
}
