//! The `kubernetes` provider: no mesh, so the apex Service's selector is the router. It selects the
//! primary's pods; for the switch of a blue/green release (the decision core's routes with the
//! canary at 100) the canary's pods instead; and during a canary by replica ratio both sides' pods
//! (by [`APEX_LABEL`], which Serin puts on both pod templates), with the weight the pods follow
//! kept in [`WEIGHT_ANNOTATION`]. The current routes are read back from the live Service.

use serde_json::{Value, json};
use serin_core::plan::Routes;

/// The pod label both sides of a canary by replica ratio carry (value: the apex Service's name), so
/// the apex Service can select them all.
pub const APEX_LABEL: &str = "serin.dev/apex";

/// The apex Service annotation holding the canary weight of a release by replica ratio.
pub const WEIGHT_ANNOTATION: &str = "serin.dev/canary-weight";

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

/// Points the apex Service `apex` of a canary by replica ratio at both sides' pods while the canary
/// has a weight, recording it, and at the primary's alone once it has none.
pub fn route_apex_by_ratio(apex: &mut Value, label: &str, value: &str, routes: Routes) {
    if routes.canary <= 0 {
        route_apex(apex, label, value, routes);
        return;
    }
    let name = apex["metadata"]["name"].clone();
    apex["spec"]["selector"] = json!({ APEX_LABEL: name });
    apex["metadata"]["annotations"][WEIGHT_ANNOTATION] = json!(routes.canary.to_string());
}

/// The routes a live apex Service stands for, given the target's selector label and value:
/// everything to the canary when it selects the canary's pods, everything to the primary when it
/// selects the primary's, the recorded weight when it selects both; `None` for a Service that
/// selects neither (not yet taken over).
pub fn get_routes(apex: &Value, label: &str, value: &str) -> Option<Routes> {
    let everything_to = |primary: i32, canary: i32| Routes {
        primary,
        canary,
        mirrored: false,
    };
    if apex["spec"]["selector"][APEX_LABEL].is_string() {
        let weight: i32 = apex["metadata"]["annotations"][WEIGHT_ANNOTATION]
            .as_str()?
            .parse()
            .ok()?;
        let weight = weight.clamp(0, 100);
        return Some(everything_to(100 - weight, weight));
    }
    let selected = apex["spec"]["selector"][label].as_str()?;
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
    fn a_ratio_apex_selects_both_sides_while_the_canary_has_a_weight() {
        let [_, _, mut apex] = services(&canary(), &target(), &["app"]).unwrap();
        let split = |canary: i32| Routes {
            primary: 100 - canary,
            canary,
            mirrored: false,
        };
        route_apex_by_ratio(&mut apex, "app", "podinfo", split(41));
        assert_eq!(apex["spec"]["selector"], json!({APEX_LABEL: "podinfo"}));
        assert_eq!(apex["metadata"]["annotations"][WEIGHT_ANNOTATION], "41");
        assert_eq!(get_routes(&apex, "app", "podinfo"), Some(split(41)));
        route_apex_by_ratio(&mut apex, "app", "podinfo", split(0));
        assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo-primary"}));
        assert_eq!(get_routes(&apex, "app", "podinfo"), Some(split(0)));
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
