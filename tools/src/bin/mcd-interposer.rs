//! `mcd-interposer`: builds the `MPI_Barrier` interposer for an MPI and
//! prints where the library went (`./run interposer openmpi|mpich`).

use anyhow::Result;
use clap::{Parser, ValueEnum};
use mcd_tools::cbuild::{self, Mpi};

/// Builds mcd's `MPI_Barrier` interposer (`mpi/mcd_mpi_barrier.c` with the
/// C ABI inside) for one MPI, and prints the library's path on standard
/// output. Preload it into that MPI's programs: `mpirun -x
/// LD_PRELOAD=PATH ...` (Open MPI) or `mpiexec -genv LD_PRELOAD PATH ...`
/// (MPICH). No root needed; it needs that MPI's compiler wrapper.
#[derive(Parser)]
#[command(name = "mcd-interposer", version)]
struct Cli {
    /// The MPI the interposer is for (it must be preloaded into that one).
    #[arg(value_enum)]
    mpi: Which,
    /// Build the C ABI without optimisation (never for timing).
    #[arg(long)]
    debug: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Which {
    /// Open MPI (mpicc.openmpi).
    Openmpi,
    /// MPICH (mpicc.mpich).
    Mpich,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let mpi = match cli.mpi {
        Which::Openmpi => Mpi::OpenMpi,
        Which::Mpich => Mpi::Mpich,
    };
    let library = cbuild::build_interposer(mpi, !cli.debug)?;
    println!("{}", library.display());
    Ok(())
}
