//! Bridges: `add-br` and `del-br`.

use super::{apply_offload, now, Switch, SwitchError, DEFAULT_FLOW};
use crate::bridge::Bridge;
use crate::control::config::BridgeConfig;
use crate::control::proto::Response;
use crate::control::vf;
use crate::datapath::DatapathConfig;
use crate::offload::OffloadMode;
use serde_json::json;
use std::collections::BTreeMap;

impl Switch {
    /// `add-br`: a bridge with the default NORMAL rule, written before it is acknowledged.
    pub(super) fn add_br(&mut self, bridge: String) -> Result<Response, SwitchError> {
        if self.bridges.contains_key(&bridge) {
            return Err(SwitchError::BridgeExists(bridge));
        }
        if bridge.is_empty() || bridge.len() > 64 {
            return Err(SwitchError::BadBridgeName(bridge));
        }
        let mut br = Bridge::new(&bridge, DatapathConfig::default());
        br.add_flow_str(DEFAULT_FLOW, now())?;
        let _ = apply_offload(
            &mut br,
            OffloadMode::default(),
            &BTreeMap::new(),
            self.config_path.as_deref(),
        );
        self.bridges.insert(bridge.clone(), br);
        self.config.bridges.push(BridgeConfig {
            name: bridge.clone(),
            flows: Vec::new(),
            ports: Vec::new(),
            offload: None,
            offload_options: BTreeMap::new(),
            vfs: Vec::new(),
            openflow: Default::default(),
            flow_limit: None,
        });
        if let Err(e) = self.persist() {
            // Not saved: the bridge goes again.
            self.bridges.remove(&bridge);
            self.config.bridges.retain(|b| b.name != bridge);
            return Err(e);
        }
        Ok(Response::ok("", json!(null)))
    }

    /// `del-br`: written first, then the bridge, its VF pairs and controllers go.
    pub(super) fn del_br(&mut self, bridge: String) -> Result<Response, SwitchError> {
        if !self.bridges.contains_key(&bridge) {
            return Err(SwitchError::NoBridge(bridge));
        }
        // Written first: a deletion the file cannot record is not made.
        let at = self.config.bridges.iter().position(|b| b.name == bridge);
        let bc = at.map(|i| self.config.bridges.remove(i));
        if let Err(e) = self.persist() {
            if let (Some(i), Some(bc)) = (at, bc) {
                self.config.bridges.insert(i, bc);
            }
            return Err(e);
        }
        // The ports are closed (dropped); now their veth pairs go.
        self.bridges.remove(&bridge);
        for vfc in bc.iter().flat_map(|b| &b.vfs) {
            vf::delete_pair(&vfc.representor);
            self.rep_kinds.remove(&vfc.representor);
        }
        self.uplink_kinds.remove(&bridge);
        self.openflow.remove(&bridge);
        self.detached.retain(|(b, _), _| *b != bridge);
        Ok(Response::ok("", json!(null)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Switch;
    use crate::control::config::Config;
    use crate::control::proto::Request;

    /// A refused `add-br` or `del-br` replies with its reason and changes
    /// nothing.
    #[test]
    fn bridge_requests_reply_with_their_reasons() {
        let cfg = Config::parse("[[bridge]]\nname='br0'\noffload='none'\n").unwrap();
        let mut sw = Switch::new(cfg, None).unwrap();
        let before = sw.config.clone();
        let mut err = |req| sw.handle(req).error.unwrap_or_default();
        assert_eq!(
            err(Request::AddBr { bridge: "".into() }),
            "bad bridge name ``"
        );
        let long = "b".repeat(65);
        assert_eq!(
            err(Request::AddBr {
                bridge: long.clone()
            }),
            format!("bad bridge name `{long}`")
        );
        assert_eq!(
            err(Request::AddBr {
                bridge: "br0".into()
            }),
            "bridge `br0` already exists"
        );
        assert_eq!(
            err(Request::DelBr {
                bridge: "br9".into()
            }),
            "no bridge `br9`"
        );
        assert_eq!(sw.config, before);
        assert_eq!(sw.bridges().count(), 1);
    }
}
