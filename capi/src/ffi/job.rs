//! The C functions on a job: open it, its barrier, its queries, its end.

use std::ffi::{c_char, c_int};

use super::{algorithm, c_str, end, get_stats, guarded, guarded_count, put, test, why};
use crate::error::{argument, config_error};
use crate::{mcd_stats, CError, Communicator, Job, Settings};
// The C functions and types the docs name.
#[cfg(doc)]
use crate::*;

/// A job handle argument.
///
/// # Safety
/// `job` is NULL or a handle from `mcd_init*` not yet finalized.
pub(super) unsafe fn handle<'a>(job: *mut Job) -> Result<&'a Job, CError> {
    // SAFETY: per the caller's guarantee, a live handle (used from several
    // threads only through `&Job`, which is Sync).
    unsafe { job.as_ref() }.ok_or_else(|| argument("the job handle is NULL"))
}

/// Explicit parameters of [`mcd_init`]; [`mcd_params_default`] leaves every
/// field "from the environment".
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mcd_params {
    /// Rank, or -1: from the environment (with `size`).
    pub rank: c_int,
    /// Job size, or -1: from the environment.
    pub size: c_int,
    /// Interfaces, one per rail (`"eth0,eth1"`), or NULL (then `MCD_IFACES`,
    /// else the default route's interface).
    pub interfaces: *const c_char,
    /// A node-list file, or NULL (then `MCD_NODES`/`MCD_NODE_FILE`, else discovery).
    pub node_file: *const c_char,
    /// Job name or number, or NULL (then `MCD_JOB`/`SLURM_JOB_ID`).
    pub job: *const c_char,
    /// Algorithm name, or NULL (then `MCD_ALGORITHM`, default `auto`).
    pub algorithm: *const c_char,
    /// Port 0..=255, or -1: from the environment (default 0).
    pub port: c_int,
    /// For `auto`: the job's processes on its busiest host, or -1: the
    /// launcher's local size (`MCD_LOCAL_PROCS`, ...). Pass the same on
    /// every rank (the MPI interposer agrees on the maximum), or hosts with
    /// different counts may pick different algorithms and fail to join.
    pub local_procs: c_int,
    /// For `auto`: the cores of the job's smallest host, or -1: this host's.
    pub cpus: c_int,
    /// Authentication: [`MCD_AUTH_ENV`] (from `MCD_KEY_FILE` / `MCD_AUTH`),
    /// [`MCD_AUTH_KEY`] (the `secret` below, the same on every rank) or
    /// [`MCD_AUTH_OFF`] (unauthenticated frames).
    pub auth: c_int,
    /// The job's secret when `auth` is [`MCD_AUTH_KEY`] (e.g. from
    /// [`mcd_secret_generate`] on one rank, sent to the others over a
    /// channel of the launcher's, never over the Ethernet segment in clear).
    pub secret: [u8; MCD_SECRET_LEN],
}

/// Bytes of a job secret.
pub const MCD_SECRET_LEN: usize = 16;
const _: () = assert!(MCD_SECRET_LEN == mcd::auth::SECRET_LEN);
/// `mcd_params::auth`: from the environment (`MCD_KEY_FILE`, `MCD_AUTH`).
pub const MCD_AUTH_ENV: c_int = 0;
/// `mcd_params::auth`: sign and verify with `mcd_params::secret`.
pub const MCD_AUTH_KEY: c_int = 1;
/// `mcd_params::auth`: no authentication (anyone on the segment can forge frames).
pub const MCD_AUTH_OFF: c_int = 2;

/// Fills `params` with "everything from the environment".
///
/// # Safety
/// `params` is NULL or points to writable memory for an `mcd_params`.
#[no_mangle]
pub unsafe extern "C" fn mcd_params_default(params: *mut mcd_params) {
    // SAFETY: checked for NULL; writable per the contract.
    if let Some(p) = unsafe { params.as_mut() } {
        *p = mcd_params {
            rank: -1,
            size: -1,
            interfaces: std::ptr::null(),
            node_file: std::ptr::null(),
            job: std::ptr::null(),
            algorithm: std::ptr::null(),
            port: -1,
            local_procs: -1,
            cpus: -1,
            auth: MCD_AUTH_ENV,
            secret: [0; MCD_SECRET_LEN],
        };
    }
}

/// Opens a job from the environment alone and stores its handle in `*out`
/// (NULL on failure).
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_init_env(out: *mut *mut Job) -> c_int {
    // SAFETY: forwarded contract; NULL params means "all from the environment".
    unsafe { mcd_init(std::ptr::null(), out) }
}

/// Opens a job with explicit `params` (NULL: all from the environment) and
/// stores its handle in `*out` (NULL on failure).
///
/// # Safety
/// `params` is NULL or a valid `mcd_params` whose strings are NULL or
/// NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_init(params: *const mcd_params, out: *mut *mut Job) -> c_int {
    guarded(|| {
        // SAFETY: forwarded contract.
        unsafe { put(out, std::ptr::null_mut(), "mcd_init", "out") }?;
        // SAFETY: NULL or a valid mcd_params per the contract.
        let settings = match unsafe { params.as_ref() } {
            // SAFETY: forwarded contract on its strings.
            Some(p) => unsafe { settings(p) }?,
            None => Settings::default(),
        };
        let job = Box::new(Job::open(&settings)?);
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(job) };
        Ok(())
    })
}

/// What `p` says explicitly (the rest: from the environment).
///
/// # Safety
/// `p`'s strings are NULL or NUL-terminated.
unsafe fn settings(p: &mcd_params) -> Result<Settings, CError> {
    let mut settings = Settings::default();
    match (p.rank, p.size) {
        (r, s) if r >= 0 && s > 0 => settings.job.rank_size = Some((r as usize, s as usize)),
        (-1, -1) => {}
        (r, s) => return Err(config_error(format!("rank {r} and size {s}: give both (size > 0) or neither (-1)"))),
    }
    let positive = |v: c_int| usize::try_from(v).ok().filter(|&v| v > 0);
    settings.local_processes = match p.local_procs {
        -1 => None,
        v => Some(positive(v).ok_or_else(|| config_error(format!("local_procs {v} is neither positive nor -1")))?),
    };
    settings.cores = match p.cpus {
        -1 => None,
        v => Some(positive(v).ok_or_else(|| config_error(format!("cpus {v} is neither positive nor -1")))?),
    };
    settings.job.auth = match p.auth {
        MCD_AUTH_ENV => None,
        MCD_AUTH_KEY => {
            let secret = mcd::JobSecret::from_bytes(p.secret);
            if secret.is_all_zeros() {
                return Err(config_error(
                    "auth is MCD_AUTH_KEY but secret is all zeros (never filled in?): make one with mcd_secret_generate on one rank and give every rank the same",
                ));
            }
            Some(mcd::Auth::Key(secret))
        }
        MCD_AUTH_OFF => Some(mcd::Auth::Off),
        other => {
            return Err(config_error(format!(
                "auth {other} is none of MCD_AUTH_ENV ({MCD_AUTH_ENV}), MCD_AUTH_KEY ({MCD_AUTH_KEY}), MCD_AUTH_OFF ({MCD_AUTH_OFF})"
            )))
        }
    };
    if p.port >= 0 {
        settings.job.port = Some(u8::try_from(p.port).map_err(|_| config_error(format!("port {} is not 0..=255", p.port)))?);
    }
    // SAFETY: strings are NULL or NUL-terminated per the contract.
    unsafe {
        settings.job.interfaces = c_str(p.interfaces, "interfaces")?.map(|l| l.split(',').map(|s| s.trim().to_string()).collect());
        settings.job.job = c_str(p.job, "job")?;
        settings.node_file = c_str(p.node_file, "node_file")?.map(Into::into);
        settings.algorithm = c_str(p.algorithm, "algorithm")?;
    }
    Ok(settings)
}

/// One barrier across the job: returns once every rank has entered it.
///
/// A job handle may be used by several threads at once (one in a barrier,
/// others creating or freeing groups); the job's own barrier serves one
/// caller at a time.
///
/// # Safety
/// `job` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn mcd_barrier(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { handle(job) }?.wait())
}

/// Enters the next barrier without waiting (split phase); complete it with
/// [`mcd_barrier_test`] or [`mcd_barrier_wait`].
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_barrier_enter(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { handle(job) }?.enter())
}

/// Makes progress on the entered barrier without blocking; `*done` becomes
/// 1 once it is complete (also when none was entered), else 0.
///
/// # Safety
/// As [`mcd_barrier`]; `done` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_barrier_test(job: *mut Job, done: *mut c_int) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { test(handle(job)?, done, "mcd_barrier_test") })
}

/// Completes the entered barrier (enters one first if none is).
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_barrier_wait(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { mcd_barrier(job) }
}

/// This process's rank, or a negative error code.
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_rank(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    guarded_count(|| Ok(unsafe { handle(job) }?.rank()))
}

/// The job's size, or a negative error code.
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_size(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    guarded_count(|| Ok(unsafe { handle(job) }?.size()))
}

/// The barrier algorithm's name (e.g. `tree4`), valid until [`mcd_finalize`];
/// NULL for a NULL handle.
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_algorithm(job: *mut Job) -> *const c_char {
    // SAFETY: forwarded contract.
    algorithm(unsafe { job.as_ref() })
}

/// 1 if the job's frames are signed and verified (a job secret), 0 if
/// not (`MCD_AUTH=off`, in any case and spacing mcd accepts, or
/// [`MCD_AUTH_OFF`]): what mcd runs, for a report to say; a negative
/// `MCD_ERR_*` for a NULL handle.
///
/// # Safety
/// As [`mcd_barrier`].
#[no_mangle]
pub unsafe extern "C" fn mcd_authenticated(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    guarded_count(|| Ok(usize::from(unsafe { handle(job) }?.authenticated())))
}

/// What `MCD_AUTH` and `MCD_KEY_FILE` ask for, read as [`mcd_init`] reads
/// them (trimmed, `off` in any case), the key file not yet read:
/// [`MCD_AUTH_OFF`] (authentication off), [`MCD_AUTH_ENV`] (a key file is
/// named) or [`MCD_AUTH_KEY`] (neither: the caller must give a secret, as
/// the MPI interposer agrees one over MPI); or [`MCD_ERR_CONFIG`] when the
/// values are wrong ([`mcd_last_error`] says how). For a caller that
/// decides where the secret comes from before `mcd_init` and must not read
/// the variables differently from mcd (review rev29, finding 4).
#[no_mangle]
pub extern "C" fn mcd_auth_from_env() -> c_int {
    guarded_count(|| {
        Ok(match mcd::auth::AuthSource::from_env()? {
            mcd::auth::AuthSource::Off => MCD_AUTH_OFF,
            mcd::auth::AuthSource::KeyFile(_) => MCD_AUTH_ENV,
            mcd::auth::AuthSource::Unset => MCD_AUTH_KEY,
        } as usize)
    })
}

/// Why the job's barrier and collectives run the algorithms they do, as one
/// line of text: each algorithm, and who named it or by what rule `auto`
/// picked it, with the model's prediction beside the next best candidates
/// (e.g. `barrier tree4 (auto: the lowest predicted time for 8 nodes: tree4
/// 9.1 µs; then ...); collectives concurrent (auto: ...)`). Written to `buf`
/// (at most `len` bytes with the final NUL, cut short if need be, as
/// `snprintf`); returns the text's full length in bytes (without the NUL),
/// or a negative error code. It simulates every candidate: call it for a
/// report, not on a hot path.
///
/// # Safety
/// As [`mcd_barrier`]; `buf` is NULL (with `len` 0) or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcd_why(job: *mut Job, buf: *mut c_char, len: usize) -> c_int {
    // SAFETY: forwarded contract.
    guarded_count(|| unsafe { why(handle(job)?, buf, len) })
}

/// Copies the job's counters into `*out`.
///
/// # Safety
/// As [`mcd_barrier`]; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcd_get_stats(job: *mut Job, out: *mut mcd_stats) -> c_int {
    // SAFETY: forwarded contract.
    guarded(|| unsafe { get_stats(handle(job)?, out, "mcd_get_stats") })
}

/// Ends the job and frees the handle (NULL is fine). Collective: first the
/// groups freed with [`mcd_group_free`] complete their closing (in any
/// order), then the job's own closing barrier, then answering peers until
/// each is known to be done, so
/// a rank whose last release was lost still completes; it returns as soon as
/// no peer can need this one (no blind linger). The handle is freed even
/// when that fails (a peer died).
///
/// # Safety
/// `job` is NULL or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_finalize(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { end(job, |job| job.finish()) }
}

/// Frees the handle (NULL is fine) without the closing protocol of
/// [`mcd_finalize`]: for a rank that leaves alone (its peers will find it
/// silent), as when not every rank could start mcd.
///
/// # Safety
/// `job` is NULL or a live handle, never used again.
#[no_mangle]
pub unsafe extern "C" fn mcd_discard(job: *mut Job) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { end(job, |_| Ok(())) }
}
