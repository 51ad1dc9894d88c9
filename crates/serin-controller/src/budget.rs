//! Per-namespace budgets for work that waits on a tenant's endpoints (webhook calls, metric
//! queries, alerts). Each namespace runs at most a fixed number of such tasks at once and keeps at
//! most a fixed number waiting, so a namespace whose hooks never answer fills only its own budget:
//! the reconcile slots, the threads and every other namespace's checks go on.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// One namespace's places.
struct Budget {
    /// Places for tasks running now.
    running: Semaphore,
    /// Tasks spawned and not finished (waiting for a place or running).
    outstanding: AtomicUsize,
}

/// The budgets of every namespace that has spawned work.
pub struct NamespaceBudgets {
    in_flight: usize,
    outstanding_limit: usize,
    namespaces: Mutex<HashMap<String, Arc<Budget>>>,
}

/// The namespace already has as many tasks waiting or running as it may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "namespace {namespace} already has {limit} webhook calls, metric queries or alerts waiting or running"
)]
pub struct BudgetFull {
    /// The namespace.
    pub namespace: String,
    /// How many it may have.
    pub limit: usize,
}

impl NamespaceBudgets {
    /// Budgets of `in_flight` tasks running and `outstanding` tasks waiting or running per namespace.
    pub fn new(in_flight: usize, outstanding: usize) -> Self {
        NamespaceBudgets {
            in_flight: in_flight.max(1),
            outstanding_limit: outstanding.max(in_flight.max(1)),
            namespaces: Mutex::default(),
        }
    }

    fn budget(&self, namespace: &str) -> Arc<Budget> {
        self.namespaces
            .lock()
            .expect("never poisoned")
            .entry(namespace.to_string())
            .or_insert_with(|| {
                Arc::new(Budget {
                    running: Semaphore::new(self.in_flight),
                    outstanding: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    /// Spawns `work` to run once `namespace` has a free place, or refuses it when the namespace
    /// already has its limit of tasks waiting or running.
    pub fn spawn<F>(&self, namespace: &str, work: F) -> Result<(), BudgetFull>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let budget = self.budget(namespace);
        let limit = self.outstanding_limit;
        if budget
            .outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_err()
        {
            return Err(BudgetFull {
                namespace: namespace.to_string(),
                limit,
            });
        }
        tokio::spawn(async move {
            // Decrements even when the task is cancelled (the runtime shutting down).
            struct Done(Arc<Budget>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.outstanding.fetch_sub(1, Ordering::AcqRel);
                }
            }
            let done = Done(budget);
            let _place = done.0.running.acquire().await.expect("never closed");
            work.await;
        });
        Ok(())
    }

    /// How many tasks of `namespace` are waiting or running.
    pub fn outstanding(&self, namespace: &str) -> usize {
        self.namespaces
            .lock()
            .expect("never poisoned")
            .get(namespace)
            .map_or(0, |b| b.outstanding.load(Ordering::Acquire))
    }

    /// Forgets the namespaces with nothing waiting or running, so a namespace seen once costs
    /// nothing after its work ended.
    pub fn prune(&self) {
        self.namespaces
            .lock()
            .expect("never poisoned")
            .retain(|_, budget| budget.outstanding.load(Ordering::Acquire) > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_namespace_runs_its_limit_at_once_and_waits_for_a_place_beyond() {
        let budgets = NamespaceBudgets::new(2, 4);
        let (release, released) = tokio::sync::watch::channel(false);
        let started = Arc::new(AtomicUsize::new(0));
        for _ in 0..4 {
            let (started, mut released) = (started.clone(), released.clone());
            budgets
                .spawn("hostile", async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    let _ = released.wait_for(|r| *r).await;
                })
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(started.load(Ordering::SeqCst), 2, "two run, two wait");
        assert_eq!(budgets.outstanding("hostile"), 4);
        let full = budgets.spawn("hostile", async {}).unwrap_err();
        assert_eq!(full.limit, 4);
        assert!(full.to_string().contains("namespace hostile"), "{full}");

        // Another namespace is not held by the first one's waits.
        let (done, finished) = tokio::sync::oneshot::channel();
        budgets
            .spawn("healthy", async move {
                let _ = done.send(());
            })
            .unwrap();
        tokio::time::timeout(Duration::from_secs(1), finished)
            .await
            .expect("the healthy namespace ran at once")
            .unwrap();

        release.send(true).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(started.load(Ordering::SeqCst), 4);
        assert_eq!(budgets.outstanding("hostile"), 0);
        budgets.prune();
        assert!(budgets.namespaces.lock().unwrap().is_empty());
    }
}
