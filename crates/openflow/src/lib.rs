//! OpenFlow 1.3 and 1.5 on the wire: a pure codec (no sockets) between
//! controller bytes and nicflow's rule model.
//!
//! Versions: [`msg::decode`] reads either version (the header says which)
//! and [`msg::encode_as`] writes the negotiated one ([`msg::hello`]); 1.5
//! adds bundles ([`msg::bundle`]), and the Nicira messages OVN uses
//! ([`msg::nx`]) are decoded in both. docs/openflow.md says what 1.5
//! support covers and what it does not.
//!
//! Where it sits: a controller (or `ovs-ofctl -O OpenFlow13`) connects to
//! the daemon's OpenFlow listener and sends messages. The listener feeds the
//! received bytes to [`msg::decode`], which frames one message at a time;
//! a `FLOW_MOD`'s OXM match becomes the same [`nicflow_flow::Match`] the
//! `ovs-ofctl` text parser builds ([`oxm`]), and its instructions become
//! the [`nicflow_flow::Action`] list the slow path's tables run
//! ([`action::convert`]). From there a rule goes where every rule goes: the
//! classifier, then the megaflow cache via translation. In the other
//! direction the daemon builds replies and asynchronous messages — a
//! `PACKET_IN` when the slow path hands a packet to the controller, flow
//! statistics from the tables, `FLOW_REMOVED` on expiry — as [`msg`]
//! values and appends them to the socket with [`msg::encode`]. Anything
//! that cannot be decoded is reported as the exact OpenFlow error to send
//! back ([`error`]).
//!
//! Modules, each with one job: [`wire`] (big-endian reading without panics),
//! [`error`] (OpenFlow error types and codes), [`oxm`] (match fields),
//! [`action`] (instructions, actions, Nicira extensions, and their meaning
//! for nicflow), [`msg`] (messages and framing, with [`msg::hello`] for
//! version negotiation).

pub mod action;
pub mod error;
pub mod msg;
pub mod oxm;
pub mod wire;

pub use error::{DecodeError, Malformed, OfpError};
pub use msg::{decode, encode, Decoded, Message};
