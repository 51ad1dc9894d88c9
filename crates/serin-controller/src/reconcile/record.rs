//! Recording a tick: the Canary's status (one write), core/v1 Events and log lines, event webhooks
//! and alerts (sent off the tick path), the operator's metrics, and failed reconciles.

use super::written::{self, Written};
use super::{Context, Error, Shared, now};
use crate::cache::Caches;
use crate::event_series::{EventKey, Recording};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use serin_api::{Canary, Phase};
use serin_core::plan::{EventType, Plan};
use std::sync::Arc;
use std::time::Instant;

/// Says in the Canary's status message what a slow check waits for, keeping the check's round
/// for the version this write makes.
pub(super) async fn note_waiting(
    canary: &Canary,
    shared: &Shared,
    key: &(String, String),
    message: &str,
) -> Result<(), Error> {
    tracing::info!("{message}");
    let mut status = canary.status.clone().unwrap_or_default();
    status.message = Some(message.to_string());
    // The tick goes on to requeue itself (the check's `look_again`).
    let written = super::stored::write(canary, shared, &status, true).await?;
    if let (Some(from), Some(to)) = (canary.resource_version(), written) {
        shared.checks.carry_over(key, &from, &to);
    }
    Ok(())
}

/// Writes the Events of a plan that changes the status, before that status is written: the
/// status write commits the transition, so an operator stopped between the two writes repeats the
/// transition and its Events. Each Event is named after the Canary's version the transition
/// starts from, its place in the plan and its reason, so the repeat finds it already written
/// instead of adding another (or losing it, had the status been written first); a repeat that
/// decides otherwise (a check that failed where it had passed) has other reasons, and Events of
/// its own.
pub(super) async fn record_transition_events(canary: &Canary, shared: &Shared, plan: &Plan) {
    for (index, event) in plan.events.iter().enumerate() {
        let name = transition_event_name(canary, index, event.reason);
        record_named(
            &shared.ctx,
            canary,
            (event.type_, event.reason, &event.message),
            Some(name),
        )
        .await;
    }
}

/// The name of the `index`th Event, for `reason`, of the transition that starts from `canary` as
/// read.
fn transition_event_name(canary: &Canary, index: usize, reason: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(canary.uid().unwrap_or_default());
    hasher.update([0]);
    hasher.update(canary.resource_version().unwrap_or_default());
    hasher.update([0]);
    hasher.update(index.to_le_bytes());
    hasher.update(reason);
    let hex: String = hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}.{hex}", canary.name_any())
}

/// Everything a tick tells: events (to the API, the log and the event webhooks), alerts, and the
/// operator's metrics. `events_written` when [`record_transition_events`] has already written the
/// plan's Events.
pub(super) async fn record_plan(
    canary: &Arc<Canary>,
    shared: &Shared,
    plan: &Plan,
    started: Instant,
    events_written: bool,
) {
    let ctx = &shared.ctx;
    let namespace = canary.namespace().unwrap_or_default();
    let target = &canary.spec.target_ref.name;
    let old_phase = canary.status.as_ref().and_then(|s| s.phase);
    let phase = plan.status.phase;
    ctx.metrics.record_tick(
        target,
        &namespace,
        phase,
        plan.status.canary_weight,
        plan.status.failed_checks,
    );
    if old_phase == Some(Phase::Progressing) {
        ctx.metrics
            .observe_duration(target, &namespace, started.elapsed().as_secs_f64());
    }
    if phase != old_phase && matches!(phase, Some(Phase::Succeeded | Phase::Failed)) {
        let strategy = match canary.spec.analysis().map(|a| a.strategy()) {
            Some(serin_api::Strategy::AbTesting) => "ab-testing",
            Some(serin_api::Strategy::BlueGreen) => "blue-green",
            _ => "canary",
        };
        let analysis = if canary.spec.skips_analysis() {
            "skipped"
        } else {
            "completed"
        };
        ctx.metrics.record_release(
            target,
            &namespace,
            phase == Some(Phase::Succeeded),
            strategy,
            analysis,
        );
    }
    if !events_written {
        for event in &plan.events {
            record(ctx, canary, event.type_, event.reason, &event.message).await;
        }
    }
    // Most Canaries have no event webhook: their Events are written above and nothing is sent.
    let events = if serin_webhooks::hook::sends_events(canary, ctx.event_webhook.as_deref()) {
        plan.events.clone()
    } else {
        Vec::new()
    };
    if events.is_empty() && plan.alerts.is_empty() {
        return;
    }
    // Webhooks and chat services can be slow or down: they must not hold the next tick back.
    let mut updated = (**canary).clone();
    updated.status = Some(plan.status.clone());
    let alerts = plan.alerts.clone();
    let ctx = shared.ctx.clone();
    let caches = shared.caches.clone();
    // The task keeps the reconcile's span, so its log lines name the Canary; it runs in the
    // namespace's budget, so a namespace whose receivers hang queues only its own notifications.
    let span = tracing::Span::current();
    let spawned = shared.budgets.spawn(
        &namespace,
        tracing::Instrument::instrument(
            async move {
                for event in &events {
                    let millis = now().as_millisecond();
                    for run in ctx
                        .webhooks
                        .send_event(&updated, event, millis, ctx.event_webhook.as_deref())
                        .await
                    {
                        if let Err(error) = run.result {
                            tracing::warn!("event webhook: {error}");
                        }
                    }
                }
                for alert in &alerts {
                    send_alert(&ctx, &caches, &updated, alert).await;
                }
            },
            span,
        ),
    );
    if let Err(full) = spawned {
        tracing::warn!("event webhooks and alerts of this tick not sent: {full}");
    }
}

/// Posts `alert` to every AlertProvider of the canary whose severity admits it, or, for a canary
/// without `alerts`, to the operator's Slack or Teams webhook (as Flagger's global notifier).
async fn send_alert(ctx: &Context, caches: &Caches, canary: &Canary, alert: &serin_core::Alert) {
    let namespace = canary.namespace().unwrap_or_default();
    let message =
        serin_webhooks::alert::AlertMessage::from_alert(canary, alert, ctx.cluster_name.as_deref());
    let own_alerts = canary.spec.analysis().and_then(|a| a.alerts.as_deref());
    if own_alerts.is_none_or(<[_]>::is_empty) {
        if let Some(global) = &ctx.global_alerts
            && let Err(error) = ctx.webhooks.post_alert(global, &message).await
        {
            tracing::error!("alert to {}: {error}", global.provider);
        }
        return;
    }
    for recipient in serin_webhooks::alert::recipients(canary, alert.severity) {
        let reference = &recipient.provider_ref;
        let provider_namespace = reference.namespace_or(&namespace);
        let Some(provider) = caches.alert_provider(provider_namespace, &reference.name) else {
            tracing::error!(
                "alert {}: AlertProvider {}.{provider_namespace} not found; create it or fix spec.analysis.alerts[].providerRef",
                recipient.name,
                reference.name
            );
            continue;
        };
        let secret = provider
            .spec
            .secret_ref
            .as_ref()
            .and_then(|s| caches.secret_text(provider_namespace, &s.name));
        let key = |k: &str| secret.as_ref().and_then(|s| s.get(k)).map(String::as_str);
        let sent = match serin_webhooks::alert::Notifier::from_provider(
            &reference.name,
            &provider.spec,
            key("address"),
            key("token"),
        ) {
            Ok(notifier) => ctx.webhooks.post_alert(&notifier, &message).await,
            Err(error) => Err(error),
        };
        if let Err(error) = sent {
            tracing::error!("alert {}: {error}", recipient.name);
        }
    }
}

/// Writes a core/v1 Event about `canary` (one per message, as Flagger's recorder does, so
/// `kubectl describe canary` lists every step) and logs it. A message repeated within
/// [`SERIES_WINDOW`](crate::event_series::SERIES_WINDOW) raises the first Event's `count` and
/// `lastTimestamp` instead, as Kubernetes' recorder does. An event that cannot be written is
/// logged and does not stop the release. `reason` says what happened (see
/// `serin_core::plan::reason`).
pub(super) async fn record(
    ctx: &Context,
    canary: &Canary,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    record_named(ctx, canary, (type_, reason, message), None).await;
}

/// [`record`], creating a new Event as `name` when given (an Event of that name already there
/// is this one, written before) or under a fresh name otherwise.
async fn record_named(
    ctx: &Context,
    canary: &Canary,
    (type_, reason, message): (EventType, &str, &str),
    name: Option<String>,
) {
    let kind = match type_ {
        EventType::Normal => {
            tracing::info!(reason, "{message}");
            "Normal"
        }
        EventType::Warning => {
            tracing::warn!(reason, "{message}");
            "Warning"
        }
    };
    let namespace = canary.namespace().unwrap_or_else(|| "default".into());
    let key = EventKey {
        namespace: namespace.clone(),
        name: canary.name_any(),
        uid: canary.uid().unwrap_or_default(),
        event_type: kind.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
    };
    let now = now().to_string();
    let events = written::request::<k8s_openapi::api::core::v1::Event>(&(), &namespace);
    if let Recording::Repeat { name: first, count } =
        ctx.event_series.recording(&key, Instant::now())
    {
        if name.as_ref() == Some(&first) {
            // This transition, tried again after its status write failed.
            return;
        }
        let name = first;
        let repeat = json!({"count": count, "lastTimestamp": now});
        let repeated: Result<Written, _> = written::patch(
            &ctx.client,
            &events,
            &name,
            None,
            &PatchParams::default(),
            &Patch::Merge(&repeat),
        )
        .await;
        match repeated {
            Ok(_) => {
                ctx.event_series.written(key, name, count, Instant::now());
                return;
            }
            // Expired or deleted: the repeat starts a new Event.
            Err(kube::Error::Api(status)) if status.code == 404 => ctx.event_series.forget(&key),
            Err(error) => {
                tracing::error!("writing event: {error}");
                return;
            }
        }
    }
    // A core/v1 Event, sent as the JSON the API server reads (no typed round trip: every
    // transition writes one).
    let object = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name.clone().unwrap_or_else(|| format!("{}.{}", canary.name_any(), uuid::Uuid::new_v4().simple())),
                     "namespace": namespace},
        "involvedObject": {"apiVersion": serin_api::api_version(), "kind": "Canary",
                           "name": canary.name_any(), "namespace": namespace,
                           "uid": canary.uid(), "resourceVersion": canary.resource_version()},
        "reason": reason, "message": message, "type": kind,
        "source": {"component": "serin"}, "reportingComponent": "serin",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    });
    let written = written::create(&ctx.client, &events, &object)
        .await
        .map(|created| created.metadata.name.unwrap_or_default())
        .or_else(|error| match (error, name) {
            // Written by an earlier try of the same transition (before a restart, say).
            (kube::Error::Api(status), Some(name)) if status.code == 409 => Ok(name),
            (error, _) => Err(error.to_string()),
        });
    match written {
        Ok(name) => ctx.event_series.written(key, name, 1, Instant::now()),
        Err(error) => tracing::error!("writing event: {error}"),
    }
}

/// Shows a failed reconcile in the Canary's status message and as a Warning event, once per
/// distinct message.
pub(super) async fn report_failure(canary: &Canary, shared: &Shared, error: &Error) {
    let ctx = &shared.ctx;
    let message = format!("reconcile failed, retrying: {error}");
    tracing::error!("{message}");
    if canary.status.as_ref().and_then(|s| s.message.as_deref()) == Some(message.as_str()) {
        return;
    }
    // A failure to write it is the failure being reported, already logged above.
    let mut status = canary.status.clone().unwrap_or_default();
    status.message = Some(message.clone());
    let _ = super::stored::write(canary, shared, &status, false).await;
    record(
        ctx,
        canary,
        EventType::Warning,
        serin_core::plan::reason::RECONCILE_FAILED,
        &message,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::transition_event_name;
    use serin_api::Canary;

    fn canary(version: &str) -> Canary {
        let mut canary = Canary::new("podinfo", Default::default());
        canary.metadata.uid = Some("0b5a7c1e".into());
        canary.metadata.resource_version = Some(version.into());
        canary
    }

    #[test]
    fn a_repeated_transition_names_its_events_as_before_and_another_does_not() {
        let name = transition_event_name(&canary("41"), 0, "NewRevision");
        assert_eq!(name, transition_event_name(&canary("41"), 0, "NewRevision"));
        assert!(name.starts_with("podinfo.") && name.len() == "podinfo.".len() + 16);
        for other in [
            transition_event_name(&canary("42"), 0, "NewRevision"),
            transition_event_name(&canary("41"), 1, "NewRevision"),
            transition_event_name(&canary("41"), 0, "CheckFailed"),
        ] {
            assert_ne!(name, other);
        }
    }
}
