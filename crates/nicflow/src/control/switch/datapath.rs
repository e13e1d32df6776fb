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
        // P4 mode: decisions that were not cached run in the program for
        // every packet; one line per reason, with the runs it took.
        if let Some(p4) = br.p4() {
            for (reason, runs) in p4.slow_path_reasons() {
                let _ = writeln!(
                    text,
                    "slow_path(p4), packets:{runs}, engine:interpreter, not_offloaded:{reason}"
                );
                data.push(json!({
                    "slow_path": "p4",
                    "packets": runs,
                    "engine": "interpreter",
                    "not_offloaded": reason,
                }));
            }
        }
        Ok(Response::ok(text, json!(data)))
    }
}
