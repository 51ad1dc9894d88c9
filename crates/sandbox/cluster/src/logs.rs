//! Pods' logs (`kubectl logs`): the lines each container's process wrote, kept per pod by the
//! runtime, and the `pods/NAME/log` endpoint that serves them as the kubelet does.

use axum::body::Body;
use bytes::Bytes;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
pub use serin_sandbox_apiserver::kubelet::LogOptions;
use serin_sandbox_apiserver::status::ApiError;
use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, watch};

/// Lines kept per container (the oldest go first), as a bounded stand-in for the kubelet's files.
const KEPT_LINES: usize = 5000;

/// One line a container wrote, with when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// RFC 3339 time with nanoseconds, as `--timestamps` prints it.
    pub at: String,
    /// The line, without its newline.
    pub text: String,
}

#[derive(Default)]
struct Kept {
    current: VecDeque<LogLine>,
    previous: Option<Vec<LogLine>>,
}

/// One container's log: its lines, the previous instance's after a restart, and a feed of new
/// lines for `kubectl logs -f`.
pub struct ContainerLog {
    kept: Mutex<Kept>,
    feed: broadcast::Sender<LogLine>,
    ended: watch::Sender<bool>,
}

impl Default for ContainerLog {
    fn default() -> Self {
        ContainerLog {
            kept: Mutex::default(),
            feed: broadcast::channel(1024).0,
            ended: watch::channel(false).0,
        }
    }
}

impl ContainerLog {
    /// Appends a line (several if `text` has newlines).
    pub fn write(&self, text: &str) {
        let at = Timestamp::now().to_string();
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        for line in text.lines() {
            let line = LogLine {
                at: at.clone(),
                text: line.to_string(),
            };
            if kept.current.len() == KEPT_LINES {
                kept.current.pop_front();
            }
            kept.current.push_back(line.clone());
            let _ = self.feed.send(line);
        }
    }

    /// The container restarted: its lines so far become the previous instance's.
    pub fn restarted(&self) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let lines = std::mem::take(&mut kept.current);
        kept.previous = Some(lines.into());
    }

    /// The container is gone: followers stop.
    pub fn end(&self) {
        let _ = self.ended.send(true);
    }

    fn lines(&self, previous: bool) -> Option<Vec<LogLine>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if previous {
            kept.previous.clone()
        } else {
            Some(kept.current.iter().cloned().collect())
        }
    }
}

/// The logs of one pod, by container name.
#[derive(Default)]
pub struct PodLogs {
    containers: BTreeMap<String, Arc<ContainerLog>>,
}

impl PodLogs {
    /// Empty logs for every container of `pod`.
    pub fn for_pod(pod: &Value) -> Self {
        let containers = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .map(|name| (name.to_string(), Arc::new(ContainerLog::default())))
            .collect();
        PodLogs { containers }
    }

    /// One container's log.
    pub fn container(&self, name: &str) -> Option<Arc<ContainerLog>> {
        self.containers.get(name).cloned()
    }

    /// Every container's log ends (the pod stopped).
    pub fn end(&self) {
        self.containers.values().for_each(|c| c.end());
    }
}

fn render(line: &LogLine, timestamps: bool) -> String {
    if timestamps {
        format!("{} {}\n", line.at, line.text)
    } else {
        format!("{}\n", line.text)
    }
}

/// Answers `GET pods/NAME/log` for `pod`, whose runtime keeps `logs` (none: the containers wrote
/// nothing), with the kubelet's errors for a missing or waiting container.
pub fn serve(
    pod: &Value,
    logs: Option<Arc<PodLogs>>,
    options: &LogOptions,
) -> Result<Body, ApiError> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let container = match &options.container {
        Some(name) if names.contains(&name.as_str()) => name.clone(),
        Some(name) => {
            return Err(ApiError::bad_request(format!(
                "container {name} is not valid for pod {pod_name}"
            )));
        }
        None if names.len() == 1 => names[0].to_string(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    let status = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == container.as_str()));
    let waiting = status.and_then(|s| s["state"]["waiting"]["reason"].as_str());
    let started = matches!(
        pod["status"]["phase"].as_str(),
        Some("Running" | "Succeeded" | "Failed")
    );
    if !started || waiting.is_some() {
        // The kubelet's words for the common reasons.
        let reason = match waiting.unwrap_or("ContainerCreating") {
            "ErrImagePull" | "ImagePullBackOff" => "trying and failing to pull image",
            other => other,
        };
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{pod_name}\" is waiting to start: {reason}"
        )));
    }
    let log = logs.and_then(|l| l.container(&container));
    let lines = match &log {
        Some(log) => log.lines(options.previous),
        None if options.previous => None,
        None => Some(Vec::new()),
    };
    let Some(mut lines) = lines else {
        return Err(ApiError::bad_request(format!(
            "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
        )));
    };
    if let Some(seconds) = options.since_seconds {
        let since = Timestamp::now()
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(seconds as i64))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        lines.retain(|l| l.at.parse::<Timestamp>().is_ok_and(|at| at >= since));
    }
    if let Some(tail) = options.tail_lines {
        let skip = lines.len().saturating_sub(tail);
        lines.drain(..skip);
    }
    let mut text: String = lines
        .iter()
        .map(|l| render(l, options.timestamps))
        .collect();
    if let Some(limit) = options.limit_bytes
        && text.len() > limit
    {
        let mut cut = limit;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        return Ok(Body::from(text));
    }
    let follow = match log {
        Some(log) if options.follow && !options.previous => log,
        _ => return Ok(Body::from(text)),
    };
    // Follow: what is there, then every new line until the container ends or the client leaves.
    let timestamps = options.timestamps;
    let first = futures::stream::once(async move { Ok::<Bytes, Infallible>(Bytes::from(text)) });
    let feed = (follow.feed.subscribe(), follow.ended.subscribe());
    let rest = futures::stream::unfold(feed, move |(mut feed, mut ended)| async move {
        loop {
            tokio::select! {
                line = feed.recv() => match line {
                    Ok(line) => {
                        let chunk = Ok(Bytes::from(render(&line, timestamps)));
                        return Some((chunk, (feed, ended)));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                changed = ended.changed() => {
                    if changed.is_err() || *ended.borrow() {
                        return None;
                    }
                }
            }
        }
    });
    Ok(Body::from_stream(futures::StreamExt::chain(first, rest)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn running_pod() -> Value {
        json!({"metadata": {"name": "web-1"},
            "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}]},
            "status": {"phase": "Running"}})
    }

    async fn text(body: Body) -> String {
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn logs_answer_as_the_kubelet_does() {
        let pod = running_pod();
        let logs = Arc::new(PodLogs::for_pod(&pod));
        let app = logs.container("app").unwrap();
        for n in 1..=5 {
            app.write(&format!("line {n}"));
        }
        let options = LogOptions {
            container: Some("app".into()),
            tail_lines: Some(2),
            ..LogOptions::default()
        };
        let body = serve(&pod, Some(logs.clone()), &options).unwrap();
        assert_eq!(text(body).await, "line 4\nline 5\n");

        let unnamed = serve(&pod, Some(logs.clone()), &LogOptions::default()).unwrap_err();
        assert_eq!(
            unnamed.message,
            "a container name must be specified for pod web-1, choose one of: [app sidecar]"
        );
        let previous = LogOptions {
            container: Some("app".into()),
            previous: true,
            ..LogOptions::default()
        };
        assert_eq!(
            serve(&pod, Some(logs.clone()), &previous)
                .unwrap_err()
                .message,
            "previous terminated container \"app\" in pod \"web-1\" not found"
        );
        app.restarted();
        app.write("after restart");
        assert_eq!(
            text(serve(&pod, Some(logs.clone()), &previous).unwrap())
                .await
                .lines()
                .count(),
            5
        );
        let mut waiting = pod.clone();
        waiting["status"] = json!({"phase": "Pending"});
        assert_eq!(
            serve(&waiting, Some(logs), &options).unwrap_err().message,
            "container \"app\" in pod \"web-1\" is waiting to start: ContainerCreating"
        );
    }
}
