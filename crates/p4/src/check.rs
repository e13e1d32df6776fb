//! Name, type and width resolution: turns the [`crate::ast::Program`] the
//! frontend read into the executable program the interpreter runs —
//! types resolved to widths, constants evaluated, the `main` package
//! instantiation unfolded into its parser/control blocks, tables and
//! extern instances numbered. Anything the interpreter cannot run is
//! refused here with `FILE:LINE:COL: unsupported: <construct>`.

use crate::ast::Span;
use thiserror::Error;

/// Why a program could not be loaded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum P4Error {
    /// The frontend refused the source (its message, with file:line).
    #[error("{0}")]
    Front(String),
    /// A construct the interpreter does not run.
    #[error("{span}: unsupported: {what}")]
    Unsupported { span: Span, what: String },
    /// A name, type or width error in the program.
    #[error("{span}: {msg}")]
    Check { span: Span, msg: String },
    /// No `main`, or a package the chosen architecture does not know.
    #[error("{0}")]
    Arch(String),
}

pub(crate) fn unsupported<T>(span: &Span, what: impl Into<String>) -> Result<T, P4Error> {
    Err(P4Error::Unsupported {
        span: span.clone(),
        what: what.into(),
    })
}

pub(crate) fn check_err<T>(span: &Span, msg: impl Into<String>) -> Result<T, P4Error> {
    Err(P4Error::Check {
        span: span.clone(),
        msg: msg.into(),
    })
}
