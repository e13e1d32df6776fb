//! The network configuration the runtime sends and the result the plugin
//! prints, in the spec's JSON (1.0.0; 0.3.1 and 0.4.0 converted).

use super::error::{code, CniError, CniResult};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::path::PathBuf;

/// The newest spec version this plugin speaks (results of 1.0.0 and
/// 1.1.0 have the same layout; 1.1.0 adds STATUS and GC).
pub const LATEST: &str = "1.1.0";

/// Versions this plugin answers (`VERSION`'s `supportedVersions`).
pub const SUPPORTED: [&str; 4] = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// One entry of GC's `cni.dev/valid-attachments`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// A `type: nicflow` network configuration (one entry of a conflist, as
/// the runtime hands it to the plugin).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct NetConf {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The nicflow bridge the VF's representor joins.
    pub bridge: String,
    /// The daemon's control socket (default: `$NICFLOW_SOCK`, else
    /// /run/nicflow/nicflow.sock).
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// Representor port type (`auto`, `tc`, `afxdp`, `afpacket`).
    #[serde(default, rename = "repType")]
    pub rep_type: Option<String>,
    /// Where ADD records what it made, for DEL (default
    /// /var/lib/cni/nicflow).
    #[serde(default, rename = "dataDir")]
    pub data_dir: Option<PathBuf>,
    #[serde(default)]
    pub ipam: Option<Ipam>,
    /// CHECK (and chained plugins) get the previous result here.
    #[serde(default, rename = "prevResult")]
    pub prev_result: Option<Value>,
    /// Ingress allow rules for every pod of this network
    /// ([`super::policy`]); validated by ADD only, so a bad one never
    /// blocks DEL.
    #[serde(default)]
    pub policy: Option<Value>,
    /// Bandwidth limits for every pod of this network, enforced by meters
    /// on the bridge ([`super::bandwidth`]); validated by ADD only.
    #[serde(default)]
    pub bandwidth: Option<Value>,
    /// Node-local vs cross-node steering for the network's pods
    /// ([`super::steering`]); validated by ADD only.
    #[serde(default)]
    pub steering: Option<Value>,
    /// What the runtime passes for the capabilities the conflist declares;
    /// `networkPolicy` here overrides `policy` for one pod.
    #[serde(default, rename = "runtimeConfig")]
    pub runtime_config: Option<Value>,
    /// GC (spec 1.1): the attachments to keep.
    #[serde(default, rename = "cni.dev/valid-attachments")]
    pub valid_attachments: Option<Vec<Attachment>>,
    /// The same under the name of the first 1.1 text, which libcni also
    /// sends (both at once, so not a serde alias).
    #[serde(default, rename = "cni.dev/attachments")]
    pub attachments: Option<Vec<Attachment>>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Ipam {
    #[serde(rename = "type")]
    pub kind: String,
}

impl NetConf {
    /// Parse and validate stdin: malformed JSON, missing or bad fields are
    /// code 7, an unsupported `cniVersion` code 1.
    pub fn parse(bytes: &[u8]) -> CniResult<NetConf> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| CniError::invalid_config(format!("network config is not JSON: {e}")))?;
        let conf: NetConf = serde_json::from_value(v)
            .map_err(|e| CniError::invalid_config(format!("bad network config: {e}")))?;
        if !SUPPORTED.contains(&conf.cni_version.as_str()) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!(
                    "cniVersion {} is not supported (supported: {})",
                    conf.cni_version,
                    SUPPORTED.join(", ")
                ),
            ));
        }
        check_network_name(&conf.name)?;
        if conf.kind != "nicflow" {
            return Err(CniError::invalid_config(format!(
                "network config: type `{}`, expected `nicflow`",
                conf.kind
            )));
        }
        check_bridge_name(&conf.bridge)?;
        if let Some(d) = &conf.data_dir {
            check_data_dir(d)?;
        }
        if let Some(i) = &conf.ipam {
            if i.kind.is_empty()
                || i.kind == "."
                || i.kind == ".."
                || i.kind.bytes().any(|b| b == b'/' || b <= b' ')
            {
                return Err(CniError::invalid_config(format!(
                    "network config: bad ipam type `{}`",
                    i.kind
                )));
            }
        }
        Ok(conf)
    }
}

/// The longest network `name`: it is a directory name under `dataDir`
/// (`NAME_MAX` is 255 bytes).
pub const NAME_MAX: usize = 255;

/// The spec's network name (`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`), at most
/// [`NAME_MAX`] bytes. The name is a directory under `dataDir`, so a name
/// the spec allows can never be `..`, absolute or hold a `/`: records stay
/// inside `dataDir`.
pub fn check_network_name(name: &str) -> CniResult<()> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= NAME_MAX
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(CniError::invalid_config(format!(
            "network config: `name` {:?}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$ and have at most {NAME_MAX} bytes",
            clip(name)
        )))
    }
}

/// The spec's container ID: not empty, letters, digits, `_`, `.` and `-`,
/// starting with a letter or digit (so never `.` or `..`); at most 255
/// bytes (part of a record file name).
pub fn check_container_id(id: &str) -> CniResult<()> {
    let b = id.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= NAME_MAX
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(CniError::new(
            code::INVALID_ENV,
            format!(
                "CNI_CONTAINERID {:?}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$ and have at most {NAME_MAX} bytes",
                clip(id)
            ),
        ))
    }
}

/// A nicflow bridge name as the daemon takes it (1 to 64 bytes), and
/// nothing a path or a flow text could misread: no `/`, `,`, `=`,
/// spaces or control characters, not `.` or `..`.
pub fn check_bridge_name(br: &str) -> CniResult<()> {
    let ok = !br.is_empty()
        && br.len() <= 64
        && br != "."
        && br != ".."
        && br
            .bytes()
            .all(|c| c > b' ' && c != 0x7f && !b"/,=".contains(&c));
    if ok {
        Ok(())
    } else {
        Err(CniError::invalid_config(format!(
            "network config: `bridge` {:?}: 1 to 64 bytes, no `/`, `,`, `=`, spaces or control characters",
            clip(br)
        )))
    }
}

/// `dataDir` is an absolute path without `.` or `..` components, so what
/// ADD creates under it stays under it whatever the plugin's working
/// directory.
pub fn check_data_dir(d: &std::path::Path) -> CniResult<()> {
    use std::path::Component;
    let ok = d.is_absolute()
        && d.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if ok {
        Ok(())
    } else {
        Err(CniError::invalid_config(format!(
            "network config: `dataDir` {:?}: must be an absolute path without `.` or `..`",
            clip(&d.to_string_lossy())
        )))
    }
}

/// At most 80 characters of a refused value, for error messages.
fn clip(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// One address of an IPAM result (any version's shape).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// `ADDRESS/PREFIX`.
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
}

/// What the IPAM plugin returned (the parts this plugin uses).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct IpamResult {
    #[serde(default)]
    pub ips: Vec<IpConfig>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub dns: Value,
}

impl IpamResult {
    pub fn parse(bytes: &[u8]) -> CniResult<IpamResult> {
        let r: IpamResult = serde_json::from_slice(bytes).map_err(|e| {
            CniError::new(
                code::DECODE_FAILURE,
                format!("IPAM plugin printed an unreadable result: {e}"),
            )
            .with_details(String::from_utf8_lossy(bytes).into_owned())
        })?;
        for ip in &r.ips {
            parse_cidr(&ip.address)?;
        }
        Ok(r)
    }
}

/// `ADDRESS/PREFIX` into its parts.
pub fn parse_cidr(s: &str) -> CniResult<(IpAddr, u8)> {
    let bad = || CniError::new(code::DECODE_FAILURE, format!("bad address `{s}`"));
    let (a, p) = s.split_once('/').ok_or_else(bad)?;
    let a: IpAddr = a.parse().map_err(|_| bad())?;
    let p: u8 = p.parse().map_err(|_| bad())?;
    if p > if a.is_ipv4() { 32 } else { 128 } {
        return Err(bad());
    }
    Ok((a, p))
}

/// An interface of the result. The container's VF has `sandbox` set; the
/// representor (the VF's host-side veth peer, a port of the bridge) has
/// none, which is how chained plugins such as `bandwidth` find the host
/// end of the container's interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    /// Empty when unknown (left out of the result).
    pub mac: String,
    /// The netns path (`CNI_NETNS`); empty for a host interface.
    pub sandbox: String,
}

impl Interface {
    fn to_json(&self) -> Value {
        let mut o = json!({ "name": self.name });
        if !self.mac.is_empty() {
            o["mac"] = json!(self.mac);
        }
        if !self.sandbox.is_empty() {
            o["sandbox"] = json!(self.sandbox);
        }
        o
    }
}

/// The ADD result in spec version `version` (1.0.0 layout; 0.3.1 and
/// 0.4.0 add `version` to every IP): `ifaces` in order, the IPAM
/// addresses on `ifaces[addr_iface]` (the container's interface).
///
/// With a `prev` result (nicflow not first in a chain) the spec asks a
/// plugin to add to it rather than replace it: its interfaces, IPs, routes
/// and DNS are kept and ours appended, interface indexes shifted.
pub fn result_json(
    version: &str,
    ifaces: &[Interface],
    addr_iface: usize,
    ipam: &IpamResult,
    prev: Option<&Value>,
) -> Value {
    let old = !matches!(version, "1.0.0" | "1.1.0");
    let empty = Vec::new();
    let prev_ifaces = prev
        .and_then(|p| p["interfaces"].as_array())
        .unwrap_or(&empty);
    let base = prev_ifaces.len();
    let mut interfaces: Vec<Value> = prev_ifaces.clone();
    interfaces.extend(ifaces.iter().map(Interface::to_json));
    let mut ips: Vec<Value> = prev
        .and_then(|p| p["ips"].as_array())
        .cloned()
        .unwrap_or_default();
    ips.extend(ipam.ips.iter().map(|ip| {
        let mut o = json!({ "address": ip.address, "interface": base + addr_iface });
        if let Some(g) = &ip.gateway {
            o["gateway"] = json!(g);
        }
        o
    }));
    for o in &mut ips {
        if old {
            let v4 = o["address"]
                .as_str()
                .and_then(|a| parse_cidr(a).ok())
                .is_none_or(|(a, _)| a.is_ipv4());
            o["version"] = json!(if v4 { "4" } else { "6" });
        } else if let Some(m) = o.as_object_mut() {
            m.remove("version");
        }
    }
    let mut routes: Vec<Value> = prev
        .and_then(|p| p["routes"].as_array())
        .cloned()
        .unwrap_or_default();
    routes.extend(ipam.routes.iter().map(|r| json!(r)));
    let mut r = json!({
        "cniVersion": version,
        "interfaces": interfaces,
        "ips": ips,
    });
    if !routes.is_empty() {
        r["routes"] = json!(routes);
    }
    let dns = if ipam.dns.is_object() && !ipam.dns.as_object().is_some_and(|o| o.is_empty()) {
        ipam.dns.clone()
    } else {
        prev.map(|p| p["dns"].clone())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}))
    };
    r["dns"] = dns;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONF: &str = r#"{"cniVersion":"1.0.0","name":"net1","type":"nicflow","bridge":"br0",
        "ipam":{"type":"host-local","subnet":"198.19.50.0/24"}}"#;

    /// Only what the spec allows becomes a path component: nothing that
    /// climbs out of `dataDir` or replaces it.
    #[test]
    fn names_used_in_paths_are_checked() {
        for good in ["net1", "a", "0", "k8s-pod-network", "a.b_c-d", "a.."] {
            check_network_name(good).unwrap();
            check_container_id(good).unwrap();
        }
        let long = "n".repeat(NAME_MAX + 1);
        for bad in [
            "", "..", ".", "../../x", "/abs", "a/b", ".hidden", "-x", "_x", "a b", "a\0b", "é",
            &long,
        ] {
            let e = check_network_name(bad).unwrap_err();
            assert_eq!(e.code, code::INVALID_CONFIG, "{bad:?}");
            assert_eq!(check_container_id(bad).unwrap_err().code, code::INVALID_ENV);
        }
        check_network_name(&"n".repeat(NAME_MAX)).unwrap();
        for bad in ["", ".", "..", "br/0", "br 0", "a,b", "a=b", &"b".repeat(65)] {
            assert!(check_bridge_name(bad).is_err(), "{bad:?}");
        }
        check_bridge_name("br-int.0").unwrap();
        for bad in ["rel", "./x", "/a/../b", ""] {
            assert!(
                check_data_dir(std::path::Path::new(bad)).is_err(),
                "{bad:?}"
            );
        }
        check_data_dir(std::path::Path::new("/var/lib/cni/nicflow")).unwrap();
        // The whole configuration: a bad name is code 7 before anything.
        let c = CONF.replace(r#""name":"net1""#, r#""name":"../../x""#);
        let e = NetConf::parse(c.as_bytes()).unwrap_err();
        assert_eq!(e.code, 7, "{e}");
        assert!(e.msg.contains("`name`"), "{e}");
        let c = CONF.replace(r#""type":"host-local""#, r#""type":"..""#);
        assert_eq!(NetConf::parse(c.as_bytes()).unwrap_err().code, 7);
    }

    #[test]
    fn parses_config_and_rejects_bad_ones() {
        let c = NetConf::parse(CONF.as_bytes()).unwrap();
        assert_eq!(c.bridge, "br0");
        assert_eq!(c.ipam.unwrap().kind, "host-local");
        assert!(c.socket.is_none());
        for (bad, want) in [
            ("{not json", 7),
            (r#"{"cniVersion":"1.0.0","name":"n","type":"nicflow"}"#, 7),
            (
                r#"{"cniVersion":"1.0.0","name":"n","type":"bridge","bridge":"br0"}"#,
                7,
            ),
            (
                r#"{"cniVersion":"0.2.0","name":"n","type":"nicflow","bridge":"br0"}"#,
                1,
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"n","type":"nicflow","bridge":"br0","ipam":{"type":"../x"}}"#,
                7,
            ),
        ] {
            let e = NetConf::parse(bad.as_bytes()).unwrap_err();
            assert_eq!(e.code, want, "{bad}: {e}");
        }
    }

    #[test]
    fn results_per_version() {
        let ipam = IpamResult::parse(
            br#"{"cniVersion":"1.0.0","ips":[{"address":"198.19.50.2/24","gateway":"198.19.50.1"}],
                 "routes":[{"dst":"0.0.0.0/0"}],"dns":{}}"#,
        )
        .unwrap();
        let iface = [
            Interface {
                name: "eth0".into(),
                mac: "02:00:00:00:00:01".into(),
                sandbox: "/var/run/netns/x".into(),
            },
            Interface {
                name: "br0pf0vf0".into(),
                mac: "02:00:00:00:00:02".into(),
                sandbox: String::new(),
            },
        ];
        let r = result_json("1.0.0", &iface, 0, &ipam, None);
        assert!(r["interfaces"][1].get("sandbox").is_none(), "{r}");
        assert_eq!(r["interfaces"][1]["name"], "br0pf0vf0");
        assert_eq!(r["cniVersion"], "1.0.0");
        assert_eq!(r["interfaces"][0]["sandbox"], "/var/run/netns/x");
        assert_eq!(r["ips"][0]["interface"], 0);
        assert_eq!(r["ips"][0]["gateway"], "198.19.50.1");
        assert!(r["ips"][0].get("version").is_none());
        assert_eq!(r["routes"][0]["dst"], "0.0.0.0/0");
        let r = result_json("0.3.1", &iface, 0, &ipam, None);
        assert_eq!(r["ips"][0]["version"], "4");
        // A 0.3.1 IPAM result (with `version`) reads the same.
        let old = IpamResult::parse(
            br#"{"cniVersion":"0.3.1","ips":[{"version":"6","address":"2001:db8::2/64"}]}"#,
        )
        .unwrap();
        assert_eq!(old.ips[0].address, "2001:db8::2/64");
        assert_eq!(
            result_json("0.4.0", &iface, 0, &old, None)["ips"][0]["version"],
            "6"
        );
        // Not first in a chain: the previous result is kept, ours appended.
        let prev = json!({"cniVersion":"1.0.0","interfaces":[{"name":"lo0"}],
            "ips":[{"address":"198.19.9.2/24","interface":0}],"routes":[{"dst":"198.19.0.0/16"}],
            "dns":{"nameservers":["198.19.9.1"]}});
        let r = result_json("1.0.0", &iface, 0, &ipam, Some(&prev));
        assert_eq!(r["interfaces"].as_array().unwrap().len(), 3, "{r}");
        assert_eq!(r["ips"][1]["interface"], 1, "{r}");
        assert_eq!(r["ips"][0]["address"], "198.19.9.2/24", "{r}");
        assert_eq!(r["routes"].as_array().unwrap().len(), 2, "{r}");
        assert_eq!(r["dns"]["nameservers"][0], "198.19.9.1", "{r}");
        assert_eq!(IpamResult::parse(b"nope").unwrap_err().code, 6);
    }
}
