//! ESP (placeholder, being written).
