//! The registry of message kinds: the header's kind byte of every protocol
//! in this workspace is allocated here, once, and the protocols import their
//! kinds from here. Two protocols that may share an endpoint must not share
//! a kind; [`ALLOCATIONS`] lists every block, and a test checks that no two
//! overlap.
//!
//! | kinds        | owner                                                   |
//! |--------------|---------------------------------------------------------|
//! | `0x00..0x40` | applications (the ping-pong tool uses 1 to 4)           |
//! | `0x41..0x49` | the LogP measurement tool ([`logp`])                    |
//! | `0x51..0x54` | the receive-gap burst ([`burst`]) and the hot-path benchmark ([`hotpath`]) |
//! | `0xB0..0xB7` | barrier messages ([`BARRIER_FIRST`], `barriers` crate)  |
//! | `0xC0..0xC3` | gathering benchmark results across hosts ([`gather`])   |
//! | `0xF0`       | bootstrap hellos ([`HELLO`], [`crate::bootstrap`])      |
//! | `0xF1`       | a waiting endpoint's announcement to the switch ([`ANNOUNCE`]) |

/// A bootstrap hello ([`crate::bootstrap`]).
pub const HELLO: u8 = 0xF0;
/// A waiting endpoint's frame to itself, which re-teaches the switch where
/// its MAC lives ([`crate::Endpoint::announce`]); no endpoint delivers it.
pub const ANNOUNCE: u8 = 0xF1;

/// The first kind of barrier traffic; the barrier message kinds follow in
/// the `barriers` crate's `MsgKind` order.
pub const BARRIER_FIRST: u8 = 0xB0;
/// How many kinds barrier traffic has, from [`BARRIER_FIRST`].
pub const BARRIER_COUNT: u8 = 7;

/// The ping-pong latency tool (`mcd-pingpong`).
pub mod pingpong {
    /// A ping, echoed as a pong.
    pub const PING: u8 = 1;
    /// The echo of a ping.
    pub const PONG: u8 = 2;
    /// Client to echo: go to UDP until told otherwise.
    pub const TO_UDP: u8 = 3;
    /// Client to echo: stop.
    pub const QUIT: u8 = 4;
}

/// The LogP parameter measurement.
pub mod logp {
    /// A ping, answered by a pong.
    pub const PING: u8 = 0x41;
    /// The answer to a ping or a policy change.
    pub const PONG: u8 = 0x42;
    /// A request, answered with data.
    pub const REQUEST: u8 = 0x43;
    /// The answer to a request.
    pub const DATA: u8 = 0x44;
    /// A message the peer only receives.
    pub const SINK: u8 = 0x45;
    /// A change of the peer's wait policy (the code in the sequence field).
    pub const POLICY: u8 = 0x46;
    /// Go to UDP until told otherwise.
    pub const TO_UDP: u8 = 0x47;
    /// Stop.
    pub const QUIT: u8 = 0x48;
}

/// The receive-gap measurement (`mcd-logp`): senders bursting to one node.
pub mod burst {
    /// A sender is ready.
    pub const READY: u8 = 0x51;
    /// The receiver says go.
    pub const GO: u8 = 0x52;
    /// A message of the burst.
    pub const DATA: u8 = 0x53;
}

/// The hot-path benchmark (`mcd-bench hotpath`): its bare-endpoint loops.
pub mod hotpath {
    /// A ping, an echo or an exchange message.
    pub const STEP: u8 = 0x54;
}

/// Gathering benchmark results across hosts.
pub mod gather {
    /// Node 0 asks a node for its figures.
    pub const REQUEST: u8 = 0xC0;
    /// A node's figures.
    pub const FIGURES: u8 = 0xC1;
    /// Node 0 has all it needs.
    pub const DONE: u8 = 0xC2;
}

/// Every block of kinds allocated to a protocol: (owner, first kind, count).
pub const ALLOCATIONS: [(&str, u8, u8); 8] = [
    ("ping-pong", pingpong::PING, 4),
    ("LogP measurement", logp::PING, 8),
    ("receive-gap burst", burst::READY, 3),
    ("hot-path benchmark", hotpath::STEP, 1),
    ("barriers", BARRIER_FIRST, BARRIER_COUNT),
    ("result gathering", gather::REQUEST, 3),
    ("bootstrap", HELLO, 1),
    ("announcement", ANNOUNCE, 1),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_protocols_share_a_kind() {
        let mut owner = [None; 256];
        for (name, first, count) in ALLOCATIONS {
            for kind in first..first.checked_add(count).expect("block within 0..=255") {
                if let Some(other) = owner[kind as usize].replace(name) {
                    panic!("kind {kind:#04x} is allocated to {other} and to {name}");
                }
            }
        }
        let listed = [
            pingpong::PONG,
            pingpong::TO_UDP,
            pingpong::QUIT,
            logp::PONG,
            logp::REQUEST,
            logp::DATA,
            logp::SINK,
            logp::POLICY,
            logp::TO_UDP,
            logp::QUIT,
            gather::FIGURES,
            gather::DONE,
        ];
        for kind in listed {
            assert!(owner[kind as usize].is_some(), "kind {kind:#04x} lies outside its protocol's block");
        }
    }
}
