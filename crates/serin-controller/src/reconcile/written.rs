//! Writes whose answers are read for what the operator needs of them: the written object's name,
//! version and generation (and a Canary's status), not the whole object with its managedFields.

use kube::core::{Request, params::Patch, params::PatchParams, params::PostParams};
use kube::{Client, Resource};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The written object as the API server answered, `S` being what is read of its status.
#[derive(Debug, Default, Deserialize)]
#[serde(bound = "S: Deserialize<'de> + Default")]
pub(super) struct Written<S = serde::de::IgnoredAny> {
    /// Its metadata, as far as it is read.
    #[serde(default)]
    pub metadata: WrittenMetadata,
    /// Its status, as far as `S` reads it.
    #[serde(default)]
    pub status: S,
}

/// The metadata of a written object that the operator reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WrittenMetadata {
    /// The object's name (the API server's, for a generated one).
    pub name: Option<String>,
    /// The version the write made.
    pub resource_version: Option<String>,
    /// The generation after the write.
    pub generation: Option<i64>,
}

/// Where the objects of `K` are, for `dt`, in `namespace`.
pub(super) fn request<K: Resource>(dt: &K::DynamicType, namespace: &str) -> Request {
    Request::new(K::url_path(dt, Some(namespace)))
}

/// Merge-, JSON- or apply-patches the object `name` (or its `subresource`) and reads the answer.
pub(super) async fn patch<S: DeserializeOwned + Default, P: serde::Serialize + std::fmt::Debug>(
    client: &Client,
    at: &Request,
    name: &str,
    subresource: Option<&str>,
    params: &PatchParams,
    patch: &Patch<P>,
) -> Result<Written<S>, kube::Error> {
    let mut request = match subresource {
        Some(subresource) => at.patch_subresource(subresource, name, params, patch),
        None => at.patch(name, params, patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("patch");
    send(client, request).await
}

/// Creates an object from `body` and reads the answer.
pub(super) async fn create<T: serde::Serialize>(
    client: &Client,
    at: &Request,
    body: &T,
) -> Result<Written, kube::Error> {
    let body = serde_json::to_vec(body).map_err(kube::Error::SerdeError)?;
    let mut request = at
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("create");
    send(client, request).await
}

async fn send<S: DeserializeOwned + Default>(
    client: &Client,
    request: http::Request<Vec<u8>>,
) -> Result<Written<S>, kube::Error> {
    let text = client.request_text(request).await?;
    serde_json::from_str(&text).map_err(kube::Error::SerdeError)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_is_read_for_its_versions_and_the_status_asked_for() {
        let answer = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "podinfo", "namespace": "test", "resourceVersion": "42",
                         "generation": 3,
                         "managedFields": [{"manager": "serin", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"replicas": 2},
            "status": {"phase": "Progressing", "canaryWeight": 10},
        })
        .to_string();
        let written: Written = serde_json::from_str(&answer).unwrap();
        assert_eq!(written.metadata.name.as_deref(), Some("podinfo"));
        assert_eq!(written.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(written.metadata.generation, Some(3));
        let with_status: Written<serin_api::CanaryStatus> = serde_json::from_str(&answer).unwrap();
        assert_eq!(with_status.status.canary_weight, 10);
        let empty: Written = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.metadata.resource_version, None);
    }
}
