//! Splitting a rule's text into pieces.
//!
//! This is the first step on the way from an operator's text to a rule the
//! classifier can install: the match part is cut into `key=value` and bare
//! keyword pieces, and everything after `actions=` into action pieces. Every
//! piece is a slice of the original text, so an error can quote exactly what
//! the user wrote.
//!
//! Separators are commas and whitespace. In the action list they only count
//! outside parentheses and brackets, so `resubmit(,2)` and
//! `load:1->NXM_NX_REG0[0..3]` stay whole.

use crate::error::{err, RuleError};

fn is_sep(c: char) -> bool {
    c == ',' || c.is_whitespace()
}

/// A rule split into its match pieces and the raw action text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Split<'a> {
    pub matches: Vec<&'a str>,
    /// `(whole "actions=..." piece, text after "actions=")`, if present.
    pub actions: Option<(&'a str, &'a str)>,
}

/// Cut a rule at separators; `actions=` (or `action=`) at the start of a
/// piece takes the rest of the text.
pub(crate) fn split_rule(text: &str) -> Split<'_> {
    let mut matches = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches(is_sep);
        if rest.is_empty() {
            return Split {
                matches,
                actions: None,
            };
        }
        // `action=` is OVS's other spelling (its parser looks for "action"
        // followed by `=`); OVS's own system tests write it.
        if let Some(acts) = rest
            .strip_prefix("actions=")
            .or_else(|| rest.strip_prefix("action="))
        {
            return Split {
                matches,
                actions: Some((rest.trim_end(), acts)),
            };
        }
        let end = rest.find(is_sep).unwrap_or(rest.len());
        matches.push(&rest[..end]);
        rest = &rest[end..];
    }
}

/// Cut an action list at top-level separators.
pub(crate) fn split_actions(text: &str) -> Result<Vec<&str>, RuleError> {
    let mut out = Vec::new();
    let mut depth: usize = 0;
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if depth == 0 && is_sep(c) {
            if let Some(s) = start.take() {
                out.push(&text[s..i]);
            }
            continue;
        }
        let s = *start.get_or_insert(i);
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => {
                if depth == 0 {
                    let end = text[i..].find(is_sep).map_or(text.len(), |e| i + e);
                    return err(&text[s..end], "unbalanced parentheses or brackets");
                }
                depth -= 1;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        if depth != 0 {
            return err(text[s..].trim_end(), "unbalanced parentheses or brackets");
        }
        out.push(&text[s..]);
    }
    Ok(out)
}

/// Split `name[:=(]arg`: the name runs up to the first `:`, `=` or `(`.
/// Returns `(name, delimiter, rest after the delimiter)`.
pub(crate) fn split_key(piece: &str) -> (&str, Option<char>, &str) {
    match piece.find([':', '=', '(']) {
        Some(i) => {
            let d = piece[i..].chars().next();
            (&piece[..i], d, &piece[i + 1..])
        }
        None => (piece, None, ""),
    }
}

/// Split `a,b` inside parentheses into trimmed parts (no nesting needed for
/// the argument lists this language has).
pub(crate) fn split_args(inner: &str) -> Vec<&str> {
    inner.split(',').map(str::trim).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_pieces() {
        let s = split_rule("  table=1, priority=5 tcp,,tp_dst=80 actions=output:1, 2 ");
        assert_eq!(s.matches, vec!["table=1", "priority=5", "tcp", "tp_dst=80"]);
        assert_eq!(s.actions, Some(("actions=output:1, 2", "output:1, 2 ")));
        let s = split_rule("ip");
        assert_eq!(s.matches, vec!["ip"]);
        assert_eq!(s.actions, None);
        let s = split_rule("xactions=1 actions=");
        assert_eq!(s.matches, vec!["xactions=1"]);
        assert_eq!(s.actions, Some(("actions=", "")));
        assert_eq!(split_rule("").matches, Vec::<&str>::new());
        let s = split_rule("ip action=output:1");
        assert_eq!(s.matches, vec!["ip"]);
        assert_eq!(s.actions, Some(("action=output:1", "output:1")));
    }

    #[test]
    fn action_pieces() {
        assert_eq!(
            split_actions("resubmit(,2), load:1->NXM_NX_REG0[0..3] output:1").unwrap(),
            vec!["resubmit(,2)", "load:1->NXM_NX_REG0[0..3]", "output:1"]
        );
        assert_eq!(
            split_actions("controller(max_len=5, ), 1").unwrap(),
            vec!["controller(max_len=5, )", "1"]
        );
        assert_eq!(split_actions("").unwrap(), Vec::<&str>::new());
        let e = split_actions("output:1,resubmit(,2").unwrap_err();
        assert_eq!(e.token, "resubmit(,2");
        let e = split_actions("output:1,x),2").unwrap_err();
        assert_eq!(e.token, "x)");
    }

    #[test]
    fn keys() {
        assert_eq!(split_key("output:1"), ("output", Some(':'), "1"));
        assert_eq!(split_key("output=1"), ("output", Some('='), "1"));
        assert_eq!(split_key("resubmit(,2)"), ("resubmit", Some('('), ",2)"));
        assert_eq!(split_key("normal"), ("normal", None, ""));
        assert_eq!(
            split_key("mod_dl_src:00:11:22:33:44:55"),
            ("mod_dl_src", Some(':'), "00:11:22:33:44:55")
        );
        assert_eq!(split_args(" , 2"), vec!["", "2"]);
    }
}
