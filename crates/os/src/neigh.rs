//! The neighbour table over rtnetlink (what `ip neigh show` reads).

use super::netlink::Rtnl;
use super::{link, Result};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::net::IpAddr;

fn family(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

fn neigh_addr(ip: IpAddr) -> NeighbourAddress {
    match ip {
        IpAddr::V4(a) => NeighbourAddress::Inet(a),
        IpAddr::V6(a) => NeighbourAddress::Inet6(a),
    }
}

/// Pin `ip` to link-layer address `lladdr` on `dev` (`ip neigh replace IP
/// lladdr MAC dev DEV nud permanent`): created or overwritten, never
/// aged out or re-resolved.
pub fn replace_permanent(rt: &mut Rtnl, dev: &str, ip: IpAddr, lladdr: [u8; 6]) -> Result<()> {
    let index = link::index(rt, dev)?;
    let mut m = NeighbourMessage::default();
    m.header.family = family(ip);
    m.header.ifindex = index;
    m.header.state = NeighbourState::Permanent;
    m.attributes
        .push(NeighbourAttribute::Destination(neigh_addr(ip)));
    m.attributes
        .push(NeighbourAttribute::LinkLayerAddress(lladdr.to_vec()));
    rt.request(
        "RTM_NEWNEIGH",
        &format!("{ip} dev {dev}"),
        RouteNetlinkMessage::NewNeighbour(m),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
    .map(drop)
}

/// The link-layer address the kernel has for `ip` on interface `dev`, if it
/// has one (an entry still resolving or failed has none; `noarp` entries
/// are left out, as `ip neigh show` does).
pub fn lookup(rt: &mut Rtnl, dev: &str, ip: IpAddr) -> Result<Option<Vec<u8>>> {
    let index = link::index(rt, dev)?;
    let mut m = NeighbourMessage::default();
    m.header.family = family(ip);
    let replies = rt.dump(
        "RTM_GETNEIGH",
        &format!("{ip} dev {dev}"),
        RouteNetlinkMessage::GetNeighbour(m),
    )?;
    let want = neigh_addr(ip);
    Ok(replies.into_iter().find_map(|r| {
        let RouteNetlinkMessage::NewNeighbour(n) = r else {
            return None;
        };
        if n.header.ifindex != index || n.header.state == NeighbourState::Noarp {
            return None;
        }
        let mut dst = None;
        let mut lladdr = None;
        for a in n.attributes {
            match a {
                NeighbourAttribute::Destination(d) => dst = Some(d),
                NeighbourAttribute::LinkLayerAddress(l) => lladdr = Some(l),
                _ => {}
            }
        }
        (dst.as_ref() == Some(&want)).then_some(lladdr).flatten()
    }))
}
