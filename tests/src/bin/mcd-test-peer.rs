//! A peer process for integration tests that need a second process: opens an
//! endpoint from the environment (MCD_NODE_FILE, MCD_IFACES, MCD_PORT, ...) and
//! then acts as told.
//!
//! - `hold`: print `holding port P as node N`, then keep the port until stdin closes.
//! - `open`: open and exit 0, or print the error and exit 2.

use std::io::Read;

fn main() {
    let action = std::env::args().nth(1).unwrap_or_default();
    let endpoint = mcd::EndpointConfig::from_env().and_then(mcd::Endpoint::open);
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
        other => {
            eprintln!("unknown action `{other}` (hold or open)");
            std::process::exit(64);
        }
    }
}
