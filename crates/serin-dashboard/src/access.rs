//! Who is looking and what they may do. In the cluster, every viewer is authenticated by a
//! TokenReview of their bearer token and every read and action is authorized by a
//! SubjectAccessReview as that viewer; locally, the viewer is whoever the kubeconfig names and the
//! API server judges each request as it does for kubectl.

use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// The name of the cookie that carries a signed-in viewer's session.
pub const SESSION_COOKIE: &str = "serin_session";
/// The header an action carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-serin-csrf";
/// How long a session lasts after signing in; the token itself is checked again every minute.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at once; signing in beyond it is refused until some expire.
pub const MAX_SESSIONS: usize = 10_000;
/// The longest bearer token accepted (service account tokens are about 1 KiB; OIDC ones a few).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// How long a TokenReview's answer is trusted.
const TOKEN_REVIEW_TTL: Duration = Duration::from_secs(60);
/// How long a SubjectAccessReview's answer is trusted: a revoked right stops working within it.
const ACCESS_REVIEW_TTL: Duration = Duration::from_secs(30);
/// Answers kept in each review cache; when full, the cache starts over.
const MAX_CACHED_REVIEWS: usize = 16_384;
/// Reviews asked of the API server at once: a flood of sign-ins with made-up tokens waits here
/// instead of reaching the API server.
const MAX_REVIEWS_IN_FLIGHT: usize = 16;

/// Where the dashboard runs, which decides how viewers are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// On the user's machine with their kubeconfig (`kubectl serin dashboard`): no sign-in; the
    /// API server authorizes each request as it does kubectl's.
    Local,
    /// In the cluster, shared: each viewer signs in with a Kubernetes token.
    Cluster,
}

/// How a request proved who sent it.
#[derive(Clone, Debug)]
pub enum Credential {
    /// The local dashboard's single user.
    Local,
    /// An `Authorization: Bearer` header, as an OIDC proxy or an ingress adds it.
    Bearer(String),
    /// A session made by signing in with a token.
    Session {
        /// The session's identifier (the cookie's value).
        id: String,
        /// The token signed in with.
        token: String,
    },
}

impl Credential {
    /// The bearer token the viewer's own requests to the API server carry, if any.
    pub fn token(&self) -> Option<&str> {
        match self {
            Credential::Local => None,
            Credential::Bearer(token) | Credential::Session { token, .. } => Some(token),
        }
    }

    /// What the CSRF token is bound to: never the token itself, only a digest of it.
    fn binding(&self) -> String {
        match self {
            Credential::Local => "local".into(),
            Credential::Bearer(token) => format!("bearer:{}", digest(token)),
            Credential::Session { id, .. } => format!("session:{id}"),
        }
    }
}

/// A viewer as the API server knows them.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// The user name (`system:serviceaccount:team-a:alice`, an OIDC subject, ...).
    pub user: String,
    uid: String,
    groups: Vec<String>,
    extra: std::collections::BTreeMap<String, Vec<String>>,
    /// How this request proved it.
    pub credential: Credential,
}

impl Viewer {
    fn local() -> Self {
        Viewer {
            user: "you (kubeconfig)".into(),
            uid: String::new(),
            groups: Vec::new(),
            extra: Default::default(),
            credential: Credential::Local,
        }
    }

    /// A key of who this viewer is for caching their access answers.
    fn key(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [&self.user, &self.uid]
            .into_iter()
            .chain(self.groups.iter())
        {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        for (name, values) in &self.extra {
            hasher.update(name.as_bytes());
            for value in values {
                hasher.update([1]);
                hasher.update(value.as_bytes());
            }
        }
        hex(&hasher.finalize())
    }
}

/// Why a request was not let in.
#[derive(Debug)]
pub enum Refusal {
    /// No credentials, or ones the API server does not accept.
    Unauthenticated(String),
    /// The API server could not be asked.
    Unavailable(String),
}

struct Cached<T> {
    value: T,
    until: Instant,
}

/// A bounded map of answers that expire.
struct AnswerCache<T> {
    entries: Mutex<HashMap<String, Cached<T>>>,
    ttl: Duration,
}

impl<T: Clone> AnswerCache<T> {
    fn new(ttl: Duration) -> Self {
        AnswerCache {
            entries: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    fn get(&self, key: &str) -> Option<T> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|c| c.until > Instant::now())
            .map(|c| c.value.clone())
    }

    fn put(&self, key: String, value: T) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= MAX_CACHED_REVIEWS {
            entries.clear();
        }
        let until = Instant::now() + self.ttl;
        entries.insert(key, Cached { value, until });
    }
}

struct Session {
    token: String,
    until: Instant,
}

/// Authentication, authorization, sessions and CSRF tokens.
pub struct Access {
    mode: Mode,
    /// The dashboard's own client: it asks the reviews.
    client: Client,
    /// What a viewer's own client is made from (the address and CA of the API server).
    base: Config,
    csrf_key: [u8; 32],
    sessions: Mutex<HashMap<String, Session>>,
    token_reviews: AnswerCache<Option<Viewer>>,
    access_reviews: AnswerCache<bool>,
    in_flight: tokio::sync::Semaphore,
}

impl Access {
    /// Access for a dashboard in `mode`, asking its reviews with `client`; viewers' clients are
    /// made from `base`.
    pub fn new(mode: Mode, client: Client, base: Config) -> Self {
        let mut csrf_key = [0u8; 32];
        csrf_key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        csrf_key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Access {
            mode,
            client,
            base,
            csrf_key,
            sessions: Mutex::new(HashMap::new()),
            token_reviews: AnswerCache::new(TOKEN_REVIEW_TTL),
            access_reviews: AnswerCache::new(ACCESS_REVIEW_TTL),
            in_flight: tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
        }
    }

    /// Where the dashboard runs.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The viewer behind a request: the local user, or the bearer of its `Authorization` header or
    /// session cookie, as a TokenReview names them.
    pub async fn viewer(&self, headers: &HeaderMap) -> Result<Viewer, Refusal> {
        if self.mode == Mode::Local {
            return Ok(Viewer::local());
        }
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let credential = match bearer {
            Some(token) => Credential::Bearer(token.to_string()),
            None => {
                let id = cookie(headers, SESSION_COOKIE).ok_or_else(|| {
                    Refusal::Unauthenticated("sign in with a Kubernetes token".into())
                })?;
                let token = self.session_token(&id).ok_or_else(|| {
                    Refusal::Unauthenticated("the session has ended: sign in again".into())
                })?;
                Credential::Session { id, token }
            }
        };
        self.authenticate(credential).await
    }

    /// Checks the credential's token with a TokenReview (its answer is kept for a minute); a
    /// session must also still be open.
    pub async fn authenticate(&self, credential: Credential) -> Result<Viewer, Refusal> {
        let Some(token) = credential.token() else {
            return Ok(Viewer::local());
        };
        if let Credential::Session { id, .. } = &credential
            && self.session_token(id).is_none()
        {
            return Err(Refusal::Unauthenticated(
                "the session has ended: sign in again".into(),
            ));
        }
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::Unauthenticated(format!(
                "the token is longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        let key = digest(token);
        let known = match self.token_reviews.get(&key) {
            Some(known) => known,
            None => {
                let known = self.review_token(token).await?;
                self.token_reviews.put(key, known.clone());
                known
            }
        };
        match known {
            Some(viewer) => Ok(Viewer {
                credential,
                ..viewer
            }),
            None => Err(Refusal::Unauthenticated(
                "the API server did not accept this token (TokenReview): it may have expired; sign in with a new one (kubectl create token ...)".into(),
            )),
        }
    }

    async fn review_token(&self, token: &str) -> Result<Option<Viewer>, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = self.ask(&review).await?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let user = status.user.unwrap_or_default();
        Ok(Some(Viewer {
            user: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default().into_iter().collect(),
            credential: Credential::Local,
        }))
    }

    /// Whether `viewer` may `verb` Canaries in `namespace`: a SubjectAccessReview in the cluster
    /// (kept for 30 s); always locally, where the API server judges the request itself.
    pub async fn may(&self, viewer: &Viewer, verb: &str, namespace: &str) -> Result<bool, Refusal> {
        if self.mode == Mode::Local {
            return Ok(true);
        }
        let key = format!("{}/{verb}/{namespace}", viewer.key());
        if let Some(allowed) = self.access_reviews.get(&key) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(viewer.user.clone()),
                uid: Some(viewer.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(viewer.groups.clone()),
                extra: Some(viewer.extra.clone().into_iter().collect()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_string()),
                    verb: Some(verb.to_string()),
                    group: Some(serin_api::api_group().name().to_string()),
                    resource: Some("canaries".into()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = self.ask(&review).await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        self.access_reviews.put(key, allowed);
        Ok(allowed)
    }

    /// Asks the API server a review (TokenReview, SubjectAccessReview: answered, never stored), at
    /// most [`MAX_REVIEWS_IN_FLIGHT`] at once.
    async fn ask<K>(&self, review: &K) -> Result<K, Refusal>
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        let _permit = self.in_flight.acquire().await;
        Api::<K>::all(self.client.clone())
            .create(&PostParams::default(), review)
            .await
            .map_err(|e| Refusal::Unavailable(format!("{} failed: {e}", K::kind(&()))))
    }

    /// A client that acts as the viewer: with their token in the cluster, with the kubeconfig
    /// locally.
    pub fn client_of(&self, viewer: &Viewer) -> anyhow::Result<Client> {
        let mut config = self.base.clone();
        if let Some(token) = viewer.credential.token() {
            config.auth_info = Default::default();
            let mut value = http::HeaderValue::from_str(&format!("Bearer {token}"))?;
            value.set_sensitive(true);
            config.headers.push((http::header::AUTHORIZATION, value));
        }
        config.connect_timeout = Some(Duration::from_secs(10));
        config.read_timeout = Some(Duration::from_secs(20));
        Ok(Client::try_from(config)?)
    }

    /// The CSRF token of a viewer's pages: a keyed digest of their credential, which a page of
    /// another site cannot read.
    pub fn csrf_token(&self, credential: &Credential) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.csrf_key).expect("any key length");
        mac.update(credential.binding().as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// Whether a request carries the CSRF token of its credential.
    pub fn csrf_matches(&self, credential: &Credential, headers: &HeaderMap) -> bool {
        let given = headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let expected = self.csrf_token(credential);
        given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
    }

    /// Starts a session for a token that passed its TokenReview; `None` when too many sessions
    /// are open.
    pub fn open_session(&self, token: String) -> Option<String> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sessions.retain(|_, s| s.until > now);
        if sessions.len() >= MAX_SESSIONS {
            return None;
        }
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let until = now + SESSION_LIFETIME;
        sessions.insert(id.clone(), Session { token, until });
        Some(id)
    }

    /// Ends a session.
    pub fn close_session(&self, id: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(id);
    }

    fn session_token(&self, id: &str) -> Option<String> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .get(id)
            .filter(|s| s.until > Instant::now())
            .map(|s| s.token.clone())
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

fn digest(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::COOKIE,
            "theme=dark; serin_session=abc123; x=1".parse().unwrap(),
        );
        assert_eq!(cookie(&headers, SESSION_COOKIE).as_deref(), Some("abc123"));
        assert_eq!(cookie(&headers, "missing"), None);
    }

    #[test]
    fn a_bearer_binding_names_a_digest_and_never_the_token() {
        let binding = Credential::Bearer("secret-token".into()).binding();
        assert!(!binding.contains("secret-token"));
        assert_eq!(binding, format!("bearer:{}", digest("secret-token")));
    }
}
