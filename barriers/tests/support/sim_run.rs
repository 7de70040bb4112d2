// Barrier runs on the simulator, in virtual time, for the test files that
// check the protocol's behaviour (mem.rs, edges.rs), included by each: test
// files are crates of their own.

use barriers::sim;

/// One run of `count` barriers (a quarter of them split-phase) among `n`
/// nodes of `config` on the simulator, in virtual time, with independent
/// loss `loss`, duplication `duplicate` and a quarter of the messages
/// reordered by up to `reorder`; every checker must pass (safety on the
/// shared virtual clock, every call completing within the failure timeout
/// of its last entry, no error). `think_ns`: the mean compute time before
/// each call (exponential; one call in 16 computes 20 times longer).
fn simulate(config: BarrierConfig, n: usize, count: usize, seed: u64, (loss, duplicate, reorder): (f64, f64, Duration), think_ns: f64) -> sim::Run {
    let options = sim::Options {
        nodes: Some(n),
        algorithm: Some(config.algorithm),
        faults: sim::FaultMix::only(&[sim::FaultKind::Loss, sim::FaultKind::Duplicate, sim::FaultKind::Reorder]),
        instances: (1, 1),
        workload: sim::WorkloadMix { min_ops: count, max_ops: count, collectives: 0.0, think_ns, ..sim::WorkloadMix::default() },
        trace: 0,
        ..sim::Options::default()
    };
    let mut c = sim::SimConfig::draw(seed, &options);
    c.barrier = config;
    c.liveness_ns = config.failure_timeout.as_nanos() as u64;
    c.faults = sim::Faults { loss, duplicate, reorder: 0.25, reorder_ns: reorder.as_nanos() as u64, straggle: 0.0, burst: None, ..c.faults };
    let run = sim::World::new(c, sim::CoreNode::new).run();
    let violations = sim::check::check(&run);
    if !violations.is_empty() || !run.stats.completed {
        let options = sim::Options { trace: 40, ..options };
        panic!("{}", sim::explain(&run, &violations, &options));
    }
    run
}
