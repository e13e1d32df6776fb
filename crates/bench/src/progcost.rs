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
/// 100,000 runs) of a 64-byte UDP frame: the TC and XDP datapath programs
/// with one installed flow that outputs it (one mask: the cheapest hit),
/// and the bare redirect programs. Runs in a private network namespace
/// (two veths; gone with the thread).
pub fn test_run_costs() -> Result<Vec<(String, f64)>, String> {
    std::thread::spawn(test_run_costs_here)
        .join()
        .map_err(|_| "test-run thread panicked".to_string())?
}

fn test_run_costs_here() -> Result<Vec<(String, f64)>, String> {
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
    let frame = FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into())
        .udp(1000, 2000)
        .payload(&[0u8; 18])
        .build();
    let mut key = FlowKey::default();
    extract(&frame, 1, &mut key).map_err(|e| format!("{e:?}"))?;
    let mut mask = FlowMask::catchall();
    mask.0.in_port = u32::MAX;
    mask.0.dl_dst = [0xff; 6];
    mask.0.dl_type = 0xffff;
    mask.0.nw_proto = 0xff;
    let ports = std::collections::HashMap::from([(2u32, 0u32)]);
    let acts = [DpAction::Output(2)];
    let e = |e: &dyn std::fmt::Display| format!("{e:#}");
    let median = |f: &dyn Fn() -> Result<f64, String>| -> Result<f64, String> {
        let mut v = (0..5).map(|_| f()).collect::<Result<Vec<f64>, String>>()?;
        v.sort_by(f64::total_cmp);
        Ok(v[2])
    };
    const N: u32 = 100_000;
    let mut out = Vec::new();

    let mut tc = XdpEngine::load_tc(XdpEngineConfig::default()).map_err(|x| e(&x))?;
    tc.set_port_upcall(in_if, 1, 0)
        .map_err(|x| format!("tc dp_ports: {}", e(&x)))?;
    tc.set_tx_port_flags(0, out_if, 0)
        .map_err(|x| format!("tc dp_tx_ports: {}", e(&x)))?;
    tc.install(&encode_tc(&key, &mask, &acts, &ports).map_err(|x| e(&x))?)
        .map_err(|x| e(&x))?;
    out.push((
        "tc_dp (hit, 1 mask, output)".to_string(),
        median(&|| Ok(tc.test_run_repeat(&frame, in_if, N).map_err(|x| e(&x))?.1))?,
    ));
    // Per-flow packet/byte counters off (`offload_options counters=off`):
    // what the two atomic adds per hit cost.
    let mut tc_nc = XdpEngine::load_tc(XdpEngineConfig {
        counters: false,
        ..XdpEngineConfig::default()
    })
    .map_err(|x| e(&x))?;
    tc_nc.set_port_upcall(in_if, 1, 0).map_err(|x| e(&x))?;
    tc_nc.set_tx_port_flags(0, out_if, 0).map_err(|x| e(&x))?;
    tc_nc
        .install(&encode_tc(&key, &mask, &acts, &ports).map_err(|x| e(&x))?)
        .map_err(|x| e(&x))?;
    out.push((
        "tc_dp (hit, counters off)".to_string(),
        median(&|| {
            Ok(tc_nc
                .test_run_repeat(&frame, in_if, N)
                .map_err(|x| e(&x))?
                .1)
        })?,
    ));
    drop(tc_nc);
    let bare = nicflow::port::tc::load_upcall_programs(out_if).map_err(|x| e(&x))?;
    let p = bare.program("tc_upcall").ok_or("no tc_upcall")?;
    out.push((
        "tc_upcall (bare bpf_redirect)".to_string(),
        median(&|| {
            Ok(prog_test_run(p, &frame, in_if, 0, None, N)
                .map_err(|x| e(&x))?
                .ns_per_run)
        })?,
    ));

    let mut xdp = XdpEngine::load(XdpEngineConfig::default()).map_err(|x| e(&x))?;
    xdp.set_port(in_if, 1)
        .map_err(|x| format!("xdp dp_ports: {}", e(&x)))?;
    xdp.set_tx_port(0, out_if)
        .map_err(|x| format!("xdp devmap: {}", e(&x)))?;
    xdp.install(&encode(&key, &mask, &acts, &ports).map_err(|x| e(&x))?)
        .map_err(|x| e(&x))?;
    out.push((
        "xdp_dp (hit, 1 mask, output)".to_string(),
        median(&|| Ok(xdp.test_run_repeat(&frame, in_if, N).map_err(|x| e(&x))?.1))?,
    ));
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
    let p = bare.program("xdp_redirect_min").ok_or("no program")?;
    out.push((
        "xdp_redirect_min (bare devmap redirect)".to_string(),
        median(&|| {
            Ok(prog_test_run(p, &frame, in_if, 0, None, N)
                .map_err(|x| e(&x))?
                .ns_per_run)
        })?,
    ));
    Ok(out)
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
