//! OpenFlow errors: what went wrong, as the `(type, code)` pair an
//! `OFPT_ERROR` message carries back to the peer.
//!
//! Every decoding step that rejects something says *which* OpenFlow error it
//! is ([`OfpError`]), so the daemon can answer a bad `FLOW_MOD` with exactly
//! the error Open vSwitch would send (`OFPBMC_BAD_PREREQ`,
//! `OFPBAC_BAD_SET_TYPE`, ...) without inspecting strings. Decoding a whole
//! message adds framing information on top ([`DecodeError`]): "not enough
//! bytes yet" is not an error of the peer, a malformed message is.

use std::fmt;

macro_rules! codes {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $n:expr,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        #[allow(non_camel_case_types)]
        pub enum $name { $($(#[$vm])* $v = $n,)* }

        impl $name {
            pub fn from_code(c: u16) -> Option<Self> {
                match c { $($n => Some($name::$v),)* _ => None }
            }
            pub fn name(self) -> &'static str {
                match self { $($name::$v => stringify!($v),)* }
            }
        }
    };
}

codes!(
    /// `OFPET_HELLO_FAILED` codes (`OFPHFC_*`).
    HelloFailed {
        INCOMPATIBLE = 0,
        EPERM = 1,
    }
);
codes!(
    /// `OFPET_BAD_REQUEST` codes (`OFPBRC_*`).
    BadRequest {
        BAD_VERSION = 0,
        BAD_TYPE = 1,
        BAD_MULTIPART = 2,
        BAD_EXPERIMENTER = 3,
        BAD_EXP_TYPE = 4,
        EPERM = 5,
        BAD_LEN = 6,
        BUFFER_EMPTY = 7,
        BUFFER_UNKNOWN = 8,
        BAD_TABLE_ID = 9,
        IS_SLAVE = 10,
        BAD_PORT = 11,
        BAD_PACKET = 12,
        MULTIPART_BUFFER_OVERFLOW = 13,
    }
);
codes!(
    /// `OFPET_BAD_ACTION` codes (`OFPBAC_*`).
    BadAction {
        BAD_TYPE = 0,
        BAD_LEN = 1,
        BAD_EXPERIMENTER = 2,
        BAD_EXP_TYPE = 3,
        BAD_OUT_PORT = 4,
        BAD_ARGUMENT = 5,
        EPERM = 6,
        TOO_MANY = 7,
        BAD_QUEUE = 8,
        BAD_OUT_GROUP = 9,
        MATCH_INCONSISTENT = 10,
        UNSUPPORTED_ORDER = 11,
        BAD_TAG = 12,
        BAD_SET_TYPE = 13,
        BAD_SET_LEN = 14,
        BAD_SET_ARGUMENT = 15,
    }
);
codes!(
    /// `OFPET_BAD_INSTRUCTION` codes (`OFPBIC_*`).
    BadInstruction {
        UNKNOWN_INST = 0,
        UNSUP_INST = 1,
        BAD_TABLE_ID = 2,
        UNSUP_METADATA = 3,
        UNSUP_METADATA_MASK = 4,
        BAD_EXPERIMENTER = 5,
        BAD_EXP_TYPE = 6,
        BAD_LEN = 7,
        EPERM = 8,
    }
);
codes!(
    /// `OFPET_BAD_MATCH` codes (`OFPBMC_*`).
    BadMatch {
        BAD_TYPE = 0,
        BAD_LEN = 1,
        BAD_TAG = 2,
        BAD_DL_ADDR_MASK = 3,
        BAD_NW_ADDR_MASK = 4,
        BAD_WILDCARDS = 5,
        BAD_FIELD = 6,
        BAD_VALUE = 7,
        BAD_MASK = 8,
        BAD_PREREQ = 9,
        DUP_FIELD = 10,
        EPERM = 11,
    }
);
codes!(
    /// `OFPET_FLOW_MOD_FAILED` codes (`OFPFMFC_*`).
    FlowModFailed {
        UNKNOWN = 0,
        TABLE_FULL = 1,
        BAD_TABLE_ID = 2,
        OVERLAP = 3,
        EPERM = 4,
        BAD_TIMEOUT = 5,
        BAD_COMMAND = 6,
        BAD_FLAGS = 7,
    }
);
codes!(
    /// `OFPET_GROUP_MOD_FAILED` codes (`OFPGMFC_*`).
    GroupModFailed {
        GROUP_EXISTS = 0,
        INVALID_GROUP = 1,
        WEIGHT_UNSUPPORTED = 2,
        OUT_OF_GROUPS = 3,
        OUT_OF_BUCKETS = 4,
        CHAINING_UNSUPPORTED = 5,
        WATCH_UNSUPPORTED = 6,
        LOOP = 7,
        UNKNOWN_GROUP = 8,
        CHAINED_GROUP = 9,
        BAD_TYPE = 10,
        BAD_COMMAND = 11,
        BAD_BUCKET = 12,
        BAD_WATCH = 13,
        EPERM = 14,
        /// OpenFlow 1.5: `command_bucket_id` names no bucket of the group.
        UNKNOWN_BUCKET = 15,
        /// OpenFlow 1.5: an inserted bucket's id is already in the group.
        BUCKET_EXISTS = 16,
    }
);
codes!(
    /// `OFPET_PORT_MOD_FAILED` codes (`OFPPMFC_*`).
    PortModFailed {
        BAD_PORT = 0,
        BAD_HW_ADDR = 1,
        BAD_CONFIG = 2,
        BAD_ADVERTISE = 3,
        EPERM = 4,
    }
);
codes!(
    /// `OFPET_TABLE_MOD_FAILED` codes (`OFPTMFC_*`).
    TableModFailed {
        BAD_TABLE = 0,
        BAD_CONFIG = 1,
        EPERM = 2,
    }
);
codes!(
    /// `OFPET_SWITCH_CONFIG_FAILED` codes (`OFPSCFC_*`).
    SwitchConfigFailed {
        BAD_FLAGS = 0,
        BAD_LEN = 1,
        EPERM = 2,
    }
);
codes!(
    /// `OFPET_ROLE_REQUEST_FAILED` codes (`OFPRRFC_*`).
    RoleRequestFailed {
        STALE = 0,
        UNSUP = 1,
        BAD_ROLE = 2,
    }
);
codes!(
    /// `OFPET_METER_MOD_FAILED` codes (`OFPMMFC_*`).
    MeterModFailed {
        UNKNOWN = 0,
        METER_EXISTS = 1,
        INVALID_METER = 2,
        UNKNOWN_METER = 3,
        BAD_COMMAND = 4,
        BAD_FLAGS = 5,
        BAD_RATE = 6,
        BAD_BURST = 7,
        BAD_BAND = 8,
        BAD_BAND_VALUE = 9,
        OUT_OF_METERS = 10,
        OUT_OF_BANDS = 11,
    }
);
codes!(
    /// `OFPET_TABLE_FEATURES_FAILED` codes (`OFPTFFC_*`).
    TableFeaturesFailed {
        BAD_TABLE = 0,
        BAD_METADATA = 1,
        BAD_TYPE = 2,
        BAD_LEN = 3,
        BAD_ARGUMENT = 4,
        EPERM = 5,
    }
);

codes!(
    /// `OFPET14_BAD_PROPERTY` codes (`OFPBPC_*`, OpenFlow 1.4+).
    BadProperty {
        BAD_TYPE = 0,
        BAD_LEN = 1,
        BAD_VALUE = 2,
        TOO_MANY = 3,
        DUP_TYPE = 4,
        BAD_EXPERIMENTER = 5,
        BAD_EXP_TYPE = 6,
        BAD_EXP_VALUE = 7,
        EPERM = 8,
    }
);
codes!(
    /// `OFPET14_BUNDLE_FAILED` codes (`OFPBFC_*`, OpenFlow 1.4+).
    BundleFailed {
        UNKNOWN = 0,
        EPERM = 1,
        BAD_ID = 2,
        BUNDLE_EXIST = 3,
        BUNDLE_CLOSED = 4,
        OUT_OF_BUNDLES = 5,
        BAD_TYPE = 6,
        BAD_FLAGS = 7,
        MSG_BAD_LEN = 8,
        MSG_BAD_XID = 9,
        MSG_UNSUP = 10,
        MSG_CONFLICT = 11,
        MSG_TOO_MANY = 12,
        MSG_FAILED = 13,
        TIMEOUT = 14,
        BUNDLE_IN_PROGRESS = 15,
    }
);

/// An OpenFlow 1.3 error: the `(type, code)` of an `OFPT_ERROR` message.
///
/// Codes nicflow never produces but a peer may send are kept as
/// [`OfpError::Other`] so a received error always decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum OfpError {
    #[error("OFPHFC_{}", .0.name())]
    HelloFailed(HelloFailed),
    #[error("OFPBRC_{}", .0.name())]
    BadRequest(BadRequest),
    #[error("OFPBAC_{}", .0.name())]
    BadAction(BadAction),
    #[error("OFPBIC_{}", .0.name())]
    BadInstruction(BadInstruction),
    #[error("OFPBMC_{}", .0.name())]
    BadMatch(BadMatch),
    #[error("OFPFMFC_{}", .0.name())]
    FlowModFailed(FlowModFailed),
    #[error("OFPGMFC_{}", .0.name())]
    GroupModFailed(GroupModFailed),
    #[error("OFPPMFC_{}", .0.name())]
    PortModFailed(PortModFailed),
    #[error("OFPTMFC_{}", .0.name())]
    TableModFailed(TableModFailed),
    #[error("OFPSCFC_{}", .0.name())]
    SwitchConfigFailed(SwitchConfigFailed),
    #[error("OFPRRFC_{}", .0.name())]
    RoleRequestFailed(RoleRequestFailed),
    #[error("OFPMMFC_{}", .0.name())]
    MeterModFailed(MeterModFailed),
    #[error("OFPTFFC_{}", .0.name())]
    TableFeaturesFailed(TableFeaturesFailed),
    #[error("OFPBPC_{}", .0.name())]
    BadProperty(BadProperty),
    #[error("OFPBFC_{}", .0.name())]
    BundleFailed(BundleFailed),
    /// Any other `(type, code)`, e.g. from a peer.
    #[error("OpenFlow error type {ty} code {code}")]
    Other { ty: u16, code: u16 },
}

/// `OFPET_*` numbers.
pub mod ty {
    pub const HELLO_FAILED: u16 = 0;
    pub const BAD_REQUEST: u16 = 1;
    pub const BAD_ACTION: u16 = 2;
    pub const BAD_INSTRUCTION: u16 = 3;
    pub const BAD_MATCH: u16 = 4;
    pub const FLOW_MOD_FAILED: u16 = 5;
    pub const GROUP_MOD_FAILED: u16 = 6;
    pub const PORT_MOD_FAILED: u16 = 7;
    pub const TABLE_MOD_FAILED: u16 = 8;
    pub const QUEUE_OP_FAILED: u16 = 9;
    pub const SWITCH_CONFIG_FAILED: u16 = 10;
    pub const ROLE_REQUEST_FAILED: u16 = 11;
    pub const METER_MOD_FAILED: u16 = 12;
    pub const TABLE_FEATURES_FAILED: u16 = 13;
    /// OpenFlow 1.4+.
    pub const BAD_PROPERTY: u16 = 14;
    /// OpenFlow 1.4+.
    pub const BUNDLE_FAILED: u16 = 17;
    pub const EXPERIMENTER: u16 = 0xffff;
}

impl OfpError {
    /// The `(type, code)` pair to put on the wire.
    pub fn type_code(self) -> (u16, u16) {
        match self {
            OfpError::HelloFailed(c) => (ty::HELLO_FAILED, c as u16),
            OfpError::BadRequest(c) => (ty::BAD_REQUEST, c as u16),
            OfpError::BadAction(c) => (ty::BAD_ACTION, c as u16),
            OfpError::BadInstruction(c) => (ty::BAD_INSTRUCTION, c as u16),
            OfpError::BadMatch(c) => (ty::BAD_MATCH, c as u16),
            OfpError::FlowModFailed(c) => (ty::FLOW_MOD_FAILED, c as u16),
            OfpError::GroupModFailed(c) => (ty::GROUP_MOD_FAILED, c as u16),
            OfpError::PortModFailed(c) => (ty::PORT_MOD_FAILED, c as u16),
            OfpError::TableModFailed(c) => (ty::TABLE_MOD_FAILED, c as u16),
            OfpError::SwitchConfigFailed(c) => (ty::SWITCH_CONFIG_FAILED, c as u16),
            OfpError::RoleRequestFailed(c) => (ty::ROLE_REQUEST_FAILED, c as u16),
            OfpError::MeterModFailed(c) => (ty::METER_MOD_FAILED, c as u16),
            OfpError::TableFeaturesFailed(c) => (ty::TABLE_FEATURES_FAILED, c as u16),
            OfpError::BadProperty(c) => (ty::BAD_PROPERTY, c as u16),
            OfpError::BundleFailed(c) => (ty::BUNDLE_FAILED, c as u16),
            OfpError::Other { ty, code } => (ty, code),
        }
    }

    /// The typed error for a `(type, code)` pair; unknown pairs become
    /// [`OfpError::Other`].
    pub fn from_type_code(t: u16, code: u16) -> OfpError {
        let typed = match t {
            ty::HELLO_FAILED => HelloFailed::from_code(code).map(OfpError::HelloFailed),
            ty::BAD_REQUEST => BadRequest::from_code(code).map(OfpError::BadRequest),
            ty::BAD_ACTION => BadAction::from_code(code).map(OfpError::BadAction),
            ty::BAD_INSTRUCTION => BadInstruction::from_code(code).map(OfpError::BadInstruction),
            ty::BAD_MATCH => BadMatch::from_code(code).map(OfpError::BadMatch),
            ty::FLOW_MOD_FAILED => FlowModFailed::from_code(code).map(OfpError::FlowModFailed),
            ty::GROUP_MOD_FAILED => GroupModFailed::from_code(code).map(OfpError::GroupModFailed),
            ty::PORT_MOD_FAILED => PortModFailed::from_code(code).map(OfpError::PortModFailed),
            ty::TABLE_MOD_FAILED => TableModFailed::from_code(code).map(OfpError::TableModFailed),
            ty::SWITCH_CONFIG_FAILED => {
                SwitchConfigFailed::from_code(code).map(OfpError::SwitchConfigFailed)
            }
            ty::ROLE_REQUEST_FAILED => {
                RoleRequestFailed::from_code(code).map(OfpError::RoleRequestFailed)
            }
            ty::METER_MOD_FAILED => MeterModFailed::from_code(code).map(OfpError::MeterModFailed),
            ty::TABLE_FEATURES_FAILED => {
                TableFeaturesFailed::from_code(code).map(OfpError::TableFeaturesFailed)
            }
            ty::BAD_PROPERTY => BadProperty::from_code(code).map(OfpError::BadProperty),
            ty::BUNDLE_FAILED => BundleFailed::from_code(code).map(OfpError::BundleFailed),
            _ => None,
        };
        typed.unwrap_or(OfpError::Other { ty: t, code })
    }
}

/// Shorthands used throughout the crate.
pub(crate) mod e {
    use super::*;
    pub const BRC_BAD_LEN: OfpError = OfpError::BadRequest(BadRequest::BAD_LEN);
    pub const BAC_BAD_LEN: OfpError = OfpError::BadAction(BadAction::BAD_LEN);
    pub const BAC_BAD_ARG: OfpError = OfpError::BadAction(BadAction::BAD_ARGUMENT);
    pub const BIC_BAD_LEN: OfpError = OfpError::BadInstruction(BadInstruction::BAD_LEN);
    pub const BMC_BAD_LEN: OfpError = OfpError::BadMatch(BadMatch::BAD_LEN);
    pub const fn bmc(c: BadMatch) -> OfpError {
        OfpError::BadMatch(c)
    }
    pub const fn bac(c: BadAction) -> OfpError {
        OfpError::BadAction(c)
    }
    pub const fn brc(c: BadRequest) -> OfpError {
        OfpError::BadRequest(c)
    }
}

/// Why [`crate::msg::decode`] returned no message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The buffer holds the start of a message but not all of it: read at
    /// least `needed` more bytes and try again. Not the peer's fault.
    #[error("incomplete message: {needed} more bytes needed")]
    Incomplete { needed: usize },
    /// The message is complete but wrong. Answer with
    /// [`Malformed::reply`] and skip [`Malformed::skip`] bytes (or close the
    /// connection if framing is lost).
    #[error("{0}")]
    Malformed(Box<Malformed>),
}

/// A complete message that could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// Header of the offending message (as much as could be read).
    pub version: u8,
    pub msg_type: u8,
    pub xid: u32,
    /// The error to send back.
    pub error: OfpError,
    /// Human words for logs.
    pub reason: String,
    /// Bytes to drop from the stream to reach the next message; `None`
    /// when the header's length itself is impossible (< 8), so framing is
    /// lost and the connection should be closed after the error is sent.
    pub skip: Option<usize>,
    /// Up to the first 64 bytes of the message, for the error's data.
    pub data: Vec<u8>,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad OpenFlow message (type {}, xid {:#x}): {}: {}",
            self.msg_type, self.xid, self.error, self.reason
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_code_round_trip() {
        for t in 0..14u16 {
            for c in 0..20u16 {
                let e = OfpError::from_type_code(t, c);
                assert_eq!(e.type_code(), (t, c));
            }
        }
        assert_eq!(
            OfpError::BadMatch(BadMatch::BAD_PREREQ).to_string(),
            "OFPBMC_BAD_PREREQ"
        );
        assert_eq!(
            OfpError::BadAction(BadAction::BAD_SET_TYPE).type_code(),
            (2, 13)
        );
    }
}
