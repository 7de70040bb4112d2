//! POSIX record locks (`fcntl F_SETLK` / `F_GETLK`).

use std::fs::File;
use std::io;
use std::mem::zeroed;
use std::os::fd::AsRawFd;

/// A write lock on the whole file.
fn whole_file_write_lock() -> libc::flock {
    // SAFETY: flock is plain data; zero is a valid bit pattern.
    let mut lock: libc::flock = unsafe { zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock
}

/// Tries to take an exclusive POSIX record lock (`fcntl F_SETLK`) on the whole
/// of `file` without blocking. Such a lock belongs to the process: a child
/// forked by another thread does not share it (an `flock` would stay held by
/// the child until it execs). `Ok(None)` when locked; `Ok(Some(pid))` when
/// another process holds it (pid 0 if the kernel cannot say).
pub fn try_lock_record(file: &File) -> io::Result<Option<i32>> {
    let lock = whole_file_write_lock();
    // SAFETY: a live descriptor and a live flock.
    match syscall!(fcntl(file.as_raw_fd(), libc::F_SETLK, &lock)) {
        Ok(_) => Ok(None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EAGAIN)) => {
            Ok(Some(record_lock_holder(file).ok().flatten().unwrap_or(0)))
        }
        Err(e) => Err(e),
    }
}

/// The process holding a record lock on `file`, if another process holds one
/// (pid 0 if the kernel cannot say). Only asks: takes no lock.
pub fn record_lock_holder(file: &File) -> io::Result<Option<i32>> {
    let mut lock = whole_file_write_lock();
    // SAFETY: a live descriptor; F_GETLK fills in the live flock.
    syscall!(fcntl(file.as_raw_fd(), libc::F_GETLK, &mut lock))?;
    Ok((lock.l_type != libc::F_UNLCK as libc::c_short).then_some(lock.l_pid))
}
