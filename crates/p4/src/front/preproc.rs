//! The C-style preprocessor P4-16 programs rely on: `#include` of the
//! architecture files (`core.p4`, `pna.p4`, `v1model.p4`, `psa.p4`),
//! include guards, object- and function-like `#define`s, `#if` families
//! with integer expressions (v1model.p4's `#if V1MODEL_VERSION >= ...`).
//!
//! It runs first on a program handed to nicflow. Its output keeps, for
//! every line it emits, the original file and line ([`Source::lines`]), so
//! that the lexer's spans — and every later refusal — name the real
//! `file:line`, not a position in the concatenated text. Comments are
//! blanked (newlines kept) before anything else.

use super::{ErrorKind, FrontError};
use crate::ast::Span;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Includes nested deeper than this are refused (an include loop without
/// guards would otherwise recurse forever).
const MAX_INCLUDE_DEPTH: usize = 64;
/// Macro rescans nested deeper than this are refused.
const MAX_EXPAND_DEPTH: usize = 128;
/// Start of the error for a macro call without its `)` on the line.
const UNTERMINATED_CALL: &str = "unterminated call of macro";
/// Output larger than this is refused (macro bombs).
const MAX_OUTPUT: usize = 64 << 20;
/// Macro expansions per program beyond this are refused (exponential
/// macro definitions would otherwise run for hours before the size limit).
const MAX_EXPANSIONS: usize = 1 << 20;

/// Preprocessed text and where each of its lines came from.
#[derive(Clone, Debug, Default)]
pub struct Source {
    /// The text the lexer reads: one line per entry of `lines`.
    pub text: String,
    /// For output line `i` (0-based), the original file and 1-based line.
    pub lines: Vec<(Arc<str>, u32)>,
    /// Column maps of the output lines where macros were expanded (other
    /// lines keep their columns): so that a token after `ETHERTYPE_IPV4:`
    /// still reports the column it has in the file.
    cols: HashMap<usize, Vec<ColSeg>>,
}

/// From output column `out` on, columns map to `orig` (+ offset when
/// `verbatim`; a macro's expansion maps entirely to the macro's name).
#[derive(Clone, Copy, Debug)]
struct ColSeg {
    out: u32,
    orig: u32,
    verbatim: bool,
}

impl Source {
    /// The span of column `col` (1-based) of output line `idx` (0-based).
    pub fn span(&self, idx: usize, col: u32) -> Span {
        let col = match self
            .cols
            .get(&idx)
            .and_then(|m| m.iter().rev().find(|s| s.out <= col))
        {
            Some(s) if s.verbatim => s.orig.saturating_add(col - s.out),
            Some(s) => s.orig,
            None => col,
        };
        match self.lines.get(idx).or(self.lines.last()) {
            Some((f, l)) => Span {
                file: f.clone(),
                line: *l,
                col,
            },
            None => Span {
                file: Arc::from("<empty>"),
                line: 1,
                col,
            },
        }
    }
}

#[derive(Clone, Debug)]
struct Macro {
    /// `None` for object-like macros.
    params: Option<Vec<String>>,
    body: String,
}

struct Cond {
    /// Whether lines are emitted now.
    active: bool,
    /// Whether some branch of this `#if` was already taken.
    taken: bool,
    /// Whether the enclosing region is active.
    parent: bool,
    seen_else: bool,
    line: u32,
}

struct Pre<'a> {
    include_dirs: &'a [PathBuf],
    macros: HashMap<String, Macro>,
    once: HashSet<PathBuf>,
    out: String,
    lines: Vec<(Arc<str>, u32)>,
    cols: HashMap<usize, Vec<ColSeg>>,
    depth: usize,
    expansions: std::cell::Cell<usize>,
}

/// Preprocesses the file at `path`. `defines` are `-D NAME=VALUE`s.
pub fn preprocess(
    path: &Path,
    include_dirs: &[PathBuf],
    defines: &[(String, String)],
) -> Result<Source, FrontError> {
    let name: Arc<str> = Arc::from(path.display().to_string());
    let text = std::fs::read_to_string(path).map_err(|e| {
        FrontError::at(ErrorKind::Io, &name, 1, 1, format!("cannot read file: {e}"))
    })?;
    let mut pre = Pre::new(include_dirs, defines);
    pre.file(&name, path.parent(), &text)?;
    Ok(pre.finish())
}

/// Preprocesses `text` as if read from a file called `name` (no directory:
/// `#include "x"` searches only `include_dirs`).
pub fn preprocess_str(
    name: &str,
    text: &str,
    include_dirs: &[PathBuf],
    defines: &[(String, String)],
) -> Result<Source, FrontError> {
    let name: Arc<str> = Arc::from(name);
    let mut pre = Pre::new(include_dirs, defines);
    pre.file(&name, None, text)?;
    Ok(pre.finish())
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Blanks `//` and `/* */` comments (outside strings), keeping newlines so
/// that line numbers stay. An unterminated block comment is an error at
/// its start.
fn strip_comments(file: &Arc<str>, text: &str) -> Result<String, FrontError> {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut line, mut col) = (0usize, 1u32, 1u32);
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            out.push(c);
            if c == '\\' && i + 1 < b.len() && b[i + 1] != '\n' {
                out.push(b[i + 1]);
                i += 2;
                col += 2;
                continue;
            }
            if c == '"' || c == '\n' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
            out.push(c);
        } else if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
            continue;
        } else if c == '/' && b.get(i + 1) == Some(&'*') {
            let (sl, sc) = (line, col);
            i += 2;
            col += 2;
            out.push_str("  ");
            loop {
                if i >= b.len() {
                    return Err(FrontError::at(
                        ErrorKind::Preprocess,
                        file,
                        sl,
                        sc,
                        "unterminated comment '/*'",
                    ));
                }
                if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    i += 2;
                    col += 2;
                    out.push_str("  ");
                    break;
                }
                if b[i] == '\n' {
                    out.push('\n');
                    line += 1;
                    col = 1;
                } else {
                    out.push(' ');
                    col += 1;
                }
                i += 1;
            }
            continue;
        } else {
            out.push(c);
        }
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
        i += 1;
    }
    Ok(out)
}

impl<'a> Pre<'a> {
    fn new(include_dirs: &'a [PathBuf], defines: &[(String, String)]) -> Self {
        let mut macros = HashMap::new();
        for (k, v) in defines {
            macros.insert(
                k.clone(),
                Macro {
                    params: None,
                    body: v.clone(),
                },
            );
        }
        Pre {
            include_dirs,
            macros,
            once: HashSet::new(),
            out: String::new(),
            lines: Vec::new(),
            cols: HashMap::new(),
            depth: 0,
            expansions: std::cell::Cell::new(0),
        }
    }

    fn finish(self) -> Source {
        Source {
            text: self.out,
            lines: self.lines,
            cols: self.cols,
        }
    }

    fn file(&mut self, name: &Arc<str>, dir: Option<&Path>, text: &str) -> Result<(), FrontError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let text = strip_comments(name, text)?;
        // Logical lines: backslash-newline joins, keeping the first line's number.
        let mut logical: Vec<(u32, String)> = Vec::new();
        let mut cur = String::new();
        let mut start = 0u32;
        let mut cont = false;
        for (i, raw) in text.split('\n').enumerate() {
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            if !cont {
                start = i as u32 + 1;
                cur.clear();
            }
            if let Some(s) = raw.strip_suffix('\\') {
                cur.push_str(s);
                cur.push(' ');
                cont = true;
            } else {
                cur.push_str(raw);
                cont = false;
                logical.push((start, std::mem::take(&mut cur)));
            }
        }
        if cont {
            logical.push((start, cur));
        }
        let mut conds: Vec<Cond> = Vec::new();
        let mut k = 0;
        while k < logical.len() {
            let (line, content) = &logical[k];
            k += 1;
            let line = *line;
            let trimmed = content.trim_start();
            let active = conds.last().is_none_or(|c| c.active);
            if let Some(d) = trimmed.strip_prefix('#') {
                let d = d.trim_start();
                let dname: String = d.chars().take_while(|c| is_ident_char(*c)).collect();
                let rest = d[dname.len()..].trim();
                let col = (content.len() - trimmed.len()) as u32 + 1;
                let err = |m: String| FrontError::at(ErrorKind::Preprocess, name, line, col, m);
                match dname.as_str() {
                    "if" | "ifdef" | "ifndef" => {
                        let v = if !active {
                            false
                        } else if dname == "if" {
                            self.eval_if(rest)
                                .map_err(|m| err(format!("bad #if: {m}")))?
                                != 0
                        } else {
                            let n = first_ident(rest)
                                .ok_or_else(|| err(format!("#{dname} needs a macro name")))?;
                            self.macros.contains_key(n) == (dname == "ifdef")
                        };
                        conds.push(Cond {
                            active: active && v,
                            taken: v,
                            parent: active,
                            seen_else: false,
                            line,
                        });
                    }
                    "elif" => {
                        let Some(c) = conds.last() else {
                            return Err(err("#elif without #if".into()));
                        };
                        if c.seen_else {
                            return Err(err("#elif after #else".into()));
                        }
                        let (parent, taken) = (c.parent, c.taken);
                        let v = if parent && !taken {
                            self.eval_if(rest)
                                .map_err(|m| err(format!("bad #elif: {m}")))?
                                != 0
                        } else {
                            false
                        };
                        let c = conds.last_mut().expect("checked above");
                        c.active = parent && !taken && v;
                        c.taken = taken || v;
                    }
                    "else" => {
                        let Some(c) = conds.last_mut() else {
                            return Err(err("#else without #if".into()));
                        };
                        if c.seen_else {
                            return Err(err("second #else".into()));
                        }
                        c.seen_else = true;
                        c.active = c.parent && !c.taken;
                        c.taken = true;
                    }
                    "endif" => {
                        if conds.pop().is_none() {
                            return Err(err("#endif without #if".into()));
                        }
                    }
                    _ if !active => {}
                    "define" => self.define(rest).map_err(err)?,
                    "undef" => {
                        let n =
                            first_ident(rest).ok_or_else(|| err("#undef needs a name".into()))?;
                        self.macros.remove(n);
                    }
                    "include" => self.include(dir, rest).map_err(|e| match e {
                        Ok(m) => FrontError::at(ErrorKind::Io, name, line, col, m),
                        Err(e) => e,
                    })?,
                    "error" => return Err(err(format!("#error {rest}"))),
                    "warning" | "line" | "ident" => {}
                    "pragma" => {
                        // `#pragma once`: `name` is the path the file was read from.
                        if rest == "once" && dir.is_some() {
                            let p = PathBuf::from(&**name);
                            self.once.insert(p.canonicalize().unwrap_or(p));
                        }
                    }
                    "" if rest.is_empty() => {}
                    _ => return Err(err(format!("unknown preprocessor directive '#{dname}'"))),
                }
                // Keep the line count: directives become empty lines.
                self.emit(name, line, "");
                continue;
            }
            if active {
                let mut text = content.clone();
                let mut segs = Vec::new();
                let mut exp = self.expand_at(&text, &mut Vec::new(), 0, Some(&mut segs));
                // A macro call whose arguments continue on the next lines
                // (as cpp allows): join them (the tokens land on the call's
                // line) until the call closes.
                let mut joined = 0;
                while matches!(&exp, Err(m) if m.starts_with(UNTERMINATED_CALL))
                    && joined < 256
                    && k < logical.len()
                    && !logical[k].1.trim_start().starts_with('#')
                {
                    text.push(' ');
                    text.push_str(&logical[k].1);
                    k += 1;
                    joined += 1;
                    segs.clear();
                    exp = self.expand_at(&text, &mut Vec::new(), 0, Some(&mut segs));
                }
                let exp =
                    exp.map_err(|m| FrontError::at(ErrorKind::Preprocess, name, line, 1, m))?;
                if !segs.is_empty() && !exp.contains('\n') {
                    self.cols.insert(self.lines.len(), segs);
                }
                for l in exp.split('\n') {
                    self.emit(name, line, l);
                }
                if self.out.len() > MAX_OUTPUT {
                    return Err(FrontError::at(
                        ErrorKind::Preprocess,
                        name,
                        line,
                        1,
                        "preprocessed program too large",
                    ));
                }
            } else {
                self.emit(name, line, "");
            }
        }
        if let Some(c) = conds.last() {
            return Err(FrontError::at(
                ErrorKind::Preprocess,
                name,
                c.line,
                1,
                "unterminated #if/#ifdef/#ifndef (missing #endif)",
            ));
        }
        Ok(())
    }

    fn emit(&mut self, name: &Arc<str>, line: u32, text: &str) {
        self.out.push_str(text);
        self.out.push('\n');
        self.lines.push((name.clone(), line));
    }

    /// `#include`: `Err(Ok(msg))` is an error at the directive, `Err(Err(e))`
    /// one inside the included file.
    fn include(
        &mut self,
        dir: Option<&Path>,
        rest: &str,
    ) -> Result<(), Result<String, FrontError>> {
        let (target, quoted) = if let Some(r) = rest.strip_prefix('<') {
            match r.find('>') {
                Some(e) => (&r[..e], false),
                None => return Err(Ok("#include <...> missing '>'".into())),
            }
        } else if let Some(r) = rest.strip_prefix('"') {
            match r.find('"') {
                Some(e) => (&r[..e], true),
                None => return Err(Ok("#include \"...\" missing '\"'".into())),
            }
        } else {
            return Err(Ok(format!(
                "#include expects <file> or \"file\", found '{rest}'"
            )));
        };
        let mut candidates: Vec<PathBuf> = Vec::new();
        if quoted {
            if let Some(d) = dir {
                candidates.push(d.join(target));
            }
        }
        candidates.extend(self.include_dirs.iter().map(|d| d.join(target)));
        let Some(path) = candidates.into_iter().find(|p| p.is_file()) else {
            return Err(Ok(format!(
                "#include: file '{target}' not found (searched {})",
                if quoted {
                    "the including file's directory and the include dirs"
                } else {
                    "the include dirs"
                }
            )));
        };
        let canon = path.canonicalize().unwrap_or_else(|_| path.clone());
        if self.once.contains(&canon) {
            return Ok(());
        }
        if self.depth >= MAX_INCLUDE_DEPTH {
            return Err(Ok(format!(
                "#include nested too deeply ({target}): include loop?"
            )));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Ok(format!(
                "cannot read included file '{}': {e}",
                path.display()
            ))
        })?;
        let iname: Arc<str> = Arc::from(path.display().to_string());
        self.depth += 1;
        let r = self.file(&iname, path.parent(), &text);
        self.depth -= 1;
        r.map_err(Err)
    }

    fn define(&mut self, rest: &str) -> Result<(), String> {
        let n: String = rest.chars().take_while(|c| is_ident_char(*c)).collect();
        if n.is_empty() || !n.starts_with(is_ident_start) {
            return Err(format!("#define needs a macro name, found '{rest}'"));
        }
        let after = &rest[n.len()..];
        let m = if let Some(p) = after.strip_prefix('(') {
            let Some(close) = p.find(')') else {
                return Err(format!("#define {n}(...: missing ')'"));
            };
            let params: Vec<String> = p[..close]
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            if let Some(bad) = params
                .iter()
                .find(|p| !p.chars().all(is_ident_char) && p.as_str() != "...")
            {
                return Err(format!("#define {n}: bad parameter '{bad}'"));
            }
            Macro {
                params: Some(params),
                body: p[close + 1..].trim().to_string(),
            }
        } else {
            Macro {
                params: None,
                body: after.trim().to_string(),
            }
        };
        self.macros.insert(n, m);
        Ok(())
    }

    /// Expands macros in `text` (not inside strings). `hide` holds the
    /// macros being expanded (no recursion, as in C).
    fn expand(&self, text: &str, hide: &mut Vec<String>, depth: usize) -> Result<String, String> {
        self.expand_at(text, hide, depth, None)
    }

    /// [`Self::expand`], recording in `segs` (top level only) where the
    /// output's columns come from.
    fn expand_at(
        &self,
        text: &str,
        hide: &mut Vec<String>,
        depth: usize,
        mut segs: Option<&mut Vec<ColSeg>>,
    ) -> Result<String, String> {
        if depth > MAX_EXPAND_DEPTH {
            return Err("macro expansion nested too deeply".into());
        }
        let c: Vec<char> = text.chars().collect();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < c.len() {
            let ch = c[i];
            if ch == '"' {
                let s = i;
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i = (i + 1).min(c.len());
                out.extend(&c[s..i]);
            } else if ch.is_ascii_digit() {
                while i < c.len() && (is_ident_char(c[i])) {
                    out.push(c[i]);
                    i += 1;
                }
            } else if is_ident_start(ch) {
                let s = i;
                while i < c.len() && is_ident_char(c[i]) {
                    i += 1;
                }
                let id: String = c[s..i].iter().collect();
                let Some(m) = self.macros.get(&id).filter(|_| !hide.contains(&id)) else {
                    out.push_str(&id);
                    continue;
                };
                let body = match &m.params {
                    None => m.body.clone(),
                    Some(params) => {
                        let mut j = i;
                        while j < c.len() && c[j].is_whitespace() {
                            j += 1;
                        }
                        if c.get(j) != Some(&'(') {
                            out.push_str(&id);
                            continue;
                        }
                        let (args, end) = collect_args(&c, j)
                            .ok_or_else(|| format!("{UNTERMINATED_CALL} '{id}'"))?;
                        i = end;
                        let args: Vec<String> =
                            if params.is_empty() && args.len() == 1 && args[0].trim().is_empty() {
                                Vec::new()
                            } else {
                                args
                            };
                        if args.len() != params.len() {
                            return Err(format!(
                                "macro '{id}' takes {} arguments, given {}",
                                params.len(),
                                args.len()
                            ));
                        }
                        let mut ex = Vec::with_capacity(args.len());
                        for a in &args {
                            ex.push(self.expand(a.trim(), hide, depth + 1)?);
                        }
                        substitute(&m.body, params, &ex)
                    }
                };
                self.expansions.set(self.expansions.get() + 1);
                if self.expansions.get() > MAX_EXPANSIONS {
                    return Err("too many macro expansions (recursive macro blow-up?)".into());
                }
                hide.push(id);
                let r = self.expand(&body, hide, depth + 1);
                hide.pop();
                let before = out.chars().count() as u32 + 1;
                out.push_str(&r?);
                if let Some(segs) = segs.as_deref_mut() {
                    if segs.is_empty() {
                        segs.push(ColSeg {
                            out: 1,
                            orig: 1,
                            verbatim: true,
                        });
                    }
                    segs.push(ColSeg {
                        out: before,
                        orig: s as u32 + 1,
                        verbatim: false,
                    });
                    let after = out.chars().count() as u32 + 1;
                    segs.push(ColSeg {
                        out: after,
                        orig: i as u32 + 1,
                        verbatim: true,
                    });
                }
                if out.len() > MAX_OUTPUT {
                    return Err("macro expansion too large".into());
                }
            } else {
                out.push(ch);
                i += 1;
            }
        }
        Ok(out)
    }

    /// Evaluates a `#if` expression: `defined` first, then macros, then
    /// the remaining names are 0.
    fn eval_if(&self, text: &str) -> Result<i64, String> {
        let c: Vec<char> = text.chars().collect();
        let mut s = String::new();
        let mut i = 0;
        while i < c.len() {
            if is_ident_start(c[i]) {
                let st = i;
                while i < c.len() && is_ident_char(c[i]) {
                    i += 1;
                }
                let id: String = c[st..i].iter().collect();
                if id == "defined" {
                    let mut j = i;
                    while j < c.len() && c[j].is_whitespace() {
                        j += 1;
                    }
                    let paren = c.get(j) == Some(&'(');
                    if paren {
                        j += 1;
                        while j < c.len() && c[j].is_whitespace() {
                            j += 1;
                        }
                    }
                    let ns = j;
                    while j < c.len() && is_ident_char(c[j]) {
                        j += 1;
                    }
                    let n: String = c[ns..j].iter().collect();
                    if n.is_empty() {
                        return Err("'defined' needs a macro name".into());
                    }
                    if paren {
                        while j < c.len() && c[j].is_whitespace() {
                            j += 1;
                        }
                        if c.get(j) != Some(&')') {
                            return Err("missing ')' after 'defined(NAME'".into());
                        }
                        j += 1;
                    }
                    s.push_str(if self.macros.contains_key(&n) {
                        " 1 "
                    } else {
                        " 0 "
                    });
                    i = j;
                } else {
                    s.push_str(&id);
                }
            } else {
                s.push(c[i]);
                i += 1;
            }
        }
        let e = self.expand(&s, &mut Vec::new(), 0)?;
        let toks = if_tokens(&e)?;
        if toks.is_empty() {
            return Err("empty expression".into());
        }
        let mut p = IfEval {
            t: &toks,
            i: 0,
            depth: 0,
        };
        let v = p.ternary()?;
        if p.i != toks.len() {
            return Err(format!("unexpected '{}'", tok_text(&toks[p.i])));
        }
        Ok(v)
    }
}

fn first_ident(s: &str) -> Option<&str> {
    let s = s.trim_start();
    let n = s.find(|c: char| !is_ident_char(c)).unwrap_or(s.len());
    (n > 0 && s.starts_with(is_ident_start)).then(|| &s[..n])
}

/// Arguments of a function-like macro call starting at the `(` at `open`;
/// returns them and the index after the `)`.
fn collect_args(c: &[char], open: usize) -> Option<(Vec<String>, usize)> {
    let mut depth = 0usize;
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut i = open;
    while i < c.len() {
        let ch = c[i];
        match ch {
            '(' => {
                depth += 1;
                if depth > 1 {
                    cur.push(ch);
                }
            }
            ')' => {
                depth -= 1;
                if depth == 0 {
                    args.push(cur);
                    return Some((args, i + 1));
                }
                cur.push(ch);
            }
            ',' if depth == 1 => args.push(std::mem::take(&mut cur)),
            '"' => {
                cur.push(ch);
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' && i + 1 < c.len() {
                        cur.push(c[i]);
                        i += 1;
                    }
                    cur.push(c[i]);
                    i += 1;
                }
                if i < c.len() {
                    cur.push('"');
                }
            }
            _ => cur.push(ch),
        }
        i += 1;
    }
    None
}

/// Replaces parameter names in `body` by arguments (`#p` stringifies,
/// `a ## b` pastes).
fn substitute(body: &str, params: &[String], args: &[String]) -> String {
    let c: Vec<char> = body.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '"' {
            let s = i;
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(c.len());
            out.extend(&c[s..i]);
        } else if ch == '#' && c.get(i + 1) == Some(&'#') {
            while out.ends_with(' ') {
                out.pop();
            }
            i += 2;
            while i < c.len() && c[i] == ' ' {
                i += 1;
            }
        } else if ch == '#' {
            let mut j = i + 1;
            while j < c.len() && c[j] == ' ' {
                j += 1;
            }
            let s = j;
            while j < c.len() && is_ident_char(c[j]) {
                j += 1;
            }
            let id: String = c[s..j].iter().collect();
            match params.iter().position(|p| *p == id) {
                Some(k) => {
                    out.push('"');
                    out.push_str(&args[k].replace('\\', "\\\\").replace('"', "\\\""));
                    out.push('"');
                    i = j;
                }
                None => {
                    out.push('#');
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && is_ident_char(c[i]) {
                out.push(c[i]);
                i += 1;
            }
        } else if is_ident_start(ch) {
            let s = i;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            let id: String = c[s..i].iter().collect();
            match params.iter().position(|p| *p == id) {
                Some(k) => out.push_str(&args[k]),
                None => out.push_str(&id),
            }
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq)]
enum IfTok {
    Num(i64),
    Op(&'static str),
}

fn tok_text(t: &IfTok) -> String {
    match t {
        IfTok::Num(n) => n.to_string(),
        IfTok::Op(o) => o.to_string(),
    }
}

const IF_OPS: &[&str] = &[
    "||", "&&", "==", "!=", "<=", ">=", "<<", ">>", "(", ")", "!", "~", "-", "+", "*", "/", "%",
    "<", ">", "&", "|", "^", "?", ":",
];

fn if_tokens(s: &str) -> Result<Vec<IfTok>, String> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch.is_ascii_digit() {
            let st = i;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            let raw: String = c[st..i].iter().collect();
            let t = raw.trim_end_matches(['u', 'U', 'l', 'L']);
            let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                i64::from_str_radix(h, 16)
            } else if t.len() > 1 && t.starts_with('0') {
                i64::from_str_radix(&t[1..], 8)
            } else {
                t.parse::<i64>()
            };
            out.push(IfTok::Num(v.map_err(|_| format!("bad number '{raw}'"))?));
        } else if is_ident_start(ch) {
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            out.push(IfTok::Num(0));
        } else {
            let rest: String = c[i..(i + 2).min(c.len())].iter().collect();
            let Some(op) = IF_OPS.iter().find(|o| rest.starts_with(**o)) else {
                return Err(format!("unexpected character '{ch}'"));
            };
            i += op.len();
            out.push(IfTok::Op(op));
        }
    }
    Ok(out)
}

struct IfEval<'t> {
    t: &'t [IfTok],
    i: usize,
    depth: usize,
}

impl IfEval<'_> {
    fn peek_op(&self) -> Option<&'static str> {
        match self.t.get(self.i) {
            Some(IfTok::Op(o)) => Some(o),
            _ => None,
        }
    }

    fn ternary(&mut self) -> Result<i64, String> {
        self.depth += 1;
        if self.depth > 200 {
            return Err("expression nested too deeply".into());
        }
        let c = self.binary(0)?;
        let r = if self.peek_op() == Some("?") {
            self.i += 1;
            let a = self.ternary()?;
            if self.peek_op() != Some(":") {
                return Err("expected ':' in '?:'".into());
            }
            self.i += 1;
            let b = self.ternary()?;
            if c != 0 {
                a
            } else {
                b
            }
        } else {
            c
        };
        self.depth -= 1;
        Ok(r)
    }

    fn prec(op: &str) -> Option<u8> {
        Some(match op {
            "||" => 1,
            "&&" => 2,
            "|" => 3,
            "^" => 4,
            "&" => 5,
            "==" | "!=" => 6,
            "<" | ">" | "<=" | ">=" => 7,
            "<<" | ">>" => 8,
            "+" | "-" => 9,
            "*" | "/" | "%" => 10,
            _ => return None,
        })
    }

    fn binary(&mut self, min: u8) -> Result<i64, String> {
        let mut l = self.unary()?;
        while let Some(op) = self.peek_op() {
            let Some(p) = Self::prec(op) else { break };
            if p < min {
                break;
            }
            self.i += 1;
            let r = self.binary(p + 1)?;
            l = match op {
                "||" => (l != 0 || r != 0) as i64,
                "&&" => (l != 0 && r != 0) as i64,
                "|" => l | r,
                "^" => l ^ r,
                "&" => l & r,
                "==" => (l == r) as i64,
                "!=" => (l != r) as i64,
                "<" => (l < r) as i64,
                ">" => (l > r) as i64,
                "<=" => (l <= r) as i64,
                ">=" => (l >= r) as i64,
                "<<" => l.wrapping_shl(r as u32),
                ">>" => l.wrapping_shr(r as u32),
                "+" => l.wrapping_add(r),
                "-" => l.wrapping_sub(r),
                "*" => l.wrapping_mul(r),
                "/" | "%" => {
                    if r == 0 {
                        return Err("division by zero".into());
                    }
                    if op == "/" {
                        l.wrapping_div(r)
                    } else {
                        l.wrapping_rem(r)
                    }
                }
                _ => return Err(format!("unexpected '{op}'")),
            };
        }
        Ok(l)
    }

    fn unary(&mut self) -> Result<i64, String> {
        match self.t.get(self.i) {
            None => Err("expression ends early".into()),
            Some(IfTok::Num(n)) => {
                self.i += 1;
                Ok(*n)
            }
            Some(IfTok::Op(o)) => {
                self.i += 1;
                match *o {
                    "(" => {
                        let v = self.ternary()?;
                        if self.peek_op() != Some(")") {
                            return Err("missing ')'".into());
                        }
                        self.i += 1;
                        Ok(v)
                    }
                    "!" => Ok((self.unary()? == 0) as i64),
                    "~" => Ok(!self.unary()?),
                    "-" => Ok(self.unary()?.wrapping_neg()),
                    "+" => self.unary(),
                    o => Err(format!("unexpected '{o}'")),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pp(t: &str) -> Result<String, FrontError> {
        preprocess_str("t.p4", t, &[], &[]).map(|s| s.text)
    }

    #[test]
    fn object_and_function_macros() {
        let s =
            pp("#define A 5\n#define F(x, y) (x + y * A)\nbit<8> v = F(1, 2); \"A\"\n").unwrap();
        assert!(s.contains("bit<8> v = (1 + 2 * 5); \"A\""), "{s}");
    }

    #[test]
    fn conditionals() {
        let s = pp("#define V 20200408\n#if V >= 20200408 && defined(V)\nyes\n#elif 1\nno1\n#else\nno2\n#endif\n#ifdef W\nno3\n#endif\n")
            .unwrap();
        assert!(s.contains("yes") && !s.contains("no"), "{s}");
        let s = pp("#if X\nno\n#elif !defined X\nyes\n#endif\n").unwrap();
        assert!(s.contains("yes") && !s.contains("no"), "{s}");
    }

    #[test]
    fn line_map_and_comments() {
        let src =
            preprocess_str("t.p4", "/* a\n b */ x\n#define Q 1\n// c\ny Q\n", &[], &[]).unwrap();
        let lines: Vec<&str> = src.text.lines().collect();
        let i = lines.iter().position(|l| l.contains('y')).unwrap();
        assert_eq!(src.lines[i].1, 5);
        assert!(lines[i].contains("y 1"));
    }

    #[test]
    fn errors() {
        let e = pp("x\n#if 1 +\n#endif\n").unwrap_err();
        assert!(e.to_string().starts_with("t.p4:2:1: bad #if"), "{e}");
        let e = pp("x\n  /* never closed\n").unwrap_err();
        assert!(
            e.to_string().starts_with("t.p4:2:3: unterminated comment"),
            "{e}"
        );
        let e = pp("#include <nope.p4>\n").unwrap_err();
        assert!(e.to_string().starts_with("t.p4:1:1: #include"), "{e}");
        let e = pp("#ifdef X\n").unwrap_err();
        assert!(
            e.to_string().starts_with("t.p4:1:1: unterminated #if"),
            "{e}"
        );
        let e = pp("\n#error stop here\n").unwrap_err();
        assert_eq!(e.to_string(), "t.p4:2:1: #error stop here");
    }
}
