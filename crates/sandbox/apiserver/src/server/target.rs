//! The URL grammar of a resource request: group, version, namespace, resource, name and
//! subresource.

use super::request::*;
use crate::registry::ResourceInfo;
use crate::status::ApiError;

pub(crate) fn resolve(
    state: &AppState,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Target, ApiError> {
    let (watch_path, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let lookup = |plural: &str| {
        state
            .store
            .resource(group, version, plural)
            .ok_or_else(ApiError::unknown_path)
    };
    let namespaced_plural = |segment: &str| {
        state
            .store
            .resource(group, version, segment)
            .is_some_and(|r| r.namespaced)
    };
    let target =
        |info: ResourceInfo, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| Target {
            info,
            namespace: ns.map(String::from),
            name: name.map(String::from),
            subresource: sub.map(String::from),
            watch_path,
        };
    let t = match rest {
        ["namespaces", ns, plural, tail @ ..] if namespaced_plural(plural) => {
            let info = lookup(plural)?;
            match tail {
                [] => target(info, Some(ns), None, None),
                [name] => target(info, Some(ns), Some(name), None),
                [name, sub] => target(info, Some(ns), Some(name), Some(sub)),
                _ => return Err(ApiError::unknown_path()),
            }
        }
        [plural] => target(lookup(plural)?, None, None, None),
        [plural, name] => target(lookup(plural)?, None, Some(name), None),
        [plural, name, sub] => target(lookup(plural)?, None, Some(name), Some(sub)),
        _ => return Err(ApiError::unknown_path()),
    };
    if t.info.namespaced && t.name.is_some() && t.namespace.is_none() {
        return Err(ApiError::unknown_path());
    }
    if !t.info.namespaced && t.namespace.is_some() {
        return Err(ApiError::unknown_path());
    }
    if let Some(sub) = &t.subresource {
        let known = (sub == "status" && t.info.status_subresource)
            || (sub == "scale" && t.info.scale.is_some())
            || (sub == "token" && t.info.kind == "ServiceAccount" && t.info.group.is_empty())
            || (sub == "eviction" && t.info.kind == "Pod" && t.info.group.is_empty())
            || (sub == "ephemeralcontainers" && t.info.kind == "Pod" && t.info.group.is_empty())
            || (sub == "log" && t.info.kind == "Pod" && t.info.group.is_empty())
            || (matches!(sub.as_str(), "exec" | "attach" | "portforward")
                && t.info.kind == "Pod"
                && t.info.group.is_empty())
            || (sub == "finalize" && t.info.kind == "Namespace");
        if !known {
            return Err(ApiError::unknown_path());
        }
    }
    Ok(t)
}
