//! nicflow-os: the operating-system plumbing — links, addresses, routes,
//! neighbours, network namespaces, sysctls and ethtool features, spoken to
//! the kernel directly.
//!
//! Place in the system: the bottom crate of everything that touches the
//! host's network configuration. No packet passes through it; it builds and
//! changes the devices packets pass through. The ports (`nicflow-port`
//! creates a TC port's upcall veth and changes an AF_XDP port's offload
//! features), the control plane (VF/representor veth pairs), the lab
//! (namespaces, veths, addresses, routes), the traffic tools (IPv6
//! neighbours) and the CNI plugin all call it; it depends on no nicflow
//! crate, so the compiler keeps it at the bottom.
//!
//! Why netlink rather than running `ip`: a failure comes back from the
//! kernel as an errno attached to the request that caused it
//! ([`OsError`]: `RTM_NEWLINK veth nf0a: File exists (os error 17)`), a
//! caller tests "already gone" on the errno and not on iproute2's wording,
//! nothing parses iproute2's output, and the switch does not depend on an
//! iproute2 being installed. The socket is a plain blocking `NETLINK_ROUTE`
//! socket ([`netlink::Rtnl`]) carrying `netlink-packet-route` messages: the
//! layer does a few requests per object, so an async runtime would buy
//! nothing.
//!
//! Namespaces: a netlink socket belongs to the namespace it was created
//! in, so [`netlink::Rtnl::open`] creates it from a short-lived thread that
//! joined the namespace with `setns(2)` ([`netns::run_in`]); the process's
//! other threads never change namespace. A program runs inside a namespace
//! through [`netns::command`], whose `pre_exec` does what `ip netns exec`
//! does (join the namespace, private mount namespace, fresh `/sys`).

pub mod addr;
pub mod ethtool;
pub mod link;
pub mod neigh;
pub mod netlink;
pub mod netns;
pub mod qdisc;
pub mod route;
pub mod sysctl;

#[cfg(test)]
mod root_tests;

use std::io;

/// A failed operating-system request: what was asked (the netlink message
/// type or system call, and its object) and the kernel's error.
#[derive(Debug, thiserror::Error)]
pub enum OsError {
    /// A netlink request the kernel refused (or a socket error on the way).
    #[error("{op} {target}: {source}")]
    Netlink {
        /// `RTM_NEWLINK`, `RTM_NEWADDR`, ...
        op: &'static str,
        /// What the request was about, e.g. `veth nf0a` or `dev eth0`.
        target: String,
        source: io::Error,
    },
    /// A system call or file operation (`setns`, `mount`, a `/proc/sys`
    /// write, `ioctl(SIOCETHTOOL)`).
    #[error("{op} {target}: {source}")]
    Sys {
        op: &'static str,
        target: String,
        source: io::Error,
    },
    /// A reply the kernel sent that this layer cannot use.
    #[error("{op} {target}: unexpected reply: {why}")]
    Reply {
        op: &'static str,
        target: String,
        why: String,
    },
    /// An argument refused before asking the kernel.
    #[error("{what} `{value}`: {why}")]
    Invalid {
        what: &'static str,
        value: String,
        why: String,
    },
}

impl OsError {
    pub(crate) fn netlink(op: &'static str, target: impl Into<String>, source: io::Error) -> Self {
        OsError::Netlink {
            op,
            target: target.into(),
            source,
        }
    }

    pub(crate) fn sys(op: &'static str, target: impl Into<String>, source: io::Error) -> Self {
        OsError::Sys {
            op,
            target: target.into(),
            source,
        }
    }

    /// The kernel's errno, if the failure carried one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            OsError::Netlink { source, .. } | OsError::Sys { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Whether the object the request named is not there (`ENODEV` for a
    /// link, `ENOENT` for a namespace file, `ESRCH` for a route or
    /// address): the answer a cleanup may take as "already done".
    pub fn is_missing(&self) -> bool {
        matches!(
            self.errno(),
            Some(libc::ENODEV) | Some(libc::ENOENT) | Some(libc::ESRCH) | Some(libc::EADDRNOTAVAIL)
        )
    }

    /// Whether the object is already there (`EEXIST`).
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }
}

pub type Result<T, E = OsError> = std::result::Result<T, E>;

/// Why `name` cannot name an interface, if it cannot: the kernel's rules
/// (`dev_valid_name`), checked before a request so that a bad name fails
/// with a reason rather than a bare `EINVAL`.
pub fn check_ifname(name: &str) -> Result<()> {
    let why = if name.is_empty() {
        Some("empty")
    } else if name.len() > 15 {
        Some("longer than 15 bytes (IFNAMSIZ - 1)")
    } else if name == "." || name == ".." {
        Some("`.` and `..` are not interface names")
    } else if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
    {
        Some("no `/`, `:`, NUL or white space")
    } else {
        None
    };
    match why {
        Some(why) => Err(OsError::Invalid {
            what: "interface name",
            value: name.to_string(),
            why: why.to_string(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_request_and_carry_the_errno() {
        let e = OsError::netlink(
            "RTM_NEWLINK",
            "veth nf0a",
            io::Error::from_raw_os_error(libc::EEXIST),
        );
        assert_eq!(
            e.to_string(),
            "RTM_NEWLINK veth nf0a: File exists (os error 17)"
        );
        assert!(e.is_exists() && !e.is_missing());
        let gone = OsError::netlink(
            "RTM_DELLINK",
            "dev x",
            io::Error::from_raw_os_error(libc::ENODEV),
        );
        assert!(gone.is_missing());
        assert_eq!(gone.errno(), Some(libc::ENODEV));
    }

    #[test]
    fn interface_names_follow_the_kernel_rules() {
        assert!(check_ifname("eth0").is_ok());
        assert!(check_ifname("a23456789012345").is_ok());
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "a234567890123456"] {
            assert!(check_ifname(bad).is_err(), "{bad:?}");
        }
    }
}
