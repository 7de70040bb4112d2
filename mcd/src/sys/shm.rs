//! Shared memory between the processes of one host: a file (in `/dev/shm`)
//! mapped `MAP_SHARED`, seen as typed layouts of atomics ([`SharedLayout`]), and futex
//! wait/wake on those words (the process-shared futex operations, not the
//! `_PRIVATE` ones, since the word lives in several address spaces).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

/// A shared mapping of a whole file; unmapped on drop. The file itself is
/// only the name: unlinking it leaves the mapping (and the memory) alive
/// until every process has unmapped it.
#[derive(Debug)]
pub struct SharedMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value; every access goes through
// atomics, so sharing it between threads is sound.
unsafe impl Send for SharedMapping {}
// SAFETY: as above: only atomic views are handed out.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Creates `path` (which must not exist: `O_EXCL`, mode 0600), sizes it to
    /// `len` zero bytes and maps it. Fails with `AlreadyExists` if the name
    /// is taken.
    pub fn create_new(path: &Path, len: usize) -> io::Result<SharedMapping> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path)?;
        if let Err(e) = file.set_len(len as u64) {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        SharedMapping::map(&file, len)
    }

    /// Maps the existing file `path`; `InvalidData` while it is shorter than
    /// `len` (its creator has not sized it yet).
    pub fn open_existing(path: &Path, len: usize) -> io::Result<SharedMapping> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let size = file.metadata()?.len();
        if size < len as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} is {size} bytes, not {len}", path.display())));
        }
        SharedMapping::map(&file, len)
    }

    fn map(file: &File, len: usize) -> io::Result<SharedMapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a shared mapping needs at least one byte"));
        }
        // SAFETY: a fresh shared mapping of a live descriptor; the kernel
        // picks the address. The descriptor may close afterwards.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base as *mut u8).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(SharedMapping { base, len })
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: creation refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `T` at byte `offset`: a typed view of part of the mapping, for
    /// a [`SharedLayout`] (a `#[repr(C)]` layout made of atomics only,
    /// declared with [`shared_layout!`](crate::shared_layout)). Panics if
    /// `offset` is not aligned for `T` or `T` does not fit (a layout bug).
    pub fn view<T: SharedLayout>(&self, offset: usize) -> &T {
        self.slice::<T>(offset, 1).first().expect("one element")
    }

    /// The `count` consecutive `T`s from byte `offset` (as [`view`](Self::view)).
    pub fn slice<T: SharedLayout>(&self, offset: usize, count: usize) -> &[T] {
        let align = std::mem::align_of::<T>();
        let bytes = std::mem::size_of::<T>().checked_mul(count).and_then(|b| b.checked_add(offset));
        assert!(
            offset.is_multiple_of(align) && align <= PAGE_ALIGN && bytes.is_some_and(|end| end <= self.len),
            "{count} × {} at offset {offset} outside the mapping of {} bytes or misaligned",
            std::any::type_name::<T>(),
            self.len
        );
        // SAFETY: the range is inside the mapping, which lives as long as
        // `self` (the borrow), and aligned for `T` (the mapping is
        // page-aligned, `offset` a multiple of `T`'s alignment, which is at
        // most a page). `T: SharedLayout` promises every bit pattern is a
        // valid `T` (the memory may hold anything another process wrote)
        // and that all its bytes are atomics, so the shared reference
        // tolerates writes by other threads and processes: there is no
        // non-atomic access to race with.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset) as *const T, count) }
    }
}

/// The alignment `mmap` guarantees (a page; 4 KiB is the smallest).
const PAGE_ALIGN: usize = 4096;

/// A layout that may be seen in shared memory through a shared reference
/// ([`SharedMapping::view`]): every bit pattern is valid and every byte
/// (padding aside) belongs to an atomic, so other processes' writes are
/// never a data race. Implemented here for `AtomicU32`, `AtomicU64` and
/// arrays of layouts; a struct gets it from [`shared_layout!`](crate::shared_layout),
/// which makes it `#[repr(C)]` and checks that every field is a layout.
///
/// # Safety
/// Implement it only for a type whose every bit pattern is valid, made
/// only of atomics (and padding), with a fixed (`#[repr(C)]`) layout.
pub unsafe trait SharedLayout: Sync {}

// SAFETY: an atomic word: any bits are a valid value; all access is atomic.
unsafe impl SharedLayout for AtomicU32 {}
// SAFETY: as for `AtomicU32`.
unsafe impl SharedLayout for AtomicU64 {}
// SAFETY: an array of layouts has no bytes but theirs.
unsafe impl<T: SharedLayout, const N: usize> SharedLayout for [T; N] {}

/// Declares a `#[repr(C)]` struct whose fields are all
/// [`SharedLayout`](crate::shm::SharedLayout)s (atomics, arrays of them,
/// other such structs), and implements that trait for it, so that a
/// [`SharedMapping`](crate::shm::SharedMapping) hands it out as `&T`.
/// Extra attributes (docs, `#[repr(align(N))]`, derives) pass through; a
/// field of another type is a compile error. The crate using it needs no
/// `unsafe` of its own: the one `unsafe impl` is this macro's, and it holds
/// because the macro fixes the representation and checks every field.
///
/// ```
/// use std::sync::atomic::{AtomicU32, AtomicU64};
/// mcd::shared_layout! {
///     /// A line of shared words.
///     #[repr(align(128))]
///     pub struct Line {
///         /// A counter.
///         pub count: AtomicU32,
///         /// Its owner.
///         pub owner: AtomicU64,
///     }
/// }
/// assert_eq!(std::mem::size_of::<Line>(), 128);
/// ```
#[macro_export]
macro_rules! shared_layout {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($(#[$fmeta:meta])* $fvis:vis $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[repr(C)]
        $vis struct $name { $($(#[$fmeta])* $fvis $field: $ty),* }

        const _: fn() = || {
            fn every_field_is_a_shared_layout<T: $crate::shm::SharedLayout>() {}
            $(every_field_is_a_shared_layout::<$ty>();)*
        };

        // SAFETY: `#[repr(C)]` (the macro adds it), and every field is a
        // `SharedLayout` (checked above), so every bit pattern is valid and
        // every byte but padding is an atomic's.
        #[allow(unsafe_code)]
        unsafe impl $crate::shm::SharedLayout for $name {}
    };
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping this value owns, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len) };
    }
}

/// Sleeps while `word` holds `expected`, until a [`futex_wake`] on it or
/// `timeout` (none: no limit). Returns at once if the word differs; a
/// spurious return is possible, so callers re-check their condition.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> io::Result<()> {
    let ts = timeout.map(|t| libc::timespec { tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t, tv_nsec: t.subsec_nanos() as libc::c_long });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit word; `ts_ptr` is NULL or a
    // live timespec (a relative timeout for FUTEX_WAIT).
    match syscall!(syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, ts_ptr, 0usize, 0u32)) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ETIMEDOUT)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Wakes up to `count` sleepers of [`futex_wait`] on `word`, in any process
/// that maps it; how many were woken.
pub fn futex_wake(word: &AtomicU32, count: u32) -> io::Result<usize> {
    let count = count.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: `word` is a live, aligned 32-bit word; the other arguments are unused.
    let woken = syscall!(syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, count, 0usize, 0usize, 0u32))?;
    Ok(woken as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("mcd-shm-test-{name}-{}", std::process::id()))
    }

    #[test]
    fn two_mappings_of_one_file_share_their_words_and_the_name_is_exclusive() {
        let path = scratch("share");
        let _ = std::fs::remove_file(&path);
        let a = SharedMapping::create_new(&path, 4096).unwrap();
        assert_eq!(SharedMapping::create_new(&path, 4096).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        let b = SharedMapping::open_existing(&path, 4096).unwrap();
        std::fs::remove_file(&path).unwrap();
        a.view::<AtomicU64>(8).store(0x1234_5678_9abc, Ordering::SeqCst);
        assert_eq!(b.view::<AtomicU64>(8).load(Ordering::SeqCst), 0x1234_5678_9abc);
        assert!(SharedMapping::open_existing(&path, 4096).is_err(), "unlinked: no longer found");
    }

    crate::shared_layout! {
        #[repr(align(64))]
        struct Pair {
            small: AtomicU32,
            big: [AtomicU64; 2],
        }
    }

    #[test]
    fn a_typed_view_sees_its_fields_at_their_repr_c_offsets_and_checks_bounds_and_alignment() {
        let path = scratch("view");
        let _ = std::fs::remove_file(&path);
        let map = SharedMapping::create_new(&path, 128).unwrap();
        std::fs::remove_file(&path).unwrap();
        let pairs = map.slice::<Pair>(0, 2);
        pairs[1].big[1].store(7, Ordering::SeqCst);
        assert_eq!(map.view::<AtomicU64>(64 + 8 + 8).load(Ordering::SeqCst), 7, "repr(C): small, padding, big[0], big[1]");
        let misaligned = std::panic::catch_unwind(|| map.view::<AtomicU64>(4).load(Ordering::SeqCst));
        assert!(misaligned.is_err(), "a misaligned view panics");
        let outside = std::panic::catch_unwind(|| map.slice::<Pair>(64, 2).len());
        assert!(outside.is_err(), "a view past the end panics");
    }

    #[test]
    fn a_file_shorter_than_asked_is_not_mapped() {
        let path = scratch("short");
        std::fs::write(&path, [0u8; 16]).unwrap();
        assert_eq!(SharedMapping::open_existing(&path, 4096).unwrap_err().kind(), io::ErrorKind::InvalidData);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn futex_wait_returns_on_a_changed_word_on_wake_and_on_timeout() {
        let word = std::sync::Arc::new(AtomicU32::new(0));
        // The word differs: no sleep at all.
        futex_wait(&word, 1, None).unwrap();
        // The timeout ends the sleep.
        let start = std::time::Instant::now();
        futex_wait(&word, 0, Some(Duration::from_millis(5))).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(4));
        // A wake ends it.
        let sleeper = {
            let word = word.clone();
            std::thread::spawn(move || {
                while word.load(Ordering::SeqCst) == 0 {
                    futex_wait(&word, 0, Some(Duration::from_secs(10))).unwrap();
                }
            })
        };
        word.store(1, Ordering::SeqCst);
        futex_wake(&word, u32::MAX).unwrap();
        sleeper.join().unwrap();
    }
}
