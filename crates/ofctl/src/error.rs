//! Errors of the rule language.
//!
//! A rule is rejected before it reaches a flow table, so nothing a packet sees
//! ever depends on a half-understood rule. The error therefore has to tell an
//! operator exactly which piece of the text was wrong: [`RuleError::token`] is
//! that piece copied verbatim (`tp_dst=80`, `output:eth9`), so it can be found
//! with a text search in a file of thousands of rules, and
//! [`LineError`] adds the line number when the rules come from a file.

/// One rule could not be understood. `token` is the offending piece of the
/// rule exactly as written; `reason` says what is wrong with it.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("{reason}: `{token}`")]
pub struct RuleError {
    pub token: String,
    pub reason: String,
}

impl RuleError {
    pub fn new(token: impl Into<String>, reason: impl Into<String>) -> Self {
        RuleError {
            token: token.into(),
            reason: reason.into(),
        }
    }
}

/// A rule in a file of rules could not be understood; `line` is 1-based.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("line {line}: {error}")]
pub struct LineError {
    pub line: usize,
    pub error: RuleError,
}

/// Shorthand used throughout the crate.
pub(crate) fn err<T>(token: &str, reason: impl Into<String>) -> Result<T, RuleError> {
    Err(RuleError::new(token, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display() {
        let e = RuleError::new("tp_dst=80", "tp_dst requires tcp, udp or sctp");
        assert_eq!(
            e.to_string(),
            "tp_dst requires tcp, udp or sctp: `tp_dst=80`"
        );
        let l = LineError { line: 3, error: e };
        assert_eq!(
            l.to_string(),
            "line 3: tp_dst requires tcp, udp or sctp: `tp_dst=80`"
        );
    }
}
