//! Open MPI's and MPICH's `MPI_Barrier` measured by the paper's method:
//! `mpi/barrier_bench.c` (the same loop and statistics as
//! [`crate::barrierbench`]) under `mpirun` across a virtual cluster.

use anyhow::{bail, Context, Result};
use mcd_tools::cbuild::{self, Mpi};
use mcd_tools::mpi::{MpiRun, MPIRUN_TIMEOUT};
use mcd_vcluster::Cluster;
use serde::Deserialize;

use crate::barrierbench::{BarrierBench, BarrierMeasurement, Method};

/// The communicator `mpi/barrier_bench.c` runs its barriers on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Comm {
    /// `MPI_COMM_WORLD`.
    #[default]
    World,
    /// A duplicate of `MPI_COMM_WORLD` (`MPI_Comm_dup`).
    Dup,
    /// The world's two halves by parity (`MPI_Comm_split`), at the same time.
    Split,
}

impl Comm {
    /// Its `--comm` argument.
    pub fn arg(self) -> &'static str {
        match self {
            Comm::World => "world",
            Comm::Dup => "dup",
            Comm::Split => "split",
        }
    }
}

/// Runs `mpi/barrier_bench.c` (the same loop and statistics as
/// [`crate::barrierbench`]) on every node of `cluster` under `mpirun`, and
/// names the result `label`.
pub fn measure_barrier(cluster: &Cluster, run: &MpiRun, bench: BarrierBench, label: &str) -> Result<BarrierMeasurement> {
    measure_barrier_on(cluster, run, bench, Comm::World, label)
}

/// As [`measure_barrier`], with the barriers on `comm`.
pub fn measure_barrier_on(cluster: &Cluster, run: &MpiRun, bench: BarrierBench, comm: Comm, label: &str) -> Result<BarrierMeasurement> {
    let program = cbuild::build_program(run.mpi, "barrier_bench")?;
    let method = match bench.method {
        Method::Paper => "paper",
        Method::Osu => "osu",
    };
    let args: Vec<String> = vec![
        "--method".into(),
        method.into(),
        "--iterations".into(),
        bench.iterations.to_string(),
        "--warmup".into(),
        bench.warmup.to_string(),
        "--dummy-us".into(),
        format!("{}", bench.dummy.as_secs_f64() * 1e6),
        "--comm".into(),
        comm.arg().into(),
    ];
    let out = run.output(cluster, &program.display().to_string(), &args, MPIRUN_TIMEOUT)?;
    let printed = out.stdout.lines().any(|l| l.starts_with('{'));
    if out.timed_out && printed && run.mpi == Mpi::Mpich {
        eprintln!("  ({label}: the results are printed, but MPICH's MPI_Finalize hung and was killed; see mcd_tools::mpi)");
    } else if !out.success() {
        bail!("mpirun barrier_bench ({label}) failed ({}):\n{}", out.status(), out.stderr);
    }
    let stdout = &out.stdout;
    let line = stdout.lines().find(|l| l.starts_with('{')).with_context(|| format!("barrier_bench printed no result: {stdout}"))?;
    let r: BenchLine = serde_json::from_str(line).with_context(|| format!("parsing `{line}`"))?;
    Ok(BarrierMeasurement {
        algorithm: label.to_string(),
        method: bench.method,
        rails: 1,
        nodes: r.ranks,
        iterations: r.iterations,
        min_us: r.min_us,
        mean_us: r.mean_us,
        max_us: r.max_us,
        p50_us: r.p50_us,
        p99_us: r.p99_us,
        p999_us: r.p999_us,
        recoveries: 0,
        kinds: Default::default(),
    })
}

#[derive(Deserialize)]
struct BenchLine {
    ranks: usize,
    iterations: usize,
    min_us: f64,
    mean_us: f64,
    max_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}
