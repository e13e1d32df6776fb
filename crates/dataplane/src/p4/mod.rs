//! P4 programs as a bridge's slow path (placeholder: filled next).

pub mod megaflow;
