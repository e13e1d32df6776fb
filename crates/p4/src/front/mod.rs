//! Reading P4-16 source: [`preproc`] (includes, macros, conditionals) ->
//! [`lexer`] -> [`parser`] -> [`crate::ast::Program`]. Every error carries
//! the file and line of the construct it refuses.
