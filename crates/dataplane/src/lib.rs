//! nicflow-dataplane: what happens to a frame between the port that
//! received it and the ports that send it.
//!
//! A frame's path through this crate: a port (`nicflow-port`) hands it in a
//! batch to a [`bridge`]; the [`datapath`] (exact-match cache, then
//! megaflow cache) finds its cached decision or, on a miss, asks the slow
//! path, [`ofproto`], which walks the OpenFlow tables and returns a
//! datapath flow to cache; the datapath's executor applies the actions and
//! hands the frame to the output ports. The [`offload`] manager sits above
//! the datapath: it copies the flows it can into a kernel engine (the same
//! eBPF datapath at TC ingress or XDP, `bpf/`), where later frames of the
//! flow never reach a port's socket, and says why the others stay in
//! userspace. [`nf`] holds the network functions' control-plane views.
//!
//! Dependencies point down: this crate reads ports, the configuration
//! enums and the lower crates (packet, flow, classifier, ofctl,
//! conntrack), never the daemon, the CLI, the CNI plugin or the lab.

pub mod bridge;
pub mod datapath;
pub mod nf;
pub mod offload;
pub mod ofproto;
pub mod p4;

pub use bridge::{Bridge, BridgeError};
pub use datapath::{Datapath, DatapathConfig};
