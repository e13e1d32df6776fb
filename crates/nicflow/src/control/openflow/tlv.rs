//! The switch-wide Geneve option map (`NXT_TLV_TABLE_MOD`,
//! `NXT_TLV_TABLE_REQUEST`), as Open vSwitch keeps it: one table for every
//! bridge, mapping an option (class, type, length) to `tun_metadata<N>`.
//! ovn-controller reads it at connect and adds its option
//! (`{class=0x0102,type=0x80,len=4}`) to the first free index.
//!
//! The table feeds every Geneve tunnel port of every bridge
//! (`Bridge::set_tlv_map`): received options it names become
//! `tun_metadataN`, and `tun_metadataN` set by rules goes out as that
//! option. nicflow's flow key has eight 4-byte metadata slots, so an
//! index above 7 is `NXTTMFC_BAD_FIELD_IDX` and a length other than 4
//! `NXTTMFC_BAD_OPT_LEN` (OVS takes 64 indexes and up to 124 bytes; OVN
//! maps one 4-byte option). Errors as OVS's: an index already mapped is
//! `NXTTMFC_ALREADY_MAPPED`, an option already mapped (to another index or
//! twice in one request) `NXTTMFC_DUP_ENTRY`, an unknown command
//! `NXTTMFC_BAD_COMMAND`; a refused request changes nothing. Deleting an
//! index that is not mapped is not an error (as in OVS). Not persisted
//! (OVS keeps it in memory too; controllers set it again at connect).

use nicflow_openflow::msg::nx::{TlvMap, TlvTableCommand, TlvTableMod, TlvTableReply};
use nicflow_openflow::OfpError;
use nicflow_port::tunnel::TlvMapping;

/// `tun_metadata` slots nicflow's flow key has.
pub const SLOTS: u16 = 8;
/// Option bytes per slot.
pub const OPT_LEN: u8 = 4;

/// `NXTTMFC_*` codes (Nicira experimenter errors, `NX1.2+`).
pub mod nxttmfc {
    pub const BAD_COMMAND: u16 = 16;
    pub const BAD_OPT_LEN: u16 = 17;
    pub const BAD_FIELD_IDX: u16 = 18;
    pub const TABLE_FULL: u16 = 19;
    pub const ALREADY_MAPPED: u16 = 20;
    pub const DUP_ENTRY: u16 = 21;
}

/// A Nicira error: `OFPET_EXPERIMENTER` with the code; the error data
/// must start with the experimenter id ([`nx_error_data`]).
pub fn nx_error(code: u16) -> OfpError {
    OfpError::Other { ty: 0xffff, code }
}

/// The data of a Nicira error: the experimenter id, then the request.
pub fn nx_error_data(request: &[u8]) -> Vec<u8> {
    let mut v = nicflow_openflow::msg::nx::NX_VENDOR_ID
        .to_be_bytes()
        .to_vec();
    v.extend_from_slice(request);
    v
}

/// The switch's table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlvTable {
    maps: Vec<TlvMap>,
}

impl TlvTable {
    /// Apply a `NXT_TLV_TABLE_MOD`, all or nothing. `Ok(true)` if the table
    /// changed; `Err(code)`: the `NXTTMFC_*` code.
    pub fn apply(&mut self, m: &TlvTableMod) -> Result<bool, u16> {
        let mut next = self.maps.clone();
        match m.command {
            TlvTableCommand::Add => {
                for t in &m.maps {
                    if t.index >= SLOTS {
                        return Err(nxttmfc::BAD_FIELD_IDX);
                    }
                    if t.option_len != OPT_LEN {
                        return Err(nxttmfc::BAD_OPT_LEN);
                    }
                    if next.iter().any(|o| o.index == t.index) {
                        return Err(nxttmfc::ALREADY_MAPPED);
                    }
                    if next
                        .iter()
                        .any(|o| (o.option_class, o.option_type) == (t.option_class, t.option_type))
                    {
                        return Err(nxttmfc::DUP_ENTRY);
                    }
                    next.push(*t);
                }
            }
            TlvTableCommand::Delete => {
                for t in &m.maps {
                    if t.index >= SLOTS {
                        return Err(nxttmfc::BAD_FIELD_IDX);
                    }
                    next.retain(|o| o.index != t.index);
                }
            }
            TlvTableCommand::Clear => next.clear(),
        }
        next.sort_by_key(|t| t.index);
        let changed = next != self.maps;
        self.maps = next;
        Ok(changed)
    }

    /// The `NXT_TLV_TABLE_REPLY`.
    pub fn reply(&self) -> TlvTableReply {
        TlvTableReply {
            max_option_space: u32::from(SLOTS) * u32::from(OPT_LEN),
            max_fields: SLOTS,
            maps: self.maps.clone(),
        }
    }

    /// The map as tunnel ports take it.
    pub fn mappings(&self) -> Vec<TlvMapping> {
        self.maps
            .iter()
            .map(|t| TlvMapping {
                class: t.option_class,
                typ: t.option_type,
                slot: t.index as u8,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(class: u16, ty: u8, len: u8, index: u16) -> TlvMap {
        TlvMap {
            option_class: class,
            option_type: ty,
            option_len: len,
            index,
        }
    }

    fn tm(command: TlvTableCommand, maps: Vec<TlvMap>) -> TlvTableMod {
        TlvTableMod { command, maps }
    }

    #[test]
    fn errors_as_open_vswitch_and_nothing_changes_on_one() {
        use TlvTableCommand::*;
        let mut t = TlvTable::default();
        assert_eq!(t.apply(&tm(Add, vec![m(0x102, 0x80, 4, 0)])), Ok(true));
        let before = t.clone();
        for (maps, code) in [
            (vec![m(0x102, 0x81, 4, 0)], nxttmfc::ALREADY_MAPPED),
            (vec![m(0x102, 0x80, 4, 1)], nxttmfc::DUP_ENTRY),
            (vec![m(1, 1, 4, 2), m(1, 1, 4, 3)], nxttmfc::DUP_ENTRY),
            (vec![m(1, 1, 4, 2), m(1, 2, 4, 2)], nxttmfc::ALREADY_MAPPED),
            (vec![m(1, 1, 8, 2)], nxttmfc::BAD_OPT_LEN),
            (vec![m(1, 1, 4, 8)], nxttmfc::BAD_FIELD_IDX),
        ] {
            assert_eq!(t.apply(&tm(Add, maps.clone())), Err(code), "{maps:?}");
            assert_eq!(t, before);
        }
        assert_eq!(t.apply(&tm(Add, vec![m(0xffff, 0, 4, 3)])), Ok(true));
        assert_eq!(
            t.reply().maps,
            vec![m(0x102, 0x80, 4, 0), m(0xffff, 0, 4, 3)]
        );
        assert_eq!(
            t.mappings(),
            vec![
                TlvMapping {
                    class: 0x102,
                    typ: 0x80,
                    slot: 0
                },
                TlvMapping {
                    class: 0xffff,
                    typ: 0,
                    slot: 3
                }
            ]
        );
        // Deleting an unmapped index is no error.
        assert_eq!(t.apply(&tm(Delete, vec![m(0, 0, 0, 5)])), Ok(false));
        assert_eq!(t.apply(&tm(Delete, vec![m(0, 0, 0, 0)])), Ok(true));
        assert_eq!(t.apply(&tm(Clear, vec![])), Ok(true));
        assert!(t.reply().maps.is_empty());
    }
}
