//! `nicflow p4 ...`: the command line of P4 mode.
//!
//! Most verbs are requests to the daemon (`load`, `table-add`, ...; see
//! `control::switch::p4`). `stf` runs locally: it checks a program against
//! an STF test twice, through the interpreter alone and through a bridge's
//! caches (each packet sent three times so the later copies take the
//! cached flows), and exits non-zero naming the first difference.
//! `p4info` prints the P4Info nicflow generates for a program (what a
//! P4Runtime controller loads with the program), and `runtime` serves
//! P4Runtime for a bridge, turning each request into daemon requests
//! (`nicflow_p4rt::daemon_target`).

use crate::control::proto::{P4Op, Request};
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum P4Cmd {
    /// Put a bridge in P4 mode: PROG.p4 replaces its OpenFlow tables as
    /// the slow path (decisions are cached as datapath flows).
    Load {
        bridge: String,
        program: PathBuf,
        /// pna, pna-tc (P4TC's 3-block PNA), v1model or psa (default:
        /// from the program's `main`).
        #[arg(long)]
        arch: Option<String>,
        /// Include directory (the architecture files: core.p4, pna.p4, ...).
        #[arg(short = 'I', long = "include")]
        include: Vec<PathBuf>,
        /// The program's CPU port number: copies it sends there are queued
        /// for a P4Runtime controller (PacketIn) instead of transmitted.
        #[arg(long)]
        cpu_port: Option<u32>,
    },
    /// Back to the OpenFlow tables.
    Unload { bridge: String },
    /// The program's tables, actions, externs and slow-path counters.
    Info { bridge: String },
    /// Add an entry: TABLE ACTION KEY... [=> PARAM...] [priority N]
    /// (simple_switch_CLI order; keys: v, v/len, v&&&mask, lo->hi, *;
    /// values: numbers, IPv4/IPv6/MAC addresses, port names, v0.N VFs).
    TableAdd {
        bridge: String,
        table: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        words: Vec<String>,
    },
    /// Replace an entry's action: TABLE ENTRY-ID ACTION [PARAM...].
    TableModify {
        bridge: String,
        table: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        words: Vec<String>,
    },
    /// Delete an entry by its id (as table-add and table-dump print it).
    TableDel {
        bridge: String,
        table: String,
        id: u64,
    },
    /// Entries with their hit counts (all tables, or one).
    TableDump {
        bridge: String,
        table: Option<String>,
    },
    /// Set a table's default action: TABLE ACTION [PARAM...].
    SetDefault {
        bridge: String,
        table: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        words: Vec<String>,
    },
    /// Read a counter (every non-zero cell, or one).
    CounterRead {
        bridge: String,
        name: String,
        index: Option<u64>,
    },
    /// Read a register (every cell, or one).
    RegisterRead {
        bridge: String,
        name: String,
        index: Option<u64>,
    },
    /// Write a register cell.
    RegisterWrite {
        bridge: String,
        name: String,
        index: u64,
        value: String,
    },
    /// Load the rules of a Netronome RTE user_config.json (all or nothing;
    /// ports may be VF names such as v0.0).
    LoadConfig { bridge: String, file: PathBuf },
    /// Serve P4Runtime (gRPC) for a bridge until SIGINT/SIGTERM: a
    /// controller's SetForwardingPipelineConfig (device config = the P4-16
    /// source) loads the program, its writes and reads go to the daemon.
    Runtime {
        bridge: String,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9559")]
        listen: std::net::SocketAddr,
        /// The P4Runtime device id controllers must use.
        #[arg(long, default_value_t = 1)]
        device_id: u64,
        /// Include directory for the programs controllers send.
        #[arg(short = 'I', long = "include")]
        include: Vec<PathBuf>,
        /// The programs' CPU port number (as BMv2's `--cpu-port`): copies
        /// sent there reach the controller as PacketIn (their
        /// `packet_in` header becomes the metadata); a PacketOut enters the
        /// program from it with its `packet_out` header in front. Without
        /// it, PacketIn is never sent and a PacketOut goes straight out of
        /// its `egress_port`.
        #[arg(long)]
        cpu_port: Option<u32>,
    },
    /// Print the P4Info (protobuf text format) nicflow generates for a
    /// program: give it to a P4Runtime controller with the program.
    P4info {
        program: PathBuf,
        #[arg(short = 'I', long = "include")]
        include: Vec<PathBuf>,
        #[arg(long)]
        arch: Option<String>,
    },
    /// Run an STF test (p4c's BMv2 dialect) through the interpreter and
    /// through a bridge's cache; exit 0 when every expectation holds.
    Stf {
        program: PathBuf,
        test: PathBuf,
        #[arg(long)]
        arch: Option<String>,
        #[arg(short = 'I', long = "include")]
        include: Vec<PathBuf>,
    },
}

/// Run one `nicflow p4` verb; `ctl` sends a request to the daemon;
/// `socket` is the command line's `--socket` (`runtime` connects to it,
/// else to `$NICFLOW_SOCK`, else the default).
pub fn run_with_socket(
    cmd: P4Cmd,
    ctl: &dyn Fn(Request) -> Result<ExitCode>,
    socket: Option<PathBuf>,
) -> Result<ExitCode> {
    let req = |bridge: String, op: P4Op| ctl(Request::P4 { bridge, op });
    match cmd {
        P4Cmd::Load {
            bridge,
            program,
            arch,
            include,
            cpu_port,
        } => {
            // The daemon reads the files: absolute paths.
            let abs = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
            let program = abs(program);
            if !program.is_file() {
                bail!("{}: no such file", program.display());
            }
            req(
                bridge,
                P4Op::Load {
                    path: Some(program.display().to_string()),
                    source: None,
                    arch,
                    include: include
                        .into_iter()
                        .map(|d| abs(d).display().to_string())
                        .collect(),
                    cpu_port,
                },
            )
        }
        P4Cmd::Unload { bridge } => req(bridge, P4Op::Unload),
        P4Cmd::Info { bridge } => req(bridge, P4Op::Info),
        P4Cmd::TableAdd {
            bridge,
            table,
            words,
        } => req(
            bridge,
            P4Op::TableAdd {
                table,
                words,
                idle_timeout_ns: None,
            },
        ),
        P4Cmd::TableModify {
            bridge,
            table,
            words,
        } => req(bridge, P4Op::TableModify { table, words }),
        P4Cmd::TableDel { bridge, table, id } => req(bridge, P4Op::TableDel { table, id }),
        P4Cmd::TableDump { bridge, table } => req(bridge, P4Op::TableDump { table }),
        P4Cmd::SetDefault {
            bridge,
            table,
            words,
        } => req(bridge, P4Op::SetDefault { table, words }),
        P4Cmd::CounterRead {
            bridge,
            name,
            index,
        } => req(bridge, P4Op::CounterRead { name, index }),
        P4Cmd::RegisterRead {
            bridge,
            name,
            index,
        } => req(bridge, P4Op::RegisterRead { name, index }),
        P4Cmd::RegisterWrite {
            bridge,
            name,
            index,
            value,
        } => req(bridge, P4Op::RegisterWrite { name, index, value }),
        P4Cmd::LoadConfig { bridge, file } => {
            let json = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            req(bridge, P4Op::LoadConfig { json })
        }
        P4Cmd::Stf {
            program,
            test,
            arch,
            include,
        } => stf(&program, &test, arch.as_deref(), &include),
        P4Cmd::Runtime {
            bridge,
            listen,
            device_id,
            include,
            cpu_port,
        } => runtime(
            crate::control::daemon::socket_path(socket),
            bridge,
            listen,
            device_id,
            include,
            cpu_port,
        ),
        P4Cmd::P4info {
            program,
            include,
            arch,
        } => {
            let arch = arch
                .map(|a| a.parse::<nicflow_p4::Arch>())
                .transpose()
                .map_err(anyhow::Error::msg)?;
            let pl =
                nicflow_p4::Pipeline::load(&program, &include, arch).map_err(anyhow::Error::msg)?;
            let info = nicflow_p4rt::p4info_gen::generate(&pl);
            print!("{}", nicflow_p4rt::p4info_gen::to_text(&info)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `nicflow p4 runtime`: the P4Runtime server over the daemon's bridge,
/// until SIGINT or SIGTERM.
fn runtime(
    socket: PathBuf,
    bridge: String,
    listen: std::net::SocketAddr,
    device_id: u64,
    include: Vec<PathBuf>,
    cpu_port: Option<u32>,
) -> Result<ExitCode> {
    // The daemon reads the include files too: absolute paths.
    let include = include
        .into_iter()
        .map(|d| std::fs::canonicalize(&d).with_context(|| format!("include dir {}", d.display())))
        .collect::<Result<Vec<_>>>()?;
    // The bridge must exist (a P4 program need not be loaded yet).
    let show = crate::control::daemon::request(&socket, &Request::Show)?;
    let known = show.data.as_array().map(|bs| {
        bs.iter()
            .any(|b| b.get("name").and_then(|n| n.as_str()) == Some(bridge.as_str()))
    });
    if known == Some(false) {
        bail!("the daemon at {} has no bridge {bridge}", socket.display());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let target = nicflow_p4rt::daemon_target::DaemonTarget::with_cpu_port(
            socket.clone(),
            bridge.clone(),
            include,
            cpu_port,
        );
        let shutdown = async {
            use tokio::signal::unix::{signal, SignalKind};
            match (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) {
                (Ok(mut i), Ok(mut t)) => {
                    tokio::select! {
                        _ = i.recv() => {}
                        _ = t.recv() => {}
                    }
                }
                _ => std::future::pending::<()>().await,
            }
        };
        eprintln!(
            "nicflow: P4Runtime for bridge {bridge} (daemon {}) on {listen}, device id {device_id}",
            socket.display()
        );
        nicflow_p4rt::serve(listen, device_id, target, shutdown)
            .await
            .context("P4Runtime server")
    })?;
    Ok(ExitCode::SUCCESS)
}

/// What `nicflow p4 stf` found.
pub struct StfOutcome {
    /// `Err` names the first difference (file:line: ...).
    pub interpreter: Result<usize, String>,
    pub cached: Result<usize, String>,
    /// How many times each packet went through the cache (1 for programs
    /// with registers).
    pub repeat: usize,
    /// Runs of the cached pass, and how many of them were cached.
    pub runs: u64,
    pub cached_flows: u64,
    /// Uncached runs by reason.
    pub slow_path: Vec<(String, u64)>,
}

/// Run `test` against `program` both ways.
pub fn run_stf(
    program: &std::path::Path,
    test: &std::path::Path,
    arch: Option<&str>,
    include: &[PathBuf],
) -> Result<StfOutcome> {
    let arch = arch
        .map(|a| a.parse::<nicflow_p4::Arch>())
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let text =
        std::fs::read_to_string(test).with_context(|| format!("reading {}", test.display()))?;
    run_stf_text(program, &test.display().to_string(), &text, arch, include)
}

/// [`run_stf`] with the test's text given (`name` names it in failures).
pub fn run_stf_text(
    program: &std::path::Path,
    name: &str,
    text: &str,
    arch: Option<nicflow_p4::Arch>,
    include: &[PathBuf],
) -> Result<StfOutcome> {
    use nicflow_p4::stf;
    let t = stf::parse(name, text)?;
    let load = || nicflow_p4::Pipeline::load(program, include, arch).map_err(anyhow::Error::msg);
    let mut pl = load()?;
    let interpreter = stf::run(
        &t,
        &mut stf::InterpTarget {
            pipeline: &mut pl,
            pre: Default::default(),
            now_ns: 0,
        },
        1,
    )
    .map(|r| r.sent)
    .map_err(|e| e.to_string());
    // A program with registers changes what the next packet sees: sending
    // each packet three times would test something else than the STF
    // says. Its packets go through the cache once each.
    let stateful = pl
        .externs()
        .iter()
        .any(|e| e.kind == nicflow_p4::runtime::ExternKind::Register);
    let repeat = if stateful { 1 } else { 3 };
    let ports = nicflow_dataplane::p4::stf::test_ports(&t);
    let mut target = nicflow_dataplane::p4::stf::CachedTarget::new(load()?, &ports)
        .map_err(anyhow::Error::msg)?;
    let cached = stf::run(&t, &mut target, repeat)
        .map(|r| r.sent)
        .map_err(|e| e.to_string());
    let p4 = target.bridge.p4().context("bridge left P4 mode")?;
    Ok(StfOutcome {
        interpreter,
        cached,
        repeat,
        runs: p4.stats.runs,
        cached_flows: p4.stats.cached,
        slow_path: p4
            .slow_path_reasons()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
    })
}

fn stf(
    program: &std::path::Path,
    test: &std::path::Path,
    arch: Option<&str>,
    include: &[PathBuf],
) -> Result<ExitCode> {
    let o = run_stf(program, test, arch, include)?;
    let mut ok = true;
    match &o.interpreter {
        Ok(n) => println!("interpreter: pass ({n} packets)"),
        Err(e) => {
            ok = false;
            println!("interpreter: FAIL {e}");
        }
    }
    match &o.cached {
        Ok(n) => println!(
            "cache: pass ({n} packets{})",
            if o.repeat > 1 {
                ", each sent 3 times"
            } else {
                ", each once: the program has registers"
            }
        ),
        Err(e) => {
            ok = false;
            println!("cache: FAIL {e}");
        }
    }
    let slow: Vec<String> = o
        .slow_path
        .iter()
        .map(|(r, n)| format!("{r}:{n}"))
        .collect();
    println!(
        "slow-path runs: {} (cached as flows: {}{}{})",
        o.runs,
        o.cached_flows,
        if slow.is_empty() { "" } else { "; uncached: " },
        slow.join(" ")
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
