//! TLS on every link: who may speak to a node, and as whom.
//!
//! A cluster has one certificate authority (CA). Every process holds a certificate the CA
//! signed and its key; both ends of every connection present theirs (mutual TLS, 1.3 or
//! 1.2 as rustls negotiates) and check the other's against the CA, so nothing without the
//! cluster's certificate gets past the handshake.
//!
//! **Identities.** A node's identity is a DNS name in its certificate's subject alternative
//! names: [`node_dns_name`] (`shard0/replica1` → `shard0-replica1.node.meridian`). A process
//! hosting a machine's several roles carries one name per role. Binding it:
//! * a connecting end (a peer's link, a client) asks the TLS handshake for the name of the
//!   node it dials, so it talks to that node and no other member of the cluster;
//! * a listening node takes a peer hello claiming node `from` only from a certificate that
//!   names `from` ([`PeerCertificate::names_node`]): a member of the cluster cannot speak
//!   as another node.
//!
//! **Clients** authenticate with a certificate from the same CA (`client.meridian` names,
//! [`client_dns_name`]), not a token: one mechanism for every link, nothing secret on a
//! command line, and the refusal happens in the handshake, before any frame is read. Any
//! certificate of the CA may act as a client; only a node's may act as that node.
//!
//! `Security::InsecurePlaintext` turns all of it off (no encryption, no authentication):
//! the runtime commands take it only from an explicit `--insecure-plaintext`.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// The DNS suffix of node identities.
pub const NODE_DOMAIN: &str = "node.meridian";
/// The DNS suffix of client identities.
pub const CLIENT_DOMAIN: &str = "client.meridian";

/// The DNS name a node's certificate carries: its name with `/` as `-`, under
/// [`NODE_DOMAIN`].
pub fn node_dns_name(node_name: &str) -> String {
    format!("{}.{NODE_DOMAIN}", node_name.replace('/', "-"))
}

/// The DNS name of client `name`'s certificate.
pub fn client_dns_name(name: &str) -> String {
    format!("{name}.{CLIENT_DOMAIN}")
}

/// Why TLS material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("{0}")]
    Config(String),
}

/// A byte stream, plain TCP or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
/// A connection's stream, whichever [`Security`] opened it.
pub type Stream = Box<dyn Io>;

/// How connections are secured.
#[derive(Clone, Debug)]
pub enum Security {
    /// Mutual TLS with these credentials.
    Tls(Arc<Credentials>),
    /// No encryption and no authentication: anyone who reaches the port is trusted.
    InsecurePlaintext,
}

/// The cluster's CA and this process's certificate chain and key.
pub struct Credentials {
    ca: Vec<CertificateDer<'static>>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Credentials")
            .field("ca_certificates", &self.ca.len())
            .field("chain_certificates", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Reads PEM files: the CA certificate(s), this process's chain (leaf first), its key.
    pub fn from_files(ca: &Path, cert: &Path, key: &Path) -> Result<Credentials, TlsError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| TlsError::File {
                path: path.display().to_string(),
                message: e.to_string(),
            })
        };
        let (ca_pem, cert_pem, key_pem) = (read(ca)?, read(cert)?, read(key)?);
        Credentials::from_pem(&ca_pem, &cert_pem, &key_pem).map_err(|e| match e {
            TlsError::Config(m) => TlsError::File {
                path: format!("{}, {}, {}", ca.display(), cert.display(), key.display()),
                message: m,
            },
            other => other,
        })
    }

    /// Parses PEM text (see [`Credentials::from_files`]).
    pub fn from_pem(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<Credentials, TlsError> {
        let certs = |pem: &[u8], what: &str| -> Result<Vec<CertificateDer<'static>>, TlsError> {
            let list = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TlsError::Config(format!("{what}: not PEM certificates ({e})")))?;
            if list.is_empty() {
                return Err(TlsError::Config(format!("{what}: no certificate in it")));
            }
            Ok(list)
        };
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| TlsError::Config(format!("key: not a PEM private key ({e})")))?;
        Ok(Credentials {
            ca: certs(ca, "CA")?,
            chain: certs(cert, "certificate")?,
            key,
        })
    }

    /// Whether this process's own certificate names node `node_name`.
    pub fn names_node(&self, node_name: &str) -> bool {
        names(&self.chain[0], &node_dns_name(node_name))
    }

    fn roots(&self) -> Result<rustls::RootCertStore, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in &self.ca {
            roots
                .add(cert.clone())
                .map_err(|e| TlsError::Config(format!("CA certificate: {e}")))?;
        }
        Ok(roots)
    }

    /// The connecting side: presents this certificate, checks the server's against the CA.
    pub fn connector(&self) -> Result<Connector, TlsError> {
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(config_error)?;
        Ok(Connector(tokio_rustls::TlsConnector::from(Arc::new(
            config,
        ))))
    }

    /// The listening side: presents this certificate and requires one the CA signed.
    pub fn acceptor(&self) -> Result<Acceptor, TlsError> {
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(self.roots()?),
            provider(),
        )
        .build()
        .map_err(|e| TlsError::Config(format!("CA certificate: {e}")))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(config_error)?;
        Ok(Acceptor(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
    }
}

fn config_error(e: rustls::Error) -> TlsError {
    TlsError::Config(format!("certificate or key: {e}"))
}

/// ring rather than rustls's default aws-lc-rs: no cmake or assembler toolchain to build,
/// and the choice is explicit, so no other crate's features can make it ambiguous.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Whether `cert` is valid for DNS name `dns` (its chain was verified in the handshake).
fn names(cert: &CertificateDer<'_>, dns: &str) -> bool {
    let Ok(name) = ServerName::try_from(dns) else {
        return false;
    };
    webpki::EndEntityCert::try_from(cert)
        .and_then(|ee| ee.verify_is_valid_for_subject_name(&name))
        .is_ok()
}

/// Opens TLS connections to nodes.
#[derive(Clone)]
pub struct Connector(tokio_rustls::TlsConnector);

impl Connector {
    /// Handshakes over `tcp` with node `node_name`; fails unless the server proves it is
    /// that node of this CA's cluster.
    pub async fn connect(&self, node_name: &str, tcp: TcpStream) -> std::io::Result<Stream> {
        let name = ServerName::try_from(node_dns_name(node_name)).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{node_name}: {e}"),
            )
        })?;
        Ok(Box::new(self.0.connect(name, tcp).await?))
    }
}

/// Accepts TLS connections from holders of the cluster's certificates.
#[derive(Clone)]
pub struct Acceptor(tokio_rustls::TlsAcceptor);

impl Acceptor {
    /// Handshakes over `tcp`; fails for a peer without a certificate the CA signed.
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<(Stream, PeerCertificate)> {
        let stream = self.0.accept(tcp).await?;
        let cert = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|c| c.clone().into_owned())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "no client certificate",
                )
            })?;
        Ok((Box::new(stream), PeerCertificate(Some(cert))))
    }
}

/// The verified certificate the other end of an accepted connection presented (none over
/// plaintext).
pub struct PeerCertificate(Option<CertificateDer<'static>>);

impl PeerCertificate {
    /// A plaintext connection's: nobody proved anything, and every claim is taken.
    pub fn plaintext() -> PeerCertificate {
        PeerCertificate(None)
    }

    /// Whether the other end may speak as node `node_name`: its certificate names it (over
    /// plaintext, always).
    pub fn names_node(&self, node_name: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|cert| names(cert, &node_dns_name(node_name)))
    }
}

/// Secures `tcp`, a connection to node `node_name`, with `connector` (None: plaintext).
pub async fn connect(
    security: &Option<Connector>,
    node_name: &str,
    tcp: TcpStream,
) -> std::io::Result<Stream> {
    match security {
        Some(connector) => connector.connect(node_name, tcp).await,
        None => Ok(Box::new(tcp)),
    }
}

/// What a read error says if it is the other end refusing the TLS handshake (a fatal alert
/// about this end's certificate); None for any other broken connection.
pub fn refusal(error: &std::io::Error) -> Option<String> {
    let rustls::Error::AlertReceived(alert) = error.get_ref()?.downcast_ref::<rustls::Error>()?
    else {
        return None;
    };
    Some(format!(
        "the coordinator refused this client's certificate in the TLS handshake ({alert:?})"
    ))
}
