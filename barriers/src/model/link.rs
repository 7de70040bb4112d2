//! Links and what connects them: Ethernet frame timing (serialisation of a
//! frame with its preamble and inter-frame gap), named link presets, and the
//! two topologies the paper measured: a switch (one output queue per port,
//! full duplex) and a repeater hub (one half-duplex medium per segment,
//! CSMA/CD with binary exponential backoff); and the virtual cluster's hub, a
//! software bridge that floods every frame without a shared medium.

/// An Ethernet link's speed and framing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// A short name ("100M", "1G", ...).
    pub name: &'static str,
    /// Bits per second.
    pub bits_per_s: f64,
    /// Bytes of mcd header carried before the payload.
    pub header_bytes: usize,
    /// The hub's collision window: how long after one station starts another
    /// can still start without hearing it (propagation and repeater delay), µs.
    pub collision_window_us: f64,
    /// A typical NIC-to-NIC latency through one switch for a minimum frame
    /// (NIC DMA both sides, store-and-forward, one frame time), µs: an
    /// assumption for predictions on hardware not measured here (the
    /// 100 Mb/s one is the paper's measured L).
    pub latency_us: f64,
}

/// Ethernet: destination, source, type (14) + FCS (4).
const ETH_OVERHEAD: usize = 18;
/// Preamble and start delimiter (8) + inter-frame gap (12).
const WIRE_EXTRA: usize = 20;
/// The smallest frame, FCS included.
const MIN_FRAME: usize = 64;
/// mcd's header on the wire (port, kind, epoch, tag, length), rounded up.
const MCD_HEADER: usize = 16;

impl Link {
    const fn preset(name: &'static str, bits_per_s: f64, collision_window_us: f64, latency_us: f64) -> Link {
        Link { name, bits_per_s, header_bytes: MCD_HEADER, collision_window_us, latency_us }
    }
    /// Fast Ethernet, the paper's (DEC 21140 NICs, 32-port switch or
    /// repeater hub). Collision window 1 µs: a Class II repeater's 0.92 µs
    /// plus a few metres of cable (so a collision holds the medium about
    /// 3.3 µs with jam and gap).
    pub const FAST_ETHERNET: Link = Link::preset("100M", 100e6, 1.0, 17.5);
    /// Gigabit Ethernet.
    pub const GBE_1: Link = Link::preset("1G", 1e9, 0.1, 5.0);
    /// 10 GbE.
    pub const GBE_10: Link = Link::preset("10G", 10e9, 0.01, 2.0);
    /// 25 GbE.
    pub const GBE_25: Link = Link::preset("25G", 25e9, 0.004, 1.5);
    /// 100 GbE.
    pub const GBE_100: Link = Link::preset("100G", 100e9, 0.001, 1.0);
    /// Every preset, slowest first.
    pub const PRESETS: [Link; 5] = [Link::FAST_ETHERNET, Link::GBE_1, Link::GBE_10, Link::GBE_25, Link::GBE_100];

    /// The preset named `name` ("100M", "1G", "10G", "25G", "100G"; case and a trailing "bE" ignored).
    pub fn named(name: &str) -> Option<Link> {
        let n = name.trim().to_ascii_uppercase();
        let n = n.trim_end_matches("BE").trim_end_matches("BPS").trim_end_matches("B/S");
        Link::PRESETS.into_iter().find(|l| l.name == n)
    }

    /// Bytes on the wire for a message of `payload` bytes: headers, padding
    /// to the minimum frame, preamble and inter-frame gap.
    pub fn wire_bytes(&self, payload: usize) -> usize {
        (payload + self.header_bytes + ETH_OVERHEAD).max(MIN_FRAME) + WIRE_EXTRA
    }

    /// Time one frame of `payload` bytes holds the wire, µs.
    pub fn frame_us(&self, payload: usize) -> f64 {
        self.wire_bytes(payload) as f64 * 8.0 / self.bits_per_s * 1e6
    }

    /// One CSMA/CD slot (512 bit times), µs: the backoff unit.
    pub fn slot_us(&self) -> f64 {
        512.0 / self.bits_per_s * 1e6
    }

    /// The inter-frame gap (96 bit times), µs.
    pub fn ifg_us(&self) -> f64 {
        96.0 / self.bits_per_s * 1e6
    }

    /// The jam signal after a collision (32 bit times), µs.
    pub fn jam_us(&self) -> f64 {
        32.0 / self.bits_per_s * 1e6
    }
}

/// How the nodes' NICs on one rail are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Topology {
    /// A switch: every port has its own output queue; frames to different
    /// nodes never wait for each other; a multicast is copied to every port.
    #[default]
    Switch,
    /// A repeater hub: one half-duplex medium that every frame on the rail
    /// takes in turn; stations that start together collide and back off.
    Hub,
    /// A software bridge that floods every frame to every port (a Linux
    /// bridge with ageing time 0: the virtual cluster's hub). No shared
    /// medium and no collisions, timed as the switch, but every unicast
    /// reaches every port as a multicast does, and on veth the bridge copies
    /// in the sender's context: each port beyond the first costs the sender
    /// [`super::Setup::flood_us`]. The other nodes' kernels drop the frames
    /// not addressed to them (`PACKET_OTHERHOST`, in mcd's socket filter),
    /// still in the sender's context, so their processes pay nothing.
    FloodingBridge,
}

impl std::fmt::Display for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Topology::Switch => "switch",
            Topology::Hub => "hub",
            Topology::FloodingBridge => "flooding bridge",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimum_frame_is_84_bytes_on_the_wire() {
        // 64-byte frame + 8 preamble + 12 gap: 6.72 µs at 100 Mb/s, 0.672 µs at 1 Gb/s.
        assert_eq!(Link::FAST_ETHERNET.wire_bytes(4), 84);
        assert!((Link::FAST_ETHERNET.frame_us(4) - 6.72).abs() < 1e-9);
        assert!((Link::GBE_1.frame_us(0) - 0.672).abs() < 1e-9);
        assert!((Link::FAST_ETHERNET.slot_us() - 5.12).abs() < 1e-9);
    }

    #[test]
    fn serialisation_scales_with_size_beyond_the_minimum_frame() {
        let l = Link::GBE_10;
        assert_eq!(l.frame_us(0), l.frame_us(20), "padding to 64 bytes");
        let (a, b) = (l.frame_us(1000), l.frame_us(2000));
        assert!((b - a - 1000.0 * 8.0 / 10e9 * 1e6).abs() < 1e-9, "{a} {b}");
        assert!(Link::GBE_1.frame_us(1000) > 9.9 * l.frame_us(1000));
    }

    #[test]
    fn presets_are_named_and_ordered() {
        assert_eq!(Link::named("1GbE"), Some(Link::GBE_1));
        assert_eq!(Link::named("100m"), Some(Link::FAST_ETHERNET));
        assert_eq!(Link::named("25G").unwrap().bits_per_s, 25e9);
        assert_eq!(Link::named("3G"), None);
        assert!(Link::PRESETS.windows(2).all(|w| w[0].bits_per_s < w[1].bits_per_s));
    }
}
