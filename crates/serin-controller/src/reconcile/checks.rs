//! The checks decide asks for — a metric read from Prometheus (the operator's metrics server, the
//! Canary's `metricsServer`, or a MetricTemplate's provider) or a webhook call — run outside the
//! reconcile: a tick that needs one starts it in the namespace's budget and ends without writing;
//! when it finishes, the Canary is reconciled again and the next tick finds its outcome. A hook
//! that takes minutes holds its own Canary, never a reconcile slot another Canary needs.
//!
//! The outcomes of one decision form a round, tied to the Canary as it was read (its
//! resourceVersion): a change of the Canary starts a new round, and a finished tick ends it, so
//! an outcome is used by the tick that asked for it and never by a later interval's.

use super::{Shared, Tick};
use crate::budget::BudgetFull;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use serin_api::{AnalysisMetric, AnalysisPhase, StepAnalysis};
use serin_api::{Canary, CanaryMetric, MetricTemplate};
use serin_core::plan::{Check, Measurement, MetricReading, Outcome};
use serin_metrics::{ClientOptions, MetricInputs, PrometheusClient, QueryContext};
use serin_router::Names;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a check may run before the Canary's status says what it waits for.
const SLOW_CHECK_NOTICE: Duration = Duration::from_secs(10);

/// The outcomes gathered for one decision of one Canary.
struct Round {
    id: u64,
    /// The Canary's resourceVersion when the round started (or when this operator last wrote it).
    version: String,
    outcomes: HashMap<Check, Outcome>,
    /// The checks under way: when each started, and whether the status said it is slow.
    running: HashMap<Check, (Instant, bool)>,
}

/// What a tick learns about a check it needs.
pub(super) enum Progress {
    /// The check ran in this round: its outcome.
    Done(Outcome),
    /// The check runs (or waits for a place in its namespace); the Canary is reconciled again
    /// when it ends.
    Running {
        /// How long it has run, the first time that is longer than the status should be silent
        /// about.
        slow: Option<Duration>,
        /// When to look again if its end has not woken the Canary by then.
        look_again: Duration,
    },
}

/// When a tick waiting for a check looks again if the check's end did not wake it.
const CHECK_BACKSTOP: Duration = Duration::from_secs(30);

/// The rounds of every Canary with checks under way, and the channel that asks for a reconcile
/// when one ends.
pub(crate) struct CheckRuns {
    rounds: std::sync::Mutex<HashMap<(String, String), Round>>,
    next_round: AtomicU64,
    wake: futures::channel::mpsc::UnboundedSender<ObjectRef<Canary>>,
}

impl CheckRuns {
    /// Check runs whose endings are sent to `wake` (the controller's reconcile trigger).
    pub(crate) fn new(wake: futures::channel::mpsc::UnboundedSender<ObjectRef<Canary>>) -> Self {
        CheckRuns {
            rounds: Default::default(),
            next_round: AtomicU64::new(1),
            wake,
        }
    }

    /// Ends the round of `key` (the Canary's tick is done: its next decision asks afresh).
    pub(super) fn finish(&self, key: &(String, String)) {
        self.rounds.lock().expect("never poisoned").remove(key);
    }

    /// Keeps the round of `key` for the Canary's next version: this operator wrote `from` into
    /// `to` (a status message about a slow check), which changes nothing the checks depend on.
    pub(super) fn carry_over(&self, key: &(String, String), from: &str, to: &str) {
        if let Some(round) = self
            .rounds
            .lock()
            .expect("never poisoned")
            .get_mut(key)
            .filter(|r| r.version == from)
        {
            round.version = to.to_string();
        }
    }

    /// Drops the rounds of Canaries for which `keep` is false (they are gone).
    pub(super) fn forget_unless(&self, keep: impl Fn(&(String, String)) -> bool) {
        self.rounds
            .lock()
            .expect("never poisoned")
            .retain(|key, _| keep(key));
    }

    fn deliver(&self, canary: &ObjectRef<Canary>, round: u64, check: Check, outcome: Outcome) {
        let key = (
            canary.namespace.clone().unwrap_or_default(),
            canary.name.clone(),
        );
        {
            let mut rounds = self.rounds.lock().expect("never poisoned");
            // A round that ended or was replaced meanwhile has no use for it.
            let Some(current) = rounds.get_mut(&key).filter(|r| r.id == round) else {
                return;
            };
            current.running.remove(&check);
            current.outcomes.insert(check, outcome);
        }
        let _ = self.wake.unbounded_send(canary.clone());
    }
}

/// The values of a query's placeholders for the Canary `canary` (its JSON form) in `namespace`.
pub(super) fn query_context(canary: &serde_json::Value, namespace: &str) -> QueryContext {
    let names = Names::of(canary);
    let target = canary["spec"]["targetRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let or_target = |field: &str| {
        canary["spec"][field]["name"]
            .as_str()
            .map_or_else(|| target.clone(), String::from)
    };
    QueryContext {
        name: canary["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .into(),
        namespace: namespace.to_string(),
        service: names.apex,
        ingress: or_target("ingressRef"),
        route: or_target("routeRef"),
        target,
        ..QueryContext::default()
    }
}

impl Tick<'_> {
    /// The outcome of `check` in this Canary's round, starting it when it has not run yet.
    pub(super) fn check(&self, shared: &Shared, canary: &Arc<Canary>, check: &Check) -> Progress {
        let runs = &shared.checks;
        let version = canary.resource_version().unwrap_or_default();
        let round = {
            let mut rounds = runs.rounds.lock().expect("never poisoned");
            let round = rounds
                .entry(self.canary_key.clone())
                .or_insert_with(|| Round {
                    id: 0,
                    version: String::new(),
                    outcomes: HashMap::new(),
                    running: HashMap::new(),
                });
            if round.id == 0 || round.version != version {
                *round = Round {
                    id: runs.next_round.fetch_add(1, Ordering::Relaxed),
                    version,
                    outcomes: HashMap::new(),
                    running: HashMap::new(),
                };
            }
            if let Some(outcome) = round.outcomes.get(check) {
                return Progress::Done(outcome.clone());
            }
            if let Some((started, announced)) = round.running.get_mut(check) {
                let elapsed = started.elapsed();
                if *announced {
                    return Progress::Running {
                        slow: None,
                        look_again: CHECK_BACKSTOP,
                    };
                }
                if elapsed < SLOW_CHECK_NOTICE {
                    return Progress::Running {
                        slow: None,
                        look_again: SLOW_CHECK_NOTICE - elapsed,
                    };
                }
                *announced = true;
                return Progress::Running {
                    slow: Some(elapsed),
                    look_again: CHECK_BACKSTOP,
                };
            }
            round.running.insert(check.clone(), (Instant::now(), false));
            round.id
        };
        let job = self.prepare(canary, check);
        let ctx = shared.ctx.clone();
        let checks = shared.checks.clone();
        let reference = ObjectRef::from_obj(&**canary);
        let check_run = check.clone();
        let work = tracing::Instrument::instrument(
            async move {
                let outcome = job.run(&ctx).await;
                checks.deliver(&reference, round, check_run, outcome);
            },
            tracing::Span::current(),
        );
        if let Err(BudgetFull { namespace, limit }) = shared.budgets.spawn(&self.namespace, work) {
            // The check cannot even wait for a place: it fails now, as a check that ran and failed.
            let message = format!(
                "namespace {namespace} already has {limit} webhook calls and metric queries waiting or running; this check was not started"
            );
            let outcome = match check {
                Check::Metric { .. } => Outcome::Metric(MetricReading::Error(message)),
                Check::Measure { .. } => Outcome::Measurement(Measurement {
                    phase: AnalysisPhase::Error,
                    value: None,
                    message: Some(message),
                }),
                Check::Hook { .. } => Outcome::HookUnanswered(message),
            };
            let mut rounds = runs.rounds.lock().expect("never poisoned");
            if let Some(current) = rounds.get_mut(&self.canary_key) {
                current.running.remove(check);
            }
            return Progress::Done(outcome);
        }
        Progress::Running {
            slow: None,
            look_again: SLOW_CHECK_NOTICE,
        }
    }

    /// Everything running `check` needs, read from the caches now, so the run owns its inputs.
    fn prepare(&self, canary: &Arc<Canary>, check: &Check) -> Job {
        if let Check::Measure { step, name } = check {
            return self.prepare_measurement(canary, *step, name);
        }
        let Check::Metric { name } = check else {
            return Job::Hook {
                canary: canary.clone(),
                check: check.clone(),
            };
        };
        let metric = canary
            .spec
            .analysis()
            .and_then(|a| a.every_metric().find(|m| &m.name == name));
        let Some(metric) = metric else {
            return Job::Done(Outcome::Metric(MetricReading::Error(format!(
                "metric {name} is not in analysis.metrics"
            ))));
        };
        let (template, secret, server) =
            match self.query_inputs(canary, metric.template_ref.as_ref()) {
                Ok(inputs) => inputs,
                Err(message) => return Job::Done(Outcome::Metric(MetricReading::Error(message))),
            };
        Job::Metric(Box::new(MetricJob {
            metric: metric.clone(),
            query: self.query_job(template, secret, server),
        }))
    }

    /// A query's inputs, owned by the run.
    fn query_job(
        &self,
        template: Option<Arc<MetricTemplate>>,
        secret: Option<BTreeMap<String, String>>,
        server: Option<PrometheusClient>,
    ) -> QueryJob {
        QueryJob {
            context: query_context(&self.canary, &self.namespace),
            template,
            secret,
            server,
            provider: self.canary["spec"]["provider"]
                .as_str()
                .unwrap_or("istio")
                .to_string(),
        }
    }
}

/// What a query reads besides the metric: its MetricTemplate, the decoded Secret the template's
/// provider names, and the Canary's own `metricsServer`.
type QueryInputs = (
    Option<Arc<MetricTemplate>>,
    Option<BTreeMap<String, String>>,
    Option<PrometheusClient>,
);

impl Tick<'_> {
    /// The inputs of a query of `canary` through `template_ref`, from the caches; an unusable
    /// `metricsServer` is an error naming it.
    fn query_inputs(
        &self,
        canary: &Canary,
        template_ref: Option<&serin_api::CrossNamespaceObjectReference>,
    ) -> Result<QueryInputs, String> {
        let template = template_ref.and_then(|reference| {
            self.caches
                .metric_template(reference.namespace_or(&self.namespace), &reference.name)
        });
        let secret = template.as_ref().and_then(|template| {
            let reference = template.spec.provider.secret_ref.as_ref()?;
            let namespace = template.namespace().unwrap_or(self.namespace.clone());
            self.caches.secret_text(&namespace, &reference.name)
        });
        let server = match canary.spec.metrics_server.as_deref() {
            Some(address) => Some(
                self.ctx
                    .prometheus_clients
                    .client(address, ClientOptions::default())
                    .map_err(|e| format!("spec.metricsServer: {e}"))?,
            ),
            None => None,
        };
        Ok((template, secret, server))
    }

    /// Everything one measurement of metric `name` of the analysis at step `step` (the background
    /// analysis for `None`) needs.
    fn prepare_measurement(&self, canary: &Arc<Canary>, step: Option<usize>, name: &str) -> Job {
        let error = |message: String| {
            Job::Done(Outcome::Measurement(Measurement {
                phase: AnalysisPhase::Error,
                value: None,
                message: Some(message),
            }))
        };
        let field = match step {
            Some(index) => format!("spec.analysis.steps[{index}].analysis"),
            None => "spec.analysis.backgroundAnalysis".to_string(),
        };
        let analysis = canary.spec.analysis().and_then(|a| a.analysis_at(step));
        let Some(analysis) = analysis else {
            return error(format!("{field} is not an analysis"));
        };
        let Some(metric) = analysis.metrics.iter().find(|m| m.name == name) else {
            return error(format!("metric {name} is not in {field}.metrics"));
        };
        let args = match self.analysis_args(canary, &field, analysis) {
            Ok(args) => args,
            Err(message) => return error(message),
        };
        let (template, secret, server) =
            match self.query_inputs(canary, metric.template_ref.as_ref()) {
                Ok(inputs) => inputs,
                Err(message) => return error(message),
            };
        if let Some(template) = template.as_ref().filter(|t| t.spec.provider.type_ == "job") {
            return self.prepare_job_metric(canary, step, metric, template, args);
        }
        Job::Measure(Box::new(MeasureJob {
            metric: metric.clone(),
            args,
            query: self.query_job(template, secret, server),
        }))
    }

    /// The Job a `job` metric runs for its next measurement: the template's Job spec with its
    /// placeholders filled in, named for the measurement, owned by the Canary.
    fn prepare_job_metric(
        &self,
        canary: &Canary,
        step: Option<usize>,
        metric: &AnalysisMetric,
        template: &MetricTemplate,
        args: BTreeMap<String, String>,
    ) -> Job {
        let error = |message: String| {
            Job::Done(Outcome::Measurement(Measurement {
                phase: AnalysisPhase::Error,
                value: None,
                message: Some(message),
            }))
        };
        if !self.ctx.job_metrics {
            return error(
                "job metrics are turned off in this operator; its administrator turns them on with --allow-job-metrics (Helm: jobMetrics.enabled)".into(),
            );
        }
        let Some(job) = &template.spec.provider.job else {
            return error("the MetricTemplate has no provider.job".into());
        };
        let mut context = query_context(&self.canary, &self.namespace);
        context.args = args;
        context.variables = metric.template_variables.clone().unwrap_or_default();
        context.interval = metric.interval.clone().unwrap_or_else(|| "1m".into());
        let spec = match render_strings(&job.spec, &context) {
            Ok(spec) => spec,
            Err(e) => {
                return error(format!(
                    "the Job spec of MetricTemplate {}: {e}",
                    template.name_any()
                ));
            }
        };
        let status = canary.status.clone().unwrap_or_default();
        let taken = status
            .analysis_runs
            .iter()
            .rev()
            .find(|r| {
                r.revision == status.last_applied_spec
                    && match step {
                        Some(i) => r.step == Some(i as i32),
                        None => r.step.is_none() && r.name == "background",
                    }
            })
            .and_then(|r| r.metrics.iter().find(|m| m.name == metric.name))
            .map_or(0, |m| m.count);
        let release = status
            .release_started_at
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let name = crate::job_metric::job_name(
            (
                &canary.name_any(),
                canary.metadata.uid.as_deref().unwrap_or_default(),
            ),
            &release,
            step,
            &metric.name,
            taken + 1,
        );
        let owner = json!({
            "apiVersion": serin_api::api_version(), "kind": "Canary", "name": canary.name_any(),
            "uid": canary.metadata.uid, "controller": false, "blockOwnerDeletion": false,
        });
        let limit = crate::job_metric::wait_limit(&spec);
        let job = crate::job_metric::job_object(
            &name,
            &self.namespace,
            owner,
            job.metadata.as_ref(),
            &canary.name_any(),
            &metric.name,
            spec,
        );
        Job::Batch(Box::new(crate::job_metric::JobRun { job, limit }))
    }

    /// The values of the args of the analysis at `step`: given, read from a Secret of the
    /// Canary's namespace, or a revision (`Stable`: the promoted one; `Latest`: the one analysed).
    fn analysis_args(
        &self,
        canary: &Canary,
        base: &str,
        analysis: &StepAnalysis,
    ) -> Result<BTreeMap<String, String>, String> {
        let status = canary.status.clone().unwrap_or_default();
        let mut args = BTreeMap::new();
        for (i, arg) in analysis.args.iter().flatten().enumerate() {
            let field = format!("{base}.args[{i}]");
            let from = arg.value_from.as_ref();
            let value = match (&arg.value, from.and_then(|f| f.secret_key_ref.as_ref())) {
                (Some(value), _) => value.clone(),
                (None, Some(reference)) => self
                    .caches
                    .secret_text(&self.namespace, &reference.name)
                    .ok_or_else(|| {
                        format!(
                            "{field}.valueFrom.secretKeyRef: Secret {} not found in namespace {}; create it",
                            reference.name, self.namespace
                        )
                    })?
                    .remove(&reference.key)
                    .ok_or_else(|| {
                        format!(
                            "{field}.valueFrom.secretKeyRef: Secret {} has no text key {:?}; add it",
                            reference.name, reference.key
                        )
                    })?,
                (None, None) => match from.and_then(|f| f.pod_template_hash_value.as_deref()) {
                    Some("Stable") => status.last_promoted_spec.clone().unwrap_or_default(),
                    Some(_) => status.last_applied_spec.clone().unwrap_or_default(),
                    None => return Err(format!("{field}: no value; set value or valueFrom")),
                },
            };
            args.insert(arg.name.clone(), value);
        }
        Ok(args)
    }
}

/// What the status says while `check` has run for `elapsed`: what it waits for and the most it
/// may take.
pub(super) fn slow_check_message(canary: &Canary, check: &Check, elapsed: Duration) -> String {
    let waited = elapsed.as_secs();
    match check {
        Check::Hook {
            name, hook_type, ..
        } => {
            let hook = canary
                .spec
                .analysis()
                .and_then(|a| a.every_webhook().find(|h| &h.name == name));
            let timeout = hook
                .and_then(|h| serin_webhooks::hook::hook_timeout(h).ok())
                .map_or_else(String::new, |t| format!("{}s", t.as_secs()));
            let retries = hook.and_then(|h| h.retries).unwrap_or(0);
            format!(
                "waiting {waited}s for the {hook_type} webhook {name}, which may take up to {timeout} per attempt (spec.analysis.webhooks[].timeout, at most {}s) with {retries} retries, and at most {}s in all",
                serin_api::limits::MAX_WEBHOOK_TIMEOUT.as_secs(),
                serin_api::limits::MAX_WEBHOOK_CALL.as_secs()
            )
        }
        Check::Measure { step, name } => format!(
            "waiting {waited}s for metric {name} of {}: its namespace's other checks take all {} places, or its backend is slow",
            step.map_or_else(
                || "the background analysis".to_string(),
                |i| format!("the analysis at steps[{i}]")
            ),
            serin_api::limits::MAX_CHECKS_IN_FLIGHT_PER_NAMESPACE,
        ),
        Check::Metric { name } => format!(
            "waiting {waited}s for metric {name}: its namespace's other checks take all {} places, or its metrics server is slow (at most {}s per attempt)",
            serin_api::limits::MAX_CHECKS_IN_FLIGHT_PER_NAMESPACE,
            serin_metrics::prometheus::QUERY_TIMEOUT.as_secs()
        ),
    }
}

/// A check ready to run on its own.
enum Job {
    /// Known without running anything (the metric is gone from the Canary, say).
    Done(Outcome),
    /// A webhook call.
    Hook { canary: Arc<Canary>, check: Check },
    /// A metric query.
    Metric(Box<MetricJob>),
    /// A measurement of an analysis step's metric.
    Measure(Box<MeasureJob>),
    /// A measurement by a job metric: runs its Job to the end.
    Batch(Box<crate::job_metric::JobRun>),
}

/// `value` with every string's placeholders filled in from `context` (a Job spec's command, args
/// and env name the args as queries do).
fn render_strings(
    value: &serde_json::Value,
    context: &QueryContext,
) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    Ok(match value {
        Value::String(text) if text.contains("{{") => {
            Value::String(serin_metrics::render(text, context).map_err(|e| e.to_string())?)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| render_strings(v, context))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| Ok((k.clone(), render_strings(v, context)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

/// A measurement and what it reads: the query's inputs, the metric and the args.
struct MeasureJob {
    metric: AnalysisMetric,
    args: BTreeMap<String, String>,
    query: QueryJob,
}

/// A metric query and what it reads.
struct MetricJob {
    metric: CanaryMetric,
    query: QueryJob,
}

/// What a query reads besides its metric: the placeholders' values, the template and its
/// Secret, the Canary's own `metricsServer` (when it names one) and its routing provider.
struct QueryJob {
    context: QueryContext,
    template: Option<Arc<MetricTemplate>>,
    secret: Option<BTreeMap<String, String>>,
    server: Option<PrometheusClient>,
    provider: String,
}

impl QueryJob {
    fn inputs<'a>(&'a self, ctx: &'a super::Context) -> MetricInputs<'a> {
        MetricInputs {
            context: self.context.clone(),
            template: self.template.as_deref(),
            secret: self.secret.as_ref(),
            metrics_server: self.server.as_ref().unwrap_or(&ctx.metrics_server),
            clients: &ctx.prometheus_clients,
            provider: &self.provider,
        }
    }
}

impl Job {
    async fn run(self, ctx: &super::Context) -> Outcome {
        match self {
            Job::Done(outcome) => outcome,
            Job::Hook { canary, check } => match ctx.webhooks.run_check(&canary, &check).await {
                Some(verdict) => verdict.outcome,
                None => Outcome::Hook(Err("the check is not a webhook".into())),
            },
            Job::Metric(job) => {
                Outcome::Metric(serin_metrics::read(&job.metric, job.query.inputs(ctx)).await)
            }
            Job::Batch(run) => Outcome::Measurement(
                crate::job_metric::measure_with_job(ctx.client.clone(), *run).await,
            ),
            Job::Measure(job) => Outcome::Measurement(
                serin_metrics::measure(&job.metric, job.query.inputs(ctx), &job.args).await,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(id: u64, version: &str, check: &Check) -> Round {
        Round {
            id,
            version: version.into(),
            outcomes: HashMap::new(),
            running: HashMap::from([(check.clone(), (Instant::now(), false))]),
        }
    }

    #[test]
    fn an_outcome_reaches_only_the_round_that_started_it_and_wakes_its_canary() {
        let (wake, mut woken) = futures::channel::mpsc::unbounded();
        let runs = CheckRuns::new(wake);
        let key = ("test".to_string(), "podinfo".to_string());
        let canary = ObjectRef::<Canary>::new("podinfo").within("test");
        let check = Check::Metric {
            name: "request-success-rate".into(),
        };
        let value = Outcome::Metric(MetricReading::Value(99.5));
        runs.rounds
            .lock()
            .unwrap()
            .insert(key.clone(), round(2, "10", &check));

        // A round replaced meanwhile (the Canary changed) has no use for the old check's outcome.
        runs.deliver(&canary, 1, check.clone(), value.clone());
        assert!(runs.rounds.lock().unwrap()[&key].outcomes.is_empty());
        assert!(woken.try_recv().is_err(), "no reconcile for nothing");

        runs.deliver(&canary, 2, check.clone(), value.clone());
        let rounds = runs.rounds.lock().unwrap();
        assert_eq!(rounds[&key].outcomes.get(&check), Some(&value));
        assert!(rounds[&key].running.is_empty());
        drop(rounds);
        assert_eq!(woken.try_recv().unwrap(), canary);
    }

    #[test]
    fn the_operators_own_note_keeps_the_round_and_a_finished_tick_ends_it() {
        let (wake, _woken) = futures::channel::mpsc::unbounded();
        let runs = CheckRuns::new(wake);
        let key = ("test".to_string(), "podinfo".to_string());
        let check = Check::Metric { name: "m".into() };
        runs.rounds
            .lock()
            .unwrap()
            .insert(key.clone(), round(1, "10", &check));
        runs.carry_over(&key, "9", "11");
        assert_eq!(
            runs.rounds.lock().unwrap()[&key].version,
            "10",
            "not from 9"
        );
        runs.carry_over(&key, "10", "11");
        assert_eq!(runs.rounds.lock().unwrap()[&key].version, "11");
        runs.finish(&key);
        assert!(runs.rounds.lock().unwrap().is_empty());
    }
}
