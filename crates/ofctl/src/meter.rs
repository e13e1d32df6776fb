//! Meters in `ovs-ofctl` syntax: `meter=1,kbps,burst,stats,bands=type=drop,rate=1000,burst_size=100`.
//!
//! A meter is OpenFlow 1.3's rate limiter: a rule's `meter:N` instruction
//! sends its packets through meter N before its actions, and the meter's
//! bands decide, by rate, whether a packet is dropped (`drop`) or has its
//! drop precedence raised (`dscp_remark`). This module reads and prints
//! meters exactly as `ovs-ofctl add-meter`/`dump-meters` do (OVS
//! lib/ofp-meter.c: `parse_ofp_meter_mod_str__`, `ofputil_format_meter_config`),
//! with the same refusals; the bridge keeps them and the datapath runs them.

use crate::error::RuleError;
use crate::values::parse_max;

/// Highest meter id a user may configure (`OFPM13_MAX`).
pub const OFPM_MAX: u32 = 0xffff_0000;

/// `OFPMF13_*` meter flags.
pub mod flags {
    pub const KBPS: u16 = 1 << 0;
    pub const PKTPS: u16 = 1 << 1;
    pub const BURST: u16 = 1 << 2;
    pub const STATS: u16 = 1 << 3;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BandType {
    Drop,
    /// Raise the packet's drop precedence by `prec_level` (RFC 2597 AF
    /// classes: AFxy becomes AFx(y+prec_level), at most AFx3).
    DscpRemark {
        prec_level: u8,
    },
}

/// One band: above `rate` (kbit/s or packets/s, by the meter's flags) it
/// acts; `burst_size` (kbit or packets) is only given with the `burst` flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeterBand {
    pub kind: BandType,
    pub rate: u32,
    pub burst_size: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterSpec {
    pub meter_id: u32,
    /// `OFPMF13_*` bits ([`flags`]).
    pub flags: u16,
    pub bands: Vec<MeterBand>,
}

impl MeterSpec {
    /// Rates in packets per second rather than kbit/s.
    pub fn pktps(&self) -> bool {
        self.flags & flags::PKTPS != 0
    }
}

/// The `N` of a `meter:N` action (1..=`OFPM_MAX`).
pub fn parse_meter_id(piece: &str, s: &str) -> Result<u32, RuleError> {
    let v = parse_max(s, OFPM_MAX.into())
        .map_err(|r| RuleError::new(piece, format!("meter id: {r}")))?;
    if v == 0 {
        return Err(RuleError::new(
            piece,
            "meter id: 0 is not a meter (1..=0xffff0000)",
        ));
    }
    Ok(v as u32)
}

fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| c == ',' || c == ' ' || c.is_whitespace())
        .filter(|w| !w.is_empty())
}

fn meter_id_value(tok: &str, value: &str) -> Result<u32, RuleError> {
    match value {
        "all" | "controller" | "slowpath" => Err(RuleError::new(
            tok,
            format!("meter={value} names a virtual meter; give a number 1..=0xffff0000"),
        )),
        _ => parse_meter_id(tok, value).map_err(|e| RuleError::new(tok, e.reason)),
    }
}

/// `add-meter`/`mod-meter` text: the meter id, its flags (`kbps` or
/// `pktps`, optional `burst`, `stats`) and `bands=` with one or more
/// `type=drop|dscp_remark,rate=R[,burst_size=B][,prec_level=P]`.
pub fn parse_meter(text: &str) -> Result<MeterSpec, RuleError> {
    let text = text.trim();
    let Some(at) = text.find("band") else {
        return Err(RuleError::new(text, "must specify bands"));
    };
    let (head, tail) = text.split_at(at);
    let Some(eq) = tail.find('=') else {
        return Err(RuleError::new(tail, "must specify bands"));
    };
    let bands_text = &tail[eq + 1..];
    let mut spec = MeterSpec {
        meter_id: 0,
        flags: 0,
        bands: Vec::new(),
    };
    let mut it = words(head).flat_map(|w| {
        // `meter=5` and `meter 5` both read as a name and a value.
        let (a, b) = w.split_once('=').unwrap_or((w, ""));
        [a, b].into_iter().filter(|x| !x.is_empty())
    });
    while let Some(name) = it.next() {
        match name {
            "kbps" => spec.flags |= flags::KBPS,
            "pktps" => spec.flags |= flags::PKTPS,
            "burst" => spec.flags |= flags::BURST,
            "stats" => spec.flags |= flags::STATS,
            "meter" => {
                let v = it
                    .next()
                    .ok_or_else(|| RuleError::new(name, "field meter missing value"))?;
                spec.meter_id = meter_id_value(&format!("meter={v}"), v)?;
            }
            _ => return Err(RuleError::new(name, format!("unknown keyword {name}"))),
        }
    }
    if spec.meter_id == 0 {
        return Err(RuleError::new(text, "must specify 'meter'"));
    }
    if spec.flags & (flags::KBPS | flags::PKTPS) == 0 {
        return Err(RuleError::new(
            text,
            "meter must specify either 'kbps' or 'pktps'",
        ));
    }
    if spec.flags & flags::KBPS != 0 && spec.flags & flags::PKTPS != 0 {
        return Err(RuleError::new(
            text,
            "meter must specify 'kbps' or 'pktps', not both",
        ));
    }
    spec.bands = parse_bands(bands_text, spec.flags)?;
    Ok(spec)
}

fn parse_bands(text: &str, meter_flags: u16) -> Result<Vec<MeterBand>, RuleError> {
    // (type, rate, burst_size, prec_level, the text of the band)
    let mut raw: Vec<(BandType, u32, u32, u8)> = Vec::new();
    let mut it = words(text).flat_map(|w| {
        let (a, b) = w.split_once('=').unwrap_or((w, ""));
        [a, b].into_iter().filter(|x| !x.is_empty())
    });
    while let Some(name) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| RuleError::new(name, format!("field {name} missing value")))?;
        let tok = format!("{name}={value}");
        let num = |max: u128| {
            parse_max(value, max)
                .map(|v| v as u32)
                .map_err(|r| RuleError::new(tok.as_str(), r))
        };
        if name == "type" {
            let t = match value {
                "drop" => BandType::Drop,
                "dscp_remark" => BandType::DscpRemark { prec_level: 0 },
                _ => {
                    return Err(RuleError::new(
                        tok.as_str(),
                        format!("field type unknown value {value}"),
                    ))
                }
            };
            raw.push((t, 0, 0, 0));
            continue;
        }
        let Some(b) = raw.last_mut() else {
            return Err(RuleError::new(
                tok.as_str(),
                "band must start with the 'type' keyword",
            ));
        };
        match name {
            "rate" => b.1 = num(u32::MAX.into())?,
            "burst_size" => b.2 = num(u32::MAX.into())?,
            "prec_level" => b.3 = num(u8::MAX.into())? as u8,
            _ => {
                return Err(RuleError::new(
                    tok.as_str(),
                    format!("unknown keyword {name}"),
                ))
            }
        }
    }
    if raw.is_empty() {
        return Err(RuleError::new(text, "meter must have bands"));
    }
    let mut out = Vec::with_capacity(raw.len());
    for (kind, rate, burst_size, prec) in raw {
        let kind = match kind {
            BandType::DscpRemark { .. } if prec == 0 => {
                return Err(RuleError::new(
                    text,
                    "'dscp_remark' band must have 'prec_level'",
                ))
            }
            BandType::DscpRemark { .. } => BandType::DscpRemark { prec_level: prec },
            BandType::Drop if prec != 0 => {
                return Err(RuleError::new(
                    text,
                    "Only 'dscp_remark' band may have 'prec_level'",
                ))
            }
            BandType::Drop => BandType::Drop,
        };
        if rate == 0 {
            return Err(RuleError::new(text, "band must have 'rate'"));
        }
        if meter_flags & flags::BURST != 0 && burst_size == 0 {
            return Err(RuleError::new(
                text,
                "band must have 'burst_size' when 'burst' flag is set",
            ));
        }
        if meter_flags & flags::BURST == 0 && burst_size != 0 {
            return Err(RuleError::new(
                text,
                "band may have 'burst_size' only when 'burst' flag is set",
            ));
        }
        out.push(MeterBand {
            kind,
            rate,
            burst_size,
        });
    }
    Ok(out)
}

/// `del-meters`/`meter-stats`/`dump-meters` selector: empty, `meter=all`
/// (every meter: `None`) or `meter=N`.
pub fn parse_meter_selector(text: &str) -> Result<Option<u32>, RuleError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let v = t
        .strip_prefix("meter=")
        .or_else(|| t.strip_prefix("meter:"))
        .ok_or_else(|| RuleError::new(t, "expected meter=N or meter=all"))?;
    if v == "all" {
        return Ok(None);
    }
    meter_id_value(t, v).map(Some)
}

fn flag_words(f: u16) -> String {
    let mut s = String::new();
    for (bit, name) in [
        (flags::KBPS, "kbps"),
        (flags::PKTPS, "pktps"),
        (flags::BURST, "burst"),
        (flags::STATS, "stats"),
    ] {
        if f & bit != 0 {
            s.push_str(name);
            s.push(' ');
        }
    }
    s
}

/// One meter as `ovs-ofctl dump-meters` prints it (without the reply
/// header): `meter=1 kbps burst stats bands=` and a `type=...` line per
/// band.
pub fn format_meter_config(m: &MeterSpec) -> String {
    let mut s = format!("meter={} {}bands=", m.meter_id, flag_words(m.flags));
    for b in &m.bands {
        s.push('\n');
        match b.kind {
            BandType::Drop => s.push_str("type=drop"),
            BandType::DscpRemark { .. } => s.push_str("type=dscp_remark"),
        }
        s.push_str(&format!(" rate={}", b.rate));
        if m.flags & flags::BURST != 0 {
            s.push_str(&format!(" burst_size={}", b.burst_size));
        }
        if let BandType::DscpRemark { prec_level } = b.kind {
            s.push_str(&format!(" prec_level={prec_level}"));
        }
    }
    s
}

/// The meter in `add-meter` syntax on one line (what the configuration
/// file keeps); [`parse_meter`] reads it back to the same meter.
pub fn format_meter_spec(m: &MeterSpec) -> String {
    format_meter_config(m)
        .replace("\ntype=", ",type=")
        .replace(' ', ",")
        .replace("bands=,", "bands=")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_as_ovs_ofctl() {
        let m = parse_meter("meter=1,kbps,burst,stats,bands=type=drop,rate=1000,burst_size=100")
            .unwrap();
        assert_eq!(m.meter_id, 1);
        assert_eq!(m.flags, flags::KBPS | flags::BURST | flags::STATS);
        assert_eq!(
            format_meter_config(&m),
            "meter=1 kbps burst stats bands=\ntype=drop rate=1000 burst_size=100"
        );
        let m2 = parse_meter(
            "meter=7 pktps bands=type=dscp_remark,rate=100,prec_level=1,type=drop,rate=200",
        )
        .unwrap();
        assert_eq!(
            format_meter_config(&m2),
            "meter=7 pktps bands=\ntype=dscp_remark rate=100 prec_level=1\ntype=drop rate=200"
        );
        for m in [m, m2] {
            let line = format_meter_spec(&m);
            assert_eq!(parse_meter(&line).unwrap(), m, "{line}");
        }
    }

    #[test]
    fn refuses_what_ovs_ofctl_refuses() {
        for (t, why) in [
            ("meter=1,kbps", "must specify bands"),
            ("kbps,bands=type=drop,rate=1", "must specify 'meter'"),
            ("meter=1,bands=type=drop,rate=1", "either 'kbps' or 'pktps'"),
            ("meter=0,kbps,bands=type=drop,rate=1", "0 is not a meter"),
            ("meter=all,kbps,bands=type=drop,rate=1", "virtual meter"),
            (
                "meter=1,kbps,fast,bands=type=drop,rate=1",
                "unknown keyword fast",
            ),
            ("meter=1,kbps,bands=rate=1", "must start with the 'type'"),
            (
                "meter=1,kbps,bands=type=police,rate=1",
                "unknown value police",
            ),
            ("meter=1,kbps,bands=type=drop", "must have 'rate'"),
            (
                "meter=1,kbps,bands=type=dscp_remark,rate=5",
                "must have 'prec_level'",
            ),
            (
                "meter=1,kbps,bands=type=drop,rate=5,prec_level=1",
                "Only 'dscp_remark'",
            ),
            (
                "meter=1,kbps,burst,bands=type=drop,rate=5",
                "when 'burst' flag is set",
            ),
            (
                "meter=1,kbps,bands=type=drop,rate=5,burst_size=3",
                "only when 'burst'",
            ),
            ("meter=1,kbps,bands=type=drop,rate=x", "must be a number"),
            ("meter=1,kbps,pktps,bands=type=drop,rate=1", "not both"),
        ] {
            let e = parse_meter(t).expect_err(t);
            assert!(e.reason.contains(why), "{t}: {e}");
        }
        assert_eq!(parse_meter_selector("").unwrap(), None);
        assert_eq!(parse_meter_selector("meter=all").unwrap(), None);
        assert_eq!(parse_meter_selector("meter=3").unwrap(), Some(3));
        assert!(parse_meter_selector("meter=0").is_err());
        assert!(parse_meter_selector("group=1").is_err());
    }
}
