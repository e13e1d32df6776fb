//! The `nicflow` command: rule checking, offline pipelines, benchmarks.
//!
//! Library errors are typed; this is the edge where they gain context
//! (`anyhow`) and become exit codes.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::pcap::PcapPort;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "nicflow",
    version,
    about = "A software SmartNIC: an offloadable virtual switch"
)]
struct Cli {
    /// Control socket (default /run/nicflow/nicflow.sock; env NICFLOW_SOCK).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Print the daemon's structured answer as JSON (read verbs).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Parse a file of flows (one per line, `#` comments) and print each in
    /// canonical form; stop at the first bad line with its number and the
    /// offending token.
    CheckFlows { file: PathBuf },
    /// Run capture files through a bridge: each `--port NAME=IN.pcap[:OUT.pcap]`
    /// (IN may be empty: `NAME=:OUT.pcap`) becomes a port, in order, numbered
    /// from 1; the flows file programs the tables. Prints the datapath flows
    /// and counters.
    Pcap {
        /// Flows file (ovs-ofctl syntax; port names refer to --port names).
        #[arg(long)]
        flows: PathBuf,
        #[arg(long = "port", required = true)]
        ports: Vec<String>,
        /// Send every packet through the slow path (no caches).
        #[arg(long)]
        no_cache: bool,
    },
    /// Run demo traffic through a three-port bridge fed from capture files
    /// and print where every packet went.
    Demo {
        /// Directory for the rules, input and output captures.
        #[arg(long, default_value = "/tmp/nicflow-demo")]
        dir: PathBuf,
    },
    /// Run the switch in the foreground: own the configured ports, forward
    /// traffic, serve the CLI on the control socket.
    Daemon {
        /// Configuration file (TOML); created and kept up to date by CLI changes.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run as ovs-vswitchd does: the switch configured from ovsdb-server's
    /// Open_vSwitch database (OVSDB is the source of truth), status written
    /// back; the control socket and CLI keep working. See docs/ovn.md.
    Vswitchd {
        /// The database (default unix:$OVS_RUNDIR/db.sock; OVS_RUNDIR
        /// defaults to /var/run/openvswitch).
        database: Option<String>,
        /// Write the pid (default FILE: $OVS_RUNDIR/ovs-vswitchd.pid).
        #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "FILE")]
        pidfile: Option<String>,
        /// Run in the background; return once ready.
        #[arg(long)]
        detach: bool,
        /// Log to FILE (default $OVS_LOGDIR/ovs-vswitchd.log; OVS_LOGDIR
        /// defaults to /var/log/openvswitch) instead of stderr.
        #[arg(long = "log-file", num_args = 0..=1, default_missing_value = "", value_name = "FILE")]
        log_file: Option<String>,
    },
    /// Create a bridge (it starts with `priority=0,actions=normal`).
    AddBr { bridge: String },
    /// Delete a bridge and its ports.
    DelBr { bridge: String },
    /// Attach a Linux interface to a bridge. Options as trailing KEY=VALUE.
    AddPort {
        bridge: String,
        iface: String,
        /// auto (a TC port under the default offload=auto, an AF_XDP port
        /// under offload=xdp|none), tc, afxdp, afpacket, tap, internal,
        /// vxlan, geneve, patch (peer=PORT: joined in memory to patch port
        /// PORT of another bridge), or uplink (the bridge's PF/physical
        /// port: opened like afxdp, at most one).
        #[arg(long = "type", default_value = "auto")]
        kind: String,
        /// Port name on the bridge (default: the interface name).
        #[arg(long)]
        name: Option<String>,
        options: Vec<String>,
    },
    /// Detach a port.
    DelPort { bridge: String, name: String },
    /// Create a VF in network namespace NAMESPACE (an `ip netns` name): a
    /// veth pair whose VF end moves into the namespace and whose
    /// representor end (`<bridge>pf0vf<N>`) becomes a port of BRIDGE.
    AddVf {
        bridge: String,
        namespace: String,
        /// The VF's interface name in the namespace (default `vf<N>`, N the
        /// lowest free VF index of the bridge).
        #[arg(long)]
        name: Option<String>,
        /// The VF's MAC (default: 02:xx:xx:xx derived from the bridge name,
        /// then the index).
        #[arg(long)]
        mac: Option<String>,
        /// ADDRESS/PREFIX for the VF, IPv4 or IPv6 (repeatable).
        #[arg(long = "ip")]
        ips: Vec<String>,
        /// Port type of the representor: auto (default: TC port under
        /// offload auto/tc, else AF_XDP), tc, afxdp or afpacket.
        #[arg(long = "rep-type")]
        rep_type: Option<String>,
    },
    /// Remove a VF (by VF or representor name): its port and veth pair.
    DelVf { bridge: String, name: String },
    /// Bridges, ports and VFs.
    Show,
    /// Add one rule (ovs-ofctl syntax).
    AddFlow { bridge: String, flow: String },
    /// Add every rule of a file, all or nothing.
    AddFlows { bridge: String, file: PathBuf },
    /// Delete rules matching (non-strict, like ovs-ofctl); all without a match.
    DelFlows {
        bridge: String,
        filter: Option<String>,
    },
    /// Rules with counters.
    DumpFlows { bridge: String },
    /// Datapath flows: match, packets, bytes, used, engine (xdp or
    /// userspace with the reason it is not offloaded), actions.
    DumpDpFlows { bridge: String },
    /// Which of the bridge's datapath flows a SmartNIC would hold, had
    /// Open vSwitch 3.1 installed them with hw-offload on: per flow
    /// `MATCH -> offload | refused: REASON`, the NIC's resources and the
    /// predicted gain (docs/offload-plan.md). Changes nothing.
    OffloadPlan {
        bridge: String,
        /// cx7 (ConnectX-7), bf2 (BlueField-2), bf3 (BlueField-3), agilio (Netronome Agilio CX).
        #[arg(long)]
        profile: String,
    },
    /// Add one group (ovs-ofctl add-group syntax:
    /// group_id=N,type=all|select|indirect|fast_failover,bucket=...).
    AddGroup { bridge: String, group: String },
    /// Add every group of a file (one a line), all or nothing.
    AddGroups { bridge: String, file: PathBuf },
    /// Replace an existing group's type and buckets.
    ModGroup { bridge: String, group: String },
    /// Delete a group (group_id=N) or all, and the rules that use them.
    DelGroups {
        bridge: String,
        filter: Option<String>,
    },
    /// Groups, as ovs-ofctl dump-groups prints them.
    DumpGroups { bridge: String },
    /// Packets and bytes per group and per bucket.
    DumpGroupStats { bridge: String },
    /// Add a meter (ovs-ofctl syntax:
    /// meter=N,kbps|pktps[,burst][,stats],bands=type=drop|dscp_remark,rate=R[,burst_size=B][,prec_level=P]...).
    AddMeter { bridge: String, meter: String },
    /// Give an existing meter new flags and bands (its counters stay).
    ModMeter { bridge: String, meter: String },
    /// Delete a meter (meter=N) or all, and the rules that use them.
    DelMeters {
        bridge: String,
        filter: Option<String>,
    },
    /// Meters, as ovs-ofctl dump-meters prints them.
    DumpMeters { bridge: String },
    /// Packets and bytes per meter and per band (meter=N: one).
    MeterStats {
        bridge: String,
        filter: Option<String>,
    },
    /// Tracked connections, in `ovs-appctl dpctl/dump-conntrack`'s format.
    DumpConntrack {
        bridge: String,
        /// `zone=N`: only that zone.
        zone: Option<String>,
        /// More detail (id, timeout), as OVS's -m.
        #[arg(short = 'm', long = "more")]
        more: bool,
        /// Packet and byte counters, as OVS's -s.
        #[arg(short = 's', long = "statistics")]
        statistics: bool,
    },
    /// Remove tracked connections: `[zone=N] [ct_nw_src=..,ct_nw_dst=..,ct_nw_proto=..,ct_tp_src=..,ct_tp_dst=..]`.
    FlushConntrack { bridge: String, args: Vec<String> },
    /// Connection tracker counters: connections by protocol, invalid packets by reason.
    ConntrackStats { bridge: String },
    /// Port counters, cache hits per tier, upcalls, drops by reason,
    /// packets per engine (XDP / userspace).
    Stats,
    /// Change a bridge setting: `offload=auto|tc|xdp|none`,
    /// `protocols=OpenFlow13,OpenFlow15`, `flow_limit=N` (persisted);
    /// `ct_setup=on|off`, `ct_setup_nat=on|off` (not persisted).
    Set {
        bridge: String,
        /// KEY=VALUE
        setting: String,
    },
    /// OpenFlow controllers of a bridge, replacing any: `tcp:IP[:PORT]`,
    /// `ptcp:[PORT][:IP]`, `ssl:IP[:PORT]`, `pssl:[PORT][:IP]` (after
    /// set-ssl), `unix:PATH`, `punix:PATH` (port 6653 by default).
    SetController {
        bridge: String,
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Remove every controller of a bridge.
    DelController { bridge: String },
    /// A bridge's controllers and whether they are connected.
    GetController { bridge: String },
    /// `standalone` (fail open to NORMAL while no controller is connected)
    /// or `secure` (never).
    SetFailMode { bridge: String, mode: String },
    /// The bridge's fail mode (nothing printed when never set: standalone).
    GetFailMode { bridge: String },
    /// TLS identity for `ssl:`/`pssl:` controllers, as `ovs-vsctl set-ssl`:
    /// PEM private key (not accessible to other users), certificate
    /// (chain), CA certificate(s) peers must be signed by (persisted).
    SetSsl {
        private_key: PathBuf,
        certificate: PathBuf,
        ca_cert: PathBuf,
    },
    /// The TLS files in use.
    GetSsl,
    /// Forget the TLS files (refused while ssl:/pssl: targets exist).
    DelSsl,
    /// P4-16 programs as a bridge's slow path (PNA, v1model, PSA), their
    /// tables and externs, and STF tests.
    P4 {
        #[command(subcommand)]
        verb: nicflow::p4cli::P4Cmd,
    },
    /// Namespace labs: hosts and nicflow switches from a topology file.
    Lab {
        #[command(subcommand)]
        verb: LabCmd,
    },
    /// Packet generator: test frames with sequence numbers and timestamps
    /// onto an interface (AF_XDP, AF_PACKET tx ring as fallback).
    Gen(nicflow::traffic::gen::Args),
    /// Packet sink: per-flow counts, loss, reordering and one-way latency of
    /// the generator's frames arriving on an interface.
    Sink(nicflow::traffic::sink::Args),
    /// Benchmarks that print reports.
    ///
    /// The experiments live in their own program, `nicflow-bench` (crate
    /// `nicflow-bench`), installed next to this one; `nicflow bench ARGS`
    /// runs it with ARGS (`nicflow bench --help` lists them).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Subcommand)]
enum LabCmd {
    /// Create the lab's namespaces, links and switch daemons.
    Up { file: PathBuf },
    /// Remove everything `up` made (also after a crash).
    Down { file: PathBuf },
    /// Run a command inside a host's namespace.
    Exec {
        #[arg(long)]
        topology: Option<PathBuf>,
        host: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
}

fn main() -> ExitCode {
    // Run as a CNI plugin (type `nicflow`) when a container runtime calls.
    if std::env::var_os("CNI_COMMAND").is_some() {
        return ExitCode::from(nicflow::cni::main() as u8);
    }
    let cli = Cli::parse();
    // `vswitchd --log-file`: the log (stderr) goes to the file from the start.
    if let Cmd::Vswitchd {
        log_file: Some(f), ..
    } = &cli.cmd
    {
        let path = if f.is_empty() {
            nicflow::vswitchd::logdir().join("ovs-vswitchd.log")
        } else {
            PathBuf::from(f)
        };
        if let Err(e) = nicflow::vswitchd::process::log_to(&path) {
            eprintln!("nicflow: log file: {e:#}");
            return ExitCode::from(1);
        }
    }
    // The daemon logs what it does; one-shot commands only warnings.
    let default_level = if matches!(cli.cmd, Cmd::Daemon { .. } | Cmd::Vswitchd { .. }) {
        "info"
    } else {
        // Die quietly on a closed pipe (`nicflow stats | head`), like other
        // command-line tools; the daemon ignores SIGPIPE instead.
        // SAFETY: restoring the default disposition of a signal.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NICFLOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nicflow: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    use nicflow::control::proto::Request;
    let sock = nicflow::control::daemon::socket_path(cli.socket.clone());
    let json = cli.json;
    let ctl = |req: Request| -> Result<ExitCode> {
        let resp = nicflow::control::daemon::request(&sock, &req)?;
        if !resp.ok {
            eprintln!(
                "nicflow: {}",
                resp.error.unwrap_or_else(|| "request failed".into())
            );
            return Ok(ExitCode::from(1));
        }
        if json {
            println!("{}", serde_json::to_string_pretty(&resp.data)?);
        } else {
            print!("{}", resp.text);
        }
        Ok(ExitCode::SUCCESS)
    };
    match cli.cmd {
        Cmd::Daemon { config } => {
            let cfg = match &config {
                Some(p) => nicflow::control::config::Config::load(p)?,
                None => Default::default(),
            };
            nicflow::control::daemon::prepare(&sock);
            let sw = nicflow::control::switch::Switch::new(cfg, config.clone())
                .map_err(anyhow::Error::msg)?;
            nicflow::control::daemon::run(sw, &sock)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Vswitchd {
            database,
            pidfile,
            detach,
            log_file,
        } => {
            use nicflow::vswitchd;
            let detached = if detach {
                vswitchd::process::detach(log_file.is_some())?
            } else {
                vswitchd::process::Detached::none()
            };
            let rundir = vswitchd::rundir();
            let _pid = match pidfile {
                Some(p) => Some(vswitchd::process::Pidfile::create(&if p.is_empty() {
                    rundir.join("ovs-vswitchd.pid")
                } else {
                    PathBuf::from(p)
                })?),
                None => None,
            };
            let db = database.unwrap_or_else(vswitchd::default_database);
            let mut vs = vswitchd::Vswitchd::new(&db, rundir)?;
            nicflow::control::daemon::prepare(&sock);
            let sw = nicflow::control::switch::Switch::new(Default::default(), None)
                .map_err(anyhow::Error::msg)?;
            tracing::info!(database = %db, "nicflow vswitchd: configured from OVSDB");
            vs.when_ready(detached);
            nicflow::control::daemon::run_with(sw, &sock, Some(&mut vs))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::AddBr { bridge } => ctl(Request::AddBr { bridge }),
        Cmd::DelBr { bridge } => ctl(Request::DelBr { bridge }),
        Cmd::AddPort {
            bridge,
            iface,
            kind,
            name,
            options,
        } => {
            let mut opts = nicflow::control::proto::PortOptions::new();
            for (i, o) in options.iter().enumerate() {
                // Not echoed unless it looks like a bare option name: a
                // mistyped `psk:VALUE` would otherwise print the key.
                let (k, v) = o.split_once('=').with_context(|| {
                    let name =
                        o.len() <= 32 && o.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                    if name && !nicflow::control::proto::is_secret_option(o) {
                        format!("option `{o}`: expected KEY=VALUE")
                    } else {
                        format!("option {} (not shown): expected KEY=VALUE", i + 1)
                    }
                })?;
                opts.insert(k, v);
            }
            ctl(Request::AddPort {
                bridge,
                iface,
                kind,
                name,
                options: opts,
            })
        }
        Cmd::DelPort { bridge, name } => ctl(Request::DelPort { bridge, name }),
        Cmd::AddVf {
            bridge,
            namespace,
            name,
            mac,
            ips,
            rep_type,
        } => ctl(Request::AddVf {
            bridge,
            namespace,
            name,
            mac,
            ips,
            rep_type,
        }),
        Cmd::DelVf { bridge, name } => ctl(Request::DelVf { bridge, name }),
        Cmd::Show => ctl(Request::Show),
        Cmd::P4 { verb } => nicflow::p4cli::run_with_socket(verb, &ctl, cli.socket.clone()),
        Cmd::AddFlow { bridge, flow } => ctl(Request::AddFlow { bridge, flow }),
        Cmd::AddFlows { bridge, file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            ctl(Request::AddFlows { bridge, text })
        }
        Cmd::DelFlows { bridge, filter } => ctl(Request::DelFlows { bridge, filter }),
        Cmd::DumpFlows { bridge } => ctl(Request::DumpFlows { bridge }),
        Cmd::DumpDpFlows { bridge } => ctl(Request::DumpDpFlows { bridge }),
        Cmd::OffloadPlan { bridge, profile } => ctl(Request::OffloadPlan { bridge, profile }),
        Cmd::AddGroup { bridge, group } => ctl(Request::AddGroup { bridge, group }),
        Cmd::AddGroups { bridge, file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            ctl(Request::AddGroups { bridge, text })
        }
        Cmd::ModGroup { bridge, group } => ctl(Request::ModGroup { bridge, group }),
        Cmd::DelGroups { bridge, filter } => ctl(Request::DelGroups { bridge, filter }),
        Cmd::DumpGroups { bridge } => ctl(Request::DumpGroups { bridge }),
        Cmd::DumpGroupStats { bridge } => ctl(Request::DumpGroupStats { bridge }),
        Cmd::AddMeter { bridge, meter } => ctl(Request::AddMeter { bridge, meter }),
        Cmd::ModMeter { bridge, meter } => ctl(Request::ModMeter { bridge, meter }),
        Cmd::DelMeters { bridge, filter } => ctl(Request::DelMeters { bridge, filter }),
        Cmd::DumpMeters { bridge } => ctl(Request::DumpMeters { bridge }),
        Cmd::MeterStats { bridge, filter } => ctl(Request::MeterStats { bridge, filter }),
        Cmd::DumpConntrack {
            bridge,
            zone,
            more,
            statistics,
        } => {
            let zone = zone.map(|z| parse_zone_arg(&z)).transpose()?;
            ctl(Request::DumpConntrack {
                bridge,
                zone,
                verbose: more,
                stats: statistics,
            })
        }
        Cmd::FlushConntrack { bridge, args } => {
            let mut zone = None;
            let mut filter = None;
            for a in args {
                if a.starts_with("zone=") {
                    zone = Some(parse_zone_arg(&a)?);
                } else if filter.is_none() {
                    filter = Some(a);
                } else {
                    anyhow::bail!(
                        "`{a}`: give the tuple as one argument (ct_nw_src=..,ct_tp_dst=..)"
                    );
                }
            }
            ctl(Request::FlushConntrack {
                bridge,
                zone,
                filter,
            })
        }
        Cmd::ConntrackStats { bridge } => ctl(Request::ConntrackStats { bridge }),
        Cmd::Stats => ctl(Request::Stats),
        Cmd::Set { bridge, setting } => {
            let (key, value) = setting
                .split_once('=')
                .with_context(|| format!("`{setting}`: expected KEY=VALUE (offload=auto|tc|xdp|none, protocols=OpenFlow13,OpenFlow15)"))?;
            ctl(Request::Set {
                bridge,
                key: key.to_string(),
                value: value.to_string(),
            })
        }
        Cmd::SetController { bridge, targets } => ctl(Request::SetController { bridge, targets }),
        Cmd::DelController { bridge } => ctl(Request::DelController { bridge }),
        Cmd::GetController { bridge } => ctl(Request::GetController { bridge }),
        Cmd::SetFailMode { bridge, mode } => ctl(Request::SetFailMode { bridge, mode }),
        Cmd::GetFailMode { bridge } => ctl(Request::GetFailMode { bridge }),
        Cmd::SetSsl {
            private_key,
            certificate,
            ca_cert,
        } => {
            // The daemon has another working directory.
            let abs = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
            ctl(Request::SetSsl {
                private_key: abs(private_key),
                certificate: abs(certificate),
                ca_cert: abs(ca_cert),
            })
        }
        Cmd::GetSsl => ctl(Request::GetSsl),
        Cmd::DelSsl => ctl(Request::DelSsl),
        Cmd::Lab { verb } => {
            use nicflow::lab::{self, LabOptions, Topology};
            let opts = LabOptions::from_env()?;
            match verb {
                LabCmd::Up { file } => {
                    print!("{}", lab::up(&Topology::load(&file)?, &opts)?);
                    Ok(ExitCode::SUCCESS)
                }
                LabCmd::Down { file } => {
                    print!("{}", lab::down(&Topology::load(&file)?.name, &opts)?);
                    Ok(ExitCode::SUCCESS)
                }
                LabCmd::Exec {
                    topology,
                    host,
                    cmd,
                } => {
                    let topo = topology.as_deref().map(Topology::load).transpose()?;
                    let code = lab::exec(topo.as_ref(), &host, &cmd, &opts)?;
                    Ok(ExitCode::from(code.clamp(0, 255) as u8))
                }
            }
        }
        Cmd::CheckFlows { file } => check_flows(&file),
        Cmd::Pcap {
            flows,
            ports,
            no_cache,
        } => pcap(&flows, &ports, no_cache),
        Cmd::Demo { dir } => {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                print!("{}", nicflow::demo::run_lab()?);
            } else {
                println!("(not root: skipping the namespace lab part of the demo)");
            }
            println!("== nicflow demo, part 2: capture files through a three-port bridge ==");
            print!("{}", nicflow::demo::run(&dir)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Gen(args) => {
            nicflow::traffic::gen::cli(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Sink(args) => {
            nicflow::traffic::sink::cli(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench { args } => bench(&args),
    }
}

fn check_flows(file: &std::path::Path) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let ports = nicflow_ofctl::AutoPorts::default();
    match nicflow_ofctl::parse_flows(&text, &ports) {
        Ok(specs) => {
            for s in &specs {
                println!("{}", nicflow_ofctl::format_flow(s, &ports));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{}:{}", file.display(), e);
            Ok(ExitCode::from(1))
        }
    }
}

fn pcap(flows: &std::path::Path, ports: &[String], no_cache: bool) -> Result<ExitCode> {
    let cfg = DatapathConfig {
        caches_enabled: !no_cache,
        ..Default::default()
    };
    let mut br = Bridge::new("pcap", cfg);
    for spec in ports {
        let (name, files) = spec
            .split_once('=')
            .with_context(|| format!("--port `{spec}`: expected NAME=IN.pcap[:OUT.pcap]"))?;
        let (input, output) = match files.split_once(':') {
            Some((i, o)) => (i, Some(o)),
            None => (files, None),
        };
        let input = (!input.is_empty()).then(|| PathBuf::from(input));
        let output = output.filter(|o| !o.is_empty()).map(PathBuf::from);
        let port = PcapPort::open(name, input.as_deref(), output.as_deref())
            .with_context(|| format!("opening port {name}"))?;
        br.add_port(Box::new(port))?;
    }
    let text =
        std::fs::read_to_string(flows).with_context(|| format!("reading {}", flows.display()))?;
    let now = Instant::now();
    if let Err(e) = br.add_flows_str(&text, now) {
        bail!("{}: {e}", flows.display());
    }
    let n = br.run_until_idle(now);
    println!("processed {n} frames");
    for d in br.dump_dp_flows(Instant::now()) {
        println!(
            "{}, packets:{}, bytes:{}, actions:{}",
            d.matching, d.packets, d.bytes, d.actions
        );
    }
    let s = br.dp_stats();
    println!(
        "emc_hits:{} megaflow_hits:{} upcalls:{} flows:{}",
        s.emc_hits,
        s.megaflow_hits,
        s.upcalls,
        br.n_dp_flows()
    );
    for (reason, n) in s.drops() {
        println!("drop {reason}: {n}");
    }
    for (name, no, st) in br.port_stats() {
        println!(
            "port {no} {name}: rx {} pkts {} bytes, tx {} pkts {} bytes",
            st.rx_packets, st.rx_bytes, st.tx_packets, st.tx_bytes
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `zone=N` (or a bare N) of the conntrack verbs.
fn parse_zone_arg(s: &str) -> anyhow::Result<u16> {
    let v = s.strip_prefix("zone=").unwrap_or(s);
    v.parse::<u16>()
        .with_context(|| format!("`{s}`: want zone=N with N in 0..=65535"))
}

/// `nicflow bench ARGS`: replace this process with `nicflow-bench ARGS`,
/// found next to this executable (how cargo and an install lay them out),
/// else on PATH. Keeping the experiments in their own program keeps the
/// switch's binary and crate free of testbeds and peers.
fn bench(args: &[std::ffi::OsString]) -> Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("nicflow-bench")))
        .filter(|p| p.is_file());
    let prog = sibling.unwrap_or_else(|| PathBuf::from("nicflow-bench"));
    let err = std::process::Command::new(&prog).args(args).exec();
    bail!(
        "running {}: {err} (build it with `cargo build --release -p nicflow-bench`)",
        prog.display()
    )
}
