//! Rules: `add-flow`, `add-flows`, `del-flows`, `dump-flows`. Every change
//! goes through [`Switch::change_rules`]: a rule the config file cannot
//! record is not kept.

use super::{now, Switch, SwitchError};
use crate::control::proto::Response;
use serde_json::json;
use std::fmt::Write as _;

impl Switch {
    /// `add-flow`.
    pub(super) fn add_flow(
        &mut self,
        bridge: String,
        flow: String,
    ) -> Result<Response, SwitchError> {
        self.change_rules(&bridge, |br| Ok(br.add_flow_str(&flow, now())?))?;
        Ok(Response::ok("", json!(null)))
    }

    /// `add-flows`: several rules, all or none.
    pub(super) fn add_flows(
        &mut self,
        bridge: String,
        text: String,
    ) -> Result<Response, SwitchError> {
        let n = self.change_rules(&bridge, |br| Ok(br.add_flows_str(&text, now())?))?;
        Ok(Response::ok("", json!({ "added": n })))
    }

    /// `del-flows`: the rules matching `filter` (every rule without one).
    pub(super) fn del_flows(
        &mut self,
        bridge: String,
        filter: Option<String>,
    ) -> Result<Response, SwitchError> {
        let n = self.change_rules(&bridge, |br| {
            Ok(br.del_flows_str(filter.as_deref().unwrap_or(""))?)
        })?;
        Ok(Response::ok("", json!({ "deleted": n })))
    }

    /// `dump-flows`: as `ovs-ofctl dump-flows` prints them.
    pub(super) fn dump_flows(&mut self, bridge: String) -> Result<Response, SwitchError> {
        let br = self.bridge(&bridge)?;
        let names = br.port_map().clone();
        let dumps = br.dump_flows(now());
        let mut text = String::new();
        let mut data = Vec::new();
        for d in &dumps {
            let flow = nicflow_ofctl::format_flow(&d.spec, &names);
            // The table is said once, among the counters, as
            // ovs-ofctl dump-flows does.
            let shown = nicflow_ofctl::FlowSpec {
                table: 0,
                ..d.spec.clone()
            };
            let _ = writeln!(
                text,
                " duration={:.3}s, table={}, n_packets={}, n_bytes={}, idle_age={}, {}",
                d.duration.as_secs_f64(),
                d.spec.table,
                d.n_packets,
                d.n_bytes,
                d.idle_age.as_secs(),
                nicflow_ofctl::format_flow(&shown, &names)
            );
            data.push(json!({
                "table": d.spec.table,
                "priority": d.spec.priority,
                "cookie": d.spec.cookie,
                "flow": flow,
                "n_packets": d.n_packets,
                "n_bytes": d.n_bytes,
                "duration_s": d.duration.as_secs_f64(),
                "idle_age_s": d.idle_age.as_secs(),
            }));
        }
        Ok(Response::ok(text, json!(data)))
    }
}
