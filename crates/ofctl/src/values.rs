//! Field values as written in rules: numbers, MACs, IPv4/IPv6 addresses,
//! each optionally followed by `/mask`.
//!
//! These become the bits of a [`nicflow_flow::Match`], i.e. what the
//! classifier compares against every packet's key, so the parsing is strict
//! (no silent truncation: a value wider than its field is an error) and the
//! printing is canonical (a value always prints one way, so printing a rule
//! and reading it back gives the same rule).
//!
//! Conventions: numbers are decimal or `0x` hex; a value with no mask is an
//! exact match; an address mask is written as a prefix length (`/24`) or in
//! address form (`/255.255.0.255`); printing uses the prefix form whenever
//! the mask is a prefix and omits an all-ones mask.

use nicflow_flow::field::ValueKind;
use std::net::{Ipv4Addr, Ipv6Addr};

/// All-ones mask of `bits` bits.
pub(crate) fn full(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// A decimal or `0x`-hex unsigned number; `None` if malformed or over 128 bits.
pub(crate) fn parse_uint(s: &str) -> Option<u128> {
    let (digits, radix) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None => (s, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u128::from_str_radix(digits, radix).ok()
}

/// A number that must be at most `max`; `Err` holds the reason.
pub(crate) fn parse_max(s: &str, max: u128) -> Result<u128, String> {
    let v =
        parse_uint(s).ok_or_else(|| "value must be a number (decimal or 0x hex)".to_string())?;
    if v > max {
        return Err(if max > 0xffff {
            format!("value out of range 0..={max:#x}")
        } else {
            format!("value out of range 0..={max}")
        });
    }
    Ok(v)
}

/// `xx:xx:xx:xx:xx:xx` (one or two hex digits per byte) as a right-aligned value.
pub(crate) fn parse_mac(s: &str) -> Option<u128> {
    let mut v: u128 = 0;
    let mut n = 0;
    for part in s.split(':') {
        if part.is_empty() || part.len() > 2 || !part.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        v = (v << 8) | u128::from(u8::from_str_radix(part, 16).ok()?);
        n += 1;
    }
    (n == 6).then_some(v)
}

pub(crate) fn format_mac(v: u128) -> String {
    let b = (v as u64).to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// The prefix length of `mask` within `bits`, if it is a prefix.
pub(crate) fn prefix_len(mask: u128, bits: u32) -> Option<u32> {
    let inv = !mask & full(bits);
    if mask & !full(bits) != 0 || inv & inv.wrapping_add(1) != 0 {
        return None;
    }
    Some(bits - inv.count_ones())
}

/// `/len` (decimal digits) or `/address` after an address.
fn parse_addr_mask(
    s: &str,
    bits: u32,
    addr: impl Fn(&str) -> Option<u128>,
    what: &str,
) -> Result<(u128, u128), String> {
    let (a, m) = match s.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (s, None),
    };
    let v = addr(a).ok_or_else(|| format!("invalid {what} address"))?;
    let mask = match m {
        None => full(bits),
        Some(m) if !m.is_empty() && m.chars().all(|c| c.is_ascii_digit()) => {
            let len: u32 = m
                .parse()
                .ok()
                .filter(|l| *l <= bits)
                .ok_or_else(|| format!("prefix length out of range 0..={bits}"))?;
            if len == 0 {
                0
            } else {
                full(bits) & !full(bits - len)
            }
        }
        Some(m) => addr(m).ok_or_else(|| format!("invalid {what} mask"))?,
    };
    Ok((v & mask, mask))
}

pub(crate) fn parse_ipv4_masked(s: &str) -> Result<(u128, u128), String> {
    parse_addr_mask(
        s,
        32,
        |a| a.parse::<Ipv4Addr>().ok().map(|a| u128::from(u32::from(a))),
        "IPv4",
    )
}

pub(crate) fn parse_ipv6_masked(s: &str) -> Result<(u128, u128), String> {
    parse_addr_mask(
        s,
        128,
        |a| a.parse::<Ipv6Addr>().ok().map(u128::from),
        "IPv6",
    )
}

/// Parse `value[/mask]` of a field of this kind and width. Returns the value
/// already masked. `maskable == false` rejects a `/mask`.
pub(crate) fn parse_masked(
    kind: ValueKind,
    bits: u32,
    s: &str,
    maskable: bool,
) -> Result<(u128, u128), String> {
    if !maskable && s.contains('/') {
        return Err("this field cannot be masked".into());
    }
    let (v, m) = match kind {
        ValueKind::Int | ValueKind::Hex => {
            let (v, m) = match s.split_once('/') {
                Some((v, m)) => (v, Some(m)),
                None => (s, None),
            };
            let v = parse_max(v, full(bits))?;
            let m = match m {
                Some(m) => parse_max(m, full(bits)).map_err(|e| format!("mask: {e}"))?,
                None => full(bits),
            };
            (v, m)
        }
        ValueKind::Mac => {
            let (v, m) = match s.split_once('/') {
                Some((v, m)) => (v, Some(m)),
                None => (s, None),
            };
            let v = parse_mac(v).ok_or("invalid MAC address (want xx:xx:xx:xx:xx:xx)")?;
            let m = match m {
                Some(m) => parse_mac(m).ok_or("invalid MAC mask")?,
                None => full(48),
            };
            (v, m)
        }
        ValueKind::Ipv4 => parse_ipv4_masked(s)?,
        ValueKind::Ipv6 => parse_ipv6_masked(s)?,
    };
    Ok((v & m, m))
}

/// Canonical text of `value[/mask]` for a field of this kind and width.
pub(crate) fn format_masked(kind: ValueKind, bits: u32, v: u128, m: u128) -> String {
    let exact = m == full(bits);
    match kind {
        ValueKind::Int if exact => v.to_string(),
        ValueKind::Int | ValueKind::Hex if !exact => format!("{v:#x}/{m:#x}"),
        ValueKind::Int | ValueKind::Hex => format!("{v:#x}"),
        ValueKind::Mac if exact => format_mac(v),
        ValueKind::Mac => format!("{}/{}", format_mac(v), format_mac(m)),
        ValueKind::Ipv4 | ValueKind::Ipv6 => {
            let addr = |x: u128| {
                if kind == ValueKind::Ipv4 {
                    Ipv4Addr::from(x as u32).to_string()
                } else {
                    Ipv6Addr::from(x).to_string()
                }
            };
            match prefix_len(m, bits) {
                Some(l) if l == bits => addr(v),
                Some(l) => format!("{}/{l}", addr(v)),
                None => format!("{}/{}", addr(v), addr(m)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_uint("0"), Some(0));
        assert_eq!(parse_uint("0x1F"), Some(31));
        assert_eq!(parse_uint("0X10"), Some(16));
        assert_eq!(parse_uint("+5"), None);
        assert_eq!(parse_uint("0x"), None);
        assert_eq!(parse_uint(""), None);
        assert_eq!(parse_uint("12a"), None);
        assert_eq!(
            parse_uint("99999999999999999999999999999999999999999"),
            None
        );
        assert!(parse_max("65536", 0xffff).is_err());
        assert_eq!(parse_max("65535", 0xffff), Ok(65535));
    }

    #[test]
    fn macs() {
        assert_eq!(parse_mac("00:11:22:33:44:55"), Some(0x001122334455));
        assert_eq!(parse_mac("0:1:2:3:4:5"), Some(0x000102030405));
        assert_eq!(parse_mac("00:11:22:33:44"), None);
        assert_eq!(parse_mac("00:11:22:33:44:55:66"), None);
        assert_eq!(parse_mac("000:11:22:33:44:55"), None);
        assert_eq!(parse_mac("0g:11:22:33:44:55"), None);
        assert_eq!(format_mac(0x001122334455), "00:11:22:33:44:55");
    }

    #[test]
    fn ipv4() {
        assert_eq!(parse_ipv4_masked("10.1.2.3"), Ok((0x0a010203, 0xffffffff)));
        assert_eq!(
            parse_ipv4_masked("10.1.2.3/16"),
            Ok((0x0a010000, 0xffff0000))
        );
        assert_eq!(parse_ipv4_masked("10.1.2.3/0"), Ok((0, 0)));
        assert_eq!(
            parse_ipv4_masked("10.1.2.3/255.0.255.0"),
            Ok((0x0a000200, 0xff00ff00))
        );
        assert!(parse_ipv4_masked("1.2.3.300").is_err());
        assert!(parse_ipv4_masked("1.2.3.4/33").is_err());
        assert!(parse_ipv4_masked("1.2.3.4/").is_err());
        assert_eq!(
            format_masked(ValueKind::Ipv4, 32, 0x0a010000, 0xffff0000),
            "10.1.0.0/16"
        );
        assert_eq!(
            format_masked(ValueKind::Ipv4, 32, 0x0a000200, 0xff00ff00),
            "10.0.2.0/255.0.255.0"
        );
        assert_eq!(
            format_masked(ValueKind::Ipv4, 32, 0x0a000001, 0xffffffff),
            "10.0.0.1"
        );
    }

    #[test]
    fn ipv6() {
        let (v, m) = parse_ipv6_masked("2001:db8::1/32").unwrap();
        assert_eq!(m, !0u128 << 96);
        assert_eq!(format_masked(ValueKind::Ipv6, 128, v, m), "2001:db8::/32");
        assert!(parse_ipv6_masked("2001:db8::1/129").is_err());
        assert!(parse_ipv6_masked("2001:db8:::1").is_err());
        let (v, m) = parse_ipv6_masked("::1/ffff::ffff").unwrap();
        assert_eq!(format_masked(ValueKind::Ipv6, 128, v, m), "::1/ffff::ffff");
    }

    #[test]
    fn prefixes() {
        assert_eq!(prefix_len(0, 32), Some(0));
        assert_eq!(prefix_len(0xffffffff, 32), Some(32));
        assert_eq!(prefix_len(0xffffff00, 32), Some(24));
        assert_eq!(prefix_len(0xff00ff00, 32), None);
        assert_eq!(prefix_len(u128::MAX, 128), Some(128));
    }

    #[test]
    fn masked_ints() {
        assert_eq!(
            parse_masked(ValueKind::Int, 16, "0x50/0xfff0", true),
            Ok((0x50, 0xfff0))
        );
        assert!(parse_masked(ValueKind::Int, 16, "80/0xfff0", false).is_err());
        assert!(parse_masked(ValueKind::Int, 16, "80/0x1ffff", true).is_err());
        assert_eq!(format_masked(ValueKind::Int, 16, 80, 0xffff), "80");
        assert_eq!(
            format_masked(ValueKind::Int, 16, 0x50, 0xfff0),
            "0x50/0xfff0"
        );
        assert_eq!(format_masked(ValueKind::Hex, 32, 5, 0xffffffff), "0x5");
        assert_eq!(
            format_masked(ValueKind::Mac, 48, 0x010000000000, 0x010000000000),
            "01:00:00:00:00:00/01:00:00:00:00:00"
        );
    }
}
