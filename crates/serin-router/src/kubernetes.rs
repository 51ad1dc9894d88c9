//! The `kubernetes` provider: no mesh, so no weights. The apex Service selects the primary's pods,
//! and for the switch of a blue/green release (the decision core's routes with the canary at 100)
//! it selects the canary's pods instead; the current routes are read back from that selector.

use serde_json::{Value, json};
use serin_core::plan::Routes;

/// Whether `canary` (its JSON form, with its provider filled in) routes by the apex Service's
/// selector rather than by an Istio VirtualService.
pub fn routes_by_service(canary: &Value) -> bool {
    canary["spec"]["provider"] == serin_api::validate::KUBERNETES_PROVIDER
}

/// Points the apex Service `apex` (as built by [`crate::services::services`]) at the pods that
/// `routes` send traffic to: the canary's (`<label>: <value>`) when it gets everything, else the
/// primary's (`<label>: <value>-primary`).
pub fn route_apex(apex: &mut Value, label: &str, value: &str, routes: Routes) {
    let selected = if routes.canary >= 100 {
        value.to_string()
    } else {
        format!("{value}-primary")
    };
    apex["spec"]["selector"] = json!({ label: selected });
}

/// The routes a live apex Service stands for, given the target's selector label and value:
/// everything to the canary when it selects the canary's pods, everything to the primary when it
/// selects the primary's; `None` for a Service that selects neither (not yet taken over).
pub fn get_routes(apex: &Value, label: &str, value: &str) -> Option<Routes> {
    let selected = apex["spec"]["selector"][label].as_str()?;
    let everything_to = |primary: i32, canary: i32| Routes {
        primary,
        canary,
        mirrored: false,
    };
    if selected == value {
        Some(everything_to(0, 100))
    } else if selected == format!("{value}-primary") {
        Some(everything_to(100, 0))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::services;

    fn canary() -> Value {
        json!({"apiVersion": "serin.dev/v1beta1", "kind": "Canary",
               "metadata": {"name": "podinfo", "namespace": "test", "uid": "u1"},
               "spec": {"provider": "kubernetes", "targetRef": {"name": "podinfo"},
                        "service": {"port": 9898}}})
    }

    fn target() -> Value {
        json!({"metadata": {"name": "podinfo", "namespace": "test"},
               "spec": {"selector": {"matchLabels": {"app": "podinfo"}},
                        "template": {"spec": {"containers": [{"name": "podinfo"}]}}}})
    }

    #[test]
    fn the_apex_selects_the_primary_until_the_canary_gets_everything() {
        let [_, _, mut apex] = services(&canary(), &target(), &["app"]).unwrap();
        assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo-primary"}));
        assert_eq!(
            get_routes(&apex, "app", "podinfo"),
            Some(Routes {
                primary: 100,
                canary: 0,
                mirrored: false
            })
        );

        route_apex(
            &mut apex,
            "app",
            "podinfo",
            Routes {
                primary: 0,
                canary: 100,
                mirrored: false,
            },
        );
        assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo"}));
        assert_eq!(
            get_routes(&apex, "app", "podinfo"),
            Some(Routes {
                primary: 0,
                canary: 100,
                mirrored: false
            })
        );

        route_apex(
            &mut apex,
            "app",
            "podinfo",
            Routes {
                primary: 100,
                canary: 0,
                mirrored: false,
            },
        );
        assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo-primary"}));
    }

    #[test]
    fn only_the_kubernetes_provider_routes_by_service() {
        assert!(routes_by_service(&canary()));
        let mut istio = canary();
        istio["spec"]["provider"] = json!("istio");
        assert!(!routes_by_service(&istio));
        assert_eq!(get_routes(&json!({"spec": {}}), "app", "podinfo"), None);
        let foreign = json!({"spec": {"selector": {"app": "other"}}});
        assert_eq!(get_routes(&foreign, "app", "podinfo"), None);
    }
}
