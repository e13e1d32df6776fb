//! Continuations: a walk `controller(...,pause)` froze travels to the
//! controller inside its `NXT_PACKET_IN2` (`NXPINT_CONTINUATION`, in Open
//! vSwitch's `NXCPT_*` layout) and comes back in `NXT_RESUME`. Nothing is
//! kept in the switch: the continuation holds the bridge, the stack and
//! the remaining actions (as OpenFlow actions, grouped by the table and
//! cookie they run under); the pipeline fields travel in the message's
//! metadata. A continuation is refused with `NXR_STALE` when it names
//! another bridge (or none), and with the codec's error when malformed.

use crate::datapath::action::{Paused, PausedFrame};
use nicflow_flow::Match;
use nicflow_openflow::action::convert;
use nicflow_openflow::error::BadProperty;
use nicflow_openflow::msg::nx::Continuation;
use nicflow_openflow::OfpError;

/// `NXR_STALE` (Nicira experimenter error 35): the continuation was not
/// made by this bridge.
pub const NXR_STALE: u16 = 35;

/// The 16 bytes nicflow writes as `NXCPT_BRIDGE`: derived from the
/// bridge's name, so a continuation survives a restart of the daemon (the
/// remaining actions travel with it) but not a trip to another bridge.
pub fn bridge_id(name: &str) -> [u8; 16] {
    // FNV-1a, 128 bits.
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in name.bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    h.to_be_bytes()
}

/// The continuation bytes of `paused` on bridge `bridge`, or `None` when
/// an action cannot be written as OpenFlow (the copy then goes without a
/// continuation and cannot be resumed).
pub fn encode(bridge: &str, paused: &Paused) -> Option<Vec<u8>> {
    let mut c = Continuation {
        bridge: Some(bridge_id(bridge)),
        ..Continuation::default()
    };
    c.stack = paused
        .stack
        .iter()
        .rev()
        .map(|v| v.to_be_bytes().to_vec())
        .collect();
    for f in &paused.frames {
        let acts = convert::actions_from_nicflow(&f.actions, &Match::catchall()).ok()?;
        c.frames.push((f.table_id, f.cookie, acts));
    }
    Some(c.encode())
}

/// Why a `NXT_RESUME` is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// `NXR_STALE`.
    Stale,
    Error(OfpError),
}

/// The walk an `NXT_RESUME`'s continuation describes, if bridge `bridge`
/// made it. The actions' prerequisites (a `set_field` to `ip_dst` needs an
/// IP packet) are checked against the resumed `packet`, the only match a
/// frozen walk has: the rule that held them is gone.
pub fn decode(bridge: &str, bytes: Option<&[u8]>, packet: &[u8]) -> Result<Paused, Refused> {
    let Some(bytes) = bytes else {
        return Err(Refused::Stale);
    };
    let c = Continuation::decode(bytes).map_err(Refused::Error)?;
    if c.bridge != Some(bridge_id(bridge)) {
        return Err(Refused::Stale);
    }
    // nicflow writes no action set; one it cannot run is refused rather
    // than dropped.
    if c.action_set.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err(Refused::Error(OfpError::BadProperty(BadProperty::BAD_TYPE)));
    }
    // A frame that does not parse fails the resume itself
    // (`OFPBRC_BAD_PACKET`).
    let m = super::handle::packet_match(packet, 0).unwrap_or_else(Match::catchall);
    let mut paused = Paused::default();
    for v in c.stack.iter().rev() {
        if v.len() > 16 {
            return Err(Refused::Error(OfpError::BadProperty(BadProperty::BAD_LEN)));
        }
        paused
            .stack
            .push(v.iter().fold(0u128, |a, b| (a << 8) | u128::from(*b)));
    }
    for (table_id, cookie, acts) in c.frames {
        let actions = convert::actions_to_nicflow(&acts, &m).map_err(Refused::Error)?;
        paused.frames.push(PausedFrame {
            table_id,
            cookie,
            actions,
        });
    }
    Ok(paused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicflow_flow::{Action, Field};

    fn sample() -> Paused {
        Paused {
            frames: vec![
                PausedFrame {
                    table_id: 3,
                    cookie: 0x77,
                    actions: vec![Action::Output(2)],
                },
                PausedFrame {
                    table_id: 0,
                    cookie: 0,
                    actions: vec![
                        Action::SetField {
                            field: Field::Reg(1),
                            value: 9,
                            mask: 0xffff_ffff,
                        },
                        Action::Resubmit {
                            port: None,
                            table: Some(5),
                        },
                    ],
                },
            ],
            stack: vec![1, 0xabcd],
        }
    }

    #[test]
    fn round_trip_on_the_same_bridge() {
        let p = sample();
        let bytes = encode("br0", &p).expect("encodable");
        assert_eq!(decode("br0", Some(&bytes), &[]), Ok(p));
    }

    /// A walk paused before a rewrite of an IP field resumes on an IP
    /// packet (the prerequisite is the packet's, not a rule's).
    #[test]
    fn prerequisites_are_the_resumed_packets() {
        let p = Paused {
            frames: vec![PausedFrame {
                table_id: 0,
                cookie: 0,
                actions: vec![
                    Action::SetField {
                        field: Field::NwDst,
                        value: 0xc612_0009,
                        mask: 0xffff_ffff,
                    },
                    Action::Output(2),
                ],
            }],
            stack: vec![],
        };
        let bytes = encode("br0", &p).expect("encodable");
        let ip = nicflow_packet::builder::FrameBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into())
            .udp(1000, 2000)
            .payload(b"resume")
            .build();
        assert_eq!(decode("br0", Some(&bytes), &ip), Ok(p));
        // An ARP frame cannot take an ip_dst rewrite.
        let arp = nicflow_packet::builder::FrameBuilder::new([2, 0, 0, 0, 0, 1], [0xff; 6])
            .arp(
                1,
                [2, 0, 0, 0, 0, 1],
                [198, 18, 0, 1].into(),
                [0; 6],
                [198, 18, 0, 2].into(),
            )
            .build();
        assert!(matches!(
            decode("br0", Some(&bytes), &arp),
            Err(Refused::Error(_))
        ));
    }

    #[test]
    fn another_bridge_or_none_is_stale() {
        let bytes = encode("br0", &sample()).expect("encodable");
        assert_eq!(decode("br1", Some(&bytes), &[]), Err(Refused::Stale));
        assert_eq!(decode("br0", None, &[]), Err(Refused::Stale));
        // No NXCPT_BRIDGE at all.
        let c = Continuation::default().encode();
        assert_eq!(decode("br0", Some(&c), &[]), Err(Refused::Stale));
    }

    #[test]
    fn malformed_is_refused() {
        let mut bytes = encode("br0", &sample()).expect("encodable");
        // A property length running past the end.
        bytes[2] = 0xff;
        assert!(matches!(
            decode("br0", Some(&bytes), &[]),
            Err(Refused::Error(_))
        ));
        // An unknown property type.
        let mut bad = encode("br0", &sample()).expect("encodable");
        bad.extend_from_slice(&[0x80, 0x7f, 0, 4, 0, 0, 0, 0]);
        assert_eq!(
            decode("br0", Some(&bad), &[]),
            Err(Refused::Error(OfpError::BadProperty(BadProperty::BAD_TYPE)))
        );
    }
}
