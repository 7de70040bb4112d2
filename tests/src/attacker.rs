//! The attacker of the attack tests (issue 27): a station of its own on a
//! virtual cluster's switch ([`Cluster::plug_outsider`]) with nothing but a
//! raw socket. It sniffs every mcd frame the segment carries to it (all of
//! them on a hub; on a switch, multicasts, floods and what it steals), and
//! forges frames from what it saw: captured bytes with fields rewritten
//! ([`Forgery`]), sent as they are.
//!
//! It knows no secret. On a job with authentication, a rewritten frame
//! keeps the trailer (counter and tag) of the frame it was made from, so its
//! tag no longer verifies; a frame sent again unchanged carries a counter
//! its receivers have seen.
//!
//! Also here: [`Job`], a job of `mcd-test-peer job` processes, one per node,
//! whose lines the tests wait for.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use barriers::check::Timeline;
use barriers::{mcd_wire, Msg, MsgKind};
use mcd::wire::{offset, Frame, FRAME_HEADER_LEN};
use mcd::{GroupId, MacAddr, RawReceiver, RawSender};
use mcd_vcluster::{Cluster, Outsider};

/// A frame the attacker saw, with when.
#[derive(Clone, Debug)]
pub struct Captured {
    /// When the sniffer read it.
    pub at: Instant,
    /// The frame, Ethernet header first.
    pub bytes: Vec<u8>,
}

impl Captured {
    /// A view of the frame (a captured frame passed [`Frame::new_checked`]).
    pub fn frame(&self) -> Frame<&[u8]> {
        Frame::new_unchecked(&self.bytes[..])
    }

    /// The barrier message it carries, if it is one.
    pub fn msg(&self) -> Option<Msg> {
        let f = self.frame();
        mcd_wire::parse_with_data(f.kind(), f.seq(), f.payload()).map(|(m, _)| m)
    }

    /// The group key and barrier message a group's frame carries (the C
    /// ABI's and the interposer's barriers run over a
    /// [`barriers::SharedEndpoint`]: the key comes first, so [`msg`](Self::msg)
    /// would read the key's bytes as the instance); `None` if it is not one.
    pub fn group_msg(&self) -> Option<(u64, Msg)> {
        let f = self.frame();
        mcd_wire::parse_grouped_with_data(f.kind(), f.seq(), f.payload()).map(|(key, m, _)| (key, m))
    }

    /// Whether it is a barrier message of `kind`.
    pub fn is(&self, kind: MsgKind) -> bool {
        self.msg().is_some_and(|m| m.kind == kind)
    }

    /// Its source node number.
    pub fn src(&self) -> usize {
        self.frame().src_node() as usize
    }

    /// Its sequence field (a barrier's epoch).
    pub fn seq(&self) -> u32 {
        self.frame().seq()
    }

    /// A forgery made from it.
    pub fn forge(&self) -> Forgery {
        Forgery(self.bytes.clone())
    }
}

/// A frame being forged from a captured one: fields rewritten in place,
/// everything else (a trailer included) kept.
#[derive(Clone, Debug)]
pub struct Forgery(pub Vec<u8>);

impl Forgery {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// With this sequence field (epoch).
    pub fn seq(mut self, seq: u32) -> Forgery {
        self.put(offset::SEQ, &seq.to_be_bytes());
        self
    }

    /// Sent to `mac`, port `port`.
    pub fn to(mut self, mac: MacAddr, port: u8) -> Forgery {
        self.put(offset::DST_MAC, &mac.0);
        self.0[offset::DST_PORT] = port;
        self
    }

    /// Sent to every node of the job (group 0 of its job key).
    pub fn to_all(self) -> Forgery {
        let key = Frame::new_unchecked(&self.0[..]).job_key();
        self.to(MacAddr::mcd_group(key, GroupId::ALL), 0)
    }

    /// "From" node `node`, whose MAC is `mac` (port as captured).
    pub fn from(mut self, node: u16, mac: MacAddr) -> Forgery {
        self.put(offset::SRC_MAC, &mac.0);
        self.put(offset::SRC_NODE, &node.to_be_bytes());
        self
    }

    /// With its barrier message rewritten by `edit` (kind, epoch and
    /// payload head; the data after it stays).
    pub fn msg(mut self, edit: impl FnOnce(&mut Msg)) -> Forgery {
        let f = Frame::new_unchecked(&self.0[..]);
        let (mut m, _) = mcd_wire::parse_with_data(f.kind(), f.seq(), f.payload()).expect("a barrier message to rewrite");
        edit(&mut m);
        self.0[offset::KIND] = mcd_wire::kind_byte(m.kind);
        self.put(offset::SEQ, &m.epoch.to_be_bytes());
        self.put(FRAME_HEADER_LEN, &mcd_wire::emit(&m));
        self
    }

    /// With `bytes` written over the data after the barrier message, from
    /// its byte `at` (a collective's contribution: header, then elements).
    pub fn data_at(mut self, at: usize, bytes: &[u8]) -> Forgery {
        let start = FRAME_HEADER_LEN + mcd_wire::PAYLOAD_LEN + at;
        assert!(start + bytes.len() <= FRAME_HEADER_LEN + Frame::new_unchecked(&self.0[..]).payload_len(), "beyond the payload");
        self.put(start, bytes);
        self
    }
}

#[derive(Default)]
struct Sniffed {
    frames: Mutex<Vec<Captured>>,
    grew: Condvar,
}

/// The attacker: an outsider station that sniffs and sends raw frames.
pub struct Attacker {
    /// Its station on the cluster's switch.
    pub station: Outsider,
    sender: Arc<RawSender>,
    sniffed: Arc<Sniffed>,
    stop: Arc<AtomicBool>,
    sniffer: Option<JoinHandle<()>>,
    /// Frames sent.
    pub sent: u64,
}

impl Attacker {
    /// Plugs an attacker into `cluster`'s rail-0 switch and starts sniffing
    /// mcd frames (the default EtherType).
    pub fn plug(cluster: &Cluster) -> Attacker {
        let station = cluster.plug_outsider(0).unwrap_or_else(|e| panic!("plugging the attacker in: {e:#}"));
        let (receiver, sender) = {
            let _ns = station.enter().expect("enter the attacker's namespace");
            let iface = Cluster::interface(0);
            (RawReceiver::open(&iface).expect("the attacker's raw receiver"), RawSender::open(&iface).expect("the attacker's raw sender"))
        };
        let sniffed = Arc::new(Sniffed::default());
        let stop = Arc::new(AtomicBool::new(false));
        let sniffer = {
            let (sniffed, stop) = (sniffed.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 9000];
                while !stop.load(Ordering::Relaxed) {
                    let Some(got) = receiver.recv(&mut buf, Duration::from_millis(20)).expect("sniffing") else { continue };
                    let bytes = &buf[..got.len];
                    let ours = !got.outgoing && Frame::new_checked(bytes).is_ok_and(|f| f.ethertype() == mcd::wire::DEFAULT_ETHERTYPE);
                    if ours {
                        sniffed.frames.lock().unwrap().push(Captured { at: Instant::now(), bytes: bytes.to_vec() });
                        sniffed.grew.notify_all();
                    }
                }
            })
        };
        Attacker { station, sender: Arc::new(sender), sniffed, stop, sniffer: Some(sniffer), sent: 0 }
    }

    /// Stops sniffing (a flood's frames would all come back to the
    /// sniffer as this host's outgoing frames); what was seen stays.
    pub fn stop_sniffing(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.sniffer.take() {
            t.join().expect("the sniffer");
        }
    }

    /// Every mcd frame seen so far that satisfies `pred`.
    pub fn seen(&self, pred: impl Fn(&Captured) -> bool) -> Vec<Captured> {
        self.sniffed.frames.lock().unwrap().iter().filter(|c| pred(c)).cloned().collect()
    }

    /// Waits until a frame satisfying `pred` has been seen (the first
    /// such); panics naming `what` after `timeout`.
    pub fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&Captured) -> bool) -> Captured {
        self.try_wait_for(timeout, pred).unwrap_or_else(|| {
            panic!("the attacker never saw {what} within {timeout:?} ({} mcd frames seen)", self.sniffed.frames.lock().unwrap().len())
        })
    }

    /// Waits until a frame satisfying `pred` has been seen (the first
    /// such), for at most `timeout`.
    pub fn try_wait_for(&self, timeout: Duration, pred: impl Fn(&Captured) -> bool) -> Option<Captured> {
        let deadline = Instant::now() + timeout;
        let mut frames = self.sniffed.frames.lock().unwrap();
        loop {
            if let Some(c) = frames.iter().find(|c| pred(c)) {
                return Some(c.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            frames = self.sniffed.grew.wait_timeout(frames, left).unwrap().0;
        }
    }

    /// Sends `frame` as it is.
    pub fn send(&mut self, frame: &Forgery) {
        self.sender.send(&frame.0).expect("the attacker's send");
        self.sent += 1;
    }

    /// A sender of raw frames from the attacker's station, for a thread of its own.
    pub fn raw_sender(&self) -> Arc<RawSender> {
        self.sender.clone()
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.sniffer.take() {
            let _ = t.join();
        }
    }
}

/// Whether a job runs with authentication (the default) or without.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// `MCD_AUTH=off`: today's unauthenticated frames.
    Off,
    /// A per-job secret in a key file (`MCD_KEY_FILE`).
    On,
}

/// A line a job's process printed, with when the test read it.
#[derive(Clone, Debug)]
pub struct Line {
    /// The node that printed it.
    pub node: usize,
    /// When the test read it.
    pub at: Instant,
    /// The line.
    pub text: String,
}

/// How a job's process ended.
#[derive(Clone, Debug)]
pub struct Ended {
    /// Exit code (`None`: killed, by a signal or by the test's timeout).
    pub code: Option<i32>,
    /// When the test saw it end.
    pub at: Instant,
    /// Everything it printed, in order.
    pub lines: Vec<String>,
    /// Its standard error.
    pub stderr: String,
}

impl Ended {
    /// Every node's ending (exit code, output, standard error), for a
    /// failed assertion's message.
    pub fn describe_all(ends: &[Ended]) -> String {
        ends.iter()
            .enumerate()
            .map(|(n, e)| format!("node {n} ({:?}):\n  {}\n  {}", e.code, e.lines.join("\n  "), e.stderr.trim()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The first line starting with `prefix`, without the prefix.
    pub fn line(&self, prefix: &str) -> Option<&str> {
        self.lines.iter().find_map(|l| l.strip_prefix(prefix))
    }

    /// The counter `name` in its `stats:` line (the endpoint's drops by
    /// reason, sent, received), 0 if absent.
    pub fn stat(&self, name: &str) -> u64 {
        counter(self.line("stats: ").unwrap_or(""), name)
    }

    /// The counter `name` in its `barrier stats:` line.
    pub fn barrier_stat(&self, name: &str) -> u64 {
        counter(self.line("barrier stats: ").unwrap_or(""), name)
    }

    /// Its error line, if it failed.
    pub fn error(&self) -> Option<&str> {
        self.line("error: ")
    }
}

/// The value of `name: N` in a Debug-printed struct.
fn counter(text: &str, name: &str) -> u64 {
    let pat = format!("{name}: ");
    text.match_indices(&pat)
        .find(|(i, _)| *i == 0 || !text.as_bytes()[i - 1].is_ascii_alphanumeric() && text.as_bytes()[i - 1] != b'_')
        .and_then(|(i, _)| text[i + pat.len()..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or(0)
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Option<JoinHandle<String>>,
}

/// A job: `mcd-test-peer job ALGORITHM COUNT` on every node of a cluster,
/// each process with the node's environment, the job's authentication and
/// its own extra settings; every line they print is collected as it comes.
pub struct Job {
    procs: Vec<Proc>,
    lines: Arc<(Mutex<Vec<Line>>, Condvar)>,
    readers: Vec<JoinHandle<()>>,
    /// Where the processes write their barriers' times (MCD_TEST_TIMES).
    pub times_dir: std::path::PathBuf,
}

impl Job {
    /// Starts the job on every node of `cluster`, `peer` being the path of
    /// `mcd-test-peer` (`env!("CARGO_BIN_EXE_mcd-test-peer")` in a test);
    /// `env(node)` adds settings.
    pub fn start(
        cluster: &Cluster,
        peer: &str,
        auth: Auth,
        algorithm: &str,
        count: usize,
        env: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Job {
        let times_dir = cluster.scratch_dir().expect("scratch dir").join("times");
        let _ = std::fs::remove_dir_all(&times_dir);
        std::fs::create_dir_all(&times_dir).expect("times dir");
        // A fresh secret for the job, as a launcher provides one
        // (`mcd-vcluster run`), or none at all.
        let auth_env: Vec<(String, String)> = match auth {
            Auth::Off => vec![(mcd::auth::AUTH_VAR.into(), "off".into())],
            Auth::On => {
                let key = cluster.new_job_key_file().unwrap_or_else(|e| panic!("the job's key file: {e:#}"));
                vec![(mcd::auth::KEY_FILE_VAR.into(), key.display().to_string())]
            }
        };
        let lines: Arc<(Mutex<Vec<Line>>, Condvar)> = Arc::default();
        let mut procs = Vec::new();
        let mut readers = Vec::new();
        for node in 0..cluster.nodes() {
            let mut cmd = cluster.command(node, peer);
            cmd.args(["job", algorithm, &count.to_string()])
                .env("MCD_TEST_TIMES", &times_dir)
                .env_remove(mcd::auth::KEY_FILE_VAR)
                .envs(auth_env.iter().cloned())
                .envs(env(node))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting node {node}'s process: {e}"));
            let out = child.stdout.take().expect("piped");
            let lines = lines.clone();
            readers.push(std::thread::spawn(move || {
                for text in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.0.lock().unwrap().push(Line { node, at: Instant::now(), text });
                    lines.1.notify_all();
                }
            }));
            let mut err = child.stderr.take().expect("piped");
            let stderr = std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut err, &mut s);
                s
            });
            procs.push(Proc { stdin: child.stdin.take(), child, stderr: Some(stderr) });
        }
        Job { procs, lines, readers, times_dir }
    }

    /// Waits until node `node` prints a line starting with `prefix`; returns
    /// it. Panics after `timeout`, with every line printed so far.
    pub fn wait_line(&self, node: usize, prefix: &str, timeout: Duration) -> Line {
        let deadline = Instant::now() + timeout;
        let mut lines = self.lines.0.lock().unwrap();
        loop {
            if let Some(l) = lines.iter().find(|l| l.node == node && l.text.starts_with(prefix)) {
                return l.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let all: Vec<String> = lines.iter().map(|l| format!("node {}: {}", l.node, l.text)).collect();
                panic!("node {node} never printed `{prefix}...` within {timeout:?}; the job printed:\n{}", all.join("\n"));
            }
            lines = self.lines.1.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// Writes a line to node `node`'s standard input (a held or gated process goes on).
    pub fn go(&mut self, node: usize) {
        let stdin = self.procs[node].stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").and_then(|_| stdin.flush()).unwrap_or_else(|e| panic!("node {node}'s stdin: {e}"));
    }

    /// Waits for every process to end (killing what still runs after
    /// `timeout`) and returns how each ended.
    pub fn finish(mut self, timeout: Duration) -> Vec<Ended> {
        let deadline = Instant::now() + timeout;
        let mut ends = Vec::new();
        for p in &mut self.procs {
            drop(p.stdin.take());
            let (code, at) = loop {
                match p.child.try_wait().expect("try_wait") {
                    Some(status) => break (status.code(), Instant::now()),
                    None if Instant::now() >= deadline => {
                        let _ = p.child.kill();
                        let _ = p.child.wait();
                        break (None, Instant::now());
                    }
                    None => std::thread::sleep(Duration::from_millis(2)),
                }
            };
            ends.push((code, at));
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let lines = self.lines.0.lock().unwrap();
        ends.into_iter()
            .enumerate()
            .map(|(node, (code, at))| Ended {
                code,
                at,
                lines: lines.iter().filter(|l| l.node == node).map(|l| l.text.clone()).collect(),
                stderr: self.procs[node].stderr.take().and_then(|t| t.join().ok()).unwrap_or_default(),
            })
            .collect()
    }

    /// Each node's barrier times (MCD_TEST_TIMES), as timelines on this
    /// process's clock (both are CLOCK_MONOTONIC), for [`barriers::check::check`].
    pub fn timelines(&self) -> Vec<Timeline> {
        timelines(&self.times_dir, self.procs.len())
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// The timelines in `dir`/rank0.. (lines `k entered_µs left_µs`).
pub fn timelines(dir: &std::path::Path, nodes: usize) -> Vec<Timeline> {
    let (now, now_us) = (Instant::now(), mcd::host::monotonic_clock().as_secs_f64() * 1e6);
    let at = |us: f64| now - Duration::from_secs_f64(((now_us - us) / 1e6).max(0.0));
    (0..nodes)
        .map(|node| {
            let text = std::fs::read_to_string(dir.join(format!("rank{node}"))).unwrap_or_default();
            let mut t = Timeline::default();
            for line in text.lines() {
                let f: Vec<f64> = line.split_whitespace().map(|x| x.parse().expect("a time")).collect();
                t.record(at(f[1]), at(f[2]));
            }
            t
        })
        .collect()
}

/// Fails unless every process ended with code 0 and printed `done`.
pub fn assert_all_done(ends: &[Ended], what: &str) {
    for (node, e) in ends.iter().enumerate() {
        assert!(e.code == Some(0) && e.line("done").is_some(), "{what}: node {node} ended {:?}:\n{}\n{}", e.code, e.lines.join("\n"), e.stderr);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counters_are_read_by_whole_name() {
        let s = "Stats { sent: 5, dropped: DropCounts { bad_tag: 7, not_for_me: 2 }, received: 9 }";
        assert_eq!(super::counter(s, "bad_tag"), 7);
        assert_eq!(super::counter(s, "sent"), 5);
        assert_eq!(super::counter(s, "received"), 9);
        assert_eq!(super::counter(s, "tag"), 0);
        assert_eq!(super::counter(s, "replayed"), 0);
    }
}
