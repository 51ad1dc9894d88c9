//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl's typed clients send
//! them for `kubectl create namespace|configmap|secret|deployment|job|token ...` and `kubectl auth`.
//!
//! One generic decoder serves every built-in kind: the `k8s\0` envelope names the object's
//! `apiVersion` and `kind`, `prost-reflect` decodes the message with Kubernetes' own descriptors
//! (`proto/kubernetes.fds`), and the message becomes the JSON object the store keeps. Only the few
//! apimachinery types whose JSON form differs from their message (times, quantities, int-or-string,
//! raw JSON) are translated by hand.

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage, Value as Field,
};
use serde_json::{Map, Value, json};
use std::sync::LazyLock;

/// The media type of Kubernetes' protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every Kubernetes protobuf body starts with.
const MAGIC: &[u8; 4] = b"k8s\0";

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(include_bytes!("../proto/kubernetes.fds").as_slice())
        .expect("proto/kubernetes.fds is a valid descriptor set")
});

/// Why a protobuf body could not be read, worded for the client.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    /// The body does not start with the `k8s\0` envelope.
    #[error(
        "the body is not a Kubernetes protobuf object: it must start with the bytes \"k8s\\x00\""
    )]
    NoEnvelope,
    /// The envelope or the object in it is not valid protobuf.
    #[error("the protobuf body could not be decoded: {0}")]
    Malformed(String),
    /// The envelope names a kind without a protobuf message (custom resources are JSON only).
    #[error(
        "{api_version}, Kind={kind} has no protobuf encoding; send it as application/json (custom resources are JSON only)"
    )]
    UnknownKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
}

/// Decodes a protobuf request body into the object's JSON form, with `apiVersion` and `kind` set
/// from the envelope.
pub fn decode_object(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = body
        .strip_prefix(MAGIC.as_slice())
        .ok_or(ProtobufError::NoEnvelope)?;
    let unknown = message("apimachinery.pkg.runtime.Unknown");
    let unknown = DynamicMessage::decode(unknown, envelope)
        .map_err(|e| ProtobufError::Malformed(e.to_string()))?;
    let type_meta = unknown.get_field_by_name("typeMeta");
    let type_meta = type_meta.as_ref().and_then(|v| v.as_message());
    let text = |name: &str| {
        type_meta
            .and_then(|m| m.get_field_by_name(name))
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    };
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let raw = unknown
        .get_field_by_name("raw")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let descriptor =
        message_for(&api_version, &kind).ok_or_else(|| ProtobufError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let object = DynamicMessage::decode(descriptor, raw.as_ref())
        .map_err(|e| ProtobufError::Malformed(e.to_string()))?;
    let mut json = Map::new();
    json.insert("apiVersion".into(), Value::String(api_version));
    json.insert("kind".into(), Value::String(kind));
    if let Value::Object(fields) = to_json(&object) {
        json.extend(fields);
    }
    Ok(Value::Object(json))
}

fn message(name: &str) -> MessageDescriptor {
    POOL.get_message_by_name(name)
        .unwrap_or_else(|| panic!("{name} is in proto/kubernetes.fds"))
}

/// The message of a built-in kind: core kinds live in `api.core.<version>`, a group's kinds in the
/// package named by its first label (`rbac.authorization.k8s.io` → `api.rbac.v1`).
fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let package = match group {
        "" => "core",
        group => group.split('.').next().unwrap_or(group),
    };
    // Options kinds (DeleteOptions, ...) are meta/v1's, whatever the group they are sent to.
    [
        format!("api.{package}.{version}.{kind}"),
        format!("{package}_apiserver.pkg.apis.{package}.{version}.{kind}"),
        format!("apimachinery.pkg.apis.meta.v1.{kind}"),
    ]
    .iter()
    .find_map(|name| POOL.get_message_by_name(name))
}

fn to_json(message: &DynamicMessage) -> Value {
    let descriptor = message.descriptor();
    let full_name = descriptor.full_name();
    let field = |name: &str| message.get_field_by_name(name);
    match full_name.rsplit('.').next().unwrap_or("") {
        "Time" | "MicroTime" if full_name.starts_with("apimachinery.") => {
            let seconds = field("seconds").and_then(|v| v.as_i64()).unwrap_or(0);
            let nanos = field("nanos").and_then(|v| v.as_i32()).unwrap_or(0);
            // Go writes a zero time as `null`: the field is as good as absent.
            let Ok(at) = Timestamp::new(seconds, nanos) else {
                return Value::Null;
            };
            if seconds == 0 && nanos == 0 {
                return Value::Null;
            }
            if full_name.ends_with("MicroTime") {
                serde_json::to_value(MicroTime(at))
            } else {
                serde_json::to_value(Time(at))
            }
            .unwrap_or(Value::Null)
        }
        "Quantity" => field("string")
            .and_then(|v| v.as_str().map(|s| Value::String(s.into())))
            .unwrap_or(Value::Null),
        "IntOrString" => {
            if field("type").and_then(|v| v.as_i64()) == Some(1) {
                json!(field("strVal").and_then(|v| v.as_str().map(String::from)))
            } else {
                match field("intVal").and_then(|v| v.as_i32()).unwrap_or(0) {
                    0 => Value::Null,
                    port => json!(port),
                }
            }
        }
        "Duration" if full_name.starts_with("apimachinery.") => {
            let nanos = field("duration").and_then(|v| v.as_i64()).unwrap_or(0);
            Value::String(go_duration(nanos))
        }
        "RawExtension" | "FieldsV1" | "JSON" => {
            let raw = field("raw")
                .or_else(|| field("Raw"))
                .and_then(|v| v.as_bytes().cloned())
                .unwrap_or_default();
            serde_json::from_slice(&raw)
                .or_else(|_| decode_object(&raw).map_err(|_| ()))
                .unwrap_or(Value::Null)
        }
        "ExtraValue" => field("items")
            .map(|v| field_to_json(&v))
            .unwrap_or_else(|| json!([])),
        _ => {
            let schema_props = full_name.ends_with(".JSONSchemaProps");
            let mut object = Map::new();
            for (descriptor, value) in message.fields() {
                // Go's encoder writes every non-pointer field, so the wire carries "" and zero
                // times where the JSON form has nothing; dropping them lets defaulting see a gap.
                // Zero numbers and false stay: a pointer field set to 0 (`--replicas=0`) means it.
                let value = field_to_json(value);
                if value.is_null() || value == "" {
                    continue;
                }
                object.insert(json_name(descriptor.name(), schema_props), value);
            }
            Value::Object(object)
        }
    }
}

/// Kubernetes' proto field names are its JSON names, but for the keys JSON spells with `$` or `-`.
fn json_name(proto_name: &str, schema_props: bool) -> String {
    match proto_name {
        "ref" | "schema" if schema_props => format!("${proto_name}"),
        name if name.starts_with("xKubernetes") => {
            let mut kebab = String::from("x");
            for c in name[1..].chars() {
                if c.is_ascii_uppercase() {
                    kebab.push('-');
                }
                kebab.push(c.to_ascii_lowercase());
            }
            kebab
        }
        name => name.to_string(),
    }
}

fn field_to_json(value: &Field) -> Value {
    match value {
        Field::Bool(b) => json!(b),
        Field::I32(n) => json!(n),
        Field::I64(n) => json!(n),
        Field::U32(n) => json!(n),
        Field::U64(n) => json!(n),
        Field::F32(n) => json!(n),
        Field::F64(n) => json!(n),
        Field::String(s) => json!(s),
        Field::Bytes(bytes) => serde_json::to_value(ByteString(bytes.to_vec())).unwrap_or_default(),
        Field::EnumNumber(n) => json!(n),
        Field::Message(message) => to_json(message),
        Field::List(items) => Value::Array(items.iter().map(field_to_json).collect()),
        Field::Map(entries) => {
            let mut object: Vec<(String, Value)> = entries
                .iter()
                .map(|(key, value)| (map_key(key), field_to_json(value)))
                .collect();
            object.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(object.into_iter().collect())
        }
    }
}

fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => s.clone(),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

/// Go's `time.Duration.String()` form (`1h2m3s`, `1.5s`, `0s`), which is how metav1.Duration
/// appears in JSON.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let total = nanos.unsigned_abs();
    let (hours, rest) = (total / 3_600_000_000_000, total % 3_600_000_000_000);
    let (minutes, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let seconds = format!("{}.{:09}", rest / 1_000_000_000, rest % 1_000_000_000);
    let seconds = seconds.trim_end_matches('0').trim_end_matches('.');
    let mut out = String::from(sign);
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(seconds);
    out.push('s');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn envelope(api_version: &str, kind: &str, object: &DynamicMessage) -> Vec<u8> {
        let mut type_meta = DynamicMessage::new(message("apimachinery.pkg.runtime.TypeMeta"));
        type_meta.set_field_by_name("apiVersion", Field::String(api_version.into()));
        type_meta.set_field_by_name("kind", Field::String(kind.into()));
        let mut unknown = DynamicMessage::new(message("apimachinery.pkg.runtime.Unknown"));
        unknown.set_field_by_name("typeMeta", Field::Message(type_meta));
        unknown.set_field_by_name("raw", Field::Bytes(object.encode_to_vec().into()));
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    fn object(json: Value, name: &str) -> DynamicMessage {
        let descriptor = message(name);
        let mut message = DynamicMessage::new(descriptor.clone());
        for (key, value) in json.as_object().unwrap() {
            let field = descriptor.get_field_by_name(key).unwrap();
            let value = match (value, field.kind()) {
                (Value::Object(_), prost_reflect::Kind::Message(inner)) => {
                    Field::Message(object(value.clone(), inner.full_name()))
                }
                (Value::String(s), _) => Field::String(s.clone()),
                (Value::Number(n), prost_reflect::Kind::Int64) => Field::I64(n.as_i64().unwrap()),
                (Value::Number(n), _) => Field::I32(n.as_i64().unwrap() as i32),
                other => panic!("test helper does not build {other:?}"),
            };
            message.set_field(&field, value);
        }
        message
    }

    #[test]
    fn a_namespace_becomes_its_json_object() {
        let namespace = object(
            json!({"metadata": {"name": "team-a", "generateName": ""}}),
            "api.core.v1.Namespace",
        );
        let decoded = decode_object(&envelope("v1", "Namespace", &namespace)).unwrap();
        assert_eq!(
            decoded,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
        );
    }

    #[test]
    fn special_apimachinery_types_take_their_json_forms() {
        let mut time = DynamicMessage::new(message("apimachinery.pkg.apis.meta.v1.Time"));
        time.set_field_by_name("seconds", Field::I64(1_700_000_000));
        assert_eq!(to_json(&time), json!("2023-11-14T22:13:20Z"));
        let port = object(
            json!({"type": 1, "strVal": "http"}),
            "apimachinery.pkg.util.intstr.IntOrString",
        );
        assert_eq!(to_json(&port), json!("http"));
        let quantity = object(
            json!({"string": "250m"}),
            "apimachinery.pkg.api.resource.Quantity",
        );
        assert_eq!(to_json(&quantity), json!("250m"));
        assert_eq!(go_duration(3_723_500_000_000), "1h2m3.5s");
        assert_eq!(go_duration(90_000_000_000), "1m30s");
    }

    #[test]
    fn kinds_map_to_their_groups_messages() {
        for (api_version, kind) in [
            ("v1", "ConfigMap"),
            ("apps/v1", "Deployment"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("authentication.k8s.io/v1", "TokenRequest"),
            ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
            ("batch/v1", "Job"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("v1", "DeleteOptions"),
            ("policy/v1", "Eviction"),
        ] {
            assert!(
                message_for(api_version, kind).is_some(),
                "{api_version} {kind}"
            );
        }
        let missing = envelope(
            "flagger.app/v1beta1",
            "Canary",
            &object(json!({}), "api.core.v1.Namespace"),
        );
        assert!(matches!(
            decode_object(&missing),
            Err(ProtobufError::UnknownKind { .. })
        ));
        assert!(matches!(
            decode_object(b"{}"),
            Err(ProtobufError::NoEnvelope)
        ));
    }
}
