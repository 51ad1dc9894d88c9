//! Objects watched for a [`crate::json_store::JsonStore`], read as the API server sent them.
//!
//! Decoding every watch event of a Deployment into k8s-openapi's types, only to encode it back to
//! JSON for the cache, was the largest single source of the operator's allocations while releases
//! progress. A [`RawObject`] decodes the metadata alone (what the triggers and the watch itself
//! read) and keeps the rest as the text that arrived.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// An object of the kind `K`: its metadata decoded (without managedFields) and the whole object as
/// JSON text, with the same metadata, `apiVersion` and `kind`, so that it decodes as `K`.
pub struct RawObject<K> {
    /// The object's metadata, managedFields dropped.
    pub metadata: ObjectMeta,
    text: Arc<[u8]>,
    kind: PhantomData<fn() -> K>,
}

impl<K> RawObject<K> {
    /// The object as JSON text.
    pub fn text(&self) -> &Arc<[u8]> {
        &self.text
    }
}

impl<K> Clone for RawObject<K> {
    fn clone(&self) -> Self {
        RawObject {
            metadata: self.metadata.clone(),
            text: self.text.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for RawObject<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawObject")
            .field("namespace", &self.metadata.namespace)
            .field("name", &self.metadata.name)
            .field("bytes", &self.text.len())
            .finish()
    }
}

impl<K: Resource<DynamicType = ()>> Resource for RawObject<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de, K: Resource<DynamicType = ()>> serde::Deserialize<'de> for RawObject<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Object { fields, metadata } = deserializer.deserialize_map(ObjectFields)?;
        // managedFields are skipped as text: decoding their field sets is most of a
        // metadata's cost, and nothing reads them.
        let metadata_text = match metadata {
            Some(metadata_fields) => {
                let mut slim = Vec::with_capacity(
                    metadata_fields.iter().map(|(_, v)| v.get().len() + 8).sum(),
                );
                slim.push(b'{');
                for (key, value) in metadata_fields
                    .iter()
                    .filter(|(key, _)| *key != "managedFields")
                {
                    if slim.len() > 1 {
                        slim.push(b',');
                    }
                    serde_json::to_writer(&mut slim, key).map_err(D::Error::custom)?;
                    slim.push(b':');
                    slim.extend_from_slice(value.get().as_bytes());
                }
                slim.push(b'}');
                slim
            }
            None => b"{}".to_vec(),
        };
        let metadata =
            serde_json::from_slice::<ObjectMeta>(&metadata_text).map_err(D::Error::custom)?;
        let mut text = Vec::with_capacity(
            metadata_text.len()
                + fields
                    .iter()
                    .map(|(_, value)| match value {
                        Field::Text(text) => text.get().len() + 16,
                        Field::Metadata => 16,
                    })
                    .sum::<usize>(),
        );
        text.push(b'{');
        // List items come without apiVersion and kind; the cache's readers decode them as `K`.
        for (key, value) in [("apiVersion", K::api_version(&())), ("kind", K::kind(&()))] {
            if !fields.iter().any(|(field, _)| *field == key) {
                serde_json::to_writer(&mut text, key).map_err(D::Error::custom)?;
                text.push(b':');
                serde_json::to_writer(&mut text, &value).map_err(D::Error::custom)?;
                text.push(b',');
            }
        }
        for (index, (key, value)) in fields.iter().enumerate() {
            if index > 0 {
                text.push(b',');
            }
            serde_json::to_writer(&mut text, key).map_err(D::Error::custom)?;
            text.push(b':');
            match value {
                Field::Text(value) => text.extend_from_slice(value.get().as_bytes()),
                Field::Metadata => text.extend_from_slice(&metadata_text),
            }
        }
        text.push(b'}');
        Ok(RawObject {
            metadata,
            text: text.into(),
            kind: PhantomData,
        })
    }
}

/// Fields of a JSON object in their order, each value as its text, borrowed from the text read:
/// the API client reads each watch event and each list from a string it holds.
type RawFields<'de> = Vec<(&'de str, &'de RawValue)>;

/// An object's fields in their order, and the fields of its metadata, read in the same pass.
struct Object<'de> {
    fields: Vec<(&'de str, Field<'de>)>,
    metadata: Option<RawFields<'de>>,
}

/// The value of one of an object's fields.
enum Field<'de> {
    /// As its text.
    Text(&'de RawValue),
    /// The metadata, kept apart in [`Object::metadata`].
    Metadata,
}

struct ObjectFields;

impl<'de> Visitor<'de> for ObjectFields {
    type Value = Object<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = Object {
            fields: Vec::with_capacity(map.size_hint().unwrap_or(5)),
            metadata: None,
        };
        while let Some(key) = map.next_key::<&'de str>()? {
            let value = if key == "metadata" {
                object.metadata = Some(map.next_value::<MetadataFields<'de>>()?.0);
                Field::Metadata
            } else {
                Field::Text(map.next_value()?)
            };
            object.fields.push((key, value));
        }
        Ok(object)
    }
}

/// The fields of an object's metadata (see [`RawFields`]).
struct MetadataFields<'de>(RawFields<'de>);

impl<'de> serde::Deserialize<'de> for MetadataFields<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;

        impl<'de> Visitor<'de> for Fields {
            type Value = RawFields<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object's metadata")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(12));
                while let Some(key) = map.next_key::<&'de str>()? {
                    fields.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(fields)
            }
        }

        deserializer.deserialize_map(Fields).map(MetadataFields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::core::ObjectList;
    use kube::core::WatchEvent;
    use serde_json::json;

    fn deployment() -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "podinfo",
                "namespace": "test",
                "generation": 3,
                "resourceVersion": "41",
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
            },
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "podinfo"}},
                     "template": {"spec": {"containers": [{"name": "podinfod", "image": "podinfo:6.0.1"}]}}},
            "status": {"observedGeneration": 3, "availableReplicas": 2},
        })
    }

    #[test]
    fn a_watch_event_keeps_the_object_as_sent_without_its_managed_fields() {
        let line = json!({"type": "MODIFIED", "object": deployment()}).to_string();
        let WatchEvent::Modified(raw) =
            serde_json::from_str::<WatchEvent<RawObject<Deployment>>>(&line).unwrap()
        else {
            panic!("a MODIFIED event");
        };
        assert_eq!(raw.metadata.name.as_deref(), Some("podinfo"));
        assert_eq!(raw.metadata.generation, Some(3));
        assert_eq!(raw.metadata.resource_version.as_deref(), Some("41"));
        assert_eq!(raw.metadata.managed_fields, None);
        let mut expected: Deployment = serde_json::from_value(deployment()).unwrap();
        expected.metadata.managed_fields = None;
        let decoded: Deployment = serde_json::from_slice(raw.text()).unwrap();
        assert_eq!(decoded, expected);
        assert!(!String::from_utf8_lossy(raw.text()).contains("managedFields"));
    }

    #[test]
    fn list_items_without_api_version_and_kind_get_them() {
        let mut item = deployment();
        let fields = item.as_object_mut().unwrap();
        fields.remove("apiVersion");
        fields.remove("kind");
        let list = json!({"apiVersion": "apps/v1", "kind": "DeploymentList",
                          "metadata": {"resourceVersion": "50"}, "items": [item]});
        // The object's text is kept as it arrived, which needs the text itself to read from.
        let list: ObjectList<RawObject<Deployment>> =
            serde_json::from_str(&list.to_string()).unwrap();
        let text: serde_json::Value = serde_json::from_slice(list.items[0].text()).unwrap();
        assert_eq!(text["apiVersion"], "apps/v1");
        assert_eq!(text["kind"], "Deployment");
        assert_eq!(text["spec"]["replicas"], 2);
        assert!(serde_json::from_slice::<Deployment>(list.items[0].text()).is_ok());
    }

    #[test]
    fn the_fields_keep_their_order_with_the_metadata_where_it_came() {
        let line = r#"{"kind":"Deployment","spec":{"replicas":1},"metadata":{"name":"a","managedFields":[{"manager":"x"}],"uid":"u"},"apiVersion":"apps/v1","status":{}}"#;
        let raw: RawObject<Deployment> = serde_json::from_str(line).unwrap();
        assert_eq!(
            String::from_utf8_lossy(raw.text()),
            r#"{"kind":"Deployment","spec":{"replicas":1},"metadata":{"name":"a","uid":"u"},"apiVersion":"apps/v1","status":{}}"#
        );
        let first = r#"{"metadata":{"name":"b"},"spec":{}}"#;
        let raw: RawObject<Deployment> = serde_json::from_str(first).unwrap();
        assert_eq!(
            String::from_utf8_lossy(raw.text()),
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"b"},"spec":{}}"#
        );
        assert_eq!(raw.metadata.name.as_deref(), Some("b"));
    }
}
