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

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default, rename = "bridge")]
    pub bridges: Vec<BridgeConfig>,
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
    pub offload: Option<crate::offload::OffloadMode>,
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
    pub fail_mode: Option<crate::control::openflow::FailMode>,
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
    #[serde(default)]
    pub options: BTreeMap<String, String>,
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
    pub fn port_mode(&self) -> crate::offload::OffloadMode {
        self.offload.unwrap_or_default()
    }

    /// The bridge's uplink port (`type = "uplink"`), if it has one.
    pub fn uplink(&self) -> Option<&PortConfig> {
        self.ports.iter().find(|p| p.kind == PortType::Uplink)
    }

    /// More than one uplink is an error naming them.
    pub fn check_uplinks(&self) -> Result<(), String> {
        let ups: Vec<&str> = self
            .ports
            .iter()
            .filter(|p| p.kind == PortType::Uplink)
            .map(|p| p.name.as_str())
            .collect();
        if ups.len() > 1 {
            return Err(format!(
                "bridge {}: more than one uplink port ({}); a bridge has at most one",
                self.name,
                ups.join(", ")
            ));
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
            options: BTreeMap::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
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
        Config::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.display().to_string(),
            message,
        })
    }

    pub fn parse(text: &str) -> Result<Config, String> {
        let c: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        for b in &c.bridges {
            b.check_uplinks()?;
        }
        Ok(c)
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
        let mut f = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(err)?
        };
        f.write_all(self.to_toml().as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(err)?;
        Ok(())
    }

    pub fn bridge(&self, name: &str) -> Option<&BridgeConfig> {
        self.bridges.iter().find(|b| b.name == name)
    }

    pub fn bridge_mut(&mut self, name: &str) -> Option<&mut BridgeConfig> {
        self.bridges.iter_mut().find(|b| b.name == name)
    }
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
                options: [("promisc".to_string(), "true".to_string())].into(),
            }],
            offload: Some(crate::offload::OffloadMode::None),
            offload_options: [("max_flows".to_string(), "1024".to_string())].into(),
            vfs: Vec::new(),
            openflow: OpenFlowConfig {
                controllers: vec!["ptcp:6653:127.0.0.1".into()],
                fail_mode: Some(crate::control::openflow::FailMode::Secure),
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
        use crate::offload::OffloadMode;
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
        assert_eq!(up.options["mode"], "generic");
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
        let e = Config::parse(&two).unwrap_err();
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
}
