//! Building the C pieces the tests and benchmarks run: the C ABI library
//! (`cargo build -p mcd-capi`), the `MPI_Barrier` interposer and the MPI test
//! programs of `mpi/`, each against a chosen MPI ([`Mpi`]).
//!
//! Sources are found in the mcd checkout this crate was built from, or in
//! `MCD_SOURCE_DIR` if set (for binaries moved elsewhere); outputs go to
//! cargo's target directory for that checkout ([`target_dir`]: `target/`,
//! or wherever `CARGO_TARGET_DIR` or `build.target-dir` puts it):
//! `TARGET/mpi/<mpi>/<profile>/libmcd_mpi_barrier_<mpi>.so` and
//! `TARGET/mpi/<mpi>/<program>`. Each MPI's builds are named after it, so
//! that a library built for one MPI is never preloaded into another.
//! `./run interposer openmpi|mpich` (the `mcd-interposer` command) builds
//! the interposer and prints where it went.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, ensure, Context, Result};

/// An MPI implementation installed beside the others, each used through its
/// own compiler wrapper (Debian installs both side by side; `mpicc` itself
/// points at one of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mpi {
    /// Open MPI (`mpicc.openmpi`, `mpirun.openmpi`).
    #[default]
    OpenMpi,
    /// MPICH (`mpicc.mpich`, Hydra's `mpiexec.hydra`).
    Mpich,
}

impl Mpi {
    /// Both, in the order the tests and benchmarks run them.
    pub const ALL: [Mpi; 2] = [Mpi::OpenMpi, Mpi::Mpich];

    /// Its short name, as in file names: `openmpi`, `mpich`.
    pub fn name(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi",
            Mpi::Mpich => "mpich",
        }
    }

    /// Its name for people: `Open MPI`, `MPICH`.
    pub fn label(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "Open MPI",
            Mpi::Mpich => "MPICH",
        }
    }

    /// Its C compiler wrapper.
    pub fn compiler(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "mpicc.openmpi",
            Mpi::Mpich => "mpicc.mpich",
        }
    }

    /// The Debian packages that provide it.
    pub fn packages(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi-bin libopenmpi-dev",
            Mpi::Mpich => "mpich libmpich-dev",
        }
    }
}

impl std::fmt::Display for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// The mcd checkout: `MCD_SOURCE_DIR`, else the one this crate was built from.
pub fn source_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("MCD_SOURCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    ensure!(
        dir.join("mpi").is_dir() && dir.join("capi").is_dir(),
        "{} is not an mcd checkout (no mpi/ and capi/): set MCD_SOURCE_DIR to one",
        dir.display()
    );
    Ok(dir)
}

/// The cargo that builds: the one running us (`CARGO`), else `cargo`.
fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Cargo's target directory for the mcd checkout, as cargo itself resolves
/// it (`cargo metadata`: `CARGO_TARGET_DIR`, `build.target-dir`, else the
/// checkout's `target/`). Asked once per process.
pub fn target_dir() -> Result<PathBuf> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir.clone());
    }
    let dir = metadata_target_dir(Command::new(cargo()))?;
    Ok(DIR.get_or_init(|| dir).clone())
}

/// The target directory `cargo metadata` reports, run as `cargo` (a cargo
/// command, with whatever environment the caller gave it) in the checkout.
fn metadata_target_dir(mut cargo: Command) -> Result<PathBuf> {
    let out =
        cargo.args(["metadata", "-q", "--format-version", "1", "--no-deps"]).current_dir(source_dir()?).output().context("running cargo metadata")?;
    ensure!(out.status.success(), "cargo metadata failed:\n{}", String::from_utf8_lossy(&out.stderr));
    #[derive(serde::Deserialize)]
    struct Metadata {
        target_directory: PathBuf,
    }
    let metadata: Metadata = serde_json::from_slice(&out.stdout).context("reading cargo metadata's target_directory")?;
    Ok(metadata.target_directory)
}

/// The C ABI's header directory (`capi/include`).
pub fn capi_include() -> Result<PathBuf> {
    Ok(source_dir()?.join("capi/include"))
}

/// Builds the C ABI library (release or debug) and returns the directory
/// holding `libmcd_barrier.{so,a}`.
pub fn build_capi(release: bool) -> Result<PathBuf> {
    let mut cmd = Command::new(cargo());
    cmd.args(["build", "-q", "-p", "mcd-capi"]).current_dir(source_dir()?);
    if release {
        cmd.arg("--release");
    }
    let out = cmd.output().context("running cargo build -p mcd-capi")?;
    if !out.status.success() {
        bail!("cargo build -p mcd-capi failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(target_dir()?.join(if release { "release" } else { "debug" }))
}

/// Builds the `MPI_Barrier` interposer for `mpi` (`mpi/mcd_mpi_barrier.c`
/// with the static C ABI library of that profile inside) and returns
/// `TARGET/mpi/<mpi>/<profile>/libmcd_mpi_barrier_<mpi>.so` ([`target_dir`]).
pub fn build_interposer(mpi: Mpi, release: bool) -> Result<PathBuf> {
    let lib = build_capi(release)?.join("libmcd_barrier.a");
    let include = format!("-I{}", capi_include()?.display());
    let lib = lib.display().to_string();
    // One output per profile: a debug-built interposer must never be timed.
    let dir = build_dir(mpi)?.join(if release { "release" } else { "debug" });
    let output = dir.join(format!("libmcd_mpi_barrier_{}.so", mpi.name()));
    compile(mpi, "mcd_mpi_barrier", &output, true, &[&include, &lib, "-lpthread", "-ldl", "-lm"])
}

/// Builds the MPI program `mpi/<name>.c` for `mpi` and returns
/// `TARGET/mpi/<mpi>/<name>` ([`target_dir`]).
pub fn build_program(mpi: Mpi, name: &str) -> Result<PathBuf> {
    let output = build_dir(mpi)?.join(name);
    compile(mpi, name, &output, false, &[])
}

fn build_dir(mpi: Mpi) -> Result<PathBuf> {
    Ok(target_dir()?.join("mpi").join(mpi.name()))
}

/// Compiles `mpi/<name>.c` with `mpi`'s wrapper into `output` (a shared
/// library if `shared`), adding `extra` arguments; skips the work when the
/// output is newer than its inputs.
fn compile(mpi: Mpi, name: &str, output: &Path, shared: bool, extra: &[&str]) -> Result<PathBuf> {
    let source = source_dir()?.join("mpi").join(format!("{name}.c"));
    if let Some(dir) = output.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let inputs_newest =
        std::iter::once(source.clone()).chain(extra.iter().map(PathBuf::from).filter(|p| p.exists())).filter_map(|p| modified(&p)).max();
    if let (Some(out), Some(inp)) = (modified(output), inputs_newest) {
        if out > inp {
            return Ok(output.to_path_buf());
        }
    }
    let mut cmd = Command::new(mpi.compiler());
    cmd.args(["-O2", "-Wall", "-o"]).arg(output);
    if shared {
        cmd.args(["-shared", "-fPIC"]);
    }
    cmd.arg(&source).args(extra);
    let out = cmd.output().with_context(|| format!("running {} (apt-get install {}, or `./run deps`)", mpi.compiler(), mpi.packages()))?;
    if !out.status.success() {
        bail!("{} {} failed:\n{}", mpi.compiler(), source.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(output.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mpi_has_its_own_wrapper_and_file_name() {
        assert_ne!(Mpi::OpenMpi.compiler(), Mpi::Mpich.compiler());
        assert_ne!(Mpi::OpenMpi.name(), Mpi::Mpich.name());
        assert!(source_dir().unwrap().join("mpi/mcd_mpi_barrier.c").exists());
    }

    #[test]
    fn outputs_go_where_cargo_targets() {
        let mut cargo = Command::new(super::cargo());
        cargo.env("CARGO_TARGET_DIR", "/tmp/mcd-cbuild-elsewhere");
        assert_eq!(metadata_target_dir(cargo).unwrap(), Path::new("/tmp/mcd-cbuild-elsewhere"));
        let mut cargo = Command::new(super::cargo());
        cargo.env_remove("CARGO_TARGET_DIR");
        assert_eq!(metadata_target_dir(cargo).unwrap(), source_dir().unwrap().canonicalize().unwrap().join("target"));
    }
}
