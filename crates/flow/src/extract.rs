//! Flow key extraction: filled in once `nicflow-packet`'s parser lands.
use crate::key::FlowKey;

/// Placeholder signature; replaced by the real one-pass extractor.
pub fn extract(_frame: &[u8], in_port: u32, key: &mut FlowKey) {
    *key = FlowKey::default();
    key.in_port = in_port;
}
