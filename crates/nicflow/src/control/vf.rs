//! The SmartNIC device model: VFs and their representors, as veth pairs.
//!
//! `nicflow add-vf BR NAMESPACE` plays what a switchdev NIC does when a VF is
//! handed to a container: one end of a veth pair (the *VF*) moves into the
//! container's network namespace with its MAC and addresses; the other end
//! (the *representor*) stays in the daemon's namespace and becomes a port of
//! bridge `BR`, so every frame the container sends passes the switch.
//!
//! Names, all deterministic:
//! - VF index: the lowest index (0..=[`MAX_VF_INDEX`]) not used by another VF
//!   of the bridge.
//! - VF interface (inside the container): `--name`, default `vf<N>`. VF names
//!   are unique per bridge and namespace (they name the VF for `del-vf`;
//!   a name that repeats across namespaces needs the representor).
//! - Representor (daemon side, also the bridge port name):
//!   `<tag>pf0vf<N>` like an mlx5 switchdev representor, where `<tag>` is
//!   the bridge name when it has at most 6 characters of `[A-Za-z0-9_-]`,
//!   else `h` plus 6 hex digits of the bridge name's FNV-1a hash (7
//!   characters, so the two forms never meet). The name ends in
//!   `pf0vf<digits>` and `pf0vf` has no self-overlap, so `<tag>` and `N` are
//!   recovered from the name: two bridges with literal tags never collide;
//!   two long names whose hashes collide are refused at `add-vf` with a
//!   clear error. At most 15 characters (IFNAMSIZ - 1).
//! - MAC default: `02:hh:hh:hh:ii:ii`, locally administered unicast, with
//!   `hh` the low 24 bits of the bridge name's FNV-1a hash and `ii` the
//!   index.
//!
//! The system side is the OS layer's ([`crate::os`], netlink): the pair is
//! created from the daemon's namespace with the VF end placed straight
//! into the container's (`IFLA_NET_NS_FD`), and the VF end is configured
//! over a netlink socket opened inside that namespace.

use super::config::{PortType, VfConfig};
use crate::os::{self, link::VethEnd, netlink::Rtnl, OsError};
use std::net::IpAddr;

/// The highest VF index (keeps `<tag>pf0vf<N>` within 15 characters).
pub const MAX_VF_INDEX: u32 = 999;

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;

#[derive(Debug, thiserror::Error)]
pub enum VfError {
    #[error("bad MAC address `{0}`: expected six hex octets like 02:00:00:00:00:01 (unicast, not all zero)")]
    BadMac(String),
    #[error("bad address `{token}`: {reason}")]
    BadPrefix { token: String, reason: String },
    #[error("bad {what} `{token}`: {reason}")]
    BadName {
        what: &'static str,
        token: String,
        reason: String,
    },
    #[error(
        "unknown network namespace `{0}` (no /run/netns/{0}; create it with `ip netns add {0}`)"
    )]
    UnknownNamespace(String),
    #[error("unknown representor type `{0}` (afxdp, afpacket)")]
    BadRepType(String),
    #[error("{0}")]
    Duplicate(String),
    #[error("bridge {0} has no free VF index (0..={MAX_VF_INDEX} are used)")]
    NoFreeIndex(String),
    #[error("{0}")]
    System(#[from] OsError),
}

/// A validated `add-vf` request (before the index is chosen).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfSpec {
    pub namespace: String,
    pub name: Option<String>,
    pub mac: Option<[u8; 6]>,
    /// Canonical `ADDRESS/PREFIX` strings.
    pub ips: Vec<String>,
    pub rep_type: PortType,
}

impl VfSpec {
    /// Check every token of an `add-vf` request; the first bad one is named
    /// in the error. Does not look at the system (see [`namespace_exists`]).
    pub fn parse(
        namespace: &str,
        name: Option<&str>,
        mac: Option<&str>,
        ips: &[String],
        rep_type: Option<&str>,
    ) -> Result<VfSpec, VfError> {
        check_namespace_name(namespace)?;
        if let Some(n) = name {
            check_ifname(n, "VF name")?;
        }
        let mac = mac.map(parse_mac).transpose()?;
        let ips = ips
            .iter()
            .map(|s| parse_prefix(s).map(|(a, p)| format!("{a}/{p}")))
            .collect::<Result<Vec<_>, _>>()?;
        let rep_type = match rep_type.unwrap_or("auto") {
            "auto" => PortType::Auto,
            "tc" => PortType::Tc,
            "afxdp" => PortType::Afxdp,
            "afpacket" => PortType::Afpacket,
            other => return Err(VfError::BadRepType(other.to_string())),
        };
        Ok(VfSpec {
            namespace: namespace.to_string(),
            name: name.map(str::to_string),
            mac,
            ips,
            rep_type,
        })
    }
}

fn fnv1a(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The bridge part of representor names (see the module docs).
pub fn bridge_tag(bridge: &str) -> String {
    let literal = !bridge.is_empty()
        && bridge.len() <= 6
        && bridge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if literal {
        bridge.to_string()
    } else {
        format!("h{:06x}", fnv1a(bridge) & 0xff_ffff)
    }
}

/// `<tag>pf0vf<N>`: the representor interface (and bridge port) name.
pub fn representor_name(bridge: &str, index: u32) -> String {
    format!("{}pf0vf{index}", bridge_tag(bridge))
}

/// `vf<N>`: the default VF interface name.
pub fn default_vf_name(index: u32) -> String {
    format!("vf{index}")
}

/// `02:hh:hh:hh:ii:ii`: the default VF MAC.
pub fn default_mac(bridge: &str, index: u32) -> [u8; 6] {
    let h = fnv1a(bridge).to_be_bytes();
    let i = (index as u16).to_be_bytes();
    [0x02, h[1], h[2], h[3], i[0], i[1]]
}

pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Six `:`-separated hex octets; unicast and not all zero.
pub fn parse_mac(s: &str) -> Result<[u8; 6], VfError> {
    let bad = || VfError::BadMac(s.to_string());
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut m = [0u8; 6];
    for (o, p) in m.iter_mut().zip(&parts) {
        if p.is_empty() || p.len() > 2 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        *o = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if m[0] & 1 != 0 || m == [0; 6] {
        return Err(bad());
    }
    Ok(m)
}

/// `ADDRESS/PREFIX`, IPv4 or IPv6.
pub fn parse_prefix(s: &str) -> Result<(IpAddr, u8), VfError> {
    let bad = |reason: &str| VfError::BadPrefix {
        token: s.to_string(),
        reason: reason.to_string(),
    };
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| bad("expected ADDRESS/PREFIX, e.g. 198.18.40.1/24"))?;
    let addr: IpAddr = a.parse().map_err(|_| bad("not an IPv4 or IPv6 address"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let plen: u8 = p
        .parse()
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| bad(&format!("prefix length must be 0..={max}")))?;
    if addr.is_unspecified() || addr.is_multicast() {
        return Err(bad("not a unicast address"));
    }
    Ok((addr, plen))
}

/// A name Linux accepts for an interface.
pub fn check_ifname(s: &str, what: &'static str) -> Result<(), VfError> {
    let bad = |reason: &str| VfError::BadName {
        what,
        token: s.to_string(),
        reason: reason.to_string(),
    };
    if s.is_empty() || s.len() > IFNAME_MAX {
        return Err(bad("interface names have 1 to 15 bytes"));
    }
    if s == "." || s == ".." || s.bytes().any(|b| b == b'/' || b == b':' || b <= b' ') {
        return Err(bad("no `/`, `:`, spaces or control characters"));
    }
    Ok(())
}

/// An `ip netns` name (a file in /run/netns).
pub fn check_namespace_name(s: &str) -> Result<(), VfError> {
    if s.is_empty()
        || s == "."
        || s == ".."
        || s.len() > 255
        || s.bytes().any(|b| b == b'/' || b <= b' ')
    {
        return Err(VfError::BadName {
            what: "namespace",
            token: s.to_string(),
            reason: "expected an `ip netns` name".into(),
        });
    }
    Ok(())
}

pub fn namespace_exists(ns: &str) -> bool {
    os::netns::exists(ns)
}

/// Whether interface `name` exists in `ns` (`None`: the daemon's own); a
/// namespace that cannot be entered has none.
pub fn link_exists(ns: Option<&str>, name: &str) -> bool {
    Rtnl::open(ns)
        .and_then(|mut rt| os::link::exists(&mut rt, name))
        .unwrap_or(false)
}

/// The interface alias that marks a representor as ours.
fn alias(bridge: &str, vf: &VfConfig) -> String {
    format!("nicflow bridge {bridge} vf {} rep", vf.name)
}

/// Create the veth pair of `vf` and configure both ends. On failure nothing
/// is left behind.
pub fn create_pair(bridge: &str, vf: &VfConfig) -> Result<(), VfError> {
    let vf_end = VethEnd {
        name: vf.name.clone(),
        mtu: None,
        mac: Some(os::link::parse_mac(&vf.mac)?),
        netns: Some(vf.namespace.clone()),
        queues: None,
    };
    let mut rt = Rtnl::open(None)?;
    os::link::add_veth(&mut rt, &VethEnd::named(&vf.representor), &vf_end)?;
    let configured = configure(bridge, vf);
    if configured.is_err() {
        delete_pair(&vf.representor);
    }
    configured
}

fn configure(bridge: &str, vf: &VfConfig) -> Result<(), VfError> {
    let ns = Some(vf.namespace.as_str());
    let dev = vf.name.as_str();
    // NAPI on the VF end, so frames the XDP engine redirects into the
    // representor are delivered (veth_xdp_xmit drops them otherwise).
    if let Err(e) = os::ethtool::set(ns, dev, os::ethtool::is_gro, true) {
        tracing::warn!("{dev}: could not turn GRO on ({e}); flows into it stay in userspace");
    }
    let mut rt = Rtnl::open(ns)?;
    for a in &vf.ips {
        let (addr, prefix) = os::addr::parse_cidr(a)?;
        // IPv6 usable at once: no duplicate address detection.
        os::addr::add(&mut rt, dev, addr, prefix, addr.is_ipv6())?;
    }
    os::link::set_up(&mut rt, dev)?;
    prepare_representor(bridge, vf)
}

/// The daemon side: silent (no IPv6 of its own), labelled, up.
pub fn prepare_representor(bridge: &str, vf: &VfConfig) -> Result<(), VfError> {
    let rep = vf.representor.as_str();
    let key = format!("net.ipv6.conf.{rep}.disable_ipv6");
    if let Err(e) = os::sysctl::write(None, &key, "1") {
        tracing::debug!("{e} (ignored: IPv6 may be off)");
    }
    let mut rt = Rtnl::open(None)?;
    os::link::set_alias(&mut rt, rep, &alias(bridge, vf))?;
    os::link::set_up(&mut rt, rep)?;
    Ok(())
}

/// Delete a veth pair by its representor (the peer goes with it); a pair
/// that is already gone is fine.
pub fn delete_pair(representor: &str) {
    let deleted = Rtnl::open(None).and_then(|mut rt| os::link::del(&mut rt, representor));
    if let Err(e) = deleted {
        if !e.is_missing() {
            tracing::warn!("deleting {representor}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn representor_names_fit_and_do_not_collide() {
        assert_eq!(representor_name("br0", 0), "br0pf0vf0");
        assert_eq!(representor_name("br-1_a", 999), "br-1_apf0vf999");
        let long = representor_name("a-rather-long-bridge", 999);
        assert!(long.starts_with('h') && long.ends_with("pf0vf999"));
        assert_eq!(long.len(), 15);
        assert_eq!(long, representor_name("a-rather-long-bridge", 999));
        // Too long or odd characters: hashed (7 characters).
        assert_eq!(bridge_tag("bridge7").len(), 7);
        assert_eq!(bridge_tag("br.0").len(), 7);
        assert_ne!(bridge_tag("bridge7"), bridge_tag("bridge8"));
        // Literal tags with overlapping spellings stay apart.
        let mut seen = std::collections::BTreeSet::new();
        for br in ["a", "ap", "apf0", "apf0vf", "apf0v1", "br0", "br01", "b"] {
            for i in [0, 1, 10, 11, 110, 999] {
                let n = representor_name(br, i);
                assert!(n.len() <= IFNAME_MAX, "{n}");
                assert!(seen.insert(n.clone()), "{n} twice");
            }
        }
        assert_eq!(default_vf_name(3), "vf3");
    }

    #[test]
    fn default_macs_are_local_unicast_and_distinct() {
        let m = default_mac("br0", 0);
        assert_eq!(m[0], 0x02);
        assert_eq!(default_mac("br0", 0), m);
        assert_ne!(default_mac("br0", 1), m);
        assert_ne!(default_mac("br1", 0), m);
        assert_eq!(default_mac("br0", 258)[4..], [1, 2]);
        assert_eq!(parse_mac(&format_mac(&m)).unwrap(), m);
    }

    #[test]
    fn macs_parse_and_bad_ones_are_named() {
        assert_eq!(
            parse_mac("02:00:0a:BB:cc:1").unwrap(),
            [2, 0, 0x0a, 0xbb, 0xcc, 1]
        );
        for bad in [
            "02:zz:00:00:00:01",
            "02:00:00:00:00",
            "02:00:00:00:00:00:01",
            "01:00:00:00:00:01",
            "00:00:00:00:00:00",
            "02:000:00:00:00:01",
            "",
        ] {
            let e = parse_mac(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn prefixes_v4_and_v6() {
        assert_eq!(
            parse_prefix("198.18.40.1/24").unwrap(),
            ("198.18.40.1".parse().unwrap(), 24)
        );
        assert_eq!(
            parse_prefix("2001:db8::1/64").unwrap(),
            ("2001:db8::1".parse().unwrap(), 64)
        );
        for bad in [
            "198.18.40.1",
            "198.18.40.1/33",
            "2001:db8::1/129",
            "198.18.400.1/24",
            "198.18.40.1/x",
            "0.0.0.0/0",
            "ff02::1/64",
        ] {
            let e = parse_prefix(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn option_parsing() {
        let s = VfSpec::parse(
            "c1",
            Some("eth0"),
            Some("02:00:00:00:40:01"),
            &["198.18.40.1/24".into(), "2001:db8:40:0:0::1/64".into()],
            Some("afpacket"),
        )
        .unwrap();
        assert_eq!(s.namespace, "c1");
        assert_eq!(s.name.as_deref(), Some("eth0"));
        assert_eq!(s.mac, Some([2, 0, 0, 0, 0x40, 1]));
        assert_eq!(s.ips, ["198.18.40.1/24", "2001:db8:40::1/64"]);
        assert_eq!(s.rep_type, PortType::Afpacket);
        let d = VfSpec::parse("c1", None, None, &[], None).unwrap();
        assert_eq!(d.rep_type, PortType::Auto);
        assert!(d.name.is_none() && d.mac.is_none() && d.ips.is_empty());

        let err = |r: Result<VfSpec, VfError>| r.unwrap_err().to_string();
        assert!(err(VfSpec::parse("a/b", None, None, &[], None)).contains("`a/b`"));
        assert!(err(VfSpec::parse(
            "c1",
            Some("way-too-long-name"),
            None,
            &[],
            None
        ))
        .contains("`way-too-long-name`"));
        assert!(err(VfSpec::parse("c1", Some("a:b"), None, &[], None)).contains("`a:b`"));
        assert!(
            err(VfSpec::parse("c1", None, Some("02:zz:0:0:0:1"), &[], None))
                .contains("`02:zz:0:0:0:1`")
        );
        assert!(err(VfSpec::parse(
            "c1",
            None,
            None,
            &["1.2.3.4/40".into()],
            None
        ))
        .contains("`1.2.3.4/40`"));
        assert!(err(VfSpec::parse("c1", None, None, &[], Some("tap"))).contains("`tap`"));
    }
}
