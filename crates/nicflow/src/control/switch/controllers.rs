//! Controllers and fail modes: `set-controller`, `del-controller`,
//! `get-controller`, `set-fail-mode`, `get-fail-mode`, and what a change of
//! either does to the rules (as Open vSwitch does it).

use super::{now, Switch, SwitchError, DEFAULT_FLOW};
use crate::control::openflow::{FailMode, Target, TargetError};
use crate::control::proto::Response;
use serde_json::json;
use std::fmt::Write as _;

impl Switch {
    /// `set-controller`: the listeners bind now (all or none); gaining the
    /// first active controller flushes the rules.
    pub(super) fn set_controller(
        &mut self,
        bridge: String,
        targets: Vec<String>,
    ) -> Result<Response, SwitchError> {
        self.bridge(&bridge)?;
        let parsed = parse_targets(&targets)?;
        let saved = self.checkpoint(&bridge);
        let texts: Vec<String> = parsed.iter().map(|t| t.to_string()).collect();
        let mode = self
            .config
            .bridge(&bridge)
            .and_then(|b| b.openflow.fail_mode)
            .unwrap_or_default();
        self.openflow.configure(&bridge, &parsed, mode, now())?;
        let mut had = false;
        if let Some(bc) = self.config.bridge_mut(&bridge) {
            had = has_active(&bc.openflow.controllers);
            bc.openflow.controllers = texts.clone();
        }
        if had != has_active(&texts) {
            self.flush_flows(&bridge)?;
        }
        self.persist_or_undo(&bridge, saved)?;
        Ok(Response::ok("", json!({ "controllers": texts })))
    }

    /// `del-controller`: losing the last active controller flushes the rules.
    pub(super) fn del_controller(&mut self, bridge: String) -> Result<Response, SwitchError> {
        self.bridge(&bridge)?;
        let saved = self.checkpoint(&bridge);
        let mut had = false;
        if let Some(bc) = self.config.bridge_mut(&bridge) {
            had = has_active(&bc.openflow.controllers);
            bc.openflow.controllers.clear();
        }
        self.of_configure(&bridge)?;
        if had {
            self.flush_flows(&bridge)?;
        }
        self.persist_or_undo(&bridge, saved)?;
        Ok(Response::ok("", json!(null)))
    }

    /// `get-controller`: each target with its connections and refusals.
    pub(super) fn get_controller(&mut self, bridge: String) -> Result<Response, SwitchError> {
        self.bridge(&bridge)?;
        let st = self.openflow.status(&bridge);
        let mut text = String::new();
        for t in &st {
            let _ = writeln!(text, "Controller \"{}\"", t.target);
            if let Some(why) = &t.last_refusal {
                let _ = writeln!(text, "    refused: {} (last: {why})", t.refused);
            }
            if t.connected > 0 {
                let _ = writeln!(
                    text,
                    "    is_connected: true ({} connection{}, role {})",
                    t.connected,
                    if t.connected == 1 { "" } else { "s" },
                    t.roles.join(",")
                );
            }
        }
        let dropped = self.openflow.async_dropped(&bridge);
        if dropped > 0 {
            let _ = writeln!(
                text,
                "asynchronous messages dropped (slow controllers): {dropped}"
            );
        }
        Ok(Response::ok(
            text,
            json!({ "controllers": st, "async_dropped": dropped }),
        ))
    }

    /// `set-fail-mode`: without controllers, a change flushes the rules.
    pub(super) fn set_fail_mode(
        &mut self,
        bridge: String,
        mode: String,
    ) -> Result<Response, SwitchError> {
        self.bridge(&bridge)?;
        let m = FailMode::parse(&mode).ok_or(SwitchError::BadFailMode(mode))?;
        let saved = self.checkpoint(&bridge);
        let mut flush = false;
        if let Some(bc) = self.config.bridge_mut(&bridge) {
            flush = bc.openflow.fail_mode.unwrap_or_default() != m
                && !has_active(&bc.openflow.controllers);
            bc.openflow.fail_mode = Some(m);
        }
        self.of_configure(&bridge)?;
        if flush {
            self.flush_flows(&bridge)?;
        }
        self.persist_or_undo(&bridge, saved)?;
        Ok(Response::ok("", json!({ "fail_mode": m.as_str() })))
    }

    /// `get-fail-mode`.
    pub(super) fn get_fail_mode(&mut self, bridge: String) -> Result<Response, SwitchError> {
        self.bridge(&bridge)?;
        let m = self
            .config
            .bridge(&bridge)
            .and_then(|b| b.openflow.fail_mode);
        Ok(Response::ok(
            m.map(|m| format!("{}\n", m.as_str())).unwrap_or_default(),
            json!({ "fail_mode": m.map(|m| m.as_str()) }),
        ))
    }

    /// What Open vSwitch does when a bridge gains its first (active)
    /// controller, loses its last one, or changes fail mode without one
    /// (checked against ovs-vswitchd 3.1): every rule goes, and a
    /// standalone bridge without controllers gets `priority=0,actions=normal`
    /// back. Groups stay.
    fn flush_flows(&mut self, bridge: &str) -> Result<(), SwitchError> {
        let (active, mode) = self
            .config
            .bridge(bridge)
            .map(|b| {
                (
                    has_active(&b.openflow.controllers),
                    b.openflow.fail_mode.unwrap_or_default(),
                )
            })
            .unwrap_or_default();
        let br = self.bridge(bridge)?;
        br.del_flows_str("")?;
        if !active && mode == FailMode::Standalone {
            br.add_flow_str(DEFAULT_FLOW, now())?;
        }
        Ok(())
    }

    /// Hand the bridge's configured targets and fail mode to the OpenFlow
    /// side.
    pub(super) fn of_configure(&mut self, bridge: &str) -> Result<(), SwitchError> {
        let bc = self
            .config
            .bridge(bridge)
            .ok_or_else(|| SwitchError::NoBridge(bridge.to_string()))?;
        let targets = parse_targets(&bc.openflow.controllers)?;
        let mode = bc.openflow.fail_mode.unwrap_or_default();
        Ok(self.openflow.configure(bridge, &targets, mode, now())?)
    }
}

/// A bridge's targets, parsed (the config keeps them as text).
pub(super) fn parse_targets(list: &[String]) -> Result<Vec<Target>, TargetError> {
    list.iter().map(|t| Target::parse(t)).collect()
}

/// Does the list name an active controller (`tcp:`, `unix:`)? Listeners
/// (`ptcp:`, `punix:`) are not controllers for the fail mode, as in OVS.
fn has_active(list: &[String]) -> bool {
    list.iter()
        .filter_map(|t| Target::parse(t).ok())
        .any(|t| !t.passive())
}
