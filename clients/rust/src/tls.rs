//! https: rustls on the ring crypto provider, Mozilla's roots compiled in (webpki-roots),
//! plus the private CAs a caller adds. No OpenSSL, no C toolchain, and no dependence on the
//! machine's certificate store, so a client in a bare container verifies like one on a laptop.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::error::Error;

/// CA certificates trusted besides Mozilla's roots, as the builder was given them.
#[derive(Clone)]
pub(crate) enum ExtraRoots {
    Pem(Vec<u8>),
    /// Read when the client is built, so a missing file fails `build()`, not the first call.
    File(PathBuf),
}

impl std::fmt::Debug for ExtraRoots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pem(pem) => write!(f, "Pem({} bytes)", pem.len()),
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

impl ExtraRoots {
    fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, Error> {
        let (certificates, origin) = match self {
            Self::Pem(pem) => (
                CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>(),
                "the PEM given".to_owned(),
            ),
            Self::File(path) => (
                CertificateDer::pem_file_iter(path)
                    .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>()),
                path.display().to_string(),
            ),
        };
        let certificates = certificates.map_err(|e| {
            Error::invalid(format!("cannot read CA certificates from {origin}: {e}"))
        })?;
        if certificates.is_empty() {
            return Err(Error::invalid(format!("no CERTIFICATE block in {origin}")));
        }
        Ok(certificates)
    }
}

/// The rustls error inside `error` when the server's certificate was refused. It sits
/// inside (possibly nested) `io::Error`s, whose `source()` skips the error they wrap, so
/// those are opened with `get_ref()`.
pub(crate) fn refused_certificate<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    if let Some(tls @ rustls::Error::InvalidCertificate(_)) = error.downcast_ref::<rustls::Error>()
    {
        return Some(tls);
    }
    let wrapped = error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .map(|inner| inner as &(dyn std::error::Error + 'static));
    wrapped
        .into_iter()
        .chain(error.source())
        .find_map(refused_certificate)
}

/// The TLS configuration of every https connection of one client.
pub(crate) fn client_config(extra_roots: &[ExtraRoots]) -> Result<rustls::ClientConfig, Error> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for source in extra_roots {
        for certificate in source.certificates()? {
            roots
                .add(certificate)
                .map_err(|e| Error::invalid(format!("a CA certificate is not usable: {e}")))?;
        }
    }
    // The provider is chosen here, not installed process-wide: the application may have
    // installed another one, and a library should not decide that for it.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid(format!("cannot set up TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The client speaks HTTP/1.1 only; saying so keeps a server from choosing h2.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use crate::{Client, ErrorKind, PaymentStatus, RetryPolicy};

    const PAYMENT: &str = r#"{"id":"pay_x","object":"payment","amount":2000,"currency":"usd","status":"succeeded","capture_method":"automatic","amount_capturable":0,"amount_captured":2000,"amount_refunded":0,"payment_method":"pm_card_visa","customer_id":null,"description":null,"metadata":{},"provider_charge_id":"ch_1","failure_code":null,"failure_message":null,"cancellation_reason":null,"created_at":"2026-11-26T07:00:00Z","updated_at":"2026-11-26T07:00:00Z"}"#;

    /// A CA of the test's own and a certificate for 127.0.0.1 signed by it: the CA's PEM, and
    /// the server's TLS configuration.
    fn test_certificates() -> (String, rustls::ServerConfig) {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "payments-client test CA");
        let ca = ca.self_signed(&ca_key).unwrap();
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&server_key, &ca, &ca_key)
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![server.der().clone()], key)
        .unwrap();
        (ca.pem(), config)
    }

    /// An https server on 127.0.0.1 that answers `GET /v1/payments/pay_x` with a payment
    /// (404 to anything else), one request per connection. Returns its base URL.
    async fn start_https_server(config: rustls::ServerConfig) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that does not trust the certificate ends here.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut request = Vec::new();
                    let mut buffer = [0; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let request = String::from_utf8_lossy(&request);
                    let found = request.starts_with("GET /v1/payments/pay_x HTTP/1.1\r\n")
                        && request.contains("\r\nauthorization: Bearer sk_test_tls\r\n");
                    let (status, body) = if found {
                        ("200 OK", PAYMENT)
                    } else {
                        ("404 Not Found", r#"{"code":"not_found","status":404}"#)
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        format!("https://127.0.0.1:{port}")
    }

    #[tokio::test]
    async fn https_works_with_a_private_ca_and_fails_without_it() {
        let (ca_pem, server_config) = test_certificates();
        let base_url = start_https_server(server_config).await;

        let trusting = Client::builder(base_url.clone(), "sk_test_tls")
            .add_ca_pem(ca_pem.clone())
            .retry_policy(RetryPolicy::never())
            .build()
            .unwrap();
        let payment = trusting.get_payment("pay_x").await.unwrap();
        assert_eq!(payment.id, "pay_x");
        assert_eq!(payment.status, PaymentStatus::Succeeded);

        let ca_file = std::env::temp_dir().join(format!(
            "payments-client-ca-{}.pem",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&ca_file, &ca_pem).unwrap();
        let from_file = Client::builder(base_url.clone(), "sk_test_tls")
            .add_ca_file(&ca_file)
            .retry_policy(RetryPolicy::never())
            .build();
        let _ = std::fs::remove_file(&ca_file);
        let payment = from_file.unwrap().get_payment("pay_x").await.unwrap();
        assert_eq!(payment.id, "pay_x");

        // Mozilla's roots alone do not vouch for the test CA, and the default retry policy
        // does not try again: the next handshake would be refused the same way.
        let unaware = Client::new(base_url, "sk_test_tls").unwrap();
        let error = unaware.get_payment("pay_x").await.unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::Tls { reason, .. } if reason.contains("UnknownIssuer")),
            "{error:?}"
        );
        assert_eq!(
            super::refused_certificate(&error),
            Some(&rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        );
        assert_eq!(error.attempts(), 1);
        assert!(!error.is_outcome_unknown());
    }

    #[test]
    fn a_ca_option_without_a_usable_certificate_fails_the_build() {
        let builder = || Client::builder("https://127.0.0.1", "sk");
        assert!(builder().build().is_ok());
        let error = builder().add_ca_pem("not a PEM").build().unwrap_err();
        assert!(error.to_string().contains("no CERTIFICATE"), "{error}");
        let missing = builder()
            .add_ca_file("/nonexistent/ca.pem")
            .build()
            .unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/ca.pem"),
            "{missing}"
        );
        let (ca_pem, _) = test_certificates();
        assert!(builder().add_ca_pem(ca_pem).build().is_ok());
    }
}
