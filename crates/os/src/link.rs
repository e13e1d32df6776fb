//! Network interfaces over rtnetlink: look up, list, create veth pairs,
//! bring up, label, delete. Interfaces are named, not numbered, in every
//! request (the kernel resolves `IFLA_IFNAME` itself), so an error names
//! the interface the caller asked about.

use super::netlink::{NsFd, Rtnl};
use super::{check_ifname, OsError, Result};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, InfoVxlan, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use std::net::IpAddr;

/// A link addressed by name (`ifi_index` 0, `IFLA_IFNAME`).
fn by_name(name: &str) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_string()));
    m
}

/// What [`get`] tells about one interface.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    pub index: u32,
    pub mtu: Option<u32>,
    /// `IFLA_INFO_KIND` (`veth`, `vxlan`, ...), if the link has one.
    pub kind: Option<String>,
    /// Whether the link's peer (veth) or lower device is in another
    /// namespace (`IFLA_LINK_NETNSID` present).
    pub link_netnsid: Option<i32>,
    pub up: bool,
    /// The link-layer address (`IFLA_ADDRESS`), if it has one.
    pub address: Option<Vec<u8>>,
    /// The bridge or bond it is enslaved to (`IFLA_MASTER`), by index.
    pub master: Option<u32>,
    /// Its 64-bit counters (`IFLA_STATS64`: what `ip -s link` prints).
    pub stats: Option<LinkStats>,
}

/// The counters of [`Link::stats`] that measurements read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_dropped: u64,
}

fn parse(m: &LinkMessage) -> Link {
    let mut l = Link {
        index: m.header.index,
        up: m.header.flags.contains(LinkFlags::Up),
        ..Link::default()
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => l.name = n.clone(),
            LinkAttribute::Mtu(v) => l.mtu = Some(*v),
            LinkAttribute::Address(a) => l.address = Some(a.clone()),
            LinkAttribute::Controller(i) => l.master = Some(*i),
            LinkAttribute::Stats64(s) => {
                l.stats = Some(LinkStats {
                    rx_packets: s.rx_packets,
                    rx_bytes: s.rx_bytes,
                    rx_dropped: s.rx_dropped,
                    tx_packets: s.tx_packets,
                    tx_bytes: s.tx_bytes,
                    tx_dropped: s.tx_dropped,
                })
            }
            LinkAttribute::LinkNetNsId(id) => l.link_netnsid = Some(*id),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        l.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    l
}

/// Interface `name` (`RTM_GETLINK`).
///
/// # Errors
/// `ENODEV` ([`OsError::is_missing`]) if there is none.
pub fn get(rt: &mut Rtnl, name: &str) -> Result<Link> {
    check_ifname(name)?;
    let target = format!("dev {name}");
    let replies = rt.request(
        "RTM_GETLINK",
        &target,
        RouteNetlinkMessage::GetLink(by_name(name)),
        0,
    )?;
    replies
        .iter()
        .find_map(|r| match r {
            RouteNetlinkMessage::NewLink(m) => Some(parse(m)),
            _ => None,
        })
        .ok_or_else(|| OsError::Reply {
            op: "RTM_GETLINK",
            target,
            why: "no RTM_NEWLINK in the answer".into(),
        })
}

/// The index of interface `name`.
pub fn index(rt: &mut Rtnl, name: &str) -> Result<u32> {
    get(rt, name).map(|l| l.index)
}

/// Whether interface `name` exists; errors other than "no such device"
/// are errors.
pub fn exists(rt: &mut Rtnl, name: &str) -> Result<bool> {
    match get(rt, name) {
        Ok(_) => Ok(true),
        Err(e) if e.is_missing() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Every interface of the socket's namespace, in index order.
pub fn list(rt: &mut Rtnl) -> Result<Vec<Link>> {
    let replies = rt.dump(
        "RTM_GETLINK",
        "dump",
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
    )?;
    let mut out: Vec<Link> = replies
        .iter()
        .filter_map(|r| match r {
            RouteNetlinkMessage::NewLink(m) => Some(parse(m)),
            _ => None,
        })
        .collect();
    out.sort_by_key(|l| l.index);
    Ok(out)
}

/// One end of a veth pair to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VethEnd {
    pub name: String,
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
    /// Created directly in this namespace (`/run/netns/NAME`); `None`: the
    /// socket's own.
    pub netns: Option<String>,
    /// Number of TX and of RX queues (`numtxqueues N numrxqueues N`);
    /// `None`: the kernel's default (one each).
    pub queues: Option<u32>,
}

impl VethEnd {
    pub fn named(name: &str) -> VethEnd {
        VethEnd {
            name: name.to_string(),
            ..VethEnd::default()
        }
    }

    fn attributes(&self, fd: Option<&NsFd>) -> Vec<LinkAttribute> {
        let mut v = vec![LinkAttribute::IfName(self.name.clone())];
        if let Some(m) = self.mtu {
            v.push(LinkAttribute::Mtu(m));
        }
        if let Some(mac) = self.mac {
            v.push(LinkAttribute::Address(mac.to_vec()));
        }
        if let Some(fd) = fd {
            v.push(LinkAttribute::NetNsFd(fd.raw()));
        }
        if let Some(q) = self.queues {
            v.push(LinkAttribute::NumTxQueues(q));
            v.push(LinkAttribute::NumRxQueues(q));
        }
        v
    }
}

/// Create veth pair `a`—`b`, each end in its own namespace with its MTU,
/// MAC and queue count (`ip link add A [mtu M] [netns X] [numtxqueues Q
/// numrxqueues Q] type veth peer name B [address MAC] [mtu M] [netns Y]
/// ...`). Both ends start down.
///
/// # Errors
/// `EEXIST` ([`OsError::is_exists`]) if a name is taken in its namespace.
pub fn add_veth(rt: &mut Rtnl, a: &VethEnd, b: &VethEnd) -> Result<()> {
    check_ifname(&a.name)?;
    check_ifname(&b.name)?;
    let fd_a = a.netns.as_deref().map(NsFd::open).transpose()?;
    let fd_b = b.netns.as_deref().map(NsFd::open).transpose()?;
    let mut peer = LinkMessage::default();
    peer.attributes = b.attributes(fd_b.as_ref());
    let mut m = LinkMessage::default();
    m.attributes = a.attributes(fd_a.as_ref());
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
    ]));
    rt.request(
        "RTM_NEWLINK",
        &format!("veth {} peer {}", a.name, b.name),
        RouteNetlinkMessage::NewLink(m),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .map(drop)
}

/// Create a Linux bridge `name` (`ip link add NAME type bridge`), down.
pub fn add_bridge(rt: &mut Rtnl, name: &str) -> Result<()> {
    check_ifname(name)?;
    let mut m = by_name(name);
    m.attributes
        .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
            InfoKind::Bridge,
        )]));
    rt.request(
        "RTM_NEWLINK",
        &format!("bridge {name}"),
        RouteNetlinkMessage::NewLink(m),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .map(drop)
}

/// A VXLAN device to create with [`add_vxlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vxlan {
    pub name: String,
    /// The VNI (`id`).
    pub vni: u32,
    /// Source address of the encapsulated packets (`local`).
    pub local: IpAddr,
    /// The one peer (`remote`, unicast).
    pub remote: IpAddr,
    /// UDP destination port (`dstport`; 4789 is IANA's).
    pub port: u16,
    /// The underlay device (`dev`); `None`: whatever the route lookup of
    /// each packet finds.
    pub dev: Option<String>,
}

/// Create VXLAN device `v` (`ip link add NAME type vxlan id VNI local L
/// remote R dstport P [dev D]`), down. Both addresses must be of one
/// family.
pub fn add_vxlan(rt: &mut Rtnl, v: &Vxlan) -> Result<()> {
    check_ifname(&v.name)?;
    let mut data = vec![InfoVxlan::Id(v.vni)];
    match (v.local, v.remote) {
        (IpAddr::V4(l), IpAddr::V4(r)) => {
            data.push(InfoVxlan::Group(r));
            data.push(InfoVxlan::Local(l));
        }
        (IpAddr::V6(l), IpAddr::V6(r)) => {
            data.push(InfoVxlan::Group6(r));
            data.push(InfoVxlan::Local6(l));
        }
        _ => {
            return Err(OsError::Invalid {
                what: "vxlan addresses",
                value: format!("local {} remote {}", v.local, v.remote),
                why: "local and remote must be of one family".into(),
            })
        }
    }
    if let Some(dev) = &v.dev {
        data.push(InfoVxlan::Link(index(rt, dev)?));
    }
    data.push(InfoVxlan::Port(v.port));
    let mut m = by_name(&v.name);
    m.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Vxlan),
        LinkInfo::Data(InfoData::Vxlan(data)),
    ]));
    rt.request(
        "RTM_NEWLINK",
        &format!("vxlan {}", v.name),
        RouteNetlinkMessage::NewLink(m),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .map(drop)
}

/// Enslave `name` to bridge `master` (`ip link set NAME master MASTER`).
pub fn set_master(rt: &mut Rtnl, name: &str, master: &str) -> Result<()> {
    let index = self::index(rt, master)?;
    let mut m = by_name(name);
    m.attributes.push(LinkAttribute::Controller(index));
    set(rt, name, &format!("master {master}"), m)
}

fn set(rt: &mut Rtnl, name: &str, what: &str, m: LinkMessage) -> Result<()> {
    check_ifname(name)?;
    rt.request(
        "RTM_SETLINK",
        &format!("dev {name} {what}"),
        RouteNetlinkMessage::SetLink(m),
        0,
    )
    .map(drop)
}

/// `ip link set dev NAME up`.
pub fn set_up(rt: &mut Rtnl, name: &str) -> Result<()> {
    let mut m = by_name(name);
    m.header.flags = LinkFlags::Up;
    m.header.change_mask = LinkFlags::Up;
    set(rt, name, "up", m)
}

/// `ip link set dev NAME mtu MTU`.
pub fn set_mtu(rt: &mut Rtnl, name: &str, mtu: u32) -> Result<()> {
    let mut m = by_name(name);
    m.attributes.push(LinkAttribute::Mtu(mtu));
    set(rt, name, &format!("mtu {mtu}"), m)
}

/// `ip link set dev NAME alias ALIAS` (`IFLA_IFALIAS`): a label other tools
/// show, used to mark interfaces nicflow made.
pub fn set_alias(rt: &mut Rtnl, name: &str, alias: &str) -> Result<()> {
    let mut m = by_name(name);
    m.attributes.push(LinkAttribute::IfAlias(alias.to_string()));
    set(rt, name, "alias", m)
}

/// `ip link del dev NAME` (a veth's peer goes with it).
///
/// # Errors
/// `ENODEV` ([`OsError::is_missing`]) if it is already gone.
pub fn del(rt: &mut Rtnl, name: &str) -> Result<()> {
    check_ifname(name)?;
    rt.request(
        "RTM_DELLINK",
        &format!("dev {name}"),
        RouteNetlinkMessage::DelLink(by_name(name)),
        0,
    )
    .map(drop)
}

/// Parse `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let bad = || OsError::Invalid {
        what: "MAC address",
        value: s.to_string(),
        why: "expected six hex octets like 02:00:00:00:00:01".into(),
    };
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for o in &mut mac {
        let p = parts.next().ok_or_else(bad)?;
        if p.is_empty() || p.len() > 2 {
            return Err(bad());
        }
        *o = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_strictly() {
        assert_eq!(
            parse_mac("02:00:0a:ff:00:01").unwrap(),
            [2, 0, 10, 255, 0, 1]
        );
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "0x:00:00:00:00:01",
            "002:0:0:0:0:1",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_loopback_is_found_and_a_missing_link_is_missing() {
        let mut rt = Rtnl::open(None).unwrap();
        let lo = get(&mut rt, "lo").unwrap();
        assert_eq!(lo.index, 1);
        assert!(list(&mut rt).unwrap().iter().any(|l| l.name == "lo"));
        let e = get(&mut rt, "nfnosuchlink0").unwrap_err();
        assert!(e.is_missing(), "{e}");
        assert!(
            e.to_string().starts_with("RTM_GETLINK dev nfnosuchlink0: "),
            "{e}"
        );
        assert!(!exists(&mut rt, "nfnosuchlink0").unwrap());
    }
}
