//! `OFPT_HELLO` and version negotiation.
//!
//! The first message each side sends. The codec speaks OpenFlow 1.3 and
//! 1.5 ([`super::SUPPORTED_VERSIONS`]); which of them a switch offers is its
//! choice: [`Hello::ofp13`] and [`negotiate`] are the 1.3-only pair,
//! [`Hello::nicflow`] (header 1.5, bitmap 1.3 + 1.5) and [`negotiate_with`]
//! the pair that lets ovn-controller (1.5 only) in. Negotiation applies
//! OpenFlow's rule to the peer's hello — with bitmaps, the highest version
//! both have; without, the lower of the two header versions, which must be
//! one we speak — and refuses with `OFPHFC_INCOMPATIBLE` otherwise (an
//! OpenFlow 1.0-only `ovs-ofctl`, for instance).

use super::{ErrorMsg, Message, OFP13_VERSION, SUPPORTED_VERSIONS};
use crate::error::{HelloFailed, OfpError};
use crate::wire;

/// `OFPHET_VERSIONBITMAP`.
pub const OFPHET_VERSIONBITMAP: u16 = 1;

/// A hello: the header's version and the raw body (hello elements), kept
/// as received so it re-encodes byte for byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u8,
    pub body: Vec<u8>,
}

impl Hello {
    /// The hello nicflow sends: version 1.3 with a version bitmap of 1.3.
    pub fn ofp13() -> Hello {
        Hello::with_versions(OFP13_VERSION, &[OFP13_VERSION])
    }

    /// The hello of a switch speaking every version the codec has: header
    /// 1.5 with a bitmap of 1.3 and 1.5 (what Open vSwitch sends for
    /// `protocols=OpenFlow13,OpenFlow15`).
    pub fn nicflow() -> Hello {
        let top = SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1];
        Hello::with_versions(top, &SUPPORTED_VERSIONS)
    }

    /// A hello with header version `version` and a bitmap of `versions`.
    pub fn with_versions(version: u8, versions: &[u8]) -> Hello {
        let mut words = vec![
            0u32;
            versions
                .iter()
                .map(|v| usize::from(*v) / 32 + 1)
                .max()
                .unwrap_or(1)
        ];
        for v in versions {
            words[usize::from(*v) / 32] |= 1 << (v % 32);
        }
        let mut body = Vec::new();
        wire::put_u16(&mut body, OFPHET_VERSIONBITMAP);
        wire::put_u16(&mut body, (4 + 4 * words.len()) as u16);
        for w in words {
            wire::put_u32(&mut body, w);
        }
        wire::pad8_from(&mut body, 0);
        Hello {
            version,
            body: body.to_vec(),
        }
    }

    /// The versions of the first version-bitmap element, if there is one.
    /// Elements are read loosely: a malformed tail is ignored, as Open
    /// vSwitch does.
    pub fn version_bitmap(&self) -> Option<Vec<u8>> {
        let b = &self.body;
        let mut at = 0;
        while at + 4 <= b.len() {
            let ty = u16::from_be_bytes([b[at], b[at + 1]]);
            let len = usize::from(u16::from_be_bytes([b[at + 2], b[at + 3]]));
            if len < 4 || at + len > b.len() {
                return None;
            }
            if ty == OFPHET_VERSIONBITMAP {
                let mut versions = Vec::new();
                for (i, w) in b[at + 4..at + len].chunks_exact(4).enumerate() {
                    let w = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                    for bit in 0..32 {
                        if w & (1 << bit) != 0 {
                            if let Ok(v) = u8::try_from(i * 32 + bit) {
                                versions.push(v);
                            }
                        }
                    }
                }
                return Some(versions);
            }
            at += len.next_multiple_of(8);
        }
        None
    }
}

/// The version to speak with a peer that sent `peer`, given that nicflow
/// speaks only 1.3: `Ok(4)` or the `HELLO_FAILED` error to send (see
/// [`refusal`]).
pub fn negotiate(peer: &Hello) -> Result<u8, OfpError> {
    let ok = match peer.version_bitmap() {
        Some(versions) => versions.contains(&OFP13_VERSION),
        None => peer.version >= OFP13_VERSION,
    };
    if ok {
        Ok(OFP13_VERSION)
    } else {
        Err(OfpError::HelloFailed(HelloFailed::INCOMPATIBLE))
    }
}

/// The version to speak with a peer that sent `peer`, when we offer
/// `ours` (a subset of [`SUPPORTED_VERSIONS`]): the highest version in both
/// bitmaps, or — if the peer sent no bitmap — the lower header version if
/// we offer it. `Err(OFPHFC_INCOMPATIBLE)` otherwise (see [`refusal`]).
pub fn negotiate_with(ours: &[u8], peer: &Hello) -> Result<u8, OfpError> {
    let chosen = match peer.version_bitmap() {
        Some(versions) => ours.iter().copied().filter(|v| versions.contains(v)).max(),
        None => {
            let ours_max = ours.iter().copied().max().unwrap_or(0);
            let v = peer.version.min(ours_max);
            ours.contains(&v).then_some(v)
        }
    };
    chosen.ok_or(OfpError::HelloFailed(HelloFailed::INCOMPATIBLE))
}

/// The `OFPT_ERROR` refusing a peer whose hello had header version
/// `peer_version`: sent in the peer's version (so a 1.0 peer can read it),
/// with a human-readable reason as data, as OpenFlow asks.
pub fn refusal(peer_version: u8) -> Message {
    let version = if (1..=6).contains(&peer_version) {
        peer_version.min(OFP13_VERSION)
    } else {
        OFP13_VERSION
    };
    Message::Error(ErrorMsg {
        version,
        error: OfpError::HelloFailed(HelloFailed::INCOMPATIBLE),
        data: format!(
            "We support version 0x{OFP13_VERSION:02x}, you support version 0x{peer_version:02x} and earlier"
        )
        .into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_hello() {
        let h = Hello::ofp13();
        assert_eq!(h.body, [0, 1, 0, 8, 0, 0, 0, 0x10]);
        assert_eq!(h.version_bitmap(), Some(vec![4]));
        assert_eq!(negotiate(&h), Ok(4));
    }

    #[test]
    fn refuses_of10() {
        let h = Hello {
            version: 1,
            body: vec![],
        };
        assert_eq!(
            negotiate(&h),
            Err(OfpError::HelloFailed(HelloFailed::INCOMPATIBLE))
        );
        // 1.0..1.5 bitmap, header 1.5: fine. 1.0 only: not.
        assert_eq!(negotiate(&Hello::with_versions(6, &[1, 4, 6])), Ok(4));
        assert!(negotiate(&Hello::with_versions(1, &[1])).is_err());
        // No bitmap, newer header: the peer supports 1.3 as well.
        assert_eq!(
            negotiate(&Hello {
                version: 6,
                body: vec![]
            }),
            Ok(4)
        );
        assert_eq!(refusal(1).version(), 1);
    }

    #[test]
    fn negotiates_15_when_both_have_it() {
        let ours = SUPPORTED_VERSIONS;
        let h = Hello::nicflow();
        assert_eq!(h.version, 6);
        assert_eq!(h.version_bitmap(), Some(vec![4, 6]));
        assert_eq!(h.body, [0, 1, 0, 8, 0, 0, 0, 0x50]);
        // ovn-controller: 1.5 only.
        assert_eq!(negotiate_with(&ours, &Hello::with_versions(6, &[6])), Ok(6));
        // ovs-ofctl default (1.0-1.5 bitmap).
        assert_eq!(
            negotiate_with(&ours, &Hello::with_versions(6, &[1, 2, 3, 4, 5, 6])),
            Ok(6)
        );
        // 1.3 only, or 1.4 + 1.3: 1.3.
        assert_eq!(negotiate_with(&ours, &Hello::with_versions(4, &[4])), Ok(4));
        assert_eq!(
            negotiate_with(&ours, &Hello::with_versions(5, &[4, 5])),
            Ok(4)
        );
        // 1.4 only: nothing in common.
        assert!(negotiate_with(&ours, &Hello::with_versions(5, &[5])).is_err());
        // No bitmap: the lower header version, if we speak it.
        let nb = |version| Hello {
            version,
            body: vec![],
        };
        assert_eq!(negotiate_with(&ours, &nb(6)), Ok(6));
        assert_eq!(negotiate_with(&ours, &nb(7)), Ok(6));
        assert_eq!(negotiate_with(&ours, &nb(4)), Ok(4));
        assert!(negotiate_with(&ours, &nb(5)).is_err());
        // A 1.3-only switch still refuses a 1.5-only peer.
        assert!(negotiate_with(&[4], &Hello::with_versions(6, &[6])).is_err());
    }
}
