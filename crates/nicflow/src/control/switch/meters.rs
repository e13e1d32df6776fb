//! Meters: `add-meter`, `mod-meter`, `del-meters`, `dump-meters`,
//! `meter-stats`.

use super::{now, Switch, SwitchError};
use crate::control::proto::Response;
use serde_json::json;
use std::fmt::Write as _;

/// `add-meter` and `mod-meter` take one meter: several lines are refused
/// (before the bridge is looked at).
fn one_meter(bridge: &str, meter: &str) -> Result<(), SwitchError> {
    if meter.trim().contains('\n') {
        return Err(SwitchError::OneMeterPerRequest {
            bridge: bridge.to_string(),
            meter: meter.to_string(),
        });
    }
    Ok(())
}

impl Switch {
    /// `add-meter`: one meter.
    pub(super) fn add_meter(
        &mut self,
        bridge: String,
        meter: String,
    ) -> Result<Response, SwitchError> {
        one_meter(&bridge, &meter)?;
        self.change_rules(&bridge, |br| {
            br.add_meter_str(&meter, false, now())
                .map_err(SwitchError::from)
        })?;
        Ok(Response::ok("", json!(null)))
    }

    /// `mod-meter`: one meter, replaced.
    pub(super) fn mod_meter(
        &mut self,
        bridge: String,
        meter: String,
    ) -> Result<Response, SwitchError> {
        one_meter(&bridge, &meter)?;
        self.change_rules(&bridge, |br| {
            br.add_meter_str(&meter, true, now())
                .map_err(SwitchError::from)
        })?;
        Ok(Response::ok("", json!(null)))
    }

    /// `del-meters`: the meters `filter` selects and the rules that use them.
    pub(super) fn del_meters(
        &mut self,
        bridge: String,
        filter: Option<String>,
    ) -> Result<Response, SwitchError> {
        let id = nicflow_ofctl::meter::parse_meter_selector(filter.as_deref().unwrap_or(""))?;
        let (meters, rules) = self.change_rules(&bridge, |br| Ok(br.del_meters(id, now())))?;
        Ok(Response::ok(
            "",
            json!({ "deleted": meters, "rules_deleted": rules }),
        ))
    }

    /// `dump-meters`.
    pub(super) fn dump_meters(&mut self, bridge: String) -> Result<Response, SwitchError> {
        let meters = self.bridge(&bridge)?.dump_meters();
        let mut text = String::new();
        for m in &meters {
            let _ = writeln!(text, "{}", nicflow_ofctl::meter::format_meter_config(m));
        }
        let lines: Vec<String> = meters
            .iter()
            .map(nicflow_ofctl::meter::format_meter_spec)
            .collect();
        Ok(Response::ok(text, json!(lines)))
    }

    /// `meter-stats`.
    pub(super) fn meter_stats(
        &mut self,
        bridge: String,
        filter: Option<String>,
    ) -> Result<Response, SwitchError> {
        let id = nicflow_ofctl::meter::parse_meter_selector(filter.as_deref().unwrap_or(""))?;
        let stats = self.bridge(&bridge)?.meter_stats(id, now());
        let text: String = stats.iter().map(|m| m.format()).collect();
        let data: Vec<_> = stats
            .iter()
            .map(|m| {
                json!({
                    "meter_id": m.meter_id,
                    "flow_count": m.flow_count,
                    "packet_in_count": m.packets_in,
                    "byte_in_count": m.bytes_in,
                    "duration_s": m.duration.as_secs_f64(),
                    "bands": m.bands.iter().map(|(p, b)| json!({"packet_count": p, "byte_count": b})).collect::<Vec<_>>(),
                })
            })
            .collect();
        Ok(Response::ok(text, json!(data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_meter_per_request() {
        assert!(one_meter("br0", " meter=1,kbps,bands=type=drop,rate=10 \n").is_ok());
        assert_eq!(
            one_meter("br1", "meter=1,kbps\nmeter=2,kbps")
                .unwrap_err()
                .to_string(),
            "one meter per request on bridge br1: `meter=1,kbps\nmeter=2,kbps`"
        );
    }
}
