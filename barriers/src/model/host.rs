//! The host side of the model: what a node's CPU pays beyond LogP's o_s and
//! o_r, and how many nodes share a machine's cores.
//!
//! - Interrupt-driven receive ([`Host::rx_irq`]): a message that arrives
//!   while the CPU is still busy with an earlier one *from the same NIC* is
//!   taken by the same interrupt and costs `o_r − rx_irq`; one on another
//!   NIC raises an interrupt of its own (the paper's section 5.2: two NICs
//!   cost the ternary tree, coalescing helped concurrent).
//! - Send-completion interrupt ([`Host::tx_irq`]): CPU time charged when
//!   the frame has left the NIC (the paper's 6 µs, the reason its g is 9 µs).
//! - Shared hosts ([`Host::processes`], [`Host::cores`]): the processes of
//!   one machine run on its cores, node i on core i mod cores, in turns: a
//!   core gives the next runnable process (first come, first served) a turn
//!   in which it takes every message waiting for it and runs until it waits
//!   again (its 30 µs of work between barriers included); each change of
//!   process costs [`Host::switch`] (a context switch, or the wake-up of a
//!   process that slept).

/// Host parameters (µs). [`Host::DEDICATED`]: one core per node, polling, no interrupts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Host {
    /// Part of o_r paid once per interrupt (0: polling, no coalescing).
    pub rx_irq: f64,
    /// CPU time of a send-completion interrupt, charged when the frame leaves.
    pub tx_irq: f64,
    /// Nodes (processes) per machine; nodes `i` with the same `i / processes` share one.
    pub processes: usize,
    /// Cores per machine.
    pub cores: usize,
    /// Cost of a core switching to another process (context switch or wake-up).
    pub switch: f64,
    /// Cost of waking a node blocked in a wait when a message for it arrives
    /// (its CPU idle): the kernel's wake-up and the return to user space.
    pub wake: f64,
    /// CPU time of the barrier call itself beyond its messages (entering and
    /// leaving: epoch bookkeeping, the clock reads), charged as a node leaves.
    pub per_barrier: f64,
}

impl Host {
    /// A machine per node, a core for it, polling: LogP's own assumption.
    pub const DEDICATED: Host = Host { rx_irq: 0.0, tx_irq: 0.0, processes: 1, cores: 1, switch: 0.0, wake: 0.0, per_barrier: 0.0 };

    /// The paper's MCD on a Pentium II 350: interrupt-driven receive
    /// (3.1 µs of o_r = 9.5 is the interrupt, 6.4 µs the per-message handler
    /// that a coalesced message still pays), a 6 µs send-completion
    /// interrupt (section 5.1.1), and a 4.5 µs wake-up of a node blocked
    /// waiting. Not in the paper, each set from one observation: the split
    /// of o_r from its concurrent barrier at 16 nodes, faster on two
    /// networks than on one (147 against 179 µs), which only coalescing
    /// explains; the wake-up from the 24 µs by which shuffle exchange and the
    /// binary tree at 32 nodes exceed LogP over their 5 and 6 hops.
    pub const PAPER: Host = Host { rx_irq: 3.1, tx_irq: 6.0, processes: 1, cores: 1, switch: 0.0, wake: 4.5, per_barrier: 0.0 };

    /// `processes` nodes sharing `cores` cores, with `switch` µs per switch.
    pub fn shared(processes: usize, cores: usize, switch: f64) -> Host {
        Host { processes: processes.max(1), cores: cores.max(1), switch, ..Host::DEDICATED }
    }

    /// Whether some core runs more than one process.
    pub fn oversubscribed(&self) -> bool {
        self.processes > self.cores
    }

    /// The core (numbered over all machines) node `v` runs on.
    pub(crate) fn core_of(&self, v: usize) -> usize {
        let per = self.processes.max(1);
        let cores = self.cores.clamp(1, per);
        (v / per) * cores + (v % per) % cores
    }
}

impl Default for Host {
    fn default() -> Host {
        Host::DEDICATED
    }
}
