//! Sending and watching arbitrary frames: a send-only raw socket for fault
//! injection and tools (foreign traffic, malformed frames), and a
//! receive-only one that sees every frame an interface carries (what a
//! station on the segment sees: tests that play an outsider). Applications
//! use [`crate::Endpoint`].

use std::time::{Duration, Instant};

use crate::sys::{self, PacketSocket};
use crate::{Error, Result};

/// A send-only raw socket on one interface: frames go out byte for byte.
#[derive(Debug)]
pub struct RawSender {
    socket: PacketSocket,
    interface: String,
}

impl RawSender {
    /// Opens a sender on `interface` (of the calling thread's network namespace).
    pub fn open(interface: &str) -> Result<RawSender> {
        let info = crate::config::lookup_interface(interface)?;
        let socket = PacketSocket::open().map_err(|e| Error::os("opening an AF_PACKET socket", e))?;
        // Protocol 0: bound for sending, receives nothing.
        socket.bind(info.index, 0).map_err(|e| Error::os(format!("binding to {interface}"), e))?;
        Ok(RawSender { socket, interface: interface.into() })
    }

    /// Sends `frame` (Ethernet header included) as it is.
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        self.socket.send(frame).map(drop).map_err(|e| Error::os(format!("sending a raw frame on {}", self.interface), e))
    }
}

/// A receive-only raw socket on one interface: every frame it carries, of
/// every EtherType, byte for byte, with no filter (one system call each;
/// for tools and tests, not for a job's traffic).
#[derive(Debug)]
pub struct RawReceiver {
    socket: PacketSocket,
    interface: String,
}

/// A frame a [`RawReceiver`] received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawFrame {
    /// Its length (bytes copied into the buffer; a longer frame is cut off).
    pub len: usize,
    /// Whether this host sent it (the socket sees its own host's frames go out).
    pub outgoing: bool,
}

impl RawReceiver {
    /// Opens a receiver on `interface` (of the calling thread's network namespace).
    pub fn open(interface: &str) -> Result<RawReceiver> {
        let info = crate::config::lookup_interface(interface)?;
        let socket = PacketSocket::open().map_err(|e| Error::os("opening an AF_PACKET socket", e))?;
        socket.raise_receive_buffer(8 << 20).map_err(|e| Error::os("raising the receive buffer", e))?;
        socket.bind(info.index, sys::ALL_PROTOCOLS).map_err(|e| Error::os(format!("binding to {interface}"), e))?;
        Ok(RawReceiver { socket, interface: interface.into() })
    }

    /// The next frame, copied into `buf`, waiting up to `timeout` for one
    /// (`None`: none came).
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> Result<Option<RawFrame>> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.socket.try_recv(buf).map_err(|e| Error::os(format!("receiving on {}", self.interface), e))?;
            if let Some((len, kind)) = got {
                return Ok(Some(RawFrame { len: len.min(buf.len()), outgoing: kind == sys::OUTGOING }));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            sys::poll_readable(&[self.socket.raw_fd()], Some(left)).map_err(|e| Error::os(format!("waiting on {}", self.interface), e))?;
        }
    }
}
