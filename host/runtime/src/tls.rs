//! The TLS settings of this server's HTTP clients (Streamable HTTP upstreams, the
//! trace exporter, OpenAPI services): rustls with the ring provider and the
//! WebPKI roots the build already has, set per client (no process-wide provider,
//! no platform TLS); OpenAPI services also trust the system's roots
//! ([`client_config_with_system_roots`]), as an organization's own services run
//! under its own CA.

use std::sync::Arc;

/// A client configuration: the safe protocol versions, the WebPKI roots, no
/// client certificate.
///
/// # Errors
///
/// The provider supports none of the safe protocol versions.
pub fn client_config() -> Result<rustls::ClientConfig, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    with_roots(roots)
}

/// [`client_config`] trusting the system's roots too (as `rustls-native-certs`
/// reads them: the platform's store, or `SSL_CERT_FILE`/`SSL_CERT_DIR`).
///
/// # Errors
///
/// The provider supports none of the safe protocol versions.
pub fn client_config_with_system_roots() -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let found = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    tracing::debug!(added, "system root certificates trusted");
    with_roots(roots)
}

/// A client configuration trusting `roots`.
fn with_roots(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, String> {
    // rustls 0.23.48 deprecates the ring provider because it has no post-quantum
    // key exchange; the aws-lc-rs provider that has one adds a C and assembly
    // build of its own. Kept until ring gains ML-KEM or the build can take aws-lc
    // (docs/architecture.md, departures).
    #[allow(deprecated)]
    let provider = rustls::crypto::ring::default_provider();
    Ok(
        rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS: {error}"))?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}
