//! Authenticated frames: the per-job secret, the tag every frame carries,
//! and the replay window every receiver keeps per sender.
//!
//! - **The secret** ([`JobSecret`], 16 bytes) is shared by every process of
//!   a job and by nobody else. It never travels on the segment: it comes
//!   from a key file ([`KEY_FILE_VAR`], mode 0600, owned by the user), from a
//!   launcher that writes one (`mcd-vcluster run`), or from the MPI
//!   interposer, whose rank 0 makes one and gives it to every rank over
//!   MPI, wrapped for each by an ephemeral X25519 exchange (never in clear:
//!   the README's **Security**), unless every rank reads a key file.
//! - **The tag** ([`FrameKey`]): keyed SipHash-2-4, 64 bits, of every byte
//!   of the frame from its kind through the trailer's counter (see
//!   [`crate::wire`]), under a key derived from the secret, the job key,
//!   the rail and the frame's destination MAC
//!   ([`FrameKey::for_destination`]: a node's address, or a group's). The
//!   bytes before the kind are covered as well, each in its own way: the
//!   destination MAC and the job key by the key (a frame re-addressed to
//!   another node or group, or signed for another job, fails its tag
//!   there); the source MAC, the EtherType and the version byte have one
//!   acceptable value each (the source node's listed MAC on that rail, the
//!   job's EtherType, this version), and the receiver drops any other, as
//!   it drops another job key. Leaving those 19 bytes out of the hash saves
//!   SipHash three of fourteen compressions at 64 bytes of payload. A frame
//!   whose tag does not verify is dropped before anything in it is acted
//!   on ([`crate::DropReason::BadTag`]).
//!   The rail in the key means a frame sent on one rail and replayed on
//!   another fails its tag there, even where a node's rails share one MAC
//!   (review rev27, finding 4).
//! - **Replay** ([`SenderWindows`]): each endpoint numbers its frames with a
//!   counter ([`Counter`], [`FrameCounter`]): a *session* (64 random bits
//!   drawn when the endpoint opens, and again after 2^32 - 1 frames) and
//!   the frame's number in the session (32 bits, from 1). Two sessions of
//!   64 bits are alike with a chance of 2^-64 per pair (with 32 bits, as in wire
//!   version 3, a frame recorded in an earlier run whose sender drew the
//!   live session's bits again lifted the live window and silenced that
//!   sender: review rev28, finding 3). Each receiver keeps, per sender node and rail, one
//!   [`ReplayWindow`] per session heard (its most heard and at most
//!   [`EARLIER_SESSIONS`] others): the highest number seen and a
//!   bitmap of the [`REPLAY_WINDOW`] below it. A frame seen before, or
//!   older than its session's window, is dropped
//!   ([`crate::DropReason::Replayed`]). Counters of different sessions are
//!   never compared: a frame recorded in an earlier run (another session of
//!   its sender) is new to a new endpoint once, and changes nothing about
//!   the live session's frames, whatever the senders' clocks said. What
//!   makes such a frame useless is above the endpoint (the README's
//!   **Security**: the bootstrap's nonces, the barrier's instance).
//!
//! Authentication is on by default: an endpoint opened without a secret and
//! without [`Auth::Off`] is an error ([`crate::Error::NoSecret`]) that says
//! how to get one.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use siphasher::sip128::SipHasher24 as SipHasher128;

pub use crate::wire::FrameCounter;
use crate::wire::{offset, Frame, MacAddr, TrailerRepr, TRAILER_LEN};
use crate::{Error, Result};

/// Bytes of a job secret (the SipHash-2-4 key).
pub const SECRET_LEN: usize = 16;
/// The environment variable naming the job's key file.
pub const KEY_FILE_VAR: &str = "MCD_KEY_FILE";
/// The environment variable that turns authentication off (`off`); `on`
/// (the default) requires a secret.
pub const AUTH_VAR: &str = "MCD_AUTH";
/// Counters a replay window remembers below the highest seen: frames from
/// one sender on one rail may be read this far out of order and still be
/// delivered once.
pub const REPLAY_WINDOW: u64 = 512;
/// The largest key file read (a key file is 16 bytes or 32 hex digits).
const KEY_FILE_MAX: u64 = 256;

/// What to tell a user who has no secret (defined beside the error that
/// carries it, so that the error module depends on no other).
pub use crate::error::NO_SECRET_HELP;

/// A job's secret: 16 bytes known to every process of the job and to
/// nobody else. Its `Debug` form does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct JobSecret([u8; SECRET_LEN]);

impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobSecret(..)")
    }
}

impl JobSecret {
    /// The secret of these bytes.
    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> JobSecret {
        JobSecret(bytes)
    }

    /// The secret in `bytes`, which must be exactly [`SECRET_LEN`] long.
    pub fn from_slice(bytes: &[u8]) -> Result<JobSecret> {
        let bytes: [u8; SECRET_LEN] =
            bytes.try_into().map_err(|_| Error::Config(format!("a job secret is {SECRET_LEN} bytes, not {}", bytes.len())))?;
        Ok(JobSecret(bytes))
    }

    /// A fresh secret from the operating system's random source.
    pub fn generate() -> Result<JobSecret> {
        let mut bytes = [0u8; SECRET_LEN];
        getrandom::fill(&mut bytes).map_err(|e| Error::Config(format!("the OS random source failed: {e}")))?;
        Ok(JobSecret(bytes))
    }

    /// The secret's bytes.
    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }

    /// Whether every byte is zero: what a secret field nobody filled in
    /// holds (`mcd_params_default`'s), never a secret (anyone can guess it).
    pub fn is_all_zeros(&self) -> bool {
        self.0 == [0; SECRET_LEN]
    }

    /// Reads the secret from the key file `path`: a regular file owned by
    /// this process's (effective) user, readable and writable by that user
    /// alone (mode 0600 or 0400), holding 16 bytes, or 32 hex digits (with
    /// optional white space around them). Anything else is refused with an
    /// [`Error::KeyFile`] that names the path and the fix.
    pub fn load(path: &Path) -> Result<JobSecret> {
        let refuse = |reason: String| Error::KeyFile { path: path.to_path_buf(), reason };
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        // O_NOFOLLOW: the file itself, not what a link points to.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nofollow())
            .open(path)
            .map_err(|e| refuse(format!("cannot open it ({e}); is it a symbolic link? (links are refused)")))?;
        let meta = file.metadata().map_err(|e| refuse(format!("cannot read its metadata ({e})")))?;
        if !meta.file_type().is_file() {
            return Err(refuse("it is not a regular file".into()));
        }
        let me = crate::sys::effective_uid();
        if meta.uid() != me {
            return Err(refuse(format!("it is owned by user id {}, not by this process's user ({me}): write a key file of your own", meta.uid())));
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(refuse(format!(
                "its mode is {mode:04o}, so other users may read or change it; `chmod 600 {}` (and make a new secret if \
                 others may have read this one)",
                path.display()
            )));
        }
        let mut content = Vec::new();
        file.by_ref().take(KEY_FILE_MAX + 1).read_to_end(&mut content).map_err(|e| refuse(format!("cannot read it ({e})")))?;
        parse_key_file(&content).map_err(refuse)
    }

    /// Writes a fresh secret to a new key file `path` (mode 0600; an
    /// existing file is an error, never overwritten) and returns it.
    pub fn write_new(path: &Path) -> Result<JobSecret> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let secret = JobSecret::generate()?;
        let refuse = |reason: String| Error::KeyFile { path: path.to_path_buf(), reason };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nofollow())
            .open(path)
            .map_err(|e| refuse(format!("cannot create it ({e}); an existing key file is never overwritten")))?;
        let hex: String = secret.0.iter().map(|b| format!("{b:02x}")).collect();
        file.write_all(format!("{hex}\n").as_bytes()).map_err(|e| refuse(format!("cannot write it ({e})")))?;
        Ok(secret)
    }
}

fn nofollow() -> i32 {
    crate::sys::O_NOFOLLOW
}

/// The secret in a key file's bytes: exactly 16 bytes, or 32 hex digits
/// with optional white space around them. 16 bytes that are all text
/// (printable ASCII, spaces, tabs and line ends) are refused: a typed
/// password, not a secret (review rev29, finding 5: one recorded frame lets
/// anyone test guesses of it offline). 16 random bytes are all text with
/// odds of (98/256)^16, about 2e-7: such a file is refused too, and made
/// again.
fn parse_key_file(content: &[u8]) -> std::result::Result<JobSecret, String> {
    const FIX: &str = "write 16 random bytes into it: `head -c 16 /dev/urandom > FILE` (umask 077)";
    let zeros = || format!("it holds a secret of all zeros, which anyone can guess; {FIX}");
    let text = |b: &u8| b.is_ascii_graphic() || matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    if content.len() == SECRET_LEN && content.iter().all(text) {
        return Err(format!(
            "it holds {SECRET_LEN} characters of text (a typed password?), not {SECRET_LEN} random bytes: a password can be \
             guessed offline from one frame of the job; {FIX}"
        ));
    }
    if content.len() == SECRET_LEN {
        let secret = JobSecret(content.try_into().expect("16 bytes"));
        return if secret.is_all_zeros() { Err(zeros()) } else { Ok(secret) };
    }
    let text = std::str::from_utf8(content).map(str::trim).unwrap_or("");
    if text.len() == 2 * SECRET_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut bytes = [0u8; SECRET_LEN];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digits");
        }
        let secret = JobSecret(bytes);
        return if secret.is_all_zeros() { Err(zeros()) } else { Ok(secret) };
    }
    if content.is_empty() {
        return Err(format!("it is empty; {FIX}"));
    }
    Err(format!("it holds {} bytes, neither {SECRET_LEN} bytes nor {} hex digits; {FIX}", content.len().min(KEY_FILE_MAX as usize), 2 * SECRET_LEN))
}

/// Whether and how an endpoint authenticates its frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Auth {
    /// Not decided: opening an endpoint fails with [`Error::NoSecret`],
    /// which says how to get a secret. The default, so that nobody sends
    /// unauthenticated frames without saying so.
    #[default]
    Unset,
    /// Sign every frame and accept only frames signed with this secret.
    Key(JobSecret),
    /// Neither sign nor accept signed frames: anyone on the segment can
    /// forge and replay this job's frames.
    Off,
}

impl Auth {
    /// The setting the environment gives: `MCD_AUTH=off` is [`Auth::Off`];
    /// `MCD_KEY_FILE=PATH` is [`Auth::Key`] with the secret of that file
    /// ([`JobSecret::load`]); neither is [`Auth::Unset`]. `MCD_AUTH` other
    /// than `on`/`off`, both set at once, or a bad key file are errors.
    pub fn from_env() -> Result<Auth> {
        let (auth, key_file) = auth_env();
        Auth::from_values(auth.as_deref(), key_file.as_deref())
    }

    /// [`from_env`](Self::from_env) for given values of `MCD_AUTH` and `MCD_KEY_FILE`.
    pub fn from_values(auth: Option<&str>, key_file: Option<&str>) -> Result<Auth> {
        Ok(match AuthSource::from_values(auth, key_file)? {
            AuthSource::Off => Auth::Off,
            AuthSource::KeyFile(path) => Auth::Key(JobSecret::load(Path::new(&path))?),
            AuthSource::Unset => Auth::Unset,
        })
    }

    /// The setting, with [`Auth::Unset`] an [`Error::NoSecret`].
    pub fn required(self) -> Result<Auth> {
        match self {
            Auth::Unset => Err(Error::NoSecret),
            other => Ok(other),
        }
    }

    /// The secret, if frames are signed.
    pub fn secret(&self) -> Option<&JobSecret> {
        match self {
            Auth::Key(secret) => Some(secret),
            _ => None,
        }
    }
}

/// `MCD_AUTH` and `MCD_KEY_FILE` as mcd reads them: trimmed, `None` if unset or empty.
fn auth_env() -> (Option<String>, Option<String>) {
    let var = |name: &str| std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    (var(AUTH_VAR), var(KEY_FILE_VAR))
}

/// What `MCD_AUTH` and `MCD_KEY_FILE` ask for, the key file not yet read:
/// for a caller that must decide where a secret comes from before
/// [`Auth::from_env`] (the MPI interposer agrees it over MPI when neither
/// is set), and must read the variables exactly as mcd does (review rev29,
/// finding 4: it took `MCD_AUTH=Off` for "on").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthSource {
    /// `MCD_AUTH=off` (any case, white space around it).
    Off,
    /// `MCD_KEY_FILE` names this file.
    KeyFile(String),
    /// Neither: [`Auth::Unset`].
    Unset,
}

impl AuthSource {
    /// What the environment asks for; errors as [`Auth::from_env`]'s, but
    /// for the key file's content.
    pub fn from_env() -> Result<AuthSource> {
        let (auth, key_file) = auth_env();
        AuthSource::from_values(auth.as_deref(), key_file.as_deref())
    }

    /// [`from_env`](Self::from_env) for given values of `MCD_AUTH` and `MCD_KEY_FILE`.
    pub fn from_values(auth: Option<&str>, key_file: Option<&str>) -> Result<AuthSource> {
        let on = match auth.map(|a| a.to_ascii_lowercase()) {
            None => true,
            Some(a) if a == "on" => true,
            Some(a) if a == "off" => false,
            Some(_) => {
                return Err(Error::Config(format!(
                    "{AUTH_VAR}={} is neither `on` nor `off` (off sends unauthenticated frames)",
                    auth.unwrap_or_default()
                )))
            }
        };
        match (on, key_file) {
            (false, None) => Ok(AuthSource::Off),
            (false, Some(path)) => Err(Error::Config(format!(
                "{AUTH_VAR}=off and {KEY_FILE_VAR}={path} are both set: unset one (authentication is either off or keyed)"
            ))),
            (true, Some(path)) => Ok(AuthSource::KeyFile(path.to_string())),
            (true, None) => Ok(AuthSource::Unset),
        }
    }
}

/// A key file path from the environment, if `MCD_KEY_FILE` is set.
pub fn key_file_from_env() -> Option<PathBuf> {
    std::env::var_os(KEY_FILE_VAR).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// A sender's frame counter: its session (64 random bits) and the next
/// frame's number in it (from 1), as [`FrameCounter`]s. Numbers never
/// repeat within a session; after 2^32 - 1 frames a new session is drawn.
/// A receiver compares numbers only within one session
/// ([`SenderWindows`]), so no clock enters the replay check.
#[derive(Clone, Debug)]
pub struct Counter {
    next: FrameCounter,
}

impl Counter {
    /// A counter in a fresh session, from the OS's random source.
    pub fn new() -> Result<Counter> {
        Ok(Counter { next: FrameCounter { session: new_session()?, number: 1 } })
    }

    /// The counter of the next frame (and moves on).
    pub fn take(&mut self) -> FrameCounter {
        let counter = self.next;
        match counter.number.checked_add(1) {
            Some(number) => self.next.number = number,
            // The session's numbers are used up: another session (a random
            // one; if the source fails, one derived from this one).
            None => {
                let session = new_session().unwrap_or(counter.session.rotate_left(17) ^ 0x9E37_79B9_7F4A_7C15);
                self.next = FrameCounter { session, number: 1 };
            }
        }
        counter
    }
}

/// 64 random bits.
fn new_session() -> Result<u64> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| Error::Config(format!("the OS random source failed: {e}")))?;
    Ok(u64::from_ne_bytes(bytes))
}

/// A job secret made ready to sign and verify frames: SipHash-2-4's
/// state after its key is loaded, 32 bytes.
#[derive(Clone)]
pub struct FrameKey {
    start: SipState,
}

impl fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FrameKey(..)")
    }
}

impl FrameKey {
    /// The key of job `job_key`'s frames sent on rail `rail` to `dst` (a
    /// node's MAC on that rail, or a group's multicast MAC) under
    /// `secret`: the 128-bit SipHash-2-4, under the secret, of "mcd frame
    /// key", the job key, the rail's number and `dst`. Deriving one takes
    /// about as long as signing a frame: endpoints derive theirs when they
    /// open.
    pub fn for_destination(secret: &JobSecret, job_key: u32, rail: usize, dst: MacAddr) -> FrameKey {
        let mut label = [0u8; 28];
        label[..13].copy_from_slice(b"mcd frame key");
        label[14..18].copy_from_slice(&job_key.to_be_bytes());
        label[18..22].copy_from_slice(&(rail as u32).to_be_bytes());
        label[22..].copy_from_slice(&dst.0);
        let derived = u128::from(SipHasher128::new_with_key(&secret.0).hash(&label)).to_le_bytes();
        let word = |at: usize| u64::from_le_bytes(derived[at..at + 8].try_into().expect("8 of the 16 bytes"));
        FrameKey { start: sip_keyed(word(0), word(8)) }
    }

    /// The tag of `signed` (the bytes from the kind through the counter):
    /// SipHash-2-4 under this key, in one pass over the bytes.
    #[inline]
    pub fn tag(&self, signed: &[u8]) -> u64 {
        siphash24(&self.start, signed)
    }

    /// Signs a frame in `frame` (of this key's job, to its destination, on
    /// its rail): its headers (with the
    /// [`AUTH_FLAG`](crate::wire::AUTH_FLAG) set) and payload are written,
    /// and `frame` ends with the [`TRAILER_LEN`] bytes of the trailer,
    /// which this writes: `counter`, then the tag of every byte from the
    /// kind through the counter.
    pub fn sign(&self, frame: &mut [u8], counter: FrameCounter) {
        let at = frame.len() - TRAILER_LEN;
        TrailerRepr::emit_counter(counter, &mut frame[at..]);
        let tag = self.tag(&frame[offset::KIND..at + offset::TRAILER_TAG]);
        TrailerRepr { counter, tag }.emit(&mut frame[at..]);
    }

    /// The frame's counter if its tag verifies under this key (the key of
    /// its job, rail and destination); `None` for an unauthenticated frame
    /// or a wrong tag. `frame` must be checked ([`Frame::new_checked`], or
    /// [`FrameRepr::parse`](crate::wire::FrameRepr::parse) of it).
    pub fn verify<T: AsRef<[u8]>>(&self, frame: &Frame<T>) -> Option<FrameCounter> {
        let signed = frame.signed_bytes()?;
        let trailer = TrailerRepr::parse(&frame.trailer()?);
        // One 64-bit comparison: no early exit on a first differing byte.
        (self.tag(signed) == trailer.tag).then_some(trailer.counter)
    }
}

/// SipHash's four words of state (v0, v1, v2, v3).
type SipState = [u64; 4];

/// The state under the key (k0, k1): the key's two little-endian words
/// XORed with the constants of the SipHash paper ("somepseudorandomlygeneratedbytes").
fn sip_keyed(k0: u64, k1: u64) -> SipState {
    [k0 ^ 0x736f_6d65_7073_6575, k1 ^ 0x646f_7261_6e64_6f6d, k0 ^ 0x6c79_6765_6e65_7261, k1 ^ 0x7465_6462_7974_6573]
}

/// One SipRound: additions, rotations and XORs of the four words.
#[inline(always)]
fn sip_round(v: &mut SipState) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// Absorbs one 8-byte word with SipHash-2-4's two compression rounds.
#[inline(always)]
fn sip_compress(v: &mut SipState, m: u64) {
    v[3] ^= m;
    sip_round(v);
    sip_round(v);
    v[0] ^= m;
}

/// SipHash-2-4 of `msg` from the keyed state `start`, as the SipHash
/// paper defines it: the message's little-endian 8-byte words, then a last
/// word of its remaining bytes with its length (mod 256) in the top byte,
/// then four finalization rounds. One pass over the slice: each word is one
/// unaligned load, the last partial word one more (the 8 bytes ending the
/// message, shifted), with none of a streaming hasher's buffering of a
/// partial word between writes (the `siphasher` crate's; it is the
/// reference this one is tested against, and still derives the keys).
#[inline]
fn siphash24(start: &SipState, msg: &[u8]) -> u64 {
    let mut v = *start;
    let words = msg.chunks_exact(8);
    let rest = words.remainder();
    for word in words {
        sip_compress(&mut v, u64::from_le_bytes(word.try_into().expect("chunks of 8")));
    }
    let mut last = (msg.len() as u64) << 56;
    if !rest.is_empty() && msg.len() >= 8 {
        // The last 8 bytes hold the rest at their end: shift off the others.
        let end: [u8; 8] = msg[msg.len() - 8..].try_into().expect("8 bytes");
        last |= u64::from_le_bytes(end) >> (64 - 8 * rest.len());
    } else {
        for (i, &b) in rest.iter().enumerate() {
            last |= u64::from(b) << (8 * i);
        }
    }
    sip_compress(&mut v, last);
    v[2] ^= 0xff;
    for _ in 0..4 {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// Words of a replay window's bitmap.
const WINDOW_WORDS: usize = (REPLAY_WINDOW / 64) as usize;

/// One sender's replay window: the highest counter seen and which of the
/// [`REPLAY_WINDOW`] counters up to it were seen (a ring of bits indexed by
/// counter, as in RFC 6479). Checking and recording cost a few word
/// operations; nothing is allocated.
#[derive(Clone, Debug, Default)]
pub struct ReplayWindow {
    /// The highest counter seen (0: none yet; numbers in a session start at 1).
    top: u64,
    bits: [u64; WINDOW_WORDS],
}

impl ReplayWindow {
    fn bit(counter: u64) -> (usize, u64) {
        let i = counter % REPLAY_WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Whether a frame with `counter` is new: above the highest seen, or
    /// within the window below it and not seen. Changes nothing.
    #[inline]
    pub fn check(&self, counter: u64) -> bool {
        if counter > self.top {
            return true;
        }
        if counter == 0 || self.top - counter >= REPLAY_WINDOW {
            return false;
        }
        let (word, mask) = Self::bit(counter);
        self.bits[word] & mask == 0
    }

    /// Records `counter` as seen (after [`check`](Self::check) said it is new).
    #[inline]
    pub fn record(&mut self, counter: u64) {
        if self.top != 0 && self.top.checked_add(1) == Some(counter) {
            // The next in order (nearly every frame): its slot is the one
            // the window slides past.
            let (word, mask) = Self::bit(counter);
            self.bits[word] |= mask;
            self.top = counter;
            return;
        }
        if counter > self.top {
            let ahead = counter - self.top;
            if ahead >= REPLAY_WINDOW || self.top == 0 {
                self.bits = [0; WINDOW_WORDS];
            } else {
                // Forget the counters the window slides past (they are now
                // the slots of the counters above the old top).
                for c in self.top + 1..=counter {
                    let (word, mask) = Self::bit(c);
                    self.bits[word] &= !mask;
                }
            }
            self.top = counter;
        }
        let (word, mask) = Self::bit(counter);
        self.bits[word] |= mask;
    }

    /// The highest counter seen (0 if none).
    pub fn highest(&self) -> u64 {
        self.top
    }
}

/// How many sessions of one sender, besides its most heard, a receiver
/// keeps windows for ([`SenderWindows`]).
pub const EARLIER_SESSIONS: usize = 4;

/// One session's window in a [`SenderWindows`], with what picks which to keep.
#[derive(Clone, Debug, Default)]
struct SessionWindow {
    session: u64,
    window: ReplayWindow,
    /// Frames of the session taken.
    taken: u64,
    /// The sender's frame (of any session) this one was last taken at:
    /// the least recently used is forgotten first.
    used: u64,
}

/// One sender's replay windows on one rail: one [`ReplayWindow`] per
/// session of its counter ([`Counter`]). Counters of different sessions
/// are never compared, so a frame of an earlier session (a run recorded
/// and replayed, or the sender's earlier life) is taken once and leaves
/// the live session's window as it was.
///
/// The windows are bounded (review rev28, finding 4): the session of which
/// the most frames were taken (the live run's, unless an attacker replays
/// more frames of one recorded session than the live sender sent) has a
/// slot no other session takes; at most [`EARLIER_SESSIONS`] others are
/// kept, and a new one takes the slot of the least recently used. A frame
/// costs one comparison and at most [`EARLIER_SESSIONS`] more, however many
/// sessions were heard, and nothing is ever allocated. A session forgotten
/// is counted ([`forgotten`](Self::forgotten)); its frames, replayed, are
/// new once more, as they were to a new endpoint: that is safe for the
/// same reason, since an earlier run's frame is useless above the endpoint
/// (its barrier instance and bootstrap nonces are another run's: the
/// engine drops it as another instance's, `RouteStats::foreign`).
///
/// The live sessions are never forgotten (review rev29, finding 1: an
/// attacker who replayed more frames of one recorded session than the live
/// sender had sent moved the live session among the others, and one frame
/// of each of 4 more recorded sessions then had it forgotten, so that a
/// dead node's frames of this run, replayed, were new once more and kept
/// it alive): the receiver's barrier engine names the sender's session
/// live when it takes one of its messages as this run's (its barrier
/// instance is run-bound: [`pin_last`](Self::pin_last), [`pin`](Self::pin)),
/// and the live session and the one live before it (a sender moves to a
/// new session after 2^32 frames) each have a slot of their own, which no
/// other session takes. Until the engine has named one (before the join's
/// end), the most heard session's slot is all the live one has.
#[derive(Clone, Debug, Default)]
pub struct SenderWindows {
    /// The sessions named live, the latest first (see above).
    live: [SessionWindow; 2],
    /// The session of the frame recorded last.
    last: u64,
    /// The session of which the most frames were taken (unused while its
    /// window is empty: the first session heard takes it).
    most: SessionWindow,
    /// Other sessions heard (`session` 0 with an empty window: a free slot).
    earlier: [SessionWindow; EARLIER_SESSIONS],
    /// Frames taken (what `used` counts in).
    clock: u64,
    /// Sessions whose windows were given to a newer one.
    forgotten: u64,
}

impl SenderWindows {
    fn earlier(&self, session: u64) -> Option<usize> {
        self.earlier.iter().position(|w| w.session == session && w.window.highest() != 0)
    }

    /// Whether a frame with `counter` is new: of a session not kept, or
    /// new to its session's window. Changes nothing.
    #[inline]
    pub fn check(&self, counter: FrameCounter) -> bool {
        let (session, number) = (counter.session, u64::from(counter.number));
        if number == 0 {
            return false; // numbers start at 1
        }
        if self.is_latest_live(session) {
            return self.live[0].window.check(number); // nearly every frame
        }
        if let Some(live) = self.live(session) {
            return self.live[live].window.check(number);
        }
        if self.most.session == session {
            return self.most.window.check(number);
        }
        self.earlier(session).is_none_or(|i| self.earlier[i].window.check(number))
    }

    /// Records `counter` as seen (after [`check`](Self::check) said it is new).
    #[inline]
    pub fn record(&mut self, counter: FrameCounter) {
        let (session, number) = (counter.session, u64::from(counter.number));
        self.clock += 1;
        self.last = session;
        let live = if self.is_latest_live(session) { Some(0) } else { self.live(session) };
        if let Some(live) = live {
            let slot = &mut self.live[live];
            slot.window.record(number);
            slot.taken += 1;
            slot.used = self.clock;
            return;
        }
        self.pool(session, number);
    }

    /// Whether `session` is the one named live last: one comparison (its
    /// window is never empty once named).
    #[inline]
    fn is_latest_live(&self, session: u64) -> bool {
        self.live[0].session == session && self.live[0].window.highest() != 0
    }

    /// The live slot holding `session`, if any.
    fn live(&self, session: u64) -> Option<usize> {
        self.live.iter().position(|w| w.session == session && w.window.highest() != 0)
    }

    /// Names the session of the frame recorded last live: the receiver's
    /// engine took that frame's message as this run's. One comparison when
    /// it already is the live one.
    #[inline]
    pub fn pin_last(&mut self) {
        self.pin(self.last);
    }

    /// Names `session` live (as [`pin_last`](Self::pin_last)), if it is
    /// kept: a session forgotten meanwhile stays so.
    #[inline]
    pub fn pin(&mut self, session: u64) {
        if self.is_latest_live(session) {
            return;
        }
        if self.live[1].session == session && self.live[1].window.highest() != 0 {
            self.live.swap(0, 1);
            return;
        }
        // Out of the pool (it was recorded last, so it is there).
        let window = if self.most.session == session && self.most.window.highest() != 0 {
            std::mem::take(&mut self.most)
        } else if let Some(i) = self.earlier(session) {
            std::mem::take(&mut self.earlier[i])
        } else {
            return;
        };
        // The one live before the previous goes back to the pool.
        let previous = std::mem::replace(&mut self.live[0], window);
        let older = std::mem::replace(&mut self.live[1], previous);
        if older.window.highest() != 0 {
            self.give_back(older);
        }
    }

    /// Puts a session's window back among the others (a live one no longer live).
    fn give_back(&mut self, w: SessionWindow) {
        if self.most.window.highest() == 0 || w.taken > self.most.taken {
            let was = std::mem::replace(&mut self.most, w);
            if was.window.highest() == 0 {
                return;
            }
            return self.give_back_earlier(was);
        }
        self.give_back_earlier(w);
    }

    fn give_back_earlier(&mut self, w: SessionWindow) {
        let i = (0..EARLIER_SESSIONS).min_by_key(|&i| (self.earlier[i].window.highest() != 0, self.earlier[i].used)).unwrap_or(0);
        if self.earlier[i].window.highest() != 0 {
            self.forgotten += 1;
        }
        self.earlier[i] = w;
    }

    /// Records `number` of `session`, a session not named live.
    fn pool(&mut self, session: u64, number: u64) {
        if self.most.session == session || self.most.window.highest() == 0 {
            self.most.session = session;
            self.most.window.record(number);
            self.most.taken += 1;
            self.most.used = self.clock;
            return;
        }
        let i = match self.earlier(session) {
            Some(i) => i,
            None => {
                // A free slot, or the least recently used one's.
                let i = (0..EARLIER_SESSIONS).min_by_key(|&i| (self.earlier[i].window.highest() != 0, self.earlier[i].used)).unwrap_or(0);
                if self.earlier[i].window.highest() != 0 {
                    self.forgotten += 1;
                }
                self.earlier[i].session = session;
                self.earlier[i].window = ReplayWindow::default();
                self.earlier[i].taken = 0;
                i
            }
        };
        let slot = &mut self.earlier[i];
        slot.window.record(number);
        slot.taken += 1;
        slot.used = self.clock;
        if slot.taken > self.most.taken {
            std::mem::swap(slot, &mut self.most);
        }
    }

    /// The sessions kept: those named live (the latest first), the most
    /// heard, then the others, the most recently heard first.
    pub fn sessions(&self) -> impl Iterator<Item = u64> + '_ {
        let live = self.live.iter().filter(|w| w.window.highest() != 0).map(|w| w.session);
        let mut earlier: [Option<(u64, u64)>; EARLIER_SESSIONS] = [None; EARLIER_SESSIONS];
        for (slot, w) in earlier.iter_mut().zip(&self.earlier) {
            *slot = (w.window.highest() != 0).then_some((w.used, w.session));
        }
        earlier.sort_unstable_by(|a, b| b.cmp(a));
        let most = (self.most.window.highest() != 0).then_some(self.most.session);
        live.chain(most).chain(earlier.into_iter().flatten().map(|(_, s)| s))
    }

    /// The highest number seen in `session` (0 if none, or forgotten).
    pub fn highest(&self, session: u64) -> u64 {
        if let Some(live) = self.live(session) {
            return self.live[live].window.highest();
        }
        if self.most.session == session {
            return self.most.window.highest();
        }
        self.earlier(session).map_or(0, |i| self.earlier[i].window.highest())
    }

    /// Sessions whose windows were forgotten to make room for newer ones.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{FrameRepr, MacAddr, DEFAULT_ETHERTYPE, FRAME_HEADER_LEN};

    /// The job key of [`signed_frame`]'s frames.
    const JOB: u32 = 0xdead_beef;

    /// The counter of frame `number` of `session`.
    fn at(session: u64, number: u32) -> FrameCounter {
        FrameCounter { session, number }
    }

    fn signed_frame(key: &FrameKey, payload: &[u8], counter: FrameCounter) -> Vec<u8> {
        let repr = FrameRepr {
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            ethertype: DEFAULT_ETHERTYPE,
            kind: 7,
            dst_port: 3,
            src_port: 4,
            src_node: 1,
            job_key: JOB,
            seq: 42,
            payload_len: payload.len(),
            authenticated: true,
        };
        let mut buf = vec![0u8; repr.frame_len()];
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        repr.emit(&mut frame);
        frame.payload_mut().copy_from_slice(payload);
        key.sign(&mut buf, counter);
        buf
    }

    /// The destination of [`signed_frame`]'s frames.
    const DST: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn key(byte: u8) -> FrameKey {
        FrameKey::for_destination(&JobSecret::from_bytes([byte; SECRET_LEN]), JOB, 0, DST)
    }

    /// The frame's counter if it verifies under the key a receiver on rail
    /// `rail` picks for it: the key of its destination MAC.
    fn verify_received(secret: u8, rail: usize, bytes: &[u8]) -> Option<FrameCounter> {
        let frame = Frame::new_checked(bytes).ok()?;
        FrameKey::for_destination(&JobSecret::from_bytes([secret; SECRET_LEN]), JOB, rail, frame.dst_mac()).verify(&frame)
    }

    fn verify(key: &FrameKey, bytes: &[u8]) -> Option<FrameCounter> {
        Frame::new_checked(bytes).ok().and_then(|f| key.verify(&f))
    }

    #[test]
    fn a_signed_frame_verifies_and_yields_its_counter() {
        let k = key(1);
        for len in [0, 1, 8, 14, 64, 1400] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let counter = at(0x0102_0304_0506_0708, 0x090a_0b0c);
            let frame = signed_frame(&k, &payload, counter);
            assert_eq!(frame.len(), FRAME_HEADER_LEN + len + TRAILER_LEN);
            assert_eq!(verify(&k, &frame), Some(counter), "{len}-byte payload");
            // Padding after the trailer (a NIC pads short frames) changes nothing.
            let mut padded = frame.clone();
            padded.resize(frame.len().max(60) + 4, 0xaa);
            assert_eq!(verify(&k, &padded), Some(counter));
        }
    }

    #[test]
    fn every_single_flipped_bit_fails_verification() {
        let k = key(1);
        let frame = signed_frame(&k, b"payload!", at(0x1234_5678_9abc_def0, 99));
        assert_eq!(verify_received(1, 0, &frame), Some(at(0x1234_5678_9abc_def0, 99)));
        for byte in 0..frame.len() {
            for bit in 0..8 {
                let mut bad = frame.clone();
                bad[byte] ^= 1 << bit;
                let verdict = verify_received(1, 0, &bad);
                if (offset::SRC_MAC..offset::KIND).contains(&byte) {
                    // Not hashed: the source MAC, EtherType, version and
                    // job key each have one acceptable value, and the
                    // receiver drops any other
                    // (`endpoint::tests::every_single_flipped_bit_is_dropped`);
                    // the job key is in the key as well.
                    continue;
                }
                // The destination MAC picks the key; the rest (every bit of
                // the session and the number included) is hashed.
                assert_eq!(verdict, None, "bit {bit} of byte {byte} flipped still verifies");
            }
        }
    }

    #[test]
    fn each_rail_and_destination_has_a_key_of_its_own() {
        // Review rev27, finding 4: rails sharing one MAC still have keys of their own.
        let frame = signed_frame(&key(1), b"payload!", at(7, 1));
        assert_eq!(verify_received(1, 0, &frame), Some(at(7, 1)));
        assert_eq!(verify_received(1, 1, &frame), None, "rail 0's frame on rail 1");
        let secret = JobSecret::from_bytes([1; SECRET_LEN]);
        let other = FrameKey::for_destination(&secret, JOB, 0, MacAddr([2, 0, 0, 0, 0, 3]));
        assert_eq!(verify(&other, &frame), None, "under another destination's key");
        // The job key is in the key, not in the hash: a frame signed for
        // one job fails its tag at another job's node under the same secret.
        assert_eq!(verify(&FrameKey::for_destination(&secret, JOB ^ 1, 0, DST), &frame), None, "under another job's key");
        assert_eq!(verify(&FrameKey::for_destination(&secret, JOB, 0, DST), &frame), Some(at(7, 1)));
    }

    /// The key of bytes 0, 1, ..., 15 as SipHash's two words.
    fn sip_key(key: &[u8; 16]) -> SipState {
        let word = |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().unwrap());
        sip_keyed(word(0), word(8))
    }

    #[test]
    fn siphash24_gives_the_papers_test_vector() {
        // The SipHash paper (Aumasson and Bernstein, 2012), appendix A: key
        // 00 01 .. 0f, the 15-byte message 00 01 .. 0e.
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(&sip_key(&key), &msg), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn siphash24_agrees_with_the_siphasher_crate_for_random_keys_at_every_length_to_200() {
        use siphasher::sip::SipHasher24;
        let mut bytes = [0u8; 16 + 200];
        for round in 0..64 {
            getrandom::fill(&mut bytes).unwrap();
            let key: [u8; 16] = bytes[..16].try_into().unwrap();
            let (ours, reference) = (sip_key(&key), SipHasher24::new_with_key(&key));
            for len in 0..=200 {
                // Every alignment of the message in memory, too.
                let msg = &bytes[16 + (round % 8).min(200 - len)..][..len];
                assert_eq!(siphash24(&ours, msg), reference.hash(msg), "key {key:02x?}, {len} bytes");
            }
        }
        // Through the frame key: the tag is SipHash-2-4 under the derived key.
        let k = key(1);
        let derived = {
            let mut label = [0u8; 28];
            label[..13].copy_from_slice(b"mcd frame key");
            label[14..18].copy_from_slice(&JOB.to_be_bytes());
            label[22..].copy_from_slice(&DST.0);
            u128::from(SipHasher128::new_with_key(&[1; SECRET_LEN]).hash(&label)).to_le_bytes()
        };
        assert_eq!(k.tag(b"signed bytes"), SipHasher24::new_with_key(&derived).hash(b"signed bytes"));
    }

    #[test]
    fn another_key_fails_verification() {
        let frame = signed_frame(&key(1), b"hello", at(7, 5));
        assert_eq!(verify(&key(2), &frame), None);
        let mut other = [1u8; SECRET_LEN];
        other[15] = 0;
        assert_eq!(verify(&FrameKey::for_destination(&JobSecret::from_bytes(other), JOB, 0, DST), &frame), None);
    }

    #[test]
    fn unauthenticated_or_short_frames_do_not_verify() {
        let k = key(1);
        let mut frame = signed_frame(&k, b"hello", at(7, 5));
        frame[offset::VERSION] &= !crate::wire::AUTH_FLAG;
        assert_eq!(verify(&k, &frame), None, "flag cleared");
        let frame = signed_frame(&k, b"hello", at(7, 5));
        for cut in 1..=TRAILER_LEN {
            assert!(Frame::new_checked(&frame[..frame.len() - cut]).is_err(), "{cut} bytes of the trailer cut");
        }
    }

    #[test]
    fn replay_window_accepts_each_counter_once() {
        let mut w = ReplayWindow::default();
        let base = 1_000_000u64;
        let take = |w: &mut ReplayWindow, c: u64| {
            let new = w.check(c);
            if new {
                w.record(c);
            }
            new
        };
        // In order.
        for c in base..base + 10 {
            assert!(take(&mut w, c), "{c} in order");
        }
        // Duplicates.
        for c in base..base + 10 {
            assert!(!take(&mut w, c), "{c} again");
        }
        // Reordered within the window: a gap filled later.
        assert!(take(&mut w, base + 20));
        for c in (base + 10..base + 20).rev() {
            assert!(take(&mut w, c), "{c} late but within the window");
            assert!(!take(&mut w, c));
        }
        // Too old: the window's width below the highest.
        assert!(take(&mut w, base + 20 + REPLAY_WINDOW));
        assert!(!take(&mut w, base + 20), "exactly the window's width below");
        assert!(take(&mut w, base + 21), "just inside the window, never seen");
        assert!(!take(&mut w, base), "long ago");
        // Counter 0 is never valid (numbers in a session start at 1).
        assert!(!take(&mut ReplayWindow::default(), 0));
    }

    #[test]
    fn replay_window_bitmap_wraps_and_forgets_what_it_slides_past() {
        let mut w = ReplayWindow::default();
        let base = 77u64;
        // Slide across several widths one at a time: each counter is new once.
        for c in base..base + 5 * REPLAY_WINDOW {
            assert!(w.check(c), "{c}");
            w.record(c);
            assert!(!w.check(c));
        }
        // A jump of less than the width, skipping counters: those stay new.
        let top = w.highest();
        w.record(top + 100);
        for c in top + 1..top + 100 {
            assert!(w.check(c), "{c} skipped, so never seen");
        }
        assert!(!w.check(top), "seen before the jump");
        assert!(!w.check(top + 100 - REPLAY_WINDOW), "slid out");
    }

    #[test]
    fn a_restart_in_a_new_session_is_accepted_whatever_its_counters() {
        let mut w = SenderWindows::default();
        let mut first_life = Counter::new().unwrap();
        let old: Vec<FrameCounter> = (0..50).map(|_| first_life.take()).collect();
        for &c in &old {
            assert!(w.check(c));
            w.record(c);
        }
        let mut restart = Counter::new().unwrap();
        let new: Vec<FrameCounter> = (0..50).map(|_| restart.take()).collect();
        assert_ne!(old[0].session, new[0].session, "another session (2^-64 to fail)");
        for &c in &new {
            assert!(w.check(c), "{c:x?} of the new life");
            w.record(c);
        }
        for &c in old.iter().chain(&new) {
            assert!(!w.check(c), "{c:x?} again");
        }
    }

    #[test]
    fn counters_of_different_sessions_are_never_compared() {
        // Review rev27, finding 2: a frame of an earlier run whose sender's
        // clock was ahead used to lift the window above the live sender's
        // counters. Sessions are compared by identity, never by size.
        let mut w = SenderWindows::default();
        let (old, live) = (0xFFFF_FFFF_FFFF_FFF0u64, 0x10u64);
        for c in [at(old, 1_000_000), at(old, 999_900)] {
            assert!(w.check(c));
            w.record(c);
        }
        for i in 1..=2000 {
            assert!(w.check(at(live, i)), "live frame {i}");
            w.record(at(live, i));
        }
        assert_eq!(w.sessions().collect::<Vec<_>>(), vec![live, old], "the session heard most first");
        assert!(!w.check(at(old, 1_000_000)) && !w.check(at(old, 999_900)), "the old run's frames, once only");
        assert!(!w.check(at(live, 1500)) && !w.check(at(live, 1)), "the live ones too");
        assert_eq!((w.highest(live), w.highest(old), w.highest(7)), (2000, 1_000_000, 0));
        assert!(!w.check(at(live, 0)), "number 0 is never sent");
    }

    #[test]
    fn a_counter_moves_to_a_new_session_before_its_numbers_wrap() {
        let mut c = Counter { next: at(5, u32::MAX - 1) };
        assert_eq!(c.take(), at(5, u32::MAX - 1));
        assert_eq!(c.take(), at(5, u32::MAX));
        let next = c.take();
        assert_eq!(next.number, 1, "number 1 of a new session");
        assert_ne!(next.session, 5);
        assert_eq!(c.take(), at(next.session, 2));
        let mut w = SenderWindows::default();
        for x in [at(5, u32::MAX), next, at(next.session, 2)] {
            assert!(w.check(x));
            w.record(x);
        }
    }

    #[test]
    fn key_files_are_16_bytes_or_32_hex_digits() {
        assert_eq!(parse_key_file(&[7u8; 16]).unwrap(), JobSecret::from_bytes([7; 16]));
        let hex = "000102030405060708090a0b0c0d0e0f\n";
        let expected: [u8; 16] = std::array::from_fn(|i| i as u8);
        assert_eq!(parse_key_file(hex.as_bytes()).unwrap(), JobSecret::from_bytes(expected));
        assert!(parse_key_file(b"").unwrap_err().contains("empty"));
        assert!(parse_key_file(&[1u8; 15]).unwrap_err().contains("15 bytes"));
        assert!(parse_key_file(&[1u8; 17]).unwrap_err().contains("17 bytes"));
        assert!(parse_key_file(b"000102030405060708090a0b0c0d0e0g").is_err(), "not hex");
        // (review-auth) A key of zeros is nobody's secret.
        assert!(parse_key_file(&[0u8; 16]).unwrap_err().contains("all zeros"));
        assert!(parse_key_file(b"00000000000000000000000000000000\n").unwrap_err().contains("all zeros"));
    }

    fn temp_dir(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mcd-auth-test-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The refusal of key file `path`: an [`Error::KeyFile`] naming it
    /// (anything else fails the test); its reason, whose text tells the
    /// user what is wrong and how to fix it.
    fn refusal<T: std::fmt::Debug>(result: Result<T>, path: &Path) -> String {
        match result {
            Err(Error::KeyFile { path: named, reason }) => {
                assert_eq!(named, path, "the refusal names the file");
                reason
            }
            other => panic!("not a key file refusal of {}: {other:?}", path.display()),
        }
    }

    #[test]
    fn key_file_checks_say_what_is_wrong_and_how_to_fix_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("checks");
        let path = dir.join("job.key");
        let written = JobSecret::write_new(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(JobSecret::load(&path).unwrap(), written);
        let reason = refusal(JobSecret::write_new(&path), &path);
        assert!(reason.contains("never overwritten"), "{reason}");

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let reason = refusal(JobSecret::load(&path), &path);
        assert!(reason.contains("0644") && reason.contains("chmod 600"), "{reason}");
        // The message names the file too.
        let err = JobSecret::load(&path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");

        let missing = dir.join("missing.key");
        let reason = refusal(JobSecret::load(&missing), &missing);
        assert!(reason.contains("cannot open"), "{reason}");

        let short = dir.join("short.key");
        std::fs::write(&short, b"0123").unwrap();
        std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
        let reason = refusal(JobSecret::load(&short), &short);
        assert!(reason.contains("4 bytes") && reason.contains("head -c 16 /dev/urandom"), "{reason}");

        let empty = dir.join("empty.key");
        std::fs::write(&empty, b"").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
        let reason = refusal(JobSecret::load(&empty), &empty);
        assert!(reason.contains("empty"), "{reason}");

        let reason = refusal(JobSecret::load(&dir), &dir);
        assert!(reason.contains("not a regular file"), "{reason}");

        let link = dir.join("link.key");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let reason = refusal(JobSecret::load(&link), &link);
        assert!(reason.contains("symbolic link"), "{reason}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_key_file_of_another_user_is_refused() {
        if crate::sys::effective_uid() != 0 {
            // Giving a file away needs root; as another user, a file of root's stands in.
            let path = Path::new("/etc/hostname");
            let reason = refusal(JobSecret::load(path), path);
            assert!(reason.contains("owned by user id 0"), "{reason}");
            return;
        }
        let dir = temp_dir("owner");
        let path = dir.join("job.key");
        JobSecret::write_new(&path).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let reason = refusal(JobSecret::load(&path), &path);
        assert!(reason.contains("owned by user id 65534"), "{reason}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mcd_auth_and_key_file_settings() {
        assert_eq!(Auth::from_values(None, None).unwrap(), Auth::Unset);
        assert_eq!(Auth::from_values(Some("on"), None).unwrap(), Auth::Unset);
        assert_eq!(Auth::from_values(Some("off"), None).unwrap(), Auth::Off);
        assert_eq!(Auth::from_values(Some("OFF"), None).unwrap(), Auth::Off);
        match Auth::from_values(Some("no"), None) {
            Err(Error::Config(text)) => assert!(text.contains("MCD_AUTH=no") && text.contains("neither `on` nor `off`"), "{text}"),
            other => panic!("{other:?}"),
        }
        match Auth::from_values(Some("off"), Some("/k")) {
            Err(Error::Config(text)) => assert!(text.contains("both set"), "{text}"),
            other => panic!("{other:?}"),
        }
        let missing = Path::new("/nonexistent/mcd.key");
        refusal(Auth::from_values(None, missing.to_str()), missing);
        let err = Auth::Unset.required().unwrap_err();
        assert!(matches!(err, Error::NoSecret), "{err:?}");
        // The message tells the user both ways out.
        let text = err.to_string();
        assert!(text.contains("MCD_KEY_FILE") && text.contains("MCD_AUTH=off"), "{text}");
        let dir = temp_dir("env");
        let path = dir.join("job.key");
        let secret = JobSecret::write_new(&path).unwrap();
        assert_eq!(Auth::from_values(Some("on"), path.to_str()).unwrap(), Auth::Key(secret));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn secrets_are_random_and_hidden_from_debug() {
        let (a, b) = (JobSecret::generate().unwrap(), JobSecret::generate().unwrap());
        assert_ne!(a, b);
        assert_eq!(format!("{a:?}"), "JobSecret(..)");
        assert!(JobSecret::from_slice(&[0; 15]).is_err());
    }

    #[test]
    fn rev28_a_recorded_frame_of_a_session_sharing_32_bits_with_the_live_one_does_not_silence_it() {
        // Finding 3 of rev28: a session was 32 random bits, so a frame
        // recorded in an earlier run whose sender drew the live sender's
        // session again (S in 2^32 with S sessions of that node recorded)
        // lifted the live session's window far ahead, and every live frame
        // of that sender was dropped as a replay until its numbers caught
        // up. A session is now 64 random bits, every one of them on the wire
        // (under the tag) and in the receiver's windows: an earlier run's
        // session that agrees with the live one in any 32 bits is another
        // session, whose frame leaves the live window as it was.
        let k = key(1);
        /// Sends `counter`'s frame through the wire (signed, verified) to `w`: whether it is taken.
        fn take(k: &FrameKey, w: &mut SenderWindows, counter: FrameCounter) -> bool {
            let got = verify(k, &signed_frame(k, b"barrier", counter)).expect("a signed frame verifies");
            assert_eq!(got, counter, "the trailer carries the whole counter");
            let new = w.check(got);
            if new {
                w.record(got);
            }
            new
        }
        let first = Counter::new().unwrap().take();
        let live_session = first.session;
        for (recorded, same) in [(live_session ^ 0xFFFF_FFFF_0000_0000, "low"), (live_session ^ 0x0000_0000_FFFF_FFFF, "high")] {
            let (mut w, mut live) = (SenderWindows::default(), Counter { next: first });
            for i in 1..=100 {
                assert!(take(&k, &mut w, live.take()), "live frame {i}");
            }
            // An earlier run's frame, of a session with the same 32 {same} bits, 3 million frames into it.
            assert!(take(&k, &mut w, at(recorded, 3_000_000)), "new to this receiver, once");
            let dropped = (101..=200).filter(|_| !take(&k, &mut w, live.take())).count();
            assert_eq!(
                dropped, 0,
                "live frames dropped as replays after one frame of an earlier run whose session has the live one's {same} 32 bits"
            );
            assert_eq!(w.highest(live_session), 200);
        }
        // Every one of the 64 bits is drawn: neither half is the same from one session to the next.
        let sessions: Vec<u64> = (0..16).map(|_| Counter::new().unwrap().take().session).collect();
        assert!(sessions.iter().any(|s| s >> 32 != sessions[0] >> 32), "high halves all alike: {sessions:x?}");
        assert!(sessions.iter().any(|s| s & 0xFFFF_FFFF != sessions[0] & 0xFFFF_FFFF), "low halves all alike: {sessions:x?}");
    }

    /// The fastest of nine runs of `cost`: what the code costs, not how often
    /// the scheduler took the core from it (a time slice lost inside one
    /// 100 µs loop made a loaded CI machine fail these comparisons).
    fn rev28_fastest(cost: impl Fn() -> std::time::Duration) -> std::time::Duration {
        (0..9).map(|_| cost()).min().expect("nine runs")
    }

    /// Finding 4 of rev28: the time one live frame's check and record take,
    /// on average, when each is preceded by a frame of an earlier run
    /// (another session of the same sender), after one frame of each of
    /// `recorded` earlier sessions has been replayed.
    fn rev28_live_frame_cost(recorded: u32) -> std::time::Duration {
        let mut w = SenderWindows::default();
        let take = |w: &mut SenderWindows, c: FrameCounter| {
            if w.check(c) {
                w.record(c);
            }
        };
        let old = |s: u32, i: u32| at(u64::from(s), i);
        for s in 1..=recorded {
            take(&mut w, old(s, 1));
        }
        let live = 0xFFFF_0000_FFFF_0000u64;
        const LIVE_FRAMES: u32 = 400;
        let start = std::time::Instant::now();
        for i in 1..=LIVE_FRAMES {
            take(&mut w, old(1 + (i % recorded), 1 + i)); // one more frame of an earlier run
            take(&mut w, at(live, i));
        }
        let spent = start.elapsed() / LIVE_FRAMES;
        assert_eq!(w.highest(live), u64::from(LIVE_FRAMES), "every live frame was taken");
        spent
    }

    #[test]
    fn rev28_replayed_sessions_of_earlier_runs_do_not_slow_the_live_senders_frames() {
        let one = rev28_fastest(|| rev28_live_frame_cost(1));
        let many = rev28_fastest(|| rev28_live_frame_cost(5000));
        eprintln!("a live frame's check and record: {one:?} with 1 earlier session replayed, {many:?} with 5000");
        assert!(many < one * 20 + std::time::Duration::from_micros(2), "{many:?} against {one:?}: the earlier runs' sessions slow every live frame");
    }

    /// Finding 4 of rev28: the time a receiver spends on one frame of an
    /// earlier run that it took already (sent again: dropped as a replay),
    /// after one frame of each of `recorded` earlier sessions was taken.
    fn rev28_replayed_again_cost(recorded: u32) -> std::time::Duration {
        let mut w = SenderWindows::default();
        let old = |s: u32| at(u64::from(s), 1);
        for s in 1..=recorded {
            if w.check(old(s)) {
                w.record(old(s));
            }
        }
        w.record(at(0xFFFF_0000_FFFF_0000, 1)); // the live session, heard last
        const FLOOD: u32 = 2000;
        let start = std::time::Instant::now();
        let mut new = 0;
        for i in 0..FLOOD {
            new += u32::from(std::hint::black_box(&w).check(old(1 + i % recorded)));
        }
        let spent = start.elapsed() / FLOOD;
        // Only the last few sessions are kept (the others' frames are new
        // once more: useless above the endpoint, as to a new endpoint).
        if recorded as usize <= EARLIER_SESSIONS {
            assert_eq!(new, 0, "each was taken before");
        }
        spent
    }

    #[test]
    fn rev28_a_flood_of_earlier_runs_frames_sent_again_costs_a_tag_checks_time() {
        let one = rev28_fastest(|| rev28_replayed_again_cost(1));
        let many = rev28_fastest(|| rev28_replayed_again_cost(5000));
        eprintln!("an earlier run's frame sent again: {one:?} with 1 earlier session, {many:?} with 5000");
        assert!(many < one * 20 + std::time::Duration::from_micros(2), "{many:?} against {one:?} per replayed frame");
    }

    #[test]
    fn a_senders_earlier_sessions_are_bounded_and_the_most_heard_is_never_forgotten() {
        // Review rev28, finding 4: a flood of earlier runs' sessions, each
        // new once, between the live sender's frames.
        let mut w = SenderWindows::default();
        let take = |w: &mut SenderWindows, c: FrameCounter| {
            let new = w.check(c);
            if new {
                w.record(c);
            }
            new
        };
        let live = 0xABCD_0000_ABCD_0000u64;
        let old = at;
        for i in 1..=10 {
            assert!(take(&mut w, at(live, i)));
        }
        for s in 1..=1000u64 {
            // Six sessions of earlier runs between two live frames: more than are kept.
            for k in 0..6 {
                assert!(take(&mut w, old(s * 6 + k, 1)), "session {}", s * 6 + k);
            }
            assert!(take(&mut w, at(live, 10 + s as u32)), "live frame {s}");
            assert!(!take(&mut w, at(live, 10 + s as u32)) && !take(&mut w, at(live, s as u32)), "live frames replayed");
        }
        let kept: Vec<u64> = w.sessions().collect();
        assert_eq!(kept.len(), 1 + EARLIER_SESSIONS, "{kept:x?}");
        assert_eq!(kept[0], live, "the live session first");
        assert_eq!(kept[1..], [6005, 6004, 6003, 6002], "the most recently heard others");
        assert_eq!(w.forgotten(), 6000 - EARLIER_SESSIONS as u64, "every session but the kept ones forgotten, and counted");
        assert!(!take(&mut w, old(6005, 1)), "a kept one's frame again");
        assert!(take(&mut w, old(6, 1)), "a forgotten one's frame is new once more");
        assert_eq!(w.highest(live), 1010);
        // A session taken more often than the most heard one takes its slot.
        for i in 2..=2000 {
            assert!(take(&mut w, old(6, i)));
        }
        assert_eq!(w.sessions().next(), Some(6));
        assert!(!take(&mut w, at(live, 1010)) && take(&mut w, at(live, 1011)), "the live one kept, among the others");
    }

    #[test]
    fn rev29_a_senders_next_session_is_never_forgotten_for_earlier_runs() {
        // Review of issue 27 (rev29), finding 1, without a long recording:
        // the live sender itself used up a session (2^32 - 1 frames: 71
        // minutes at a million frames a second) and moved to a new one
        // ([`Counter::take`]). The used-up session has taken the most
        // frames, so it keeps its slot; the live session sits among the
        // `EARLIER_SESSIONS` least-recently-used ones, and one frame of each
        // of 4 recorded earlier runs forgets it.
        let mut w = SenderWindows::default();
        let take = |w: &mut SenderWindows, (session, number): (u64, u64)| {
            let c = FrameCounter { session, number: number as u32 };
            let new = w.check(c);
            if new {
                w.record(c);
            }
            new
        };
        let used_up = 0x1111_0000u64;
        for i in u64::from(u32::MAX) - 100..=u64::from(u32::MAX) {
            assert!(take(&mut w, (used_up, i)));
            w.pin_last(); // the engine took its message as this run's
        }
        // As after the session's every frame (in its live slot, or the most heard's).
        for slot in [&mut w.live[0], &mut w.most] {
            if slot.session == used_up {
                slot.taken = u64::from(u32::MAX);
            }
        }
        let next = 0x5555_0000u64;
        for i in 1..=1000 {
            assert!(take(&mut w, (next, i)), "the live sender's frame {i} in its next session");
            w.pin_last();
        }
        let mut again = 0;
        for round in 1..=10u64 {
            for s in 1..=4u64 {
                assert!(take(&mut w, (0x3333_0000 + s, round)), "earlier run {s}'s frame {round}, new");
            }
            again += u32::from(take(&mut w, (next, 1000)));
        }
        assert_eq!(again, 0, "the live session's frame 1000, taken before, was taken {again} more times of 10 replays");
    }

    #[test]
    fn rev29_the_auth_source_reads_mcd_auth_as_mcd_does() {
        // Review of issue 27 (rev29), finding 4: the interposer matched
        // `off`/`OFF` only; it now asks mcd (`mcd_auth_from_env`), which
        // reads the values trimmed (`from_env`) and in any case.
        for off in ["off", "OFF", "Off", "oFf"] {
            assert_eq!(AuthSource::from_values(Some(off), None).unwrap(), AuthSource::Off, "{off}");
        }
        assert_eq!(AuthSource::from_values(Some("On"), Some("/k")).unwrap(), AuthSource::KeyFile("/k".into()));
        assert_eq!(AuthSource::from_values(None, None).unwrap(), AuthSource::Unset);
        assert!(AuthSource::from_values(Some("Off"), Some("/k")).is_err());
        assert!(AuthSource::from_values(Some("maybe"), None).is_err());
    }

    #[test]
    fn rev29_a_key_file_of_text_is_refused() {
        // Review of issue 27 (rev29), a careless user. The README says to
        // make a key file with `head -c 16 /dev/urandom`; 16 random bytes
        // are all printable ASCII with odds of (95/256)^16, about 1.3e-7,
        // so a 16-byte file of text is a typed password, not a secret. Any
        // frame on the segment (its tag over known bytes) is a test of a
        // guess, offline: SipHash runs at tens of millions of guesses a
        // second per core, so a dictionary password falls in seconds and
        // the attacker then signs what it likes.
        for text in [&b"sixteen byte key"[..], b"correcthorsebatt", b"mypassword12345\n"] {
            assert_eq!(text.len(), SECRET_LEN);
            let verdict = parse_key_file(text);
            assert!(verdict.is_err(), "the key file {:?} is taken as a secret", String::from_utf8_lossy(text));
        }
        let random: [u8; SECRET_LEN] = [0x8f, 0x01, 0xd3, 0x7a, 0xe2, 0x55, 0x90, 0x3c, 0xff, 0x12, 0x6b, 0xa4, 0x07, 0xc8, 0x39, 0xee];
        assert!(parse_key_file(&random).is_ok(), "16 random bytes stay a secret");
    }

    mod rev27 {
        //! Review of issue 27 (rev27): the replay window against a model
        //! of what it promises, around the 512 boundary.
        use super::super::{ReplayWindow, REPLAY_WINDOW};
        use proptest::prelude::*;
        use std::collections::BTreeSet;

        /// Steps from the last counter: mostly near the window's edge.
        fn step() -> impl Strategy<Value = i64> {
            prop_oneof![
                -3i64..4,
                Just(REPLAY_WINDOW as i64 - 1),
                Just(REPLAY_WINDOW as i64),
                Just(REPLAY_WINDOW as i64 + 1),
                Just(-(REPLAY_WINDOW as i64) + 1),
                Just(-(REPLAY_WINDOW as i64)),
                Just(-(REPLAY_WINDOW as i64) - 1),
                -1100i64..1100,
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn the_window_takes_a_counter_iff_unseen_and_within_512_of_the_highest(
                steps in proptest::collection::vec(step(), 1..400),
                base in prop_oneof![Just(1u64), Just(1_790_000_000_000_000_000u64), Just(u64::MAX - 5_000)],
            ) {
                let mut w = ReplayWindow::default();
                let mut seen = BTreeSet::new();
                let mut top = 0u64;
                let mut c = base as i128;
                for s in steps {
                    c = (c + s as i128).clamp(0, u64::MAX as i128);
                    let counter = c as u64;
                    let fresh = counter != 0 && !seen.contains(&counter) && (counter > top || top - counter < REPLAY_WINDOW);
                    prop_assert_eq!(w.check(counter), fresh, "counter {} (top {})", counter, top);
                    if fresh {
                        w.record(counter);
                        seen.insert(counter);
                        top = top.max(counter);
                    }
                    prop_assert_eq!(w.highest(), top);
                }
            }
        }
    }
}
