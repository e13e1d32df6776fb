//! The `xdp-redirect` engine of the experiments: the limit the XDP offload
//! engine is measured against.
//!
//! Issue 5 asks the XDP engine to come within 1.5x of "a minimal XDP
//! program that redirects every packet to the other port with no lookup, on
//! the same veths". This module is that program's loader:
//! `bpf/xdp_redirect_min.c` is attached natively to each switch-side veth
//! end and a DEVMAP_HASH pairs every port with its partner (both
//! directions). The testbed runs it as a process in the switch namespace
//! (`nicflow bench xdp-redirect p1=p2 ...`) that holds the attachments
//! until SIGTERM, so lab teardown removes it like any switch daemon.

use anyhow::{bail, Context};
use aya::maps::DevMapHash;
use aya::programs::{Xdp, XdpMode};
use aya::Ebpf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xdp_redirect_min.o"));

/// The program's object (also the bare-redirect baseline of
/// `bench::progcost`).
pub fn object() -> &'static [u8] {
    OBJ
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Port pairs `A=B` (interfaces in the current namespace): frames from
    /// A go to B and from B to A.
    #[arg(required = true)]
    pub pairs: Vec<String>,
}

fn ifindex(name: &str) -> anyhow::Result<u32> {
    let c = std::ffi::CString::new(name).context("interface name")?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!("no interface `{name}`");
    }
    Ok(i)
}

/// Start the engine in `netns` for `pairs` and wait until its program is
/// attached. The child is the switch process of the testbed (killed by lab
/// teardown with everything else in the namespace).
pub fn start(netns: &str, pairs: &[(String, String)]) -> anyhow::Result<std::process::Child> {
    use std::io::BufRead;
    let bin = super::nicflow_bin()?;
    let mut argv: Vec<String> = vec![
        bin.display().to_string(),
        "bench".into(),
        "xdp-redirect".into(),
    ];
    argv.extend(pairs.iter().map(|(a, b)| format!("{a}={b}")));
    let mut child = nicflow::lab::sys::in_ns(Some(netns), &argv)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .context("starting the xdp-redirect engine")?;
    let out = child.stdout.take().context("stdout")?;
    let mut line = String::new();
    let _ = std::io::BufReader::new(out).read_line(&mut line);
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        bail!("xdp-redirect engine did not start");
    }
    Ok(child)
}

/// Parse `A=B` pairs into interface names.
pub fn parse_pairs(pairs: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    pairs
        .iter()
        .map(|p| {
            let (a, b) = p
                .split_once('=')
                .with_context(|| format!("`{p}`: expected A=B"))?;
            if a.is_empty() || b.is_empty() || a == b {
                bail!("`{p}`: expected two different interfaces A=B");
            }
            Ok((a.to_string(), b.to_string()))
        })
        .collect()
}

/// Load, attach and pair; run until SIGINT/SIGTERM; detach by dropping.
pub fn cli(args: &Args) -> anyhow::Result<()> {
    let pairs = parse_pairs(&args.pairs)?;
    let mut ebpf = Ebpf::load(OBJ).context("loading xdp_redirect_min")?;
    let prog: &mut Xdp = ebpf
        .program_mut("xdp_redirect_min")
        .context("no program xdp_redirect_min")?
        .try_into()?;
    prog.load().context("BPF_PROG_LOAD(xdp_redirect_min)")?;
    let mut links = Vec::new();
    let mut ends = Vec::new();
    for (a, b) in &pairs {
        let (ia, ib) = (ifindex(a)?, ifindex(b)?);
        ends.push((ia, ib));
        for (name, i) in [(a, ia), (b, ib)] {
            links.push(
                prog.attach_to_if_index(i, XdpMode::Driver)
                    .with_context(|| format!("attaching natively to {name}"))?,
            );
        }
    }
    let mut peer: DevMapHash<_> =
        DevMapHash::try_from(ebpf.map_mut("peer").context("no map peer")?)?;
    for (ia, ib) in ends {
        peer.insert(ia, ib, None, 0).context("DEVMAP_HASH insert")?;
        peer.insert(ib, ia, None, 0).context("DEVMAP_HASH insert")?;
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    println!("ready");
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = links;
    // Dropping the object closes the program's links: detached.
    drop(ebpf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_and_reject_nonsense() {
        let p = parse_pairs(&["p1=p2".into(), "p3=p4".into()]).unwrap();
        assert_eq!(p[1], ("p3".into(), "p4".into()));
        assert!(parse_pairs(&["p1".into()]).is_err());
        assert!(parse_pairs(&["p1=p1".into()]).is_err());
        assert!(parse_pairs(&["=p2".into()]).is_err());
    }
}
