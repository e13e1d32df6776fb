//! nicflow: a software SmartNIC — an offloadable virtual switch.
//!
//! A frame's path through this crate: a [`port`] receives it in a batch; the
//! [`datapath`] (exact-match cache, then megaflow cache) finds its cached
//! decision or, on a miss, asks the slow path, [`ofproto`], which walks the
//! OpenFlow tables and returns a datapath flow to cache; the datapath's
//! executor applies the actions and hands the frame to the output ports. A
//! [`bridge`] wires ports, datapath and slow path together. The experiments
//! that measure it are the `nicflow-bench` crate.
//!
//! Whatever changes the host's network configuration (links, addresses,
//! routes, namespaces, sysctls, ethtool features) goes through [`os`],
//! the lowest module here, which speaks netlink to the kernel.
//!
//! Lower layers live in their own crates: `nicflow-packet` (header views,
//! checksums), `nicflow-flow` (flow keys), `nicflow-classifier` (tuple space
//! search), `nicflow-ofctl` (the rule language).

pub use nicflow_cni as cni;
pub use nicflow_dataplane::bridge;
pub mod control;
pub use nicflow_dataplane::datapath;
pub use nicflow_dataplane::nf;
pub use nicflow_dataplane::offload;
pub use nicflow_dataplane::ofproto;
pub use nicflow_lab::demo;
pub use nicflow_lab::lab;
pub use nicflow_lab::traffic;
pub use nicflow_os as os;
pub use nicflow_port as port;

pub use nicflow_dataplane::{Bridge, BridgeError, Datapath, DatapathConfig};
