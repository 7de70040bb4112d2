// A pair's set-up for the test files that run `join_with` through the
// driver (join_with.rs, review_rev36.rs), included by each: test files are
// crates of their own.

/// The two barriers of a pair on `n` nodes (the joined one dissemination,
/// the one beside shuffle-exchange; retry 1 ms, failure timeout 400 ms,
/// join timeout `join`), and each one's in-process network.
fn pair_of_networks(
    n: usize,
    join: std::time::Duration,
) -> (barriers::BarrierConfig, barriers::BarrierConfig, Vec<barriers::mem::MemTransport>, Vec<barriers::mem::MemTransport>) {
    use barriers::mem::{self, Faults};
    use barriers::{Algorithm, BarrierConfig};
    let mut config = BarrierConfig::new(Algorithm::Dissemination).timeouts(std::time::Duration::from_millis(1), std::time::Duration::from_millis(400));
    config.join_timeout = join;
    let beside = BarrierConfig { algorithm: Algorithm::ShuffleExchange, ..config };
    (config, beside, mem::network(n, 1, Faults::none()), mem::network(n, 1, Faults::none()))
}

/// Node `p` of 4 joins its pair over `ta` and `tb` and runs 3 allreduces
/// of `p + 1` on the barrier beside, each checked (1 + 2 + 3 + 4).
#[allow(clippy::type_complexity)]
fn join_and_allreduce(
    p: usize,
    ta: barriers::mem::MemTransport,
    tb: barriers::mem::MemTransport,
    config: barriers::BarrierConfig,
    beside: barriers::BarrierConfig,
) -> Result<(barriers::Barrier<barriers::mem::MemTransport>, barriers::Barrier<barriers::mem::MemTransport>), String> {
    let (x, mut y) = join_pair(ta, tb, config, beside).map_err(|e| format!("node {p}'s join: {e}"))?;
    for _ in 0..3 {
        let mut data = [p as u64 + 1];
        y.allreduce(&mut data, barriers::Op::Sum).map_err(|e| format!("node {p}'s allreduce: {e}"))?;
        assert_eq!(data[0], 10, "node {p}");
    }
    Ok((x, y))
}

/// A node's pair over `ta` (the joined barrier, `config`) and `tb` (the
/// one beside, `beside`), joined together.
#[allow(clippy::type_complexity)]
fn join_pair(
    ta: barriers::mem::MemTransport,
    tb: barriers::mem::MemTransport,
    config: barriers::BarrierConfig,
    beside: barriers::BarrierConfig,
) -> Result<(barriers::Barrier<barriers::mem::MemTransport>, barriers::Barrier<barriers::mem::MemTransport>), barriers::BarrierError> {
    barriers::PreparedBarrier::new(ta, config)?.join_with(barriers::PreparedBarrier::new(tb, beside)?)
}
