//! Flow keys: what the data plane knows about a packet once it has been parsed.
//!
//! A frame arriving on a port is parsed once (`nicflow-packet`), and that one pass
//! fills a [`FlowKey`]: a fixed-layout record of every field a rule may match.
//! Everything downstream works on keys, never on raw bytes: the classifier
//! (slow path tables) and the megaflow cache (fast path) hash and compare keys
//! under a [`FlowMask`]; a [`Match`] is a key plus the mask saying which bits
//! matter. [`Field`] names the matchable and settable fields the way
//! `ovs-ofctl` does, and [`Action`] is what a rule does to a packet.
//!
//! The key is a plain array of `u64` words in memory ([`FlowKey::words`]), so
//! masking and hashing are word loops with no per-field branching — the same
//! reason Open vSwitch keeps `struct flow` flat.

pub mod action;
pub mod extract;
pub mod field;
pub mod key;

pub use action::{
    ofp, Action, ControllerOpts, CtAction, CtMove, CtNat, CtZone, LearnPart, LearnSpec, LearnSrc,
    NatKind, PortRef,
};
pub use extract::extract;
pub use field::{Field, FieldError, Prereq};
pub use key::{FlowKey, FlowMask, Match, FLOW_WORDS};
pub use nicflow_packet::parse::{Layout, ParseError};
