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

/// A bridge's offload setting (`offload = "auto" | "tc" | "xdp" | "none" |
/// "profile:NAME"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    /// The TC engine emulating a SmartNIC (`profile:cx7|bf2|bf3|agilio`):
    /// it takes exactly the flows that NIC would hold, with its resource
    /// limits; the rest stay in userspace with the NIC's reason
    /// (docs/offload-plan.md).
    Profile(nicflow_hwprofile::Profile),
}

impl OffloadMode {
    pub fn as_str(self) -> &'static str {
        use nicflow_hwprofile::Profile as P;
        match self {
            OffloadMode::Auto => "auto",
            OffloadMode::Tc => "tc",
            OffloadMode::Xdp => "xdp",
            OffloadMode::None => "none",
            OffloadMode::Profile(P::Cx7) => "profile:cx7",
            OffloadMode::Profile(P::Bf2) => "profile:bf2",
            OffloadMode::Profile(P::Bf3) => "profile:bf3",
            OffloadMode::Profile(P::Agilio) => "profile:agilio",
        }
    }

    pub fn parse(s: &str) -> Option<OffloadMode> {
        match s {
            "auto" => Some(OffloadMode::Auto),
            "tc" => Some(OffloadMode::Tc),
            "xdp" => Some(OffloadMode::Xdp),
            "none" => Some(OffloadMode::None),
            _ => s
                .strip_prefix("profile:")
                .and_then(nicflow_hwprofile::Profile::parse)
                .map(OffloadMode::Profile),
        }
    }

    /// The emulated NIC, under `profile:NAME`.
    pub fn profile(self) -> Option<nicflow_hwprofile::Profile> {
        match self {
            OffloadMode::Profile(p) => Some(p),
            _ => None,
        }
    }

    /// The TC engine is the only one ports are given to (`tc`, and the
    /// profiles, which model a NIC reached through TC flower).
    pub fn tc_only(self) -> bool {
        matches!(self, OffloadMode::Tc | OffloadMode::Profile(_))
    }

    /// Does a port of type `auto` open as a TC port under this mode?
    pub fn auto_ports_are_tc(self) -> bool {
        matches!(
            self,
            OffloadMode::Auto | OffloadMode::Tc | OffloadMode::Profile(_)
        )
    }
}

impl serde::Serialize for OffloadMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for OffloadMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OffloadMode, D::Error> {
        let s = String::deserialize(d)?;
        OffloadMode::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown offload mode {s:?}: auto, tc, xdp, none, profile:cx7|bf2|bf3|agilio"
            ))
        })
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
