//! Controller targets in Open vSwitch's syntax: `tcp:IP[:PORT]` (the switch
//! connects), `ptcp:[PORT][:IP]` (the switch listens), their TLS forms
//! `ssl:IP[:PORT]` and `pssl:[PORT][:IP]`, `unix:PATH`, `punix:PATH`. The
//! default port is 6653 (OpenFlow's IANA port).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// OpenFlow's IANA port.
pub const DEFAULT_PORT: u16 = 6653;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `tcp:IP[:PORT]`: connect to a controller.
    Tcp(SocketAddr),
    /// `ptcp:[PORT][:IP]`: listen (all addresses unless `IP`).
    Ptcp(SocketAddr),
    /// `ssl:IP[:PORT]`: connect to a controller over TLS.
    Ssl(SocketAddr),
    /// `pssl:[PORT][:IP]`: listen for TLS connections (all addresses
    /// unless `IP`).
    Pssl(SocketAddr),
    /// `unix:PATH`: connect to a controller's unix socket.
    Unix(PathBuf),
    /// `punix:PATH`: listen on a unix socket.
    Punix(PathBuf),
}

/// Why a controller target does not parse. Each names the text it was
/// given, as `set-controller` replies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("`{0}`: expected tcp:IP[:PORT], ptcp:[PORT][:IP], ssl:IP[:PORT], pssl:[PORT][:IP], unix:PATH or punix:PATH")]
    Syntax(String),
    #[error("`{target}`: unknown connection type `{kind}` (tcp, ptcp, ssl, pssl, unix, punix)")]
    UnknownKind { target: String, kind: String },
    #[error("`{target}`: {kind} needs an IP address")]
    NeedsIp { target: String, kind: String },
    #[error("`{target}`: {kind} needs a path")]
    NeedsPath { target: String, kind: String },
    /// Host names are not resolved: a controller's address is an address.
    #[error("`{0}` is not an IP address (names are not resolved)")]
    NotIp(String),
    #[error("`{0}` is not a port number")]
    NotPort(String),
    #[error("`{0}`: missing `]`")]
    MissingBracket(String),
    #[error("`{0}`: expected `:PORT` after `]`")]
    ExpectedPort(String),
}

fn parse_ip(s: &str) -> Result<IpAddr, TargetError> {
    let t = s
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(s);
    t.parse().map_err(|_| TargetError::NotIp(s.to_string()))
}

fn parse_port(s: &str) -> Result<u16, TargetError> {
    s.parse::<u16>()
        .map_err(|_| TargetError::NotPort(s.to_string()))
}

/// Split `IP[:PORT]` where IP may be `[v6]`.
fn split_ip_port(s: &str) -> Result<(IpAddr, Option<u16>), TargetError> {
    if let Some(rest) = s.strip_prefix('[') {
        let (ip, tail) = rest
            .split_once(']')
            .ok_or_else(|| TargetError::MissingBracket(s.to_string()))?;
        let ip = parse_ip(ip)?;
        return match tail {
            "" => Ok((ip, None)),
            t => match t.strip_prefix(':') {
                Some(p) => Ok((ip, Some(parse_port(p)?))),
                None => Err(TargetError::ExpectedPort(s.to_string())),
            },
        };
    }
    match s.split_once(':') {
        // More than one colon without brackets: a bare IPv6 address.
        Some((_, rest)) if rest.contains(':') => Ok((parse_ip(s)?, None)),
        Some((ip, port)) => Ok((parse_ip(ip)?, Some(parse_port(port)?))),
        None => Ok((parse_ip(s)?, None)),
    }
}

impl Target {
    pub fn parse(s: &str) -> Result<Target, TargetError> {
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| TargetError::Syntax(s.to_string()))?;
        match kind {
            "tcp" | "ssl" => {
                if rest.is_empty() {
                    return Err(TargetError::NeedsIp {
                        target: s.to_string(),
                        kind: kind.to_string(),
                    });
                }
                let (ip, port) = split_ip_port(rest)?;
                let a = SocketAddr::new(ip, port.unwrap_or(DEFAULT_PORT));
                Ok(if kind == "tcp" {
                    Target::Tcp(a)
                } else {
                    Target::Ssl(a)
                })
            }
            "ptcp" | "pssl" => {
                let (port, ip) = match rest.split_once(':') {
                    Some((p, ip)) => (p, Some(ip)),
                    None => (rest, None),
                };
                let port = if port.is_empty() {
                    DEFAULT_PORT
                } else {
                    parse_port(port)?
                };
                let ip = match ip {
                    Some(ip) if !ip.is_empty() => parse_ip(ip)?,
                    _ => IpAddr::from([0, 0, 0, 0]),
                };
                let a = SocketAddr::new(ip, port);
                Ok(if kind == "ptcp" {
                    Target::Ptcp(a)
                } else {
                    Target::Pssl(a)
                })
            }
            "unix" | "punix" => {
                if rest.is_empty() {
                    return Err(TargetError::NeedsPath {
                        target: s.to_string(),
                        kind: kind.to_string(),
                    });
                }
                let p = PathBuf::from(rest);
                Ok(if kind == "unix" {
                    Target::Unix(p)
                } else {
                    Target::Punix(p)
                })
            }
            _ => Err(TargetError::UnknownKind {
                target: s.to_string(),
                kind: kind.to_string(),
            }),
        }
    }

    /// A listener (`ptcp`, `pssl`, `punix`), as opposed to an active
    /// connection.
    pub fn passive(&self) -> bool {
        matches!(self, Target::Ptcp(_) | Target::Pssl(_) | Target::Punix(_))
    }

    /// Spoken over TLS (`ssl`, `pssl`): needs `nicflow set-ssl`.
    pub fn tls(&self) -> bool {
        matches!(self, Target::Ssl(_) | Target::Pssl(_))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = |a: &SocketAddr| match a.ip() {
            IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        match self {
            Target::Tcp(a) => write!(f, "tcp:{}:{}", ip(a), a.port()),
            Target::Ssl(a) => write!(f, "ssl:{}:{}", ip(a), a.port()),
            Target::Ptcp(a) | Target::Pssl(a) => {
                let kind = if matches!(self, Target::Ptcp(_)) {
                    "ptcp"
                } else {
                    "pssl"
                };
                if a.ip().is_unspecified() && a.is_ipv4() {
                    write!(f, "{kind}:{}", a.port())
                } else {
                    write!(f, "{kind}:{}:{}", a.port(), ip(a))
                }
            }
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Punix(p) => write!(f, "punix:{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(s: &str) -> String {
        Target::parse(s).unwrap().to_string()
    }

    #[test]
    fn ovs_syntax() {
        assert_eq!(rt("tcp:127.0.0.1"), "tcp:127.0.0.1:6653");
        assert_eq!(rt("tcp:10.0.0.1:6633"), "tcp:10.0.0.1:6633");
        assert_eq!(rt("tcp:[::1]:7000"), "tcp:[::1]:7000");
        assert_eq!(rt("tcp:[::1]"), "tcp:[::1]:6653");
        assert_eq!(rt("tcp:fe80::1"), "tcp:[fe80::1]:6653");
        assert_eq!(rt("ptcp:"), "ptcp:6653");
        assert_eq!(rt("ptcp:6634"), "ptcp:6634");
        assert_eq!(rt("ptcp:6634:127.0.0.1"), "ptcp:6634:127.0.0.1");
        assert_eq!(rt("ptcp::127.0.0.1"), "ptcp:6653:127.0.0.1");
        assert_eq!(rt("ptcp:6634:[::1]"), "ptcp:6634:[::1]");
        assert_eq!(rt("unix:/run/c.sock"), "unix:/run/c.sock");
        assert_eq!(rt("punix:/tmp/br0.mgmt"), "punix:/tmp/br0.mgmt");
        assert_eq!(rt("ssl:127.0.0.1"), "ssl:127.0.0.1:6653");
        assert_eq!(rt("ssl:[::1]:6634"), "ssl:[::1]:6634");
        assert_eq!(rt("pssl:"), "pssl:6653");
        assert_eq!(rt("pssl:6634:127.0.0.1"), "pssl:6634:127.0.0.1");
        assert!(Target::parse("ptcp:1").unwrap().passive());
        assert!(Target::parse("pssl:1").unwrap().passive());
        assert!(Target::parse("pssl:1").unwrap().tls());
        assert!(Target::parse("ssl:1.2.3.4").unwrap().tls());
        assert!(!Target::parse("ssl:1.2.3.4").unwrap().passive());
        assert!(!Target::parse("tcp:1.2.3.4").unwrap().tls());
        assert!(!Target::parse("tcp:1.2.3.4").unwrap().passive());
    }

    #[test]
    fn refusals() {
        for bad in [
            "tcp:",
            "tcp:host.example",
            "tcp:1.2.3.4:99999",
            "tcp:1.2.3.4:x",
            "ptcp:x",
            "ptcp:1:notanip",
            "unix:",
            "punix:",
            "ssl:",
            "ssl:host.example",
            "pssl:x",
            "tls:1.2.3.4",
            "1.2.3.4",
            "tcp:[::1",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad} accepted");
        }
    }

    /// The reasons, in the words `set-controller` replied before they
    /// were typed.
    #[test]
    fn refusals_name_the_target_and_the_reason() {
        let e = |s: &str| Target::parse(s).unwrap_err();
        assert_eq!(e("tcp:").to_string(), "`tcp:`: tcp needs an IP address");
        assert_eq!(e("punix:").to_string(), "`punix:`: punix needs a path");
        assert_eq!(
            e("tcp:host.example"),
            TargetError::NotIp("host.example".into())
        );
        assert_eq!(
            e("tcp:host.example").to_string(),
            "`host.example` is not an IP address (names are not resolved)"
        );
        assert_eq!(
            e("tcp:1.2.3.4:99999").to_string(),
            "`99999` is not a port number"
        );
        assert_eq!(e("tcp:[::1").to_string(), "`[::1`: missing `]`");
        assert_eq!(
            e("tcp:[::1]x").to_string(),
            "`[::1]x`: expected `:PORT` after `]`"
        );
        assert_eq!(
            e("tls:1.2.3.4").to_string(),
            "`tls:1.2.3.4`: unknown connection type `tls` (tcp, ptcp, ssl, pssl, unix, punix)"
        );
        assert!(matches!(e("1.2.3.4"), TargetError::Syntax(_)));
    }
}
