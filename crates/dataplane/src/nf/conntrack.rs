//! Connection tracking as the switch uses it. The tracker itself is the
//! `nicflow-conntrack` crate (one per bridge, owned by the datapath and run
//! by its `ct` actions, see `datapath::ct`); this module holds what the
//! control plane needs on top: the `flush-conntrack` tuple syntax.

pub use nicflow_conntrack::{state, Conntrack, CtRequest, CtResult, FlushFilter};

use std::net::IpAddr;

/// `ct_nw_src=A,ct_nw_dst=B,ct_nw_proto=P,ct_tp_src=S,ct_tp_dst=D` (and
/// `ct_ipv6_src/dst`, `icmp_id`, `icmp_type`, `icmp_code`), the original
/// tuple of `ovs-appctl dpctl/flush-conntrack`; every given field must
/// match. An unknown key or bad value names the offending piece.
pub fn parse_flush_tuple(text: &str) -> Result<FlushFilter, String> {
    let mut f = FlushFilter::default();
    for piece in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = piece
            .split_once('=')
            .ok_or_else(|| format!("`{piece}`: want FIELD=VALUE"))?;
        let bad = |what: &str| format!("`{piece}`: {what}");
        match k {
            "ct_nw_src" | "ct_ipv6_src" => {
                f.src = Some(v.parse::<IpAddr>().map_err(|_| bad("not an IP address"))?)
            }
            "ct_nw_dst" | "ct_ipv6_dst" => {
                f.dst = Some(v.parse::<IpAddr>().map_err(|_| bad("not an IP address"))?)
            }
            "ct_nw_proto" => f.proto = Some(v.parse().map_err(|_| bad("want 0..=255"))?),
            "ct_tp_src" | "icmp_type" => {
                f.sport = Some(v.parse().map_err(|_| bad("want 0..=65535"))?)
            }
            "ct_tp_dst" | "icmp_code" => {
                f.dport = Some(v.parse().map_err(|_| bad("want 0..=65535"))?)
            }
            "icmp_id" => f.icmp_id = Some(v.parse().map_err(|_| bad("want 0..=65535"))?),
            _ => {
                return Err(bad(
                    "unknown tuple field (ct_nw_src, ct_nw_dst, ct_ipv6_src, ct_ipv6_dst, \
                     ct_nw_proto, ct_tp_src, ct_tp_dst, icmp_id, icmp_type, icmp_code)",
                ))
            }
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_tuple_parses_and_names_bad_pieces() {
        let f = parse_flush_tuple("ct_nw_src=198.18.0.1,ct_nw_proto=6,ct_tp_dst=80").unwrap();
        assert_eq!(f.src, Some("198.18.0.1".parse().unwrap()));
        assert_eq!(f.proto, Some(6));
        assert_eq!(f.dport, Some(80));
        let e = parse_flush_tuple("ct_nw_src=198.18.0.1,ct_tp_dst=99999").unwrap_err();
        assert!(e.contains("ct_tp_dst=99999"), "{e}");
        let e = parse_flush_tuple("bogus=1").unwrap_err();
        assert!(e.contains("bogus=1"), "{e}");
    }
}
