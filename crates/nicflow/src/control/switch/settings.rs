//! Bridge settings: `set BRIDGE KEY=VALUE` for `offload` (see
//! [`super::offload`]), `protocols` and `flow_limit`, each written
//! before it is acknowledged; `ct_setup` and `ct_setup_nat`, not kept
//! (for experiments and tests).

use super::{Switch, SwitchError};
use crate::control::proto::Response;
use serde_json::json;

/// The versions `protocols=` may list (Open vSwitch's names).
const KNOWN_PROTOCOLS: [&str; 6] = [
    "OpenFlow10",
    "OpenFlow11",
    "OpenFlow12",
    "OpenFlow13",
    "OpenFlow14",
    "OpenFlow15",
];

/// `protocols=`: a comma list of OpenFlow versions that must include
/// OpenFlow13 or OpenFlow15 (the ones nicflow speaks; the others are kept
/// in the list but not spoken). Returns the list as written back
/// (trimmed, empty items dropped).
pub(super) fn check_protocols(v: &str) -> Result<String, SwitchError> {
    let list: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .collect();
    if let Some(bad) = list.iter().find(|x| !KNOWN_PROTOCOLS.contains(x)) {
        return Err(SwitchError::UnknownProtocol {
            list: v.to_string(),
            version: bad.to_string(),
        });
    }
    if !list.contains(&"OpenFlow13") && !list.contains(&"OpenFlow15") {
        return Err(SwitchError::WithoutOpenFlow13(v.to_string()));
    }
    Ok(list.join(","))
}

/// The wire versions nicflow speaks out of a `protocols=` list (empty:
/// no list, so every version).
pub(crate) fn protocol_versions(list: Option<&str>) -> Vec<u8> {
    use nicflow_openflow::msg::{OFP13_VERSION, OFP15_VERSION};
    let Some(list) = list else {
        return Vec::new();
    };
    list.split(',')
        .filter_map(|x| match x.trim() {
            "OpenFlow13" => Some(OFP13_VERSION),
            "OpenFlow15" => Some(OFP15_VERSION),
            _ => None,
        })
        .collect()
}

/// `flow_limit=`: a positive number of flows (OVS's
/// `other_config:flow-limit`).
pub(super) fn parse_flow_limit(value: &str) -> Result<usize, SwitchError> {
    value
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| SwitchError::BadFlowLimit(value.to_string()))
}

/// An on/off setting's value (`on`, `true`, `1` / `off`, `false`, `0`).
fn parse_on_off(key: &'static str, value: &str) -> Result<bool, SwitchError> {
    match value {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(SwitchError::BadOnOff {
            key,
            value: value.to_string(),
        }),
    }
}

impl Switch {
    /// `set BRIDGE KEY=VALUE`: one handler per key.
    pub(super) fn set(
        &mut self,
        bridge: String,
        key: String,
        value: String,
    ) -> Result<Response, SwitchError> {
        match key.as_str() {
            "offload" => self.set_offload(&bridge, &value),
            "protocols" => self.set_protocols(&bridge, &value),
            "flow_limit" => self.set_flow_limit(&bridge, &value),
            "ct_setup" => self.set_ct_setup(&bridge, &value),
            "ct_setup_nat" => self.set_ct_setup_nat(&bridge, &value),
            "ct_setup_bpf" => self.set_ct_setup_bpf(&bridge, &value),
            _ => Err(SwitchError::UnknownSetting(key)),
        }
    }

    /// `set BRIDGE ct_setup=on|off`: connection set-up in the kernel
    /// (`NICFLOW_CT_SETUP` gives the default, see docs/conntrack.md). Not
    /// kept in the config: for experiments and tests.
    fn set_ct_setup(&mut self, bridge: &str, value: &str) -> Result<Response, SwitchError> {
        let on = parse_on_off("ct_setup", value)?;
        self.bridge(bridge)?.set_ct_setup(on);
        Ok(Response::ok("", json!({ "ct_setup": on })))
    }

    /// `set BRIDGE ct_setup_nat=on|off`: set-up in the kernel of NATed
    /// connections (on by default: measured faster, see
    /// docs/conntrack.md). Not kept in the config: for experiments and
    /// tests.
    fn set_ct_setup_nat(&mut self, bridge: &str, value: &str) -> Result<Response, SwitchError> {
        let on = parse_on_off("ct_setup_nat", value)?;
        self.bridge(bridge)?.set_ct_setup_nat(on);
        Ok(Response::ok("", json!({ "ct_setup_nat": on })))
    }

    /// `set BRIDGE ct_setup_bpf=on|off`: set-up in the BPF program itself
    /// (templates; `NICFLOW_CT_SETUP_BPF` gives the default, see
    /// docs/conntrack.md). Not kept in the config: for experiments and
    /// tests.
    fn set_ct_setup_bpf(&mut self, bridge: &str, value: &str) -> Result<Response, SwitchError> {
        // `hold` (tests): on, with the program's reports left unread.
        if value == "hold" {
            let br = self.bridge(bridge)?;
            br.set_ct_setup_bpf(true);
            br.ct_offloads_mut().events_held = true;
            return Ok(Response::ok("", json!({ "ct_setup_bpf": "hold" })));
        }
        let on = parse_on_off("ct_setup_bpf", value)?;
        self.bridge(bridge)?.set_ct_setup_bpf(on);
        Ok(Response::ok("", json!({ "ct_setup_bpf": on })))
    }

    /// `set BRIDGE protocols=LIST`: kept in the config (and put back when
    /// the file cannot be written).
    fn set_protocols(&mut self, bridge: &str, value: &str) -> Result<Response, SwitchError> {
        let v = check_protocols(value)?;
        self.bridge(bridge)?;
        let mut old = None;
        if let Some(bc) = self.config.bridge_mut(bridge) {
            old = bc.openflow.protocols.replace(v.clone());
        }
        if let Err(e) = self.persist() {
            if let Some(bc) = self.config.bridge_mut(bridge) {
                bc.openflow.protocols = old;
            }
            return Err(e);
        }
        self.openflow
            .set_protocols(bridge, &protocol_versions(Some(&v)), super::now());
        Ok(Response::ok("", json!({ "protocols": v })))
    }

    /// `set BRIDGE flow_limit=N`: the datapath's flow limit, applied now
    /// (and put back when the file cannot be written).
    fn set_flow_limit(&mut self, bridge: &str, value: &str) -> Result<Response, SwitchError> {
        let n = parse_flow_limit(value)?;
        let br = self.bridge(bridge)?;
        let old_limit = br.datapath_mut().flow_limit();
        br.set_flow_limit(n);
        let mut old = None;
        if let Some(bc) = self.config.bridge_mut(bridge) {
            old = bc.flow_limit.replace(n);
        }
        if let Err(e) = self.persist() {
            if let Some(bc) = self.config.bridge_mut(bridge) {
                bc.flow_limit = old;
            }
            if let Some(br) = self.bridges.get_mut(bridge) {
                br.set_flow_limit(old_limit);
            }
            return Err(e);
        }
        Ok(Response::ok("", json!({ "flow_limit": n })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply texts `set` gives for bad values, word for word.
    #[test]
    fn bad_values_are_named_in_the_reply() {
        assert_eq!(
            check_protocols("OpenFlow13,OpenFlow16").unwrap_err().to_string(),
            "protocols=OpenFlow13,OpenFlow16: unknown version `OpenFlow16` (OpenFlow10..OpenFlow15)"
        );
        assert_eq!(
            check_protocols("OpenFlow10, OpenFlow11").unwrap_err().to_string(),
            "protocols=OpenFlow10, OpenFlow11: nicflow speaks OpenFlow13 and OpenFlow15; the list must include one"
        );
        assert_eq!(
            check_protocols(" OpenFlow13 ,,OpenFlow15").unwrap(),
            "OpenFlow13,OpenFlow15"
        );
        for bad in ["0", "-1", "many", ""] {
            assert_eq!(
                parse_flow_limit(bad).unwrap_err().to_string(),
                format!("flow_limit={bad}: expected a positive number of flows")
            );
        }
        assert_eq!(parse_flow_limit("200000").unwrap(), 200_000);
        for (v, on) in [("on", true), ("1", true), ("off", false), ("false", false)] {
            assert_eq!(parse_on_off("ct_setup", v).unwrap(), on);
        }
        assert_eq!(
            parse_on_off("ct_setup_nat", "bogus")
                .unwrap_err()
                .to_string(),
            "ct_setup_nat=bogus: expected on or off"
        );
    }
}
