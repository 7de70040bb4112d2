//! The C functions of the job secret: a fresh one, and its exchange over a
//! channel anyone may read (the MPI interposer's).

use std::ffi::c_int;

use super::guarded;
use super::job::MCD_SECRET_LEN;
use crate::error::{argument, MCD_ERR_CONFIG, MCD_ERR_SYSTEM};
use crate::exchange;
use crate::CError;

/// Fills `out` with a fresh job secret ([`MCD_SECRET_LEN`] bytes) from
/// the operating system's random source.
///
/// # Safety
/// `out` is NULL or points to [`MCD_SECRET_LEN`] writable bytes.
#[no_mangle]
pub unsafe extern "C" fn mcd_secret_generate(out: *mut u8) -> c_int {
    guarded(|| {
        if out.is_null() {
            return Err(argument("mcd_secret_generate: `out` is NULL"));
        }
        let secret = mcd::JobSecret::generate()?;
        // SAFETY: `out` is non-null and has MCD_SECRET_LEN writable bytes per the contract.
        unsafe { std::ptr::copy_nonoverlapping(secret.as_bytes().as_ptr(), out, MCD_SECRET_LEN) };
        Ok(())
    })
}

/// Bytes of an X25519 key (private or public) of the secret exchange.
pub const MCD_EXCHANGE_KEY_LEN: usize = 32;
/// Bytes of a job secret wrapped for one rank by [`mcd_secret_wrap`].
pub const MCD_WRAPPED_SECRET_LEN: usize = 32;
const _: () = assert!(MCD_EXCHANGE_KEY_LEN == exchange::KEY_LEN && MCD_WRAPPED_SECRET_LEN == exchange::WRAPPED_LEN);

/// The job secret's exchange over a channel anyone may read (as the MPI
/// interposer does over PMPI): each rank calls this for a fresh X25519 key
/// pair, sends `public_key` to rank 0 and keeps `private_key` to itself;
/// rank 0 makes the secret ([`mcd_secret_generate`]), wraps it for each
/// rank with [`mcd_secret_wrap`] and sends every rank its wrapped copy and
/// rank 0's public key; each rank unwraps with [`mcd_secret_unwrap`].
/// A passive listener learns nothing of the secret; one who can replace
/// the public keys on the channel can (a man in the middle). Clear the
/// private key (and the secret) once done.
///
/// # Safety
/// `private_key` and `public_key` are NULL or point to
/// [`MCD_EXCHANGE_KEY_LEN`] writable bytes each.
#[no_mangle]
pub unsafe extern "C" fn mcd_secret_exchange_keypair(private_key: *mut u8, public_key: *mut u8) -> c_int {
    guarded(|| {
        if private_key.is_null() || public_key.is_null() {
            return Err(argument("mcd_secret_exchange_keypair: a key pointer is NULL"));
        }
        let (mut private, public) = exchange::keypair().map_err(exchange_error)?;
        // SAFETY: both non-null, each with MCD_EXCHANGE_KEY_LEN writable bytes per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(private.as_ptr(), private_key, MCD_EXCHANGE_KEY_LEN);
            std::ptr::copy_nonoverlapping(public.as_ptr(), public_key, MCD_EXCHANGE_KEY_LEN);
        }
        zeroize::Zeroize::zeroize(&mut private);
        Ok(())
    })
}

/// Rank 0 wraps the job's `secret` ([`MCD_SECRET_LEN`] bytes) for the rank
/// whose public key is `rank_public_key`, with rank 0's own private key,
/// into `out` ([`MCD_WRAPPED_SECRET_LEN`] bytes: the secret under a
/// one-time pad and a tag, both derived from the X25519 shared secret).
/// Fails ([`MCD_ERR_CONFIG`]) on a public key of low order.
///
/// # Safety
/// Each pointer is NULL or points to as many bytes as said above
/// (`out` writable).
#[no_mangle]
pub unsafe extern "C" fn mcd_secret_wrap(root_private_key: *const u8, rank_public_key: *const u8, secret: *const u8, out: *mut u8) -> c_int {
    guarded(|| {
        if root_private_key.is_null() || rank_public_key.is_null() || secret.is_null() || out.is_null() {
            return Err(argument("mcd_secret_wrap: a pointer is NULL"));
        }
        // SAFETY: non-null, of the lengths stated in the contract.
        let (private, public, secret) = unsafe {
            (
                &*root_private_key.cast::<[u8; MCD_EXCHANGE_KEY_LEN]>(),
                &*rank_public_key.cast::<[u8; MCD_EXCHANGE_KEY_LEN]>(),
                &*secret.cast::<[u8; MCD_SECRET_LEN]>(),
            )
        };
        let wrapped = exchange::wrap(private, public, secret).map_err(exchange_error)?;
        // SAFETY: non-null with MCD_WRAPPED_SECRET_LEN writable bytes per the contract.
        unsafe { std::ptr::copy_nonoverlapping(wrapped.as_ptr(), out, MCD_WRAPPED_SECRET_LEN) };
        Ok(())
    })
}

/// A rank unwraps what rank 0 wrapped for it ([`mcd_secret_wrap`]), with
/// its own private key and rank 0's public key, into `secret_out`
/// ([`MCD_SECRET_LEN`] bytes). Fails ([`MCD_ERR_CONFIG`], `secret_out`
/// untouched) when the tag does not verify: wrapped for another key pair,
/// or changed on the way.
///
/// # Safety
/// Each pointer is NULL or points to as many bytes as said above
/// (`secret_out` writable).
#[no_mangle]
pub unsafe extern "C" fn mcd_secret_unwrap(
    rank_private_key: *const u8,
    root_public_key: *const u8,
    wrapped: *const u8,
    secret_out: *mut u8,
) -> c_int {
    guarded(|| {
        if rank_private_key.is_null() || root_public_key.is_null() || wrapped.is_null() || secret_out.is_null() {
            return Err(argument("mcd_secret_unwrap: a pointer is NULL"));
        }
        // SAFETY: non-null, of the lengths stated in the contract.
        let (private, public, wrapped) = unsafe {
            (
                &*rank_private_key.cast::<[u8; MCD_EXCHANGE_KEY_LEN]>(),
                &*root_public_key.cast::<[u8; MCD_EXCHANGE_KEY_LEN]>(),
                &*wrapped.cast::<[u8; MCD_WRAPPED_SECRET_LEN]>(),
            )
        };
        let mut secret = exchange::unwrap(private, public, wrapped).map_err(exchange_error)?;
        // SAFETY: non-null with MCD_SECRET_LEN writable bytes per the contract.
        unsafe { std::ptr::copy_nonoverlapping(secret.as_ptr(), secret_out, MCD_SECRET_LEN) };
        zeroize::Zeroize::zeroize(&mut secret);
        Ok(())
    })
}

fn exchange_error(e: exchange::ExchangeError) -> CError {
    let code = match e {
        exchange::ExchangeError::Random(_) => MCD_ERR_SYSTEM,
        _ => MCD_ERR_CONFIG,
    };
    CError { code, message: e.to_string() }
}
