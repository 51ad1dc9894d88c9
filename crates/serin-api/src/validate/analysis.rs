//! The checks of a Canary's analysis: its strategy, steps, metrics, webhooks, alerts, session
//! affinity, and blue/green's pre- and post-promotion analyses.

use super::report::Report;
use crate::duration::parse_pause_duration;
use crate::{CanaryAnalysis, CanaryMetric, CanaryStep, CanaryWebhook, HookType, Strategy};
use std::collections::HashSet;

/// Metric names evaluated without a template.
pub const BUILTIN_METRICS: [&str; 2] = ["request-success-rate", "request-duration"];

pub(super) fn validate_analysis(
    a: &CanaryAnalysis,
    base: &str,
    strategy_optional: bool,
    r: &mut Report,
) {
    let p = |field: &str| format!("{base}.{field}");
    r.interval(&p("interval"), a.interval.as_deref());
    r.range(&p("threshold"), a.threshold, 1, i32::MAX, "5");
    r.range(&p("iterations"), a.iterations, 0, i32::MAX, "10");
    r.range(&p("maxWeight"), a.max_weight, 1, 100, "50");
    r.range(&p("stepWeight"), a.step_weight, 0, 100, "10");
    r.range(
        &p("stepWeightPromotion"),
        a.step_weight_promotion,
        0,
        100,
        "50",
    );
    r.range(&p("mirrorWeight"), a.mirror_weight, 0, 100, "50");
    r.range(
        &p("primaryReadyThreshold"),
        a.primary_ready_threshold,
        0,
        100,
        "100",
    );
    r.range(
        &p("canaryReadyThreshold"),
        a.canary_ready_threshold,
        0,
        100,
        "100",
    );
    r.not_negative(
        &p("abortScaleDownDelaySeconds"),
        a.abort_scale_down_delay_seconds,
    );
    r.not_negative(&p("scaleDownDelaySeconds"), a.scale_down_delay_seconds);
    r.range(
        &p("autoPromotionSeconds"),
        a.auto_promotion_seconds,
        1,
        i32::MAX,
        "30",
    );
    r.range(
        &p("previewReplicaCount"),
        a.preview_replica_count,
        1,
        i32::MAX,
        "1",
    );

    if let Some(weights) = &a.step_weights {
        // `previous` is the last in-range weight, so one bad entry is reported once and does not make
        // the entries after it look out of order.
        let mut previous = 0;
        for (i, w) in weights.iter().enumerate() {
            let path = format!("{base}.stepWeights[{i}]");
            if !(1..=100).contains(w) {
                r.add(
                    path,
                    format!("{w} is out of range; write a weight from 1 to 100"),
                );
            } else if *w <= previous {
                r.add(
                    path,
                    format!("{w} does not ascend after {previous}; list weights in increasing order, e.g. [1, 5, 10, 50]"),
                );
            } else {
                previous = *w;
            }
        }
        if weights.is_empty() {
            r.add(
                p("stepWeights"),
                "empty list; write weights such as [5, 10, 25, 50] or remove stepWeights",
            );
        }
    }
    if a.steps.as_ref().is_some_and(Vec::is_empty) {
        r.add(
            p("steps"),
            "empty list; write steps such as [{setWeight: 20}, {pause: {duration: 1m}}] or remove steps",
        );
    }

    validate_strategy_choice(a, base, strategy_optional, r);
    r.http_matches(&p("match"), a.r#match.as_ref());
    validate_steps(a.steps(), base, r);
    if let Some(background) = &a.background_analysis {
        let path = p("backgroundAnalysis");
        if a.steps.is_none() {
            r.add(
                path.clone(),
                "runs beside explicit steps only; add steps, or move its metrics to analysis.metrics, which are checked at every interval",
            );
        }
        let steps = a.steps().len();
        super::step_analysis::validate_step_analysis(background, &path, Some(steps), r);
    }
    validate_metrics(a.metrics(), base, r);
    validate_webhooks(a.webhooks(), base, r);
    validate_promotion_analyses(a, base, r);

    for (i, alert) in a.alerts.iter().flatten().enumerate() {
        let ap = format!("{base}.alerts[{i}]");
        if alert.name.is_empty() {
            r.add(
                format!("{ap}.name"),
                "missing; name the alert, e.g. on-call",
            );
        }
        if let Some(sev) = alert.severity.as_deref()
            && !["", "info", "warn", "error"].contains(&sev)
        {
            r.add(
                format!("{ap}.severity"),
                format!("unknown severity {sev:?}; write info, warn or error"),
            );
        }
        if alert.provider_ref.name.is_empty() {
            r.add(
                format!("{ap}.providerRef.name"),
                "missing; write the name of an AlertProvider",
            );
        }
    }

    if a.session_affinity.is_some() {
        let weighted = matches!(a.strategy(), Strategy::Canary | Strategy::Steps);
        if !weighted {
            r.add(
                format!("{base}.sessionAffinity"),
                format!("pins users to the canary while weights move, so it works with stepWeight, stepWeights or steps, not with {}; remove sessionAffinity", a.strategy().as_str()),
            );
        } else if a.mirror() && a.strategy() == Strategy::Canary {
            // Mirroring with steps is refused as such; this is for the mirroring that works.
            r.add(
                format!("{base}.sessionAffinity"),
                "cannot be combined with mirror: a mirrored request gets no cookie; remove mirror or sessionAffinity",
            );
        }
    }
    if let Some(sa) = &a.session_affinity {
        let sp = format!("{base}.sessionAffinity");
        if sa.cookie_name.is_empty() {
            r.add(
                format!("{sp}.cookieName"),
                "missing; write a cookie name, e.g. canary-affinity",
            );
        }
        if sa.primary_cookie_name.as_deref() == Some(sa.cookie_name.as_str()) {
            r.add(
                format!("{sp}.primaryCookieName"),
                format!("same as cookieName {:?}; write a different name, e.g. primary-affinity, so the primary and canary cookies can be told apart", sa.cookie_name),
            );
        }
        if let Some(ss) = sa.same_site.as_deref()
            && !["Strict", "Lax", "None"].contains(&ss)
        {
            r.add(
                format!("{sp}.sameSite"),
                format!("unknown value {ss:?}; write Strict, Lax or None"),
            );
        }
        r.not_negative(&format!("{sp}.maxAge"), sa.max_age);
    }
}

fn validate_strategy_choice(
    a: &CanaryAnalysis,
    base: &str,
    strategy_optional: bool,
    r: &mut Report,
) {
    let chosen: Vec<&str> = [
        ("stepWeight", a.step_weight.unwrap_or(0) > 0),
        ("stepWeights", a.step_weights.is_some()),
        ("iterations", a.iterations.unwrap_or(0) > 0),
        ("steps", a.steps.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    // A negative stepWeight or iterations is already reported as out of range; saying "no strategy"
    // as well would blame the same field twice.
    let negative_choice =
        a.step_weight.is_some_and(|w| w < 0) || a.iterations.is_some_and(|i| i < 0);
    if chosen.len() > 1 {
        for extra in &chosen[1..] {
            r.add(
                format!("{base}.{extra}"),
                format!("{extra} cannot be combined with {}; a canary uses one of stepWeight (with maxWeight), stepWeights, iterations or steps, so remove one", chosen[0]),
            );
        }
    } else if chosen.is_empty() && !strategy_optional && !negative_choice {
        r.add(
            base.to_string(),
            "no strategy; set one of stepWeight (with maxWeight), stepWeights, iterations or steps, e.g. stepWeight: 10",
        );
    }
    if a.steps.is_some() && a.max_weight.is_some() {
        r.add(
            format!("{base}.maxWeight"),
            "steps set the weights themselves; remove maxWeight or use stepWeight instead of steps",
        );
    } else if a.iterations.unwrap_or(0) > 0
        && a.step_weight.unwrap_or(0) == 0
        && a.step_weights.is_none()
        && a.max_weight.is_some()
        && !r
            .errors
            .iter()
            .any(|e| e.path == format!("{base}.maxWeight"))
    {
        r.add(
            format!("{base}.maxWeight"),
            "A/B testing and blue/green (iterations) move all traffic at promotion, so maxWeight would be ignored; remove it, or use stepWeight with maxWeight instead of iterations",
        );
    }

    let strategy = a.strategy();
    let mirror_ok = matches!(strategy, Strategy::Canary | Strategy::BlueGreen) && a.steps.is_none();
    if a.mirror() && !mirror_ok {
        r.add(
            format!("{base}.mirror"),
            format!("mirroring works with stepWeight/stepWeights canaries and blue/green, not with {}; remove mirror", strategy.as_str()),
        );
    }
    if a.mirror_weight.is_some() && !a.mirror() {
        r.add(
            format!("{base}.mirrorWeight"),
            "has no effect without mirror: true; set mirror: true or remove mirrorWeight",
        );
    }
    if a.step_weight_promotion.is_some() && !matches!(strategy, Strategy::Canary | Strategy::Steps)
    {
        r.add(
            format!("{base}.stepWeightPromotion"),
            "only weight-based canaries (stepWeight, stepWeights, steps) promote stepwise; remove stepWeightPromotion",
        );
    }
    let blue_green_only = [
        ("autoPromotionEnabled", a.auto_promotion_enabled.is_some()),
        ("autoPromotionSeconds", a.auto_promotion_seconds.is_some()),
        ("previewReplicaCount", a.preview_replica_count.is_some()),
    ];
    if strategy != Strategy::BlueGreen {
        for (field, set) in blue_green_only {
            if set {
                r.add(
                    format!("{base}.{field}"),
                    format!("only blue/green (iterations without match) uses {field}; remove it or switch to blue/green"),
                );
            }
        }
    }
    if a.dynamic_stable_scale.unwrap_or(false)
        && !matches!(strategy, Strategy::Canary | Strategy::Steps)
    {
        r.add(
            format!("{base}.dynamicStableScale"),
            "only weight-based canaries (stepWeight, stepWeights, steps) can scale the primary with its weight; remove dynamicStableScale",
        );
    }
}

fn validate_steps(steps: &[CanaryStep], base: &str, r: &mut Report) {
    for (i, step) in steps.iter().enumerate() {
        let sp = format!("{base}.steps[{i}]");
        let kinds = [
            step.set_weight.is_some(),
            step.pause.is_some(),
            step.set_canary_scale.is_some(),
            step.analysis.is_some(),
            step.set_header_route.is_some(),
            step.set_mirror_route.is_some(),
        ]
        .iter()
        .filter(|k| **k)
        .count();
        if kinds != 1 {
            r.add(
                sp.clone(),
                "a step has exactly one of setWeight, pause, setCanaryScale, analysis, setHeaderRoute or setMirrorRoute; split it into separate steps, e.g. [{setWeight: 20}, {pause: {duration: 1m}}]",
            );
        }
        if let Some(analysis) = &step.analysis {
            let path = format!("{sp}.analysis");
            super::step_analysis::validate_step_analysis(analysis, &path, None, r);
        }
        r.range(&format!("{sp}.setWeight"), step.set_weight, 0, 100, "20");
        if let Some(duration) = step.pause.as_ref().and_then(|p| p.duration.as_ref())
            && let Err(e) = parse_pause_duration(duration)
        {
            r.add(format!("{sp}.pause.duration"), e.to_string());
        }
        if let Some(scale) = &step.set_canary_scale {
            let set = [
                scale.replicas.is_some(),
                scale.weight.is_some(),
                scale.match_traffic_weight == Some(true),
            ]
            .iter()
            .filter(|k| **k)
            .count();
            if set != 1 {
                r.add(
                    format!("{sp}.setCanaryScale"),
                    "set exactly one of replicas, weight or matchTrafficWeight: true, e.g. {replicas: 2}",
                );
            }
            r.range(
                &format!("{sp}.setCanaryScale.replicas"),
                scale.replicas,
                0,
                i32::MAX,
                "2",
            );
            r.range(
                &format!("{sp}.setCanaryScale.weight"),
                scale.weight,
                0,
                100,
                "25",
            );
        }
    }
}

fn validate_metrics(metrics: &[CanaryMetric], base: &str, r: &mut Report) {
    let mut names = HashSet::new();
    for (i, m) in metrics.iter().enumerate() {
        let mp = format!("{base}.metrics[{i}]");
        r.metric_name(&mp, &m.name, &mut names, "request-success-rate");
        r.metric_interval(&format!("{mp}.interval"), m.interval.as_deref());
        let neither = r.metric_source(&mp, m.template_ref.as_ref(), m.query.as_deref());
        if neither && !m.name.is_empty() && !BUILTIN_METRICS.contains(&m.name.as_str()) {
            r.add(
                format!("{mp}.name"),
                format!("{:?} is not a builtin metric; use request-success-rate or request-duration, or set templateRef to a MetricTemplate", m.name),
            );
        }
        match &m.threshold_range {
            Some(range) => {
                if let (Some(min), Some(max)) = (range.min, range.max)
                    && min > max
                {
                    r.add(
                        format!("{mp}.thresholdRange"),
                        format!("min {min} is above max {max}; make min at most max"),
                    );
                }
                if range.min.is_none() && range.max.is_none() {
                    r.add(
                        format!("{mp}.thresholdRange"),
                        "empty range accepts nothing; set min, max or both, e.g. {min: 99}",
                    );
                }
            }
            None if m.threshold.is_none() => r.add(
                format!("{mp}.thresholdRange"),
                "missing, so the check cannot pass or fail meaningfully; set the accepted range, e.g. {min: 99} or {max: 500}",
            ),
            None => {}
        }
        if let Some(nd) = m.no_data.as_deref()
            && !["fail", "ignore"].contains(&nd)
        {
            r.add(
                format!("{mp}.noData"),
                format!("unknown value {nd:?}; write fail (the default) or ignore"),
            );
        }
    }
}

fn validate_webhooks(webhooks: &[CanaryWebhook], base: &str, r: &mut Report) {
    let mut names = HashSet::new();
    for (i, hook) in webhooks.iter().enumerate() {
        let hp = format!("{base}.webhooks[{i}]");
        if hook.name.is_empty() {
            r.add(
                format!("{hp}.name"),
                "missing; name the webhook, e.g. load-test",
            );
        } else if !names.insert(hook.name.as_str()) {
            r.add(
                format!("{hp}.name"),
                format!(
                    "duplicate webhook name {:?}; give each webhook its own name",
                    hook.name
                ),
            );
        }
        if hook.hook_type().is_none() {
            let known: Vec<&str> = HookType::ALL.iter().map(|t| t.as_str()).collect();
            r.add(
                format!("{hp}.type"),
                format!(
                    "unknown type {:?}; write one of {}",
                    hook.type_.as_deref().unwrap_or(""),
                    known.join(", ")
                ),
            );
        }
        r.url(&format!("{hp}.url"), &hook.url);
        r.webhook_timeout(&format!("{hp}.timeout"), hook.timeout.as_deref());
        r.range(&format!("{hp}.retries"), hook.retries, 0, 100, "2");
    }
}

/// Blue/green's pre- and post-promotion analyses: checks written like the analysis's (rollout
/// webhooks only), with names unique across all three blocks, since a check is found by its name.
fn validate_promotion_analyses(a: &CanaryAnalysis, base: &str, r: &mut Report) {
    let mut metric_names: HashSet<&str> = a.metrics().iter().map(|m| m.name.as_str()).collect();
    let mut hook_names: HashSet<&str> = a.webhooks().iter().map(|h| h.name.as_str()).collect();
    for (field, stage) in [
        ("prePromotionAnalysis", &a.pre_promotion_analysis),
        ("postPromotionAnalysis", &a.post_promotion_analysis),
    ] {
        let Some(stage) = stage else { continue };
        let path = format!("{base}.{field}");
        if a.strategy() != Strategy::BlueGreen {
            r.add(
                &path,
                format!("only blue/green (iterations without match) switches traffic at once, which {field} surrounds; remove it or switch to blue/green"),
            );
        }
        r.range(
            &format!("{path}.iterations"),
            stage.iterations,
            1,
            1000,
            "1",
        );
        if stage.metrics().is_empty() && stage.webhooks().is_empty() {
            r.add(
                &path,
                "no checks; list metrics or webhooks, e.g. metrics: [{name: request-success-rate, thresholdRange: {min: 99}, interval: 1m}]",
            );
        }
        validate_metrics(stage.metrics(), &path, r);
        validate_webhooks(stage.webhooks(), &path, r);
        for (i, metric) in stage.metrics().iter().enumerate() {
            if !metric.name.is_empty() && !metric_names.insert(metric.name.as_str()) {
                r.add(
                    format!("{path}.metrics[{i}].name"),
                    format!(
                        "{:?} is already a metric of the analysis; give each check its own name",
                        metric.name
                    ),
                );
            }
        }
        for (i, hook) in stage.webhooks().iter().enumerate() {
            if !hook.name.is_empty() && !hook_names.insert(hook.name.as_str()) {
                r.add(
                    format!("{path}.webhooks[{i}].name"),
                    format!(
                        "{:?} is already a webhook of the analysis; give each check its own name",
                        hook.name
                    ),
                );
            }
            if hook.hook_type().is_some_and(|t| t != HookType::Rollout) {
                r.add(
                    format!("{path}.webhooks[{i}].type"),
                    format!("{field} runs checks only; remove type (or write rollout), and put other hooks in analysis.webhooks"),
                );
            }
        }
    }
}
