//! The sandbox's HTTPS address. kubectl sends bearer tokens only over TLS, so a kubeconfig that
//! authenticates as a ServiceAccount (`kubectl create token`) needs it. Every sandbox makes its own
//! certificate authority and a serving certificate for `127.0.0.1`, `::1` and `localhost`.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::server::TlsStream;

/// Longest a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A per-sandbox certificate authority and the serving configuration it signed.
pub struct ServingCertificate {
    /// The authority's certificate in PEM: what clients trust (`certificate-authority-data`).
    pub ca_pem: String,
    config: Arc<ServerConfig>,
}

impl ServingCertificate {
    /// Makes a new authority and a loopback serving certificate signed by it.
    pub fn generate() -> std::io::Result<Self> {
        let failed = |e: rcgen::Error| std::io::Error::other(format!("certificate: {e}"));
        let ca_key = KeyPair::generate().map_err(failed)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "serin-sandbox-ca");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_certificate = ca.self_signed(&ca_key).map_err(failed)?;
        let issuer = Issuer::new(ca, ca_key);
        let names = ["127.0.0.1", "::1", "localhost"].map(String::from).to_vec();
        let mut serving = CertificateParams::new(names).map_err(failed)?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "serin-sandbox");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key = KeyPair::generate().map_err(failed)?;
        let serving_certificate = serving.signed_by(&serving_key, &issuer).map_err(failed)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(serving_key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> = vec![serving_certificate.der().clone()];
        let mut config = ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(std::io::Error::other)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServingCertificate {
            ca_pem: ca_certificate.pem(),
            config: Arc::new(config),
        })
    }
}

/// A listener handing out TLS connections; handshakes run concurrently, so a slow or broken
/// client never holds up the others.
pub struct TlsListener {
    connections: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    address: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Serves TLS with `certificate` on `listener`.
    pub fn new(listener: TcpListener, certificate: &ServingCertificate) -> std::io::Result<Self> {
        let address = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(certificate.config.clone());
        let (sender, connections) = mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            loop {
                let Ok((tcp, peer)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                    {
                        let _ = sender.send((tls, peer)).await;
                    }
                });
            }
        });
        Ok(TlsListener {
            connections,
            address,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.connections.recv().await {
            Some(connection) => connection,
            // The accepting task only ends when the listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.address)
    }
}
