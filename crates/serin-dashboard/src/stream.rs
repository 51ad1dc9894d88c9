//! The live feed: one watch of the Canaries for the whole dashboard, and for each open page a
//! stream of server-sent events with what changed, filtered to the namespaces its viewer may list.

use crate::App;
use crate::access::{Refusal, Viewer};
use crate::view::canary_view;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serin_api::Canary;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// Pages following the feed at once; more are refused until some close.
pub const MAX_STREAMS: usize = 1_000;
/// How often an open page's credential is checked again (an expired token ends its feed).
const REAUTHENTICATE_EVERY: Duration = Duration::from_secs(60);

/// What changed in the watched Canaries.
#[derive(Clone, Debug)]
pub enum Change {
    /// A Canary was created or changed.
    Applied(ObjectRef<Canary>),
    /// A Canary was deleted.
    Deleted {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The watch started over: every page draws anew.
    Resync,
}

/// Starts the watch of Canaries in `namespace` (all when `None`): the store it fills and the
/// channel that tells of each change.
pub fn watch(
    client: Client,
    namespace: Option<&str>,
) -> (Store<Canary>, broadcast::Sender<Change>) {
    let api: Api<Canary> = match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let (reader, writer) = reflector::store();
    let (changes, _) = broadcast::channel(1024);
    let sender = changes.clone();
    tokio::spawn(async move {
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            let change = match event {
                Ok(watcher::Event::Apply(canary) | watcher::Event::InitApply(canary)) => {
                    Change::Applied(ObjectRef::from_obj(&canary))
                }
                Ok(watcher::Event::Delete(canary)) => Change::Deleted {
                    namespace: canary.metadata.namespace.clone().unwrap_or_default(),
                    name: canary.metadata.name.clone().unwrap_or_default(),
                },
                Ok(watcher::Event::InitDone) => Change::Resync,
                Ok(watcher::Event::Init) => continue,
                Err(error) => {
                    tracing::warn!("watching Canaries: {error}");
                    continue;
                }
            };
            // No page open is not an error: the store is kept current regardless.
            let _ = sender.send(change);
        }
    });
    (reader, changes)
}

/// The feed of one page: a `snapshot` of every Canary the viewer may see, then a `canary` or
/// `deleted` event per change, and `signed-out` when their token stops being accepted. The caller
/// has counted it in `app.streams`; it is uncounted when the page goes.
pub fn feed(app: Arc<App>, viewer: Viewer) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (sender, receiver) = mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        follow(&app, viewer, sender).await;
        app.streams.fetch_sub(1, Ordering::SeqCst);
    });
    let events = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (Ok(event), receiver))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

async fn follow(app: &App, viewer: Viewer, sender: mpsc::Sender<Event>) {
    let mut changes = app.changes.subscribe();
    if !send_snapshot(app, &viewer, &sender).await {
        return;
    }
    let mut check = tokio::time::interval(REAUTHENTICATE_EVERY);
    check.tick().await;
    loop {
        let event = tokio::select! {
            _ = sender.closed() => return,
            _ = check.tick() => {
                match app.access.authenticate(viewer.credential.clone()).await {
                    Err(Refusal::Unauthenticated(reason)) => {
                        let _ = sender.send(Event::default().event("signed-out").data(reason)).await;
                        return;
                    }
                    _ => continue,
                }
            }
            change = changes.recv() => change,
        };
        let sent = match event {
            Ok(Change::Applied(key)) => {
                let namespace = key.namespace.clone().unwrap_or_default();
                match app.canaries.get(&key) {
                    Some(canary) if may_list(app, &viewer, &namespace).await => {
                        let canary = serin_core::stored_status::joined((*canary).clone());
                        send_json(&sender, "canary", &canary_view(&canary)).await
                    }
                    _ => true,
                }
            }
            Ok(Change::Deleted { namespace, name }) => {
                if may_list(app, &viewer, &namespace).await {
                    let gone = serde_json::json!({"namespace": namespace, "name": name});
                    send_json(&sender, "deleted", &gone).await
                } else {
                    true
                }
            }
            Ok(Change::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                send_snapshot(app, &viewer, &sender).await
            }
            Err(broadcast::error::RecvError::Closed) => false,
        };
        if !sent {
            return;
        }
    }
}

/// Whether the viewer may list Canaries in `namespace` (the access cache answers again within
/// 30 s, so a revoked right ends within that).
async fn may_list(app: &App, viewer: &Viewer, namespace: &str) -> bool {
    matches!(app.access.may(viewer, "list", namespace).await, Ok(true))
}

async fn send_snapshot(app: &App, viewer: &Viewer, sender: &mpsc::Sender<Event>) -> bool {
    let mut canaries = Vec::new();
    let mut hidden = 0usize;
    for canary in app.canaries.state() {
        let namespace = canary.metadata.namespace.clone().unwrap_or_default();
        if may_list(app, viewer, &namespace).await {
            let canary = serin_core::stored_status::joined((*canary).clone());
            canaries.push(canary_view(&canary));
        } else {
            hidden += 1;
        }
    }
    canaries.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let snapshot = serde_json::json!({
        "canaries": canaries,
        "hiddenNamespaces": hidden > 0,
    });
    send_json(sender, "snapshot", &snapshot).await
}

async fn send_json<T: serde::Serialize>(
    sender: &mpsc::Sender<Event>,
    name: &str,
    value: &T,
) -> bool {
    let data = serde_json::to_string(value).unwrap_or_default();
    sender
        .send(Event::default().event(name).data(data))
        .await
        .is_ok()
}
