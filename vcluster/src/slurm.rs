//! A real Slurm on a virtual cluster (Debian's `slurm-wlm` and `munge`):
//! `slurmctld` in node 0's namespace under its own hostname `ctl`, and one
//! `slurmd` per node namespace, each with its own hostname (`node0`,
//! `node1`, ...: a UTS namespace), its own `TmpFS` (`/run/mcd-slurm/NAME/tmp`,
//! a tmpfs private to that slurmd's mount namespace: PMIx makes per-job
//! directories there that two nodes on one filesystem would fight over;
//! `/tmp` itself stays shared, so jobs see the checkout wherever it is), and
//! its spool directory and pid file under
//! `/run/mcd-slurm/NAME/`. `NodeName`/`NodeAddr` come from the cluster (rail
//! 0's addresses). The plugins are the simplest (`proctrack/linuxproc`,
//! `task/none`, no cgroups) so that it runs in a VM or container.
//!
//! Authentication is the one `munged` of the machine (every namespace shares
//! the filesystem, so its socket); it is started if it does not answer and
//! then left running (a system service other clusters may be using).
//!
//! Jobs are submitted from node 0's namespace with `SLURM_CONF` pointing at
//! the cluster's `slurm.conf` ([`Slurm::srun`]). [`cleanup`] (called by
//! `Cluster::down`) stops the daemons and removes the directory.
//!
//! Daemons are started with every inherited descriptor beyond stdio closed
//! on exec: a daemon must never keep, say, a `flock` its starter held.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::cluster::{which, Cluster, NodeOutcome};
pub use crate::slurm_state::{cleanup, dir_of, leftovers, SLURM_DIR};

/// CPUs each node declares (`SlurmdParameters=config_overrides`: whatever
/// the machine has), so that `--ntasks-per-node` up to this fits.
pub const CPUS_PER_NODE: usize = 8;

/// The hostname of the controller (in node 0's namespace).
pub const CONTROLLER: &str = "ctl";

/// The Slurm of a virtual cluster.
#[derive(Clone, Debug)]
pub struct Slurm {
    cluster: Cluster,
    dir: PathBuf,
}

/// Checks that Slurm and munge are installed, saying which package brings
/// what is missing.
pub fn check_slurm() -> Result<()> {
    let mut missing = Vec::new();
    for (tool, package) in [
        ("slurmctld", "slurm-wlm"),
        ("slurmd", "slurm-wlm"),
        ("srun", "slurm-wlm"),
        ("munged", "munge"),
        ("munge", "munge"),
        ("unshare", "util-linux"),
    ] {
        if which(tool).is_none() {
            missing.push(format!("`{tool}` ({package})"));
        }
    }
    ensure!(
        missing.is_empty(),
        "Slurm on the virtual cluster needs {}: `apt-get install slurm-wlm munge` (or `sudo ./run deps`)",
        missing.join(", ")
    );
    Ok(())
}

/// The hostname of node `node` under Slurm.
pub fn hostname(node: usize) -> String {
    format!("node{node}")
}

/// A command whose descriptors beyond stdin/out/err are all closed when it
/// execs (so that a daemon it starts inherits no lock or pipe).
fn daemon_command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    mcd::host::close_inherited_descriptors_on_exec(&mut cmd);
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    cmd
}

/// Runs `cmd` (which starts a daemon and returns), its stderr into `log`.
fn start_daemon(mut cmd: Command, log: &Path, what: &str) -> Result<()> {
    let err = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let status = cmd.stderr(err).status().with_context(|| format!("starting {what}"))?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        bail!("starting {what} failed ({status}): {}", text.trim());
    }
    Ok(())
}

fn munge_answers() -> bool {
    Command::new("sh")
        .args(["-c", "munge -n | unmunge"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts the machine's `munged` unless it already answers (then leaves it).
/// Returns whether it was started. One caller of a process at a time:
/// tests start Slurm clusters in parallel, and two `munged` started at once
/// fail one another ("Failed to lock /run/munge/munge.socket.2.lock", seen
/// in CI on a machine whose `munged` was not running yet).
pub fn ensure_munged(log_dir: &Path) -> Result<bool> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if munge_answers() {
        return Ok(false);
    }
    ensure!(
        Path::new("/etc/munge/munge.key").exists(),
        "munge has no key (/etc/munge/munge.key): create one with `mungekey --create` (as root), then `chown munge: /etc/munge/munge.key`"
    );
    std::fs::create_dir_all("/run/munge")?;
    let _ = Command::new("chown").args(["munge:munge", "/run/munge"]).status();
    let mut cmd = daemon_command("runuser");
    cmd.args(["-u", "munge", "--", "munged"]);
    start_daemon(cmd, &log_dir.join("munged.err"), "munged")?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !munge_answers() {
        ensure!(Instant::now() < deadline, "munged started but does not answer (`munge -n | unmunge` fails)");
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(true)
}

impl Slurm {
    /// The Slurm of `cluster` (started or not).
    pub fn of(cluster: &Cluster) -> Slurm {
        Slurm { cluster: cluster.clone(), dir: dir_of(&cluster.spec().name) }
    }

    /// Starts Slurm on `cluster` (stopping any Slurm it had), and waits until
    /// every node is idle.
    pub fn start(cluster: &Cluster) -> Result<Slurm> {
        crate::cluster::require_root()?;
        check_slurm()?;
        let slurm = Slurm::of(cluster);
        cleanup(&cluster.spec().name);
        let dir = &slurm.dir;
        std::fs::create_dir_all(dir.join("ctld"))?;
        std::fs::create_dir_all(dir.join("log"))?;
        for node in 0..cluster.nodes() {
            std::fs::create_dir_all(dir.join(hostname(node)))?;
        }
        ensure_munged(&dir.join("log"))?;
        std::fs::write(slurm.conf(), slurm.slurm_conf())?;
        // slurmd initialises a cgroup plugin even with task/none and
        // proctrack/linuxproc; v1 at a mount point that is not checked keeps it quiet.
        std::fs::write(dir.join("cgroup.conf"), "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nCgroupAutomount=no\n")?;
        let conf = slurm.conf().display().to_string();

        let mut ctld = daemon_command("ip");
        ctld.args(["netns", "exec", &cluster.namespace(0), "unshare", "--uts", "sh", "-c"])
            .arg(format!("hostname {CONTROLLER} && exec slurmctld -f '{conf}' -i"));
        start_daemon(ctld, &dir.join("log/start-ctld.err"), "slurmctld")?;
        let tmp = dir.join("tmp").display().to_string();
        for node in 0..cluster.nodes() {
            let host = hostname(node);
            let mut slurmd = daemon_command("ip");
            slurmd
                .args(["netns", "exec", &cluster.namespace(node), "unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c"])
                .arg(format!("hostname {host} && mkdir -p '{tmp}' && mount -t tmpfs tmpfs '{tmp}' && exec slurmd -f '{conf}' -N {host}"));
            start_daemon(slurmd, &dir.join(format!("log/start-{host}.err")), &format!("slurmd on node {node}"))?;
        }
        slurm.wait_idle(Duration::from_secs(30))?;
        Ok(slurm)
    }

    /// The cluster's `slurm.conf`.
    pub fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// The cluster's Slurm directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this cluster's Slurm has been started (its configuration exists).
    pub fn is_configured(&self) -> bool {
        self.conf().exists()
    }

    fn slurm_conf(&self) -> String {
        let d = self.dir.display();
        let c = &self.cluster;
        let name = &c.spec().name;
        let mut conf = format!(
            "# Written by mcd-vcluster for virtual cluster `{name}`.\n\
             ClusterName=mcd{name}\n\
             SlurmctldHost={CONTROLLER}({ctl_ip})\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             SwitchType=switch/none\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/linear\n\
             SlurmdParameters=config_overrides\n\
             StateSaveLocation={d}/ctld\n\
             SlurmdSpoolDir={d}/%n\n\
             TmpFS={d}/tmp\n\
             SlurmctldPidFile={d}/ctld.pid\n\
             SlurmdPidFile={d}/%n.pid\n\
             SlurmctldLogFile={d}/log/ctld.log\n\
             SlurmdLogFile={d}/log/%n.log\n\
             SlurmctldPort=6817\n\
             SlurmdPort=6818\n\
             SlurmctldDebug=info\n\
             SlurmdDebug=info\n\
             CommunicationParameters=NoAddrCache\n\
             InactiveLimit=0\n\
             KillWait=5\n",
            ctl_ip = c.ip(0, 0)
        );
        for node in 0..c.nodes() {
            conf.push_str(&format!(
                "NodeName={} NodeAddr={} CPUs={CPUS_PER_NODE} Sockets=1 CoresPerSocket={CPUS_PER_NODE} ThreadsPerCore=1 State=UNKNOWN\n",
                hostname(node),
                c.ip(node, 0)
            ));
        }
        conf.push_str("PartitionName=mcd Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE\n");
        conf
    }

    /// A Slurm client command (`srun`, `sinfo`, `scontrol`, ...) run from node
    /// 0's namespace against this cluster's controller. It passes on no
    /// `MCD_*` variable of the caller (add them with `.env`): under Slurm,
    /// mcd takes everything from Slurm.
    pub fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.cluster.namespace(0), program]);
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(|k| k.starts_with("MCD_")) {
                cmd.env_remove(key);
            }
        }
        cmd.env("SLURM_CONF", self.conf());
        cmd
    }

    /// `srun ARGS` on this cluster (see [`Slurm::client`]).
    pub fn srun<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = self.client("srun");
        cmd.args(args);
        cmd
    }

    /// `srun ARGS` for a job with a secret of its own, provisioned as a
    /// batch script does it (the README's recipe): a shell makes a key file
    /// of 16 random bytes under `umask 077` in a directory every node sees
    /// and only the user can read, then runs `srun` with `MCD_KEY_FILE`
    /// naming it (srun passes the environment on to every task).
    pub fn srun_with_secret<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<Command> {
        static JOBS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let keys = self.dir().join("keys");
        std::fs::create_dir_all(&keys).with_context(|| format!("creating {}", keys.display()))?;
        std::fs::set_permissions(&keys, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let n = JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = keys.join(format!("job-{}-{n}.key", std::process::id()));
        let _ = std::fs::remove_file(&key);
        let mut cmd = self.client("sh");
        cmd.args(["-c", "umask 077 && head -c 16 /dev/urandom > \"$0\" && MCD_KEY_FILE=\"$0\" exec srun \"$@\""]).arg(&key).args(args);
        Ok(cmd)
    }

    /// Runs `cmd` (from [`Slurm::client`]) to the end or `timeout`, collecting its output.
    pub fn output(&self, cmd: Command, timeout: Duration) -> Result<NodeOutcome> {
        let child = crate::cluster::Collected::spawn(cmd).context("starting a Slurm client")?;
        Ok(child.finish(0, Instant::now() + timeout))
    }

    /// Node states as `sinfo` reports them, one per node: (hostname, state).
    pub fn node_states(&self) -> Result<Vec<(String, String)>> {
        let out = self.client("sinfo").args(["-h", "-N", "-o", "%N %T"]).stdin(Stdio::null()).output()?;
        ensure!(out.status.success(), "sinfo failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(n, s)| (n.to_string(), s.trim().to_string())))
            .collect())
    }

    /// Waits until every node is idle, or fails with the states and the end of the logs.
    pub fn wait_idle(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = Err(anyhow::anyhow!("not asked yet"));
        while Instant::now() < deadline {
            last = self.node_states();
            if let Ok(states) = &last {
                if states.len() == self.cluster.nodes() && states.iter().all(|(_, s)| s == "idle") {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let tail = |file: &str| {
            let text = std::fs::read_to_string(self.dir.join("log").join(file)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(5)..].join("\n")
        };
        bail!(
            "Slurm on cluster `{}` did not come up within {timeout:?}: sinfo says {:?}\nctld.log:\n{}\nnode0.log:\n{}",
            self.cluster.spec().name,
            last.map_err(|e| e.to_string()),
            tail("ctld.log"),
            tail("node0.log")
        )
    }
}
