//! Node-local versus cross-node steering (document 000's future work): a
//! network's pods reach pods on their own node through the node's bridge
//! (the kernel fast path once the flow is offloaded), and a per-network
//! policy chooses where traffic to the rest of the pod network goes:
//! `overlay` (the node's tunnel port), `egress` (a designated port, e.g. an
//! underlay uplink or a data-plane NIC) or `local` (nowhere: the network
//! does not leave the node). The choice is made by flow rules, so the
//! datapath flow of every conversation shows it in `dump-dp-flows`
//! (`output:vx0`, `output:up0`, `drop`, or the local representor).
//!
//! The network config names it:
//!
//! ```json
//! "steering": { "podCidr": "198.18.64.0/18", "nodeCidr": "198.18.65.0/24",
//!               "crossNode": "overlay", "port": "vx0" }
//! ```
//!
//! and ADD installs, on the pod's bridge:
//!
//! ```text
//! table 0  prio 80   in_port=R                        resubmit(,50)   the pod's traffic is steered  (attachment cookie)
//! table 50 prio 300  ip,nw_dst=NODE / arp,arp_tpa=NODE  normal        this node's pods: the bridge  (network cookie)
//! table 50 prio 200  ip,nw_dst=POD  / arp,arp_tpa=POD   PATH          the rest of the pod network   (network cookie)
//! table 50 prio 0                                       normal        anything else                 (network cookie)
//! ```
//!
//! where PATH is `output:PORT` (overlay, egress) or `drop` (local). With a
//! pod network policy ([`super::policy`]) or bandwidth limits
//! ([`super::bandwidth`]) their egress rules (priorities 100 and 90, above
//! this one) forward with `resubmit(,50)` instead of `normal`, so policy,
//! limits and steering compose. DEL removes the attachment's rule; the network's
//! rules name no pod and stay (a later ADD rewrites them in place).
//! Traffic arriving from the overlay or egress port is not steered: it is
//! for this node's pods and the bridge delivers it.

use super::error::{CniError, CniResult};
use super::policy::Net4;
use serde_json::Value;

/// The table the forwarding decision is made in.
pub const TABLE: u8 = 50;

/// Where traffic to pods on other nodes goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CrossNode {
    /// Through the node's tunnel port.
    Overlay(String),
    /// Through a designated egress port.
    Egress(String),
    /// Nowhere: the network stays on its node.
    Local,
}

/// A network's steering policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steering {
    /// Every pod of the network, on all nodes.
    pub pod_cidr: Net4,
    /// This node's pods.
    pub node_cidr: Net4,
    pub cross_node: CrossNode,
}

fn bad(path: &str, why: impl std::fmt::Display) -> CniError {
    CniError::invalid_config(format!("network config: `steering.{path}`: {why}"))
}

fn net(o: &serde_json::Map<String, Value>, key: &str) -> CniResult<Net4> {
    let v = o.get(key).ok_or_else(|| bad(key, "missing"))?;
    super::policy::parse_net(&format!("steering.{key}"), v)
}

/// A bridge port name as the rule language takes it (no separators that
/// would split or end a rule).
fn port_name(o: &serde_json::Map<String, Value>) -> CniResult<String> {
    let p = o
        .get("port")
        .ok_or_else(|| bad("port", "missing (the tunnel or egress port on the bridge)"))?
        .as_str()
        .ok_or_else(|| bad("port", "expected a port name"))?;
    if p.is_empty()
        || p.len() > 15
        || !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(bad("port", format!("`{p}` is not a port name")));
    }
    Ok(p.to_string())
}

impl Steering {
    /// The network's `steering` object, every field checked (the error
    /// names the offending one); `None` without one.
    pub fn from_conf(v: Option<&Value>) -> CniResult<Option<Steering>> {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let o = v.as_object().ok_or_else(|| {
            CniError::invalid_config("network config: `steering`: expected an object")
        })?;
        const KNOWN: &[&str] = &["podCidr", "nodeCidr", "crossNode", "port"];
        if let Some(k) = o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(bad(
                k,
                format!("not supported (known: {})", KNOWN.join(", ")),
            ));
        }
        let pod_cidr = net(o, "podCidr")?;
        let node_cidr = net(o, "nodeCidr")?;
        if !pod_cidr.contains(&node_cidr) {
            return Err(bad(
                "nodeCidr",
                format!("{node_cidr} is not inside podCidr {pod_cidr}"),
            ));
        }
        let mode = o
            .get("crossNode")
            .map(|m| {
                m.as_str()
                    .ok_or_else(|| bad("crossNode", "expected a string"))
            })
            .transpose()?
            .unwrap_or("overlay");
        let cross_node = match mode {
            "overlay" => CrossNode::Overlay(port_name(o)?),
            "egress" => CrossNode::Egress(port_name(o)?),
            "local" => {
                if o.contains_key("port") {
                    return Err(bad("port", "a `local` network has no cross-node port"));
                }
                CrossNode::Local
            }
            m => {
                return Err(bad(
                    "crossNode",
                    format!("`{m}`: expected overlay, egress or local"),
                ))
            }
        };
        Ok(Some(Steering {
            pod_cidr,
            node_cidr,
            cross_node,
        }))
    }

    /// What a policy's rules forward with once steering is on.
    pub fn forward_action() -> String {
        format!("resubmit(,{TABLE})")
    }

    /// The network's rules (module text), `cookie` on each; the same on
    /// every ADD of the network, so installing them again changes nothing.
    pub fn network_flows(&self, cookie: u64) -> Vec<String> {
        let c = format!("cookie={cookie:#x}");
        let t = TABLE;
        let (node, pod) = (self.node_cidr, self.pod_cidr);
        let path = match &self.cross_node {
            CrossNode::Overlay(p) | CrossNode::Egress(p) => format!("output:{p}"),
            CrossNode::Local => "drop".to_string(),
        };
        vec![
            format!("{c},table={t},priority=300,ip,nw_dst={node},actions=normal"),
            format!("{c},table={t},priority=300,arp,arp_tpa={node},actions=normal"),
            format!("{c},table={t},priority=200,ip,nw_dst={pod},actions={path}"),
            format!("{c},table={t},priority=200,arp,arp_tpa={pod},actions={path}"),
            format!("{c},table={t},priority=0,actions=normal"),
        ]
    }

    /// The attachment's rule: everything the pod sends behind `port` is
    /// steered (`cookie` is the attachment's, so DEL removes exactly it).
    pub fn pod_flows(&self, cookie: u64, port: &str) -> Vec<String> {
        vec![format!(
            "cookie={cookie:#x},table=0,priority=80,in_port={port},actions=resubmit(,{TABLE})"
        )]
    }
}

/// The cookie of a network's steering rules on a node: per network name,
/// tagged `0xce` apart from the attachments' `0xcf`.
pub fn network_cookie(network: &str) -> u64 {
    (super::policy::cookie(network, "", "steering") & 0x00ff_ffff_ffff_ffff) | 0xce00_0000_0000_0000
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> CniResult<Option<Steering>> {
        Steering::from_conf(Some(&v))
    }

    fn err(v: Value) -> String {
        parse(v).unwrap_err().to_json().to_string()
    }

    #[test]
    fn parses_the_three_paths() {
        let s = parse(
            json!({"podCidr": "198.18.64.0/18", "nodeCidr": "198.18.65.7/24",
                             "crossNode": "overlay", "port": "vx0"}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.node_cidr.to_string(), "198.18.65.0/24");
        assert_eq!(s.cross_node, CrossNode::Overlay("vx0".into()));
        let s = parse(
            json!({"podCidr": "198.18.64.0/18", "nodeCidr": "198.18.65.0/24",
                             "crossNode": "egress", "port": "up0"}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.cross_node, CrossNode::Egress("up0".into()));
        let s = parse(
            json!({"podCidr": "198.18.64.0/18", "nodeCidr": "198.18.65.0/24",
                             "crossNode": "local"}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.cross_node, CrossNode::Local);
        // overlay is the default path.
        let s = parse(
            json!({"podCidr": "198.18.64.0/18", "nodeCidr": "198.18.65.0/24",
                             "port": "vx0"}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.cross_node, CrossNode::Overlay("vx0".into()));
        assert_eq!(Steering::from_conf(None).unwrap(), None);
        assert_eq!(Steering::from_conf(Some(&Value::Null)).unwrap(), None);
    }

    #[test]
    fn names_the_bad_field() {
        let base =
            json!({"podCidr": "198.18.64.0/18", "nodeCidr": "198.18.65.0/24", "port": "vx0"});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        assert!(err(with("nodeCidr", json!("198.19.0.0/24"))).contains("steering.nodeCidr"));
        assert!(err(with("podCidr", json!("2001:db8::/64"))).contains("IPv6 is not built"));
        assert!(err(with("podCidr", json!("198.18.0.0/40"))).contains("bad prefix length"));
        assert!(err(with("crossNode", json!("sideways"))).contains("steering.crossNode"));
        assert!(err(with("port", json!("vx0,actions=drop"))).contains("steering.port"));
        assert!(err(with("color", json!("blue"))).contains("steering.color"));
        let mut no_port = base.clone();
        no_port.as_object_mut().unwrap().remove("port");
        assert!(err(no_port).contains("steering.port"));
        assert!(err(with("crossNode", json!("local"))).contains("no cross-node port"));
        assert!(err(json!("overlay")).contains("expected an object"));
    }

    #[test]
    fn flows_say_the_path() {
        let s = parse(
            json!({"podCidr": "198.18.64.0/18", "nodeCidr": "198.18.65.0/24",
                             "crossNode": "overlay", "port": "vx0"}),
        )
        .unwrap()
        .unwrap();
        let f = s.network_flows(0xce01);
        assert!(f.contains(
            &"cookie=0xce01,table=50,priority=200,ip,nw_dst=198.18.64.0/18,actions=output:vx0"
                .into()
        ));
        assert!(f.contains(
            &"cookie=0xce01,table=50,priority=300,arp,arp_tpa=198.18.65.0/24,actions=normal".into()
        ));
        assert_eq!(
            s.pod_flows(0xcf02, "rep1"),
            vec![
                "cookie=0xcf02,table=0,priority=80,in_port=rep1,actions=resubmit(,50)".to_string()
            ]
        );
        let local = Steering {
            cross_node: CrossNode::Local,
            ..s
        };
        assert!(local
            .network_flows(1)
            .iter()
            .any(|l| l.ends_with("nw_dst=198.18.64.0/18,actions=drop")));
        // Every rule parses in the rule language.
        let ports = nicflow_ofctl::AutoPorts::default();
        for l in local
            .network_flows(1)
            .iter()
            .chain(local.pod_flows(2, "rep1").iter())
        {
            nicflow_ofctl::parse_flows(l, &ports).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
    }

    #[test]
    fn network_cookies_stand_apart() {
        let c = network_cookie("pods");
        assert_eq!(c >> 56, 0xce);
        assert_ne!(c, network_cookie("storage"));
    }
}
