//! The kernel's own accounting of BPF program runs (`run_time_ns`,
//! `run_cnt` in a program fd's fdinfo, kept while
//! `kernel.bpf_stats_enabled` is on): what a run of the engines' programs
//! costs on this host. Read by `offload-plan` (the TC engine's cost per
//! packet) and by the benches (`bench forward`'s program costs).

use std::collections::BTreeMap;

/// One loaded program's totals, as the kernel counts them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgRunStats {
    /// The program's name (`tc_dp`, `xdp_dp`...), `?` when unnamed.
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The programs process `pid` holds open (`None`: this process), each
/// once, by program id.
pub fn of_process(pid: Option<u32>) -> BTreeMap<u32, ProgRunStats> {
    let dir = match pid {
        Some(p) => format!("/proc/{p}/fdinfo"),
        None => "/proc/self/fdinfo".to_string(),
    };
    let mut by_id: BTreeMap<u32, ProgRunStats> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return by_id;
    };
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let field = |k: &str| -> Option<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.trim().parse().ok())
        };
        if let (Some(id), Some(t), Some(n)) =
            (field("prog_id:"), field("run_time_ns:"), field("run_cnt:"))
        {
            by_id.insert(
                id as u32,
                ProgRunStats {
                    name: String::new(),
                    run_time_ns: t,
                    run_cnt: n,
                },
            );
        }
    }
    for info in aya::programs::loaded_programs().flatten() {
        if let Some(s) = by_id.get_mut(&info.id()) {
            s.name = info.name_as_str().unwrap_or("?").to_string();
        }
    }
    by_id
}

/// ns per run of this process's TC engine program (`tc_dp`), when the
/// kernel counted any (`kernel.bpf_stats_enabled=1`).
pub fn tc_dp_ns_per_run() -> Option<f64> {
    let (t, n) = of_process(None)
        .into_values()
        .filter(|s| s.name == "tc_dp")
        .fold((0u64, 0u64), |(t, n), s| (t + s.run_time_ns, n + s.run_cnt));
    (n > 0 && t > 0).then(|| t as f64 / n as f64)
}
