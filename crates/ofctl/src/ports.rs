//! Port names and numbers.
//!
//! Flow tables only ever hold port numbers (`in_port` in a key, `output:N` in
//! an action), because the data path compares integers per packet. People,
//! however, write `in_port=eth0`. A [`PortMap`] is the bridge between the two,
//! consulted once when a rule is parsed and again when it is printed; the
//! packet never sees a name.
//!
//! Three maps are provided: [`NumericPorts`] (numbers only, for tools that
//! must not guess), [`NamedPorts`] (a fixed table, e.g. from a running
//! switch) and [`AutoPorts`] (checking a rule file with no switch to ask:
//! every new name gets the next free number).
//!
//! The rules for a port *name* in the text are deliberately narrow, so that a
//! name can never be mistaken for anything else when a rule is printed and
//! read back: it does not start with a digit (those are numbers), it is
//! printable ASCII without any of `,()[]{}=/:>'"\#`, and it is not one of the
//! reserved words (`IN_PORT`, `TABLE`, `NORMAL`, `FLOOD`, `ALL`, `CONTROLLER`,
//! `LOCAL`, `NONE`, `ANY`, `DROP`, compared without case).

use nicflow_flow::ofp;
use std::cell::RefCell;
use std::collections::HashMap;

use crate::values::parse_uint;

/// Resolves port names to numbers and back.
pub trait PortMap {
    /// The number of the port called `name`, if any. May create the mapping
    /// (see [`AutoPorts`]).
    fn port_no(&self, name: &str) -> Option<u32>;
    /// The name of port `no`, if it has one.
    fn port_name(&self, no: u32) -> Option<String>;
    /// Like [`PortMap::port_no`], but never creates a mapping. Used where a
    /// bare word could be either an action or a port (`actions=nromal`): only
    /// ports that already exist count there.
    fn known_port(&self, name: &str) -> Option<u32> {
        self.port_no(name)
    }
}

/// Only numbers: every name is unknown, numbers are printed as numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NumericPorts;

impl PortMap for NumericPorts {
    fn port_no(&self, _name: &str) -> Option<u32> {
        None
    }
    fn port_name(&self, _no: u32) -> Option<String> {
        None
    }
}

/// For checking rules with no switch to ask: the first name used gets port
/// 1, the next new name port 2, and so on; names are printed back.
///
/// Numbers written literally in rules are not reserved, so `in_port=1` and
/// the first name used both mean port 1; that is fine for syntax checking,
/// which is what this map is for.
#[derive(Debug, Default)]
pub struct AutoPorts {
    inner: RefCell<AutoInner>,
}

#[derive(Debug, Default)]
struct AutoInner {
    by_name: HashMap<String, u32>,
    names: Vec<String>,
}

impl AutoPorts {
    pub fn new() -> Self {
        AutoPorts::default()
    }

    /// `(name, number)` pairs in order of assignment.
    pub fn assigned(&self) -> Vec<(String, u32)> {
        let inner = self.inner.borrow();
        inner
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32 + 1))
            .collect()
    }
}

impl PortMap for AutoPorts {
    fn port_no(&self, name: &str) -> Option<u32> {
        if let Some(no) = self.known_port(name) {
            return Some(no);
        }
        let mut inner = self.inner.borrow_mut();
        let no = u32::try_from(inner.names.len() + 1).ok()?;
        if no > ofp::MAX {
            return None;
        }
        inner.names.push(name.to_string());
        inner.by_name.insert(name.to_string(), no);
        Some(no)
    }

    fn port_name(&self, no: u32) -> Option<String> {
        let idx = usize::try_from(no.checked_sub(1)?).ok()?;
        self.inner.borrow().names.get(idx).cloned()
    }

    fn known_port(&self, name: &str) -> Option<u32> {
        self.inner.borrow().by_name.get(name).copied()
    }
}

/// A fixed name <-> number table, e.g. the ports of a running switch.
///
/// If several names share a number, the first one inserted is the one
/// printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamedPorts {
    by_name: HashMap<String, u32>,
    by_no: HashMap<u32, String>,
}

impl NamedPorts {
    pub fn new() -> Self {
        NamedPorts::default()
    }

    /// Add (or re-point) a name.
    pub fn insert(&mut self, name: impl Into<String>, no: u32) {
        let name = name.into();
        self.by_no.entry(no).or_insert_with(|| name.clone());
        self.by_name.insert(name, no);
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

impl<S: Into<String>> FromIterator<(S, u32)> for NamedPorts {
    fn from_iter<I: IntoIterator<Item = (S, u32)>>(iter: I) -> Self {
        let mut p = NamedPorts::new();
        for (n, no) in iter {
            p.insert(n, no);
        }
        p
    }
}

impl From<HashMap<String, u32>> for NamedPorts {
    /// Where several names share a number, the alphabetically first one is
    /// printed (a `HashMap` has no order of its own).
    fn from(map: HashMap<String, u32>) -> Self {
        let mut pairs: Vec<_> = map.into_iter().collect();
        pairs.sort();
        pairs.into_iter().collect()
    }
}

impl PortMap for NamedPorts {
    fn port_no(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }
    fn port_name(&self, no: u32) -> Option<String> {
        self.by_no.get(&no).cloned()
    }
}

impl<T: PortMap + ?Sized> PortMap for &T {
    fn port_no(&self, name: &str) -> Option<u32> {
        (**self).port_no(name)
    }
    fn port_name(&self, no: u32) -> Option<String> {
        (**self).port_name(no)
    }
    fn known_port(&self, name: &str) -> Option<u32> {
        (**self).known_port(name)
    }
}

/// The reserved port a word names (case-insensitive), if any.
pub(crate) fn reserved_port(word: &str) -> Option<u32> {
    const NAMES: [(&str, u32); 8] = [
        ("in_port", ofp::IN_PORT),
        ("table", ofp::TABLE),
        ("normal", ofp::NORMAL),
        ("flood", ofp::FLOOD),
        ("all", ofp::ALL),
        ("controller", ofp::CONTROLLER),
        ("local", ofp::LOCAL),
        ("none", ofp::NONE),
    ];
    NAMES
        .iter()
        .find(|(n, _)| word.eq_ignore_ascii_case(n))
        .map(|(_, no)| *no)
}

/// Printed name of a reserved port number.
pub(crate) fn reserved_name(no: u32) -> Option<&'static str> {
    Some(match no {
        ofp::IN_PORT => "IN_PORT",
        ofp::TABLE => "TABLE",
        ofp::NORMAL => "NORMAL",
        ofp::FLOOD => "FLOOD",
        ofp::ALL => "ALL",
        ofp::CONTROLLER => "CONTROLLER",
        ofp::LOCAL => "LOCAL",
        ofp::NONE => "NONE",
        _ => return None,
    })
}

/// Can `name` be written as a port name? See the module docs.
pub fn is_valid_port_name(name: &str) -> bool {
    let Some(first) = name.chars().next() else {
        return false;
    };
    !first.is_ascii_digit()
        && name
            .chars()
            .all(|c| c.is_ascii_graphic() && !",()[]{}=/:>'\"\\#".contains(c))
        && reserved_port(name).is_none()
        && !name.eq_ignore_ascii_case("any")
        && !name.eq_ignore_ascii_case("drop")
}

/// What a port-valued piece of text turned out to be.
pub(crate) enum PortText {
    /// A number in 1..=`ofp::MAX`.
    Number(u32),
    /// A reserved name (`LOCAL`, `IN_PORT`...), as its number.
    Reserved(u32),
    /// A syntactically valid, not reserved name (not yet resolved).
    Name,
}

/// Classify a port-valued piece of text; `Err` holds the reason.
pub(crate) fn classify_port(s: &str) -> Result<PortText, &'static str> {
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        let n = parse_uint(s).ok_or("port must be a number or a name")?;
        if n == 0 || n > ofp::MAX as u128 {
            return Err("port number out of range 1..=0xffffff00");
        }
        return Ok(PortText::Number(n as u32));
    }
    if let Some(no) = reserved_port(s) {
        return Ok(PortText::Reserved(no));
    }
    if is_valid_port_name(s) {
        Ok(PortText::Name)
    } else {
        Err("invalid port name")
    }
}

/// Resolve a port name through the map, checking the answer is a real port.
pub(crate) fn resolve_name(
    name: &str,
    ports: &dyn PortMap,
    create: bool,
) -> Result<u32, &'static str> {
    let no = if create {
        ports.port_no(name)
    } else {
        ports.known_port(name)
    };
    match no {
        Some(n) if (1..=ofp::MAX).contains(&n) => Ok(n),
        Some(_) => Err("port map gave an out-of-range number for port"),
        None => Err("unknown port"),
    }
}

/// Print a port number: a reserved name, the map's name when that name
/// reads back as the same number, or the number.
pub(crate) fn format_port(no: u32, ports: &dyn PortMap) -> String {
    if let Some(r) = reserved_name(no) {
        return r.to_string();
    }
    if let Some(name) = ports.port_name(no) {
        if is_valid_port_name(&name) && ports.known_port(&name) == Some(no) {
            return name;
        }
    }
    no.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_ports_assign_in_order() {
        let p = AutoPorts::new();
        assert_eq!(p.port_no("eth0"), Some(1));
        assert_eq!(p.port_no("eth1"), Some(2));
        assert_eq!(p.port_no("eth0"), Some(1));
        assert_eq!(p.known_port("eth9"), None);
        assert_eq!(p.port_name(2).as_deref(), Some("eth1"));
        assert_eq!(p.port_name(0), None);
        assert_eq!(p.port_name(3), None);
        assert_eq!(
            p.assigned(),
            vec![("eth0".to_string(), 1), ("eth1".to_string(), 2)]
        );
    }

    #[test]
    fn named_ports_both_ways() {
        let p: NamedPorts = [("eth0", 1), ("uplink", 7), ("wan", 7)]
            .into_iter()
            .collect();
        assert_eq!(p.port_no("wan"), Some(7));
        assert_eq!(p.port_name(7).as_deref(), Some("uplink"));
        assert_eq!(p.port_name(2), None);
        assert_eq!(p.len(), 3);
        let h: HashMap<String, u32> = [("b".to_string(), 3), ("a".to_string(), 3)].into();
        let p = NamedPorts::from(h);
        assert_eq!(p.port_name(3).as_deref(), Some("a"));
    }

    #[test]
    fn numeric_ports_know_nothing() {
        assert_eq!(NumericPorts.port_no("eth0"), None);
        assert_eq!(NumericPorts.port_name(1), None);
    }

    #[test]
    fn names() {
        assert!(is_valid_port_name("eth0"));
        assert!(is_valid_port_name("br-int.100"));
        assert!(!is_valid_port_name("0eth"));
        assert!(!is_valid_port_name("Local"));
        assert!(!is_valid_port_name("drop"));
        assert!(!is_valid_port_name("a,b"));
        assert!(!is_valid_port_name("a:b"));
        assert!(!is_valid_port_name(""));
        assert!(!is_valid_port_name("é"));
    }

    #[test]
    fn printing_prefers_safe_names() {
        let p: NamedPorts = [("eth0", 1), ("normal", 2), ("x", 3), ("y", 4), ("9", 5)]
            .into_iter()
            .collect();
        assert_eq!(format_port(1, &p), "eth0");
        assert_eq!(format_port(2, &p), "2");
        assert_eq!(format_port(5, &p), "5");
        assert_eq!(format_port(ofp::LOCAL, &p), "LOCAL");
        assert_eq!(format_port(8, &p), "8");
    }

    #[test]
    fn classify() {
        assert!(matches!(classify_port("7"), Ok(PortText::Number(7))));
        assert!(matches!(classify_port("0x10"), Ok(PortText::Number(16))));
        assert!(classify_port("0").is_err());
        assert!(classify_port("4294967040").is_ok());
        assert!(classify_port("4294967041").is_err());
        assert!(classify_port("7x").is_err());
        assert!(matches!(
            classify_port("LOCAL"),
            Ok(PortText::Reserved(ofp::LOCAL))
        ));
        assert!(matches!(classify_port("eth0"), Ok(PortText::Name)));
        assert!(classify_port("a/b").is_err());
    }
}
