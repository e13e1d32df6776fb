//! IKEv2 (placeholder, being written).
