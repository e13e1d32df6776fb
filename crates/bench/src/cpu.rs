//! CPU accounting for one measured interval of an experiment.
//!
//! An experiment takes a [`Snapshot`] just before its traffic starts and
//! another just after it stops; [`Usage::between`] turns the two into what
//! the interval cost: machine-wide user/system/softirq/irq/idle seconds,
//! context switches and interrupts (`/proc/stat`, `/proc/interrupts`), and
//! the utime/stime of labelled processes (the switch daemon, iperf3
//! servers) from `/proc/<pid>/stat`. Processes that exit inside the
//! interval (iperf3 clients) are added from their `wait4` rusage with
//! [`Usage::add_process`] — a reaped process has no `/proc` entry left.
//! Hardware counters come from `perf stat -a` ([`Perf`]) where the machine
//! has them; on VMs without a PMU perf prints `<not supported>` and the
//! figures that need them are reported as not supported, never guessed.
//! The derived figures (CPU seconds per Gbit, per-Gbit event rates, cycles
//! per packet) are plain functions so the reports and their tests agree.

use super::forward::measure::clk_tck;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// The aggregate `cpu` line plus `ctxt` and `intr` of `/proc/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcStat {
    /// Seconds (ticks / CLK_TCK) per state; guest time is inside user.
    pub user: f64,
    pub nice: f64,
    pub system: f64,
    pub idle: f64,
    pub iowait: f64,
    pub irq: f64,
    pub softirq: f64,
    pub steal: f64,
    /// Context switches since boot.
    pub ctxt: u64,
    /// Interrupts since boot (first field of `intr`: every interrupt,
    /// including those `/proc/interrupts` does not list).
    pub intr: u64,
}

impl ProcStat {
    /// Parse `/proc/stat` text with `tck` ticks per second.
    pub fn parse(text: &str, tck: f64) -> Option<ProcStat> {
        let mut s = ProcStat::default();
        let cpu = text.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<f64> = cpu
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let f = |i: usize| v.get(i).copied().unwrap_or(0.0) / tck;
        (
            s.user, s.nice, s.system, s.idle, s.iowait, s.irq, s.softirq, s.steal,
        ) = (f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7));
        for l in text.lines() {
            let mut it = l.split_whitespace();
            match it.next() {
                Some("ctxt") => s.ctxt = it.next()?.parse().ok()?,
                Some("intr") => s.intr = it.next()?.parse().ok()?,
                _ => {}
            }
        }
        Some(s)
    }

    pub fn read() -> ProcStat {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| ProcStat::parse(&t, clk_tck()))
            .unwrap_or_default()
    }

    /// user + nice + system + irq + softirq.
    pub fn busy(&self) -> f64 {
        self.user + self.nice + self.system + self.irq + self.softirq
    }
}

/// Every row of `/proc/interrupts` or `/proc/softirqs` with its count
/// summed over the CPUs: architecture rows by their name (LOC, RES, CAL,
/// TLB...), device interrupts by the device names at the end of the row
/// (`virtio0-input.0`), softirqs by type (TIMER, NET_RX, SCHED...). The
/// ERR/MIS error counters are not interrupts and are skipped. Rows with the
/// same name are added up.
pub fn parse_per_cpu_table(text: &str) -> Vec<(String, u64)> {
    let mut lines = text.lines();
    let ncpu = lines
        .next()
        .map(|h| {
            h.split_whitespace()
                .filter(|w| w.starts_with("CPU"))
                .count()
        })
        .unwrap_or(0);
    let mut rows: Vec<(String, u64)> = Vec::new();
    for l in lines {
        let Some((name, rest)) = l.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if matches!(name, "ERR" | "MIS") {
            continue;
        }
        let mut words = rest.split_whitespace();
        let count = words
            .by_ref()
            .take(ncpu)
            .map_while(|w| w.parse::<u64>().ok())
            .sum::<u64>();
        // A numbered (device) interrupt: name it by its device, the last
        // word of the row ("... PCI-MSIX-0000:00:04.0 0-edge virtio0-input.0").
        let label = if name.chars().all(|c| c.is_ascii_digit()) {
            words.last().unwrap_or(name).to_string()
        } else {
            name.to_string()
        };
        match rows.iter_mut().find(|(n, _)| *n == label) {
            Some((_, c)) => *c += count,
            None => rows.push((label, count)),
        }
    }
    rows
}

/// Sum of every per-CPU count in `/proc/interrupts` (device and
/// architecture interrupts such as LOC, RES, CAL).
pub fn parse_interrupts_total(text: &str) -> u64 {
    parse_per_cpu_table(text).iter().map(|(_, c)| c).sum()
}

fn parse_total(rows: &[(String, u64)]) -> u64 {
    rows.iter().map(|(_, c)| c).sum()
}

fn read_per_cpu_table(path: &str) -> Vec<(String, u64)> {
    std::fs::read_to_string(path)
        .map(|t| parse_per_cpu_table(&t))
        .unwrap_or_default()
}

/// Per-source differences of two [`parse_per_cpu_table`] readings, largest
/// first, sources that did not move left out.
fn table_delta(a: &[(String, u64)], b: &[(String, u64)]) -> Vec<(String, u64)> {
    let mut d: Vec<(String, u64)> = b
        .iter()
        .map(|(n, y)| {
            let x = a.iter().find(|(m, _)| m == n).map_or(0, |(_, x)| *x);
            (n.clone(), y.saturating_sub(x))
        })
        .filter(|(_, c)| *c > 0)
        .collect();
    d.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    d
}

/// utime and stime of a process (all threads), seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcCpu {
    pub user: f64,
    pub system: f64,
}

/// Parse `/proc/<pid>/stat`: fields after `(comm)` (which may contain
/// spaces and parentheses, hence the last `)`): utime is field 14, stime 15.
pub fn parse_pid_stat(text: &str, tck: f64) -> Option<ProcCpu> {
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcCpu {
        user: f.get(11)?.parse::<f64>().ok()? / tck,
        system: f.get(12)?.parse::<f64>().ok()? / tck,
    })
}

pub fn read_pid(pid: u32) -> Option<ProcCpu> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_pid_stat(&t, clk_tck())
}

/// Counters at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    at: Instant,
    stat: ProcStat,
    interrupts: Vec<(String, u64)>,
    softirqs: Vec<(String, u64)>,
    procs: Vec<(String, u32, Option<ProcCpu>)>,
}

impl Snapshot {
    /// Read everything; `procs` are `(label, pid)` of live processes.
    pub fn take(procs: &[(String, u32)]) -> Snapshot {
        let procs = procs
            .iter()
            .map(|(l, p)| (l.clone(), *p, read_pid(*p)))
            .collect();
        Snapshot {
            at: Instant::now(),
            stat: ProcStat::read(),
            interrupts: read_per_cpu_table("/proc/interrupts"),
            softirqs: read_per_cpu_table("/proc/softirqs"),
            procs,
        }
    }
}

/// CPU time of one labelled process over the interval.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProcUsage {
    pub label: String,
    pub pid: u32,
    pub user_s: f64,
    pub system_s: f64,
}

/// What an interval cost the machine.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Usage {
    pub wall_s: f64,
    /// Machine-wide seconds (summed over CPUs).
    pub busy_s: f64,
    pub user_s: f64,
    pub system_s: f64,
    pub softirq_s: f64,
    pub irq_s: f64,
    pub idle_s: f64,
    pub steal_s: f64,
    pub ctxt: u64,
    /// `/proc/stat` intr total.
    pub intr: u64,
    /// Sum of `/proc/interrupts`.
    pub interrupts: u64,
    /// `/proc/interrupts` by source (LOC, RES, CAL, devices), largest
    /// first: which kind of interrupt a count per Gbit is made of.
    #[serde(default)]
    pub interrupts_by: Vec<(String, u64)>,
    /// `/proc/softirqs` by type (NET_RX, TIMER, SCHED...), largest first.
    #[serde(default)]
    pub softirqs_by: Vec<(String, u64)>,
    pub procs: Vec<ProcUsage>,
    pub perf: PerfCounts,
}

impl Usage {
    /// The difference of two snapshots (processes present in both).
    pub fn between(a: &Snapshot, b: &Snapshot) -> Usage {
        let d = |x: f64, y: f64| (y - x).max(0.0);
        let (s, t) = (&a.stat, &b.stat);
        let procs = a
            .procs
            .iter()
            .filter_map(|(label, pid, x)| {
                let (_, _, y) = b.procs.iter().find(|(_, p, _)| p == pid)?;
                let (x, y) = ((*x)?, (*y)?);
                Some(ProcUsage {
                    label: label.clone(),
                    pid: *pid,
                    user_s: d(x.user, y.user),
                    system_s: d(x.system, y.system),
                })
            })
            .collect();
        Usage {
            wall_s: b.at.duration_since(a.at).as_secs_f64(),
            busy_s: d(s.busy(), t.busy()),
            user_s: d(s.user + s.nice, t.user + t.nice),
            system_s: d(s.system, t.system),
            softirq_s: d(s.softirq, t.softirq),
            irq_s: d(s.irq, t.irq),
            idle_s: d(s.idle + s.iowait, t.idle + t.iowait),
            steal_s: d(s.steal, t.steal),
            ctxt: t.ctxt.saturating_sub(s.ctxt),
            intr: t.intr.saturating_sub(s.intr),
            interrupts: parse_total(&b.interrupts).saturating_sub(parse_total(&a.interrupts)),
            interrupts_by: table_delta(&a.interrupts, &b.interrupts),
            softirqs_by: table_delta(&a.softirqs, &b.softirqs),
            procs,
            perf: PerfCounts::default(),
        }
    }

    /// A process that ran (and exited) inside the interval, from rusage.
    pub fn add_process(&mut self, label: &str, pid: u32, user_s: f64, system_s: f64) {
        self.procs.push(ProcUsage {
            label: label.into(),
            pid,
            user_s,
            system_s,
        });
    }

    /// user + system seconds of the processes whose label starts with
    /// `prefix` (None if there are none).
    pub fn procs_cpu(&self, prefix: &str) -> Option<f64> {
        let v: Vec<f64> = self
            .procs
            .iter()
            .filter(|p| p.label.starts_with(prefix))
            .map(|p| p.user_s + p.system_s)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }

    /// Busy cores averaged over the interval.
    pub fn busy_cores(&self) -> f64 {
        ratio(self.busy_s, self.wall_s)
    }
}

/// Cores of the machine (the denominator of every "% of all cores").
pub fn cores() -> f64 {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64
}

/// `a / b`, NaN when `b` is not positive (a figure that does not exist).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 && a.is_finite() {
        a / b
    } else {
        f64::NAN
    }
}

/// Gigabits in `bytes`.
pub fn gbit(bytes: u64) -> f64 {
    bytes as f64 * 8.0 / 1e9
}

/// CPU seconds per Gbit moved.
pub fn cpu_s_per_gbit(cpu_s: f64, bytes: u64) -> f64 {
    ratio(cpu_s, gbit(bytes))
}

/// Events (context switches, interrupts) per Gbit moved.
pub fn per_gbit(events: u64, bytes: u64) -> f64 {
    ratio(events as f64, gbit(bytes))
}

/// Cycles per packet; None without hardware counters.
pub fn cycles_per_packet(cycles: Option<u64>, packets: u64) -> Option<f64> {
    let c = cycles?;
    (packets > 0).then(|| c as f64 / packets as f64)
}

// ---------------------------------------------------------------------------
// perf stat
// ---------------------------------------------------------------------------

/// Hardware counters over an interval, or why there are none.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PerfCounts {
    pub cycles: Option<u64>,
    pub instructions: Option<u64>,
    /// "not supported (...)", "not run", or an error.
    pub note: Option<String>,
}

/// Whether `perf stat` can count cycles and instructions here.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum PerfSupport {
    Supported,
    NotSupported(String),
}

impl PerfSupport {
    /// `perf stat -x, -e instructions,cycles true`: supported if both
    /// counters come back as numbers.
    pub fn detect() -> PerfSupport {
        let out = Command::new("perf")
            .args(["stat", "-x,", "-e", "instructions,cycles", "true"])
            .stdin(Stdio::null())
            .output();
        match out {
            Err(e) => PerfSupport::NotSupported(format!("perf not runnable: {e}")),
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stderr);
                let c = parse_perf_csv(&text);
                if c.cycles.is_some() && c.instructions.is_some() {
                    PerfSupport::Supported
                } else {
                    PerfSupport::NotSupported(
                        c.note.unwrap_or_else(|| "no counts from perf stat".into()),
                    )
                }
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            PerfSupport::Supported => "perf stat: cycles and instructions counted".into(),
            PerfSupport::NotSupported(w) => format!("perf stat: {w}"),
        }
    }
}

/// Parse `perf stat -x,` output: `value,unit,event,...` per line.
pub fn parse_perf_csv(text: &str) -> PerfCounts {
    let mut c = PerfCounts::default();
    let mut unsupported = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split(',').collect();
        if f.len() < 3 {
            continue;
        }
        let event = f[2].split(':').next().unwrap_or("").trim();
        let slot = match event {
            "cycles" | "cpu-cycles" => &mut c.cycles,
            "instructions" => &mut c.instructions,
            _ => continue,
        };
        match f[0].trim().parse::<u64>() {
            Ok(v) => *slot = Some(v),
            Err(_) => unsupported.push(format!("{event} {}", f[0].trim())),
        }
    }
    if !unsupported.is_empty() {
        c.note = Some(format!("not supported ({})", unsupported.join(", ")));
    }
    c
}

/// A system-wide `perf stat -a` running while the traffic runs.
pub struct Perf {
    child: Child,
    out: std::path::PathBuf,
}

impl Perf {
    /// Start counting (None when unsupported: nothing runs).
    pub fn start(support: &PerfSupport, dir: &Path, tag: &str) -> Option<Perf> {
        if !matches!(support, PerfSupport::Supported) {
            return None;
        }
        let out = dir.join(format!("perf-{tag}.csv"));
        let child = Command::new("perf")
            .args(["stat", "-a", "-x,", "-e", "cycles,instructions", "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(Perf { child, out })
    }

    /// Stop (SIGINT makes perf print its counts) and read the counts.
    pub fn stop(mut self) -> PerfCounts {
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let _ = std::fs::remove_file(&self.out);
        parse_perf_csv(&text)
    }
}

/// Counts for an interval: measured, or the reason there are none.
pub fn perf_or_note(p: Option<Perf>, support: &PerfSupport) -> PerfCounts {
    match (p, support) {
        (Some(p), _) => p.stop(),
        (None, PerfSupport::NotSupported(w)) => PerfCounts {
            note: Some(w.clone()),
            ..Default::default()
        },
        (None, PerfSupport::Supported) => PerfCounts {
            note: Some("perf stat could not be started".into()),
            ..Default::default()
        },
    }
}

// ---------------------------------------------------------------------------
// Children that exit inside the interval
// ---------------------------------------------------------------------------

/// Wait for `child` (killing it at `deadline` or on interrupt) and return
/// `(exited by itself, exit success, user s, system s)` from `wait4`'s
/// rusage: the only record of a process's CPU once it is gone. The child
/// must have been started as the measured program itself (`ip netns exec`
/// execs it, so the pid is the same).
pub fn wait_rusage(child: Child, deadline: Instant) -> (bool, bool, f64, f64) {
    let pid = child.id() as libc::pid_t;
    // std must not wait for it again: forget the handle, we reap it here.
    std::mem::forget(child);
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut by_itself = true;
    loop {
        // SAFETY: waiting for our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        if r < 0 {
            return (false, false, f64::NAN, f64::NAN);
        }
        if Instant::now() >= deadline || super::forward::interrupted() {
            by_itself = false;
            // SAFETY: as above; then a blocking reap.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::wait4(pid, &mut status, 0, &mut ru);
            }
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (by_itself, ok, tv(ru.ru_utime), tv(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  1000 20 300 5000 10 5 40 7 0 0
cpu0 500 10 150 2500 5 3 20 3 0 0
cpu1 500 10 150 2500 5 2 20 4 0 0
intr 123456 0 9 0 0
ctxt 987654
btime 1700000000
processes 4242
softirq 5555 1 2 3
";

    #[test]
    fn proc_stat() {
        let s = ProcStat::parse(STAT, 100.0).unwrap();
        assert_eq!(s.user, 10.0);
        assert_eq!(s.nice, 0.2);
        assert_eq!(s.system, 3.0);
        assert_eq!(s.idle, 50.0);
        assert_eq!(s.irq, 0.05);
        assert_eq!(s.softirq, 0.4);
        assert_eq!(s.steal, 0.07);
        assert_eq!(s.ctxt, 987654);
        assert_eq!(s.intr, 123456);
        assert!((s.busy() - 13.65).abs() < 1e-9);
    }

    #[test]
    fn interrupts_total() {
        let t = "           CPU0       CPU1       
  0:         40          0   IO-APIC   2-edge      timer
 24:       1000       2000   PCI-MSI 49152-edge      virtio0-input.0
NMI:          1          2   Non-maskable interrupts
LOC:     300000     200000   Local timer interrupts
RES:         10         20   Rescheduling interrupts
ERR:          5
MIS:          0
";
        assert_eq!(
            parse_interrupts_total(t),
            40 + 1000 + 2000 + 1 + 2 + 300000 + 200000 + 10 + 20
        );
        let rows = parse_per_cpu_table(t);
        assert_eq!(rows[0], ("timer".to_string(), 40));
        assert_eq!(rows[1], ("virtio0-input.0".to_string(), 3000));
        assert_eq!(rows[3], ("LOC".to_string(), 500000));
        let later = parse_per_cpu_table(&t.replace("200000", "200100").replace("  10 ", "  17 "));
        assert_eq!(
            table_delta(&rows, &later),
            vec![("LOC".to_string(), 100), ("RES".to_string(), 7)]
        );
    }

    #[test]
    fn pid_stat_with_odd_comm() {
        let t =
            "4242 (iperf3 (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 125 0 0 20 0 1 0 1 1 1";
        let c = parse_pid_stat(t, 100.0).unwrap();
        assert_eq!(c.user, 2.5);
        assert_eq!(c.system, 1.25);
    }

    #[test]
    fn derived_figures() {
        // 10 Gbit = 1.25e9 bytes; 2.5 CPU s -> 0.25 s/Gbit.
        assert!((cpu_s_per_gbit(2.5, 1_250_000_000) - 0.25).abs() < 1e-12);
        assert!((per_gbit(50_000, 1_250_000_000) - 5000.0).abs() < 1e-9);
        assert!(cpu_s_per_gbit(1.0, 0).is_nan());
        assert_eq!(cycles_per_packet(Some(3_000_000), 1_000), Some(3000.0));
        assert_eq!(cycles_per_packet(None, 1_000), None);
        assert_eq!(cycles_per_packet(Some(1), 0), None);
    }

    #[test]
    fn perf_csv() {
        let ok = "\n# started on x\n\n123456789,,cycles,1000,100.00,,\n98765,,instructions,1000,100.00,0.00,insn per cycle\n";
        let c = parse_perf_csv(ok);
        assert_eq!(c.cycles, Some(123456789));
        assert_eq!(c.instructions, Some(98765));
        assert!(c.note.is_none());
        let no = "<not supported>,,instructions,0,100.00,,\n<not supported>,,cycles,0,100.00,,\n";
        let c = parse_perf_csv(no);
        assert_eq!(c.cycles, None);
        assert!(c.note.unwrap().starts_with("not supported"));
    }

    #[test]
    fn usage_between() {
        let a = Snapshot {
            at: Instant::now(),
            stat: ProcStat::parse(STAT, 100.0).unwrap(),
            interrupts: vec![("LOC".into(), 60), ("RES".into(), 40)],
            softirqs: vec![("NET_RX".into(), 10)],
            procs: vec![(
                "switch".into(),
                7,
                Some(ProcCpu {
                    user: 1.0,
                    system: 2.0,
                }),
            )],
        };
        let mut b = a.clone();
        b.stat.user += 1.5;
        b.stat.softirq += 0.5;
        b.stat.ctxt += 1000;
        b.interrupts[1].1 += 50;
        b.softirqs[0].1 += 5;
        b.procs[0].2 = Some(ProcCpu {
            user: 1.5,
            system: 3.0,
        });
        let u = Usage::between(&a, &b);
        assert!((u.busy_s - 2.0).abs() < 1e-9);
        assert!((u.softirq_s - 0.5).abs() < 1e-9);
        assert_eq!(u.ctxt, 1000);
        assert_eq!(u.interrupts, 50);
        assert_eq!(u.interrupts_by, vec![("RES".to_string(), 50)]);
        assert_eq!(u.softirqs_by, vec![("NET_RX".to_string(), 5)]);
        assert_eq!(u.procs_cpu("switch"), Some(1.5));
        assert_eq!(u.procs_cpu("iperf3"), None);
    }
}
