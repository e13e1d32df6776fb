//! Controller packet metadata: the headers a program marks
//! `@controller_header("packet_in")` / `@controller_header("packet_out")`.
//!
//! A packet the program sends to the CPU port leaves the pipeline with its
//! `packet_in` header in front; the P4Runtime server strips that header and
//! hands its fields to the controller as a PacketIn's metadata. A PacketOut
//! goes the other way: its metadata become a `packet_out` header put in
//! front of the payload, and the frame enters the pipeline from the CPU
//! port (BMv2's `--cpu-port` semantics). This module only describes the
//! headers and packs/unpacks their bits; where the frames go is the
//! bridge's business (`nicflow-dataplane`'s P4 path).

use crate::ast::{AggregateKind, Expr};
use crate::interp::check::Ty;
use crate::Pipeline;
use thiserror::Error;

/// Controller headers wider than this (in bits) are refused: real ones
/// are a few bytes, and the width comes from a controller's P4Info.
pub const MAX_BITS: u32 = 8 * 1024;

/// One `@controller_header` header type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerHeader {
    /// The annotation's name: `packet_in` or `packet_out` (any string the
    /// program gives; P4Runtime uses these two).
    pub name: String,
    /// The header type's name in the program.
    pub type_name: String,
    /// Fields in order with their widths in bits.
    pub fields: Vec<(String, u32)>,
}

/// Field values by name, big-endian bytes.
pub type FieldValues = Vec<(String, Vec<u8>)>;

/// Why controller metadata could not be packed or unpacked.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ControllerError {
    #[error("frame of {got} bytes is shorter than the {name} header ({need} bytes)")]
    Short {
        name: String,
        got: usize,
        need: usize,
    },
    #[error("{name} header: value of {field} does not fit {width} bits")]
    TooWide {
        name: String,
        field: String,
        width: u32,
    },
    #[error("{name} header is {bits} bits: not a whole number of bytes, or over {MAX_BITS}")]
    NotBytes { name: String, bits: u32 },
}

impl ControllerHeader {
    /// Width of the whole header in bits (saturating: a description with
    /// absurd widths is refused by `pack`/`unpack`, never wrapped).
    pub fn bits(&self) -> u32 {
        self.fields
            .iter()
            .fold(0u32, |acc, (_, w)| acc.saturating_add(*w))
    }

    fn bytes(&self) -> Result<usize, ControllerError> {
        let bits = self.bits();
        if bits % 8 != 0 || bits > MAX_BITS {
            return Err(ControllerError::NotBytes {
                name: self.name.clone(),
                bits,
            });
        }
        Ok(bits as usize / 8)
    }

    /// Splits a frame that starts with this header into the fields' values
    /// (big-endian bytes, as wide as each field needs) and the rest.
    pub fn unpack<'a>(&self, frame: &'a [u8]) -> Result<(FieldValues, &'a [u8]), ControllerError> {
        let need = self.bytes()?;
        if frame.len() < need {
            return Err(ControllerError::Short {
                name: self.name.clone(),
                got: frame.len(),
                need,
            });
        }
        let mut at = 0u32;
        let mut out = Vec::with_capacity(self.fields.len());
        for (name, w) in &self.fields {
            let mut v = vec![0u8; (*w as usize).div_ceil(8)];
            for i in 0..*w {
                let bit = at + i;
                if frame[(bit / 8) as usize] & (0x80 >> (bit % 8)) != 0 {
                    // Bit i of the field counts from its most significant.
                    let from_lsb = w - 1 - i;
                    let idx = v.len() - 1 - (from_lsb / 8) as usize;
                    v[idx] |= 1 << (from_lsb % 8);
                }
            }
            at += w;
            out.push((name.clone(), v));
        }
        Ok((out, &frame[need..]))
    }

    /// The header's bytes for `values` (big-endian, any length; a missing
    /// field is 0), put in front of `payload`.
    pub fn pack(
        &self,
        values: &[(String, Vec<u8>)],
        payload: &[u8],
    ) -> Result<Vec<u8>, ControllerError> {
        let need = self.bytes()?;
        let mut out = vec![0u8; need];
        let mut at = 0u32;
        for (name, w) in &self.fields {
            let v: &[u8] = values
                .iter()
                .find(|(n, _)| n == name)
                .map_or(&[][..], |(_, v)| v.as_slice());
            let significant = v.iter().skip_while(|b| **b == 0).count();
            let top_bits = v
                .iter()
                .find(|b| **b != 0)
                .map_or(0, |b| 8 - b.leading_zeros());
            let used = if significant == 0 {
                0
            } else {
                (significant as u32 - 1) * 8 + top_bits
            };
            if used > *w {
                return Err(ControllerError::TooWide {
                    name: self.name.clone(),
                    field: name.clone(),
                    width: *w,
                });
            }
            for i in 0..*w {
                let from_lsb = w - 1 - i;
                let byte = (from_lsb / 8) as usize;
                if byte < v.len() && v[v.len() - 1 - byte] & (1 << (from_lsb % 8)) != 0 {
                    let bit = at + i;
                    out[(bit / 8) as usize] |= 0x80 >> (bit % 8);
                }
            }
            at += w;
        }
        out.extend_from_slice(payload);
        Ok(out)
    }
}

impl Pipeline {
    /// The program's `@controller_header` headers, by header type name
    /// order. Fields of types other than `bit<W>`/`bool` make a header
    /// unusable as controller metadata: such headers are left out.
    pub fn controller_headers(&self) -> Vec<ControllerHeader> {
        let g = &self.prog.g;
        let mut out: Vec<ControllerHeader> = g
            .agg_decls
            .values()
            .filter(|d| d.kind == AggregateKind::Header)
            .filter_map(|d| {
                let a = d
                    .annotations
                    .iter()
                    .find(|a| a.name == "controller_header")?;
                let name = match a.args.first() {
                    Some(Expr::Str(s, _)) => s.clone(),
                    _ => a.raw.trim().trim_matches('"').to_string(),
                };
                let agg = g.aggs.get(&d.name.name)?;
                let fields = agg
                    .fields
                    .iter()
                    .map(|(n, t)| match t {
                        Ty::Bits(w, _) => Some((n.clone(), *w)),
                        Ty::Bool => Some((n.clone(), 1)),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                Some(ControllerHeader {
                    name,
                    type_name: d.name.name.clone(),
                    fields,
                })
            })
            .collect();
        out.sort_by(|a, b| a.type_name.cmp(&b.type_name));
        out
    }

    /// The `@controller_header(name)` header, if the program has one.
    pub fn controller_header(&self, name: &str) -> Option<ControllerHeader> {
        self.controller_headers()
            .into_iter()
            .find(|h| h.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> ControllerHeader {
        ControllerHeader {
            name: "packet_in".into(),
            type_name: "packet_in_t".into(),
            fields: vec![("ingress_port".into(), 9), ("_pad".into(), 7)],
        }
    }

    #[test]
    fn pack_and_unpack_are_inverse_on_odd_widths() {
        let h = hdr();
        let vals = vec![("ingress_port".to_string(), vec![0x01, 0x2c])];
        let frame = h.pack(&vals, b"xyz").unwrap();
        // 300 = 0b1_0010_1100 in 9 bits, then 7 zero bits.
        assert_eq!(frame, vec![0b1001_0110, 0b0000_0000, b'x', b'y', b'z']);
        let (fields, rest) = h.unpack(&frame).unwrap();
        assert_eq!(rest, b"xyz");
        assert_eq!(fields[0], ("ingress_port".to_string(), vec![0x01, 0x2c]));
        assert_eq!(fields[1], ("_pad".to_string(), vec![0x00]));
    }

    #[test]
    fn values_wider_than_the_field_and_short_frames_are_refused() {
        let h = hdr();
        let too_wide = vec![("ingress_port".to_string(), vec![0x02, 0x00])];
        assert!(matches!(
            h.pack(&too_wide, b""),
            Err(ControllerError::TooWide { .. })
        ));
        // Leading zero bytes do not count.
        let padded = vec![("ingress_port".to_string(), vec![0, 0, 0x01, 0xff])];
        assert!(h.pack(&padded, b"").is_ok());
        assert!(matches!(
            h.unpack(&[0x80]),
            Err(ControllerError::Short { need: 2, .. })
        ));
        // Widths that would overflow the sum are refused, not wrapped.
        let absurd = ControllerHeader {
            fields: vec![
                ("a".into(), u32::MAX),
                ("b".into(), 8),
                ("c".into(), u32::MAX),
            ],
            ..hdr()
        };
        assert!(matches!(
            absurd.unpack(&[0; 4]),
            Err(ControllerError::NotBytes { .. })
        ));
        assert!(absurd.pack(&[], b"").is_err());
    }

    #[test]
    fn headers_are_found_by_their_annotation() {
        let src = r#"
#include <core.p4>
#include <v1model.p4>
@controller_header("packet_in") header packet_in_t { bit<9> ingress_port; bit<7> _pad; }
@controller_header("packet_out") header packet_out_t { bit<9> egress_port; bit<7> _pad; }
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etype; }
struct headers { packet_in_t pin; packet_out_t pout; ethernet_t eth; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers hdr, inout metadata m) { apply { } }
control I(inout headers hdr, inout metadata m, inout standard_metadata_t sm) { apply { } }
control E(inout headers hdr, inout metadata m, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata m) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), C(), D()) main;
"#;
        let inc = crate::corpus::find_corpus(&[std::path::Path::new(env!("CARGO_MANIFEST_DIR"))])
            .map(|c| c.join("include"));
        let Some(inc) = inc else {
            eprintln!("SKIPPED: shared/p4-corpus/include not found");
            return;
        };
        let pl = crate::source::load_source("t.p4", src, &[inc], None).unwrap();
        let hs = pl.controller_headers();
        assert_eq!(hs.len(), 2);
        let pin = pl.controller_header("packet_in").unwrap();
        assert_eq!(pin.type_name, "packet_in_t");
        assert_eq!(
            pin.fields,
            vec![("ingress_port".to_string(), 9), ("_pad".to_string(), 7)]
        );
        assert_eq!(pl.controller_header("packet_out").unwrap().bits(), 16);
        assert!(pl.controller_header("digest").is_none());
    }
}
