//! The daemon's configuration file (TOML): bridges, their ports, their rules.
//!
//! The file is both the startup configuration and the daemon's persistent
//! state: every change made through the CLI is written back with
//! [`Config::save`] (write a temporary file, fsync, rename), so a restart
//! brings back the same switch and a crash mid-write never leaves a torn
//! file.
//!
//! ```toml
//! [[bridge]]
//! name = "br0"
//! flows = ["priority=0 actions=NORMAL"]  # groups too: "group_id=1,type=all,bucket=..."
//! offload = "xdp"                      # or "none"; absent = xdp where it loads
//! offload_options = { max_flows = "65536", max_masks = "16" }
//!
//! [[bridge.port]]
//! name = "p1"
//! iface = "veth1"
//! type = "afpacket"
//! options = { promisc = "true" }
//!
//! [[bridge.port]]                      # the bridge's uplink (PF/physical port):
//! name = "p0"                          # opened like `afxdp`, at most one per bridge
//! iface = "eth1"
//! type = "uplink"
//!
//! [[bridge.vf]]                        # `nicflow add-vf`: see control::vf
//! name = "vf0"                         # the interface in the namespace
//! index = 0
//! namespace = "c1"                     # an `ip netns` name
//! mac = "02:8c:23:1e:00:00"
//! ips = ["198.18.40.1/24"]
//! representor = "br0pf0vf0"            # the daemon-side end, a bridge port
//! rep_type = "afxdp"                   # or "afpacket"
//! ```
//!
//! A bridge's VFs are [`BridgeConfig::vfs`]; a file without `[[bridge.vf]]`
//! entries loads with none, and a bridge without VFs is written without them.
//! A bridge has at most one port of type `uplink` ([`BridgeConfig::uplink`]);
//! a file with two is refused by [`Config::parse`], naming both.

use super::proto::PortOptions;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The rule every new bridge starts with, as in Open vSwitch.
pub const DEFAULT_FLOW: &str = "priority=0,actions=normal";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default, rename = "bridge")]
    pub bridges: Vec<BridgeConfig>,
    /// TLS files of `ssl:`/`pssl:` controllers (`[ssl]`, `nicflow set-ssl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl: Option<SslFiles>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    pub name: String,
    /// Rules in canonical `ovs-ofctl` text, port names by name. The
    /// bridge's meters and groups are kept here too, first, as `meter=...`
    /// lines in `add-meter` form and `group_id=...` lines in `ovs-ofctl
    /// dump-groups` form (no rule starts with either), so the rules that
    /// use them load after them ([`split_groups`]).
    #[serde(default)]
    pub flows: Vec<String>,
    #[serde(default, rename = "port")]
    pub ports: Vec<PortConfig>,
    /// `xdp` (the default, where the kernel loads the program) or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<crate::OffloadMode>,
    /// XDP engine map sizes: `max_flows`, `max_masks`, `max_ports`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub offload_options: BTreeMap<String, String>,
    /// The bridge's VFs (`[[bridge.vf]]`, `nicflow add-vf`), in index order.
    #[serde(default, rename = "vf", skip_serializing_if = "Vec::is_empty")]
    pub vfs: Vec<VfConfig>,
    /// Controllers, fail mode and OpenFlow versions (`[bridge.openflow]`,
    /// `nicflow set-controller`, `set-fail-mode`, `set BR protocols=`).
    #[serde(default, skip_serializing_if = "OpenFlowConfig::is_empty")]
    pub openflow: OpenFlowConfig,
    /// Most datapath flows cached (`nicflow set BR flow_limit=N`, OVS's
    /// `other_config:flow-limit`); absent: `datapath::DEFAULT_FLOW_LIMIT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_limit: Option<usize>,
}

/// A bridge's OpenFlow settings (see `control::openflow`).
///
/// ```toml
/// [bridge.openflow]
/// controllers = ["ptcp:6653:127.0.0.1", "tcp:10.0.0.1"]
/// fail_mode = "secure"          # absent: standalone
/// protocols = "OpenFlow13"      # absent: OpenFlow13
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenFlowConfig {
    /// Targets in Open vSwitch's syntax, as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controllers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_mode: Option<crate::FailMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocols: Option<String>,
}

impl OpenFlowConfig {
    pub fn is_empty(&self) -> bool {
        self == &OpenFlowConfig::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortType {
    /// The default of `add-port`: a TC port when the bridge's offload is
    /// `auto` or `tc`, else an AF_XDP port (with its AF_PACKET fallback).
    Auto,
    /// A TC port (`port::tc`): the interface keeps its offloads, the TC
    /// engine runs on it, misses arrive through an upcall veth.
    Tc,
    Afxdp,
    Afpacket,
    Tap,
    Internal,
    /// A VXLAN tunnel port (no interface of its own: `underlay=IFACE`).
    Vxlan,
    /// A Geneve tunnel port.
    Geneve,
    /// A patch port (`options:peer=NAME`): joined in memory to the patch
    /// port NAME on another bridge, no interface of its own.
    Patch,
    /// The bridge's uplink (PF/physical port, flavour `physical` in `show`):
    /// opened like [`PortType::Afxdp`] (with its AF_PACKET fallback), at
    /// most one per bridge.
    Uplink,
}

impl PortType {
    pub fn as_str(self) -> &'static str {
        match self {
            PortType::Auto => "auto",
            PortType::Tc => "tc",
            PortType::Afxdp => "afxdp",
            PortType::Afpacket => "afpacket",
            PortType::Tap => "tap",
            PortType::Internal => "internal",
            PortType::Vxlan => "vxlan",
            PortType::Geneve => "geneve",
            PortType::Uplink => "uplink",
            PortType::Patch => "patch",
        }
    }

    pub fn parse(s: &str) -> Option<PortType> {
        Some(match s {
            "auto" => PortType::Auto,
            "tc" => PortType::Tc,
            "afxdp" => PortType::Afxdp,
            "afpacket" => PortType::Afpacket,
            "tap" => PortType::Tap,
            "internal" => PortType::Internal,
            "vxlan" => PortType::Vxlan,
            "geneve" => PortType::Geneve,
            "uplink" => PortType::Uplink,
            "patch" => PortType::Patch,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// The port's name on the bridge (rules use it).
    pub name: String,
    /// The Linux interface it attaches to.
    pub iface: String,
    #[serde(rename = "type")]
    pub kind: PortType,
    /// Secret values (ESP keys, PSKs) are [`super::proto::Secret`]s: see
    /// [`PortOptions`]. A file that holds any is kept at mode 0600.
    #[serde(default)]
    pub options: PortOptions,
}

/// A VF and its representor (`[[bridge.vf]]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VfConfig {
    /// The VF's interface name inside `namespace` (unique per bridge and namespace).
    pub name: String,
    pub index: u32,
    pub namespace: String,
    pub mac: String,
    #[serde(default)]
    pub ips: Vec<String>,
    /// The daemon-side veth end; also the bridge port's name.
    pub representor: String,
    #[serde(default = "auto")]
    pub rep_type: PortType,
}

/// Is this line of [`BridgeConfig::flows`] a group (`group_id=...`)?
pub fn is_group_line(line: &str) -> bool {
    line.trim_start().starts_with("group_id=")
}

/// Is this line of [`BridgeConfig::flows`] a meter (`meter=...`)?
pub fn is_meter_line(line: &str) -> bool {
    line.trim_start().starts_with("meter=")
}

/// [`BridgeConfig::flows`] split into (meters, one each; groups and rules,
/// one per line).
pub fn split_groups(lines: &[String]) -> (Vec<String>, String, String) {
    let (meters, rest): (Vec<&String>, Vec<&String>) = lines.iter().partition(|l| is_meter_line(l));
    let (groups, rules): (Vec<&str>, Vec<&str>) = rest
        .into_iter()
        .map(String::as_str)
        .partition(|l| is_group_line(l));
    (
        meters.into_iter().cloned().collect(),
        groups.join("\n"),
        rules.join("\n"),
    )
}

impl BridgeConfig {
    /// The mode a port of type `auto` (and the uplink, and a tunnel's
    /// `auto` underlay) is opened for: the bridge's offload mode. Under
    /// `auto` that is a TC port, tunnels included (the TC engine
    /// encapsulates and decapsulates), so one engine serves the whole
    /// overlay path.
    pub fn port_mode(&self) -> crate::OffloadMode {
        self.offload.unwrap_or_default()
    }

    /// The bridge's uplink port (`type = "uplink"`), if it has one.
    pub fn uplink(&self) -> Option<&PortConfig> {
        self.ports.iter().find(|p| p.kind == PortType::Uplink)
    }

    /// (interface, who uses it) of every port with an interface of its own
    /// (all but tunnels) and every VF representor.
    fn iface_users(&self) -> impl Iterator<Item = (&str, String)> + '_ {
        let ports = self
            .ports
            .iter()
            .filter(|p| !matches!(p.kind, PortType::Vxlan | PortType::Geneve))
            .map(|p| {
                (
                    p.iface.as_str(),
                    format!("port {} of bridge {}", p.name, self.name),
                )
            });
        let reps = self.vfs.iter().map(|v| {
            (
                v.representor.as_str(),
                format!("the representor of VF {} of bridge {}", v.name, self.name),
            )
        });
        ports.chain(reps)
    }

    /// (underlay, `the underlay of tunnel port T of bridge B`) of every
    /// tunnel port.
    fn underlays(&self) -> impl Iterator<Item = (&str, String)> + '_ {
        self.ports
            .iter()
            .filter(|p| matches!(p.kind, PortType::Vxlan | PortType::Geneve))
            .filter_map(|p| {
                let u = p.options.get("underlay")?;
                Some((
                    u.as_str(),
                    format!(
                        "the underlay of tunnel port {} of bridge {}",
                        p.name, self.name
                    ),
                ))
            })
    }

    /// More than one uplink is an error naming them.
    pub fn check_uplinks(&self) -> Result<(), SchemaError> {
        let ups: Vec<&str> = self
            .ports
            .iter()
            .filter(|p| p.kind == PortType::Uplink)
            .map(|p| p.name.as_str())
            .collect();
        if ups.len() > 1 {
            return Err(SchemaError::SecondUplink {
                bridge: self.name.clone(),
                ports: ups.iter().map(|p| p.to_string()).collect(),
            });
        }
        Ok(())
    }
}

fn auto() -> PortType {
    PortType::Auto
}

impl VfConfig {
    /// The bridge port backed by the representor.
    pub fn port_config(&self) -> PortConfig {
        PortConfig {
            name: self.representor.clone(),
            iface: self.representor.clone(),
            kind: self.rep_type,
            options: PortOptions::new(),
        }
    }
}

/// Why a configuration text is refused. A syntax error gives the line and
/// column and toml's message, never the offending line itself: it may hold
/// a key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// A toml error without a position.
    #[error("{0}")]
    Toml(String),
    #[error("bridge {bridge}: more than one uplink port ({}); a bridge has at most one", ports.join(", "))]
    SecondUplink { bridge: String, ports: Vec<String> },
    #[error("bridge `{0}` is configured twice (bridge names are unique)")]
    DuplicateBridge(String),
    #[error(
        "bridge {bridge}: port `{port}` is configured twice (port names are unique per bridge)"
    )]
    DuplicatePort { bridge: String, port: String },
    /// `first` and `second` as [`Config::iface_user`] names them.
    #[error("interface `{iface}` is attached twice: as {first} and as {second}")]
    DuplicateIface {
        iface: String,
        first: String,
        second: String,
    },
    #[error("interface `{iface}` is {tunnel} and also attached as {user}")]
    UnderlayAttached {
        iface: String,
        tunnel: String,
        user: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: SchemaError,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl Config {
    /// Load a config file; a missing file is an empty configuration.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => {
                return Err(ConfigError::Read {
                    path: path.display().to_string(),
                    source: e,
                })
            }
        };
        let c = Config::parse(&text).map_err(|source| ConfigError::Parse {
            path: path.display().to_string(),
            source,
        })?;
        c.keep_private(path);
        Ok(c)
    }

    /// Does any port keep a secret (ESP key, PSK) in this configuration?
    pub fn has_secrets(&self) -> bool {
        self.bridges
            .iter()
            .flat_map(|b| &b.ports)
            .any(|p| p.options.keys().any(|k| super::proto::is_secret_option(k)))
    }

    /// A file written by hand may be readable by others while it holds
    /// keys: make it owner-only (what [`Config::save`] writes) and say so.
    fn keep_private(&self, path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        if !self.has_secrets() {
            return;
        }
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            match std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
                Ok(()) => tracing::warn!(
                    "{}: holds IPsec keys and was mode {mode:o}: now 0600",
                    path.display()
                ),
                Err(e) => tracing::warn!(
                    "{}: holds IPsec keys and is mode {mode:o}, could not make it 0600: {e}",
                    path.display()
                ),
            }
        }
    }

    /// Errors give the line and column and toml's message, never the
    /// offending line itself: it may be a key's.
    pub fn parse(text: &str) -> Result<Config, SchemaError> {
        let c: Config = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => {
                let before = text.get(..span.start).unwrap_or(text);
                let line = before.matches('\n').count() + 1;
                let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                SchemaError::Syntax {
                    line,
                    column: col,
                    message: e.message().trim_end().to_string(),
                }
            }
            None => SchemaError::Toml(e.message().trim_end().to_string()),
        })?;
        for b in &c.bridges {
            b.check_uplinks()?;
        }
        c.check_unique()?;
        Ok(c)
    }

    /// Nothing is configured twice: a bridge name, a port name within its
    /// bridge (VF representors are ports too), an interface (two ports on
    /// one interface steal each other's traffic and delete each other's
    /// upcall veth), or an interface that is both a port and a tunnel's
    /// underlay. Tunnel ports may share an underlay (they share its socket).
    pub fn check_unique(&self) -> Result<(), SchemaError> {
        let mut bridges = std::collections::BTreeSet::new();
        let mut ifaces: BTreeMap<&str, String> = BTreeMap::new();
        for b in &self.bridges {
            if !bridges.insert(b.name.as_str()) {
                return Err(SchemaError::DuplicateBridge(b.name.clone()));
            }
            let mut names = std::collections::BTreeSet::new();
            let ports = b.ports.iter().map(|p| p.name.as_str());
            for n in ports.chain(b.vfs.iter().map(|v| v.representor.as_str())) {
                if !names.insert(n) {
                    return Err(SchemaError::DuplicatePort {
                        bridge: b.name.clone(),
                        port: n.to_string(),
                    });
                }
            }
            for (iface, user) in b.iface_users() {
                if let Some(first) = ifaces.insert(iface, user.clone()) {
                    return Err(SchemaError::DuplicateIface {
                        iface: iface.to_string(),
                        first,
                        second: user,
                    });
                }
            }
        }
        for b in &self.bridges {
            for (underlay, tunnel) in b.underlays() {
                if let Some(user) = ifaces.get(underlay) {
                    return Err(SchemaError::UnderlayAttached {
                        iface: underlay.to_string(),
                        tunnel,
                        user: user.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// What uses interface `iface` (as [`Config::check_unique`] describes
    /// it: `port p1 of bridge br0`, ...), if anything: a port or VF
    /// representor, or with `underlays` also a tunnel's underlay.
    pub fn iface_user(&self, iface: &str, underlays: bool) -> Option<String> {
        self.bridges.iter().find_map(|b| {
            b.iface_users()
                .find(|(i, _)| *i == iface)
                .or_else(|| {
                    b.underlays()
                        .filter(|_| underlays)
                        .find(|(i, _)| *i == iface)
                })
                .map(|(_, user)| user)
        })
    }

    /// `iface` is the interface of an `internal` port of some bridge: a
    /// tunnel may sit on it (OVS's `br-phy` layout), through its Linux side.
    pub fn is_internal_iface(&self, iface: &str) -> bool {
        self.bridges.iter().any(|b| {
            b.ports
                .iter()
                .any(|p| p.kind == PortType::Internal && p.iface == iface)
        })
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Write atomically: a temporary file next to the target, fsync, rename.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let err = |source| ConfigError::Write {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(err)?;
            }
        }
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        // Owner-only: tunnel ports keep ESP keys and pre-shared keys here.
        let f = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(err)?
        };
        let written = (|| {
            let mut f = f;
            f.write_all(self.to_toml().as_bytes())?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, path)
        })();
        if let Err(e) = written {
            // A full disk must not leave a truncated temporary file behind.
            let _ = std::fs::remove_file(&tmp);
            return Err(err(e));
        }
        // The rename itself is durable once the directory is synced.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    pub fn bridge(&self, name: &str) -> Option<&BridgeConfig> {
        self.bridges.iter().find(|b| b.name == name)
    }

    pub fn bridge_mut(&mut self, name: &str) -> Option<&mut BridgeConfig> {
        self.bridges.iter_mut().find(|b| b.name == name)
    }
}

/// Where the daemon's TLS identity and CA are (`nicflow set-ssl`; the
/// config file's `[ssl]` section).
///
/// ```toml
/// [ssl]
/// private_key = "/etc/nicflow/sc-privkey.pem"   # mode 0600 (or 0640)
/// certificate = "/etc/nicflow/sc-cert.pem"
/// ca_cert = "/etc/nicflow/cacert.pem"
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SslFiles {
    pub private_key: PathBuf,
    pub certificate: PathBuf,
    pub ca_cert: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_atomic_save() {
        let mut c = Config::default();
        c.bridges.push(BridgeConfig {
            name: "br0".into(),
            flows: vec!["priority=0 actions=NORMAL".into()],
            ports: vec![PortConfig {
                name: "p1".into(),
                iface: "veth1".into(),
                kind: PortType::Afpacket,
                options: [("promisc", "true")].into_iter().collect(),
            }],
            offload: Some(crate::OffloadMode::None),
            offload_options: [("max_flows".to_string(), "1024".to_string())].into(),
            vfs: Vec::new(),
            openflow: OpenFlowConfig {
                controllers: vec!["ptcp:6653:127.0.0.1".into()],
                fail_mode: Some(crate::FailMode::Secure),
                protocols: None,
            },
            flow_limit: Some(5000),
        });
        let text = c.to_toml();
        assert_eq!(Config::parse(&text).unwrap(), c);
        let dir = std::env::temp_dir().join(format!("nicflow-cfg-{}", std::process::id()));
        let path = dir.join("nicflow.toml");
        c.save(&path).unwrap();
        assert_eq!(Config::load(&path).unwrap(), c);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn vfs_round_trip_and_old_files_load() {
        let old = "[[bridge]]\nname = 'br0'\nflows = ['priority=0 actions=NORMAL']\n";
        let mut c = Config::parse(old).unwrap();
        assert_eq!(c.bridges.len(), 1);
        assert!(c.bridges[0].vfs.is_empty());
        assert!(!c.to_toml().contains("vf"));
        let vf = VfConfig {
            name: "vf0".into(),
            index: 0,
            namespace: "c1".into(),
            mac: "02:00:00:00:00:01".into(),
            ips: vec!["198.18.40.1/24".into(), "2001:db8::1/64".into()],
            representor: "br0pf0vf0".into(),
            rep_type: PortType::Afpacket,
        };
        c.bridges[0].vfs.push(vf);
        let text = c.to_toml();
        assert!(text.contains("[[bridge.vf]]"), "{text}");
        assert_eq!(Config::parse(&text).unwrap(), c);
        // rep_type defaults to auto; unknown keys are refused.
        // Ports of type auto open as TC ports, next to tunnels too.
        use crate::OffloadMode;
        let mut b = Config::parse(
            "[[bridge]]\nname='b'\n[[bridge.port]]\nname='p'\niface='p'\ntype='auto'\n",
        )
        .unwrap()
        .bridges
        .remove(0);
        assert_eq!(b.port_mode(), OffloadMode::Auto);
        b.ports.push(PortConfig {
            name: "vx".into(),
            iface: String::new(),
            kind: PortType::Vxlan,
            options: Default::default(),
        });
        assert_eq!(b.port_mode(), OffloadMode::Auto);
        b.offload = Some(OffloadMode::Xdp);
        assert_eq!(b.port_mode(), OffloadMode::Xdp);
        b.offload = Some(OffloadMode::Tc);
        assert_eq!(b.port_mode(), OffloadMode::Tc);
        let v = Config::parse(
            "[[bridge]]\nname='b'\n[[bridge.vf]]\nname='v'\nindex=1\nnamespace='n'\nmac='02:00:00:00:00:02'\nrepresentor='bpf0vf1'\n",
        )
        .unwrap();
        assert_eq!(v.bridges[0].vfs[0].rep_type, PortType::Auto);
        assert!(Config::parse("[[bridge]]\nname='b'\n[[bridge.vf]]\nname='v'\nbogus=1\n").is_err());
    }

    #[test]
    fn uplink_ports_parse_round_trip_and_at_most_one() {
        let text = "[[bridge]]\nname='br0'\n[[bridge.port]]\nname='p0'\niface='eth1'\ntype='uplink'\noptions={mode='generic'}\n[[bridge.port]]\nname='p1'\niface='veth1'\ntype='afxdp'\n";
        let c = Config::parse(text).unwrap();
        let b = &c.bridges[0];
        let up = b.uplink().unwrap();
        assert_eq!((up.name.as_str(), up.iface.as_str()), ("p0", "eth1"));
        assert_eq!(up.kind, PortType::Uplink);
        assert_eq!(up.options.get("mode").unwrap(), "generic");
        assert_eq!(b.ports[1].kind, PortType::Afxdp);
        let out = c.to_toml();
        assert!(out.contains("type = \"uplink\""), "{out}");
        assert_eq!(Config::parse(&out).unwrap(), c);
        assert_eq!(PortType::parse("uplink"), Some(PortType::Uplink));
        assert_eq!(PortType::Uplink.as_str(), "uplink");
        // No uplink: none; two: refused, naming both.
        assert!(Config::parse("[[bridge]]\nname='b'\n").unwrap().bridges[0]
            .uplink()
            .is_none());
        let two = format!("{text}[[bridge.port]]\nname='p2'\niface='eth2'\ntype='uplink'\n");
        let e = Config::parse(&two).unwrap_err().to_string();
        assert!(
            e.contains("bridge br0") && e.contains("p0, p2") && e.contains("at most one"),
            "{e}"
        );
        // One uplink on each of two bridges is fine.
        let per_bridge = "[[bridge]]\nname='a'\n[[bridge.port]]\nname='p0'\niface='x'\ntype='uplink'\n[[bridge]]\nname='b'\n[[bridge.port]]\nname='p0'\niface='y'\ntype='uplink'\n";
        let c = Config::parse(per_bridge).unwrap();
        assert_eq!(c.bridges[1].uplink().unwrap().iface, "y");
    }

    #[test]
    fn groups_and_meters_ride_in_flows() {
        let lines = vec![
            "meter=1,kbps,bands=type=drop,rate=1000".to_string(),
            "group_id=1,type=all,bucket=bucket_id:0,actions=output:p1".to_string(),
            "priority=0 actions=meter:1,group:1".to_string(),
        ];
        let (m, g, r) = split_groups(&lines);
        assert_eq!(m, vec![lines[0].clone()]);
        assert_eq!(g, lines[1]);
        assert_eq!(r, lines[2]);
        assert!(!is_group_line("priority=1,actions=drop"));
        assert!(!is_meter_line("priority=1,actions=meter:1"));
    }

    #[test]
    fn bad_config_is_an_error() {
        assert!(Config::parse("[[bridge]]\nnom = 1\n").is_err());
        assert!(Config::parse(
            "[[bridge]]\nname='a'\n[[bridge.port]]\nname='p'\niface='x'\ntype='bogus'\n"
        )
        .is_err());
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    /// Issue 28 item 7: a file that configures a bridge, a port name or an
    /// interface twice is refused at load, naming both.
    #[test]
    fn duplicates_are_refused_at_load() {
        let port = |b: &str, n: &str, i: &str| {
            format!(
                "[[bridge]]\nname='{b}'\n[[bridge.port]]\nname='{n}'\niface='{i}'\ntype='auto'\n"
            )
        };
        let e = Config::parse("[[bridge]]\nname='br0'\n[[bridge]]\nname='br0'\n").unwrap_err();
        assert_eq!(e, SchemaError::DuplicateBridge("br0".into()));
        let e = e.to_string();
        assert_eq!(
            e,
            "bridge `br0` is configured twice (bridge names are unique)"
        );
        assert!(e.contains("bridge `br0` is configured twice"), "{e}");
        // One interface in two bridges, or twice in one under two names.
        let e = Config::parse(&format!(
            "{}{}",
            port("br0", "p1", "veth1"),
            port("br1", "p1", "veth1")
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("interface `veth1` is attached twice: as port p1 of bridge br0 and as port p1 of bridge br1"),
            "{e}"
        );
        let two = format!(
            "{}[[bridge.port]]\nname='p2'\niface='veth1'\ntype='afpacket'\n",
            port("br0", "p1", "veth1")
        );
        let e = Config::parse(&two).unwrap_err().to_string();
        assert!(
            e.contains("as port p1 of bridge br0 and as port p2 of bridge br0"),
            "{e}"
        );
        let same_name = format!(
            "{}[[bridge.port]]\nname='p1'\niface='veth2'\ntype='afpacket'\n",
            port("br0", "p1", "veth1")
        );
        let e = Config::parse(&same_name).unwrap_err().to_string();
        assert!(
            e.contains("bridge br0: port `p1` is configured twice"),
            "{e}"
        );
        // A representor that is also a port; a port that is an underlay.
        let rep = format!("{}[[bridge.vf]]\nname='v'\nindex=0\nnamespace='n'\nmac='02:00:00:00:00:01'\nrepresentor='br1pf0vf0'\n", port("br1", "p", "br1pf0vf0"));
        let e = Config::parse(&rep).unwrap_err().to_string();
        assert!(e.contains("the representor of VF v of bridge br1"), "{e}");
        let under = format!("{}[[bridge.port]]\nname='vx'\niface='vx'\ntype='vxlan'\noptions={{underlay='eth1'}}\n[[bridge.port]]\nname='gn'\niface='gn'\ntype='geneve'\noptions={{underlay='eth1'}}\n", port("br0", "p1", "veth1"));
        // Tunnels share an underlay.
        let c = Config::parse(&under).unwrap();
        assert_eq!(
            c.iface_user("eth1", true).unwrap(),
            "the underlay of tunnel port vx of bridge br0"
        );
        assert_eq!(c.iface_user("eth1", false), None);
        assert_eq!(
            c.iface_user("veth1", false).unwrap(),
            "port p1 of bridge br0"
        );
        let e = Config::parse(&format!("{under}{}", port("br1", "up", "eth1")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("interface `eth1` is the underlay of tunnel port vx of bridge br0 and also attached as port up of bridge br1"),
            "{e}"
        );
    }

    /// Issue 28 item 8: a failed write leaves neither a temporary file nor
    /// a changed target.
    #[test]
    fn a_failed_save_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("nicflow-cfgfail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // The target is a non-empty directory: the final rename fails.
        let path = dir.join("sw.toml");
        std::fs::create_dir_all(path.join("x")).unwrap();
        let e = Config::default().save(&path).unwrap_err().to_string();
        assert!(e.contains("sw.toml"), "{e}");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("sw.toml")], "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_stay_out_of_errors_and_the_file_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let key = "0x00112233445566778899aabbccddeeff01020304";
        // A syntax error on the line of a key, and a key of the wrong type:
        // the error gives the place, not the line.
        for text in [
            format!("[[bridge]]\nname='b'\n[[bridge.port]]\nname='v'\niface='v'\ntype='vxlan'\noptions={{ psk = 'hunter22hunter22' ,, esp_key_in = '{key}' }}\n"),
            "[[bridge]]\nname='b'\n[[bridge.port]]\nname='v'\niface='v'\ntype='vxlan'\noptions={ psk = 99887766554433 }\n".to_string(),
        ] {
            let e = Config::parse(&text).unwrap_err().to_string();
            assert!(e.starts_with("line 7"), "{e}");
            for secret in ["hunter22", "00112233", "99887766554433"] {
                assert!(!e.contains(secret), "{e}");
            }
        }
        let dir = std::env::temp_dir().join(format!("nicflow-cfg-priv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.toml");
        let text = format!("[[bridge]]\nname='b'\n[[bridge.port]]\nname='v'\niface='v'\ntype='vxlan'\noptions={{ esp_key_in = '{key}' }}\n");
        std::fs::write(&path, &text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = Config::load(&path).unwrap();
        assert!(c.has_secrets());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!format!("{c:?}").contains("00112233"));
        // What save writes is owner-only too, and keeps the key.
        c.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(std::fs::read_to_string(&path).unwrap().contains(key));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
