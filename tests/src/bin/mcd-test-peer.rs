//! A peer process for integration tests that need a second process: opens an
//! endpoint from the environment (MCD_NODE_FILE, MCD_IFACES, MCD_PORT, ...) and
//! then acts as told.
//!
//! - `hold`: print `holding port P as node N`, then keep the port until stdin closes.
//! - `open`: open and exit 0, or print the error and exit 2.
//! - `barrier ALGORITHM COUNT FAILURE_MS`: run COUNT barriers; print `done`, or
//!   the barrier error and exit 3.
//! - `discover COUNT`: open through the bootstrap (`EndpointConfig::bootstrap`:
//!   rank and size from the environment, discovery without a node list), print
//!   `node N nodes: MAC,MAC,...`, run COUNT dissemination barriers, print `done`.

use std::io::Read;

fn main() {
    let action = std::env::args().nth(1).unwrap_or_default();
    let config = if action == "discover" { mcd::EndpointConfig::bootstrap() } else { mcd::EndpointConfig::from_env() };
    let endpoint = config.and_then(mcd::Endpoint::open);
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
            println!("done");
        }
        other => {
            eprintln!("unknown action `{other}` (hold, open, barrier or discover)");
            std::process::exit(64);
        }
    }
}
