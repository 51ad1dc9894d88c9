//! Repeats of one Event counted on the Event first written, as Kubernetes' own event recorder
//! (and so Flagger's) does: `kubectl events` shows "(x12 over 6m)" instead of twelve lines, and a
//! release that waits on a slow rollout does not fill the namespace with copies.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long after its last repeat an Event still takes the next one: after that a new Event is
/// created, as client-go's recorder does after ten minutes.
pub const SERIES_WINDOW: Duration = Duration::from_secs(600);

/// Distinct Events remembered at once (client-go's recorder keeps as many); past it the quarter
/// repeated longest ago is forgotten, so their next repeats are new Events.
pub const MAX_SERIES: usize = 4096;

/// What makes two Events the same: the object they are about and what they say.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventKey {
    /// The namespace of the object and the Event.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The object's uid, so a Canary deleted and created again starts afresh.
    pub uid: String,
    /// `Normal` or `Warning`.
    pub event_type: String,
    /// The Event's reason.
    pub reason: String,
    /// The Event's message.
    pub message: String,
}

/// How to record an Event now.
#[derive(Debug, PartialEq, Eq)]
pub enum Recording {
    /// Create a new Event.
    New,
    /// Set `count` and `lastTimestamp` on the Event `name` written before.
    Repeat {
        /// The Event to update.
        name: String,
        /// Its count with this repeat.
        count: i32,
    },
}

struct Series {
    name: String,
    count: i32,
    last: Instant,
}

/// Makes room in a full map: the series past their window go, and when that is not enough, the
/// quarter repeated longest ago (more when several were repeated at the same moment as the cut).
/// Freeing a quarter at once keeps a busy operator from scanning every series on each new Event
/// once the map is full.
fn make_room(series: &mut HashMap<EventKey, Series>, now: Instant) {
    series.retain(|_, s| now.saturating_duration_since(s.last) < SERIES_WINDOW);
    if series.len() < MAX_SERIES {
        return;
    }
    let mut lasts: Vec<Instant> = series.values().map(|s| s.last).collect();
    let (_, cutoff, _) = lasts.select_nth_unstable(MAX_SERIES / 4);
    let cutoff = *cutoff;
    series.retain(|_, s| s.last > cutoff);
}

/// The Events written recently, by what they say, to count their repeats.
#[derive(Default)]
pub struct EventSeries(Mutex<HashMap<EventKey, Series>>);

impl EventSeries {
    /// Whether an Event like `key` at `now` is new or repeats one written within
    /// [`SERIES_WINDOW`].
    pub fn recording(&self, key: &EventKey, now: Instant) -> Recording {
        let series = self.0.lock().expect("never poisoned");
        match series.get(key) {
            Some(s) if now.saturating_duration_since(s.last) < SERIES_WINDOW => Recording::Repeat {
                name: s.name.clone(),
                count: s.count.saturating_add(1),
            },
            _ => Recording::New,
        }
    }

    /// Notes that the Event `name` says `key` with `count` as of `now`.
    pub fn written(&self, key: EventKey, name: String, count: i32, now: Instant) {
        let mut series = self.0.lock().expect("never poisoned");
        if series.len() >= MAX_SERIES && !series.contains_key(&key) {
            make_room(&mut series, now);
        }
        series.insert(
            key,
            Series {
                name,
                count,
                last: now,
            },
        );
    }

    /// Forgets `key`, whose Event is gone (expired or deleted), so the next one is created.
    pub fn forget(&self, key: &EventKey) {
        self.0.lock().expect("never poisoned").remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().expect("never poisoned").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(message: &str) -> EventKey {
        EventKey {
            namespace: "test".into(),
            name: "podinfo".into(),
            uid: "u1".into(),
            event_type: "Warning".into(),
            reason: "Synced".into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_repeat_within_the_window_counts_on_the_first_event() {
        let series = EventSeries::default();
        let start = Instant::now();
        let waiting = key("Halt advancement podinfo.test waiting for rollout to finish");
        assert_eq!(series.recording(&waiting, start), Recording::New);
        series.written(waiting.clone(), "podinfo.a1".into(), 1, start);
        let later = start + Duration::from_secs(30);
        assert_eq!(
            series.recording(&waiting, later),
            Recording::Repeat {
                name: "podinfo.a1".into(),
                count: 2
            }
        );
        series.written(waiting.clone(), "podinfo.a1".into(), 2, later);
        // The window runs from the last repeat, not the first Event.
        let much_later = later + SERIES_WINDOW - Duration::from_secs(1);
        assert_eq!(
            series.recording(&waiting, much_later),
            Recording::Repeat {
                name: "podinfo.a1".into(),
                count: 3
            }
        );
        assert_eq!(
            series.recording(&waiting, later + SERIES_WINDOW),
            Recording::New
        );
    }

    #[test]
    fn another_message_object_or_uid_is_another_event() {
        let series = EventSeries::default();
        let now = Instant::now();
        series.written(key("a"), "podinfo.a1".into(), 1, now);
        assert_eq!(series.recording(&key("b"), now), Recording::New);
        let mut recreated = key("a");
        recreated.uid = "u2".into();
        assert_eq!(series.recording(&recreated, now), Recording::New);
        series.forget(&key("a"));
        assert_eq!(series.recording(&key("a"), now), Recording::New);
    }

    #[test]
    fn the_series_remembered_are_bounded() {
        let series = EventSeries::default();
        let start = Instant::now();
        for i in 0..MAX_SERIES + 10 {
            let at = start + Duration::from_millis(i as u64);
            series.written(key(&i.to_string()), format!("e{i}"), 1, at);
            assert!(series.len() <= MAX_SERIES);
        }
        // A full map forgot the quarter written longest ago and kept the rest.
        assert_eq!(series.len(), MAX_SERIES - MAX_SERIES / 4 - 1 + 10);
        let at = start + Duration::from_secs(1);
        for forgotten in [0, MAX_SERIES / 4] {
            assert_eq!(
                series.recording(&key(&forgotten.to_string()), at),
                Recording::New
            );
        }
        for kept in [MAX_SERIES / 4 + 1, MAX_SERIES - 1, MAX_SERIES + 9] {
            assert!(matches!(
                series.recording(&key(&kept.to_string()), at),
                Recording::Repeat { count: 2, .. }
            ));
        }
    }

    #[test]
    fn series_past_their_window_go_before_any_recent_one() {
        let series = EventSeries::default();
        let start = Instant::now();
        for i in 0..MAX_SERIES - 1 {
            series.written(key(&i.to_string()), format!("e{i}"), 1, start);
        }
        let recent = start + SERIES_WINDOW;
        series.written(key("recent"), "r".into(), 1, recent);
        let later = recent + Duration::from_secs(1);
        series.written(key("new"), "n".into(), 1, later);
        assert_eq!(series.len(), 2);
        assert!(matches!(
            series.recording(&key("recent"), later),
            Recording::Repeat { count: 2, .. }
        ));
    }
}
