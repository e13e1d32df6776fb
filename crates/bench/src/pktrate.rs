//! A packet-rate measurement across a [`Testbed`]: `nicflow sink` on a
//! server, `nicflow gen` on a client, CPU counters around the burst.
//!
//! The experiments that count packets rather than bytes (`ovs-l3`,
//! `table-scale`) share this step. The generator runs inside client `c1`
//! and writes frames onto its veth; the switch under test forwards them to
//! server `s1`, where the sink takes them off the wire (AF_XDP, so the
//! receiving host's stack does not bound the figure) and counts them. A
//! warm-up burst first sends every flow a few times, so the measured burst
//! sees established flows (the steady state of the source documents)
//! rather than first-packet upcalls.

use super::cpu::{Snapshot, Usage};
use super::testbed::Testbed;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The traffic of one burst.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Traffic {
    /// Distinct flows.
    pub flows: u32,
    /// `--vary` of `nicflow gen`: which field makes the flows distinct.
    pub vary: String,
    /// Extra `nicflow gen` arguments (addresses, ports).
    pub gen_args: Vec<String>,
    /// Frame size with FCS (RFC 2544 convention).
    pub size: usize,
    /// Seconds of the measured burst.
    pub seconds: f64,
}

/// What one burst measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Burst {
    /// Frames the generator sent per second.
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub sent_pps: f64,
    /// Frames the sink received per second of the generator's burst: what
    /// the switch forwarded.
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub rx_pps: f64,
    pub sent: u64,
    pub received: u64,
    /// Flows the sink saw.
    pub flows_seen: u64,
    /// Frames lost according to the sequence numbers.
    pub lost: u64,
    /// One-way latency through the switch at full load (ns).
    pub latency_p50_ns: u64,
    pub latency_p99_ns: u64,
    /// Generator engine (`afxdp-...`, `afpacket-txring`).
    pub gen_engine: String,
    /// Busy cores of the whole machine during the burst.
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub machine_cores: f64,
    /// Cores used by the switch process (NaN for the kernel bridge).
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub switch_cores: f64,
    /// Switch process CPU per forwarded packet (µs; NaN for the bridge).
    #[serde(deserialize_with = "super::forward::nan_if_null")]
    pub switch_us_per_pkt: f64,
    pub usage: Usage,
    /// Raw JSON of the tools.
    pub gen: serde_json::Value,
    pub sink: serde_json::Value,
}

fn spawn_to(mut cmd: Command, out: &Path) -> anyhow::Result<Child> {
    let f = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    cmd.stdout(f).stderr(Stdio::piped()).stdin(Stdio::null());
    cmd.spawn().context("spawning")
}

fn wait_until(child: &mut Child, deadline: Instant) -> anyhow::Result<std::process::ExitStatus> {
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(st);
        }
        if Instant::now() >= deadline || super::forward::interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            bail!("timed out or interrupted");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
}

/// Where a burst runs: the generator's and the sink's namespaces,
/// interfaces and MACs, the `nicflow` binary, a scratch directory and the
/// switch process whose CPU is counted. A [`Testbed`]'s c1 and s1
/// ([`Ends::of`]), or another lab's two hosts (`bench scheduler`'s
/// multipath lab).
#[derive(Clone, Debug)]
pub struct Ends {
    pub bin: std::path::PathBuf,
    pub client_ns: String,
    pub client_iface: String,
    pub client_mac: String,
    pub server_ns: String,
    pub server_iface: String,
    pub server_mac: String,
    pub scratch: std::path::PathBuf,
    pub switch_pid: Option<u32>,
}

impl Ends {
    /// Client 0 and server 0 of `tb`.
    pub fn of(tb: &Testbed) -> anyhow::Result<Ends> {
        let (c, s) = (tb.client(0), tb.server(0));
        Ok(Ends {
            bin: tb.nicflow_bin().to_path_buf(),
            client_ns: c.netns.clone(),
            client_iface: c.iface.clone(),
            client_mac: c.mac.clone(),
            server_ns: s.netns.clone(),
            server_iface: s.iface.clone(),
            server_mac: s.mac.clone(),
            scratch: tb.scratch_dir()?,
            switch_pid: tb.switch_pid(),
        })
    }

    fn client_cmd(&self, argv: &[String]) -> Command {
        nicflow::lab::sys::in_ns(Some(&self.client_ns), argv)
    }

    fn server_cmd(&self, argv: &[String]) -> Command {
        nicflow::lab::sys::in_ns(Some(&self.server_ns), argv)
    }
}

pub(crate) fn gen_argv(
    tb: &Testbed,
    t: &Traffic,
    duration: Option<f64>,
    count: Option<u64>,
) -> Vec<String> {
    let c = tb.client(0);
    let s = tb.server(0);
    gen_argv_of(
        tb.nicflow_bin(),
        &c.iface,
        &c.mac,
        &s.mac,
        t,
        duration,
        count,
    )
}

fn gen_argv_of(
    bin: &Path,
    iface: &str,
    src_mac: &str,
    dst_mac: &str,
    t: &Traffic,
    duration: Option<f64>,
    count: Option<u64>,
) -> Vec<String> {
    let mut v: Vec<String> = vec![
        bin.display().to_string(),
        "gen".into(),
        "--iface".into(),
        iface.to_string(),
        "--src-mac".into(),
        src_mac.to_string(),
        "--dst-mac".into(),
        dst_mac.to_string(),
        "--size".into(),
        t.size.to_string(),
        "--flows".into(),
        t.flows.to_string(),
        "--vary".into(),
        t.vary.clone(),
        "--json".into(),
    ];
    v.extend(t.gen_args.iter().cloned());
    if let Some(d) = duration {
        v.push("--duration".into());
        v.push(format!("{d}"));
    }
    if let Some(n) = count {
        v.push("--count".into());
        v.push(n.to_string());
    }
    v
}

/// Send every flow `rounds` times at a bounded rate so the switch has
/// them all cached before the measured burst.
pub fn warm_up(tb: &Testbed, t: &Traffic, rounds: u64) -> anyhow::Result<()> {
    warm_up_on(&Ends::of(tb)?, t, rounds)
}

/// The generator's command line for a `t.seconds` burst at `rate`
/// frames/s (`None`: as fast as it can) between `e`'s two hosts.
fn timed_gen_argv(e: &Ends, t: &Traffic, rate: Option<f64>) -> Vec<String> {
    let mut argv = gen_argv_of(
        &e.bin,
        &e.client_iface,
        &e.client_mac,
        &e.server_mac,
        t,
        Some(t.seconds),
        None,
    );
    if let Some(r) = rate {
        argv.extend(["--rate".into(), format!("{r:.0}")]);
    }
    argv
}

/// Start the generator of `e` for `t.seconds` at `rate` frames/s (`None`:
/// as fast as it can) without a sink: background load under another
/// measurement (`bench scheduler`'s ping-pong). Its report goes to
/// `out`; the caller waits for the child.
pub fn spawn_load(e: &Ends, t: &Traffic, rate: Option<f64>, out: &Path) -> anyhow::Result<Child> {
    let argv = timed_gen_argv(e, t, rate);
    spawn_to(e.client_cmd(&argv), out)
}

/// [`warm_up`] between two [`Ends`].
pub fn warm_up_on(e: &Ends, t: &Traffic, rounds: u64) -> anyhow::Result<()> {
    let count = t.flows as u64 * rounds;
    let mut argv = gen_argv_of(
        &e.bin,
        &e.client_iface,
        &e.client_mac,
        &e.server_mac,
        t,
        None,
        Some(count),
    );
    // Gentle enough that a slow path installing one flow per packet keeps up.
    argv.extend(["--rate".into(), "200000".into()]);
    let out = e.scratch.join("warmup-gen.json");
    let mut child = spawn_to(e.client_cmd(&argv), &out)?;
    let secs = count as f64 / 200_000.0 + 30.0;
    let st = wait_until(&mut child, Instant::now() + Duration::from_secs_f64(secs))
        .context("warm-up generator")?;
    if !st.success() {
        bail!("warm-up generator failed: {}", stderr_of(&mut child));
    }
    Ok(())
}

/// One measured burst: sink up, CPU snapshot, generator for
/// `t.seconds`, CPU snapshot, sink drained.
pub fn burst(tb: &Testbed, t: &Traffic) -> anyhow::Result<Burst> {
    burst_on(&Ends::of(tb)?, t, None)
}

/// [`burst`] between two [`Ends`]; `rate`: the generator's `--rate`
/// (frames/s; `None`: as fast as it can).
pub fn burst_on(e: &Ends, t: &Traffic, rate: Option<f64>) -> anyhow::Result<Burst> {
    let procs: Vec<(String, u32)> = e
        .switch_pid
        .map(|p| vec![("switch".to_string(), p)])
        .unwrap_or_default();
    burst_counting(e, t, rate, &procs)
}

/// [`burst_on`] counting the CPU of `procs` (label, pid) rather than
/// `e.switch_pid`: a switch of several processes (`bench ipsec`'s two
/// daemons, one per host). Labels starting with `switch` make
/// [`Burst::switch_cores`] and [`Burst::switch_us_per_pkt`].
pub fn burst_counting(
    e: &Ends,
    t: &Traffic,
    rate: Option<f64>,
    procs: &[(String, u32)],
) -> anyhow::Result<Burst> {
    let dir = e.scratch.clone();
    let ready = dir.join("sink.ready");
    let _ = std::fs::remove_file(&ready);
    let sink_argv: Vec<String> = vec![
        e.bin.display().to_string(),
        "sink".into(),
        "--iface".into(),
        e.server_iface.clone(),
        "--duration".into(),
        format!("{}", t.seconds + 20.0),
        "--idle-exit".into(),
        "1000".into(),
        "--ready-file".into(),
        ready.display().to_string(),
        "--flows".into(),
        t.flows.to_string(),
        "--json".into(),
    ];
    let sink_out = dir.join("sink.json");
    let mut sink = spawn_to(e.server_cmd(&sink_argv), &sink_out)?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ready.exists() {
        if let Some(st) = sink.try_wait()? {
            bail!("sink exited early ({st}): {}", stderr_of(&mut sink));
        }
        if Instant::now() >= deadline || super::forward::interrupted() {
            let _ = sink.kill();
            let _ = sink.wait();
            bail!("sink not ready after 15 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let gen_out = dir.join("gen.json");
    let argv = timed_gen_argv(e, t, rate);
    let a = Snapshot::take(procs);
    let mut gen = spawn_to(e.client_cmd(&argv), &gen_out)?;
    let gen_st = wait_until(
        &mut gen,
        Instant::now() + Duration::from_secs_f64(t.seconds + 30.0),
    );
    let b = Snapshot::take(procs);
    let gen_err = stderr_of(&mut gen);
    let sink_st = wait_until(
        &mut sink,
        Instant::now() + Duration::from_secs_f64(t.seconds + 40.0),
    );
    let gen_st = gen_st.context("generator")?;
    if !gen_st.success() {
        bail!("generator failed: {gen_err}");
    }
    let sink_st = sink_st.context("sink")?;
    if !sink_st.success() {
        bail!("sink failed: {}", stderr_of(&mut sink));
    }
    let read = |p: &Path| -> anyhow::Result<serde_json::Value> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let line = text.lines().rev().find(|l| l.trim_start().starts_with('{'));
        serde_json::from_str(line.unwrap_or(""))
            .with_context(|| format!("{}: not JSON", p.display()))
    };
    let g = read(&gen_out)?;
    let k = read(&sink_out)?;
    let usage = Usage::between(&a, &b);
    let num =
        |v: &serde_json::Value, key: &str| v.get(key).and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
    let int = |v: &serde_json::Value, key: &str| v.get(key).and_then(|x| x.as_u64()).unwrap_or(0);
    let gen_secs = num(&g, "seconds");
    let received = int(&k, "received");
    let rx_pps = super::cpu::ratio(received as f64, gen_secs);
    let switch_s = usage.procs_cpu("switch").unwrap_or(f64::NAN);
    let lat = k.get("latency_ns").cloned().unwrap_or_default();
    Ok(Burst {
        sent_pps: num(&g, "pps"),
        rx_pps,
        sent: int(&g, "sent"),
        received,
        flows_seen: int(&k, "flows"),
        lost: int(&k, "lost"),
        latency_p50_ns: int(&lat, "p50"),
        latency_p99_ns: int(&lat, "p99"),
        gen_engine: g
            .get("engine")
            .and_then(|e| e.as_str())
            .unwrap_or("")
            .to_string(),
        machine_cores: usage.busy_cores(),
        switch_cores: super::cpu::ratio(switch_s, usage.wall_s),
        switch_us_per_pkt: super::cpu::ratio(switch_s * 1e6, received as f64),
        usage,
        gen: g,
        sink: k,
    })
}
