//! TLS for the service's own HTTP clients: merchants' `https` webhook endpoints and an
//! `https` `PROVIDER_URL`. rustls on ring (no OpenSSL, nothing to install), trusting
//! Mozilla's root certificates, compiled in, and those of `TLS_CA_FILE` (a private CA).

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// How the clients verify the servers they connect to.
pub type ClientTls = Arc<rustls::ClientConfig>;

/// The clients' TLS: the built-in roots, plus every certificate in the PEM file
/// `extra_roots`. `Err` says what is wrong with that file.
pub fn client_tls(extra_roots: Option<&Path>) -> Result<ClientTls, String> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = extra_roots {
        let certificates = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("cannot read PEM certificates from {}: {e}", path.display()))?;
        if certificates.is_empty() {
            return Err(format!("no certificate in {}", path.display()));
        }
        for certificate in certificates {
            roots
                .add(certificate)
                .map_err(|e| format!("a certificate in {} is not usable: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // HTTP/1.1 over TLS as over plain TCP: the same requests either way.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::client_tls;

    #[test]
    fn the_built_in_roots_need_no_file_and_a_bad_file_is_refused() {
        assert!(client_tls(None).is_ok());
        let missing = std::path::Path::new("/nonexistent/ca.pem");
        assert!(
            client_tls(Some(missing))
                .unwrap_err()
                .contains("/nonexistent/ca.pem")
        );
        let dir = std::env::temp_dir().join(format!("tls-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        assert!(
            client_tls(Some(&empty))
                .unwrap_err()
                .contains("no certificate")
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
