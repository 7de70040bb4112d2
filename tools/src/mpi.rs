//! Running MPI programs across a virtual cluster, one rank per node
//! namespace (or several, [`MpiRun::ranks_per_node`]: a namespace is then a
//! host of several ranks), so that MPI's own traffic (out-of-band and TCP)
//! crosses the virtual links exactly as mcd's frames do: under Open MPI's `mpirun` or
//! MPICH's Hydra (`mpiexec.hydra`), both through the same rsh agent.
//!
//! MPICH (Debian's `mpich`, ch4:ucx): Hydra with `-launcher rsh
//! -launcher-exec AGENT`, a host file of `NAMESPACE:1` lines, `-iface` the
//! rail-0 bridge (where the proxies connect back), `-ppn 1`. Debian's MPICH
//! is ch4:ucx, and UCX, left alone, finds the other namespaces' ranks on the
//! same machine and uses shared memory; [`MPICH_OVER_TCP`] keeps its traffic
//! on the cluster's links, as Open MPI's is, for comparisons. (Over UCX's
//! TCP, MPICH's `MPI_Finalize` here hangs now and then after the program's
//! work is done, which `mcd_bench::mpibench` tolerates once the results are
//! printed; `MPIR_CVAR_NOLOCAL=1` on top hangs from 4 ranks up.)
//!
//! The route (Open MPI 4.1, Debian's `openmpi-bin`):
//! - the rail-0 bridge gets [`HOST_ADDRESS`] in the root namespace, so the
//!   daemons in the namespaces reach `mpirun`'s out-of-band TCP port;
//! - a hostfile names the namespaces, one slot each;
//! - an rsh agent script runs each daemon with `ip netns exec NS unshare --uts`
//!   and sets the hostname to the namespace's name (daemons sharing a hostname
//!   share a session directory and PMIx store, and fail from 8 ranks up);
//! - `--bind-to none` (every daemon would bind its rank to core 0), a private
//!   `orte_tmpdir_base`, TCP and self BTLs on the cluster's subnet only.
//!
//! Only one cluster at a time can host `mpirun`s: the bridge address is the
//! same for all clusters, and preparing a cluster takes it from any other.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cbuild::Mpi;
use mcd_vcluster::{Cluster, Collected, NodeOutcome};

/// The root namespace's address on the rail-0 bridge (the cluster's nodes are
/// 10.77.x.y/16 on rail 0).
pub const HOST_ADDRESS: &str = "10.77.255.254/16";
/// The subnet MPI is told to use.
pub const SUBNET: &str = "10.77.0.0/16";

/// How an MPI program is run on the cluster.
#[derive(Clone, Debug, Default)]
pub struct MpiRun {
    /// Which MPI launches it (the program must be built for the same one).
    pub mpi: Mpi,
    /// Ranks (at most `ranks_per_node` per node; default: all of them).
    pub ranks: Option<usize>,
    /// Ranks on each node (a host: its namespace), filled node by node
    /// (ranks 0..k on node 0, ...); 0 counts as 1.
    pub ranks_per_node: usize,
    /// Open MPI's `mpi_yield_when_idle` (sched_yield while polling; its best
    /// mode when ranks outnumber cores).
    pub yield_when_idle: bool,
    /// Environment variables exported to every rank (`-x NAME=VALUE`), after
    /// the ones every rank gets: `MCD_IFACES` (the cluster's interfaces),
    /// `MCD_LOCAL_PROCS` (the ranks: they all share this machine's cores),
    /// `MCD_JOB` (a key of the cluster's own) and `MCD_KEY_FILE` (the
    /// cluster's secret, [`Cluster::key_file`]).
    pub env: Vec<(String, String)>,
    /// Extra `--mca NAME VALUE` pairs (Open MPI only).
    pub mca: Vec<(String, String)>,
    /// Whether the launcher writes each rank's standard output and error
    /// to files of their own (Open MPI's `--output-filename`, Hydra's
    /// `-outfile-pattern` and `-errfile-pattern`), which [`MpiRun::output`]
    /// reads back in rank order: forwarded to the launcher's own outputs,
    /// the ranks' lines come in pieces (Hydra cut a line written in one
    /// `write` in two with another rank's lines between, Open MPI a
    /// report line on standard error), so a test that reads every rank's
    /// lines needs them whole.
    pub output_per_rank: bool,
    /// A line the program prints once its work is done (on the launcher's
    /// standard output, so not with `output_per_rank`), and how long the
    /// run may take after it to end: then [`MpiRun::output`] kills it
    /// (timed out, said on its standard error). MPICH 4.0's
    /// `MPI_Finalize` over UCX 1.13's TCP transport hangs now and then
    /// after the work, one rank in UCX's progress and the others in the
    /// process manager's barrier, even in a program of 5 `MPI_Barrier`
    /// calls (UCX issue 8738: the TCP transport stops progressing its
    /// endpoints before they are flushed).
    pub ends_after: Option<(String, Duration)>,
}

impl MpiRun {
    /// The MPI's own run and the same run with the interposer (`interposer`,
    /// built for `mpi`) preloaded, set up as the benchmarks compare them:
    /// MPICH over TCP on the cluster's links ([`MPICH_OVER_TCP`]), Open MPI
    /// yielding when idle.
    pub fn own_and_interposed(mpi: Mpi, interposer: &std::path::Path) -> (MpiRun, MpiRun) {
        let mut env: Vec<(String, String)> = Vec::new();
        if mpi == Mpi::Mpich {
            env.extend(MPICH_OVER_TCP.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        }
        let own = MpiRun { mpi, yield_when_idle: mpi == Mpi::OpenMpi, env: env.clone(), ..MpiRun::default() };
        env.push(("LD_PRELOAD".into(), interposer.display().to_string()));
        let interposed = MpiRun { env, ..own.clone() };
        (own, interposed)
    }
}

/// `mpi`'s launcher.
fn launcher(mpi: Mpi) -> &'static str {
    match mpi {
        Mpi::OpenMpi => "mpirun.openmpi",
        Mpi::Mpich => "mpiexec.hydra",
    }
}

/// Checks that `mpi`'s launcher is installed, saying how to get it if not.
pub fn check_launcher(mpi: Mpi) -> Result<()> {
    match Command::new(launcher(mpi)).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => bail!("`{} --version` failed: {}", launcher(mpi), String::from_utf8_lossy(&out.stderr).trim()),
        Err(_) => bail!("`{}` not found: install {} (`apt-get install {}`, or `./run deps`)", launcher(mpi), mpi, mpi.packages()),
    }
}

impl MpiRun {
    /// Prepares `cluster` (bridge address, hostfile, agent) and returns the
    /// `mpirun` command that runs `program` with `args` on it.
    pub fn command(&self, cluster: &Cluster, program: &str, args: &[String]) -> Result<Command> {
        check_launcher(self.mpi)?;
        let per_node = self.ranks_per_node.max(1);
        let ranks = self.ranks.unwrap_or(cluster.nodes() * per_node);
        if ranks == 0 || ranks > cluster.nodes() * per_node {
            bail!("{ranks} ranks asked on a cluster of {} nodes ({per_node} rank(s) per node)", cluster.nodes());
        }
        let files = prepare(cluster, per_node)?;
        let defaults = [
            ("MCD_IFACES".to_string(), cluster.interfaces().join(",")),
            ("MCD_LOCAL_PROCS".to_string(), ranks.to_string()),
            ("MCD_JOB".to_string(), format!("vcluster-{}", cluster.spec().name)),
            // Programs that open mcd themselves read it, and so does the MPI
            // interposer (set it empty for the interposer's key exchange).
            (mcd::auth::KEY_FILE_VAR.to_string(), cluster.key_file().display().to_string()),
        ];
        if self.mpi == Mpi::Mpich {
            if !self.mca.is_empty() || self.yield_when_idle {
                bail!("--mca settings and yield_when_idle are Open MPI's: MPICH has neither");
            }
            let mut cmd = Command::new(launcher(Mpi::Mpich));
            cmd.arg("-f")
                .arg(&files.mpich_hostfile)
                .args(["-launcher", "rsh", "-launcher-exec"])
                .arg(&files.agent)
                .args(["-iface", &cluster.bridge(0), "-ppn", &per_node.to_string(), "-n"])
                .arg(ranks.to_string());
            for (name, value) in defaults.iter().chain(&self.env) {
                cmd.args(["-genv", name, value]);
            }
            cmd.arg(program).args(args);
            return Ok(cmd);
        }
        let mut cmd = Command::new(launcher(Mpi::OpenMpi));
        cmd.args(["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np"])
            .arg(ranks.to_string())
            .arg("--hostfile")
            .arg(&files.hostfile);
        // `btl` may be replaced (`self,vader,tcp`: shared memory between
        // the ranks of one node).
        let btl = self.mca.iter().find(|(k, _)| k == "btl").map_or("tcp,self".to_string(), |(_, v)| v.clone());
        let mut mca = vec![
            ("plm_rsh_agent".to_string(), files.agent.display().to_string()),
            ("btl".into(), btl),
            ("btl_tcp_if_include".into(), SUBNET.into()),
            ("oob_tcp_if_include".into(), SUBNET.into()),
            ("orte_tmpdir_base".into(), files.tmpdir.display().to_string()),
            ("mpi_yield_when_idle".into(), if self.yield_when_idle { "1" } else { "0" }.into()),
        ];
        mca.extend(self.mca.iter().filter(|(k, _)| k != "btl").cloned());
        for (name, value) in &mca {
            cmd.args(["--mca", name, value]);
        }
        for (name, value) in defaults.iter().chain(&self.env) {
            cmd.arg("-x").arg(format!("{name}={value}"));
        }
        cmd.arg(program).args(args);
        Ok(cmd)
    }
}

/// The file whose lock (`flock`, exclusive) a run holds from taking
/// [`HOST_ADDRESS`] to its end ([`MpiRun::output`]): every cluster's rail-0
/// bridge takes the same address, so two runs at once (two test binaries,
/// two checkouts) would take it from each other mid-run.
pub const BRIDGE_LOCK: &str = "/tmp/mcd-mpi.lock";

/// Takes [`BRIDGE_LOCK`], waiting for the run that holds it; held until the
/// returned file is dropped. `flock` locks belong to the open file, so
/// threads of one process wait for each other too.
fn lock_bridge_address() -> Result<std::fs::File> {
    // Another user's file opens for reading only; a lock needs no more.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(BRIDGE_LOCK)
        .or_else(|_| std::fs::File::open(BRIDGE_LOCK))
        .with_context(|| format!("opening {BRIDGE_LOCK}"))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).with_context(|| format!("locking {BRIDGE_LOCK}"))?;
    Ok(file)
}

/// How long one `mpirun` of a benchmark may take before it is killed.
pub const MPIRUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Environment for MPICH ranks that keeps MPICH's traffic on the cluster's
/// links (UCX's TCP transport on rail 0) instead of shared memory.
pub const MPICH_OVER_TCP: [(&str, &str); 2] = [("UCX_TLS", "tcp,self"), ("UCX_NET_DEVICES", "eth0")];

impl MpiRun {
    /// Runs `program` under `mpirun` on `cluster` and collects its output;
    /// kills it after `timeout`.
    ///
    /// With [`MpiRun::output_per_rank`], the outcome's `stdout` and
    /// `stderr` are the ranks' files, rank 0's first, then what the
    /// launcher itself printed; a file that cannot be read is said there.
    ///
    /// Runs one at a time on the machine ([`BRIDGE_LOCK`]): the bridge
    /// address every run takes belongs to one cluster at a time.
    pub fn output(&self, cluster: &Cluster, program: &str, args: &[String], timeout: Duration) -> Result<NodeOutcome> {
        let dir = std::env::temp_dir().join(format!("mcd-rank-output-{}-{}", cluster.spec().name, std::process::id()));
        let _one = lock_bridge_address()?;
        let mut cmd = self.command(cluster, program, args)?;
        if self.output_per_rank {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            cmd = with_output_files(cmd, self.mpi, &dir);
        }
        let child = Collected::spawn(cmd).context("starting mpirun")?;
        let mut out = child.finish_after(0, Instant::now() + timeout, self.ends_after.as_ref().map(|(m, g)| (m.as_str(), *g)));
        if self.output_per_rank {
            let ranks = self.ranks.unwrap_or(cluster.nodes() * self.ranks_per_node.max(1));
            out.stdout = rank_files(self.mpi, &dir, ranks, "stdout") + &out.stdout;
            out.stderr = rank_files(self.mpi, &dir, ranks, "stderr") + &out.stderr;
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(out)
    }
}

/// `cmd` (a launcher's, as [`MpiRun::command`] makes it) with the options
/// that write each rank's outputs to files under `dir`, put before the
/// program (the launcher's options end there).
fn with_output_files(cmd: Command, mpi: Mpi, dir: &std::path::Path) -> Command {
    let mut args: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_os_string()).collect();
    let options: Vec<std::ffi::OsString> = match mpi {
        // `:nocopy`: the files only (Open MPI 4 copies to its own outputs too).
        Mpi::OpenMpi => vec!["--output-filename".into(), format!("{}:nocopy", dir.display()).into()],
        Mpi::Mpich => {
            vec!["-outfile-pattern".into(), dir.join("rank.%r.stdout").into(), "-errfile-pattern".into(), dir.join("rank.%r.stderr").into()]
        }
    };
    // The launcher's options go first: every one of ours is before `-n`/`-np`.
    args.splice(0..0, options);
    let mut new = Command::new(cmd.get_program());
    new.args(args);
    for (name, value) in cmd.get_envs() {
        match value {
            Some(v) => new.env(name, v),
            None => new.env_remove(name),
        };
    }
    new
}

/// The ranks' `stream` ("stdout" or "stderr") files under `dir`, rank 0's
/// first, as `mpi`'s launcher names them (Open MPI 4: `DIR/1/rank.R/STREAM`;
/// ours for Hydra: `DIR/rank.R.STREAM`); a rank without one is said.
fn rank_files(mpi: Mpi, dir: &std::path::Path, ranks: usize, stream: &str) -> String {
    let mut text = String::new();
    for rank in 0..ranks {
        let file = match mpi {
            Mpi::OpenMpi => dir.join("1").join(format!("rank.{rank}")).join(stream),
            Mpi::Mpich => dir.join(format!("rank.{rank}.{stream}")),
        };
        match std::fs::read_to_string(&file) {
            Ok(t) => text.push_str(&t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => text.push_str(&format!("(rank {rank}'s {stream} file {}: {e})\n", file.display())),
        }
    }
    text
}

struct LaunchFiles {
    hostfile: PathBuf,
    mpich_hostfile: PathBuf,
    agent: PathBuf,
    tmpdir: PathBuf,
}

/// The rsh agent: skips leading options, takes the host (a namespace), and
/// runs the command there under its own UTS namespace and hostname.
const AGENT: &str = r#"#!/bin/sh
# mpirun's rsh agent for an mcd virtual cluster (written by mcd-tools).
while [ $# -gt 0 ]; do
  case "$1" in -*) shift ;; *) break ;; esac
done
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$1" && exec sh -c "$2"' sh "$host" "$*"
"#;

fn prepare(cluster: &Cluster, per_node: usize) -> Result<LaunchFiles> {
    let bridge = cluster.bridge(0);
    // The address belongs to one cluster at a time: take it from any other.
    for dev in mcd_vcluster::links_holding(HOST_ADDRESS)? {
        if dev != bridge {
            let _ = Command::new("ip").args(["addr", "del", HOST_ADDRESS, "dev", &dev]).output();
        }
    }
    let out = Command::new("ip").args(["addr", "replace", HOST_ADDRESS, "dev", &bridge]).output()?;
    if !out.status.success() {
        bail!("giving {bridge} the address {HOST_ADDRESS}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let dir = cluster.scratch_dir()?;
    let hostfile = dir.join("hostfile");
    let hosts: String = (0..cluster.nodes()).map(|n| format!("{} slots={per_node}\n", cluster.namespace(n))).collect();
    std::fs::write(&hostfile, hosts).with_context(|| format!("writing {}", hostfile.display()))?;
    let mpich_hostfile = dir.join("hostfile.mpich");
    let hosts: String = (0..cluster.nodes()).map(|n| format!("{}:{per_node}\n", cluster.namespace(n))).collect();
    std::fs::write(&mpich_hostfile, hosts).with_context(|| format!("writing {}", mpich_hostfile.display()))?;
    let agent = dir.join("rsh");
    std::fs::write(&agent, AGENT).with_context(|| format!("writing {}", agent.display()))?;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;
    let tmpdir = dir.join("ompi");
    std::fs::create_dir_all(&tmpdir)?;
    Ok(LaunchFiles { hostfile, mpich_hostfile, agent, tmpdir })
}
