//! The control protocol: one JSON request per line on the unix socket, one
//! JSON response per line back.
//!
//! Every CLI verb is one [`Request`]. Responses carry both a human text
//! rendering (what the CLI prints) and structured data (what `--json`
//! prints), so scripts never have to parse text.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    AddBr {
        bridge: String,
    },
    DelBr {
        bridge: String,
    },
    AddPort {
        bridge: String,
        iface: String,
        #[serde(rename = "type")]
        kind: String,
        name: Option<String>,
        #[serde(default)]
        options: BTreeMap<String, String>,
    },
    DelPort {
        bridge: String,
        name: String,
    },
    Show,
    AddFlow {
        bridge: String,
        flow: String,
    },
    /// The text of a flows file (read by the CLI), applied all or nothing.
    AddFlows {
        bridge: String,
        text: String,
    },
    DelFlows {
        bridge: String,
        filter: Option<String>,
    },
    DumpFlows {
        bridge: String,
    },
    DumpDpFlows {
        bridge: String,
    },
    /// `add-group BR GROUP` (`ovs-ofctl add-group` syntax).
    AddGroup {
        bridge: String,
        group: String,
    },
    /// The text of a groups file, one group a line, all or nothing.
    AddGroups {
        bridge: String,
        text: String,
    },
    /// `mod-group BR GROUP`: replace an existing group's type and buckets.
    ModGroup {
        bridge: String,
        group: String,
    },
    /// `del-groups BR [group_id=N]`: the group(s) and the rules using them.
    DelGroups {
        bridge: String,
        #[serde(default)]
        filter: Option<String>,
    },
    DumpGroups {
        bridge: String,
    },
    DumpGroupStats {
        bridge: String,
    },
    /// `add-meter BR METER` (`ovs-ofctl add-meter` syntax).
    AddMeter {
        bridge: String,
        meter: String,
    },
    /// `mod-meter BR METER`: new flags and bands for an existing meter.
    ModMeter {
        bridge: String,
        meter: String,
    },
    /// `del-meters BR [meter=N]`: the meter(s) and the rules using them.
    DelMeters {
        bridge: String,
        #[serde(default)]
        filter: Option<String>,
    },
    DumpMeters {
        bridge: String,
    },
    /// `meter-stats BR [meter=N]`.
    MeterStats {
        bridge: String,
        #[serde(default)]
        filter: Option<String>,
    },
    /// Tracked connections, as `ovs-appctl dpctl/dump-conntrack` prints
    /// them; `verbose` is `-m`, `stats` is `-s`.
    DumpConntrack {
        bridge: String,
        #[serde(default)]
        zone: Option<u16>,
        #[serde(default)]
        verbose: bool,
        #[serde(default)]
        stats: bool,
    },
    /// Remove tracked connections: all, a zone's, or those whose original
    /// tuple matches `filter` (OVS's `ct_nw_src=..,ct_tp_dst=..` syntax).
    FlushConntrack {
        bridge: String,
        #[serde(default)]
        zone: Option<u16>,
        #[serde(default)]
        filter: Option<String>,
    },
    ConntrackStats {
        bridge: String,
    },
    Stats,
    /// A VF in `namespace` with its representor on `bridge` (see
    /// `control::vf`).
    AddVf {
        bridge: String,
        namespace: String,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        mac: Option<String>,
        #[serde(default)]
        ips: Vec<String>,
        #[serde(default)]
        rep_type: Option<String>,
    },
    /// Remove a VF (by VF name or representor name) and its veth pair.
    DelVf {
        bridge: String,
        name: String,
    },
    /// `nicflow set BR KEY=VALUE`: bridge settings (`offload=xdp|none`).
    Set {
        bridge: String,
        key: String,
        value: String,
    },
    /// `set-controller BR TARGET...`: replaces the bridge's controllers
    /// (OVS target syntax: tcp:, ptcp:, ssl:, pssl:, unix:, punix:).
    SetController {
        bridge: String,
        targets: Vec<String>,
    },
    DelController {
        bridge: String,
    },
    GetController {
        bridge: String,
    },
    /// `set-fail-mode BR standalone|secure`.
    SetFailMode {
        bridge: String,
        mode: String,
    },
    GetFailMode {
        bridge: String,
    },
    /// `set-ssl KEY CERT CACERT`: the TLS files of `ssl:`/`pssl:` targets
    /// (paths only: the key's content never travels or is logged).
    SetSsl {
        private_key: std::path::PathBuf,
        certificate: std::path::PathBuf,
        ca_cert: std::path::PathBuf,
    },
    GetSsl,
    DelSsl,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    pub fn ok(text: impl Into<String>, data: serde_json::Value) -> Self {
        Response {
            ok: true,
            text: text.into(),
            data,
            error: None,
        }
    }

    pub fn err(e: impl std::fmt::Display) -> Self {
        Response {
            ok: false,
            error: Some(e.to_string()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format() {
        let r = Request::AddFlow {
            bridge: "br0".into(),
            flow: "actions=drop".into(),
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(
            s,
            r#"{"cmd":"add-flow","bridge":"br0","flow":"actions=drop"}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"nope"}"#).is_err());
        let v: Request =
            serde_json::from_str(r#"{"cmd":"add-vf","bridge":"br0","namespace":"c1"}"#).unwrap();
        assert_eq!(
            v,
            Request::AddVf {
                bridge: "br0".into(),
                namespace: "c1".into(),
                name: None,
                mac: None,
                ips: vec![],
                rep_type: None,
            }
        );
    }
}
