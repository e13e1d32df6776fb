//! The datapath's own flows: `dump-dp-flows` (the megaflows the slow path
//! installed, with the engine that runs each and why one is not
//! offloaded).

use super::{now, Switch, SwitchError};
use crate::control::proto::Response;
use serde_json::json;
use std::fmt::Write as _;

impl Switch {
    /// `dump-dp-flows`: the datapath's megaflows, with the engine that runs each.
    pub(super) fn dump_dp_flows(&mut self, bridge: String) -> Result<Response, SwitchError> {
        let br = self.bridge(&bridge)?;
        br.sync_offload();
        let mut text = String::new();
        let mut data = Vec::new();
        for f in br.dump_dp_flows(now()) {
            let used = f
                .used
                .map(|u| format!("{:.3}s", u.as_secs_f64()))
                .unwrap_or_else(|| "never".into());
            let why = f
                .not_offloaded
                .map(|r| format!(", not_offloaded:{r}"))
                .unwrap_or_default();
            let _ = writeln!(
                text,
                "{}, packets:{}, bytes:{}, used:{}, engine:{}{}, actions:{}",
                f.matching, f.packets, f.bytes, used, f.engine, why, f.actions
            );
            data.push(json!({
                "match": f.matching,
                "actions": f.actions,
                "packets": f.packets,
                "bytes": f.bytes,
                "kernel_packets": f.kernel_packets,
                "kernel_bytes": f.kernel_bytes,
                "used_s": f.used.map(|u| u.as_secs_f64()),
                "engine": f.engine,
                "not_offloaded": f.not_offloaded,
            }));
        }
        Ok(Response::ok(text, json!(data)))
    }
}
