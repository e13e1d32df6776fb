//! Pod network policy: ingress allow rules in the shape of a Kubernetes
//! NetworkPolicy's `ingress` section (peers as `ipBlock`s with `except`,
//! `ports` as protocol and port), turned at ADD into flow rules with
//! connection tracking on the pod's bridge, and removed at DEL by a cookie
//! that belongs to the one attachment.
//!
//! The rules a pod with address X behind representor port R gets (all with
//! its cookie C), on top of the bridge's own rules (by default
//! `priority=0,actions=normal`):
//!
//! ```text
//! table 0  prio 200  ip,nw_dst=X                 ct(table=40)       every IPv4 packet to the pod is tracked
//! table 0  prio 100  ip,in_port=R                ct(commit),normal  the pod's own connections are committed,
//!                                                                   so their replies are +est; egress unaffected
//! table 40 prio 300  ct_state=+trk+est,nw_dst=X  normal             replies and later packets
//! table 40 prio 300  ct_state=+trk+rel,nw_dst=X  normal             ICMP errors of those
//! table 40 prio 200  ct_state=+trk+new,nw_dst=X,nw_src=S[,tcp|udp,tp_dst=P]
//!                                                ct(commit),normal  one per allowed (source block, port)
//! table 40 prio 100  ip,nw_dst=X                 drop               any other new (or invalid) ingress
//! ```
//!
//! One conntrack zone (0) serves every pod, so a connection between two
//! pods with policies is committed once, by whichever rule admits it: the
//! destination's ingress rules (priority 200 in table 0) win over the
//! source's egress commit (priority 100). An `ipBlock` with `except` is
//! expanded into the prefixes that cover `cidr` minus the exceptions, so
//! each allow rule stays one positive match (a drop for the exception
//! would also hide other peers that allow the same source).
//!
//! IPv4 only: a policy on a pod that gets an IPv6 address is refused
//! rather than leaving its IPv6 ingress open, and a policed pod gets no
//! IPv6 at all ([`super::portsec`]). With bandwidth limits
//! ([`super::bandwidth`]) the rules above that pass traffic name the
//! pod's meters (`meter:E` on the egress rule, `meter:I` before the
//! `normal` of every table 40 pass).

use super::bandwidth::Meters;
use super::error::{CniError, CniResult};
use serde_json::Value;
use std::net::Ipv4Addr;

/// The table the per-pod ingress decisions are made in.
pub const TABLE: u8 = 40;

/// An IPv4 prefix, host bits cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net4 {
    pub addr: u32,
    pub len: u8,
}

impl Net4 {
    fn mask(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - len)
        }
    }

    pub fn new(addr: u32, len: u8) -> Net4 {
        Net4 {
            addr: addr & Net4::mask(len),
            len,
        }
    }

    /// Whether `o` lies inside `self`.
    pub fn contains(&self, o: &Net4) -> bool {
        o.len >= self.len && o.addr & Net4::mask(self.len) == self.addr
    }

    fn overlaps(&self, o: &Net4) -> bool {
        self.contains(o) || o.contains(self)
    }
}

impl std::fmt::Display for Net4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.addr), self.len)
    }
}

/// `net` minus every prefix of `except`, as disjoint prefixes (halving
/// `net` until each half is either untouched or wholly excluded).
pub fn subtract(net: Net4, except: &[Net4]) -> Vec<Net4> {
    if except.iter().any(|e| e.contains(&net)) {
        return Vec::new();
    }
    if !except.iter().any(|e| e.overlaps(&net)) {
        return vec![net];
    }
    let len = net.len + 1;
    let lo = Net4::new(net.addr, len);
    let hi = Net4::new(net.addr | 1 << (32 - len), len);
    let mut v = subtract(lo, except);
    v.extend(subtract(hi, except));
    v
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// One entry of `ports`: a protocol and, optionally, a destination port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSel {
    pub proto: Proto,
    pub port: Option<u16>,
}

/// One ingress rule: any of `from` (empty: any source) to any of `ports`
/// (empty: any protocol and port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Source prefixes, exceptions already taken out.
    pub from: Vec<Net4>,
    /// Whether `from` was given: a given `from` whose blocks are all
    /// excepted away admits nothing.
    pub from_given: bool,
    pub ports: Vec<PortSel>,
}

/// The pod's ingress allow list; no rules means no new ingress at all
/// (as a NetworkPolicy with policyType Ingress and no rules).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub ingress: Vec<Rule>,
}

fn bad(path: &str, why: impl std::fmt::Display) -> CniError {
    CniError::invalid_config(format!("network config: `{path}`: {why}"))
}

/// A CIDR string at `path` of the network config (the error names it).
pub(super) fn parse_net(path: &str, v: &Value) -> CniResult<Net4> {
    let s = v
        .as_str()
        .ok_or_else(|| bad(path, "expected a CIDR string"))?;
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| bad(path, format!("`{s}` is not ADDRESS/PREFIX")))?;
    let a: Ipv4Addr = a.parse().map_err(|_| {
        bad(
            path,
            format!("`{s}`: not an IPv4 address (IPv6 is not built here)"),
        )
    })?;
    let l: u8 = l
        .parse()
        .ok()
        .filter(|l| *l <= 32)
        .ok_or_else(|| bad(path, format!("`{s}`: bad prefix length")))?;
    Ok(Net4::new(u32::from(a), l))
}

fn object<'a>(
    path: &str,
    v: &'a Value,
    known: &[&str],
) -> CniResult<&'a serde_json::Map<String, Value>> {
    let o = v
        .as_object()
        .ok_or_else(|| bad(path, "expected an object"))?;
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(bad(
            &format!("{path}.{k}"),
            format!("not supported (known: {})", known.join(", ")),
        ));
    }
    Ok(o)
}

fn array<'a>(path: &str, v: &'a Value) -> CniResult<&'a Vec<Value>> {
    v.as_array().ok_or_else(|| bad(path, "expected an array"))
}

fn parse_peer(path: &str, v: &Value) -> CniResult<Vec<Net4>> {
    let o = object(path, v, &["ipBlock"])?;
    let b = o
        .get("ipBlock")
        .ok_or_else(|| bad(path, "a peer needs `ipBlock` (selectors are not built)"))?;
    let bp = format!("{path}.ipBlock");
    let b = object(&bp, b, &["cidr", "except"])?;
    let cp = format!("{bp}.cidr");
    let cidr = parse_net(&cp, b.get("cidr").ok_or_else(|| bad(&cp, "missing"))?)?;
    let mut except = Vec::new();
    if let Some(e) = b.get("except") {
        let ep = format!("{bp}.except");
        for (i, x) in array(&ep, e)?.iter().enumerate() {
            let xp = format!("{ep}[{i}]");
            let x = parse_net(&xp, x)?;
            if !cidr.contains(&x) || x == cidr {
                return Err(bad(&xp, format!("{x} is not strictly inside {cidr}")));
            }
            except.push(x);
        }
    }
    Ok(subtract(cidr, &except))
}

fn parse_port(path: &str, v: &Value) -> CniResult<PortSel> {
    let o = object(path, v, &["protocol", "port"])?;
    let proto = match o.get("protocol").map(|p| (p, p.as_str())) {
        None => Proto::Tcp,
        Some((_, Some(p))) if p.eq_ignore_ascii_case("tcp") => Proto::Tcp,
        Some((_, Some(p))) if p.eq_ignore_ascii_case("udp") => Proto::Udp,
        Some((p, _)) => {
            return Err(bad(
                &format!("{path}.protocol"),
                format!("{p}: TCP or UDP (SCTP is not built)"),
            ))
        }
    };
    let port = match o.get("port") {
        None => None,
        Some(p) => Some(
            p.as_u64()
                .filter(|p| (1..=65535).contains(p))
                .map(|p| p as u16)
                .ok_or_else(|| {
                    bad(
                        &format!("{path}.port"),
                        format!("{p}: a number 1-65535 (named ports are not built)"),
                    )
                })?,
        ),
    };
    Ok(PortSel { proto, port })
}

impl Policy {
    /// The policy in effect for one ADD: `runtimeConfig.networkPolicy` if
    /// the runtime passed one, else the network's `policy`, else none.
    /// Every field is checked; the error names the offending one.
    pub fn from_conf(policy: Option<&Value>, runtime: Option<&Value>) -> CniResult<Option<Policy>> {
        let (path, v) = match runtime.and_then(|r| r.get("networkPolicy")) {
            Some(v) if !v.is_null() => ("runtimeConfig.networkPolicy", v),
            _ => match policy {
                Some(v) if !v.is_null() => ("policy", v),
                _ => return Ok(None),
            },
        };
        Policy::parse(path, v).map(Some)
    }

    pub fn parse(path: &str, v: &Value) -> CniResult<Policy> {
        let o = object(path, v, &["ingress"])?;
        let mut ingress = Vec::new();
        if let Some(rules) = o.get("ingress") {
            let ip = format!("{path}.ingress");
            for (i, r) in array(&ip, rules)?.iter().enumerate() {
                let rp = format!("{ip}[{i}]");
                let ro = object(&rp, r, &["from", "ports"])?;
                let mut rule = Rule {
                    from: Vec::new(),
                    from_given: false,
                    ports: Vec::new(),
                };
                if let Some(f) = ro.get("from") {
                    let fp = format!("{rp}.from");
                    let peers = array(&fp, f)?;
                    rule.from_given = !peers.is_empty();
                    for (j, p) in peers.iter().enumerate() {
                        rule.from.extend(parse_peer(&format!("{fp}[{j}]"), p)?);
                    }
                }
                if let Some(p) = ro.get("ports") {
                    let pp = format!("{rp}.ports");
                    for (j, x) in array(&pp, p)?.iter().enumerate() {
                        rule.ports.push(parse_port(&format!("{pp}[{j}]"), x)?);
                    }
                }
                ingress.push(rule);
            }
        }
        Ok(Policy { ingress })
    }

    /// The attachment's rules (see the module text), `cookie` on each, for
    /// the pod's IPv4 addresses `addrs` behind bridge port `port`; with
    /// bandwidth meters `m`, the rules that pass traffic out of the pod name
    /// the egress meter and those that pass it in the ingress meter.
    /// `fwd` forwards what the pod sends (`normal`, or steering's
    /// `resubmit(,50)`).
    pub fn flows(
        &self,
        cookie: u64,
        port: &str,
        addrs: &[Ipv4Addr],
        m: &Meters,
        fwd: &str,
    ) -> Vec<String> {
        let c = format!("cookie={cookie:#x}");
        let t = TABLE;
        let (mi, me) = (m.ingress_prefix(), m.egress_prefix());
        let mut v = vec![format!(
            "{c},table=0,priority=100,ip,in_port={port},actions={me}ct(commit),{fwd}"
        )];
        for a in addrs {
            v.push(format!(
                "{c},table=0,priority=200,ip,nw_dst={a},actions=ct(table={t})"
            ));
            for st in ["+trk+est", "+trk+rel"] {
                v.push(format!(
                    "{c},table={t},priority=300,ip,nw_dst={a},ct_state={st},actions={mi}normal"
                ));
            }
            for r in &self.ingress {
                let srcs: Vec<Option<Net4>> = if r.from_given {
                    r.from.iter().copied().map(Some).collect()
                } else {
                    vec![None]
                };
                let ports: Vec<Option<PortSel>> = if r.ports.is_empty() {
                    vec![None]
                } else {
                    r.ports.iter().copied().map(Some).collect()
                };
                for s in &srcs {
                    for p in &ports {
                        let proto = match p {
                            None => "ip".to_string(),
                            Some(PortSel {
                                proto: Proto::Tcp, ..
                            }) => "tcp".to_string(),
                            Some(PortSel {
                                proto: Proto::Udp, ..
                            }) => "udp".to_string(),
                        };
                        let mut mt = format!("{proto},nw_dst={a},ct_state=+trk+new");
                        if let Some(s) = s {
                            mt.push_str(&format!(",nw_src={s}"));
                        }
                        if let Some(PortSel { port: Some(n), .. }) = p {
                            mt.push_str(&format!(",tp_dst={n}"));
                        }
                        v.push(format!(
                            "{c},table={t},priority=200,{mt},actions={mi}ct(commit),normal"
                        ));
                    }
                }
            }
            v.push(format!(
                "{c},table={t},priority=100,ip,nw_dst={a},actions=drop"
            ));
        }
        v
    }
}

/// The cookie of one attachment (network, container, interface): FNV-1a,
/// so DEL finds it again without a record; never 0 (the bridge's own
/// rules) and tagged `0xcf` in the top byte to make CNI rules stand out
/// in `dump-flows`.
pub fn cookie(network: &str, container_id: &str, ifname: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{network}\0{container_id}\0{ifname}").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h & 0x00ff_ffff_ffff_ffff) | 0xcf00_0000_0000_0000
}

/// The `del-flows`/`dump-flows` filter that selects exactly `cookie`.
pub fn cookie_filter(cookie: u64) -> String {
    format!("cookie={cookie:#x}/{:#x}", u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn n(s: &str) -> Net4 {
        parse_net("x", &json!(s)).unwrap()
    }

    #[test]
    fn except_is_subtracted_into_prefixes() {
        let v = subtract(n("198.18.0.0/16"), &[n("198.18.5.0/24")]);
        assert_eq!(v.len(), 8);
        assert!(v.iter().all(|p| !p.overlaps(&n("198.18.5.0/24"))));
        let size: u64 = v.iter().map(|p| 1u64 << (32 - p.len)).sum();
        assert_eq!(size, 65536 - 256);
        assert_eq!(subtract(n("198.18.1.0/24"), &[]), [n("198.18.1.0/24")]);
        assert_eq!(n("198.18.1.7/24").to_string(), "198.18.1.0/24");
    }

    #[test]
    fn parses_and_names_bad_fields() {
        let p = json!({"ingress":[{"from":[{"ipBlock":{"cidr":"198.19.0.0/16","except":["198.19.9.0/24"]}}],
                        "ports":[{"protocol":"TCP","port":8080},{"protocol":"udp"}]}]});
        let p = Policy::from_conf(Some(&p), None).unwrap().unwrap();
        assert_eq!(p.ingress[0].ports.len(), 2);
        assert!(p.ingress[0].from.len() > 1);
        let f = p.flows(
            0xcf01,
            "br0pf0vf0",
            &["198.19.50.2".parse().unwrap()],
            &Meters::default(),
            "normal",
        );
        assert!(f.iter().all(|l| l.starts_with("cookie=0xcf01,")), "{f:?}");
        assert!(
            f.iter().any(|l| l.contains(
                "tcp,nw_dst=198.19.50.2,ct_state=+trk+new,nw_src=198.19.0.0/21,tp_dst=8080"
            )),
            "{f:?}"
        );
        for (bad, field) in [
            (json!({"egress":[]}), "policy.egress"),
            (
                json!({"ingress":[{"from":[{"podSelector":{}}]}]}),
                "policy.ingress[0].from[0].podSelector",
            ),
            (
                json!({"ingress":[{"from":[{"ipBlock":{"cidr":"2001:db8::/32"}}]}]}),
                "policy.ingress[0].from[0].ipBlock.cidr",
            ),
            (
                json!({"ingress":[{"from":[{"ipBlock":{"cidr":"198.19.0.0/16","except":["198.20.0.0/24"]}}]}]}),
                "policy.ingress[0].from[0].ipBlock.except[0]",
            ),
            (
                json!({"ingress":[{"ports":[{"port":"http"}]}]}),
                "policy.ingress[0].ports[0].port",
            ),
            (
                json!({"ingress":[{"ports":[{"protocol":"SCTP"}]}]}),
                "policy.ingress[0].ports[0].protocol",
            ),
            (json!({"ingress":{}}), "policy.ingress"),
        ] {
            let e = Policy::from_conf(Some(&bad), None).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains(&format!("`{field}`")), "{field}: {e}");
        }
        // With meters, rules into the pod name the ingress meter, the one
        // out of it the egress meter.
        let m = Meters {
            ingress: Some(5),
            egress: Some(6),
        };
        let f = p.flows(1, "r", &["198.19.50.2".parse().unwrap()], &m, "normal");
        assert!(f[0].ends_with("actions=meter:6,ct(commit),normal"), "{f:?}");
        let allow = f.iter().filter(|l| l.contains("actions=meter:5,")).count();
        assert_eq!(allow, f.len() - 3, "{f:?}");
        // runtimeConfig wins over the network's policy.
        let rt = json!({"networkPolicy":{"ingress":[]}});
        let p = Policy::from_conf(Some(&json!({"ingress":[{}]})), Some(&rt))
            .unwrap()
            .unwrap();
        assert!(p.ingress.is_empty());
    }

    #[test]
    fn cookies_differ_per_attachment() {
        let a = cookie("net", "pod1", "eth0");
        assert_ne!(a, cookie("net", "pod1", "net1"));
        assert_ne!(a, cookie("net2", "pod1", "eth0"));
        assert_eq!(a >> 56, 0xcf);
        assert_eq!(cookie_filter(0xcf01), "cookie=0xcf01/0xffffffffffffffff");
    }
}
