//! What the API server creates at start and keeps up: the bootstrap roles and bindings, aggregated
//! ClusterRoles, and each namespace's default ServiceAccount.

use super::identity::*;
use super::rbac::*;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Store, WriteOptions};
use serde_json::{Value, json};
use std::sync::Arc;

/// Recomputes the rules of every ClusterRole with an `aggregationRule` from the ClusterRoles its
/// selectors match, as Kubernetes' clusterrole-aggregation controller does. Returns whether any
/// role changed.
pub fn aggregate_cluster_roles(store: &Store) -> bool {
    let info = rbac(store, "clusterroles");
    let mut changed = false;
    // Aggregated roles may feed others (view → edit → admin): settle in a few passes.
    for _ in 0..4 {
        let roles = list(store, "clusterroles", None);
        let mut pass_changed = false;
        for role in roles.iter().filter(|r| r["aggregationRule"].is_object()) {
            let mut rules: Vec<Value> = Vec::new();
            for selector in role["aggregationRule"]["clusterRoleSelectors"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let Ok(selector) = LabelSelector::from_json(selector) else {
                    continue;
                };
                for source in roles
                    .iter()
                    .filter(|r| r["metadata"]["name"] != role["metadata"]["name"])
                    .filter(|r| selector.matches(r))
                {
                    for rule in source["rules"].as_array().into_iter().flatten() {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
            }
            if role["rules"].as_array().map(Vec::as_slice).unwrap_or(&[]) == rules.as_slice() {
                continue;
            }
            let mut updated = role.clone();
            updated["rules"] = Value::Array(rules);
            let name = role["metadata"]["name"].as_str().unwrap_or_default();
            if store
                .update(
                    &info,
                    "",
                    name,
                    updated,
                    crate::store::Part::Main,
                    &WriteOptions::by("clusterrole-aggregation-controller"),
                )
                .is_ok()
            {
                pass_changed = true;
            }
        }
        changed |= pass_changed;
        if !pass_changed {
            break;
        }
    }
    changed
}

/// Gives every namespace its `default` ServiceAccount, as the serviceaccounts controller does.
pub fn ensure_default_service_account(store: &Store, namespace: &Value) {
    let Some(name) = namespace["metadata"]["name"].as_str() else {
        return;
    };
    if namespace["metadata"]["deletionTimestamp"].is_string() {
        return;
    }
    let accounts = store
        .resource("", "v1", "serviceaccounts")
        .expect("built in");
    if store.get(&accounts, name, "default").is_err() {
        // AlreadyExists (a race with a client) and a namespace deleted meanwhile are both fine.
        let _ = store.create(
            &accounts,
            Some(name),
            json!({"metadata": {"name": "default"}}),
            &WriteOptions::by("kube-controller-manager"),
        );
    }
}

/// Runs the identity controllers in the background: ClusterRole aggregation and the `default`
/// ServiceAccount of every namespace.
pub fn spawn_controllers(store: Arc<Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut changes = store.subscribe();
        let namespaces = store.resource("", "v1", "namespaces").expect("built in");
        let cluster_roles = format!("clusterroles.{RBAC_GROUP}");
        let (existing, _) = store.list(
            &namespaces,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        for namespace in &existing {
            ensure_default_service_account(&store, namespace);
        }
        aggregate_cluster_roles(&store);
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    aggregate_cluster_roles(&store);
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if change.resource == cluster_roles {
                aggregate_cluster_roles(&store);
            } else if change.resource == "namespaces"
                || (change.resource == "serviceaccounts"
                    && change.change == crate::store::ChangeType::Deleted)
            {
                // A deleted `default` account comes back, as on a cluster.
                let namespace = match change.resource.as_str() {
                    "namespaces" => Some(Value::clone(&change.object)),
                    _ => change.object["metadata"]["namespace"]
                        .as_str()
                        .and_then(|ns| store.get(&namespaces, "", ns).ok()),
                };
                if let Some(namespace) = namespace {
                    ensure_default_service_account(&store, &namespace);
                }
            }
        }
    })
}

pub(crate) fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

pub(crate) const READ: &[&str] = &["get", "list", "watch"];
pub(crate) const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

/// The bootstrap roles and bindings every cluster starts with: `cluster-admin` for
/// `system:masters`, the aggregated `admin`, `edit` and `view` roles, self-review rights for every
/// authenticated user, and discovery, OpenAPI, version and health for everyone, anonymous included.
pub fn bootstrap(store: &Store) {
    let workloads: &[&str] = &[
        "deployments",
        "deployments/scale",
        "deployments/status",
        "replicasets",
        "replicasets/scale",
        "replicasets/status",
        "daemonsets",
        "daemonsets/status",
        "statefulsets",
        "statefulsets/scale",
    ];
    let core_read: &[&str] = &[
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "pods",
        "pods/log",
        "pods/status",
        "replicationcontrollers",
        "serviceaccounts",
        "services",
        "services/status",
        "events",
        "limitranges",
        "resourcequotas",
        "namespaces",
        "namespaces/status",
    ];
    let core_write: &[&str] = &[
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "pods",
        "pods/attach",
        "pods/exec",
        "pods/portforward",
        "pods/proxy",
        "replicationcontrollers",
        "secrets",
        "serviceaccounts",
        "services",
        "services/proxy",
    ];
    let batch: &[&str] = &["jobs", "cronjobs", "jobs/status", "cronjobs/status"];
    let aggregate = |to: &str| json!({(format!("{AGGREGATE_LABEL}{to}")): "true"});
    let cluster_roles = vec![
        json!({"metadata": {"name": "cluster-admin"}, "rules": [
            rule(&["*"], &["*"], &["*"]),
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ]}),
        json!({"metadata": {"name": "system:discovery"}, "rules": [
            {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]},
        ]}),
        json!({"metadata": {"name": "system:public-info-viewer"}, "rules": [
            {"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]},
        ]}),
        json!({"metadata": {"name": "system:basic-user"}, "rules": [
            rule(&["authorization.k8s.io"], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"], &["create"]),
            rule(&["authentication.k8s.io"], &["selfsubjectreviews"], &["create"]),
        ]}),
        json!({"metadata": {"name": "admin", "labels": {}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": aggregate("admin")}]}}),
        json!({"metadata": {"name": "edit", "labels": aggregate("admin")},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": aggregate("edit")}]}}),
        json!({"metadata": {"name": "view", "labels": aggregate("edit")},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": aggregate("view")}]}}),
        json!({"metadata": {"name": "system:aggregate-to-view", "labels": aggregate("view")}, "rules": [
            rule(&[""], core_read, READ),
            rule(&["apps"], workloads, READ),
            rule(&["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"], READ),
            rule(&["batch"], batch, READ),
            rule(&["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"], READ),
            rule(&["networking.k8s.io"], &["ingresses", "ingresses/status", "networkpolicies"], READ),
            rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        ]}),
        json!({"metadata": {"name": "system:aggregate-to-edit", "labels": aggregate("edit")}, "rules": [
            rule(&[""], core_write, WRITE),
            rule(&[""], &["secrets"], READ),
            rule(&[""], &["serviceaccounts"], &["impersonate"]),
            rule(&[""], &["serviceaccounts/token"], &["create"]),
            rule(&["apps"], workloads, WRITE),
            rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
            rule(&["batch"], &["jobs", "cronjobs"], WRITE),
            rule(&["policy"], &["poddisruptionbudgets"], WRITE),
            rule(&["networking.k8s.io"], &["ingresses", "networkpolicies"], WRITE),
            rule(&["coordination.k8s.io"], &["leases"], &["get", "list", "watch", "create", "delete", "deletecollection", "patch", "update"]),
        ]}),
        json!({"metadata": {"name": "system:aggregate-to-admin", "labels": aggregate("admin")}, "rules": [
            rule(&["authorization.k8s.io"], &["localsubjectaccessreviews"], &["create"]),
            rule(&[RBAC_GROUP], &["rolebindings", "roles"], &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]),
        ]}),
    ];
    let bind = |name: &str, groups: &[&str]| {
        json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": groups.iter().map(|g| json!({"apiGroup": RBAC_GROUP, "kind": "Group", "name": g})).collect::<Vec<_>>()})
    };
    let bindings = vec![
        bind("cluster-admin", &[MASTERS]),
        // Anonymous discovery is what clusters before 1.14 bound by default (later ones bind it
        // to authenticated users only): unauthenticated tools may discover what the sandbox serves.
        bind("system:discovery", &[AUTHENTICATED, UNAUTHENTICATED]),
        bind("system:basic-user", &[AUTHENTICATED]),
        bind(
            "system:public-info-viewer",
            &[AUTHENTICATED, UNAUTHENTICATED],
        ),
    ];
    let by = WriteOptions::by("kube-apiserver");
    for (plural, objects) in [
        ("clusterroles", cluster_roles),
        ("clusterrolebindings", bindings),
    ] {
        let info = rbac(store, plural);
        for mut object in objects {
            object["metadata"]["labels"]["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
            object["metadata"]["annotations"] =
                json!({"rbac.authorization.kubernetes.io/autoupdate": "true"});
            store
                .create(&info, None, object, &by)
                .expect("bootstrap RBAC objects are valid");
        }
    }
    aggregate_cluster_roles(store);
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    fn resource(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Request {
        Request::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: "team-a".into(),
            name: name.into(),
        }
    }

    #[test]
    fn rules_match_as_rbac_matches_them() {
        let pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]});
        assert!(rule_allows(&pods, &resource("get", "", "pods", "", "p")));
        assert!(!rule_allows(
            &pods,
            &resource("delete", "", "pods", "", "p")
        ));
        // A resource rule does not cover the resource's subresources...
        assert!(!rule_allows(
            &pods,
            &resource("get", "", "pods", "log", "p")
        ));
        // ...but `*/log` and `*` do.
        let logs = json!({"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]});
        assert!(rule_allows(&logs, &resource("get", "", "pods", "log", "p")));
        let everything = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        assert!(rule_allows(
            &everything,
            &resource("patch", "apps", "deployments", "scale", "d")
        ));
        let named = json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["settings"]});
        assert!(rule_allows(
            &named,
            &resource("get", "", "configmaps", "", "settings")
        ));
        assert!(!rule_allows(
            &named,
            &resource("get", "", "configmaps", "", "other")
        ));
        assert!(!rule_allows(
            &named,
            &resource("get", "apps", "configmaps", "", "settings")
        ));
        let urls = json!({"nonResourceURLs": ["/healthz", "/apis/*"], "verbs": ["get"]});
        let path = |p: &str| Request::NonResource {
            verb: "get".into(),
            path: p.into(),
        };
        assert!(rule_allows(&urls, &path("/healthz")));
        assert!(rule_allows(&urls, &path("/apis/apps/v1")));
        assert!(!rule_allows(&urls, &path("/metrics")));
    }

    #[test]
    fn denials_read_as_the_api_servers() {
        let robot = Identity::service_account("team-a", "robot", "u");
        let error = forbidden(&robot, &resource("list", "", "pods", "", ""));
        assert_eq!(error.code, 403);
        assert_eq!(
            error.message,
            "pods is forbidden: User \"system:serviceaccount:team-a:robot\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-a\""
        );
        let error = forbidden(
            &robot,
            &resource("patch", "apps", "deployments", "scale", "web"),
        );
        assert_eq!(
            error.message,
            "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:team-a:robot\" cannot patch resource \"deployments/scale\" in API group \"apps\" in the namespace \"team-a\""
        );
        let error = forbidden(
            &robot,
            &Request::NonResource {
                verb: "get".into(),
                path: "/metrics".into(),
            },
        );
        assert_eq!(
            error.message,
            "forbidden: User \"system:serviceaccount:team-a:robot\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn requests_without_credentials_are_the_admin_or_anonymous_by_address() {
        let store = Store::new();
        bootstrap(&store);
        let auth = Auth::default();
        let none = HeaderMap::new();
        let admin = auth
            .authenticate(&store, &none, Unauthenticated::Admin)
            .unwrap();
        assert!(admin.is_admin());
        let anonymous = auth
            .authenticate(&store, &none, Unauthenticated::Anonymous)
            .unwrap();
        assert_eq!(anonymous, Identity::anonymous());
        let mut with_admin_token = HeaderMap::new();
        with_admin_token.insert(
            axum::http::header::AUTHORIZATION,
            format!("Bearer {ADMIN_TOKEN}").parse().unwrap(),
        );
        assert!(
            auth.authenticate(&store, &with_admin_token, Unauthenticated::Anonymous)
                .unwrap()
                .is_admin()
        );

        let get = |path: &str| Request::NonResource {
            verb: "get".into(),
            path: path.into(),
        };
        for path in [
            "/version",
            "/healthz",
            "/readyz",
            "/api",
            "/apis/apps/v1",
            "/openapi/v2",
        ] {
            assert!(authorize(&store, &anonymous, &get(path)).allowed, "{path}");
        }
        assert!(!authorize(&store, &anonymous, &get("/metrics")).allowed);
        let list_pods = resource("list", "", "pods", "", "");
        assert!(!authorize(&store, &anonymous, &list_pods).allowed);
        assert_eq!(
            forbidden(&anonymous, &list_pods).message,
            "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-a\""
        );
    }

    #[test]
    fn bootstrap_roles_aggregate_view_into_edit_into_admin() {
        let store = Store::new();
        bootstrap(&store);
        let roles = rbac(&store, "clusterroles");
        let rules = |name: &str| {
            store.get(&roles, "", name).unwrap()["rules"]
                .as_array()
                .unwrap()
                .len()
        };
        let view = rules("view");
        assert!(view > 0);
        assert!(rules("edit") > view, "edit holds view's rules and its own");
        assert!(rules("admin") > rules("edit"));
        let viewer = Identity::service_account("team-a", "viewer", "u");
        let namespaces = store.resource("", "v1", "namespaces").unwrap();
        store
            .create(
                &namespaces,
                None,
                json!({"metadata": {"name": "team-a"}}),
                &WriteOptions::by("test"),
            )
            .unwrap();
        store
            .create(
                &rbac(&store, "rolebindings"),
                Some("team-a"),
                json!({"metadata": {"name": "viewer"},
                    "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "view"},
                    "subjects": [{"kind": "ServiceAccount", "name": "viewer"}]}),
                &WriteOptions::by("test"),
            )
            .unwrap();
        let decision = authorize(
            &store,
            &viewer,
            &resource("list", "apps", "deployments", "", ""),
        );
        assert!(decision.allowed);
        assert_eq!(
            decision.reason,
            "RBAC: allowed by RoleBinding \"viewer\" in namespace \"team-a\" of ClusterRole \"view\" to ServiceAccount \"viewer\""
        );
        assert!(!authorize(&store, &viewer, &resource("get", "", "secrets", "", "db")).allowed);
        assert!(!authorize(&store, &viewer, &resource("delete", "", "pods", "", "p")).allowed);
        let mut elsewhere = resource("list", "apps", "deployments", "", "");
        if let Request::Resource { namespace, .. } = &mut elsewhere {
            *namespace = "team-b".into();
        }
        assert!(!authorize(&store, &viewer, &elsewhere).allowed);
    }
}
