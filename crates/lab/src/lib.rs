//! nicflow-lab: the ground nicflow is tried on — namespace topologies
//! ([`lab`]), the traffic generator and sink ([`traffic`]) and the demo
//! ([`demo`]).
//!
//! Place in the packet's path: outside it, at both ends. The lab builds
//! hosts (network namespaces) and veth links around switches that run as
//! `nicflow daemon` processes and talks to them over the control socket
//! (`nicflow-api`); the traffic tools write and read frames on real
//! interfaces through the same ports the switch uses (`nicflow-port`); the
//! demo also runs an in-process bridge over capture files
//! (`nicflow-dataplane`). Nothing here is linked into the daemon's
//! forwarding, and nothing below imports it.

pub mod demo;
pub mod lab;
pub mod ovn;
pub mod traffic;
