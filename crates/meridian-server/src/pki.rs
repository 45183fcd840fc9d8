//! Certificates for a cluster: a certificate authority, one certificate per machine (a
//! server process) naming every node it hosts, and client certificates, as PEM files.
//!
//! `meridian cluster up` writes a fresh set into its run-dir (`tls/`) so that the
//! one-command start runs with TLS; `meridian certs` writes one for a deployment across
//! machines. The CA's private key is not kept: a set is issued whole, and a new set (a new
//! CA) replaces it. Keys are written readable by their owner only.
//!
//! Layout of a directory: `ca.pem`; for each machine `<first node>.pem` and
//! `<first node>-key.pem` (`shard0-replica0.pem`: the name of the machine's first node,
//! `/` as `-`); for each client `<name>.pem` and `<name>-key.pem` (default `client`).

use meridian_client::tls::{client_dns_name, node_dns_name, Credentials, TlsError};
use meridian_core::{Cluster, NodeId};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// The client certificate `cluster up` issues.
pub const DEFAULT_CLIENT: &str = "client";

/// A certificate authority held in memory while it issues a set.
pub struct Authority {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Authority {
    /// A new CA for cluster `cluster` (ECDSA P-256).
    pub fn new(cluster: &str) -> Result<Authority, String> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(
            DnType::CommonName,
            format!("Meridian CA of cluster {cluster}"),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(rcgen_error)?;
        let cert = params.self_signed(&key).map_err(rcgen_error)?;
        Ok(Authority { cert, key })
    }

    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A certificate valid for `dns_names`, for both ends of a connection; (cert, key) PEM.
    pub fn issue(
        &self,
        common_name: &str,
        dns_names: Vec<String>,
    ) -> Result<(String, String), String> {
        let mut params = CertificateParams::new(dns_names).map_err(rcgen_error)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name.to_string());
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().map_err(rcgen_error)?;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(rcgen_error)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The certificate of the machine hosting `node`: every role on it named.
    pub fn issue_machine(
        &self,
        cluster: &Cluster,
        node: NodeId,
    ) -> Result<(String, String), String> {
        let names = cluster
            .machine_mates(node)
            .iter()
            .map(|n| node_dns_name(&cluster.node(*n).name))
            .collect();
        self.issue(&machine_file_name(cluster, node), names)
    }

    /// Client `name`'s certificate.
    pub fn issue_client(&self, name: &str) -> Result<(String, String), String> {
        self.issue(name, vec![client_dns_name(name)])
    }
}

fn rcgen_error(e: rcgen::Error) -> String {
    format!("certificate generation: {e}")
}

/// The file name of the machine hosting `node`: its first node's name, `/` as `-`.
pub fn machine_file_name(cluster: &Cluster, node: NodeId) -> String {
    cluster
        .node(cluster.machine_mates(node)[0])
        .name
        .replace('/', "-")
}

/// Where a directory keeps the CA, and `stem`'s certificate and key.
pub fn paths(dir: &Path, stem: &str) -> (PathBuf, PathBuf, PathBuf) {
    (
        dir.join("ca.pem"),
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}-key.pem")),
    )
}

/// Reads `stem`'s credentials from `dir` (see the module doc for the layout).
pub fn load(dir: &Path, stem: &str) -> Result<Credentials, TlsError> {
    let (ca, cert, key) = paths(dir, stem);
    Credentials::from_files(&ca, &cert, &key)
}

/// Writes a new CA, a certificate for every machine of `cluster`, and one per client
/// into `dir` (created if missing; files of an earlier set are replaced).
pub fn write_set(dir: &Path, cluster: &Cluster, clients: &[&str]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ca = Authority::new(&cluster.topology.name)?;
    write(&dir.join("ca.pem"), &ca.cert_pem(), false)?;
    for machine in &cluster.machines {
        let node = machine.nodes[0];
        let pair = ca.issue_machine(cluster, node)?;
        write_pair(dir, &machine_file_name(cluster, node), pair)?;
    }
    for client in clients {
        write_pair(dir, client, ca.issue_client(client)?)?;
    }
    Ok(())
}

fn write_pair(dir: &Path, stem: &str, (cert, key): (String, String)) -> Result<(), String> {
    let (_, cert_path, key_path) = paths(dir, stem);
    write(&cert_path, &cert, false)?;
    write(&key_path, &key, true)
}

/// Writes `text` to `path`, owner-only if `secret` (the mode is set before the key is in).
fn write(path: &Path, text: &str, secret: bool) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let error = |e: std::io::Error| format!("{}: {e}", path.display());
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(error)?;
    file.write_all(text.as_bytes()).map_err(error)
}
