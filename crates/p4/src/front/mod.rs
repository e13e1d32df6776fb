//! Reading P4-16 source: [`preproc`] (includes, macros, conditionals) ->
//! [`lexer`] -> [`parser`] -> [`crate::ast::Program`]. Every error carries
//! the file and line of the construct it refuses.
//!
//! This is the first step a P4 program takes on its way to becoming
//! nicflow's slow path: the bridge (or P4Runtime's
//! `SetForwardingPipelineConfig`) hands over a file or a text, and what
//! comes out is the syntax tree [`crate::interp::check`] resolves.

pub mod lexer;
pub mod parser;
pub mod preproc;

use crate::ast::{self, Span};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use preproc::{preprocess, preprocess_str, Source};

/// What stage refused the program (the message says why).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A file could not be read (`#include` of a missing file too).
    Io,
    /// `#if`, `#define`, `#error`, unterminated comment, ...
    Preprocess,
    /// A character or literal the lexer does not know.
    Lex,
    /// The token stream does not follow the grammar.
    Syntax,
    /// Valid P4 this frontend does not handle.
    Unsupported,
}

/// The one error of the frontend: `FILE:LINE:COL: message`, where the
/// position is the original file's (through `#include` and macros).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{span}: {message}")]
pub struct FrontError {
    pub kind: ErrorKind,
    pub span: Span,
    pub message: String,
}

impl FrontError {
    pub(crate) fn new(kind: ErrorKind, span: Span, message: impl Into<String>) -> Self {
        FrontError {
            kind,
            span,
            message: message.into(),
        }
    }

    /// An error at `file:line:col` without a [`Span`] at hand.
    pub(crate) fn at(
        kind: ErrorKind,
        file: &Arc<str>,
        line: u32,
        col: u32,
        msg: impl Into<String>,
    ) -> Self {
        Self::new(
            kind,
            Span {
                file: file.clone(),
                line,
                col,
            },
            msg,
        )
    }
}

/// Preprocesses and parses the program at `path`; `#include <x>` searches
/// `include_dirs` in order (`#include "x"` first the including file's
/// directory).
pub fn parse_file(path: &Path, include_dirs: &[PathBuf]) -> Result<ast::Program, FrontError> {
    with_big_stack(|| {
        let src = preprocess(path, include_dirs, &[])?;
        parse_tokens(&src)
    })
}

/// Same as [`parse_file`] for a program held in memory (tests, P4Runtime);
/// `name` is the file name errors report.
pub fn parse_str(
    name: &str,
    text: &str,
    include_dirs: &[PathBuf],
) -> Result<ast::Program, FrontError> {
    with_big_stack(|| {
        let src = preprocess_str(name, text, include_dirs, &[])?;
        parse_tokens(&src)
    })
}

/// Lexes and parses already preprocessed source.
pub fn parse_source(src: &Source) -> Result<ast::Program, FrontError> {
    with_big_stack(|| parse_tokens(src))
}

/// Lexing and parsing proper (already on the big stack).
fn parse_tokens(src: &Source) -> Result<ast::Program, FrontError> {
    let toks = lexer::lex(src)?;
    parser::Parser::new(src, toks).program()
}

/// Stack for the recursive descent: the parser bounds its nesting
/// (`parser::MAX_DEPTH`), and this is sized so that the bound, not the
/// caller's thread (2 MiB for test threads, less elsewhere), is what
/// refuses a deeply nested program — in debug builds too. Loading a
/// parsed program (`Pipeline::load_program`: the checker and the
/// compiler, which recurse as deep as the parser let the program nest)
/// runs on it too.
const PARSE_STACK: usize = 64 << 20;

/// Runs `f` on a scoped thread with [`PARSE_STACK`] bytes of stack (inline
/// if no thread can be started).
pub(crate) fn with_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let cell = std::sync::Mutex::new(Some(f));
    let take = || cell.lock().ok().and_then(|mut g| g.take());
    let on_thread = std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("p4-parse".into())
            .stack_size(PARSE_STACK)
            .spawn_scoped(s, || take().map(|f| f()));
        match spawned {
            Ok(h) => match h.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            },
            Err(_) => None,
        }
    });
    match on_thread {
        Some(v) => v,
        None => match take() {
            Some(f) => f(),
            None => unreachable!("the parse closure ran on its thread"),
        },
    }
}
