//! The network configuration the runtime sends and the result the plugin
//! prints, in the spec's JSON (1.0.0; 0.3.1 and 0.4.0 converted).

use super::error::{code, CniError, CniResult};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::path::PathBuf;

/// The spec version results are built in.
pub const LATEST: &str = "1.0.0";

/// Versions this plugin answers (`VERSION`'s `supportedVersions`).
pub const SUPPORTED: [&str; 3] = ["0.3.1", "0.4.0", "1.0.0"];

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
        if conf.name.is_empty() {
            return Err(CniError::invalid_config("network config: empty `name`"));
        }
        if conf.kind != "nicflow" {
            return Err(CniError::invalid_config(format!(
                "network config: type `{}`, expected `nicflow`",
                conf.kind
            )));
        }
        if conf.bridge.is_empty() {
            return Err(CniError::invalid_config("network config: empty `bridge`"));
        }
        if let Some(i) = &conf.ipam {
            if i.kind.is_empty() || i.kind.contains('/') {
                return Err(CniError::invalid_config(format!(
                    "network config: bad ipam type `{}`",
                    i.kind
                )));
            }
        }
        Ok(conf)
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

/// The container-side interface of the result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: String,
    /// The netns path (`CNI_NETNS`).
    pub sandbox: String,
}

/// The ADD result in spec version `version` (1.0.0 layout; 0.3.1 and
/// 0.4.0 add `version` to every IP).
pub fn result_json(version: &str, iface: &Interface, ipam: &IpamResult) -> Value {
    let old = version != LATEST;
    let ips: Vec<Value> = ipam
        .ips
        .iter()
        .map(|ip| {
            let mut o = json!({ "address": ip.address, "interface": 0 });
            if let Some(g) = &ip.gateway {
                o["gateway"] = json!(g);
            }
            if old {
                let v4 = parse_cidr(&ip.address)
                    .map(|(a, _)| a.is_ipv4())
                    .unwrap_or(true);
                o["version"] = json!(if v4 { "4" } else { "6" });
            }
            o
        })
        .collect();
    let mut r = json!({
        "cniVersion": version,
        "interfaces": [{ "name": iface.name, "mac": iface.mac, "sandbox": iface.sandbox }],
        "ips": ips,
    });
    if !ipam.routes.is_empty() {
        r["routes"] = json!(ipam.routes);
    }
    let dns = if ipam.dns.is_object() {
        ipam.dns.clone()
    } else {
        json!({})
    };
    r["dns"] = dns;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONF: &str = r#"{"cniVersion":"1.0.0","name":"net1","type":"nicflow","bridge":"br0",
        "ipam":{"type":"host-local","subnet":"198.19.50.0/24"}}"#;

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
        let iface = Interface {
            name: "eth0".into(),
            mac: "02:00:00:00:00:01".into(),
            sandbox: "/var/run/netns/x".into(),
        };
        let r = result_json("1.0.0", &iface, &ipam);
        assert_eq!(r["cniVersion"], "1.0.0");
        assert_eq!(r["interfaces"][0]["sandbox"], "/var/run/netns/x");
        assert_eq!(r["ips"][0]["interface"], 0);
        assert_eq!(r["ips"][0]["gateway"], "198.19.50.1");
        assert!(r["ips"][0].get("version").is_none());
        assert_eq!(r["routes"][0]["dst"], "0.0.0.0/0");
        let r = result_json("0.3.1", &iface, &ipam);
        assert_eq!(r["ips"][0]["version"], "4");
        // A 0.3.1 IPAM result (with `version`) reads the same.
        let old = IpamResult::parse(
            br#"{"cniVersion":"0.3.1","ips":[{"version":"6","address":"2001:db8::2/64"}]}"#,
        )
        .unwrap();
        assert_eq!(old.ips[0].address, "2001:db8::2/64");
        assert_eq!(result_json("0.4.0", &iface, &old)["ips"][0]["version"], "6");
        assert_eq!(IpamResult::parse(b"nope").unwrap_err().code, 6);
    }
}
