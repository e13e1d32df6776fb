//! OpenFlow over TLS: `set-ssl`, `get-ssl`, `del-ssl` (the key,
//! certificate and CA that `ssl:` and `pssl:` targets use).

use super::{Switch, SwitchError};
use crate::control::openflow::tls::SslFiles;
use crate::control::proto::Response;
use serde_json::json;
use std::path::PathBuf;

impl Switch {
    /// `set-ssl`: the files are loaded and checked now (a bad one changes
    /// nothing), then kept in the config.
    pub(super) fn set_ssl(
        &mut self,
        private_key: PathBuf,
        certificate: PathBuf,
        ca_cert: PathBuf,
    ) -> Result<Response, SwitchError> {
        let files = SslFiles {
            private_key,
            certificate,
            ca_cert,
        };
        let old_tls = self.openflow.set_ssl(&files)?;
        let old = self.config.ssl.replace(files);
        self.persist_ssl_or_undo(old, old_tls)
    }

    /// `get-ssl`: the configured files (never their contents).
    pub(super) fn get_ssl(&self) -> Response {
        match &self.config.ssl {
            Some(f) => Response::ok(
                format!(
                    "Private key: {}\nCertificate: {}\nCA Certificate: {}\n",
                    f.private_key.display(),
                    f.certificate.display(),
                    f.ca_cert.display()
                ),
                json!(f),
            ),
            None => Response::ok("", json!(null)),
        }
    }

    /// `del-ssl`: refused while a bridge has `ssl:` or `pssl:` targets.
    pub(super) fn del_ssl(&mut self) -> Result<Response, SwitchError> {
        let old_tls = self.openflow.del_ssl()?;
        let old = self.config.ssl.take();
        self.persist_ssl_or_undo(old, old_tls)
    }

    /// Write the config file; when that fails, the TLS configuration and
    /// its config entry go back to what they were and the request fails,
    /// so the switch never runs what the file does not say.
    fn persist_ssl_or_undo(
        &mut self,
        old: Option<SslFiles>,
        old_tls: Option<crate::control::openflow::tls::Tls>,
    ) -> Result<Response, SwitchError> {
        if let Err(e) = self.persist() {
            self.config.ssl = old;
            self.openflow.restore_ssl(old_tls);
            return Err(e);
        }
        Ok(Response::ok("", json!(null)))
    }
}
