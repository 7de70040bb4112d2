//! The C header is generated: `include/mcd_barrier.h` must be exactly what
//! cbindgen makes of `src/lib.rs` with `cbindgen.toml`, and a C compiler must
//! see every `#[repr(C)]` struct with Rust's size, alignment, offsets and
//! field sizes.
//!
//! Regenerate the header with `MCD_BLESS=1 cargo test -p mcd-capi header`.

use std::collections::BTreeSet;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use mcd_barrier::{mcd_params, mcd_stats};

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn header_path() -> PathBuf {
    crate_dir().join("include/mcd_barrier.h")
}

/// What cbindgen makes of src/lib.rs with cbindgen.toml.
fn generated_header() -> Vec<u8> {
    let config = cbindgen::Config::from_file(crate_dir().join("cbindgen.toml")).expect("capi/cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir().join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not generate the header from capi/src/lib.rs");
    let mut out = Vec::new();
    bindings.write(&mut out);
    out
}

#[test]
fn header_is_generated_from_the_rust_source() {
    let generated = generated_header();
    let path = header_path();
    if std::env::var_os("MCD_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        eprintln!("MCD_BLESS=1: wrote {}", path.display());
        return;
    }
    let checked_in = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    if checked_in != generated {
        let (old, new) = (String::from_utf8_lossy(&checked_in), String::from_utf8_lossy(&generated));
        let first = old.lines().zip(new.lines()).position(|(a, b)| a != b).unwrap_or(old.lines().count().min(new.lines().count()));
        panic!(
            "capi/include/mcd_barrier.h is stale: it is not what cbindgen makes of capi/src/lib.rs \
             (with capi/cbindgen.toml).\nFirst difference at line {}:\n  checked in: {:?}\n  generated:  {:?}\n\
             Regenerate it with\n    MCD_BLESS=1 cargo test -p mcd-capi header\nand commit the result \
             (never edit the header by hand: change the Rust doc comments or cbindgen.toml).",
            first + 1,
            old.lines().nth(first).unwrap_or("<end of file>"),
            new.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

/// A `#[repr(C)]` struct as Rust lays it out.
struct Layout {
    name: &'static str,
    size: usize,
    align: usize,
    /// Name, offset, size.
    fields: Vec<(&'static str, usize, usize)>,
}

/// The size of the field `field` picks.
fn field_size<T, F>(_field: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! layouts {
    ($($ty:ident { $($field:ident),* $(,)? })*) => {
        vec![$(Layout {
            name: stringify!($ty),
            size: size_of::<$ty>(),
            align: align_of::<$ty>(),
            fields: vec![$((stringify!($field), offset_of!($ty, $field), field_size(|s: &$ty| &s.$field))),*],
        }),*]
    };
}

/// Every struct with a body in the header, and its fields' names.
fn header_structs(header: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut structs = Vec::new();
    let mut current: Option<(String, BTreeSet<String>)> = None;
    for line in header.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("typedef struct ") {
            if let Some(name) = rest.strip_suffix(" {") {
                current = Some((name.to_string(), BTreeSet::new()));
            }
        } else if line.starts_with('}') {
            structs.extend(current.take());
        } else if let Some((_, fields)) = current.as_mut() {
            if let Some(decl) = line.strip_suffix(';') {
                // An array's name comes before its length: `uint8_t secret[16]`.
                let decl = decl.split('[').next().unwrap_or_default().trim_end();
                let name = decl.rsplit(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or_default();
                fields.insert(name.to_string());
            }
        }
    }
    structs
}

#[test]
fn header_struct_layouts_match_rust() {
    let rust = layouts! {
        mcd_params { rank, size, interfaces, node_file, job, algorithm, port, local_procs, cpus, auth, secret }
        mcd_stats { barriers, messages_sent, frames_received, resends, answers, frames_dropped, frames_bad_tag, frames_replayed, frames_auth_mismatch, answers_suppressed, messages_foreign, joins_superseded, messages_overflow, sessions_forgotten }
    };
    // Every struct the header defines is checked, each field of it.
    let header = std::fs::read_to_string(header_path()).expect("capi/include/mcd_barrier.h");
    let in_header = header_structs(&header);
    let in_header_names: BTreeSet<&str> = in_header.iter().map(|(n, _)| n.as_str()).collect();
    let checked: BTreeSet<&str> = rust.iter().map(|l| l.name).collect();
    assert_eq!(
        in_header_names, checked,
        "the header's structs and the ones this test checks differ: add the new #[repr(C)] struct to `layouts!` here"
    );
    for (name, fields) in &in_header {
        let layout = rust.iter().find(|l| l.name == name).unwrap();
        let listed: BTreeSet<String> = layout.fields.iter().map(|(f, _, _)| f.to_string()).collect();
        assert_eq!(fields, &listed, "{name}: the header's fields and the ones this test checks differ");
    }

    let mut c = String::from("#include <stddef.h>\n#include \"mcd_barrier.h\"\n\n");
    for l in &rust {
        let n = l.name;
        c += &format!("_Static_assert(sizeof({n}) == {s}, \"sizeof({n}) is not Rust's {s}\");\n", s = l.size);
        c += &format!("_Static_assert(_Alignof({n}) == {a}, \"_Alignof({n}) is not Rust's {a}\");\n", a = l.align);
        for (f, o, s) in &l.fields {
            c += &format!("_Static_assert(offsetof({n}, {f}) == {o}, \"offsetof({n}, {f}) is not Rust's {o}\");\n");
            c += &format!("_Static_assert(sizeof((({n} *)0)->{f}) == {s}, \"sizeof({n}.{f}) is not Rust's {s}\");\n");
        }
    }
    c += "\nint main(void) { return 0; }\n";

    let dir = std::env::temp_dir().join(format!("mcd-capi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("layout.c");
    std::fs::write(&source, &c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-I"])
        .arg(crate_dir().join("include"))
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}` ({e}): this test needs one; install gcc (`./run deps` does)"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "the C compiler disagrees with Rust on the header's struct layouts (or rejects the header):\n{}\n--- layout.c:\n{c}",
        String::from_utf8_lossy(&out.stderr)
    );
}
