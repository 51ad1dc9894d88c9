//! The built-in load generator: `c` workers, each with its own keep-alive HTTP/1.1 connection,
//! sending requests as fast as the target answers or at `-q` per second, until `-n` requests are
//! done or `-z` (capped by the task timeout) has passed.

use crate::hey::LoadPlan;
use crate::histogram::Histogram;
use crate::proxy::ProxyConfig;
use bytes::Bytes;
use http::header::CONNECTION;
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

/// The most distinct error messages a report keeps; further kinds are counted under
/// [`OTHER_ERRORS`], so a report's size does not depend on what a target answers.
pub const MAX_ERROR_KINDS: usize = 20;

/// Where errors beyond [`MAX_ERROR_KINDS`] kinds are counted.
pub const OTHER_ERRORS: &str = "other errors";

/// Adds `count` errors of kind `error`, a kind beyond the first [`MAX_ERROR_KINDS`] going to
/// [`OTHER_ERRORS`].
fn add_error(errors: &mut BTreeMap<String, u64>, error: String, count: u64) {
    let kinds = errors.len() - usize::from(errors.contains_key(OTHER_ERRORS));
    let key = if kinds < MAX_ERROR_KINDS || errors.contains_key(&error) {
        error
    } else {
        OTHER_ERRORS.to_string()
    };
    *errors.entry(key).or_default() += count;
}

/// What a load run did, in hey's terms.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Requests that finished, with a response or with an error.
    pub requests: u64,
    /// Requests that got a response, whatever its status.
    pub responses: u64,
    /// Responses by status code.
    pub status_counts: BTreeMap<u16, u64>,
    /// Failed requests by error message (connection refused, timeout, ...), at most
    /// [`MAX_ERROR_KINDS`] kinds and [`OTHER_ERRORS`].
    pub errors: BTreeMap<String, u64>,
    /// Response body bytes received.
    pub body_bytes: u64,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// Latency of every finished request, connection setup included (as hey measures it).
    pub latency: Histogram,
    /// True when the run was cut short by the time limit before its `-n` requests were done.
    pub stopped_by_limit: bool,
}

impl LoadReport {
    /// Finished requests per second over the whole run.
    pub fn requests_per_second(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.requests as f64 / seconds
        } else {
            0.0
        }
    }

    /// A hey-style summary: totals, latency distribution, status codes and errors.
    pub fn summary(&self) -> String {
        let secs = |duration: Duration| format!("{:.4} secs", duration.as_secs_f64());
        let mut out = String::new();
        let _ = writeln!(out, "Summary:");
        let _ = writeln!(out, "  Total:\t{}", secs(self.elapsed));
        let _ = writeln!(out, "  Slowest:\t{}", secs(self.latency.slowest()));
        let _ = writeln!(out, "  Fastest:\t{}", secs(self.latency.fastest()));
        let _ = writeln!(out, "  Average:\t{}", secs(self.latency.average()));
        let _ = writeln!(out, "  Requests/sec:\t{:.4}", self.requests_per_second());
        if let Some(per_response) = self.body_bytes.checked_div(self.responses) {
            let _ = writeln!(out, "  Total data:\t{} bytes", self.body_bytes);
            let _ = writeln!(out, "  Size/request:\t{} bytes", per_response);
        }
        if self.latency.count() > 0 {
            let _ = writeln!(out, "\nLatency distribution:");
            for percent in [10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0] {
                let _ = writeln!(
                    out,
                    "  {percent}% in {}",
                    secs(self.latency.percentile(percent))
                );
            }
        }
        if !self.status_counts.is_empty() {
            let _ = writeln!(out, "\nStatus code distribution:");
            for (status, count) in &self.status_counts {
                let _ = writeln!(out, "  [{status}]\t{count} responses");
            }
        }
        if !self.errors.is_empty() {
            let _ = writeln!(out, "\nError distribution:");
            for (error, count) in &self.errors {
                let _ = writeln!(out, "  [{count}]\t{error}");
            }
        }
        if self.stopped_by_limit {
            let _ = writeln!(
                out,
                "\nStopped by the time limit after {}",
                // Whole milliseconds: a run is not timed to the nanosecond.
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(self.elapsed.as_millis()).unwrap_or(u64::MAX)
                ))
            );
        }
        out
    }
}

/// Everything a worker needs to build and send its requests, shared by all workers.
struct Target {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    connect_host: String,
    connect_port: u16,
    request_timeout: Option<Duration>,
    keep_alive: bool,
}

impl Target {
    fn request(&self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// Runs `plan` through `proxy` (when it applies to the target), for at most `limit`.
///
/// Dropping the returned future stops every worker at once.
pub async fn run_load(plan: &LoadPlan, proxy: &ProxyConfig, limit: Duration) -> LoadReport {
    let via_proxy = plan
        .proxy
        .clone()
        .or_else(|| proxy.proxy_for(&plan.host).cloned());
    let (connect_host, connect_port, uri) = match via_proxy {
        // A proxy gets the absolute form, `GET http://host:port/path HTTP/1.1`.
        Some((host, port)) => (host, port, plan.url.clone()),
        None => {
            let origin_form = plan
                .url
                .path_and_query()
                .map(|path| path.as_str())
                .unwrap_or("/")
                .parse()
                .expect("a path taken from a valid URI is a valid URI");
            (plan.host.clone(), plan.port, origin_form)
        }
    };
    let mut headers = plan.headers.clone();
    if plan.disable_keepalive {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    let target = Arc::new(Target {
        method: plan.method.clone(),
        uri,
        headers,
        body: plan.body.clone(),
        connect_host,
        connect_port,
        request_timeout: plan.request_timeout,
        keep_alive: !plan.disable_keepalive,
    });

    let started = Instant::now();
    let run_for = plan.duration.map_or(limit, |duration| duration.min(limit));
    let deadline = started + run_for;
    let per_worker = match plan.duration {
        Some(_) => u64::MAX,
        None => plan.requests / plan.concurrency as u64,
    };
    let mut workers = JoinSet::new();
    for _ in 0..plan.concurrency {
        workers.spawn(run_worker(
            target.clone(),
            per_worker,
            deadline,
            plan.rate_per_worker,
        ));
    }

    let mut report = LoadReport::default();
    let mut statuses = vec![0u64; 1000];
    while let Some(joined) = workers.join_next().await {
        let Ok(worker) = joined else { continue };
        report.requests += worker.requests;
        report.responses += worker.responses;
        report.body_bytes += worker.body_bytes;
        report.latency.merge(&worker.latency);
        for (total, count) in statuses.iter_mut().zip(&worker.statuses) {
            *total += count;
        }
        for (error, count) in worker.errors {
            add_error(&mut report.errors, error, count);
        }
    }
    report.elapsed = started.elapsed();
    report.status_counts = statuses
        .iter()
        .enumerate()
        .filter(|(_, count)| **count > 0)
        .map(|(status, count)| (status as u16, *count))
        .collect();
    report.stopped_by_limit = match plan.duration {
        Some(duration) => duration > limit,
        None => report.requests < per_worker * plan.concurrency as u64,
    };
    report
}

struct WorkerStats {
    requests: u64,
    responses: u64,
    body_bytes: u64,
    statuses: Vec<u64>,
    errors: BTreeMap<String, u64>,
    latency: Histogram,
}

type Connection = Pin<Box<dyn Future<Output = Result<(), hyper::Error>> + Send>>;

struct OpenConnection {
    sender: SendRequest<Full<Bytes>>,
    driver: Connection,
    served: bool,
}

async fn connect(target: &Target) -> Result<OpenConnection, String> {
    let stream = TcpStream::connect((target.connect_host.as_str(), target.connect_port))
        .await
        .map_err(|error| {
            format!(
                "dial tcp {}:{}: {error}",
                target.connect_host, target.connect_port
            )
        })?;
    let _ = stream.set_nodelay(true);
    let (sender, driver) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| format!("handshake: {error}"))?;
    Ok(OpenConnection {
        sender,
        driver: Box::pin(driver),
        served: false,
    })
}

enum Exchange {
    Response {
        status: u16,
        body_bytes: u64,
    },
    Failed(String),
    /// The connection closed before this request was written: a stale keep-alive connection.
    Closed,
}

async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Exchange {
    if sender.ready().await.is_err() {
        return Exchange::Closed;
    }
    let response = match sender.send_request(request).await {
        Ok(response) => response,
        Err(error) if error.is_canceled() || error.is_closed() => return Exchange::Closed,
        Err(error) => return Exchange::Failed(error.to_string()),
    };
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut body_bytes = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => body_bytes += frame.data_ref().map_or(0, |data| data.len() as u64),
            Err(error) => return Exchange::Failed(format!("reading the body: {error}")),
        }
    }
    Exchange::Response { status, body_bytes }
}

async fn run_worker(
    target: Arc<Target>,
    quota: u64,
    deadline: Instant,
    rate: Option<f64>,
) -> WorkerStats {
    let mut stats = WorkerStats {
        requests: 0,
        responses: 0,
        body_bytes: 0,
        statuses: vec![0; 1000],
        errors: BTreeMap::new(),
        latency: Histogram::default(),
    };
    // Like hey's time.Tick: the first request waits one period, and missed ticks are dropped.
    let mut throttle = rate.map(|per_second| {
        let period = Duration::from_secs_f64(1.0 / per_second);
        let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        ticks
    });
    let mut connection: Option<OpenConnection> = None;
    while stats.requests < quota {
        if let Some(ticks) = throttle.as_mut()
            && tokio::time::timeout_at(deadline, ticks.tick())
                .await
                .is_err()
        {
            break;
        }
        let started = Instant::now();
        if started >= deadline {
            break;
        }
        let request_deadline = target
            .request_timeout
            .map_or(deadline, |timeout| (started + timeout).min(deadline));
        let mut retried_stale = false;
        let outcome = loop {
            let mut connection_done = false;
            let open = match connection.as_mut() {
                Some(open) => open,
                None => match tokio::time::timeout_at(request_deadline, connect(&target)).await {
                    Ok(Ok(open)) => connection.insert(open),
                    Ok(Err(error)) => break Exchange::Failed(error),
                    Err(_) if request_deadline >= deadline => return stats,
                    Err(_) => break Exchange::Failed("timeout while connecting".into()),
                },
            };
            let served = open.served;
            let timed_out = || {
                Exchange::Failed(
                    "timeout awaiting response headers (Client.Timeout exceeded)".into(),
                )
            };
            let result = {
                let exchanged = exchange(&mut open.sender, target.request());
                tokio::pin!(exchanged);
                tokio::select! {
                    biased;
                    result = &mut exchanged => Some(result),
                    _ = open.driver.as_mut() => {
                        // The connection finished (with `Connection: close` that is right after
                        // the response); the response may already be on its way to the exchange.
                        connection_done = true;
                        match tokio::time::timeout_at(request_deadline, &mut exchanged).await {
                            Ok(result) => Some(result),
                            Err(_) if request_deadline >= deadline => None,
                            Err(_) => Some(timed_out()),
                        }
                    }
                    _ = tokio::time::sleep_until(request_deadline) => {
                        (request_deadline < deadline).then(timed_out)
                    }
                }
            };
            // The run is over; a request cut by the end of the run is not counted.
            let Some(result) = result else { return stats };
            if connection_done {
                connection = None;
            }
            match result {
                Exchange::Closed if served && !retried_stale => {
                    // The target closed an idle keep-alive connection; reconnect and resend once, as
                    // Go's transport does, without counting an error.
                    connection = None;
                    retried_stale = true;
                }
                Exchange::Closed => {
                    connection = None;
                    break Exchange::Failed("connection closed before the response".into());
                }
                Exchange::Response { .. } => {
                    if let Some(open) = connection.as_mut() {
                        open.served = true;
                    }
                    if !target.keep_alive {
                        connection = None;
                    }
                    break result;
                }
                Exchange::Failed(_) => {
                    connection = None;
                    break result;
                }
            }
        };
        stats.requests += 1;
        stats.latency.record(started.elapsed());
        match outcome {
            Exchange::Response { status, body_bytes } => {
                stats.responses += 1;
                stats.body_bytes += body_bytes;
                if let Some(count) = stats.statuses.get_mut(usize::from(status)) {
                    *count += 1;
                }
            }
            Exchange::Failed(error) => {
                add_error(&mut stats.errors, error, 1);
                // A refused connection fails instantly; pausing keeps a dead target from being spun on.
                if throttle.is_none() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Exchange::Closed => {
                unreachable!("closed connections are turned into errors or retried")
            }
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_beyond_the_limit_are_counted_together() {
        let mut errors = BTreeMap::new();
        for kind in 0..MAX_ERROR_KINDS {
            add_error(&mut errors, format!("error {kind}"), 1);
        }
        assert_eq!(errors.len(), MAX_ERROR_KINDS);
        assert!(!errors.contains_key(OTHER_ERRORS));
        // A known kind still counts as itself; a new one goes to the shared entry.
        add_error(&mut errors, "error 0".into(), 2);
        add_error(&mut errors, "one too many".into(), 1);
        add_error(&mut errors, "and another".into(), 4);
        assert_eq!(errors["error 0"], 3);
        assert_eq!(errors[OTHER_ERRORS], 5);
        assert_eq!(errors.len(), MAX_ERROR_KINDS + 1);
        assert!(!errors.contains_key("one too many"));
    }
}
