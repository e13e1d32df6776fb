//! Why a request to the switch failed.
//!
//! One variant per reason, each carrying what the reply names. The
//! `Display` texts are the control protocol's error replies, word for word
//! (the CLI prints them and tests match them): [`Switch::handle`] sends
//! `to_string()`. A failed request changes nothing, whatever the variant.
//!
//! [`Switch::handle`]: super::Switch::handle

use super::offload::OffloadFailure;
use crate::bridge::BridgeError;
use crate::control::config::ConfigError;
use crate::control::openflow::{OpenFlowError, TargetError};
use crate::control::vf::VfError;

#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error("no bridge `{0}`")]
    NoBridge(String),
    /// A P4 program, entry or request was refused (its message names the
    /// file:line, table, key or value).
    #[error("{0}")]
    P4(String),
    #[error("unknown profile `{0}`: cx7, bf2, bf3 or agilio")]
    UnknownProfile(String),
    #[error("bridge `{0}` already exists")]
    BridgeExists(String),
    #[error("bad bridge name `{0}`")]
    BadBridgeName(String),
    /// The config file could not be written, so the change was undone.
    #[error("the change was not made: {0}")]
    NotWritten(#[source] ConfigError),
    /// A bridge refused the change (rule syntax, unknown port, meter...).
    #[error(transparent)]
    Bridge(#[from] BridgeError),
    /// The port factory could not open the port (its message: the
    /// factory's error is text).
    #[error("{0}")]
    OpenPort(String),
    #[error(
        "unknown port type `{0}` (auto, tc, afxdp, afpacket, tap, internal, vxlan, geneve, uplink)"
    )]
    UnknownPortType(String),
    #[error("bridge {bridge} already has a port `{port}`")]
    PortExists { bridge: String, port: String },
    #[error("port {port} is the representor of VF {vf}; use `nicflow del-vf {bridge} {vf}`")]
    PortIsRepresentor {
        bridge: String,
        port: String,
        vf: String,
    },
    #[error("bridge {bridge} already has an uplink `{name}` (netdev {iface}); a bridge has at most one (`nicflow del-port {bridge} {name}` first)")]
    SecondUplink {
        bridge: String,
        name: String,
        iface: String,
    },
    #[error("interface `{iface}` is the underlay of tunnel port {port} of bridge {bridge}; it cannot also be an uplink")]
    UplinkIsUnderlay {
        iface: String,
        port: String,
        bridge: String,
    },
    #[error("interface `{iface}` is already attached as port {port} of bridge {bridge}")]
    UplinkIsPort {
        iface: String,
        port: String,
        bridge: String,
    },
    #[error("interface `{iface}` is the representor of VF {vf} of bridge {bridge}; it cannot be an uplink")]
    UplinkIsRepresentor {
        iface: String,
        vf: String,
        bridge: String,
    },
    /// `user` as [`Config::iface_user`](crate::control::config::Config::iface_user)
    /// names it (`port p1 of bridge br0`).
    #[error(
        "interface `{iface}` is already attached as {user}; it cannot also be a tunnel's underlay"
    )]
    UnderlayInUse { iface: String, user: String },
    #[error("interface `{iface}` is already attached as {user}; an interface is attached once (`nicflow del-port` it there first)")]
    IfaceInUse { iface: String, user: String },
    #[error(transparent)]
    Vf(#[from] VfError),
    #[error("VF {vf}: {source}")]
    VfPair {
        vf: String,
        #[source]
        source: VfError,
    },
    #[error("representor {representor}: {reason}")]
    OpenRepresentor { representor: String, reason: String },
    #[error("bridge {bridge} has {} VFs named `{name}` (in different namespaces); name one by its representor: {}", representors.len(), representors.join(", "))]
    AmbiguousVf {
        bridge: String,
        name: String,
        representors: Vec<String>,
    },
    #[error("bridge {bridge} has no VF `{name}`")]
    NoVf { bridge: String, name: String },
    #[error("namespace `{namespace}` is gone; VF not attached (kept in the config; `nicflow del-vf {bridge} {vf}` removes it)")]
    NamespaceGone {
        bridge: String,
        namespace: String,
        vf: String,
    },
    #[error("one group per request on bridge {bridge}: `{group}`")]
    OneGroupPerRequest { bridge: String, group: String },
    #[error("one meter per request on bridge {bridge}: `{meter}`")]
    OneMeterPerRequest { bridge: String, meter: String },
    /// A meter selector (`meter=N`, `meter=all`) that does not parse.
    #[error(transparent)]
    Rule(#[from] nicflow_ofctl::RuleError),
    /// A `flush-conntrack` tuple that does not parse (the parser's message).
    #[error("{0}")]
    FlushTuple(String),
    #[error(transparent)]
    Offload(#[from] OffloadFailure),
    #[error("offload={0}: expected auto, tc, xdp or none")]
    BadOffloadMode(String),
    #[error("protocols={list}: unknown version `{version}` (OpenFlow10..OpenFlow15)")]
    UnknownProtocol { list: String, version: String },
    #[error("protocols={0}: nicflow speaks OpenFlow13 and OpenFlow15; the list must include one")]
    WithoutOpenFlow13(String),
    #[error("flow_limit={0}: expected a positive number of flows")]
    BadFlowLimit(String),
    #[error("{key}={value}: expected on or off")]
    BadOnOff { key: &'static str, value: String },
    #[error(
        "unknown bridge setting `{0}` (offload, protocols, flow_limit, ct_setup, ct_setup_nat, ct_setup_bpf)"
    )]
    UnknownSetting(String),
    #[error("fail mode `{0}`: expected standalone or secure")]
    BadFailMode(String),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    OpenFlow(#[from] OpenFlowError),
    /// At startup: a configured meter the bridge refused.
    #[error("bridge {bridge} meter `{meter}`: {source}")]
    LoadMeter {
        bridge: String,
        meter: String,
        #[source]
        source: BridgeError,
    },
    /// At startup: the configured groups the bridge refused.
    #[error("bridge {bridge} groups: {source}")]
    LoadGroups {
        bridge: String,
        #[source]
        source: BridgeError,
    },
    /// At startup: the configured rules the bridge refused.
    #[error("bridge {bridge} flows: {source}")]
    LoadFlows {
        bridge: String,
        #[source]
        source: BridgeError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Variants whose text is assembled from their fields reply in the
    /// words the CLI printed before the errors were typed.
    #[test]
    fn replies_are_assembled_from_the_fields() {
        let e = SwitchError::AmbiguousVf {
            bridge: "br0".into(),
            name: "eth0".into(),
            representors: vec!["br0pf0vf0".into(), "br0pf0vf1".into()],
        };
        assert_eq!(
            e.to_string(),
            "bridge br0 has 2 VFs named `eth0` (in different namespaces); name one by its representor: br0pf0vf0, br0pf0vf1"
        );
        let e = SwitchError::SecondUplink {
            bridge: "br0".into(),
            name: "p0".into(),
            iface: "eth0".into(),
        };
        assert_eq!(
            e.to_string(),
            "bridge br0 already has an uplink `p0` (netdev eth0); a bridge has at most one (`nicflow del-port br0 p0` first)"
        );
        let e = SwitchError::PortIsRepresentor {
            bridge: "br0".into(),
            port: "br0pf0vf1".into(),
            vf: "vf1".into(),
        };
        assert_eq!(
            e.to_string(),
            "port br0pf0vf1 is the representor of VF vf1; use `nicflow del-vf br0 vf1`"
        );
        // Wrapped errors keep their own words.
        let e: SwitchError = BridgeError::NoSuchPort("p9".into()).into();
        assert_eq!(e.to_string(), "no port `p9`");
        let e: SwitchError = VfError::NoFreeIndex("br0".into()).into();
        assert!(
            e.to_string().starts_with("bridge br0 has no free VF index"),
            "{e}"
        );
    }
}
