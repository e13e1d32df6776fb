//! `nicflow bench gen`: `nicflow gen` against `trafgen` (netsniff-ng) on
//! the same veth pair, in the same run, with 64-byte frames.
//!
//! The bench builds two namespaces joined by a veth (`gx` sends, `gr`
//! receives; namespaces `nfbg<pid>tx`/`nfbg<pid>rx`, deleted on exit, error
//! and Ctrl-C), then alternates the two generators for `--reps` rounds.
//! Each sample starts the receiver, starts the generator, lets it warm up,
//! and reads the interface counters of both veth ends twice, `--secs`
//! apart: sent pps is the sender's `tx_packets` rate, received pps the
//! receiver's `rx_packets` rate over the same window, so both generators
//! are measured by the same yardstick. Medians over the rounds go in a
//! Markdown table; `--out DIR` also writes `report.md` and `samples.json`.

use anyhow::{bail, Context, Result};
use nicflow::os::{self, link::VethEnd, netlink::Rtnl};
use nicflow::traffic::template::{FlowSpec, Proto, Template};
use nicflow::traffic::{self, Mac, PortType};
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What consumes the frames on the receiving veth end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Receiver {
    /// The kernel stack of the receiving namespace, which drops the frames
    /// in `ip_rcv` (they are sent to 02:00:00:00:00:02, a MAC nobody has).
    /// On a plain veth this happens synchronously in the sender's own
    /// softirq, so the receive work is charged to the sending CPU; but the
    /// veth never pushes back, and trafgen (which aborts on `EAGAIN`) runs.
    /// Anything that queues frames on the receive side (RPS, XDP/NAPI)
    /// makes trafgen abort with "Flushing TX_RING failed".
    #[default]
    Stack,
    /// `nicflow sink` over AF_XDP: native XDP on `gr` moves the receive
    /// work to `gr`'s NAPI, run threaded so it can use the other CPU. The
    /// NAPI ring pushes back on the sender when full (`NETDEV_TX_BUSY`,
    /// `EAGAIN`), which trafgen treats as fatal ("Flushing TX_RING
    /// failed").
    Sink,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Measured seconds per sample (after 0.5 s of warm-up).
    #[arg(long, default_value_t = 3.0)]
    pub secs: f64,
    /// Rounds; each runs both generators once (the report shows medians).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Sender threads: `nicflow gen --threads N` and `trafgen --cpus N`.
    /// Two on a two-CPU machine: with the stack receiver each CPU also does
    /// the receive work of its own frames.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Queues of the veth pair (numtxqueues/numrxqueues); AF_XDP needs one
    /// per thread.
    #[arg(long, default_value_t = 2)]
    pub queues: usize,
    #[arg(long, value_enum, default_value_t)]
    pub receiver: Receiver,
    /// `nicflow gen --port-type`.
    #[arg(long, value_enum, default_value_t)]
    pub port_type: PortType,
    /// Frame size with FCS for both generators.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// The trafgen binary.
    #[arg(long, default_value = "trafgen")]
    pub trafgen: String,
    /// Write report.md and samples.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One measurement.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub tool: String,
    pub round: usize,
    /// Sender interface tx_packets per second over the window.
    pub tx_pps: f64,
    /// Receiver interface rx_packets per second over the window.
    pub rx_pps: f64,
    /// Frames the sink received over the whole run (sink receiver only).
    pub sink_received: Option<u64>,
    /// `nicflow gen --json` (nicflow only).
    pub gen: Option<Value>,
    pub window_s: f64,
    /// The generator failed or aborted: its last error line.
    pub error: Option<String>,
}

/// Namespaces of one bench run, deleted on drop (with the veth in them).
struct Netns {
    tx: String,
    rx: String,
}

impl Netns {
    fn create(queues: usize) -> Result<Netns> {
        let p = format!("nfbg{}", std::process::id());
        // Built first: if a later step fails, dropping it removes what was
        // made so far.
        let n = Netns {
            tx: format!("{p}tx"),
            rx: format!("{p}rx"),
        };
        os::netns::add(&n.tx)?;
        os::netns::add(&n.rx)?;
        let q = u32::try_from(queues).context("--queues")?;
        let end = |name: &str, ns: &str| VethEnd {
            netns: Some(ns.to_string()),
            queues: Some(q),
            ..VethEnd::named(name)
        };
        let mut root = Rtnl::open(None)?;
        os::link::add_veth(&mut root, &end("gx", &n.tx), &end("gr", &n.rx))?;
        for (ns, dev) in [(&n.tx, "gx"), (&n.rx, "gr")] {
            for k in ["all", "default"] {
                os::sysctl::write(Some(ns), &format!("net.ipv6.conf.{k}.disable_ipv6"), "1")?;
            }
            os::link::set_up(&mut Rtnl::open(Some(ns))?, dev)?;
        }
        Ok(n)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in [&self.tx, &self.rx] {
            if !os::netns::exists(ns) {
                continue;
            }
            if let Err(e) = os::netns::del(ns) {
                tracing::warn!("cleanup: {e}");
            }
        }
    }
}

/// A child process killed and reaped on drop.
struct Proc(Child);

/// What a finished child left.
struct Finished {
    stdout: String,
    stderr: String,
    ok: bool,
}

impl Proc {
    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as libc::pid_t, sig) };
    }

    /// Wait up to `limit`, then kill; its output.
    fn finish(mut self, limit: Duration) -> Finished {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Ok(Some(_)) = self.0.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let ok = self.0.wait().is_ok_and(|s| s.success());
        let mut stdout = String::new();
        let mut stderr = String::new();
        use std::io::Read;
        if let Some(mut o) = self.0.stdout.take() {
            let _ = o.read_to_string(&mut stdout);
        }
        if let Some(mut o) = self.0.stderr.take() {
            let _ = o.read_to_string(&mut stderr);
        }
        Finished { stdout, stderr, ok }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Interface `dev` of namespace `ns`.
fn link_in(ns: &str, dev: &str) -> Result<os::link::Link> {
    Ok(os::link::get(&mut Rtnl::open(Some(ns))?, dev)?)
}

/// (tx_packets, rx_packets) of `dev` in `ns`.
fn counters(ns: &str, dev: &str) -> Result<(u64, u64)> {
    let s = link_in(ns, dev)?.stats.unwrap_or_default();
    Ok((s.tx_packets, s.rx_packets))
}

/// The MAC of `dev` in `ns`, as `aa:bb:cc:dd:ee:ff`.
fn mac_of(ns: &str, dev: &str) -> Result<String> {
    let a = link_in(ns, dev)?
        .address
        .with_context(|| format!("{dev} in {ns} has no MAC"))?;
    Ok(a.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":"))
}

fn owned(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn spawn(ns: &str, argv: &[String]) -> Result<Proc> {
    let c = os::netns::command(Some(ns), argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {}", argv[0]))?;
    Ok(Proc(c))
}

pub fn cli(args: &Args) -> Result<()> {
    if args.secs <= 0.0 || args.reps == 0 {
        bail!("--secs and --reps must be positive");
    }
    if Command::new(&args.trafgen).arg("-v").output().is_err() {
        bail!("`{}` not found (Debian package netsniff-ng)", args.trafgen);
    }
    traffic::catch_stop_signals();
    let exe = super::nicflow_bin()?;
    let exe = exe.display().to_string();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let ns = Netns::create(args.queues)?;
    let dir = tempfile_dir()?;
    let gr_mac: String = mac_of(&ns.rx, "gr")?;
    let gx_mac: String = mac_of(&ns.tx, "gx")?;
    // trafgen sends nicflow's own frame (flow 0, seq 0), magic cleared so
    // the sink counts it as foreign rather than as duplicates.
    let spec = FlowSpec {
        src_mac: gx_mac.parse::<Mac>().map_err(anyhow::Error::msg)?,
        dst_mac: match args.receiver {
            Receiver::Sink => gr_mac.parse::<Mac>().map_err(anyhow::Error::msg)?,
            Receiver::Stack => traffic::gen::FALLBACK_DST_MAC,
        },
        src_ip: "198.18.0.1".parse()?,
        dst_ip: "198.18.0.2".parse()?,
        src_port: 10000,
        dst_port: 9,
        proto: Proto::Udp,
    };
    let mut frame = Template::build(&spec, 0, args.size - 4)?.frame();
    frame[42] = 0;
    frame[43] = 0;
    let cfg = dir.join("trafgen.cfg");
    let bytes: Vec<String> = frame.iter().map(|b| format!("0x{b:02x}")).collect();
    std::fs::write(&cfg, format!("{{\n  {}\n}}\n", bytes.join(", ")))?;

    // The frames' destination: the receiver's MAC for the sink; for the
    // stack a MAC nobody has, so it drops them before any route lookup.
    let dst_mac = match args.receiver {
        Receiver::Sink => gr_mac.clone(),
        Receiver::Stack => traffic::gen::FALLBACK_DST_MAC.to_string(),
    };
    let run_secs = 0.5 + args.secs + 0.5;
    let mut samples = Vec::new();
    'rounds: for round in 0..args.reps {
        for tool in ["nicflow", "trafgen"] {
            if traffic::stopped() {
                break 'rounds;
            }
            let s = sample(args, &ns, &exe, &dst_mac, &cfg, tool, round, run_secs, &dir)?;
            eprintln!(
                "round {round} {tool}: sent {:.0} pps, received {:.0} pps{}",
                s.tx_pps,
                s.rx_pps,
                s.error
                    .as_ref()
                    .map(|e| format!(" (error: {e})"))
                    .unwrap_or_default()
            );
            samples.push(s);
        }
    }
    let report = render(args, &samples, load.trim());
    println!("{report}");
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        std::fs::write(out.join("report.md"), &report)?;
        std::fs::write(
            out.join("samples.json"),
            serde_json::to_string_pretty(&serde_json::json!({
                "machine": super::machine_description(),
                "loadavg_before": load.trim(),
                "secs": args.secs,
                "threads": args.threads,
                "queues": args.queues,
                "receiver": args.receiver,
                "size": args.size,
                "samples": samples,
            }))?,
        )?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("nicflow-bench-gen-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

#[allow(clippy::too_many_arguments)]
fn sample(
    args: &Args,
    ns: &Netns,
    exe: &str,
    dst_mac: &str,
    cfg: &std::path::Path,
    tool: &str,
    round: usize,
    run_secs: f64,
    dir: &std::path::Path,
) -> Result<Sample> {
    let sink = if args.receiver == Receiver::Sink {
        let ready = dir.join(format!("ready-{tool}-{round}"));
        let _ = std::fs::remove_file(&ready);
        let argv: Vec<String> = owned(&[
            exe,
            "sink",
            "--iface",
            "gr",
            "--port-type",
            "afxdp",
            "--json",
            "--ready-file",
            &ready.display().to_string(),
            "--duration",
            &format!("{}", run_secs + 10.0),
        ]);
        let p = spawn(&ns.rx, &argv)?;
        let end = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            if Instant::now() > end {
                bail!("sink did not get ready");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Threaded NAPI: gr's receive work (the XDP program and the copy
        // into the sink's UMEM) becomes a kthread the scheduler can put on
        // the other CPU. The NAPI exists only while XDP is attached, so
        // this is set after the sink is up, every sample.
        // (In a child that sees the namespace's own /sys.)
        let _ = os::netns::command(
            Some(&ns.rx),
            &["sh", "-c", "echo 1 > /sys/class/net/gr/threaded"],
        )
        .stdin(Stdio::null())
        .output();
        Some(p)
    } else {
        None
    };
    let threads = args.threads.to_string();
    let argv: Vec<String> = if tool == "nicflow" {
        owned(&[
            exe,
            "gen",
            "--iface",
            "gx",
            "--dst-mac",
            dst_mac,
            "--size",
            &args.size.to_string(),
            "--duration",
            &format!("{run_secs}"),
            "--threads",
            &threads,
            "--flows",
            &args.threads.to_string(),
            "--port-type",
            match args.port_type {
                PortType::Auto => "auto",
                PortType::Afxdp => "afxdp",
                PortType::Afpacket => "afpacket",
            },
            "--json",
        ])
    } else {
        owned(&[
            "timeout",
            "-s",
            "INT",
            &format!("{run_secs}"),
            &args.trafgen,
            "--dev",
            "gx",
            "--conf",
            &cfg.display().to_string(),
            "--cpus",
            &threads,
            "--no-sock-mem",
            "--notouch-irq",
            "--no-cpu-stats",
        ])
    };
    let sender = spawn(&ns.tx, &argv)?;
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let (tx0, _) = counters(&ns.tx, "gx")?;
    let (_, rx0) = counters(&ns.rx, "gr")?;
    let t0b = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.secs));
    let t1 = Instant::now();
    let (tx1, _) = counters(&ns.tx, "gx")?;
    let (_, rx1) = counters(&ns.rx, "gr")?;
    let t1b = Instant::now();
    // Window between the midpoints of the two reads.
    let window = (t1 + (t1b - t1) / 2)
        .duration_since(t0 + (t0b - t0) / 2)
        .as_secs_f64();
    let fin = sender.finish(Duration::from_secs_f64(run_secs + 5.0));
    // timeout(1) ends trafgen with SIGINT: exit status 124 is the normal end.
    let error = ((tool == "nicflow" && !fin.ok) || fin.stderr.contains("failed"))
        .then(|| fin.stderr.trim().lines().last().unwrap_or("").to_string());
    let gen = if tool == "nicflow" {
        serde_json::from_str::<Value>(fin.stdout.trim()).ok()
    } else {
        None
    };
    let sink_received = match sink {
        Some(p) => {
            p.signal(libc::SIGINT);
            let o = p.finish(Duration::from_secs(5));
            serde_json::from_str::<Value>(o.stdout.trim())
                .ok()
                .and_then(|v| v["received"].as_u64())
        }
        None => None,
    };
    Ok(Sample {
        tool: tool.into(),
        round,
        tx_pps: tx1.saturating_sub(tx0) as f64 / window,
        rx_pps: rx1.saturating_sub(rx0) as f64 / window,
        sink_received,
        gen,
        window_s: window,
        error,
    })
}

fn render(args: &Args, samples: &[Sample], load: &str) -> String {
    let med = |tool: &str, f: &dyn Fn(&Sample) -> f64| {
        let mut v: Vec<f64> = samples.iter().filter(|s| s.tool == tool).map(f).collect();
        super::median(&mut v)
    };
    let mut r = String::new();
    r.push_str(&format!(
        "# nicflow gen vs trafgen: {}-byte frames on a veth pair\n\n",
        args.size
    ));
    r.push_str(&format!("Machine: {}  \n", super::machine_description()));
    r.push_str(&format!("Load average before the run: {load}  \n"));
    r.push_str(&format!(
        "Setup: veth pair with {} queue(s) between two namespaces; receiver: {}; \
         sender threads: {}; {} s measured per sample after 0.5 s warm-up; {} rounds, \
         generators alternating. Sent = sender veth tx_packets rate, received = receiver \
         veth rx_packets rate over the same window.\n\n",
        args.queues,
        match args.receiver {
            Receiver::Sink => "`nicflow sink` (AF_XDP, native XDP, threaded NAPI)",
            Receiver::Stack =>
                "the kernel stack (drops the frames in ip_rcv: destination MAC 02:00:00:00:00:02 is nobody's)",
        },
        args.threads,
        args.secs,
        args.reps
    ));
    let nf_tx = med("nicflow", &|s| s.tx_pps);
    let tg_tx = med("trafgen", &|s| s.tx_pps);
    let nf_rx = med("nicflow", &|s| s.rx_pps);
    let tg_rx = med("trafgen", &|s| s.rx_pps);
    r.push_str("| generator | sent pps (median) | received pps (median) |\n");
    r.push_str("| --- | ---: | ---: |\n");
    let engine = samples
        .iter()
        .find_map(|s| s.gen.as_ref().and_then(|g| g["engine"].as_str()))
        .unwrap_or("?")
        .to_string();
    r.push_str(&format!(
        "| nicflow gen ({engine}) | {nf_tx:.0} | {nf_rx:.0} |\n"
    ));
    r.push_str(&format!(
        "| trafgen (AF_PACKET TX_RING) | {tg_tx:.0} | {tg_rx:.0} |\n"
    ));
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}", a / b)
        } else {
            "n/a".to_string()
        }
    };
    r.push_str(&format!(
        "| ratio nicflow / trafgen | {} | {} |\n\n",
        ratio(nf_tx, tg_tx),
        ratio(nf_rx, tg_rx)
    ));
    let failed = samples.iter().filter(|s| s.error.is_some()).count();
    if failed > 0 {
        r.push_str(&format!(
            "{failed} sample(s) ended with an error (see the last column); their rates count as measured.\n\n"
        ));
    }
    r.push_str("Samples:\n\n| round | generator | sent pps | received pps | sink received | gen-reported pps | error |\n");
    r.push_str("| ---: | --- | ---: | ---: | ---: | ---: | --- |\n");
    for s in samples {
        r.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {} | {} | {} |\n",
            s.round,
            s.tool,
            s.tx_pps,
            s.rx_pps,
            s.sink_received.map(|v| v.to_string()).unwrap_or("-".into()),
            s.gen
                .as_ref()
                .and_then(|g| g["pps"].as_f64())
                .map(|v| format!("{v:.0}"))
                .unwrap_or("-".into()),
            s.error.as_deref().unwrap_or(""),
        ));
    }
    r
}
