//! Small things the experiments need from the host around the lab: which
//! tools are installed and their versions (for the report), the load
//! average (recorded at start and end of a run), and an nftables firewall
//! loaded into a switch namespace, bridge family first, with the fallback
//! a kernel without `nf_conntrack_bridge` needs.

use anyhow::Context;
use nicflow::lab::sys;
use std::path::Path;
use std::process::{Command, Stdio};

/// Is `tool` on the PATH?
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The first line a `--version`-style command prints (stdout or stderr).
pub fn tool_version(argv: &[&str]) -> String {
    Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .ok()
        .map(|o| {
            let t = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            t.lines().next().unwrap_or("").trim().to_string()
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("{} (version unknown)", argv[0]))
}

/// The 1/5/15-minute load averages, as `/proc/loadavg` has them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Replace namespace `ns`'s nftables ruleset with `text` (a file in `dir`).
pub fn nft_load(ns: &str, text: &str, dir: &Path) -> anyhow::Result<()> {
    let f = dir.join("firewall.nft");
    std::fs::write(&f, format!("flush ruleset\n{text}"))?;
    let f = f.display().to_string();
    sys::run(&mut sys::in_ns(Some(ns), &["nft", "-f", &f]))?;
    Ok(())
}

/// Load a stateful firewall into switch namespace `ns`: `rules(true)` in
/// the bridge family if the kernel has `nf_conntrack_bridge`, otherwise
/// `rules(false)` in the `ip` family's forward hook behind br_netfilter
/// (`bridge-nf-call-iptables=1` in that namespace only). Returns whether
/// the bridge family took it, and a line for the report saying which.
pub fn nft_stateful_firewall(
    ns: &str,
    dir: &Path,
    rules: impl Fn(bool) -> String,
) -> anyhow::Result<(bool, String)> {
    match nft_load(ns, &rules(true), dir) {
        Ok(()) => Ok((true, "bridge family (nf_conntrack_bridge)".into())),
        Err(e) => {
            tracing::info!("bridge-family ct refused ({e:#}); ip family + br_netfilter");
            sys::sysctl(Some(ns), "net.bridge.bridge-nf-call-iptables", "1")
                .context("br_netfilter sysctl")?;
            nft_load(ns, &rules(false), dir).context("loading the nftables firewall")?;
            let why = format!("{e:#}");
            let why = why
                .lines()
                .find(|l| l.contains("Error:"))
                .and_then(|l| l.split("Error:").nth(1))
                .unwrap_or("nf_conntrack_bridge missing")
                .trim()
                .to_string();
            Ok((
                false,
                format!(
                    "ip family forward hook behind br_netfilter (bridge-family ct refused: {why})"
                ),
            ))
        }
    }
}
