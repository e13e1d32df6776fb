//! CNI errors: the spec's error JSON on stdout and a non-zero exit.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Error codes of the CNI specification (1.1.0, "Error").
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENV: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODE_FAILURE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS (1.1): the plugin cannot serve ADD now.
    pub const NOT_AVAILABLE: u32 = 50;
    pub const GENERIC: u32 = 999;
}

/// `{"cniVersion", "code", "msg", "details"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniError {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> CniError {
        CniError {
            cni_version: super::types::LATEST.to_string(),
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> CniError {
        self.details = details.into();
        self
    }

    pub fn invalid_config(msg: impl Into<String>) -> CniError {
        CniError::new(code::INVALID_CONFIG, msg)
    }

    pub fn generic(msg: impl Into<String>) -> CniError {
        CniError::new(code::GENERIC, msg)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(
                r#"{{"cniVersion":"1.0.0","code":{},"msg":"error"}}"#,
                self.code
            )
        })
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CNI error {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}

pub type CniResult<T> = Result<T, CniError>;
