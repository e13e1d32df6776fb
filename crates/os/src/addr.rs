//! Interface addresses over rtnetlink (`ip addr add`).

use super::netlink::Rtnl;
use super::{link, OsError, Result};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::net::IpAddr;

/// Add `addr/prefix` to interface `dev` (`ip addr add ADDR/PREFIX dev DEV
/// [nodad]`). `nodad` skips IPv6 duplicate address detection, so the
/// address is usable at once instead of "tentative" for a second or two.
///
/// # Errors
/// `EEXIST` if the interface has the address already; `ENODEV` if there
/// is no such interface.
pub fn add(rt: &mut Rtnl, dev: &str, addr: IpAddr, prefix: u8, nodad: bool) -> Result<()> {
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return Err(OsError::Invalid {
            what: "prefix length",
            value: prefix.to_string(),
            why: format!("at most {max} for {addr}"),
        });
    }
    let index = link::index(rt, dev)?;
    let mut m = AddressMessage::default();
    m.header.family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.prefix_len = prefix;
    m.header.index = index;
    if nodad {
        m.header.flags = AddressHeaderFlags::Nodad;
    }
    // As iproute2: IFA_LOCAL is the address, IFA_ADDRESS the same (no peer).
    m.attributes.push(AddressAttribute::Local(addr));
    m.attributes.push(AddressAttribute::Address(addr));
    rt.request(
        "RTM_NEWADDR",
        &format!("{addr}/{prefix} dev {dev}"),
        RouteNetlinkMessage::NewAddress(m),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .map(drop)
}

/// The addresses of interface `dev`, both families, as `(address,
/// prefix)` in the kernel's order (what `ip addr show dev DEV` lists as
/// `local`/`prefixlen`).
pub fn list(rt: &mut Rtnl, dev: &str) -> Result<Vec<(IpAddr, u8)>> {
    let index = link::index(rt, dev)?;
    let replies = rt.dump(
        "RTM_GETADDR",
        &format!("dev {dev}"),
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
    )?;
    Ok(replies
        .into_iter()
        .filter_map(|r| match r {
            RouteNetlinkMessage::NewAddress(m) if m.header.index == index => {
                let mut local = None;
                let mut address = None;
                for a in &m.attributes {
                    match a {
                        AddressAttribute::Local(ip) => local = Some(*ip),
                        AddressAttribute::Address(ip) => address = Some(*ip),
                        _ => {}
                    }
                }
                local.or(address).map(|ip| (ip, m.header.prefix_len))
            }
            _ => None,
        })
        .collect())
}

/// Parse `ADDRESS/PREFIX`.
pub fn parse_cidr(s: &str) -> Result<(IpAddr, u8)> {
    let bad = |why: &str| OsError::Invalid {
        what: "address",
        value: s.to_string(),
        why: why.to_string(),
    };
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| bad("expected ADDRESS/PREFIX"))?;
    let a: IpAddr = a.parse().map_err(|_| bad("not an IP address"))?;
    let p: u8 = p.parse().map_err(|_| bad("bad prefix length"))?;
    if p > if a.is_ipv4() { 32 } else { 128 } {
        return Err(bad("prefix length too long"));
    }
    Ok((a, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse() {
        assert_eq!(
            parse_cidr("198.18.0.1/24").unwrap(),
            ("198.18.0.1".parse().unwrap(), 24)
        );
        assert_eq!(
            parse_cidr("2001:db8::1/64").unwrap(),
            ("2001:db8::1".parse().unwrap(), 64)
        );
        for bad in ["198.18.0.1", "198.18.0.1/33", "x/24", "2001:db8::1/129"] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
    }
}
