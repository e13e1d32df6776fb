//! nicflow: a software SmartNIC — an offloadable virtual switch. This
//! crate is the daemon and the CLI ([`control`]): the poll loop, the
//! switch that owns the bridges, the OpenFlow listeners and connections,
//! VFs, and the `nicflow` binary's verbs.
//!
//! A frame's path, crate by crate (the arrows of the dependency graph point
//! down; the compiler keeps them):
//!
//! ```text
//! nicflow (daemon, CLI)      nicflow-cni      nicflow-lab (lab, traffic, demo)
//!        |                        |                 |
//!        +--------- nicflow-dataplane: bridge -> datapath (EMC, megaflows,
//!        |            executor) -> ofproto (slow path); offload (kernel
//!        |            engines at TC/XDP, above the datapath)
//!        +--------- nicflow-port: afxdp, afpacket, tc, tap, tunnel, ipsec,
//!        |            pcap, mem; the factory; pins
//!        +--------- nicflow-api (config, protocol, client)  nicflow-os (netlink)
//! ```
//!
//! A [`port`] receives a frame in a batch; the [`bridge`] hands it to the
//! [`datapath`], whose caches find its decision or ask the slow path,
//! [`ofproto`]; the executor applies the actions and hands the frame to
//! the output ports. Below them: `nicflow-packet` (header views,
//! checksums), `nicflow-flow` (flow keys), `nicflow-classifier` (tuple
//! space search), `nicflow-ofctl` (the rule language), `nicflow-conntrack`,
//! `nicflow-openflow` (the wire codec), `nicflow-ipsec`. The experiments
//! are the `nicflow-bench` crate.
//!
//! The lower crates are re-exported under their old module names
//! (`nicflow::port`, `nicflow::datapath`, ...) for the tests and the
//! benchmarks; nothing below this crate can import it.

pub use nicflow_cni as cni;
pub use nicflow_dataplane::bridge;
pub mod control;
pub mod p4cli;
pub use nicflow_dataplane::datapath;
pub use nicflow_dataplane::nf;
pub use nicflow_dataplane::offload;
pub use nicflow_dataplane::ofproto;
pub use nicflow_lab::demo;
pub use nicflow_lab::lab;
pub use nicflow_lab::ovn;
pub use nicflow_lab::traffic;
pub use nicflow_os as os;
pub use nicflow_port as port;
pub mod vswitchd;

pub use nicflow_dataplane::{Bridge, BridgeError, Datapath, DatapathConfig};
