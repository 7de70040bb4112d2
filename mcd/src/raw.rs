//! Sending arbitrary frames: a send-only raw socket for fault injection and
//! tools (foreign traffic, malformed frames). Applications use [`crate::Endpoint`].

use crate::sys::PacketSocket;
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
