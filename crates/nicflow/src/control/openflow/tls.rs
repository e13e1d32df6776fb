//! OpenFlow over TLS (`ssl:` and `pssl:` targets), as Open vSwitch speaks
//! it: mutual authentication against one CA.
//!
//! The daemon has one key, one certificate (chain) and one CA file
//! (`nicflow set-ssl KEY CERT CACERT`, like `ovs-vsctl set-ssl`; the
//! `[ssl]` section of the config file). On `pssl:` it presents its
//! certificate and requires the client's, signed by the CA (a client
//! without one, or with one from another CA, fails the handshake); on
//! `ssl:` it requires the controller's certificate to be signed by the CA
//! and presents its own. As in OVS, the peer's certificate is not matched
//! against the address it was reached at (OVS's PKI, `ovs-pki`, issues
//! certificates without addresses in them): the CA is the authority.
//!
//! TLS 1.2 and 1.3 only, rustls with the `ring` provider. The connection
//! is driven without blocking by the daemon's poll loop
//! ([`TlsStream::read`], [`TlsStream::write`], [`TlsStream::flush_tls`]):
//! a handshake advances when its socket is readable or writable, never
//! holding up forwarding; one that does not finish within the session's
//! HELLO timeout is dropped (`session`).
//!
//! Secrets: the private key is read once from a file that must not be
//! accessible to other users (refused otherwise), its bytes are wiped
//! after parsing, and no error built here quotes the key file's content.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, ServerConfig,
    ServerConnection, SignatureScheme,
};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the daemon's TLS identity and CA are: part of the config schema.
pub use nicflow_api::config::SslFiles;

/// Why a TLS configuration was refused. No variant carries key bytes.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "private key {}: accessible to other users (mode {mode:04o}); \
         chmod 600 (or 640) it",
        path.display()
    )]
    KeyMode { path: PathBuf, mode: u32 },
    #[error("private key {}: {why}", path.display())]
    BadKey { path: PathBuf, why: &'static str },
    #[error("{what} {}: {why}", path.display())]
    BadCert {
        what: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error("{0}")]
    Config(String),
}

/// The loaded configuration, shared by every TLS connection.
pub struct Tls {
    pub files: SslFiles,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

/// Overwrite `buf` in a way the optimizer keeps (key bytes should not
/// linger in freed memory).
fn wipe(buf: &mut [u8]) {
    for b in buf.iter_mut() {
        // SAFETY: `b` is a valid, aligned, exclusive reference.
        unsafe { std::ptr::write_volatile(b, 0) };
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// Read the private key: the file's mode is checked on the opened file
/// (no window between check and read), and no error quotes its content.
fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let io = |source| TlsError::Io {
        what: "private key",
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o007 != 0 {
        return Err(TlsError::KeyMode {
            path: path.to_path_buf(),
            mode,
        });
    }
    if !meta.is_file() {
        return Err(TlsError::BadKey {
            path: path.to_path_buf(),
            why: "not a regular file",
        });
    }
    let mut pem = Vec::with_capacity(meta.len() as usize);
    let r = f.read_to_end(&mut pem).map_err(io);
    let key = r.and_then(|_| {
        PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::BadKey {
            path: path.to_path_buf(),
            // The parser's own message can quote the file (a bad base64
            // symbol): say only what kind of problem it was.
            why: match e {
                rustls::pki_types::pem::Error::NoItemsFound => {
                    "no PEM private key in it (PKCS#8, PKCS#1 or SEC1)"
                }
                _ => "not a well-formed PEM file",
            },
        })
    });
    wipe(&mut pem);
    key
}

fn load_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |why: String| TlsError::BadCert {
        what,
        path: path.to_path_buf(),
        why,
    };
    let pem = std::fs::read(path).map_err(|source| TlsError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    Ok(certs)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

impl Tls {
    /// Load and check everything now, so that `set-ssl` with a bad file is
    /// refused and changes nothing.
    pub fn load(files: &SslFiles) -> Result<Tls, TlsError> {
        let key = load_key(&files.private_key)?;
        let certs = load_certs("certificate", &files.certificate)?;
        let cas = load_certs("CA certificate", &files.ca_cert)?;
        let mut roots = RootCertStore::empty();
        for c in cas {
            roots.add(c).map_err(|e| TlsError::BadCert {
                what: "CA certificate",
                path: files.ca_cert.clone(),
                why: e.to_string(),
            })?;
        }
        let roots = Arc::new(roots);
        let cfg = |e: rustls::Error| TlsError::Config(e.to_string());
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(cfg)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| TlsError::BadCert {
                what: "certificate",
                path: files.certificate.clone(),
                why: format!("does not go with the private key or cannot be used: {e}"),
            })?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(cfg)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CaOnly {
                roots,
                provider: provider(),
            }))
            .with_client_auth_cert(certs, key)
            .map_err(cfg)?;
        Ok(Tls {
            files: files.clone(),
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The server side of an accepted `pssl:` connection.
    pub fn accept(&self, sock: TcpStream) -> Result<TlsStream, rustls::Error> {
        let conn = ServerConnection::new(self.server.clone())?;
        Ok(TlsStream::new(sock, conn.into()))
    }

    /// The client side of an `ssl:` connection to `ip`.
    pub fn connect(&self, sock: TcpStream, ip: IpAddr) -> Result<TlsStream, rustls::Error> {
        let conn = ClientConnection::new(self.client.clone(), ServerName::IpAddress(ip.into()))?;
        Ok(TlsStream::new(sock, conn.into()))
    }
}

/// A controller's certificate must chain to the CA (and be valid now);
/// as in Open vSwitch, its names are not compared with the address the
/// switch connected to (`ovs-pki` puts none there: its certificates carry
/// an id as their only DNS name).
#[derive(Debug)]
struct CaOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for CaOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A non-blocking TCP socket with a TLS connection on it.
pub struct TlsStream {
    sock: TcpStream,
    conn: rustls::Connection,
    /// Why the TLS layer failed (handshake refused, bad record), once it
    /// has.
    failed: Option<String>,
    /// The last read filled the caller's buffer: more plaintext may be
    /// waiting inside rustls without the socket being readable.
    more: bool,
}

impl TlsStream {
    fn new(sock: TcpStream, conn: rustls::Connection) -> TlsStream {
        TlsStream {
            sock,
            conn,
            failed: None,
            more: false,
        }
    }

    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// Plaintext from the peer. `Err(WouldBlock)` when nothing is there
    /// yet (the handshake advances meanwhile), `Ok(0)` at a clean close.
    pub fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Records that carry no data (handshake, alerts, empty fragments)
        // are read a bounded number of times per call: a peer streaming
        // them waits in its socket (still readable for the next poll)
        // instead of holding this round.
        for _ in 0..64 {
            match self.conn.reader().read(buf) {
                Ok(n) => {
                    self.more = n == buf.len();
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => {
                    self.more = false;
                    return Err(e);
                }
            }
            self.more = false;
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => {
                    // The peer closed the socket: whatever rustls says next
                    // (clean close or unexpected EOF) ends the connection.
                    let _ = self.process();
                    return match self.conn.reader().read(buf) {
                        Ok(n) => Ok(n),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(0),
                        Err(e) => Err(e),
                    };
                }
                Ok(_) => self.process()?,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Err(ErrorKind::WouldBlock.into())
    }

    fn process(&mut self) -> std::io::Result<()> {
        if let Err(e) = self.conn.process_new_packets() {
            self.failed.get_or_insert_with(|| e.to_string());
            // The alert rustls queued tells the peer why.
            let _ = self.flush_tls();
            return Err(std::io::Error::new(ErrorKind::InvalidData, e));
        }
        Ok(())
    }

    /// Hand plaintext to TLS; `Err(WouldBlock)` when its buffer is full
    /// until the socket takes more.
    pub fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.flush_tls() {
            Err(e) if e.kind() != ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        let n = self.conn.writer().write(buf)?;
        match self.flush_tls() {
            Err(e) if e.kind() != ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        if n == 0 && !buf.is_empty() {
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Send the TLS records waiting (handshake, encrypted data, alerts).
    pub fn flush_tls(&mut self) -> std::io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// TLS records wait for the socket.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Plaintext may be waiting without the socket being readable.
    pub fn has_buffered_input(&self) -> bool {
        self.more
    }

    /// Queue a `close_notify` (sent by the next flush).
    pub fn close_notify(&mut self) {
        self.conn.send_close_notify();
    }

    /// Why this connection was refused, if it was: the TLS error, or a
    /// handshake that never completed.
    pub fn refusal(&self) -> Option<String> {
        self.failed.clone().or_else(|| {
            self.conn
                .is_handshaking()
                .then(|| "TLS handshake not completed".to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn write_mode(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn key_files_others_can_read_are_refused_and_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.pem");
        let secret =
            "-----BEGIN PRIVATE KEY-----\nU0VDUkVUU0VDUkVU!!c2VjcmV0\n-----END PRIVATE KEY-----\n";
        write_mode(&key, secret, 0o644);
        let e = load_key(&key).unwrap_err();
        assert!(matches!(e, TlsError::KeyMode { mode: 0o644, .. }), "{e}");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        // Private enough, but not a key: the message says what, not the bytes.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = load_key(&key).unwrap_err().to_string();
        assert!(e.contains("private key"), "{e}");
        for part in ["U0VDUkVU", "c2VjcmV0", "!!"] {
            assert!(!e.contains(part), "{e}");
        }
        write_mode(&key, "nothing here\n", 0o640);
        let e = load_key(&key).unwrap_err().to_string();
        assert!(e.contains("no PEM private key"), "{e}");
        let e = load_key(&dir.path().join("missing.pem"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }

    #[test]
    fn ssl_files_round_trip_through_the_config() {
        let text = r#"
            [[bridge]]
            name = "br0"
            [bridge.openflow]
            controllers = ["pssl:6653:127.0.0.1"]

            [ssl]
            private_key = "/etc/nicflow/k.pem"
            certificate = "/etc/nicflow/c.pem"
            ca_cert = "/etc/nicflow/ca.pem"
        "#;
        let c = crate::control::config::Config::parse(text).unwrap();
        let ssl = c.ssl.clone().unwrap();
        assert_eq!(ssl.ca_cert, PathBuf::from("/etc/nicflow/ca.pem"));
        let again = crate::control::config::Config::parse(&c.to_toml()).unwrap();
        assert_eq!(again, c);
        assert!(crate::control::config::Config::parse("[ssl]\nprivate_key = \"k\"\n").is_err());
    }

    /// openssl: an EC CA, and a certificate signed by it for `name`.
    fn pki(dir: &Path) -> Option<()> {
        let ossl = |args: &[&str]| -> Option<()> {
            let ok = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .ok()?
                .success();
            assert!(ok, "openssl {args:?}");
            Some(())
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let mut a = vec!["req", "-x509", "-days", "2", "-subj", "/CN=test CA"];
        a.extend(ec);
        a.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        a.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        a.extend(["-addext", "keyUsage=critical,keyCertSign"]);
        ossl(&a)?;
        // Extensions make a v3 certificate (webpki refuses v1).
        std::fs::write(dir.join("leaf.ext"), "basicConstraints=CA:FALSE\n").unwrap();
        for name in ["a", "b"] {
            let (key, csr, pem) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            let subj = format!("/CN={name}");
            let mut a = vec!["req", "-subj", &subj, "-keyout", &key, "-out", &csr];
            a.extend(ec);
            ossl(&a)?;
            ossl(&[
                "x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-days", "2",
                "-out", &pem, "-extfile", "leaf.ext",
            ])?;
            std::fs::set_permissions(dir.join(&key), std::fs::Permissions::from_mode(0o600))
                .unwrap();
        }
        Some(())
    }

    fn files(dir: &Path, name: &str) -> SslFiles {
        SslFiles {
            private_key: dir.join(format!("{name}.key")),
            certificate: dir.join(format!("{name}.pem")),
            ca_cert: dir.join("ca.pem"),
        }
    }

    /// Both ends non-blocking on loopback, driven by hand as the daemon's
    /// loop drives them: the handshake and 1 MiB each way get through
    /// `WouldBlock`s and rustls' bounded buffers; a mismatched key and
    /// certificate are refused at load.
    #[test]
    fn nonblocking_handshake_and_bulk_data() {
        let dir = tempfile::tempdir().unwrap();
        if pki(dir.path()).is_none() {
            eprintln!("skipping: openssl not installed");
            return;
        }
        let a = Tls::load(&files(dir.path(), "a")).unwrap();
        let b = Tls::load(&files(dir.path(), "b")).unwrap();
        let mut wrong = files(dir.path(), "a");
        wrong.certificate = dir.path().join("b.pem");
        let e = Tls::load(&wrong).unwrap_err().to_string();
        assert!(e.contains("does not go with the private key"), "{e}");

        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let mut server = a.accept(s).unwrap();
        let mut client = b.connect(c, "127.0.0.1".parse().unwrap()).unwrap();
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        let (mut sent_c, mut sent_s) = (0, 0);
        let (mut got_c, mut got_s) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 16384];
        let t0 = std::time::Instant::now();
        while got_c.len() < data.len() || got_s.len() < data.len() {
            assert!(t0.elapsed() < std::time::Duration::from_secs(20), "stuck");
            for (conn, sent, got) in [
                (&mut client, &mut sent_c, &mut got_c),
                (&mut server, &mut sent_s, &mut got_s),
            ] {
                if *sent < data.len() {
                    match conn.write(&data[*sent..(*sent + 40000).min(data.len())]) {
                        Ok(n) => *sent += n,
                        Err(e) => assert_eq!(e.kind(), ErrorKind::WouldBlock),
                    }
                }
                let _ = conn.flush_tls();
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) => panic!("closed"),
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }
        assert!(got_c == data && got_s == data);
        assert!(server.refusal().is_none() && client.refusal().is_none());
    }
}
