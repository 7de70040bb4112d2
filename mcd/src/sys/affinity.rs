//! CPU affinity.

use std::io;
use std::mem::{size_of, zeroed};

/// Pins the calling thread to CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "cpu number out of range"));
    }
    // SAFETY: cpu_set_t is plain data; zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: cpu < CPU_SETSIZE, so CPU_SET stays inside the set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: set is a live cpu_set_t of the size passed.
    syscall!(sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set))?;
    Ok(())
}
