//! Review rev36 (session 19): `join_with` pairs through the real driver
//! (threads over the in-process transport): a restart refused beside, and
//! late joins under loss (`notes/review-rev36.md`).

use std::time::{Duration, Instant};

use barriers::mem::{self, Faults};
use barriers::{Algorithm, BarrierConfig, BarrierError, Op, PreparedBarrier};

include!("support/pair_net.rs");

#[test]
fn a_restart_refused_at_join_with_does_not_hold_its_peers_beside() {
    let n = 4;
    let (config, beside, a, b) = pair_of_networks(n, Duration::from_secs(3));
    let start = std::sync::Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = a
        .into_iter()
        .zip(b)
        .enumerate()
        .map(|(p, (ta, tb))| {
            let start = start.clone();
            std::thread::spawn(move || -> Result<(Option<BarrierError>, Duration), String> {
                let (x, mut y) = join_and_allreduce(p, ta, tb, config, beside)?;
                start.wait();
                let t = Instant::now();
                if p == 3 {
                    // Its process dies, and a new one joins the pair again.
                    let (ta, tb) = (x.into_transport(), y.into_transport());
                    std::thread::sleep(Duration::from_millis(50));
                    return match join_pair(ta, tb, config, beside) {
                        Ok(_) => Err("node 3's restarted process was admitted into the pair".into()),
                        Err(e) => Ok((Some(e), t.elapsed())),
                    };
                }
                let mut data = [1u64];
                let outcome = y.allreduce(&mut data, Op::Sum);
                let took = t.elapsed();
                drop((x, y));
                match outcome {
                    Ok(()) => Err(format!("node {p}'s allreduce without node 3 completed")),
                    Err(e) => Ok((Some(e), took)),
                }
            })
        })
        .collect();
    let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().expect("a node panicked").unwrap_or_else(|e| panic!("{e}"))).collect();
    eprintln!("{outcomes:?}");
    assert!(matches!(outcomes[3].0, Some(BarrierError::Refused { .. })), "node 3's restarted process: {:?}", outcomes[3]);
    for (p, (e, took)) in outcomes.iter().enumerate().take(3) {
        assert!(e.is_some(), "node {p}");
        assert!(
            *took < Duration::from_millis(1500),
            "node {p}'s allreduce, waiting for node 3's dead process, failed after {took:?} ({e:?}; failure timeout 400 ms, join timeout 3 s)"
        );
    }
}

/// `n` nodes join a pair over lossy, reordering networks (`seed`), node
/// `late` calling `join_with` `delay` after the others, which start their
/// allreduces beside at once; `rounds` allreduces and barriers each, every
/// result checked. Returns each node's outcome.
fn late_pair_under_loss(n: usize, late: usize, delay: Duration, loss: f64, seed: u64, rounds: u64) -> Vec<Result<(), String>> {
    let config = BarrierConfig::new(Algorithm::Dissemination).timeouts(Duration::from_millis(1), Duration::from_millis(2000));
    let beside = BarrierConfig { algorithm: Algorithm::ShuffleExchange, ..config };
    let faults = |s| Faults { loss, duplicate: loss / 2.0, max_delay: Duration::from_micros(200), seed: s };
    let (a, b) = (mem::network(n, 1, faults(seed)), mem::network(n, 1, faults(seed ^ 0xbe51de)));
    let threads: Vec<_> = a
        .into_iter()
        .zip(b)
        .enumerate()
        .map(|(p, (ta, tb))| {
            std::thread::spawn(move || -> Result<(), String> {
                let (pa, pb) =
                    (PreparedBarrier::new(ta, config).map_err(|e| e.to_string())?, PreparedBarrier::new(tb, beside).map_err(|e| e.to_string())?);
                if p == late {
                    std::thread::sleep(delay);
                }
                let (mut x, mut y) = pa.join_with(pb).map_err(|e| format!("node {p}'s join: {e}"))?;
                for round in 0..rounds {
                    let mut data = [p as u64 * 7 + round, 1];
                    y.allreduce(&mut data, Op::Sum).map_err(|e| format!("node {p}'s allreduce {round}: {e}"))?;
                    let want = [(0..n as u64).map(|q| q * 7 + round).sum::<u64>(), n as u64];
                    if data != want {
                        return Err(format!("node {p}'s allreduce {round}: {data:?}, want {want:?}"));
                    }
                    x.wait().map_err(|e| format!("node {p}'s barrier {round}: {e}"))?;
                }
                x.finish().map_err(|e| format!("node {p}'s finish: {e}"))?;
                y.finish().map_err(|e| format!("node {p}'s finish beside: {e}"))?;
                Ok(())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("a node panicked")).collect()
}

#[test]
fn a_pair_joined_late_under_loss_completes_with_right_results() {
    // Finding j-1's fix through the driver: the barrier beside serves
    // probes while its join waits (`BESIDE_POLL`), under loss,
    // duplicates and reordering, with node 0 or another node late.
    let mut failed = Vec::new();
    for (seed, late, delay_ms, loss) in [(1, 0, 300, 0.1), (2, 3, 300, 0.1), (3, 5, 50, 0.2), (4, 1, 700, 0.05), (5, 0, 30, 0.3), (6, 2, 1200, 0.1)] {
        let t = Instant::now();
        let outcomes = late_pair_under_loss(6, late, Duration::from_millis(delay_ms), loss, seed, 30);
        eprintln!("seed {seed}, node {late} {delay_ms} ms late, loss {loss}: {:?} in {:?}", outcomes, t.elapsed());
        if outcomes.iter().any(Result::is_err) {
            failed.push((seed, outcomes));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
