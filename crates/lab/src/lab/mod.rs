//! The namespace lab: real programs sending real traffic through nicflow.
//!
//! Everything else in this crate can be tested with in-memory and pcap
//! ports; the lab is where nicflow meets the Linux network stack. A
//! topology file describes hosts (network namespaces running ordinary
//! programs — `ping`, `iperf3`, a web server), switches (`nicflow daemon`
//! processes) and veth links between them. `nicflow lab up FILE` builds it,
//! `nicflow lab exec [--topology FILE] HOST -- CMD...` runs a program on a
//! host, and `nicflow lab down FILE` removes every trace of it. The lab is
//! the ground for the integration tests, the demos and the benchmarks that
//! compare nicflow with kernel peers.
//!
//! # Topology file
//!
//! ```toml
//! name = "two_hosts"          # a-z 0-9 _, at most 24; prefixes everything
//!
//! [[host]]
//! name = "h1"                 # namespace nf-two_hosts-h1
//! sysctl = { "net.ipv4.conf.all.rp_filter" = 0 }   # optional, net.* only
//! routes = ["198.19.0.0/24 via 198.18.0.254"]      # optional
//!
//! [[host]]
//! name = "h2"
//!
//! [[switch]]
//! name = "sw1"
//! namespace = "own"           # "own" (default: nf-two_hosts-sw1) or "root"
//! port_type = "afxdp"         # default; or "afpacket"
//! port_options = {}           # given to every port of this switch
//! offload = "xdp"             # default (where it loads); or "none"
//! dpu = false                 # true: DPU mode, control socket @nicflow-<lab>-<switch>
//!                             #   abstract in the switch's namespace (host cannot reach it)
//! offload_options = { max_flows = 65536 }   # XDP map sizes (max_masks, max_ports), counters = "off"
//! [[switch.bridge]]           # optional: default one bridge "br0"
//! name = "br0"
//! flows = ["priority=0,actions=normal"]   # the default when omitted
//!
//! [[link]]
//! a = "h1:eth0"               # HOST:IFACE, or SWITCH[/BRIDGE]:PORT
//! b = "sw1:p1"
//! addresses = ["198.18.0.1/24", "2001:db8::1/64"]  # of the host end
//! mtu = 1500                  # optional, both ends
//! offload = true              # default: host end keeps its tx offloads
//! gro = true                  # default: on when the switch runs XDP offload
//!                             # (NAPI on the host end: XDP redirects arrive)
//!
//! [[link]]
//! a = "h2:eth0"
//! b = "sw1:p2"
//! addresses = ["198.18.0.2/24", "2001:db8::2/64"]
//! ```
//!
//! A link joins any two endpoints: host to switch, host to host (then give
//! `a_addresses` and `b_addresses`), switch to switch. Host ends are created
//! inside the host's namespace under the name given; switch ends get
//! generated names (`nf` + hash of the lab name + link index + `a`/`b`, see
//! [`names`]) in the switch's namespace, and become the switch's ports:
//! port name as written, interface the veth end. IPv6 addresses are added
//! with `nodad`. Every address, route and gateway must lie in
//! 198.18.0.0/15 or 2001:db8::/32; anything else is rejected when the file
//! is read, as are unknown nodes, duplicate names and over-long interface
//! names.
//!
//! # What `up` leaves behind, and how `down` finds it
//!
//! State lives in `/run/nicflow/lab/<lab>/` (root overridable with
//! `NICFLOW_LAB_DIR`): `state.json` (every namespace, veth and daemon,
//! written before each is created), and per switch `<switch>.toml` (daemon
//! config), `<switch>.sock` (control socket: `nicflow --socket
//! /run/nicflow/lab/<lab>/<switch>.sock show`) and `<switch>.log`. Each
//! daemon is a detached process (`setsid`, output to its log), started
//! inside its namespace for `own` switches (as `ip netns exec` would, see
//! [`nicflow_os::netns::command`]). Namespaces, veths, addresses, routes and
//! sysctls are made over netlink by the OS layer, [`nicflow_os`]. `down` stops daemons
//! (SIGTERM, SIGKILL after 3 s) and whatever else still runs inside the
//! lab's namespaces (an `iperf3 -s -D` started with `lab exec`), deletes the
//! namespaces and any root-side veth ends, and removes the state directory;
//! it works without the state file too, by names.
//!
//! # Library use
//!
//! ```no_run
//! use nicflow_lab::lab::{self, LabOptions, Topology};
//! let topo = Topology::load("examples/lab/two-hosts.toml".as_ref())?;
//! let opts = LabOptions::from_env()?;
//! println!("{}", lab::up(&topo, &opts)?);
//! let out = lab::exec_output(Some(&topo), "h1", &["ping", "-c1", "198.18.0.2"], &opts)?;
//! assert!(out.status.success());
//! lab::down(&topo.name, &opts)?;
//! # Ok::<(), nicflow_lab::lab::LabError>(())
//! ```

pub mod lifecycle;
pub mod names;
pub mod state;
pub mod sys;
pub mod topology;

pub use lifecycle::{
    daemon_config, down, dpu_socket, exec, exec_output, labs, node_namespace, switch_socket, up,
    DownReport, UpReport,
};
pub use state::LabState;
pub use topology::{Endpoint, Host, IfAddr, Link, SwitchNamespace, SwitchSpec, Topology};

use std::path::PathBuf;
use std::time::Duration;

/// Where lab state lives unless `NICFLOW_LAB_DIR` says otherwise.
pub const DEFAULT_STATE_ROOT: &str = "/run/nicflow/lab";

/// How the lab runs things.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// The `nicflow` binary to run as each switch's daemon.
    pub nicflow_bin: PathBuf,
    /// Parent of every lab's state directory.
    pub state_root: PathBuf,
    /// How long a daemon may take to answer on its socket.
    pub ready_timeout: Duration,
    /// How long `down` waits after SIGTERM before SIGKILL.
    pub stop_timeout: Duration,
}

impl LabOptions {
    /// Options for `nicflow_bin`, other fields at their defaults (state root
    /// from `NICFLOW_LAB_DIR` or [`DEFAULT_STATE_ROOT`]).
    pub fn with_binary(nicflow_bin: PathBuf) -> LabOptions {
        LabOptions {
            nicflow_bin,
            state_root: std::env::var_os("NICFLOW_LAB_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_ROOT)),
            ready_timeout: Duration::from_secs(5),
            stop_timeout: Duration::from_secs(3),
        }
    }

    /// The daemon binary is `NICFLOW_BIN` if set, else the running
    /// executable (the `nicflow` CLI itself).
    pub fn from_env() -> Result<LabOptions, LabError> {
        let bin = match std::env::var_os("NICFLOW_BIN") {
            Some(b) => PathBuf::from(b),
            None => std::env::current_exe().map_err(|source| LabError::Binary {
                path: "current executable".into(),
                source,
            })?,
        };
        Ok(LabOptions::with_binary(bin))
    }

    /// The state directory of lab `lab`.
    pub fn lab_dir(&self, lab: &str) -> PathBuf {
        self.state_root.join(lab)
    }
}

/// Everything that can go wrong in the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("reading topology {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("topology {path}: {message}")]
    Parse { path: String, message: String },
    #[error("topology {path}: {}", errors.join("; "))]
    Invalid { path: String, errors: Vec<String> },
    #[error("lab `{lab}` is already up ({what}); run `nicflow lab down` first")]
    AlreadyUp { lab: String, what: String },
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command {
        cmd: String,
        status: String,
        stderr: String,
    },
    #[error("running `{cmd}`: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("lab state {path}: {source}")]
    State {
        path: String,
        source: std::io::Error,
    },
    #[error("nicflow binary {path}: {source} (set NICFLOW_BIN)")]
    Binary {
        path: String,
        source: std::io::Error,
    },
    /// The daemon exited, or its socket did not answer in time.
    #[error("switch {switch}: daemon not ready: {why}; {log} ends with:\n{tail}")]
    DaemonNotReady {
        switch: String,
        why: String,
        log: String,
        tail: String,
    },
    #[error("no host or own-namespace switch `{node}` (labs: {labs})")]
    UnknownNode { node: String, labs: String },
    #[error("`{node}` is in several labs that are up ({labs}); pass --topology")]
    Ambiguous { node: String, labs: String },
    #[error("lab is not up: {what}")]
    NotUp { what: String },
    #[error("no command to run")]
    NoCommand,
    #[error("lab `{lab}`: still present after cleanup: {what}")]
    Leftovers { lab: String, what: String },
    /// A netlink request, namespace or sysctl operation ([`nicflow_os`]),
    /// with the kernel's errno.
    #[error(transparent)]
    Os(#[from] nicflow_os::OsError),
    #[error("{error}; cleaning up after it also failed: {cleanup}")]
    UpFailed {
        error: Box<LabError>,
        cleanup: Box<LabError>,
    },
}
