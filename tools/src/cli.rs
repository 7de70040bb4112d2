//! Command-line pieces shared by the two-node tools (`mcd-pingpong`, `mcd-logp`).

use std::net::SocketAddr;

/// Which side a two-node tool runs when it runs across real nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// The measuring side.
    Client,
    /// The side that answers.
    Echo,
}

/// The options for running one side of a two-node tool on real NICs.
#[derive(Clone, Debug, clap::Args)]
pub struct TwoNodeArgs {
    /// Run one side across real nodes instead of the virtual cluster.
    #[arg(long)]
    pub role: Option<Role>,
    /// Client: the echo's node number.
    #[arg(long, default_value_t = 1)]
    pub peer: usize,
    /// Client: the echo's UDP address (IP:PORT), for the UDP comparison.
    #[arg(long)]
    pub udp_peer: Option<SocketAddr>,
    /// Echo: the UDP address to answer on.
    #[arg(long)]
    pub udp_bind: Option<SocketAddr>,
}
