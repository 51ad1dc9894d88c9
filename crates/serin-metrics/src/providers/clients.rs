//! What the metric providers keep between checks, shared by every template.

use crate::transport::{CONNECT_TIMEOUT, QUERY_TIMEOUT, causes};

/// What the providers keep between checks: two HTTP clients (one that checks certificates and one
/// that does not, for `insecureSkipVerify`), each keeping its connections; the operator's AWS
/// credentials and Google tokens; and the operator's Kubernetes client, for Keptn.
#[derive(Default)]
pub struct ProviderClients {
    verified: std::sync::OnceLock<reqwest::Client>,
    insecure: std::sync::OnceLock<reqwest::Client>,
    operator_aws: crate::providers::aws::OperatorCredentials,
    kubernetes: std::sync::OnceLock<kube::Client>,
    google: crate::providers::stackdriver::GoogleTokens,
}

impl ProviderClients {
    /// The Google tokens of Cloud Monitoring templates.
    pub fn google(&self) -> &crate::providers::stackdriver::GoogleTokens {
        &self.google
    }

    /// Reads Keptn's objects through `client` (the operator's); the first client given stays.
    pub fn use_kubernetes(&self, client: kube::Client) {
        let _ = self.kubernetes.set(client);
    }

    /// The operator's Kubernetes client, once given.
    pub fn kubernetes(&self) -> Option<&kube::Client> {
        self.kubernetes.get()
    }

    /// The operator's own AWS credentials, for CloudWatch templates without keys of their own.
    pub fn operator_aws(&self) -> &crate::providers::aws::OperatorCredentials {
        &self.operator_aws
    }

    /// The client for a template with `insecure_skip_verify`; `Err` says why none can be built
    /// (the TLS backend would not start).
    pub fn client(&self, insecure_skip_verify: bool) -> Result<reqwest::Client, String> {
        let cell = if insecure_skip_verify {
            &self.insecure
        } else {
            &self.verified
        };
        if let Some(client) = cell.get() {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            // A redirect could carry the template's credentials to another host.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(QUERY_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .danger_accept_invalid_certs(insecure_skip_verify)
            .build()
            .map_err(|e| format!("no HTTP client: {}", causes(&e)))?;
        Ok(cell.get_or_init(|| client).clone())
    }
}
