//! Keptn's metrics, read through the Kubernetes API as Flagger reads them. The query is
//! `keptnmetric/<namespace>/<name>` (the value is the KeptnMetric's `status.value`) or
//! `analysis/<namespace>/<definition>/<duration>/<key=value;...>` (an Analysis of that
//! AnalysisDefinition over the recent `<duration>` is created, waited for, and deleted: 1 when it
//! passed, 0 when it did not). The namespace must be the template's or the Canary's, so a template
//! cannot read another team's metrics.

use super::Failure;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::ApiResource;
use std::collections::BTreeMap;
use std::time::Duration;

/// The API group and version Keptn's metrics are read at.
pub const API_VERSION: &str = "metrics.keptn.sh/v1beta1";

/// How long an Analysis may take to complete (Flagger's wait).
pub const ANALYSIS_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a created Analysis is looked at until it completes.
pub const ANALYSIS_POLL: Duration = Duration::from_secs(1);

/// The most `key=value` arguments an Analysis query may pass.
pub const MAX_ARGUMENTS: usize = 32;

/// How long one API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What a Keptn query reads.
#[derive(Clone, Debug, PartialEq)]
pub enum KeptnQuery {
    /// The value of a KeptnMetric.
    Metric {
        /// The KeptnMetric's namespace.
        namespace: String,
        /// The KeptnMetric's name.
        name: String,
    },
    /// The verdict of an Analysis made for the query.
    Analysis {
        /// Where the AnalysisDefinition is and the Analysis is made.
        namespace: String,
        /// The AnalysisDefinition's name.
        definition: String,
        /// The recent timeframe analysed, e.g. `5m`.
        duration: String,
        /// The arguments of the definition's templates.
        args: BTreeMap<String, String>,
    },
}

impl KeptnQuery {
    /// The namespace the query reads in.
    pub fn namespace(&self) -> &str {
        match self {
            KeptnQuery::Metric { namespace, .. } | KeptnQuery::Analysis { namespace, .. } => {
                namespace
            }
        }
    }
}

const FORMAT: &str = "write keptnmetric/<namespace>/<name> or analysis/<namespace>/<analysis definition>/<duration>/<key=value;...>";

/// Parses a query as Flagger does: lower-cased and trimmed, split at `/`; an Analysis's duration
/// defaults to `1m` and its arguments are `key=value` pairs separated by `;`.
pub fn parse(query: &str) -> Result<KeptnQuery, Failure> {
    let query = query.trim().to_lowercase();
    let parts: Vec<&str> = query.split('/').collect();
    if parts.len() < 3 {
        return Err(Failure::Setting(format!(
            "spec.query {query:?} is not a Keptn query; {FORMAT}"
        )));
    }
    let namespace = dns_name(parts[1], "namespace", 63)?;
    let name = dns_name(parts[2], "name", 253)?;
    match parts[0] {
        "keptnmetric" | "keptnmetrics" if parts.len() == 3 => {
            Ok(KeptnQuery::Metric { namespace, name })
        }
        "keptnmetric" | "keptnmetrics" => Err(Failure::Setting(format!(
            "spec.query {query:?} has more than a namespace and a name after keptnmetric; {FORMAT}"
        ))),
        "analysis" | "analyses" => {
            let duration = parts.get(3).copied().unwrap_or("1m").to_string();
            serin_api::duration::parse_go_duration(&duration).map_err(|e| {
                Failure::Setting(format!(
                    "spec.query: the Analysis duration {duration:?} is not a duration ({e}); write one such as 5m"
                ))
            })?;
            let mut args = BTreeMap::new();
            for pair in parts.get(4).copied().unwrap_or_default().split(';') {
                // Flagger skips what is not one key=value pair; so does Serin.
                if let [key, value] = pair.split('=').collect::<Vec<_>>()[..] {
                    args.insert(key.to_string(), value.to_string());
                }
            }
            if args.len() > MAX_ARGUMENTS || parts.len() > 5 {
                return Err(Failure::Setting(format!(
                    "spec.query passes more than {MAX_ARGUMENTS} arguments or more than five parts; {FORMAT}"
                )));
            }
            Ok(KeptnQuery::Analysis {
                namespace,
                definition: name,
                duration,
                args,
            })
        }
        other => Err(Failure::Setting(format!(
            "spec.query reads {other:?}, which is not a Keptn resource; {FORMAT}"
        ))),
    }
}

fn dns_name(text: &str, what: &str, max: usize) -> Result<String, Failure> {
    let valid = !text.is_empty()
        && text.len() <= max
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !text.starts_with(['-', '.'])
        && !text.ends_with(['-', '.']);
    if valid {
        Ok(text.to_string())
    } else {
        Err(Failure::Setting(format!(
            "spec.query: {text:?} is not a Kubernetes {what}; {FORMAT}"
        )))
    }
}

/// Refuses a query reading outside `template_namespace` and `canary_namespace`.
pub fn within_reach(
    query: &KeptnQuery,
    template_namespace: &str,
    canary_namespace: &str,
) -> Result<(), Failure> {
    let namespace = query.namespace();
    if namespace == template_namespace || namespace == canary_namespace {
        return Ok(());
    }
    Err(Failure::Setting(format!(
        "spec.query reads Keptn objects in the namespace {namespace}, but a template may read only its own namespace ({template_namespace}) or the Canary's ({canary_namespace}); use {{{{ namespace }}}}"
    )))
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "metrics.keptn.sh".into(),
        version: "v1beta1".into(),
        api_version: API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// What an API error means for the template's author.
fn api_failure(error: kube::Error, what: &str, namespace: &str) -> Failure {
    match error {
        kube::Error::Api(status) if status.code == 404 => Failure::Setting(format!(
            "{what} was not found: create it, or fix spec.query (is Keptn's metrics operator installed, with its metrics.keptn.sh CRDs?)"
        )),
        kube::Error::Api(status) if status.code == 403 => Failure::Setting(format!(
            "the operator may not use {what} in {namespace} ({}): grant it get, create and delete on metrics.keptn.sh keptnmetrics and analyses",
            status.message
        )),
        other => Failure::Transport(format!(
            "{what}: the Kubernetes API failed: {}",
            crate::transport::causes(&other)
        )),
    }
}

async fn bounded<T>(
    call: impl Future<Output = Result<T, kube::Error>>,
    what: &str,
    namespace: &str,
) -> Result<T, Failure> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| {
            Failure::Transport(format!(
                "{what}: the Kubernetes API did not answer within {CALL_TIMEOUT:?}"
            ))
        })?
        .map_err(|e| api_failure(e, what, namespace))
}

/// Reads `query` through `client`.
pub async fn read(client: &kube::Client, query: &KeptnQuery) -> Result<f64, Failure> {
    read_within(client, query, ANALYSIS_TIMEOUT).await
}

/// Reads `query` through `client`, waiting at most `analysis_timeout` for an Analysis.
pub async fn read_within(
    client: &kube::Client,
    query: &KeptnQuery,
    analysis_timeout: Duration,
) -> Result<f64, Failure> {
    match query {
        KeptnQuery::Metric { namespace, name } => {
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                namespace,
                &resource("KeptnMetric", "keptnmetrics"),
            );
            let what = format!("KeptnMetric {namespace}/{name}");
            let metric = bounded(api.get(name), &what, namespace).await?;
            metric_value(&metric.data, &what)
        }
        KeptnQuery::Analysis {
            namespace,
            definition,
            duration,
            args,
        } => {
            analyse(
                client,
                namespace,
                definition,
                (duration, args),
                analysis_timeout,
            )
            .await
        }
    }
}

/// The value of a KeptnMetric: its `status.value`, a number written as a string. No value yet is
/// no data.
pub fn metric_value(object: &serde_json::Value, what: &str) -> Result<f64, Failure> {
    match &object["status"]["value"] {
        serde_json::Value::String(text) if !text.trim().is_empty() => {
            text.trim().parse::<f64>().map_err(|_| {
                Failure::Answer(format!(
                    "{what} has status.value {:?}, which is not a number",
                    serin_api::limits::cut_to(text, 80)
                ))
            })
        }
        _ => Err(Failure::NoValues),
    }
}

/// The verdict of a completed Analysis: 1 passed, 0 failed; `None` while it runs.
pub fn analysis_verdict(object: &serde_json::Value) -> Option<f64> {
    let status = &object["status"];
    if status["state"].as_str() != Some("Completed") {
        return None;
    }
    status["pass"]
        .as_bool()
        .map(|passed| if passed { 1.0 } else { 0.0 })
}

async fn analyse(
    client: &kube::Client,
    namespace: &str,
    definition: &str,
    (duration, args): (&str, &BTreeMap<String, String>),
    timeout: Duration,
) -> Result<f64, Failure> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource("Analysis", "analyses"));
    let mut prefix = definition.to_string();
    prefix.truncate(40);
    let name = format!(
        "{}-{}",
        prefix.trim_end_matches(['-', '.']),
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let analysis: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "Analysis",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "serin"}},
        "spec": {"analysisDefinition": {"name": definition},
                 "timeframe": {"recent": duration}, "args": args},
    }))
    .map_err(|e| Failure::Setting(format!("the Analysis cannot be written: {e}")))?;
    let what = format!("the Analysis of AnalysisDefinition {namespace}/{definition}");
    bounded(
        api.create(&PostParams::default(), &analysis),
        &what,
        namespace,
    )
    .await?;
    let verdict = tokio::time::timeout(timeout, async {
        loop {
            tokio::time::sleep(ANALYSIS_POLL).await;
            let current = bounded(api.get(&name), &what, namespace).await?;
            if let Some(verdict) = analysis_verdict(&current.data) {
                return Ok(verdict);
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        Err(Failure::Transport(format!(
            "{what} did not complete within {timeout:?}: is Keptn's metrics operator running?"
        )))
    });
    if let Err(error) = bounded(
        api.delete(&name, &DeleteParams::default()),
        &what,
        namespace,
    )
    .await
    {
        tracing::warn!(analysis = %name, %namespace, ?error, "the Keptn Analysis could not be deleted");
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_read_as_flagger_reads_them() {
        assert_eq!(
            parse(" KeptnMetric/Test/podinfo-errors\n"),
            Ok(KeptnQuery::Metric {
                namespace: "test".into(),
                name: "podinfo-errors".into()
            })
        );
        assert_eq!(
            parse("analysis/test/podinfo-slo"),
            Ok(KeptnQuery::Analysis {
                namespace: "test".into(),
                definition: "podinfo-slo".into(),
                duration: "1m".into(),
                args: BTreeMap::new()
            })
        );
        assert_eq!(
            parse("analyses/test/podinfo-slo/5m/workload=podinfo;skipped;a=b=c;env=prod"),
            Ok(KeptnQuery::Analysis {
                namespace: "test".into(),
                definition: "podinfo-slo".into(),
                duration: "5m".into(),
                args: BTreeMap::from([
                    ("env".into(), "prod".into()),
                    ("workload".into(), "podinfo".into())
                ])
            })
        );
    }

    #[test]
    fn a_bad_query_names_the_format() {
        let error = |q: &str| match parse(q) {
            Err(Failure::Setting(text)) => text,
            other => panic!("{other:?}"),
        };
        assert!(error("keptnmetric/test").contains("write keptnmetric/<namespace>/<name>"));
        assert!(error("pods/test/x").contains("\"pods\", which is not a Keptn resource"));
        assert!(error("keptnmetric/../x").contains("not a Kubernetes namespace"));
        assert!(error("keptnmetric/test/a?b").contains("not a Kubernetes name"));
        assert!(error("analysis/test/slo/soon").contains("not a duration"));
        let many: Vec<String> = (0..40).map(|i| format!("k{i}=v")).collect();
        assert!(
            error(&format!("analysis/test/slo/1m/{}", many.join(";")))
                .contains("more than 32 arguments")
        );
    }

    #[test]
    fn a_template_reads_only_its_namespace_or_the_canarys() {
        let query = parse("keptnmetric/payments/errors").unwrap();
        assert_eq!(within_reach(&query, "payments", "shop"), Ok(()));
        assert_eq!(within_reach(&query, "flagger-system", "payments"), Ok(()));
        assert!(matches!(
            within_reach(&query, "shop", "shop"),
            Err(Failure::Setting(m)) if m.contains("namespace payments") && m.contains("{{ namespace }}")
        ));
    }

    #[test]
    fn values_and_verdicts() {
        let metric = |value: serde_json::Value| {
            metric_value(&serde_json::json!({"status": value}), "KeptnMetric test/x")
        };
        assert_eq!(metric(serde_json::json!({"value": "0.25"})), Ok(0.25));
        assert_eq!(metric(serde_json::json!({})), Err(Failure::NoValues));
        assert!(matches!(metric(serde_json::json!({"value": "n/a"})),
            Err(Failure::Answer(m)) if m.contains("\"n/a\", which is not a number")));
        let verdict =
            |status: serde_json::Value| analysis_verdict(&serde_json::json!({"status": status}));
        assert_eq!(verdict(serde_json::json!({"state": "Progressing"})), None);
        assert_eq!(
            verdict(serde_json::json!({"state": "Completed", "pass": true})),
            Some(1.0)
        );
        assert_eq!(
            verdict(serde_json::json!({"state": "Completed", "pass": false})),
            Some(0.0)
        );
    }
}
