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
