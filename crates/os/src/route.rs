//! Routes over rtnetlink (`ip route add`).

use super::netlink::Rtnl;
use super::{OsError, Result};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::net::IpAddr;

fn route_addr(a: IpAddr) -> RouteAddress {
    match a {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }
}

/// Add a route to `dst` (`None`: the default route) via gateway `via` in
/// the main table (`ip route add DST|default via VIA`), with iproute2's
/// defaults: protocol `boot`, scope universe, unicast.
///
/// # Errors
/// `EEXIST` if the route is there; `ENETUNREACH` if `via` is not on a
/// connected network.
pub fn add_via(rt: &mut Rtnl, dst: Option<(IpAddr, u8)>, via: IpAddr) -> Result<()> {
    add(rt, dst, Some(via), None)
}

/// Add a route to `dst` (`None`: the default route of `via`'s family) via
/// gateway `via` and/or out of interface `dev` (`ip route add DST [via
/// VIA] [dev DEV]`), as iproute2 would: main table, protocol `boot`,
/// unicast; scope universe with a gateway, link without one.
pub fn add(
    rt: &mut Rtnl,
    dst: Option<(IpAddr, u8)>,
    via: Option<IpAddr>,
    dev: Option<&str>,
) -> Result<()> {
    let family_of = dst.map(|d| d.0).or(via);
    let Some(family_ip) = family_of else {
        return Err(OsError::Invalid {
            what: "route",
            value: format!("default dev {}", dev.unwrap_or("?")),
            why: "a default route needs a gateway (its family)".into(),
        });
    };
    if let (Some((d, _)), Some(v)) = (dst, via) {
        if d.is_ipv4() != v.is_ipv4() {
            return Err(OsError::Invalid {
                what: "route",
                value: format!("{d} via {v}"),
                why: "destination and gateway of different families".into(),
            });
        }
    }
    let mut m = RouteMessage::default();
    m.header.address_family = if family_ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::Boot;
    m.header.scope = if via.is_some() {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    m.header.kind = RouteType::Unicast;
    if let Some((d, plen)) = dst {
        m.header.destination_prefix_length = plen;
        m.attributes
            .push(RouteAttribute::Destination(route_addr(d)));
    }
    if let Some(v) = via {
        m.attributes.push(RouteAttribute::Gateway(route_addr(v)));
    }
    if let Some(dev) = dev {
        let index = super::link::index(rt, dev)?;
        m.attributes.push(RouteAttribute::Oif(index));
    }
    let mut shown = match dst {
        Some((d, p)) => format!("{d}/{p}"),
        None => "default".to_string(),
    };
    if let Some(v) = via {
        shown.push_str(&format!(" via {v}"));
    }
    if let Some(dev) = dev {
        shown.push_str(&format!(" dev {dev}"));
    }
    rt.request(
        "RTM_NEWROUTE",
        &shown,
        RouteNetlinkMessage::NewRoute(m),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .map(drop)
}
