//! Watch streams: the initial events, bookmarks, and the end of a watch that fell too far behind.

use super::request::*;
use crate::instrument::{FaultPlan, Metrics};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{ChangeType, Store};
use crate::tables;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures::SinkExt;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

pub(crate) fn watch(
    state: &AppState,
    target: &Target,
    query: &Query,
    (labels, mut fields): (LabelSelector, FieldSelector),
    table: Option<tables::IncludeObject>,
    faults: &FaultPlan,
) -> Result<Response, ApiError> {
    let drop_after = faults.watch_drop_after;
    if query.flag("sendInitialEvents") {
        return Err(ApiError::invalid(
            "ListOptions",
            "",
            "sendInitialEvents",
            "FieldValueForbidden",
            "Forbidden: streaming lists are not supported by the sandbox; use list then watch",
        ));
    }
    if target.watch_path
        && let Some(name) = &target.name
    {
        fields = FieldSelector::parse(
            &format!("metadata.name={name}"),
            &target.info.kind,
            &target.info.group,
        )?;
    }
    let info = target.info.clone();
    let namespace = target.namespace.clone();
    let bookmarks = query.flag("allowWatchBookmarks");
    let mut timeout = Duration::from_secs(
        query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(1800),
    );
    if let Some(drop) = drop_after {
        timeout = timeout.min(drop);
    }
    let metrics = state.metrics.clone();
    let resumed = query
        .get("resourceVersion")
        .is_some_and(|rv| !rv.is_empty() && rv != "0");
    let start = if faults.expire_watch && resumed {
        Err(ApiError::expired(
            "too old resource version (sandbox fault injection)",
        ))
    } else {
        state.store.watch(&info, query.get("resourceVersion"))
    };
    let start = match start {
        Ok(start) => Some(start),
        Err(expired) if expired.code == 410 => {
            let line = format!(
                "{}\n",
                json!({"type": "ERROR", "object": expired.to_status()})
            );
            return Ok(stream_response(futures::stream::once(async move {
                Ok::<Bytes, Infallible>(Bytes::from(line))
            })));
        }
        Err(other) => return Err(other),
    };
    let Some(start) = start else { unreachable!() };
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(256);
    let bookmark_interval = state.bookmark_interval;
    let store = state.store.clone();
    let mut resets = state.store.resets();
    let matches = move |object: &Value| {
        namespace
            .as_deref()
            .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
            && labels.matches(object)
            && fields.matches(object)
    };
    metrics.watch_started();
    tokio::spawn(async move {
        let _ended = WatchEnded(metrics);
        let line = |kind: &str, object: &Value| {
            let mut text =
                serde_json::to_vec(&WatchEvent { kind, object }).expect("a JSON value serialises");
            text.push(b'\n');
            Bytes::from(text)
        };
        // With a Table Accept each event carries a one-row Table; only the first has the columns.
        let mut columns_sent = false;
        let mut event = |kind: &str, object: &Value| match table {
            None => line(kind, object),
            Some(include) => {
                let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
                let row = tables::table(
                    &info,
                    std::slice::from_ref(object),
                    rv,
                    include,
                    !columns_sent,
                );
                columns_sent = true;
                line(kind, &row)
            }
        };
        let mut last_rv = start.start_rv;
        let storage_key = info.storage_key();
        for (change, object) in &start.initial {
            if matches(object) && tx.send(Ok(event(change.as_str(), object))).await.is_err() {
                return;
            }
        }
        let mut receiver = start.receiver;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = resets.recv() => {
                    let expired = ApiError::expired("the history was compacted; list again and re-watch");
                    let _ = tx.send(Ok(line("ERROR", &expired.to_status()))).await;
                    return;
                }
                _ = ticker.tick(), if bookmarks => {
                    // As a real API server's watch cache does, a bookmark carries the latest
                    // resourceVersion once every change of this resource up to it was sent (they
                    // are broadcast under the store's lock, so none is on its way): a watch of a
                    // quiet resource then resumes inside the history after a busy stretch.
                    let latest = store.resource_version();
                    if receiver.is_empty() {
                        last_rv = last_rv.max(latest);
                    }
                    let bookmark = json!({"kind": info.kind, "apiVersion": info.api_version(),
                        "metadata": {"resourceVersion": last_rv.to_string()}});
                    if tx.send(Ok(line("BOOKMARK", &bookmark))).await.is_err() {
                        return;
                    }
                }
                received = receiver.recv() => match received {
                    Ok(change) => {
                        if change.rv <= start.start_rv {
                            continue;
                        }
                        last_rv = change.rv;
                        if change.resource != storage_key {
                            continue;
                        }
                        let object = Store::present_shared(&info, &change.object);
                        let now = matches(&object);
                        let before = change
                            .previous
                            .as_ref()
                            .is_some_and(|previous| matches(&Store::present_shared(&info, previous)));
                        let kind = match change.change {
                            ChangeType::Added if now => "ADDED",
                            ChangeType::Modified if now && before => "MODIFIED",
                            ChangeType::Modified if now => "ADDED",
                            ChangeType::Modified if before => "DELETED",
                            ChangeType::Deleted if now || before => "DELETED",
                            _ => continue,
                        };
                        if tx.send(Ok(event(kind, &object))).await.is_err() {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let expired = ApiError::expired("the watch fell behind; list again and re-watch");
                        let _ = tx.send(Ok(line("ERROR", &expired.to_status()))).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        }
    });
    let mut response = stream_response(rx);
    if table.is_some() {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(tables::TABLE_CONTENT_TYPE),
        );
    }
    Ok(response)
}

/// One line of a watch stream, serialised without copying the object into a new JSON tree.
#[derive(serde::Serialize)]
pub(crate) struct WatchEvent<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'a str,
    pub(crate) object: &'a Value,
}

/// Marks a watch as ended when its task finishes, however it finishes.
pub(crate) struct WatchEnded(Arc<Metrics>);

impl Drop for WatchEnded {
    fn drop(&mut self) {
        self.0.watch_ended();
    }
}

pub(crate) fn stream_response<S>(stream: S) -> Response
where
    S: futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
