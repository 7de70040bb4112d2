//! Running a barrier workload on one thread per node, in one process: what
//! tests and benchmarks need on the in-process transport and on a virtual
//! cluster (whose endpoints live in other network namespaces but in this process).

use std::sync::Arc;

use crate::{Barrier, BarrierConfig, BarrierError, Transport};

/// Runs `body` on one thread per transport, each with a [`Barrier`] of
/// `config`. A node whose body succeeded then calls [`Barrier::finish`], so
/// the last barrier completes everywhere (one closing barrier more); a node
/// whose body failed drops its barrier. Returns each node's result, in node
/// order (a failed finish is the node's error).
pub fn run_per_node<T, R, F>(transports: Vec<T>, config: BarrierConfig, body: F) -> Vec<Result<R, BarrierError>>
where
    T: Transport + Send + 'static,
    R: Send + 'static,
    F: Fn(&mut Barrier<T>) -> Result<R, BarrierError> + Send + Sync + 'static,
{
    let body = Arc::new(body);
    let threads: Vec<_> = transports
        .into_iter()
        .map(|transport| {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut barrier = Barrier::new(transport, config)?;
                let result = body(&mut barrier)?;
                barrier.finish()?;
                Ok(result)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap_or_else(|_| Err(BarrierError::Internal("a node thread panicked".into())))).collect()
}

/// Runs `body` on one thread per transport (node `i`'s on transport `i`),
/// each with a [`Barrier`] of `config`, and returns what each returned, in
/// node order. Unlike [`run_per_node`], nothing is finished: `body` owns
/// its barrier (finishes it, drops it, or turns it back into its transport).
/// Panics if a barrier cannot be created, or a body panics.
pub fn run_per_node_unfinished<T, R, F>(transports: Vec<T>, config: BarrierConfig, body: F) -> Vec<R>
where
    T: Transport + Send + 'static,
    R: Send + 'static,
    F: Fn(usize, Barrier<T>) -> R + Send + Sync + Copy + 'static,
{
    let threads: Vec<_> = transports
        .into_iter()
        .enumerate()
        .map(|(me, t)| {
            std::thread::spawn(move || {
                let b = Barrier::new(t, config).unwrap_or_else(|e| panic!("node {me}: {e}"));
                body(me, b)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("a node thread panicked")).collect()
}
