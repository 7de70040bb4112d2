//! Running a barrier workload on one thread per node, in one process: what
//! tests and benchmarks need on the in-process transport and on a virtual
//! cluster (whose endpoints live in other network namespaces but in this process).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Barrier, BarrierConfig, BarrierError, Transport};

/// After its own work, a node keeps answering its peers until every node is
/// done, for at most this long.
const LINGER_LIMIT: Duration = Duration::from_secs(60);

/// Runs `body` on one thread per transport, each with a [`Barrier`] of
/// `config`. A node whose body has returned keeps answering the others (a
/// lost release, say) until every body has returned, so the last barrier
/// completes everywhere. Returns each node's result, in node order.
pub fn run_per_node<T, R, F>(transports: Vec<T>, config: BarrierConfig, body: F) -> Vec<Result<R, BarrierError>>
where
    T: Transport + Send + 'static,
    R: Send + 'static,
    F: Fn(&mut Barrier<T>) -> Result<R, BarrierError> + Send + Sync + 'static,
{
    let n = transports.len();
    let done = Arc::new(AtomicUsize::new(0));
    let body = Arc::new(body);
    let threads: Vec<_> = transports
        .into_iter()
        .map(|transport| {
            let done = done.clone();
            let body = body.clone();
            std::thread::spawn(move || {
                // Counts this node done however its body ends, even by a panic.
                struct Finished(Arc<AtomicUsize>);
                impl Drop for Finished {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let finished = Finished(done.clone());
                let mut barrier = Barrier::new(transport, config)?;
                let result = body(&mut barrier);
                drop(finished);
                let limit = Instant::now() + LINGER_LIMIT;
                while done.load(Ordering::SeqCst) < n && Instant::now() < limit {
                    if barrier.linger(Duration::from_millis(2)).is_err() {
                        break;
                    }
                }
                result
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().unwrap_or_else(|_| Err(BarrierError::Usage("a node thread panicked".into()))))
        .collect()
}
