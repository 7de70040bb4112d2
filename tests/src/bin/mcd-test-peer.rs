//! A peer process for integration tests that need a second process: opens an
//! endpoint from the environment (MCD_NODE_FILE, MCD_IFACES, MCD_PORT, ...) and
//! then acts as told.
//!
//! With MCD_TEST_NO_ANNOUNCE=1 the endpoint never announces its MAC while
//! it waits (`EndpointConfig::announce_every` none), as mcd did before.
//!
//! - `hold`: print `holding port P as node N`, then keep the port until stdin closes.
//! - `open`: open and exit 0, or print the error and exit 2.
//! - `barrier ALGORITHM COUNT FAILURE_MS`: run COUNT barriers; print `done`, or
//!   the barrier error and exit 3.
//! - `discover COUNT`: open through the bootstrap (`EndpointConfig::bootstrap`:
//!   rank and size from the environment, discovery without a node list), print
//!   `node N nodes: MAC,MAC,...`, run COUNT dissemination barriers, print
//!   `stats: S` (the endpoint's `Stats`) and `done`, then `bootstrap linger: W wake-ups in 300 ms` (how often the
//!   bootstrap's linger thread woke while watched), or `bootstrap linger:
//!   over` if it has ended.
//! - `hierarchical COUNT`: open through the bootstrap, run COUNT barriers of
//!   the hierarchical barrier (tree4 among the hosts' leaders; failure
//!   timeout MCD_BARRIER_TIMEOUT seconds, default 10), writing each
//!   barrier's entry and exit times (CLOCK_MONOTONIC µs) to
//!   `MCD_TEST_TIMES/rank<N>` when set, then finish; print
//!   `node N: host of H ranks, leader L, H hosts` first and `done` last, or
//!   `error: ...` and exit 3; before `done`, `release R: D of N barriers
//!   released by the leaders' multicast` (R as MCD_HIERARCHY_RELEASE
//!   chose it). With MCD_TEST_CRASH_AT=K, the ranks listed in
//!   MCD_TEST_CRASH_RANKS (commas) abort before barrier K.
//! - `job ALGORITHM COUNT`: a job as the attack tests watch it: create the
//!   barrier (print `node N joined instance I` in hex, or `error: ...` and
//!   exit 4), run COUNT calls (barriers; or with MCD_TEST_OP=allreduce
//!   allreduces of one u64, rank + 1, summed, each result printed as
//!   `allreduce K V`; or with MCD_TEST_OP=bcast broadcasts of one u64 from
//!   node 0, 100 + K in call K, each printed as `bcast K V`), then finish and print `done`, or `error: ...` and exit
//!   3. Before exiting either way it prints `stats: S` (the endpoint's
//!   `Stats`) and `barrier stats: B`. Settings: MCD_TEST_FAILURE_MS and
//!   MCD_TEST_JOIN_MS (the failure and join timeouts, default 10 and 30 s);
//!   MCD_TEST_HOLD=1: print `holding` and read a line from stdin before
//!   creating the barrier; MCD_TEST_COMPUTE=K:MS: print `computing K`, then
//!   compute MS ms before call K; MCD_TEST_CRASH_AT=K: print `crashing K`
//!   and abort before call K (after computing, if both); MCD_TEST_TIMES=DIR: write each call's entry
//!   and exit (CLOCK_MONOTONIC µs) to `DIR/rank<N>`; MCD_TEST_PHASES=P: run
//!   P phases of COUNT calls, and when MCD_TEST_GATE=1, print `phase p
//!   ready` and read a line from stdin before each, and `phase p median M
//!   p90 Q p99 R mean A max X` (µs per call, the phase's first call left
//!   out) after each.

use std::io::Read;

fn main() {
    let action = std::env::args().nth(1).unwrap_or_default();
    let config = if action == "discover" || action == "hierarchical" { mcd::EndpointConfig::bootstrap() } else { mcd::EndpointConfig::from_env() };
    let endpoint = config
        .map(|mut c| {
            if std::env::var("MCD_TEST_NO_ANNOUNCE").is_ok_and(|v| v == "1") {
                c.announce_every = None; // as before announcements: a stolen port stays stolen
            }
            c
        })
        .and_then(mcd::Endpoint::open);
    let endpoint = match endpoint {
        Ok(ep) => ep,
        Err(e) => {
            println!("error: {e}");
            std::process::exit(2);
        }
    };
    match action.as_str() {
        "hold" => {
            println!("holding port {} as node {}", endpoint.port(), endpoint.node_id());
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        }
        "open" => println!("opened node {}", endpoint.node_id()),
        "barrier" => {
            let arg = |i: usize| std::env::args().nth(i).unwrap_or_default();
            let algorithm: barriers::Algorithm = arg(2).parse().unwrap_or_else(|e| panic!("{e}"));
            let count: u64 = arg(3).parse().expect("COUNT");
            let failure = std::time::Duration::from_millis(arg(4).parse().expect("FAILURE_MS"));
            let config = barriers::BarrierConfig::new(algorithm).timeouts(std::time::Duration::from_millis(1), failure);
            let mut barrier = barriers::Barrier::new(barriers::McdTransport::new(endpoint), config).expect("barrier");
            println!("started node {}", barrier.node());
            for _ in 0..count {
                if let Err(e) = barrier.wait() {
                    println!("error: {e}");
                    std::process::exit(3);
                }
            }
            println!("done");
        }
        "discover" => {
            let count: u64 = std::env::args().nth(2).and_then(|c| c.parse().ok()).expect("COUNT");
            let macs: Vec<String> = endpoint.nodes().iter().map(|n| n.macs[0].to_string()).collect();
            println!("node {} nodes: {}", endpoint.node_id(), macs.join(","));
            let config = barriers::BarrierConfig::new(barriers::Algorithm::Dissemination);
            let mut barrier = barriers::Barrier::new(barriers::McdTransport::new(endpoint), config).expect("barrier");
            for _ in 0..count {
                if let Err(e) = barrier.wait() {
                    println!("error: {e}");
                    std::process::exit(3);
                }
            }
            // Until no peer needs this node (a lost last release, say).
            if let Err(e) = barrier.finish() {
                println!("error: {e}");
                std::process::exit(3);
            }
            match barrier.with_transport(|t| t.endpoint().stats()) {
                Ok(stats) => println!("stats: {stats:?}"),
                Err(e) => println!("stats: unreadable: {e}"),
            }
            println!("done");
            match linger_wakeups(std::time::Duration::from_millis(300)) {
                Some(w) => println!("bootstrap linger: {w} wake-ups in 300 ms"),
                None => println!("bootstrap linger: over"),
            }
        }
        "hierarchical" => hierarchical(endpoint),
        "job" => job(endpoint),
        other => {
            eprintln!("unknown action `{other}` (hold, open, barrier, discover, hierarchical or job)");
            std::process::exit(64);
        }
    }
}

/// How many times this process's bootstrap linger thread went to sleep and
/// woke again (its voluntary context switches) over `window`; `None` if
/// there is no such thread, or it ended meanwhile.
fn linger_wakeups(window: std::time::Duration) -> Option<u64> {
    let task = std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .map(|t| t.path())
        .find(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.starts_with("mcd-bootstrap")))?;
    let switches = || -> Option<u64> {
        let status = std::fs::read_to_string(task.join("status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok())
    };
    let before = switches()?;
    std::thread::sleep(window);
    Some(switches()? - before)
}

fn exit_on<T>(result: Result<T, barriers::BarrierError>) -> T {
    result.unwrap_or_else(|e| {
        println!("error: {e}");
        std::process::exit(3);
    })
}

fn hierarchical(endpoint: mcd::Endpoint) {
    use std::io::Write;
    let count: u64 = std::env::args().nth(2).and_then(|c| c.parse().ok()).expect("COUNT");
    let failure = mcd::config::env_seconds("MCD_BARRIER_TIMEOUT").expect("MCD_BARRIER_TIMEOUT").unwrap_or(std::time::Duration::from_secs(10));
    let crash_at: Option<u64> = std::env::var("MCD_TEST_CRASH_AT").ok().map(|k| k.parse().expect("MCD_TEST_CRASH_AT"));
    let crashing: Vec<usize> =
        std::env::var("MCD_TEST_CRASH_RANKS").unwrap_or_default().split(',').filter(|s| !s.is_empty()).map(|s| s.parse().expect("rank")).collect();
    let algorithm = barriers::Algorithm::Tree { k: barriers::Fanout::FOUR, release: barriers::Release::Multicast };
    let config = barriers::BarrierConfig::new(algorithm).timeouts(std::time::Duration::from_millis(1), failure);
    let shared = barriers::SharedEndpoint::new(endpoint);
    let mut barrier = exit_on(barriers::HierarchicalBarrier::on_endpoint(&shared, config, exit_on(barriers::HostSettings::from_env())));
    let me = barrier.node();
    println!("node {me}: host of {} ranks, leader {}, {} hosts", barrier.host_members().len(), barrier.host_members()[0], barrier.hosts());
    let mut times = std::env::var_os("MCD_TEST_TIMES")
        .map(|dir| std::fs::File::create(std::path::Path::new(&dir).join(format!("rank{me}"))).expect("times file"));
    for k in 0..count {
        if crash_at == Some(k) && crashing.contains(&me) {
            std::process::abort();
        }
        let entered = mcd::host::monotonic_clock();
        exit_on(barrier.wait());
        let left = mcd::host::monotonic_clock();
        if let Some(f) = &mut times {
            let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
            writeln!(f, "{k} {:.3} {:.3}", us(entered), us(left)).expect("write times");
        }
    }
    exit_on(barrier.finish());
    println!("release {}: {} of {} barriers released by the leaders' multicast", barrier.release(), barrier.released_directly(), count + 1);
    println!("done");
}

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.trim().parse().unwrap_or_else(|_| panic!("{name}: not a number: {v}")))
}

fn job(endpoint: mcd::Endpoint) {
    use std::io::{BufRead, Write};
    use std::time::Duration;
    let arg = |i: usize| std::env::args().nth(i).unwrap_or_default();
    let algorithm: barriers::Algorithm = arg(2).parse().unwrap_or_else(|e| panic!("{e}"));
    let count: u64 = arg(3).parse().expect("COUNT");
    let op = std::env::var("MCD_TEST_OP").unwrap_or_default();
    let (allreduce, bcast) = (op == "allreduce", op == "bcast");
    let failure = Duration::from_millis(env_num("MCD_TEST_FAILURE_MS").unwrap_or(10_000));
    let mut config = barriers::BarrierConfig::new(algorithm).timeouts(Duration::from_micros(250), failure);
    config.join_timeout = Duration::from_millis(env_num("MCD_TEST_JOIN_MS").unwrap_or(30_000));
    let compute: Option<(u64, u64)> = std::env::var("MCD_TEST_COMPUTE").ok().map(|v| {
        let (k, ms) = v.split_once(':').expect("MCD_TEST_COMPUTE=K:MS");
        (k.parse().expect("K"), ms.parse().expect("MS"))
    });
    let crash_at = env_num("MCD_TEST_CRASH_AT");
    let phases = env_num("MCD_TEST_PHASES").unwrap_or(1);
    let gate = std::env::var("MCD_TEST_GATE").is_ok_and(|g| g == "1");
    let mut stdin = std::io::stdin().lock();
    let mut read_line = || {
        let mut line = String::new();
        stdin.read_line(&mut line).expect("stdin");
    };
    if std::env::var("MCD_TEST_HOLD").is_ok_and(|h| h == "1") {
        println!("holding");
        read_line();
    }
    let node = endpoint.node_id();
    let mut barrier = match barriers::Barrier::new(barriers::McdTransport::new(endpoint), config) {
        Ok(b) => b,
        Err(e) => {
            println!("error: {e}");
            std::process::exit(4);
        }
    };
    println!("node {node} joined instance {:#x}", barrier.instance());
    let mut times = std::env::var_os("MCD_TEST_TIMES")
        .map(|dir| std::fs::File::create(std::path::Path::new(&dir).join(format!("rank{node}"))).expect("times file"))
        .map(std::io::BufWriter::new);
    let report = |barrier: &mut barriers::Barrier<barriers::McdTransport>| {
        match barrier.with_transport(|t| t.endpoint().stats()) {
            Ok(stats) => println!("stats: {stats:?}"),
            Err(e) => println!("stats: unreadable: {e}"),
        }
        println!("barrier stats: {:?}", barrier.stats());
    };
    let mut k = 0u64;
    let mut result = Ok(());
    'phases: for phase in 0..phases {
        if gate {
            println!("phase {phase} ready");
            read_line();
        }
        let mut took = Vec::with_capacity(count as usize);
        for _ in 0..count {
            if let Some((_, ms)) = compute.filter(|&(at, _)| at == k) {
                println!("computing {k}");
                let until = std::time::Instant::now() + Duration::from_millis(ms);
                while std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            if crash_at == Some(k) {
                println!("crashing {k}");
                std::process::abort();
            }
            let entered = mcd::host::monotonic_clock();
            let mut value = [if bcast {
                if node == 0 {
                    100 + k
                } else {
                    0
                }
            } else {
                node as u64 + 1
            }];
            result = if allreduce {
                barrier.allreduce(&mut value, barriers::Op::Sum)
            } else if bcast {
                barrier.bcast(&mut value, 0)
            } else {
                barrier.wait()
            };
            let left = mcd::host::monotonic_clock();
            if let Err(e) = &result {
                println!("error: {e}");
                break 'phases;
            }
            if allreduce || bcast {
                println!("{op} {k} {}", value[0]);
            }
            if let Some(f) = &mut times {
                let us = |d: Duration| d.as_secs_f64() * 1e6;
                writeln!(f, "{k} {:.3} {:.3}", us(entered), us(left)).expect("write times");
            }
            took.push(left - entered);
            k += 1;
        }
        if phases > 1 {
            let mut rest: Vec<f64> = took[1..].iter().map(|d| d.as_secs_f64() * 1e6).collect();
            let mean = rest.iter().sum::<f64>() / rest.len() as f64;
            let mut at = |q: f64| barriers::summary::quantile(&mut rest, q);
            println!("phase {phase} median {:.2} p90 {:.2} p99 {:.2} mean {mean:.2} max {:.2}", at(0.5), at(0.9), at(0.99), at(1.0));
        }
    }
    if let Some(f) = &mut times {
        f.flush().expect("write times");
    }
    if result.is_ok() {
        result = barrier.finish();
        if let Err(e) = &result {
            println!("error: {e}");
        }
    }
    report(&mut barrier);
    match result {
        Ok(()) => println!("done"),
        Err(_) => std::process::exit(3),
    }
}
