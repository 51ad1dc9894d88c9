//! AWS credentials and request signing for CloudWatch: the keys of the template's Secret when it
//! has them, else the operator's own identity found as the AWS SDKs find it (environment, profile
//! files, a web identity token file as IRSA mounts it, the container or instance metadata),
//! kept until shortly before it expires. Requests are signed with SigV4 by the official crate.

use super::Failure;
use super::http::ProviderRequest;
use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How long finding the operator's credentials may take (a web identity exchange included).
pub const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(5);

/// The most regions whose credential chains are kept; templates name regions, so this bounds what
/// they can make the operator keep.
pub const MAX_REGIONS: usize = 32;

/// Credentials are fetched again this long before they expire.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);

/// The operator's credential chain of each region, with the credentials it last found.
#[derive(Default)]
pub struct OperatorCredentials {
    regions: Mutex<HashMap<String, Arc<RegionChain>>>,
}

#[derive(Default)]
struct RegionChain {
    chain: tokio::sync::OnceCell<DefaultCredentialsChain>,
    found: tokio::sync::Mutex<Option<Credentials>>,
}

impl OperatorCredentials {
    /// The operator's credentials for `region`, from the cache while they are fresh.
    pub async fn for_region(&self, region: &str) -> Result<Credentials, Failure> {
        let entry = {
            let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
            if !regions.contains_key(region) && regions.len() >= MAX_REGIONS {
                return Err(Failure::Setting(format!(
                    "the operator already keeps credentials for {MAX_REGIONS} AWS regions; use one of those regions"
                )));
            }
            regions.entry(region.to_string()).or_default().clone()
        };
        let mut found = entry.found.lock().await;
        if let Some(credentials) = found.as_ref()
            && credentials
                .expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE_EXPIRY)
        {
            return Ok(credentials.clone());
        }
        let chain = entry
            .chain
            .get_or_init(|| {
                DefaultCredentialsChain::builder()
                    .region(aws_config::Region::new(region.to_string()))
                    .build()
            })
            .await;
        let credentials = tokio::time::timeout(CREDENTIALS_TIMEOUT, chain.provide_credentials())
            .await
            .map_err(|_| {
                Failure::Transport(format!(
                    "the operator's AWS credentials were not found within {CREDENTIALS_TIMEOUT:?}"
                ))
            })?
            .map_err(|e| {
                Failure::Setting(format!(
                    "the operator has no AWS credentials: give its ServiceAccount an IAM role (IRSA or EKS Pod Identity), or put aws_access_key_id and aws_secret_access_key in the template's Secret ({})",
                    crate::transport::causes(&e)
                ))
            })?;
        *found = Some(credentials.clone());
        Ok(credentials)
    }
}

/// The credentials in a template's Secret: `aws_access_key_id` and `aws_secret_access_key`, and
/// `aws_session_token` if there is one.
pub fn from_secret(credentials: &super::Credentials) -> Result<Credentials, Failure> {
    Ok(Credentials::new(
        credentials.required("aws_access_key_id")?,
        credentials.required("aws_secret_access_key")?,
        credentials
            .optional("aws_session_token")
            .map(str::to_string),
        None,
        "metric-template-secret",
    ))
}

/// Signs `request` for `service` in `region` at `time`: the signature and the session token go
/// in its secret headers.
pub fn sign_request(
    request: &mut ProviderRequest,
    credentials: Credentials,
    (service, region): (&str, &str),
    time: SystemTime,
) -> Result<(), Failure> {
    let identity = credentials.into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| Failure::Setting(format!("the request cannot be signed: {e}")))?
        .into();
    let body = request.body.as_deref().unwrap_or_default().as_bytes();
    let signable = SignableRequest::new(
        request.method.as_str(),
        request.url.as_str(),
        request
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str())),
        SignableBody::Bytes(body),
    )
    .map_err(|e| Failure::Setting(format!("the request cannot be signed: {e}")))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| Failure::Setting(format!("the request cannot be signed: {e}")))?
        .into_parts();
    for (name, value) in instructions.headers() {
        request
            .secret_headers
            .push((name.to_string(), value.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_and_token_go_in_secret_headers() {
        let mut request = super::super::cloudwatch::request(
            Some("http://127.0.0.1:4566"),
            "us-east-1",
            r#"[{"Id": "m1", "Expression": "1"}]"#,
            Duration::from_secs(60),
            1_700_000_000,
        )
        .unwrap();
        let keys = super::super::Credentials::new(
            "aws",
            [
                ("aws_access_key_id", "AKIDEXAMPLE"),
                (
                    "aws_secret_access_key",
                    "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                ),
                ("aws_session_token", "t0ken"),
            ],
        );
        sign_request(
            &mut request,
            from_secret(&keys).unwrap(),
            ("monitoring", "us-east-1"),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        )
        .unwrap();
        let names: Vec<&str> = request
            .secret_headers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert!(names.contains(&"authorization"), "{names:?}");
        assert!(names.contains(&"x-amz-date"), "{names:?}");
        assert!(names.contains(&"x-amz-security-token"), "{names:?}");
        let authorization =
            &request.secret_headers[names.iter().position(|n| *n == "authorization").unwrap()].1;
        assert!(
            authorization.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20231114/us-east-1/monitoring/aws4_request"
            ),
            "{authorization}"
        );
        assert!(request.headers.iter().all(|(_, v)| !v.contains("wJalr")));
        let missing = super::super::Credentials::new("aws", [("aws_access_key_id", "AKID")]);
        assert_eq!(
            from_secret(&missing).unwrap_err(),
            Failure::Setting("the Secret aws has no aws_secret_access_key key".into())
        );
    }
}
