//! The control plane: the daemon, its configuration file, and the protocol
//! the CLI speaks to it.
//!
//! `nicflow daemon` owns the bridges and their real ports ([`switch`]), runs
//! the forwarding poll loop ([`daemon`]), and applies [`proto::Request`]s
//! that CLI verbs send over a unix socket. The [`config`] file is the
//! persistent form of the same state.

pub mod clients;
pub use nicflow_api::config;
pub mod daemon;
pub mod openflow;
mod peer;
pub mod splb;
pub use nicflow_api::proto;
pub mod switch;
pub mod vf;
