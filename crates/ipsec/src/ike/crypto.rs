//! The cryptography of IKEv2 with the one suite nicflow negotiates:
//! PRF_HMAC_SHA2_256, ENCR_AES_GCM_16 for the SK payload (RFC 5282), and
//! Curve25519 (RFC 8031) or NIST P-256 (RFC 5903) Diffie-Hellman. Everything
//! here comes from `ring`, so nothing is hand-rolled but the RFC's glue.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey};
use ring::digest;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use std::net::Ipv4Addr;

use super::wire::{DH_CURVE25519, DH_ECP256};

/// Output (and preferred key) length of PRF_HMAC_SHA2_256.
pub const PRF_LEN: usize = 32;
/// AES-GCM salt length appended to each key (RFC 4106 / RFC 5282).
pub const SALT_LEN: usize = 4;
/// Explicit IV length of the SK payload with AES-GCM.
pub const IV_LEN: usize = 8;
/// GCM tag length (the "16" of ENCR_AES_GCM_16).
pub const ICV_LEN: usize = 16;

pub fn prf(key: &[u8], data: &[&[u8]]) -> Vec<u8> {
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&k);
    for d in data {
        ctx.update(d);
    }
    ctx.sign().as_ref().to_vec()
}

/// `prf+` of RFC 7296 section 2.13: T1 = prf(K, S | 0x01),
/// Tn = prf(K, Tn-1 | S | n), concatenated to `len` bytes.
pub fn prf_plus(key: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + PRF_LEN);
    let mut t: Vec<u8> = Vec::new();
    let mut n: u8 = 1;
    while out.len() < len {
        t = prf(key, &[&t, seed, &[n]]);
        out.extend_from_slice(&t);
        n = n.wrapping_add(1);
    }
    out.truncate(len);
    out
}

/// The seven keys of an IKE SA (the integrity keys are empty with an AEAD).
#[derive(Clone)]
pub struct IkeKeys {
    pub sk_d: Vec<u8>,
    pub sk_ei: Vec<u8>,
    pub sk_er: Vec<u8>,
    pub sk_pi: Vec<u8>,
    pub sk_pr: Vec<u8>,
}

impl std::fmt::Debug for IkeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IkeKeys { .. }")
    }
}

impl IkeKeys {
    /// RFC 7296 section 2.14, from a SKEYSEED.
    pub fn derive(
        skeyseed: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
        enc_key_len: usize,
    ) -> Self {
        let ek = enc_key_len + SALT_LEN;
        let seed = [ni, nr, &spi_i.to_be_bytes(), &spi_r.to_be_bytes()].concat();
        let km = prf_plus(skeyseed, &seed, 3 * PRF_LEN + 2 * ek);
        let mut p = 0;
        let mut take = |n: usize| {
            let v = km[p..p + n].to_vec();
            p += n;
            v
        };
        IkeKeys {
            sk_d: take(PRF_LEN),
            sk_ei: take(ek),
            sk_er: take(ek),
            sk_pi: take(PRF_LEN),
            sk_pr: take(PRF_LEN),
        }
    }

    /// SKEYSEED = prf(Ni | Nr, g^ir) for a new IKE SA.
    pub fn initial(
        shared: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
        enc_key_len: usize,
    ) -> Self {
        let skeyseed = prf(&[ni, nr].concat(), &[shared]);
        Self::derive(&skeyseed, ni, nr, spi_i, spi_r, enc_key_len)
    }

    /// SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr) for a rekeyed IKE
    /// SA (RFC 7296 section 2.18).
    pub fn rekeyed(
        old_sk_d: &[u8],
        shared: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
        enc_key_len: usize,
    ) -> Self {
        let skeyseed = prf(old_sk_d, &[shared, ni, nr]);
        Self::derive(&skeyseed, ni, nr, spi_i, spi_r, enc_key_len)
    }
}

/// Child SA KEYMAT (RFC 7296 section 2.17): the initiator-to-responder key
/// first, then the responder-to-initiator key, each AES key || salt.
pub fn child_keymat(
    sk_d: &[u8],
    shared: Option<&[u8]>,
    ni: &[u8],
    nr: &[u8],
    key_len: usize,
) -> (Vec<u8>, Vec<u8>) {
    let k = key_len + SALT_LEN;
    let seed = [shared.unwrap_or(&[]), ni, nr].concat();
    let km = prf_plus(sk_d, &seed, 2 * k);
    (km[..k].to_vec(), km[k..].to_vec())
}

/// AUTH for shared keys (RFC 7296 section 2.15):
/// prf(prf(PSK, "Key Pad for IKEv2"), RealMessage | Nonce | prf(SK_p, ID')).
pub fn psk_auth(
    psk: &[u8],
    real_message: &[u8],
    peer_nonce: &[u8],
    sk_p: &[u8],
    id_body: &[u8],
) -> Vec<u8> {
    let key = prf(psk, &[b"Key Pad for IKEv2"]);
    let maced_id = prf(sk_p, &[id_body]);
    prf(&key, &[real_message, peer_nonce, &maced_id])
}

/// NAT detection hash (RFC 7296 section 2.23): SHA-1(SPIi | SPIr | IP | port).
pub fn nat_hash(spi_i: u64, spi_r: u64, ip: Ipv4Addr, port: u16) -> Vec<u8> {
    let mut ctx = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(&spi_i.to_be_bytes());
    ctx.update(&spi_r.to_be_bytes());
    ctx.update(&ip.octets());
    ctx.update(&port.to_be_bytes());
    ctx.finish().as_ref().to_vec()
}

/// Constant-time comparison for MACs.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An ephemeral Diffie-Hellman key for one KE payload.
pub struct DhKey {
    pub group: u16,
    private: EphemeralPrivateKey,
    /// The public value as sent in KE (for P-256: X | Y without the 0x04).
    pub public: Vec<u8>,
}

impl std::fmt::Debug for DhKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DhKey {{ group: {} }}", self.group)
    }
}

pub fn supported_group(g: u16) -> bool {
    g == DH_CURVE25519 || g == DH_ECP256
}

impl DhKey {
    pub fn generate(group: u16, rng: &SystemRandom) -> Option<Self> {
        let alg = match group {
            DH_CURVE25519 => &agreement::X25519,
            DH_ECP256 => &agreement::ECDH_P256,
            _ => return None,
        };
        let private = EphemeralPrivateKey::generate(alg, rng).ok()?;
        let pk = private.compute_public_key().ok()?;
        let public = match group {
            DH_ECP256 => pk.as_ref()[1..].to_vec(),
            _ => pk.as_ref().to_vec(),
        };
        Some(DhKey {
            group,
            private,
            public,
        })
    }

    /// g^ir with the peer's KE data; `None` if the value is invalid (wrong
    /// length, not on the curve, or an all-zero X25519 result).
    pub fn agree(self, peer: &[u8]) -> Option<Vec<u8>> {
        let (alg, peer): (&'static agreement::Algorithm, Vec<u8>) = match self.group {
            DH_CURVE25519 => (&agreement::X25519, peer.to_vec()),
            DH_ECP256 => (&agreement::ECDH_P256, [&[4u8][..], peer].concat()),
            _ => return None,
        };
        agreement::agree_ephemeral(self.private, &UnparsedPublicKey::new(alg, peer), |s| {
            s.to_vec()
        })
        .ok()
    }
}

fn gcm_key(key_salt: &[u8]) -> Option<(LessSafeKey, [u8; SALT_LEN])> {
    let (key, salt) = key_salt.split_at(key_salt.len().checked_sub(SALT_LEN)?);
    let alg = match key.len() {
        16 => &aead::AES_128_GCM,
        32 => &aead::AES_256_GCM,
        _ => return None,
    };
    let k = LessSafeKey::new(UnboundKey::new(alg, key).ok()?);
    Some((k, salt.try_into().ok()?))
}

/// Encrypts `plaintext` into an SK payload body appended to `msg`, whose
/// bytes so far (header and earlier payloads and the SK generic header) are
/// the associated data (RFC 5282 section 5.1). `iv` must never repeat under
/// one key: the caller uses a per-SA counter.
pub fn sk_seal(key_salt: &[u8], iv: u64, msg: &mut Vec<u8>, plaintext: &[u8]) {
    let (key, salt) = gcm_key(key_salt).expect("IKE SK keys are always 16/32+4 bytes");
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&salt);
    nonce[4..].copy_from_slice(&iv.to_be_bytes());
    // No padding needed with GCM; the Pad Length byte is still mandatory.
    let mut buf = plaintext.to_vec();
    buf.push(0);
    let tag = key
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&msg[..]),
            &mut buf,
        )
        .expect("AES-GCM seal of a bounded IKE message");
    msg.extend_from_slice(&iv.to_be_bytes());
    msg.extend_from_slice(&buf);
    msg.extend_from_slice(tag.as_ref());
}

/// Decrypts the SK payload whose generic header starts at `sk_off` (it runs
/// to the end of `msg`); returns the inner payload bytes without padding.
pub fn sk_open(key_salt: &[u8], msg: &[u8], sk_off: usize) -> Option<Vec<u8>> {
    let (key, salt) = gcm_key(key_salt)?;
    let body_off = sk_off + 4;
    if msg.len() < body_off + IV_LEN + 1 + ICV_LEN {
        return None;
    }
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&salt);
    nonce[4..].copy_from_slice(&msg[body_off..body_off + IV_LEN]);
    let mut buf = msg[body_off + IV_LEN..].to_vec();
    let pt = key
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&msg[..body_off]),
            &mut buf,
        )
        .ok()?;
    let pad = *pt.last()? as usize;
    let inner_len = pt.len().checked_sub(pad + 1)?;
    Some(pt[..inner_len].to_vec())
}

pub fn random_bytes(rng: &SystemRandom, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v).expect("system RNG");
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2 for HMAC-SHA-256, to pin the PRF.
    #[test]
    fn prf_is_hmac_sha256() {
        let out = prf(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(out[..8], [0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e]);
    }

    #[test]
    fn prf_plus_chains_blocks() {
        let k = b"key";
        let s = b"seed";
        let out = prf_plus(k, s, 70);
        let t1 = prf(k, &[s, &[1]]);
        let t2 = prf(k, &[&t1, s, &[2]]);
        let t3 = prf(k, &[&t2, s, &[3]]);
        assert_eq!(out, [t1, t2, t3].concat()[..70]);
    }

    #[test]
    fn sk_roundtrip_and_tamper() {
        let key = vec![7u8; 20];
        let mut msg = vec![1u8; 32];
        sk_seal(&key, 5, &mut msg, b"hello");
        assert_eq!(sk_open(&key, &msg, 28).unwrap(), b"hello");
        msg[10] ^= 1; // header is authenticated
        assert!(sk_open(&key, &msg, 28).is_none());
    }

    #[test]
    fn dh_agrees() {
        let rng = SystemRandom::new();
        for g in [DH_CURVE25519, DH_ECP256] {
            let a = DhKey::generate(g, &rng).unwrap();
            let b = DhKey::generate(g, &rng).unwrap();
            let (pa, pb) = (a.public.clone(), b.public.clone());
            assert_eq!(a.agree(&pb).unwrap(), b.agree(&pa).unwrap());
        }
    }
}
