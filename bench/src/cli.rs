//! Command-line pieces shared by the tools: the two-node tools' options
//! (`mcd-pingpong`, `mcd-logp`) and value parsers that refuse meaningless
//! values before anything runs.

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

/// A count that must be at least 1 (iterations, rounds, samples, rails): a
/// clap value parser, so that 0 is refused before anything runs.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

/// A virtual cluster's node count: 2 to 64 (a barrier of one node measures
/// nothing; more namespaces than 64 take minutes to build).
pub fn node_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (2..=64).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} nodes: node counts are 2 to 64")),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

/// A positive scale factor.
pub fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        Ok(x) => Err(format!("{x}: must be above 0")),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

/// A stem for the names of the virtual clusters a tool builds: 1 to 4
/// lowercase letters or digits (the tool appends up to two characters, and a
/// cluster's name is at most 6).
pub fn cluster_stem(s: &str) -> Result<String, String> {
    if (1..=4).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        Ok(s.to_string())
    } else {
        Err(format!("`{s}`: a cluster name stem is 1 to 4 lowercase letters or digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meaningless_values_are_refused_with_a_reason() {
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").unwrap_err().contains("at least 1"));
        assert!(at_least_one("-1").unwrap_err().contains("whole number"));
        assert_eq!(node_count("2"), Ok(2));
        assert!(node_count("1").unwrap_err().contains("2 to 64"));
        assert!(node_count("65").is_err());
        assert_eq!(positive("0.5"), Ok(0.5));
        assert!(positive("0").is_err() && positive("nan").is_err() && positive("x").is_err());
        assert_eq!(cluster_stem("h15"), Ok("h15".to_string()));
        assert!(cluster_stem("toolong").unwrap_err().contains("1 to 4"));
        assert!(cluster_stem("A-b").is_err() && cluster_stem("").is_err());
    }
}
