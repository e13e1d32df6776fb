//! Anti-replay window (placeholder, being written).
