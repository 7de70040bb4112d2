//! The job secret's exchange over a launcher's channel (the MPI
//! interposer's PMPI), so that a passive listener on that channel learns
//! nothing of it.
//!
//! Every rank makes an ephemeral X25519 key pair ([`keypair`]); rank 0
//! gathers the public keys, makes the job secret and wraps it for each rank
//! ([`wrap`]) under a key that only the two ends of the X25519 exchange can
//! derive; each rank unwraps its copy with rank 0's public key ([`unwrap`]).
//! The wrap is a one-time pad (the key pairs are fresh, so every pad is
//! used once) and a 16-byte keyed BLAKE3 tag, both from BLAKE3's
//! `derive_key` over the shared secret and both public keys: a wrong key
//! pair, or a wrapped secret changed on the way, does not unwrap.
//!
//! It does not stop an active attacker who can replace the public keys on
//! the channel (a man in the middle): nothing here authenticates the ranks
//! to each other. A key file shared beforehand (`MCD_KEY_FILE`) needs no
//! exchange at all.

use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroize;

use mcd::auth::SECRET_LEN;

/// Bytes of an X25519 private or public key.
pub(crate) const KEY_LEN: usize = 32;
/// Bytes of a wrapped secret: the padded secret, then its tag.
pub(crate) const WRAPPED_LEN: usize = SECRET_LEN + TAG_LEN;
const TAG_LEN: usize = 16;
/// BLAKE3 `derive_key` context: unique to this use.
const CONTEXT: &str = "mcd 2026-11 interposer job secret wrap v1";

/// Why a secret could not be exchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExchangeError {
    /// The OS random source failed.
    Random(String),
    /// The other side's public key is of low order (the shared secret would
    /// be known to anyone).
    WeakKey,
    /// The wrapped secret's tag does not verify: another key pair, or
    /// changed on the way.
    BadTag,
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExchangeError::Random(e) => write!(f, "the OS random source failed: {e}"),
            ExchangeError::WeakKey => f.write_str("the other side's X25519 public key is of low order (not a real key)"),
            ExchangeError::BadTag => {
                f.write_str("the wrapped job secret does not verify: it was not wrapped for this rank's key pair, or it was changed on the way")
            }
        }
    }
}

/// A fresh X25519 key pair: (private, public).
pub fn keypair() -> Result<([u8; KEY_LEN], [u8; KEY_LEN]), ExchangeError> {
    let mut private = [0u8; KEY_LEN];
    getrandom::fill(&mut private).map_err(|e| ExchangeError::Random(e.to_string()))?;
    let secret = StaticSecret::from(private);
    let public = PublicKey::from(&secret).to_bytes();
    Ok((private, public))
}

/// The pad and the tag's key of the pair (`ours`, `theirs`), rank 0's
/// public key being `root_public` and the other rank's `rank_public`.
fn keys(
    ours: &[u8; KEY_LEN],
    theirs: &[u8; KEY_LEN],
    root_public: &[u8; KEY_LEN],
    rank_public: &[u8; KEY_LEN],
) -> Result<[u8; SECRET_LEN + 32], ExchangeError> {
    let secret = StaticSecret::from(*ours);
    let shared = secret.diffie_hellman(&PublicKey::from(*theirs));
    if !shared.was_contributory() {
        return Err(ExchangeError::WeakKey);
    }
    let mut hasher = blake3::Hasher::new_derive_key(CONTEXT);
    hasher.update(shared.as_bytes()).update(root_public).update(rank_public);
    let mut out = [0u8; SECRET_LEN + 32];
    hasher.finalize_xof().fill(&mut out);
    hasher.zeroize();
    Ok(out)
}

fn tag(key: &[u8], padded: &[u8; SECRET_LEN]) -> [u8; TAG_LEN] {
    let key: &[u8; 32] = key.try_into().expect("32 bytes of key");
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&blake3::keyed_hash(key, padded).as_bytes()[..TAG_LEN]);
    tag
}

/// Rank 0 wraps `secret` for the rank of public key `rank_public`, with
/// its own private key `root_private`.
pub fn wrap(root_private: &[u8; KEY_LEN], rank_public: &[u8; KEY_LEN], secret: &[u8; SECRET_LEN]) -> Result<[u8; WRAPPED_LEN], ExchangeError> {
    let root_public = PublicKey::from(&StaticSecret::from(*root_private)).to_bytes();
    let mut keys = keys(root_private, rank_public, &root_public, rank_public)?;
    let mut padded = [0u8; SECRET_LEN];
    for (p, (s, k)) in padded.iter_mut().zip(secret.iter().zip(&keys[..SECRET_LEN])) {
        *p = s ^ k;
    }
    let mut out = [0u8; WRAPPED_LEN];
    out[..SECRET_LEN].copy_from_slice(&padded);
    out[SECRET_LEN..].copy_from_slice(&tag(&keys[SECRET_LEN..], &padded));
    keys.zeroize();
    Ok(out)
}

/// A rank unwraps the secret rank 0 wrapped for it, with its own private
/// key `rank_private` and rank 0's public key `root_public`.
pub fn unwrap(rank_private: &[u8; KEY_LEN], root_public: &[u8; KEY_LEN], wrapped: &[u8; WRAPPED_LEN]) -> Result<[u8; SECRET_LEN], ExchangeError> {
    let rank_public = PublicKey::from(&StaticSecret::from(*rank_private)).to_bytes();
    let mut keys = keys(rank_private, root_public, root_public, &rank_public)?;
    let padded: &[u8; SECRET_LEN] = wrapped[..SECRET_LEN].try_into().expect("SECRET_LEN bytes");
    let expected = tag(&keys[SECRET_LEN..], padded);
    // Constant time: every byte is compared.
    let differ = expected.iter().zip(&wrapped[SECRET_LEN..]).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differ != 0 {
        keys.zeroize();
        return Err(ExchangeError::BadTag);
    }
    let mut secret = [0u8; SECRET_LEN];
    for (s, (p, k)) in secret.iter_mut().zip(padded.iter().zip(&keys[..SECRET_LEN])) {
        *s = p ^ k;
    }
    keys.zeroize();
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: [u8; SECRET_LEN] = *b"sixteen byte key";

    #[test]
    fn a_wrapped_secret_unwraps_with_the_right_pair() {
        let (root_private, root_public) = keypair().unwrap();
        let (rank_private, rank_public) = keypair().unwrap();
        let wrapped = wrap(&root_private, &rank_public, &SECRET).unwrap();
        assert!(!wrapped.windows(SECRET_LEN).any(|w| w == SECRET), "the secret is not in the wrapped bytes");
        assert_eq!(unwrap(&rank_private, &root_public, &wrapped).unwrap(), SECRET);
    }

    #[test]
    fn a_wrong_key_pair_does_not_unwrap_the_secret() {
        let (root_private, root_public) = keypair().unwrap();
        let (rank_private, rank_public) = keypair().unwrap();
        let (other_private, other_public) = keypair().unwrap();
        let wrapped = wrap(&root_private, &rank_public, &SECRET).unwrap();
        // Another rank's private key (a listener's own pair).
        assert_eq!(unwrap(&other_private, &root_public, &wrapped), Err(ExchangeError::BadTag));
        // The right private key, but another root's public key.
        assert_eq!(unwrap(&rank_private, &other_public, &wrapped), Err(ExchangeError::BadTag));
        // Only the right pair unwraps it.
        assert_eq!(unwrap(&rank_private, &root_public, &wrapped).unwrap(), SECRET);
    }

    #[test]
    fn a_changed_wrapped_secret_does_not_unwrap() {
        let (root_private, root_public) = keypair().unwrap();
        let (rank_private, rank_public) = keypair().unwrap();
        let wrapped = wrap(&root_private, &rank_public, &SECRET).unwrap();
        for byte in 0..WRAPPED_LEN {
            let mut changed = wrapped;
            changed[byte] ^= 1;
            assert_eq!(unwrap(&rank_private, &root_public, &changed), Err(ExchangeError::BadTag), "byte {byte} flipped");
        }
    }

    #[test]
    fn different_runs_wrap_one_secret_to_different_bytes() {
        let wrapped: Vec<_> = (0..2)
            .map(|_| {
                let (root_private, _) = keypair().unwrap();
                let (_, rank_public) = keypair().unwrap();
                wrap(&root_private, &rank_public, &SECRET).unwrap()
            })
            .collect();
        assert_ne!(wrapped[0], wrapped[1]);
        assert_ne!(wrapped[0][..SECRET_LEN], wrapped[1][..SECRET_LEN], "the pads differ");
    }

    #[test]
    fn a_low_order_public_key_is_refused() {
        let (root_private, _) = keypair().unwrap();
        // The all-zeros point has order 1: its shared secret is all zeros.
        assert_eq!(wrap(&root_private, &[0u8; KEY_LEN], &SECRET), Err(ExchangeError::WeakKey));
    }
}
