//! Names of everything a lab creates: namespaces, veth ends, state paths.
//!
//! The names are how `down` finds a lab's objects when its state file is
//! gone, so they are a pure function of the lab name and the topology and
//! they are unambiguous between labs:
//!
//! * namespaces are `nf-<lab>-<node>`. Lab names may not contain `-`, so the
//!   prefix `nf-<lab>-` belongs to exactly one lab (`nf-a-` can never match a
//!   namespace of lab `a_b` or of a lab `a-b`, which is not a valid name).
//! * switch-side veth ends (the only lab interfaces that can live in the root
//!   namespace) are `nf` + 8 hex digits of a hash of the lab name + the link
//!   index as 3 hex digits + `a`/`b` for the end: always exactly 14 bytes,
//!   below Linux's 15-byte limit (IFNAMSIZ 16 with the NUL), and the hash
//!   keeps labs running side by side apart. The hash is FNV-1a, fixed here so
//!   a new build of nicflow still finds the interfaces an older one made.
//! * host-side ends are created directly inside the host's namespace with
//!   the name the topology gives them (`eth0`), so they cannot collide with
//!   the root namespace's interfaces.

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;

/// Links per lab: the index is printed as 3 hex digits.
pub const MAX_LINKS: usize = 0x1000;

/// Which end of a veth pair: `a` is the link's first endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

impl Side {
    pub fn letter(self) -> char {
        match self {
            Side::A => 'a',
            Side::B => 'b',
        }
    }
}

/// 32-bit FNV-1a: small, stable across Rust releases (unlike `DefaultHasher`).
pub fn lab_hash(lab: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in lab.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Every namespace of lab `lab` starts with this.
pub fn namespace_prefix(lab: &str) -> String {
    format!("nf-{lab}-")
}

/// The namespace of host (or own-namespace switch) `node`.
pub fn namespace(lab: &str, node: &str) -> String {
    format!("nf-{lab}-{node}")
}

/// Whether namespace `ns` belongs to lab `lab` (lab names have no `-`).
pub fn is_lab_namespace(lab: &str, ns: &str) -> bool {
    ns.strip_prefix(&namespace_prefix(lab))
        .is_some_and(|node| !node.is_empty())
}

/// Every generated interface name of lab `lab` starts with this (10 bytes).
pub fn veth_prefix(lab: &str) -> String {
    format!("nf{:08x}", lab_hash(lab))
}

/// The generated name of end `side` of link `index` (14 bytes).
///
/// # Panics
/// If `index >= MAX_LINKS` (topology validation rejects such labs).
pub fn veth_name(lab: &str, index: usize, side: Side) -> String {
    assert!(index < MAX_LINKS, "link index {index} out of range");
    format!("{}{:03x}{}", veth_prefix(lab), index, side.letter())
}

/// Whether a root-namespace interface name was generated for lab `lab`.
pub fn is_lab_veth(lab: &str, ifname: &str) -> bool {
    let prefix = veth_prefix(lab);
    ifname.len() == prefix.len() + 4
        && ifname.starts_with(&prefix)
        && ifname[prefix.len()..prefix.len() + 3]
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
        && matches!(ifname.as_bytes()[prefix.len() + 3], b'a' | b'b')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn veth_names_fit_ifnamsiz_and_are_unique() {
        let mut seen = HashSet::new();
        let labs: Vec<String> = (0..200)
            .map(|i| format!("lab{i}"))
            .chain(["a".to_string(), "x".repeat(24), "two_hosts".into()])
            .collect();
        for lab in &labs {
            for index in (0..MAX_LINKS).step_by(97).chain([MAX_LINKS - 1]) {
                for side in [Side::A, Side::B] {
                    let n = veth_name(lab, index, side);
                    assert!(n.len() <= IFNAME_MAX, "{n} too long");
                    assert_eq!(n.len(), 14);
                    assert!(n.bytes().all(|b| b.is_ascii_alphanumeric()));
                    assert!(is_lab_veth(lab, &n));
                    assert!(seen.insert(n.clone()), "duplicate name {n}");
                }
            }
        }
    }

    #[test]
    fn prefixes_do_not_cross_labs() {
        assert!(is_lab_namespace("a", "nf-a-h1"));
        assert!(is_lab_namespace("a", "nf-a-web-1"));
        assert!(!is_lab_namespace("a", "nf-a_b-h1"));
        assert!(!is_lab_namespace("a", "nf-a-"));
        assert!(!is_lab_namespace("a", "nf-ab-h1"));
        assert!(!is_lab_veth("a", "eth0"));
        assert!(!is_lab_veth("a", &veth_name("b", 1, Side::A)));
        assert!(!is_lab_veth("a", &format!("{}zzza", veth_prefix("a"))));
        assert_ne!(veth_prefix("lab1"), veth_prefix("lab2"));
        // Fixed hash: names must not change between builds.
        assert_eq!(lab_hash(""), 0x811c_9dc5);
        assert_eq!(lab_hash("a"), 0xe40c_292c);
    }
}
