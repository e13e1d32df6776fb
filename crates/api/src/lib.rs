//! nicflow-api: what the daemon and its clients agree on — the
//! configuration schema ([`config`]), the control protocol ([`proto`]), the
//! control socket's client ([`client`]) and the enums both sides name
//! ([`OffloadMode`], [`FailMode`]).
//!
//! Place in the system: no packet passes through this crate. It sits at the
//! bottom beside `nicflow-os`: the ports, the dataplane, the daemon, the
//! CNI plugin and the lab all read its types, and it reads none of theirs,
//! so a port can be told its configuration without importing the daemon.

pub mod client;
pub mod config;
pub mod proto;

/// A bridge's offload setting (`offload = "auto" | "tc" | "xdp" | "none"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffloadMode {
    /// The default: ports of type `auto` open as TC ports and run in the
    /// TC engine (interfaces keep TSO and checksum offload); AF_XDP ports
    /// (`type=afxdp`) run in the XDP engine.
    #[default]
    Auto,
    /// The TC engine only.
    Tc,
    /// The XDP engine only; ports of type `auto` open as AF_XDP ports.
    Xdp,
    /// Userspace only; ports of type `auto` open as AF_XDP ports.
    None,
}

impl OffloadMode {
    pub fn as_str(self) -> &'static str {
        match self {
            OffloadMode::Auto => "auto",
            OffloadMode::Tc => "tc",
            OffloadMode::Xdp => "xdp",
            OffloadMode::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<OffloadMode> {
        match s {
            "auto" => Some(OffloadMode::Auto),
            "tc" => Some(OffloadMode::Tc),
            "xdp" => Some(OffloadMode::Xdp),
            "none" => Some(OffloadMode::None),
            _ => None,
        }
    }

    /// Does a port of type `auto` open as a TC port under this mode?
    pub fn auto_ports_are_tc(self) -> bool {
        matches!(self, OffloadMode::Auto | OffloadMode::Tc)
    }
}

/// What a bridge does while no OpenFlow controller is connected (OVS's
/// `fail_mode`): `standalone` forwards as a learning switch, `secure` keeps
/// only the rules it has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    #[default]
    Standalone,
    Secure,
}

impl FailMode {
    pub fn parse(s: &str) -> Option<FailMode> {
        match s {
            "standalone" => Some(FailMode::Standalone),
            "secure" => Some(FailMode::Secure),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FailMode::Standalone => "standalone",
            FailMode::Secure => "secure",
        }
    }
}
