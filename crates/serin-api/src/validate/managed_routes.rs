//! The checks of managed routes: `analysis.managedRoutes` and the `setHeaderRoute` and
//! `setMirrorRoute` steps that name them, for the routers that can build them.

use super::report::Report;
use crate::mesh::StringMatch;
use crate::{CanaryAnalysis, CanarySpec};
use std::collections::HashSet;

/// Most managed routes a Canary may list (each becomes one rule of its routing object).
pub const MAX_MANAGED_ROUTES: usize = 8;

pub(super) fn validate_managed_routes(
    spec: &CanarySpec,
    a: &CanaryAnalysis,
    base: &str,
    r: &mut Report,
) {
    let routes = a.managed_routes.as_deref().unwrap_or_default();
    let mut names = HashSet::new();
    for (i, route) in routes.iter().enumerate() {
        let path = format!("{base}.managedRoutes[{i}].name");
        if route.name.is_empty() {
            r.add(path, "missing; name the route, e.g. testers");
        } else if !names.insert(route.name.as_str()) {
            r.add(
                path,
                format!("duplicate route {:?}; list each route once", route.name),
            );
        }
    }
    if routes.len() > MAX_MANAGED_ROUTES {
        r.add(
            format!("{base}.managedRoutes"),
            format!(
                "{} routes; a Canary manages at most {MAX_MANAGED_ROUTES}",
                routes.len()
            ),
        );
    }
    let provider = spec.provider.as_deref().unwrap_or("istio");
    let gateway_api = provider.starts_with("gatewayapi");
    let routed = provider == "istio" || gateway_api;
    if !routes.is_empty() && !routed {
        r.add(
            format!("{base}.managedRoutes"),
            format!("the {provider} provider routes by pods and cannot add routes; remove managedRoutes and the setHeaderRoute/setMirrorRoute steps, or use provider: istio or gatewayapi:v1"),
        );
    }
    let named = |r: &mut Report, path: String, name: &str| {
        if !names.contains(name) {
            r.add(
                path,
                format!("{name:?} is not in {base}.managedRoutes; add {{name: {name}}} there (its place sets its precedence)"),
            );
        }
    };
    let value_match = |r: &mut Report, path: String, m: &StringMatch| {
        r.string_match(&path, m);
        if m.suffix.is_some() {
            r.add(
                path.clone(),
                "suffix is not a route match; use exact, prefix or regex",
            );
        }
        if gateway_api && m.prefix.is_some() {
            r.add(path, "the Gateway API matches headers and methods with exact or regex only; write regex: \"^value.*\" instead of prefix");
        }
    };
    for (i, step) in a.steps().iter().enumerate() {
        let sp = format!("{base}.steps[{i}]");
        if let Some(header) = &step.set_header_route {
            named(r, format!("{sp}.setHeaderRoute.name"), &header.name);
            for (j, m) in header.r#match.iter().flatten().enumerate() {
                let mp = format!("{sp}.setHeaderRoute.match[{j}]");
                if m.header_name.is_empty() {
                    r.add(
                        format!("{mp}.headerName"),
                        "missing; name the header, e.g. x-canary",
                    );
                }
                value_match(r, format!("{mp}.headerValue"), &m.header_value);
            }
        }
        if let Some(mirror) = &step.set_mirror_route {
            named(r, format!("{sp}.setMirrorRoute.name"), &mirror.name);
            r.range(
                &format!("{sp}.setMirrorRoute.percentage"),
                mirror.percentage,
                0,
                100,
                "50",
            );
            for (j, m) in mirror.r#match.iter().flatten().enumerate() {
                let mp = format!("{sp}.setMirrorRoute.match[{j}]");
                if m.method.is_none()
                    && m.path.is_none()
                    && m.headers.as_ref().is_none_or(|h| h.is_empty())
                {
                    r.add(
                        mp.clone(),
                        "empty condition; set method, path or headers, e.g. {method: {exact: GET}}",
                    );
                }
                if let Some(method) = &m.method {
                    value_match(r, format!("{mp}.method"), method);
                }
                if let Some(path) = &m.path {
                    r.string_match(&format!("{mp}.path"), path);
                }
                for (name, value) in m.headers.iter().flatten() {
                    value_match(r, format!("{mp}.headers.{name}"), value);
                }
            }
        }
    }
}
