//! IPsec for nicflow's tunnel ports.
//!
//! Place in a packet's path: a VXLAN or Geneve tunnel port with `ipsec=...`
//! hands each encapsulated frame's outer IP payload to an outbound
//! [`esp`] SA before it leaves on the underlay, and the underlay hands
//! every ESP packet (IP protocol 50, or UDP 4500 per RFC 3948) to the
//! inbound SA its SPI names before the tunnel header is even looked at: a
//! packet that fails any check is counted and dropped and never reaches a
//! bridge. [`ike`] negotiates those SAs with a peer (IKEv2 with pre-shared
//! keys), so nobody keys by hand.

pub mod esp;
pub mod ike;
pub mod replay;
