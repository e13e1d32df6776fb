//! P4-16 tokens from preprocessed text: identifiers (keywords are
//! identifiers the parser recognises by name, since many of them —
//! `apply`, `key`, `type`, `state` — are also valid member or parameter
//! names), integer literals with their width/sign prefixes, strings and
//! operators.
//!
//! `>` is always a single token: the parser rebuilds `>>` and `>=`... from
//! adjacent `>` tokens where an expression wants them, so that nested type
//! arguments (`Register<bit<32>, bit<8>>`) close without splitting. Each
//! token's [`Span`] is the original `file:line:col` through the
//! preprocessor's line map.

use super::preproc::Source;
use super::{ErrorKind, FrontError};
use crate::ast::{IntLit, Span};
use num_bigint::BigUint;

#[derive(Clone, Debug, PartialEq)]
pub enum TokKind {
    Ident(String),
    Int(IntLit),
    Str(String),
    /// An operator or punctuation, e.g. `&&&`, `|+|`, `..`, `{`.
    Punct(&'static str),
    /// A character P4 does not use. Kept as a token so that free-form
    /// annotation bodies (`@scrabble( That's it. )`) lex; the parser
    /// refuses it anywhere else.
    Unknown(char),
    Eof,
}

#[derive(Clone, Debug)]
pub struct Token {
    pub kind: TokKind,
    pub span: Span,
    /// Byte range in [`Source::text`] (annotation bodies keep their text).
    pub start: usize,
    pub end: usize,
    /// Output line index (0-based) in [`Source::text`].
    pub line: usize,
}

impl Token {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match &self.kind {
            TokKind::Ident(s) => format!("'{s}'"),
            TokKind::Int(_) => "integer literal".into(),
            TokKind::Str(_) => "string literal".into(),
            TokKind::Punct(p) => format!("'{p}'"),
            TokKind::Unknown(c) => format!("'{}'", c.escape_default()),
            TokKind::Eof => "end of file".into(),
        }
    }
}

/// Longest first.
const PUNCTS: &[&str] = &[
    "|+|=", "|-|=", "&&&", "|+|", "|-|", "<<=", "&&", "||", "==", "!=", "<=", ">=", "<<", "..",
    "++", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "+", "-", "*", "/", "%", "&", "|", "^",
    "~", "!", "<", ">", "=", "?", ":", ";", ",", ".", "(", ")", "[", "]", "{", "}", "@",
];

/// Splits `src` into tokens, ending with one [`TokKind::Eof`].
pub fn lex(src: &Source) -> Result<Vec<Token>, FrontError> {
    let b = src.text.as_bytes();
    let mut toks = Vec::new();
    let (mut i, mut line) = (0usize, 0usize);
    // Column of byte `col_at` (counted in characters, incrementally).
    let (mut col_at, mut col) = (0usize, 1u32);
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            col_at = i;
            col = 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        col = col.saturating_add(src.text.get(col_at..i).map_or(0, |s| s.chars().count()) as u32);
        col_at = i;
        let span = src.span(line, col);
        let start = i;
        let tok_line = line;
        let kind = if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            TokKind::Ident(src.text[start..i].to_string())
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            TokKind::Int(
                int_literal(&src.text[start..i])
                    .map_err(|m| FrontError::new(ErrorKind::Lex, span.clone(), m))?,
            )
        } else if c == b'"' {
            i += 1;
            let mut s = String::new();
            loop {
                match b.get(i) {
                    None => {
                        return Err(FrontError::new(
                            ErrorKind::Lex,
                            span,
                            "unterminated string literal",
                        ));
                    }
                    // p4c accepts strings over several lines.
                    Some(b'\n') => {
                        s.push('\n');
                        i += 1;
                        line += 1;
                        col_at = i;
                        col = 1;
                    }
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        match b.get(i + 1) {
                            Some(b'n') => s.push('\n'),
                            Some(b't') => s.push('\t'),
                            Some(b'"') => s.push('"'),
                            Some(b'\\') => s.push('\\'),
                            Some(_) => {
                                // Keep unknown escapes as written.
                                s.push('\\');
                                i += 1;
                                continue;
                            }
                            None => {
                                return Err(FrontError::new(
                                    ErrorKind::Lex,
                                    span,
                                    "unterminated string literal",
                                ));
                            }
                        }
                        i += 2;
                    }
                    Some(_) => {
                        let ch = src.text[i..].chars().next().unwrap_or(' ');
                        s.push(ch);
                        i += ch.len_utf8();
                    }
                }
            }
            TokKind::Str(s)
        } else {
            let rest = &b[i..];
            match PUNCTS.iter().find(|p| rest.starts_with(p.as_bytes())) {
                Some(p) => {
                    i += p.len();
                    TokKind::Punct(p)
                }
                None => {
                    let ch = src.text[i..].chars().next().unwrap_or('?');
                    i += ch.len_utf8();
                    TokKind::Unknown(ch)
                }
            }
        };
        toks.push(Token {
            kind,
            span,
            start,
            end: i,
            line: tok_line,
        });
    }
    let line_idx = src.lines.len().saturating_sub(1);
    let eof_span = match src.lines.last() {
        Some((f, l)) => Span {
            file: f.clone(),
            line: *l,
            col: 1,
        },
        None => src.span(0, 1),
    };
    toks.push(Token {
        kind: TokKind::Eof,
        span: eof_span,
        start: b.len(),
        end: b.len(),
        line: line_idx,
    });
    Ok(toks)
}

/// `5`, `0x0800`, `16w0x800`, `8s5`, `0b1010`, `0o17`, `0d9`, `1_000`.
pub fn int_literal(text: &str) -> Result<IntLit, String> {
    let s: String = text.chars().filter(|c| *c != '_').collect();
    let bad = || format!("malformed integer literal '{text}'");
    let mut width = None;
    let mut rest = s.as_str();
    if let Some(pos) = s.find(['w', 's']) {
        let (w, r) = s.split_at(pos);
        if !w.is_empty() && w.bytes().all(|c| c.is_ascii_digit()) {
            let w: u32 = w.parse().map_err(|_| bad())?;
            width = Some((w, r.starts_with('s')));
            rest = &r[1..];
        }
    }
    let (digits, radix) = match rest.get(..2).map(|p| p.to_ascii_lowercase()) {
        Some(p) if p == "0x" => (&rest[2..], 16),
        Some(p) if p == "0b" => (&rest[2..], 2),
        Some(p) if p == "0o" => (&rest[2..], 8),
        Some(p) if p == "0d" => (&rest[2..], 10),
        _ => (rest, 10),
    };
    if digits.is_empty() {
        return Err(bad());
    }
    let value = BigUint::parse_bytes(digits.as_bytes(), radix).ok_or_else(bad)?;
    Ok(IntLit {
        value,
        negative: false,
        width,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals() {
        let l = int_literal("16w0x800").unwrap();
        assert_eq!(
            (l.value, l.width),
            (BigUint::from(0x800u32), Some((16, false)))
        );
        let l = int_literal("8s5").unwrap();
        assert_eq!((l.value, l.width), (BigUint::from(5u32), Some((8, true))));
        assert_eq!(int_literal("0b1_01").unwrap().value, BigUint::from(5u32));
        assert_eq!(int_literal("0o17").unwrap().value, BigUint::from(15u32));
        assert_eq!(int_literal("0d19").unwrap().value, BigUint::from(19u32));
        assert_eq!(
            int_literal("32w0xFFFF_FFFF").unwrap().value,
            BigUint::from(0xffff_ffffu32)
        );
        assert!(int_literal("0x").is_err());
        assert!(int_literal("12ab").is_err());
    }

    #[test]
    fn operators() {
        let src =
            super::super::preprocess_str("t.p4", "a &&& b |+| c |-| d .. e ++ f >> g", &[], &[])
                .unwrap();
        let toks = lex(&src).unwrap();
        let p: Vec<String> = toks
            .iter()
            .filter_map(|t| match &t.kind {
                TokKind::Punct(p) => Some(p.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(p, ["&&&", "|+|", "|-|", "..", "++", ">", ">"]);
    }
}
