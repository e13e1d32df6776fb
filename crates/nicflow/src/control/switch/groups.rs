//! Groups: `add-group`, `add-groups`, `mod-group`, `del-groups`,
//! `dump-groups`, `dump-group-stats`.

use super::{now, Switch, SwitchError};
use crate::control::proto::Response;
use serde_json::json;
use std::fmt::Write as _;

/// `add-group` and `mod-group` take one group: several lines are refused
/// (before the bridge is looked at), `add-groups` takes those.
fn one_group(bridge: &str, group: &str) -> Result<(), SwitchError> {
    if group.trim().contains('\n') {
        return Err(SwitchError::OneGroupPerRequest {
            bridge: bridge.to_string(),
            group: group.to_string(),
        });
    }
    Ok(())
}

impl Switch {
    /// `add-group`: one group.
    pub(super) fn add_group(
        &mut self,
        bridge: String,
        group: String,
    ) -> Result<Response, SwitchError> {
        one_group(&bridge, &group)?;
        self.change_rules(&bridge, |br| {
            br.add_groups_str(&group, false, now())
                .map_err(SwitchError::from)
        })?;
        Ok(Response::ok("", json!(null)))
    }

    /// `mod-group`: one group, replaced.
    pub(super) fn mod_group(
        &mut self,
        bridge: String,
        group: String,
    ) -> Result<Response, SwitchError> {
        one_group(&bridge, &group)?;
        self.change_rules(&bridge, |br| {
            br.add_groups_str(&group, true, now())
                .map_err(SwitchError::from)
        })?;
        Ok(Response::ok("", json!(null)))
    }

    /// `add-groups`: several groups, all or none.
    pub(super) fn add_groups(
        &mut self,
        bridge: String,
        text: String,
    ) -> Result<Response, SwitchError> {
        let n = self.change_rules(&bridge, |br| {
            br.add_groups_str(&text, false, now())
                .map_err(SwitchError::from)
        })?;
        Ok(Response::ok("", json!({ "added": n })))
    }

    /// `del-groups`: the groups matching `filter` and the rules that use them.
    pub(super) fn del_groups(
        &mut self,
        bridge: String,
        filter: Option<String>,
    ) -> Result<Response, SwitchError> {
        let (groups, rules) = self.change_rules(&bridge, |br| {
            br.del_groups_str(filter.as_deref().unwrap_or(""))
                .map_err(SwitchError::from)
        })?;
        Ok(Response::ok(
            "",
            json!({ "deleted": groups, "rules_deleted": rules }),
        ))
    }

    /// `dump-groups`.
    pub(super) fn dump_groups(&mut self, bridge: String) -> Result<Response, SwitchError> {
        let lines = self.bridge(&bridge)?.dump_groups_text();
        let mut text = String::new();
        for l in &lines {
            let _ = writeln!(text, " {l}");
        }
        Ok(Response::ok(text, json!(lines)))
    }

    /// `dump-group-stats`.
    pub(super) fn dump_group_stats(&mut self, bridge: String) -> Result<Response, SwitchError> {
        let stats = self.bridge(&bridge)?.group_stats(now());
        let mut text = String::new();
        let mut data = Vec::new();
        for g in &stats {
            let _ = write!(
                text,
                " group_id={},duration={:.3}s,ref_count={},packet_count={},byte_count={}",
                g.group_id,
                g.duration.as_secs_f64(),
                g.ref_count,
                g.packets,
                g.bytes
            );
            for (i, (p, b)) in g.buckets.iter().enumerate() {
                let _ = write!(text, ",bucket{i}:packet_count={p},byte_count={b}");
            }
            text.push('\n');
            data.push(json!({
                "group_id": g.group_id,
                "duration_s": g.duration.as_secs_f64(),
                "ref_count": g.ref_count,
                "packet_count": g.packets,
                "byte_count": g.bytes,
                "buckets": g.buckets.iter().map(|(p, b)| json!({
                    "packet_count": p, "byte_count": b,
                })).collect::<Vec<_>>(),
            }));
        }
        Ok(Response::ok(text, json!(data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_group_per_request() {
        assert!(one_group("br0", "group_id=1,type=all,bucket=actions=drop\n").is_ok());
        assert_eq!(
            one_group("br0", "group_id=1,type=all\ngroup_id=2,type=all")
                .unwrap_err()
                .to_string(),
            "one group per request on bridge br0: `group_id=1,type=all\ngroup_id=2,type=all`"
        );
    }
}
