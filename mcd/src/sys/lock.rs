//! POSIX record locks (`fcntl F_SETLK` / `F_GETLK`), and `flock` for a
//! directory.

use std::fs::File;
use std::io;
use std::mem::zeroed;
use std::os::fd::AsRawFd;

/// Who holds a record lock on a file, as the kernel tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordHolder {
    /// Another process holds a write (exclusive) lock (pid 0 if the kernel
    /// cannot say).
    Writer(i32),
    /// Another process holds a read (shared) lock (pid 0 if the kernel
    /// cannot say).
    Reader(i32),
}

/// A lock of `kind` (`F_WRLCK` or `F_RDLCK`) on the whole file.
fn whole_file_lock(kind: libc::c_int) -> libc::flock {
    // SAFETY: flock is plain data; zero is a valid bit pattern.
    let mut lock: libc::flock = unsafe { zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock
}

/// Tries to take a POSIX record lock of `kind` on the whole of `file`
/// without blocking: `Ok(None)` when taken, else who holds a conflicting one
/// (`Ok(None)` too if it went away between the two calls: then it is taken
/// by nobody, and the caller tries again).
fn try_lock_record_kind(file: &File, kind: libc::c_int) -> io::Result<Result<(), Option<RecordHolder>>> {
    let lock = whole_file_lock(kind);
    // SAFETY: a live descriptor and a live flock.
    match syscall!(fcntl(file.as_raw_fd(), libc::F_SETLK, &lock)) {
        Ok(_) => Ok(Ok(())),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EAGAIN)) => Ok(Err(record_lock_holder(file).ok().flatten())),
        Err(e) => Err(e),
    }
}

/// Tries to take an exclusive POSIX record lock (`fcntl F_SETLK`) on the whole
/// of `file` (open for writing) without blocking. Such a lock belongs to the
/// process: a child forked by another thread does not share it (an `flock`
/// would stay held by the child until it execs). `Ok(Ok(()))` when locked;
/// `Ok(Err(holder))` when another process holds a lock, `holder` `None` if
/// that lock went away before the kernel could say whose it was.
pub fn try_lock_record(file: &File) -> io::Result<Result<(), Option<RecordHolder>>> {
    try_lock_record_kind(file, libc::F_WRLCK)
}

/// Tries to take a shared POSIX record lock (`F_RDLCK`) on the whole of
/// `file` (open for reading) without blocking: `Ok(true)` when taken (no
/// process holds a write lock), `Ok(false)` when another process holds one.
pub fn try_read_lock_record(file: &File) -> io::Result<bool> {
    Ok(try_lock_record_kind(file, libc::F_RDLCK)?.is_ok())
}

/// The process holding a record lock on `file` that would conflict with a
/// write lock, if another process holds one. Only asks: takes no lock.
pub fn record_lock_holder(file: &File) -> io::Result<Option<RecordHolder>> {
    let mut lock = whole_file_lock(libc::F_WRLCK);
    // SAFETY: a live descriptor; F_GETLK fills in the live flock.
    syscall!(fcntl(file.as_raw_fd(), libc::F_GETLK, &mut lock))?;
    Ok(match lock.l_type as libc::c_int {
        libc::F_UNLCK => None,
        libc::F_RDLCK => Some(RecordHolder::Reader(lock.l_pid)),
        _ => Some(RecordHolder::Writer(lock.l_pid)),
    })
}

/// Tries to take an exclusive `flock` on `file` (a directory opened for
/// reading will do) without blocking: `Ok(true)` when taken (released when
/// every descriptor of this open file closes), `Ok(false)` when another open
/// file holds it.
pub fn try_flock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: a live descriptor; flock takes no pointer.
    match syscall!(flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB)) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}
