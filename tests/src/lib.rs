//! Helpers for mcd's integration tests: every test builds its own virtual
//! cluster (named after the test, so tests run in parallel) behind a guard
//! that takes it down even when the test fails.
//!
//! These tests need root (network namespaces, raw sockets). Without it they
//! fail, saying so; they never skip.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod attacker;

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcd::{Endpoint, EndpointConfig, Received};
use mcd_vcluster::{Cluster, ClusterGuard, ClusterSpec};

/// Brings up the cluster `spec` behind a guard; panics with the reason
/// (not root, `ip` or `nft` missing) when it cannot. `MCD_TEST_CLUSTER_PREFIX`,
/// if set, is put before the cluster's name ([`mcd_vcluster::prefixed_name`]).
pub fn cluster(mut spec: ClusterSpec) -> ClusterGuard {
    spec.name = mcd_vcluster::prefixed_name(&spec.name);
    match Cluster::up_guarded(spec) {
        Ok(guard) => guard,
        Err(e) => panic!("this test needs a virtual cluster and could not build one: {e:#}"),
    }
}

/// Opens `config` as an endpoint of node `node` (inside its namespace).
pub fn open_on(cluster: &Cluster, node: usize, config: EndpointConfig) -> mcd::Result<Endpoint> {
    let _netns = cluster.enter(node).expect("enter node namespace");
    Endpoint::open(config)
}

/// Opens one endpoint per node with the cluster's default configuration and
/// blocking waits (tests run many threads on few cores).
pub fn open_all(cluster: &Cluster) -> Vec<Endpoint> {
    (0..cluster.nodes())
        .map(|n| {
            let mut config = cluster.endpoint_config();
            config.wait = mcd::WaitPolicy::Block;
            open_on(cluster, n, config).unwrap_or_else(|e| panic!("open endpoint on node {n}: {e}"))
        })
        .collect()
}

/// Receives until nothing has arrived for `quiet`: every message with its payload.
pub fn drain(ep: &mut Endpoint, quiet: Duration) -> Vec<(Received, Vec<u8>)> {
    let mut buf = vec![0u8; 9000];
    let mut out = Vec::new();
    while let Some(msg) = ep.recv(&mut buf, Some(quiet)).expect("recv") {
        out.push((msg, buf[..msg.len].to_vec()));
    }
    out
}

pub use barriers::check::{run_barriers, run_barriers_with, BarrierRun};

/// Asserts that all `count` barriers of `run` completed on every node and that
/// none let a node leave before every node had entered.
pub fn assert_safe(run: &BarrierRun, count: usize, what: &str) {
    if let Err(e) = run.verify(count) {
        panic!("{what}: {e}");
    }
}

/// Starts `argv` on each of `nodes` of `cluster` at once, each with the node's
/// environment ([`Cluster::node_env`]) but without `MCD_NODE_FILE` (so the
/// bootstrap discovers the nodes), plus `env(i)` for the i-th process (a node
/// may appear more than once: ranks sharing a host); collects their outcomes,
/// killing what still runs after `timeout`.
pub fn run_discovering(
    cluster: &Cluster,
    nodes: &[usize],
    argv: &[&str],
    env: impl Fn(usize) -> Vec<(String, String)>,
    timeout: Duration,
) -> Vec<mcd_vcluster::NodeOutcome> {
    let children: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, &node)| {
            let mut cmd = cluster.command(node, argv[0]);
            cmd.args(&argv[1..]).env_remove("MCD_NODE_FILE").envs(env(i));
            (node, mcd_vcluster::Collected::spawn(cmd).unwrap_or_else(|e| panic!("starting {} on node {node}: {e}", argv[0])))
        })
        .collect();
    let deadline = std::time::Instant::now() + timeout;
    children.into_iter().map(|(node, child)| child.finish(node, deadline)).collect()
}

/// Starts `peer discover 3` (the test peer's bootstrap alone) as rank
/// `node` of a 2-rank job named `job` on node `node` of `cluster`, with the
/// cluster's key file and no node file, giving up after `timeout_s`
/// seconds: the process the attacks on the bootstrap watch and replay to.
pub fn discover_one(cluster: &Cluster, peer: &str, node: usize, job: &str, timeout_s: &str) -> mcd_vcluster::Collected {
    let mut cmd = cluster.command(node, peer);
    cmd.args(["discover", "3"]).env_remove("MCD_NODE_FILE").envs([
        ("MCD_JOB", job),
        ("MCD_SIZE", "2"),
        ("MCD_BOOTSTRAP_TIMEOUT", timeout_s),
        ("MCD_WAIT", "block"),
    ]);
    mcd_vcluster::Collected::spawn(cmd).expect("starting mcd-test-peer discover")
}

/// Compiles the C program `source` against the C ABI's library in
/// `lib_dir` (from [`mcd_tools::cbuild::build_capi`]) into `out`; panics,
/// saying what is missing, when it cannot.
pub fn compile_with_capi(lib_dir: &Path, source: &Path, out: &Path) -> PathBuf {
    let status = std::process::Command::new("cc")
        .args(["-Wall", "-Werror", "-O2", "-I"])
        .arg(mcd_tools::cbuild::capi_include().unwrap())
        .arg("-o")
        .arg(out)
        .arg(source)
        .arg(format!("-L{}", lib_dir.display()))
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lmcd_barrier")
        .status()
        .expect("this test needs a C compiler `cc` (apt-get install gcc, or sudo ./run deps)");
    assert!(status.success(), "compiling {} failed", source.display());
    out.to_path_buf()
}

/// Compiles capi/examples/`example`.c into `lib_dir`/`out` (see
/// [`compile_with_capi`]).
pub fn compile_c(lib_dir: &Path, example: &str, out: &str) -> PathBuf {
    let source = PathBuf::from(format!("{}/../capi/examples/{example}.c", env!("CARGO_MANIFEST_DIR")));
    compile_with_capi(lib_dir, &source, &lib_dir.join(out))
}

/// Each rank's `MCD_MPI_REPORT` line (from the MPI_Barrier interposer) in
/// `out`'s standard error, in rank order; panics naming a rank without one.
pub fn interposer_reports(out: &mcd_vcluster::NodeOutcome, ranks: usize) -> Vec<String> {
    (0..ranks)
        .map(|rank| {
            out.stderr
                .lines()
                .find(|l| l.starts_with(&format!("mcd-mpi: rank {rank}: ")) && l.contains("MPI_Barrier via"))
                .unwrap_or_else(|| panic!("no report from rank {rank}:\n{}\n{}", out.stdout, out.stderr))
                .to_string()
        })
        .collect()
}

/// Each rank's collectives line of the interposer's `MCD_MPI_REPORT`
/// (`mcd-mpi: rank R: collectives: ...`) in `out`'s standard error, in rank
/// order, as (MPI_Allreduce, MPI_Reduce, MPI_Bcast) × (via mcd, via PMPI);
/// panics naming a rank without one.
pub fn collective_reports(out: &mcd_vcluster::NodeOutcome, ranks: usize) -> Vec<[u64; 6]> {
    report_numbers(out, ranks, "collectives")
}

/// The `N` numbers of each rank's `mcd-mpi: rank R: WHAT: ...` line of the
/// interposer's `MCD_MPI_REPORT` in `out`'s standard error, in rank order;
/// panics naming a rank without one, or whose line has not `N` numbers.
pub fn report_numbers<const N: usize>(out: &mcd_vcluster::NodeOutcome, ranks: usize, what: &str) -> Vec<[u64; N]> {
    (0..ranks)
        .map(|rank| {
            let prefix = format!("mcd-mpi: rank {rank}: {what}: ");
            let line = out
                .stderr
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no {what} report from rank {rank}:\n{}", out.stderr));
            let numbers: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            numbers.try_into().unwrap_or_else(|_| panic!("rank {rank}: {line}"))
        })
        .collect()
}

/// The count of an earlier run's messages (`messages_foreign`) in a line of
/// the C example's report (`... other runs: F foreign, ...`); panics
/// naming the line without one.
pub fn other_runs_foreign(line: &str) -> u64 {
    line.split("other runs: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no foreign count in {line:?}"))
}

/// The Python the mpi4py tests run (Debian's, whose `python3-mpi4py` is
/// built against Open MPI).
pub const PYTHON: &str = "/usr/bin/python3";

/// Where `./run deps` installs mpi4py built against MPICH (`pip install
/// --target` from PyPI's source with `MPICC=mpicc.mpich`, version
/// [`MPI4PY_MPICH_VERSION`]; `./run`'s `mpi4py_mpich` must say the same):
/// Debian's mpi4py is linked to Open MPI's library and cannot run under
/// MPICH's Hydra, so an MPICH run puts this first on `PYTHONPATH`.
pub const MPI4PY_MPICH_DIR: &str = "/opt/mcd/mpi4py-3.1.4-mpich";

/// The mpi4py version in [`MPI4PY_MPICH_DIR`] (Debian 12's own, so both
/// MPIs' runs take the same mpi4py).
pub const MPI4PY_MPICH_VERSION: &str = "3.1.4";

/// The environment under which [`PYTHON`] imports an mpi4py linked to
/// `mpi`'s library (for every rank of a run under `mpi`): none for Open
/// MPI (Debian's `python3-mpi4py`), `PYTHONPATH` = [`MPI4PY_MPICH_DIR`]
/// for MPICH. Panics, saying how to install it, when that mpi4py is
/// missing or is linked to another MPI (read from its extension module's
/// libraries, `ldd`).
pub fn mpi4py_env(mpi: mcd_tools::cbuild::Mpi) -> Vec<(String, String)> {
    use mcd_tools::cbuild::Mpi;
    let (env, library, install) = match mpi {
        Mpi::OpenMpi => (vec![], "libmpi.so.40", "apt-get install python3-mpi4py (or sudo ./run deps)".to_string()),
        Mpi::Mpich => (
            vec![("PYTHONPATH".to_string(), MPI4PY_MPICH_DIR.to_string())],
            "libmpich.so.12",
            format!(
                "sudo ./run deps (it runs MPICC=mpicc.mpich {PYTHON} -m pip install --no-cache-dir --no-build-isolation --no-binary=mpi4py --target {MPI4PY_MPICH_DIR} mpi4py=={MPI4PY_MPICH_VERSION})"
            ),
        ),
    };
    // mpi4py.MPI's file, found without importing it (importing initializes MPI).
    let find = "import importlib.util, mpi4py; print(mpi4py.__version__); print(importlib.util.find_spec('mpi4py.MPI').origin)";
    let out = std::process::Command::new(PYTHON)
        .args(["-c", find])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap_or_else(|e| panic!("the mpi4py tests need {PYTHON} ({e}): apt-get install python3"));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (version, module) = (lines.next(), lines.next());
    let (Some(version), Some(module)) = (version, module) else {
        panic!("this test needs mpi4py built for {mpi} for {PYTHON}: {install}\n{}", String::from_utf8_lossy(&out.stderr));
    };
    if mpi == Mpi::Mpich {
        assert!(
            module.starts_with(MPI4PY_MPICH_DIR) && version == MPI4PY_MPICH_VERSION,
            "this test needs mpi4py {MPI4PY_MPICH_VERSION} built for MPICH in {MPI4PY_MPICH_DIR}, found {version} at {module}: {install}"
        );
    }
    let ldd = std::process::Command::new("ldd").arg(module).output().unwrap_or_else(|e| panic!("ldd {module}: {e}"));
    let libraries = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        libraries.contains(library),
        "{module} is not linked to {mpi}'s {library}:\n{libraries}\nthis test needs mpi4py built for {mpi}: {install}"
    );
    env
}
