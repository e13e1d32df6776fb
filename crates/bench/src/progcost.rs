//! What one run of a BPF program costs, read from the kernel.
//!
//! Place in the experiments: `bench forward` calls [`live`] around an extra
//! traffic run of each nicflow engine with `kernel.bpf_stats_enabled` on
//! ([`StatsEnabled`]), so the report gives the engine's programs' own
//! time per packet (`run_time_ns / run_cnt`, the kernel's accounting), and
//! [`test_run_costs`] for the same programs and bare redirect programs
//! (`tc_upcall`: `bpf_redirect` and nothing else; `xdp_redirect_min`)
//! under `BPF_PROG_TEST_RUN`, so the datapath's parse + lookup + actions
//! can be told apart from the redirect itself.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A program's accumulated run time and runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgStat {
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// A program's cost over an interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgCost {
    pub name: String,
    pub runs: u64,
    pub ns_per_run: f64,
}

/// `kernel.bpf_stats_enabled` on while this lives (the sysctl, put back
/// to what it was when dropped, if it could be read).
pub struct StatsEnabled {
    old: Option<String>,
}

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl StatsEnabled {
    pub fn on() -> StatsEnabled {
        let old = std::fs::read_to_string(SYSCTL).ok();
        if let Err(e) = std::fs::write(SYSCTL, "1") {
            tracing::warn!("{SYSCTL}: {e}; program costs will read 0");
        }
        StatsEnabled { old }
    }
}

impl Drop for StatsEnabled {
    fn drop(&mut self) {
        if let Some(old) = &self.old {
            let _ = std::fs::write(SYSCTL, old.trim());
        }
    }
}

/// Programs held open by process `pid` (its BPF program fds), by id:
/// run time and count from `/proc/PID/fdinfo`, names from the kernel's
/// program info.
pub fn live(pid: u32) -> Vec<ProgStat> {
    nicflow::offload::kernel::runstats::of_process(Some(pid))
        .into_values()
        .map(|s| ProgStat {
            name: s.name,
            run_time_ns: s.run_time_ns,
            run_cnt: s.run_cnt,
        })
        .collect()
}

/// Per program name: runs and ns per run between two [`live`] snapshots.
pub fn delta(before: &[ProgStat], after: &[ProgStat]) -> Vec<ProgCost> {
    let sum = |v: &[ProgStat]| {
        let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for s in v {
            let e = m.entry(s.name.clone()).or_default();
            e.0 += s.run_time_ns;
            e.1 += s.run_cnt;
        }
        m
    };
    let (b, a) = (sum(before), sum(after));
    a.into_iter()
        .filter_map(|(name, (t, n))| {
            let (t0, n0) = b.get(&name).copied().unwrap_or_default();
            let runs = n.checked_sub(n0)?;
            (runs > 0).then(|| ProgCost {
                name,
                runs,
                ns_per_run: t.saturating_sub(t0) as f64 / runs as f64,
            })
        })
        .collect()
}

/// Mean ns per run under `BPF_PROG_TEST_RUN` (median of 5 trials of
/// 100,000 runs) of every [`Scenario`]: the TC and XDP datapath programs
/// on a hit, and the bare redirect programs. Trials alternate between the
/// scenarios, so drift on this shared machine hits every one alike. Runs
/// in a private network namespace (two veths; gone with the thread).
pub fn test_run_costs() -> Result<Vec<(String, f64)>, String> {
    test_run_costs_with(5, 100_000)
}

/// As [`test_run_costs`] with `trials` trials of `runs` runs each.
pub fn test_run_costs_with(trials: usize, runs: u32) -> Result<Vec<(String, f64)>, String> {
    test_run_costs_only(trials, runs, None, Vec::new())
}

/// As [`test_run_costs_with`], only the scenarios whose name contains
/// `only` (to profile one with `perf`), plus a 1-mask hit of each TC
/// variant in `variants` (other builds of `tc_dp.c`, named by their file
/// stem: e.g. the stage floors `-DDP_PROF_STOP=n`).
pub fn test_run_costs_only(
    trials: usize,
    runs: u32,
    only: Option<String>,
    variants: Vec<(String, Vec<u8>)>,
) -> Result<Vec<(String, f64)>, String> {
    std::thread::spawn(move || test_run_costs_here(trials.max(1), runs.max(1), only, variants))
        .join()
        .map_err(|_| "test-run thread panicked".to_string())?
}

/// Name of the bare TC redirect's row: the baseline of the TC rows.
pub const TC_BARE: &str = "tc_upcall (bare bpf_redirect)";
/// Name of the bare XDP redirect's row.
pub const XDP_BARE: &str = "xdp_redirect_min (bare devmap redirect)";

type Measure<'a> = Box<dyn Fn() -> Result<f64, String> + 'a>;

fn test_run_costs_here(
    trials: usize,
    runs: u32,
    only: Option<String>,
    variants: Vec<(String, Vec<u8>)>,
) -> Result<Vec<(String, f64)>, String> {
    use nicflow::datapath::DpAction;
    use nicflow::offload::kernel::engine::prog_test_run;
    use nicflow::offload::kernel::{encode, encode_tc, XdpEngine, XdpEngineConfig};
    use nicflow_flow::{extract, FlowKey, FlowMask};
    use nicflow_packet::builder::FrameBuilder;
    // SAFETY: unshare(2) only affects this thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
    }
    {
        use nicflow::os::link::{self, VethEnd};
        // A socket made here, by this thread: in its private namespace.
        let mut rt = nicflow::os::netlink::Rtnl::open_here().map_err(|e| e.to_string())?;
        link::add_veth(&mut rt, &VethEnd::named("nfpc0"), &VethEnd::named("nfpc1"))
            .and_then(|()| link::set_up(&mut rt, "nfpc0"))
            .and_then(|()| link::set_up(&mut rt, "nfpc1"))
            .map_err(|e| e.to_string())?;
    }
    // (Not /sys: it shows the namespace it was mounted in, not this one.)
    let idx = |n: &str| -> u32 {
        let c = std::ffi::CString::new(n).expect("no NUL");
        // SAFETY: a NUL-terminated name.
        unsafe { libc::if_nametoindex(c.as_ptr()) }
    };
    let (in_if, out_if) = (idx("nfpc0"), idx("nfpc1"));
    let (m1, m2) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let udp64 = FrameBuilder::new(m1, m2)
        .ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into())
        .udp(1000, 2000)
        .payload(&[0u8; 18])
        .build();
    // A TCP super-frame's head as the TC hook sees one: headers plus two
    // segments of payload, gso_size 1448 (the program reads headers only;
    // a 64 KiB one differs in the fragments it never touches).
    let tcp_gso = FrameBuilder::new(m1, m2)
        .ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into())
        .tcp(40000, 5201, 0x18)
        .payload(&[0u8; 2 * 1448])
        .build();
    let key_of = |f: &[u8]| -> Result<FlowKey, String> {
        let mut key = FlowKey::default();
        extract(f, 1, &mut key).map_err(|e| format!("{e:?}"))?;
        Ok(key)
    };
    let l2_mask = || {
        let mut mask = FlowMask::catchall();
        mask.0.in_port = u32::MAX;
        mask.0.dl_dst = [0xff; 6];
        mask.0.dl_type = 0xffff;
        mask
    };
    let ports = std::collections::HashMap::from([(2u32, 0u32)]);
    let out2 = [DpAction::Output(2)];
    let e = |e: &dyn std::fmt::Display| format!("{e:#}");
    let tc_engine = |cfg: XdpEngineConfig| -> Result<XdpEngine, String> {
        let mut tc = XdpEngine::load_tc(cfg).map_err(|x| match &x {
            // The end of the log says why (what a change to bpf/ broke).
            nicflow::offload::kernel::OffloadError::Verifier { log, .. } => {
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("{}\n{}", e(&x), tail.join("\n"))
            }
            _ => e(&x),
        })?;
        tc.set_port_upcall(in_if, 1, 0)
            .map_err(|x| format!("tc dp_ports: {}", e(&x)))?;
        tc.set_tx_port_flags(0, out_if, 0)
            .map_err(|x| format!("tc dp_tx_ports: {}", e(&x)))?;
        Ok(tc)
    };
    let install = |eng: &mut XdpEngine,
                   key: &FlowKey,
                   mask: &FlowMask,
                   acts: &[DpAction]|
     -> Result<(), String> {
        let enc = if eng.kind() == nicflow::offload::kernel::EngineKind::Tc {
            encode_tc(key, mask, acts, &ports)
        } else {
            encode(key, mask, acts, &ports)
        };
        eng.install(&enc.map_err(|x| e(&x))?)
            .map(drop)
            .map_err(|x| e(&x))
    };
    let k64 = key_of(&udp64)?;
    let kgso = key_of(&tcp_gso)?;

    // One flow, one mask (in_port, dl_dst, dl_type: a learning switch's
    // megaflow): the cheapest hit.
    let mut tc1 = tc_engine(XdpEngineConfig::default())?;
    install(&mut tc1, &k64, &l2_mask(), &out2)?;
    // Per-flow packet/byte counters off (`offload_options counters=off`):
    // what the per-flow counting costs.
    let mut tc_nc = tc_engine(XdpEngineConfig {
        counters: false,
        ..XdpEngineConfig::default()
    })?;
    install(&mut tc_nc, &k64, &l2_mask(), &out2)?;
    // Eight masks, the frame's flow under the last one installed. The
    // runs repeat one frame, so after the first the mask-hint cache names
    // the slot: this is a hinted hit with eight masks (the whole-key hash
    // and one probe), not a scan of eight.
    let mut tc8 = tc_engine(XdpEngineConfig::default())?;
    for i in 0..7u8 {
        let mut mask = l2_mask();
        mask.0.nw_proto = 0xff;
        mask.0.tp_src = 0xffff << i;
        let mut k = k64;
        k.tp_src = 4000 + u16::from(i);
        install(&mut tc8, &k, &mask, &out2)?;
    }
    install(&mut tc8, &k64, &l2_mask(), &out2)?;
    // A router's flow: MACs rewritten, TTL set. (Runs repeat on the same
    // frame: the flow matches none of the fields it writes, and writes
    // dl_dst with the value it has, so every run hits and writes.)
    let mut tcr = tc_engine(XdpEngineConfig::default())?;
    {
        let mut mask = l2_mask();
        mask.0.nw_dst = u32::MAX;
        install(
            &mut tcr,
            &k64,
            &mask,
            &[
                DpAction::SetEthSrc([2, 0, 0, 0, 0, 9]),
                DpAction::SetEthDst(m2),
                DpAction::SetTtl(k64.nw_ttl - 1),
                DpAction::Output(2),
            ],
        )?;
    }
    install(&mut tc1, &kgso, &l2_mask(), &out2)?;
    // Other builds of tc_dp.c, each with the 1-mask flow.
    let mut tcv = Vec::new();
    for (name, obj) in &variants {
        let mut eng =
            nicflow::offload::kernel::XdpEngine::load_tc_object(obj, XdpEngineConfig::default())
                .map_err(|x| format!("variant {name}: {}", e(&x)))?;
        eng.set_port_upcall(in_if, 1, 0)
            .and_then(|()| eng.set_tx_port_flags(0, out_if, 0))
            .map_err(|x| format!("variant {name}: {}", e(&x)))?;
        install(&mut eng, &k64, &l2_mask(), &out2)?;
        tcv.push((format!("tc_dp variant {name} (hit, 1 mask)"), eng));
    }
    let bare_tc = nicflow::port::tc::load_upcall_programs(out_if).map_err(|x| e(&x))?;
    let bare_tc_p = bare_tc.program("tc_upcall").ok_or("no tc_upcall")?;

    let mut xdp = XdpEngine::load(XdpEngineConfig::default()).map_err(|x| e(&x))?;
    xdp.set_port(in_if, 1)
        .map_err(|x| format!("xdp dp_ports: {}", e(&x)))?;
    xdp.set_tx_port(0, out_if)
        .map_err(|x| format!("xdp devmap: {}", e(&x)))?;
    install(&mut xdp, &k64, &l2_mask(), &out2)?;
    let mut bare = aya::Ebpf::load(crate::xdp_baseline::object()).map_err(|x| e(&x))?;
    {
        let p: &mut aya::programs::Xdp = bare
            .program_mut("xdp_redirect_min")
            .ok_or("no xdp_redirect_min")?
            .try_into()
            .map_err(|x: aya::programs::ProgramError| e(&x))?;
        p.load().map_err(|x| e(&x))?;
        let mut peer: aya::maps::DevMapHash<_> =
            aya::maps::DevMapHash::try_from(bare.map_mut("peer").ok_or("no map peer")?)
                .map_err(|x| e(&x))?;
        peer.insert(in_if, out_if, None, 0)
            .map_err(|x| format!("xdp_redirect_min peer map: {}", e(&x)))?;
    }
    let bare_xdp_p = bare.program("xdp_redirect_min").ok_or("no program")?;

    let hit = |eng: &XdpEngine, frame: &[u8], gso: Option<(u32, u32)>| -> Result<f64, String> {
        let o = prog_test_run(
            eng.program_data().map_err(|x| e(&x))?,
            frame,
            in_if,
            0,
            gso,
            runs,
        )
        .map_err(|x| e(&x))?;
        // A redirect verdict: anything else measured a miss or a drop.
        let redirect = if eng.kind() == nicflow::offload::kernel::EngineKind::Tc {
            7
        } else {
            4
        };
        if o.verdict != redirect {
            return Err(format!(
                "test run ended with verdict {}, not a redirect ({:?})",
                o.verdict as i32,
                eng.stats()
            ));
        }
        Ok(o.ns_per_run)
    };
    let mut scenarios: Vec<(&str, Measure)> = vec![
        (
            TC_BARE,
            Box::new(|| {
                Ok(prog_test_run(bare_tc_p, &udp64, in_if, 0, None, runs)
                    .map_err(|x| e(&x))?
                    .ns_per_run)
            }),
        ),
        (
            "tc_dp (hit, 1 mask, output)",
            Box::new(|| hit(&tc1, &udp64, None)),
        ),
        (
            "tc_dp (hit, counters off)",
            Box::new(|| hit(&tc_nc, &udp64, None)),
        ),
        (
            "tc_dp (hit, 8 masks, hinted)",
            Box::new(|| hit(&tc8, &udp64, None)),
        ),
        (
            "tc_dp (hit, set MACs + TTL, output)",
            Box::new(|| hit(&tcr, &udp64, None)),
        ),
        (
            "tc_dp (hit, TCP GSO super-frame)",
            Box::new(|| hit(&tc1, &tcp_gso, Some((2, 1448)))),
        ),
        (
            XDP_BARE,
            Box::new(|| {
                Ok(prog_test_run(bare_xdp_p, &udp64, in_if, 0, None, runs)
                    .map_err(|x| e(&x))?
                    .ns_per_run)
            }),
        ),
        (
            "xdp_dp (hit, 1 mask, output)",
            Box::new(|| hit(&xdp, &udp64, None)),
        ),
    ];
    for (name, eng) in &tcv {
        scenarios.push((name.as_str(), Box::new(|| hit(eng, &udp64, None))));
    }
    let scenarios: Vec<(&str, Measure)> = scenarios
        .into_iter()
        .filter(|(n, _)| *n == TC_BARE || only.as_deref().is_none_or(|o| n.contains(o)))
        .collect();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); scenarios.len()];
    for _ in 0..trials {
        for (i, (name, f)) in scenarios.iter().enumerate() {
            samples[i].push(f().map_err(|x| format!("{name}: {x}"))?);
        }
    }
    Ok(scenarios
        .iter()
        .zip(samples)
        .map(|((name, _), mut v)| {
            v.sort_by(f64::total_cmp);
            (name.to_string(), v[v.len() / 2])
        })
        .collect())
}

/// `nicflow bench progcost`: the table of [`test_run_costs_with`], each
/// datapath row with its ratio to the bare redirect of its hook.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trials per scenario (the median is shown); they alternate.
    #[arg(long, default_value_t = 7)]
    pub trials: usize,
    /// Program runs per trial.
    #[arg(long, default_value_t = 200_000)]
    pub runs: u32,
    /// Write the Markdown table here as well.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Only the scenarios whose name contains this (e.g. to run one under
    /// `perf record`), and the bare TC redirect (the ratios' baseline).
    #[arg(long)]
    pub only: Option<String>,
    /// Also measure this build of `tc_dp.c` (an object file with the same
    /// maps, e.g. compiled with `-DDP_PROF_STOP=n`: see
    /// docs/results/forward.md, issue 33) on the 1-mask hit; repeatable.
    #[arg(long = "tc-variant")]
    pub tc_variant: Vec<std::path::PathBuf>,
}

pub fn cli(a: &Args) -> anyhow::Result<()> {
    let mut variants = Vec::new();
    for p in &a.tc_variant {
        let name = p
            .file_stem()
            .map_or_else(|| p.display().to_string(), |s| s.to_string_lossy().into());
        let obj = std::fs::read(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        variants.push((name, obj));
    }
    let rows = test_run_costs_only(a.trials, a.runs, a.only.clone(), variants)
        .map_err(|e| anyhow::anyhow!(e))?;
    let report = report(&rows, a);
    print!("{report}");
    if let Some(p) = &a.out {
        std::fs::write(p, &report)?;
    }
    Ok(())
}

fn report(rows: &[(String, f64)], a: &Args) -> String {
    use std::fmt::Write;
    let base = |n: &str| rows.iter().find(|(r, _)| r == n).map(|r| r.1);
    let (tc, xdp) = (base(TC_BARE), base(XDP_BARE));
    let mut s = format!(
        "BPF_PROG_TEST_RUN, median of {} alternating trials of {} runs \
         (64-byte UDP frame unless named; {})\n\n\
         | program (scenario) | ns per run | vs bare redirect |\n|---|---:|---:|\n",
        a.trials,
        a.runs,
        crate::machine_description()
    );
    for (name, ns) in rows {
        let b = if name.starts_with("tc_") { tc } else { xdp };
        let ratio = match b {
            Some(b) if b > 0.0 && name != TC_BARE && name != XDP_BARE => {
                format!("{:.2}x", ns / b)
            }
            _ => "baseline".into(),
        };
        let _ = writeln!(s, "| {name} | {ns:.1} | {ratio} |");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_per_name() {
        let s = |name: &str, t, n| ProgStat {
            name: name.into(),
            run_time_ns: t,
            run_cnt: n,
        };
        let before = [s("tc_dp", 100, 10), s("tc_dp", 0, 0), s("x", 5, 5)];
        let after = [s("tc_dp", 400, 20), s("tc_dp", 300, 10), s("x", 5, 5)];
        let d = delta(&before, &after);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!((d[0].name.as_str(), d[0].runs), ("tc_dp", 20));
        assert!((d[0].ns_per_run - 30.0).abs() < 1e-9);
    }
}
