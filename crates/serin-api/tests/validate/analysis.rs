//! The analysis block's own fields: its two spellings, intervals and ranges, the one strategy it
//! picks, mirroring, alerts and session affinity.

use crate::support::{
    Tap, ab_testing, assert_spec_valid, assert_valid, base, blue_green, canary_with, errors, merge,
    paths, spec_paths, with_steps, without_canary_fields,
};
use serde_json::{Value, json};
use serin_api::validate;

#[test]
fn canary_analysis_alias_is_used_when_analysis_is_absent() {
    let alias = base()["spec"]["analysis"].clone();
    let canary = canary_with(json!({"spec": {"analysis": null, "canaryAnalysis": alias}}));
    assert!(validate(&canary).is_empty());
    assert_eq!(canary.spec.analysis().and_then(|a| a.step_weight), Some(10));
    assert!(!canary.spec.skips_analysis());
    // The alias is folded into `analysis` as the object is read, so code that reads the field (the
    // router, the metric checks) sees it, and it is written back under one name only.
    assert_eq!(
        canary.spec.analysis.as_ref().and_then(|a| a.step_weight),
        Some(10)
    );
    let written = serde_json::to_value(&canary).unwrap();
    assert_eq!(written["spec"]["analysis"]["stepWeight"], json!(10));
    assert!(written["spec"].get("canaryAnalysis").is_none());
    // Its problems are reported under its own name.
    assert_eq!(
        spec_paths(
            json!({"analysis": null, "canaryAnalysis": {"interval": "1m", "threshold": 0, "stepWeight": 10}})
        ),
        ["spec.canaryAnalysis.threshold"]
    );
}

#[test]
fn canary_analysis_alias_is_rejected_next_to_analysis() {
    // Only the duplication is reported: the alias is ignored, so its (broken) content is not checked.
    assert_eq!(
        spec_paths(json!({"canaryAnalysis": {"interval": "1 minute", "maxWeight": 150}})),
        ["spec.canaryAnalysis"]
    );
}

#[test]
fn intervals_are_go_durations() {
    for bad in ["1 minute", "-1m", "60", "1d", "m"] {
        assert_eq!(
            paths(json!({ "interval": bad })),
            ["spec.analysis.interval"],
            "interval {bad:?}"
        );
    }
    for good in ["30s", "1m", "2h", "1m30s"] {
        assert_valid(json!({ "interval": good }));
    }
}

#[test]
fn threshold_is_at_least_one() {
    assert_eq!(paths(json!({"threshold": 0})), ["spec.analysis.threshold"]);
    assert_valid(json!({"threshold": 1}));
}

#[test]
fn iterations_are_not_negative() {
    assert_eq!(
        paths(json!({"iterations": -1})),
        ["spec.analysis.iterations"]
    );
    // Reported once, as out of range, not also as "no strategy".
    assert_eq!(
        paths(json!({"stepWeight": null, "iterations": -1})),
        ["spec.analysis.iterations"]
    );
    assert_valid(json!({"iterations": 0}));
}

#[test]
fn max_weight_is_between_1_and_100() {
    for bad in [0, 101] {
        assert_eq!(
            paths(json!({ "maxWeight": bad })),
            ["spec.analysis.maxWeight"]
        );
    }
    for good in [1, 100] {
        assert_valid(json!({ "maxWeight": good }));
    }
}

#[test]
fn step_weight_is_a_percentage() {
    for bad in [-1, 101] {
        assert_eq!(
            paths(json!({ "stepWeight": bad })),
            ["spec.analysis.stepWeight"]
        );
    }
    assert_valid(json!({"stepWeight": 100}));
    // A negative weight is reported once, as out of range, not also as "no strategy".
    let errs = errors(json!({"stepWeight": -1}));
    assert_eq!(errs.len(), 1, "{errs:?}");
}

#[test]
fn percentages_are_between_0_and_100() {
    for field in [
        "stepWeightPromotion",
        "primaryReadyThreshold",
        "canaryReadyThreshold",
    ] {
        for bad in [-1, 101] {
            assert_eq!(
                paths(json!({ field: bad })),
                [format!("spec.analysis.{field}")],
                "{field}: {bad}"
            );
        }
        for good in [0, 100] {
            assert_valid(json!({ field: good }));
        }
    }
    for bad in [-1, 101] {
        assert_eq!(
            paths(json!({"mirror": true, "mirrorWeight": bad})),
            ["spec.analysis.mirrorWeight"]
        );
    }
    assert_valid(json!({"mirror": true, "mirrorWeight": 100}));
}

#[test]
fn delays_are_not_negative() {
    assert_eq!(
        paths(json!({"abortScaleDownDelaySeconds": -1, "scaleDownDelaySeconds": -1})),
        [
            "spec.analysis.abortScaleDownDelaySeconds",
            "spec.analysis.scaleDownDelaySeconds"
        ]
    );
    let errs = errors(json!({"abortScaleDownDelaySeconds": -30}));
    assert!(
        errs[0].message.contains("write 0 or more seconds"),
        "{errs:?}"
    );
    assert_valid(json!({"abortScaleDownDelaySeconds": 0, "scaleDownDelaySeconds": 0}));
}

#[test]
fn blue_green_counts_are_positive() {
    assert_eq!(
        paths(blue_green(
            json!({"autoPromotionSeconds": 0, "previewReplicaCount": 0})
        )),
        [
            "spec.analysis.autoPromotionSeconds",
            "spec.analysis.previewReplicaCount"
        ]
    );
    assert_valid(blue_green(
        json!({"autoPromotionSeconds": 1, "previewReplicaCount": 1}),
    ));
}

#[test]
fn step_weights_ascend_within_1_to_100() {
    let ladder = |weights: Value| paths(without_canary_fields(json!({ "stepWeights": weights })));
    assert!(ladder(json!([1, 5, 10, 25, 50])).is_empty());
    assert_eq!(
        ladder(json!([1, 5, 5, 3, 50])),
        [
            "spec.analysis.stepWeights[2]",
            "spec.analysis.stepWeights[3]"
        ]
    );
    assert_eq!(ladder(json!([0, 10])), ["spec.analysis.stepWeights[0]"]);
    // An out-of-range weight is reported once; it does not make the next one look out of order.
    assert_eq!(
        ladder(json!([10, 150, 20])),
        ["spec.analysis.stepWeights[1]"]
    );
    assert_eq!(ladder(json!([])), ["spec.analysis.stepWeights"]);
}

#[test]
fn a_canary_uses_exactly_one_strategy() {
    let steps = json!([{"setWeight": 10}]);
    assert_eq!(
        paths(json!({"stepWeights": [10, 20]})),
        ["spec.analysis.stepWeights"]
    );
    assert_eq!(
        paths(json!({"iterations": 5})),
        ["spec.analysis.iterations"]
    );
    assert_eq!(
        paths(json!({"maxWeight": null, "steps": steps})),
        ["spec.analysis.steps"]
    );
    assert_eq!(
        paths(json!({"maxWeight": null, "stepWeights": [10], "iterations": 5, "steps": steps})),
        [
            "spec.analysis.stepWeights",
            "spec.analysis.iterations",
            "spec.analysis.steps"
        ]
    );
    let messages: Vec<String> = errors(json!({"iterations": 5}))
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert!(
        messages[0].contains("cannot be combined with stepWeight"),
        "{messages:?}"
    );
}

#[test]
fn an_analysis_without_a_strategy_is_rejected_unless_skipped() {
    assert_eq!(paths(json!({"stepWeight": null})), ["spec.analysis"]);
    assert_eq!(paths(json!({"stepWeight": 0})), ["spec.analysis"]);
    assert_eq!(
        paths(json!({"stepWeight": null, "iterations": 0})),
        ["spec.analysis"]
    );
    assert_spec_valid(json!({"skipAnalysis": true, "analysis": {"stepWeight": null}}));
}

#[test]
fn steps_and_max_weight_exclude_each_other() {
    assert_eq!(
        paths(json!({"stepWeight": null, "maxWeight": 50, "steps": [{"setWeight": 10}]})),
        ["spec.analysis.maxWeight"]
    );
}

#[test]
fn max_weight_is_refused_where_traffic_moves_all_at_once() {
    for strategy in [
        json!({"stepWeight": null, "maxWeight": 50, "iterations": 5}),
        json!({"stepWeight": null, "maxWeight": 50, "iterations": 5,
               "match": [{"headers": {"x-canary": {"exact": "insider"}}}]}),
    ] {
        let errors = errors(strategy.clone());
        assert_eq!(errors.len(), 1, "{strategy}: {errors:?}");
        assert_eq!(errors[0].path, "spec.analysis.maxWeight");
        assert!(
            errors[0].message.contains("would be ignored"),
            "{}",
            errors[0].message
        );
    }
    assert_valid(json!({"stepWeight": null, "maxWeight": null, "iterations": 5}));
}

#[test]
fn steps_must_not_be_empty() {
    // An empty list would otherwise slip past the "no strategy" check and leave nothing to run.
    assert_eq!(paths(with_steps(json!([]))), ["spec.analysis.steps"]);
}

#[test]
fn mirroring_is_rejected_with_steps_and_ab_testing() {
    assert_eq!(
        paths(with_steps(json!([{"setWeight": 10}])).tap(json!({"mirror": true}))),
        ["spec.analysis.mirror"]
    );
    assert_eq!(
        paths(ab_testing(json!({"mirror": true}))),
        ["spec.analysis.mirror"]
    );
    assert_valid(json!({"mirror": true}));
    assert_valid(without_canary_fields(
        json!({"stepWeights": [10, 50], "mirror": true}),
    ));
    assert_valid(blue_green(json!({"mirror": true})));
}

#[test]
fn mirror_weight_needs_mirror() {
    assert_eq!(
        paths(json!({"mirrorWeight": 50})),
        ["spec.analysis.mirrorWeight"]
    );
    assert_eq!(
        paths(json!({"mirror": false, "mirrorWeight": 50})),
        ["spec.analysis.mirrorWeight"]
    );
}

#[test]
fn step_weight_promotion_needs_weights() {
    assert_eq!(
        paths(blue_green(json!({"stepWeightPromotion": 50}))),
        ["spec.analysis.stepWeightPromotion"]
    );
    assert_eq!(
        paths(ab_testing(json!({"stepWeightPromotion": 50}))),
        ["spec.analysis.stepWeightPromotion"]
    );
    assert_valid(json!({"stepWeightPromotion": 50}));
    assert_valid(with_steps(json!([{"setWeight": 10}])).tap(json!({"stepWeightPromotion": 50})));
}

#[test]
fn blue_green_only_fields_are_rejected_elsewhere() {
    let fields = json!({"autoPromotionEnabled": false, "autoPromotionSeconds": 30, "previewReplicaCount": 1});
    let expected = [
        "spec.analysis.autoPromotionEnabled",
        "spec.analysis.autoPromotionSeconds",
        "spec.analysis.previewReplicaCount",
    ];
    assert_eq!(paths(fields.clone()), expected);
    assert_eq!(paths(ab_testing(fields.clone())), expected);
    assert_eq!(
        paths(with_steps(json!([{"setWeight": 10}])).tap(fields.clone())),
        expected
    );
    assert_valid(blue_green(fields));
}

#[test]
fn dynamic_stable_scale_needs_weights() {
    assert_eq!(
        paths(blue_green(json!({"dynamicStableScale": true}))),
        ["spec.analysis.dynamicStableScale"]
    );
    assert_eq!(
        paths(ab_testing(json!({"dynamicStableScale": true}))),
        ["spec.analysis.dynamicStableScale"]
    );
    assert_valid(blue_green(json!({"dynamicStableScale": false})));
    assert_valid(json!({"dynamicStableScale": true}));
    assert_valid(with_steps(json!([{"setWeight": 10}])).tap(json!({"dynamicStableScale": true})));
}

#[test]
fn analysis_match_string_matches_set_exactly_one_kind() {
    let m = "spec.analysis.match[0]";
    assert_eq!(
        paths(ab_testing(json!({"match": [{
            "headers": {"x-canary": {"exact": "insider", "regex": "ins.*"}},
            "queryParams": {"canary": {}},
            "withoutHeaders": {"x-bot": {"prefix": "a", "suffix": "b"}},
            "uri": {"prefix": "/api"}
        }]}))),
        [
            format!("{m}.headers.x-canary"),
            format!("{m}.queryParams.canary"),
            format!("{m}.withoutHeaders.x-bot")
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// alerts and session affinity

#[test]
fn alerts_are_named_with_a_known_severity_and_provider() {
    let alert = |extra: Value| {
        let mut a =
            json!({"name": "on-call", "severity": "error", "providerRef": {"name": "on-call"}});
        merge(&mut a, extra);
        a
    };
    assert_eq!(
        paths(json!({"alerts": [
            alert(json!({"name": ""})),
            alert(json!({"severity": "critical"})),
            alert(json!({"providerRef": {"name": ""}})),
            alert(json!({"severity": null, "providerRef": {"namespace": "serin"}})),
            alert(json!({"severity": ""}))
        ]})),
        [
            "spec.analysis.alerts[0].name",
            "spec.analysis.alerts[1].severity",
            "spec.analysis.alerts[2].providerRef.name",
        ]
    );
}

#[test]
fn session_affinity_cookies_are_named_and_distinct() {
    let sa = "spec.analysis.sessionAffinity";
    assert_eq!(
        paths(json!({"sessionAffinity": {"cookieName": ""}})),
        [format!("{sa}.cookieName")]
    );
    assert_eq!(
        paths(
            json!({"sessionAffinity": {"cookieName": "affinity", "primaryCookieName": "affinity"}})
        ),
        [format!("{sa}.primaryCookieName")]
    );
    assert_valid(
        json!({"sessionAffinity": {"cookieName": "canary-affinity", "primaryCookieName": "primary-affinity"}}),
    );
}

#[test]
fn session_affinity_needs_a_weighted_canary_without_mirroring() {
    let sa = "spec.analysis.sessionAffinity";
    let cookie = json!({"cookieName": "canary-affinity"});
    assert_valid(json!({"sessionAffinity": cookie}));
    assert_valid(
        json!({"stepWeight": null, "maxWeight": null, "steps": [{"setWeight": 20}, {"pause": {}}],
                        "sessionAffinity": cookie}),
    );
    let blue_green = errors(
        json!({"stepWeight": null, "maxWeight": null, "iterations": 5, "sessionAffinity": cookie}),
    );
    assert_eq!(blue_green.len(), 1, "{blue_green:?}");
    assert_eq!(blue_green[0].path, sa);
    assert!(
        blue_green[0].message.contains("not with blue-green"),
        "{}",
        blue_green[0].message
    );
    assert_eq!(
        paths(json!({"mirror": true, "sessionAffinity": cookie})),
        [sa]
    );
}

#[test]
fn session_affinity_cookie_attributes_are_valid() {
    let sa = "spec.analysis.sessionAffinity";
    assert_eq!(
        paths(json!({"sessionAffinity": {"cookieName": "c", "sameSite": "lax", "maxAge": -1}})),
        [format!("{sa}.sameSite"), format!("{sa}.maxAge")]
    );
    for same_site in ["Strict", "Lax", "None"] {
        assert_valid(
            json!({"sessionAffinity": {"cookieName": "c", "sameSite": same_site, "maxAge": 0}}),
        );
    }
}
