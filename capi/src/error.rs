//! The C ABI's errors: the `MCD_ERR_*` codes, and [`CError`] (a code and
//! its text) made from mcd's and the barrier's errors.

use std::ffi::c_int;

use barriers::{BarrierError, TransportError};

/// Success.
pub const MCD_OK: c_int = 0;
/// A null pointer or a string that is not UTF-8, or a call out of order.
pub const MCD_ERR_ARGUMENT: c_int = -1;
/// The parameters or the environment are incomplete or inconsistent.
pub const MCD_ERR_CONFIG: c_int = -2;
/// No permission for raw sockets: grant `CAP_NET_RAW`
/// (`setcap cap_net_raw+ep PROGRAM`), or run as root.
pub const MCD_ERR_PERMISSION: c_int = -3;
/// No such interface, or no default route to find one.
pub const MCD_ERR_INTERFACE: c_int = -4;
/// The ranks did not all find each other in time.
pub const MCD_ERR_BOOTSTRAP: c_int = -5;
/// A barrier failed: a peer is silent (dead), or the deadline passed.
pub const MCD_ERR_BARRIER: c_int = -6;
/// Another system call failed.
pub const MCD_ERR_SYSTEM: c_int = -7;
/// A bug in mcd (a panic caught at the boundary).
pub const MCD_ERR_INTERNAL: c_int = -8;
/// The ranks called different collectives at once (another operation,
/// type or count, or a broadcast from another root): the call fails on
/// every rank (a rank whose call had returned, a broadcast's root say, at
/// its next call on the job or group, which still runs), and later calls
/// work.
pub const MCD_ERR_MISMATCH: c_int = -9;
/// The barrier cannot run this collective: its transport carries no data,
/// or its algorithm would count contributions more than once. Run the
/// collective another way (the MPI library's own), or choose another
/// algorithm.
pub const MCD_ERR_UNSUPPORTED: c_int = -10;

/// An error: its code and its text.
#[derive(Clone, Debug)]
pub struct CError {
    /// One of the `MCD_ERR_*` codes.
    pub code: c_int,
    /// What happened and what to do.
    pub message: String,
}

impl CError {
    /// The code of an mcd error.
    fn from_mcd_code(e: &mcd::Error) -> c_int {
        match e {
            mcd::Error::NoCapability { .. } => MCD_ERR_PERMISSION,
            mcd::Error::NoSuchInterface { .. } | mcd::Error::NoDefaultRoute { .. } => MCD_ERR_INTERFACE,
            mcd::Error::Bootstrap(_) => MCD_ERR_BOOTSTRAP,
            mcd::Error::Io { .. } | mcd::Error::SendRingFull { .. } | mcd::Error::FrameRejected { .. } => MCD_ERR_SYSTEM,
            _ => MCD_ERR_CONFIG,
        }
    }
}

impl From<mcd::Error> for CError {
    fn from(e: mcd::Error) -> CError {
        CError { code: CError::from_mcd_code(&e), message: e.to_string() }
    }
}

impl From<BarrierError> for CError {
    fn from(e: BarrierError) -> CError {
        let code = match &e {
            BarrierError::CollectiveMismatch { .. } => MCD_ERR_MISMATCH,
            BarrierError::NoData { .. } | BarrierError::AlgorithmCannot { .. } => MCD_ERR_UNSUPPORTED,
            BarrierError::Config(_) | BarrierError::ConfigMismatch { .. } => MCD_ERR_CONFIG,
            BarrierError::Misuse(_) => MCD_ERR_ARGUMENT,
            BarrierError::System(_) => MCD_ERR_SYSTEM,
            BarrierError::Internal(_) => MCD_ERR_INTERNAL,
            BarrierError::Transport(t) => return t.into(),
            _ => MCD_ERR_BARRIER,
        };
        CError { code, message: e.to_string() }
    }
}

/// A transport's error as C sees it: mcd's keeps its own code (a missing
/// capability is `MCD_ERR_PERMISSION`, not a system error).
impl From<&TransportError> for CError {
    fn from(e: &TransportError) -> CError {
        match e {
            TransportError::Mcd(m) => CError { code: CError::from_mcd_code(m), message: format!("barrier transport: {m}") },
            TransportError::Invalid(_) => CError { code: MCD_ERR_ARGUMENT, message: format!("barrier transport: {e}") },
            _ => CError { code: MCD_ERR_SYSTEM, message: format!("barrier transport: {e}") },
        }
    }
}

impl From<TransportError> for CError {
    fn from(e: TransportError) -> CError {
        CError::from(&e)
    }
}

/// A configuration error.
pub(crate) fn config_error(message: impl Into<String>) -> CError {
    CError { code: MCD_ERR_CONFIG, message: message.into() }
}

/// An argument error.
pub(crate) fn argument(message: impl Into<String>) -> CError {
    CError { code: MCD_ERR_ARGUMENT, message: message.into() }
}
