//! IKEv2 wire format (RFC 7296 section 3): the fixed header, the generic
//! payload chain and the handful of payload bodies nicflow speaks.
//!
//! Parsing never trusts a length field: every read is bounds-checked and a
//! short or inconsistent message is an `Err`, which the session turns into
//! a silent drop (RFC 7296 section 2.21: unauthenticated garbage must not
//! cause a reply, or an attacker could use us as a reflector).

use std::net::Ipv4Addr;

/// IKE header length, also the offset of the first payload.
pub const HDR_LEN: usize = 28;

// Exchange types (RFC 7296 section 3.1).
pub const IKE_SA_INIT: u8 = 34;
pub const IKE_AUTH: u8 = 35;
pub const CREATE_CHILD_SA: u8 = 36;
pub const INFORMATIONAL: u8 = 37;

// Header flags.
pub const FLAG_INITIATOR: u8 = 0x08;
pub const FLAG_RESPONSE: u8 = 0x20;

// Payload types (RFC 7296 section 3.2).
pub const PL_NONE: u8 = 0;
pub const PL_SA: u8 = 33;
pub const PL_KE: u8 = 34;
pub const PL_IDI: u8 = 35;
pub const PL_IDR: u8 = 36;
pub const PL_AUTH: u8 = 39;
pub const PL_NONCE: u8 = 40;
pub const PL_NOTIFY: u8 = 41;
pub const PL_DELETE: u8 = 42;
pub const PL_TSI: u8 = 44;
pub const PL_TSR: u8 = 45;
pub const PL_SK: u8 = 46;

// Protocol IDs.
pub const PROTO_IKE: u8 = 1;
pub const PROTO_ESP: u8 = 3;

// Transform types and IDs.
pub const TR_ENCR: u8 = 1;
pub const TR_PRF: u8 = 2;
pub const TR_INTEG: u8 = 3;
pub const TR_DH: u8 = 4;
pub const TR_ESN: u8 = 5;
pub const ENCR_AES_GCM_16: u16 = 20;
pub const PRF_HMAC_SHA2_256: u16 = 5;
pub const DH_ECP256: u16 = 19;
pub const DH_CURVE25519: u16 = 31;
/// Transform attribute "Key Length" in TV format (AF bit set).
pub const ATTR_KEY_LENGTH: u16 = 0x800e;

// Notify message types (RFC 7296 section 3.10.1 and the IANA registry).
pub const N_INVALID_SYNTAX: u16 = 7;
pub const N_NO_PROPOSAL_CHOSEN: u16 = 14;
pub const N_INVALID_KE_PAYLOAD: u16 = 17;
pub const N_AUTHENTICATION_FAILED: u16 = 24;
pub const N_NO_ADDITIONAL_SAS: u16 = 35;
pub const N_TS_UNACCEPTABLE: u16 = 38;
pub const N_TEMPORARY_FAILURE: u16 = 43;
pub const N_CHILD_SA_NOT_FOUND: u16 = 44;
pub const N_INITIAL_CONTACT: u16 = 16384;
pub const N_NAT_DETECTION_SOURCE_IP: u16 = 16388;
pub const N_NAT_DETECTION_DESTINATION_IP: u16 = 16389;
pub const N_COOKIE: u16 = 16390;
pub const N_USE_TRANSPORT_MODE: u16 = 16391;
pub const N_REKEY_SA: u16 = 16393;

// Identification types.
pub const ID_IPV4_ADDR: u8 = 1;
pub const ID_FQDN: u8 = 2;
pub const ID_RFC822_ADDR: u8 = 3;

/// AUTH method "Shared Key Message Integrity Code".
pub const AUTH_SHARED_KEY_MIC: u8 = 2;
/// TS type for IPv4 address ranges.
pub const TS_IPV4_ADDR_RANGE: u8 = 7;

/// Why a message could not be parsed. Only logged: malformed input is
/// dropped, never answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message truncated")]
    Truncated,
    #[error("bad length field")]
    BadLength,
    #[error("unsupported IKE major version {0:#x}")]
    Version(u8),
    #[error("unsupported critical payload {0}")]
    Critical(u8),
    #[error("malformed {0} payload")]
    Malformed(&'static str),
}

/// The fixed IKE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub spi_i: u64,
    pub spi_r: u64,
    pub next: u8,
    pub exchange: u8,
    pub flags: u8,
    pub mid: u32,
    pub length: u32,
}

impl Header {
    pub fn is_response(&self) -> bool {
        self.flags & FLAG_RESPONSE != 0
    }
}

/// Reads the header and checks that the length field matches the datagram,
/// which the rest of the parser then relies on.
pub fn parse_header(msg: &[u8]) -> Result<Header, WireError> {
    if msg.len() < HDR_LEN {
        return Err(WireError::Truncated);
    }
    let version = msg[17];
    if version >> 4 != 2 {
        return Err(WireError::Version(version));
    }
    let h = Header {
        spi_i: u64::from_be_bytes(msg[0..8].try_into().unwrap()),
        spi_r: u64::from_be_bytes(msg[8..16].try_into().unwrap()),
        next: msg[16],
        exchange: msg[18],
        flags: msg[19],
        mid: u32::from_be_bytes(msg[20..24].try_into().unwrap()),
        length: u32::from_be_bytes(msg[24..28].try_into().unwrap()),
    };
    if h.length as usize != msg.len() {
        return Err(WireError::BadLength);
    }
    Ok(h)
}

pub fn write_header(out: &mut Vec<u8>, h: &Header) {
    out.extend_from_slice(&h.spi_i.to_be_bytes());
    out.extend_from_slice(&h.spi_r.to_be_bytes());
    out.push(h.next);
    out.push(0x20);
    out.push(h.exchange);
    out.push(h.flags);
    out.extend_from_slice(&h.mid.to_be_bytes());
    out.extend_from_slice(&h.length.to_be_bytes());
}

/// One payload of a chain: its type and body (without the generic header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    pub ty: u8,
    pub body: Vec<u8>,
}

impl Payload {
    pub fn new(ty: u8, body: Vec<u8>) -> Self {
        Payload { ty, body }
    }
}

/// Where an SK payload sits in a message, needed to build the AEAD's
/// associated data and to decrypt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkLocation {
    /// Offset of the SK payload's generic header.
    pub offset: usize,
    /// Type of the first payload inside.
    pub inner_next: u8,
}

/// Walks a payload chain starting with type `first`. An SK payload ends the
/// chain (RFC 7296 section 3.14: it must be last) and is reported by
/// location instead of being returned as a payload.
pub fn parse_chain(
    data: &[u8],
    base: usize,
    first: u8,
) -> Result<(Vec<Payload>, Option<SkLocation>), WireError> {
    let mut out = Vec::new();
    let mut next = first;
    let mut pos = 0usize;
    while next != PL_NONE {
        if data.len() < pos + 4 {
            return Err(WireError::Truncated);
        }
        let ty = next;
        next = data[pos];
        let critical = data[pos + 1] & 0x80 != 0;
        let len = u16::from_be_bytes([data[pos + 2], data[pos + 3]]) as usize;
        if len < 4 || pos + len > data.len() {
            return Err(WireError::BadLength);
        }
        if ty == PL_SK {
            if pos + len != data.len() {
                return Err(WireError::Malformed("SK"));
            }
            return Ok((
                out,
                Some(SkLocation {
                    offset: base + pos,
                    inner_next: next,
                }),
            ));
        }
        if !known_payload(ty) && critical {
            return Err(WireError::Critical(ty));
        }
        out.push(Payload::new(ty, data[pos + 4..pos + len].to_vec()));
        pos += len;
    }
    if pos != data.len() {
        return Err(WireError::BadLength);
    }
    Ok((out, None))
}

fn known_payload(ty: u8) -> bool {
    (PL_SA..=48).contains(&ty)
}

/// Serialises a payload chain, filling in the next-payload fields; returns
/// the type of the first payload (for the header or the SK payload).
pub fn encode_chain(payloads: &[Payload], out: &mut Vec<u8>) -> u8 {
    for (i, p) in payloads.iter().enumerate() {
        let next = payloads.get(i + 1).map_or(PL_NONE, |n| n.ty);
        out.push(next);
        out.push(0);
        out.extend_from_slice(&((p.body.len() + 4) as u16).to_be_bytes());
        out.extend_from_slice(&p.body);
    }
    payloads.first().map_or(PL_NONE, |p| p.ty)
}

/// A parsed Notify payload (RFC 7296 section 3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    pub proto: u8,
    pub ty: u16,
    pub spi: Vec<u8>,
    pub data: Vec<u8>,
}

pub fn notify(ty: u16, proto: u8, spi: &[u8], data: &[u8]) -> Payload {
    let mut b = vec![proto, spi.len() as u8];
    b.extend_from_slice(&ty.to_be_bytes());
    b.extend_from_slice(spi);
    b.extend_from_slice(data);
    Payload::new(PL_NOTIFY, b)
}

pub fn parse_notify(b: &[u8]) -> Result<Notify, WireError> {
    if b.len() < 4 {
        return Err(WireError::Malformed("Notify"));
    }
    let spi_len = b[1] as usize;
    if b.len() < 4 + spi_len {
        return Err(WireError::Malformed("Notify"));
    }
    Ok(Notify {
        proto: b[0],
        ty: u16::from_be_bytes([b[2], b[3]]),
        spi: b[4..4 + spi_len].to_vec(),
        data: b[4 + spi_len..].to_vec(),
    })
}

/// One transform of a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transform {
    pub ty: u8,
    pub id: u16,
    /// Key length in bits, from the Key Length attribute (ENCR only).
    pub key_bits: Option<u16>,
}

impl Transform {
    pub fn new(ty: u8, id: u16) -> Self {
        Transform {
            ty,
            id,
            key_bits: None,
        }
    }
    pub fn encr_gcm(bits: u16) -> Self {
        Transform {
            ty: TR_ENCR,
            id: ENCR_AES_GCM_16,
            key_bits: Some(bits),
        }
    }
}

/// One proposal of an SA payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub num: u8,
    pub proto: u8,
    pub spi: Vec<u8>,
    pub transforms: Vec<Transform>,
}

impl Proposal {
    /// The transforms of one type, in the sender's order of preference.
    pub fn of_type(&self, ty: u8) -> impl Iterator<Item = &Transform> {
        self.transforms.iter().filter(move |t| t.ty == ty)
    }
}

pub fn encode_sa(props: &[Proposal]) -> Payload {
    let mut b = Vec::new();
    for (i, p) in props.iter().enumerate() {
        let mut tb = Vec::new();
        for (j, t) in p.transforms.iter().enumerate() {
            let attr_len = if t.key_bits.is_some() { 4 } else { 0 };
            tb.push(if j + 1 == p.transforms.len() { 0 } else { 3 });
            tb.push(0);
            tb.extend_from_slice(&((8 + attr_len) as u16).to_be_bytes());
            tb.push(t.ty);
            tb.push(0);
            tb.extend_from_slice(&t.id.to_be_bytes());
            if let Some(bits) = t.key_bits {
                tb.extend_from_slice(&ATTR_KEY_LENGTH.to_be_bytes());
                tb.extend_from_slice(&bits.to_be_bytes());
            }
        }
        b.push(if i + 1 == props.len() { 0 } else { 2 });
        b.push(0);
        b.extend_from_slice(&((8 + p.spi.len() + tb.len()) as u16).to_be_bytes());
        b.push(p.num);
        b.push(p.proto);
        b.push(p.spi.len() as u8);
        b.push(p.transforms.len() as u8);
        b.extend_from_slice(&p.spi);
        b.extend_from_slice(&tb);
    }
    Payload::new(PL_SA, b)
}

pub fn parse_sa(b: &[u8]) -> Result<Vec<Proposal>, WireError> {
    let bad = WireError::Malformed("SA");
    let mut props = Vec::new();
    let mut pos = 0;
    loop {
        if b.len() < pos + 8 {
            return Err(bad);
        }
        let last = b[pos];
        let plen = u16::from_be_bytes([b[pos + 2], b[pos + 3]]) as usize;
        if plen < 8 || pos + plen > b.len() {
            return Err(bad);
        }
        let p = &b[pos..pos + plen];
        let spi_len = p[6] as usize;
        let ntr = p[7] as usize;
        if p.len() < 8 + spi_len {
            return Err(bad);
        }
        let mut transforms = Vec::new();
        let mut tpos = 8 + spi_len;
        for _ in 0..ntr {
            if p.len() < tpos + 8 {
                return Err(bad);
            }
            let tlen = u16::from_be_bytes([p[tpos + 2], p[tpos + 3]]) as usize;
            if tlen < 8 || tpos + tlen > p.len() {
                return Err(bad);
            }
            let mut t = Transform::new(p[tpos + 4], u16::from_be_bytes([p[tpos + 6], p[tpos + 7]]));
            // Attributes: TV (AF set, 4 bytes) or TLV. Only Key Length is
            // understood; an unknown attribute makes the transform unusable
            // (RFC 7296 section 3.3.6), which we express by an impossible
            // key length.
            let mut apos = tpos + 8;
            while apos < tpos + tlen {
                if tpos + tlen < apos + 4 {
                    return Err(bad);
                }
                let atype = u16::from_be_bytes([p[apos], p[apos + 1]]);
                let aval = u16::from_be_bytes([p[apos + 2], p[apos + 3]]);
                if atype & 0x8000 != 0 {
                    if atype == ATTR_KEY_LENGTH {
                        t.key_bits = Some(aval);
                    } else {
                        t.key_bits = Some(0);
                    }
                    apos += 4;
                } else {
                    t.key_bits = Some(0);
                    apos += 4 + aval as usize;
                }
            }
            transforms.push(t);
            tpos += tlen;
        }
        props.push(Proposal {
            num: p[4],
            proto: p[5],
            spi: p[8..8 + spi_len].to_vec(),
            transforms,
        });
        pos += plen;
        if last == 0 {
            break;
        }
    }
    Ok(props)
}

/// An IPv4 traffic selector (RFC 7296 section 3.13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ts {
    pub proto: u8,
    pub start_port: u16,
    pub end_port: u16,
    pub start: Ipv4Addr,
    pub end: Ipv4Addr,
}

impl Ts {
    /// A single host, all ports of `proto` (0 = any protocol).
    pub fn host(ip: Ipv4Addr, proto: u8) -> Self {
        Ts {
            proto,
            start_port: 0,
            end_port: 0xffff,
            start: ip,
            end: ip,
        }
    }

    /// The narrowed selector both sides' selectors admit, if any.
    pub fn intersect(&self, o: &Ts) -> Option<Ts> {
        let proto = match (self.proto, o.proto) {
            (0, p) | (p, 0) => p,
            (a, b) if a == b => a,
            _ => return None,
        };
        let start = self.start.max(o.start);
        let end = self.end.min(o.end);
        let start_port = self.start_port.max(o.start_port);
        let end_port = self.end_port.min(o.end_port);
        (start <= end && start_port <= end_port).then_some(Ts {
            proto,
            start_port,
            end_port,
            start,
            end,
        })
    }

    /// Whether `self` lies entirely inside `o`.
    pub fn within(&self, o: &Ts) -> bool {
        self.intersect(o) == Some(*self)
    }
}

pub fn encode_ts(ty: u8, ts: &[Ts]) -> Payload {
    let mut b = vec![ts.len() as u8, 0, 0, 0];
    for t in ts {
        b.push(TS_IPV4_ADDR_RANGE);
        b.push(t.proto);
        b.extend_from_slice(&16u16.to_be_bytes());
        b.extend_from_slice(&t.start_port.to_be_bytes());
        b.extend_from_slice(&t.end_port.to_be_bytes());
        b.extend_from_slice(&t.start.octets());
        b.extend_from_slice(&t.end.octets());
    }
    Payload::new(ty, b)
}

/// Parses a TS payload, skipping selectors of other types (IPv6 ranges,
/// security labels): nicflow's underlay is IPv4.
pub fn parse_ts(b: &[u8]) -> Result<Vec<Ts>, WireError> {
    let bad = WireError::Malformed("TS");
    if b.len() < 4 {
        return Err(bad);
    }
    let n = b[0] as usize;
    let mut pos = 4;
    let mut out = Vec::new();
    for _ in 0..n {
        if b.len() < pos + 4 {
            return Err(bad);
        }
        let len = u16::from_be_bytes([b[pos + 2], b[pos + 3]]) as usize;
        if len < 4 || pos + len > b.len() {
            return Err(bad);
        }
        if b[pos] == TS_IPV4_ADDR_RANGE {
            if len != 16 {
                return Err(bad);
            }
            let s = &b[pos..pos + 16];
            out.push(Ts {
                proto: s[1],
                start_port: u16::from_be_bytes([s[4], s[5]]),
                end_port: u16::from_be_bytes([s[6], s[7]]),
                start: Ipv4Addr::new(s[8], s[9], s[10], s[11]),
                end: Ipv4Addr::new(s[12], s[13], s[14], s[15]),
            });
        }
        pos += len;
    }
    Ok(out)
}

/// A Delete payload (RFC 7296 section 3.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    pub proto: u8,
    pub spis: Vec<u32>,
}

pub fn encode_delete(d: &Delete) -> Payload {
    let spi_size = if d.proto == PROTO_IKE { 0 } else { 4 };
    let mut b = vec![d.proto, spi_size];
    let n = if d.proto == PROTO_IKE {
        0
    } else {
        d.spis.len()
    };
    b.extend_from_slice(&(n as u16).to_be_bytes());
    if d.proto != PROTO_IKE {
        for s in &d.spis {
            b.extend_from_slice(&s.to_be_bytes());
        }
    }
    Payload::new(PL_DELETE, b)
}

pub fn parse_delete(b: &[u8]) -> Result<Delete, WireError> {
    let bad = WireError::Malformed("Delete");
    if b.len() < 4 {
        return Err(bad);
    }
    let proto = b[0];
    let spi_size = b[1] as usize;
    let n = u16::from_be_bytes([b[2], b[3]]) as usize;
    if b.len() < 4 + n * spi_size {
        return Err(bad);
    }
    let mut spis = Vec::new();
    if spi_size == 4 {
        for i in 0..n {
            let o = 4 + 4 * i;
            spis.push(u32::from_be_bytes(b[o..o + 4].try_into().unwrap()));
        }
    }
    Ok(Delete { proto, spis })
}

/// An Identification payload body: type and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub ty: u8,
    pub data: Vec<u8>,
}

impl Identity {
    /// Interprets a configured identity the way strongSwan does: an IPv4
    /// address literal is ID_IPV4_ADDR, something with `@` and a local part
    /// is an e-mail address, anything else a host name.
    pub fn from_config(s: &str) -> Self {
        if let Ok(ip) = s.parse::<Ipv4Addr>() {
            return Identity::ipv4(ip);
        }
        let s2 = s.strip_prefix('@').unwrap_or(s);
        let ty = if s.contains('@') && !s.starts_with('@') {
            ID_RFC822_ADDR
        } else {
            ID_FQDN
        };
        Identity {
            ty,
            data: s2.as_bytes().to_vec(),
        }
    }

    pub fn ipv4(ip: Ipv4Addr) -> Self {
        Identity {
            ty: ID_IPV4_ADDR,
            data: ip.octets().to_vec(),
        }
    }

    /// The body as it appears on the wire (and is MACed into AUTH).
    pub fn body(&self) -> Vec<u8> {
        let mut b = vec![self.ty, 0, 0, 0];
        b.extend_from_slice(&self.data);
        b
    }

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < 5 {
            return Err(WireError::Malformed("ID"));
        }
        Ok(Identity {
            ty: b[0],
            data: b[4..].to_vec(),
        })
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.ty, self.data.len()) {
            (ID_IPV4_ADDR, 4) => write!(
                f,
                "{}",
                Ipv4Addr::new(self.data[0], self.data[1], self.data[2], self.data[3])
            ),
            (ID_FQDN | ID_RFC822_ADDR, _) => write!(f, "{}", String::from_utf8_lossy(&self.data)),
            _ => write!(f, "id-type-{}", self.ty),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sa_roundtrip() {
        let p = Proposal {
            num: 1,
            proto: PROTO_ESP,
            spi: vec![1, 2, 3, 4],
            transforms: vec![Transform::encr_gcm(128), Transform::new(TR_ESN, 0)],
        };
        let pl = encode_sa(std::slice::from_ref(&p));
        assert_eq!(parse_sa(&pl.body).unwrap(), vec![p]);
    }

    #[test]
    fn ts_intersection_narrows_protocol() {
        let a = Ts::host(Ipv4Addr::new(198, 18, 0, 1), 0);
        let b = Ts::host(Ipv4Addr::new(198, 18, 0, 1), 17);
        assert_eq!(a.intersect(&b), Some(b));
        assert!(b.within(&a));
        assert!(!a.within(&b));
        let c = Ts::host(Ipv4Addr::new(198, 18, 0, 2), 17);
        assert_eq!(b.intersect(&c), None);
    }

    #[test]
    fn identity_from_config() {
        assert_eq!(Identity::from_config("198.18.0.1").ty, ID_IPV4_ADDR);
        assert_eq!(Identity::from_config("a@b.example").ty, ID_RFC822_ADDR);
        let f = Identity::from_config("@gw.example");
        assert_eq!((f.ty, f.data.as_slice()), (ID_FQDN, &b"gw.example"[..]));
    }
}
