//! The rule language: `ovs-ofctl add-flow` syntax, parsed into flow-table
//! rules and printed back.
//!
//! Rules are how an operator tells the switch what to do with packets. The
//! text is read here, once, into a [`FlowSpec`] — a [`Match`] (the flow key
//! bits the classifier compares), table placement and an [`Action`] list
//! (what the slow path does on a hit). Nothing downstream ever sees text, so
//! everything OVS checks at `add-flow` time is checked here: value ranges,
//! protocol prerequisites (`tp_dst` needs `tcp`/`udp`/`sctp`), settable
//! fields, `goto_table` ordering. Errors quote the offending piece verbatim
//! ([`RuleError`]).
//!
//! Going the other way, [`format_flow`] prints a rule in one canonical form
//! (documented in [`mod@format`]), and
//! `parse_flow(format_flow(x)) == x` for every rule the parser can produce.
//!
//! ```
//! use nicflow_ofctl::{parse_flow, format_flow, NumericPorts};
//! let f = parse_flow("tp_dst=80,tcp,priority=100 actions=output:2", &NumericPorts).unwrap();
//! assert_eq!(format_flow(&f, &NumericPorts), "priority=100,tcp,tp_dst=80 actions=output:2");
//! ```
//!
//! Modules, in the order a rule passes through them: `lexer` (cutting text
//! into pieces), `matchp` (match and metadata), `actions`, [`ports`]
//! (names ↔ numbers), [`mod@format`] (back to text), [`error`].

mod actions;
pub mod error;
pub mod format;
pub mod group;
mod lexer;
mod matchp;
pub mod meter;
pub mod ports;
mod values;

pub use actions::{controller_action, CONTROLLER_MAX_LEN};
pub use error::{LineError, RuleError};
pub use format::{format_actions, format_flow, format_match, format_match_spec};
pub use group::{
    format_group, parse_group, parse_group_filter, parse_groups, Bucket, GroupSpec, GroupType,
    HashField, SelectionMethod,
};
pub use ports::{is_valid_port_name, AutoPorts, NamedPorts, NumericPorts, PortMap};

use nicflow_flow::{Action, Match};

/// Priority of a rule that does not say (`OFP_DEFAULT_PRIORITY`).
pub const OFP_DEFAULT_PRIORITY: u16 = 32768;

/// One rule as written: where it goes, what it matches, what it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    /// 0..=254 (255 is reserved).
    pub table: u8,
    /// Higher wins; default [`OFP_DEFAULT_PRIORITY`].
    pub priority: u16,
    pub cookie: u64,
    /// Seconds without a hit before the rule expires; 0 = never.
    pub idle_timeout: u16,
    /// Seconds after which the rule expires regardless; 0 = never.
    pub hard_timeout: u16,
    /// `send_flow_rem`: tell controllers when the rule goes (OpenFlow's
    /// `OFPFF_SEND_FLOW_REM`, a `FLOW_REMOVED` message on expiry or delete).
    pub send_flow_rem: bool,
    pub r#match: Match,
    /// Empty means drop.
    pub actions: Vec<Action>,
}

impl Default for FlowSpec {
    /// Table 0, default priority, catch-all match, drop.
    fn default() -> Self {
        FlowSpec {
            table: 0,
            priority: OFP_DEFAULT_PRIORITY,
            cookie: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            send_flow_rem: false,
            r#match: Match::catchall(),
            actions: Vec::new(),
        }
    }
}

/// A flow filter for `del-flows` / `dump-flows`: match fields plus optional
/// table, priority and cookie (with mask; the value is stored masked).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MatchSpec {
    pub table: Option<u8>,
    pub priority: Option<u16>,
    /// `(value, mask)`: a flow's cookie `c` is selected if `c & mask == value`.
    pub cookie: Option<(u64, u64)>,
    pub r#match: Match,
}

/// Parse one rule (`ovs-ofctl add-flow` syntax). `actions=` (or OVS's
/// `action=`) is required and must come last; `actions=drop` or an empty
/// list means drop.
pub fn parse_flow(text: &str, ports: &dyn PortMap) -> Result<FlowSpec, RuleError> {
    let p = matchp::parse_rule(text, ports, matchp::Mode::Flow)?;
    let Some((_, acts)) = p.actions else {
        return Err(RuleError::new(
            text.trim(),
            "missing actions= (use actions=drop to drop)",
        ));
    };
    let table = p.table.unwrap_or(0);
    let actions = actions::parse_actions(acts, ports, &p.m, table)?;
    Ok(FlowSpec {
        table,
        priority: p.priority.unwrap_or(OFP_DEFAULT_PRIORITY),
        cookie: p.cookie.map_or(0, |c| c.0),
        idle_timeout: p.idle_timeout.unwrap_or(0),
        hard_timeout: p.hard_timeout.unwrap_or(0),
        send_flow_rem: p.send_flow_rem,
        r#match: p.m,
        actions,
    })
}

/// Parse a flow filter: match fields plus optional `table`, `priority` and
/// `cookie=V[/MASK]`; no actions, no timeouts.
pub fn parse_match(text: &str, ports: &dyn PortMap) -> Result<MatchSpec, RuleError> {
    let p = matchp::parse_rule(text, ports, matchp::Mode::Filter)?;
    if let Some((tok, _)) = p.actions {
        return Err(RuleError::new(
            tok,
            "actions cannot be used to select flows",
        ));
    }
    Ok(MatchSpec {
        table: p.table,
        priority: p.priority,
        cookie: p.cookie,
        r#match: p.m,
    })
}

/// Parse a file of rules, one per line; blank lines and lines starting with
/// `#` are skipped. All or nothing: the first bad line is reported with its
/// 1-based number.
pub fn parse_flows(text: &str, ports: &dyn PortMap) -> Result<Vec<FlowSpec>, LineError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        out.push(parse_flow(t, ports).map_err(|error| LineError { line: i + 1, error })?);
    }
    Ok(out)
}

/// Fuzzing entry point: parse `data` (lossy UTF-8) as a rule and as a flow
/// filter with [`AutoPorts`]; whatever parses must print canonically and
/// read back to the same value, and printing must be stable.
pub fn fuzz_rule(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let ports = AutoPorts::new();
    if let Ok(spec) = parse_flow(&text, &ports) {
        let printed = format_flow(&spec, &ports);
        let again = parse_flow(&printed, &ports)
            .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
        assert_eq!(again, spec, "{text:?} printed as {printed:?}");
        assert_eq!(format_flow(&again, &ports), printed);
    }
    if let Ok(ms) = parse_match(&text, &ports) {
        let printed = format_match_spec(&ms, &ports);
        let again = parse_match(&printed, &ports)
            .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
        assert_eq!(again, ms, "{text:?} printed as {printed:?}");
    }
    let _ = parse_flows(&text, &ports);
}
