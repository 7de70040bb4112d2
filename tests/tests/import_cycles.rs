//! No import cycles between modules, in any crate of the workspace: a
//! discipline CI enforces (this test runs in `./run test`; it needs no root,
//! and reads the sources as text, so it builds nothing).
//!
//! The graph: module A depends on module B when A's code names a path into
//! B: `use crate::b::X`, `super::b::f()`, or a re-export (`crate::X` where
//! the crate root has `pub use b::X` is B's). A module naming its own
//! ancestor or descendant is no edge (a parent re-exports its children, a
//! child uses its parent's items); any other dependency counts between the
//! two siblings under the modules' nearest common ancestor (`core::receive`
//! naming `model::sim::Queue` is `core` → `model`). A cycle among the
//! siblings under any module fails the test, which names each of its edges
//! with a file and line that make it. Code compiled only for tests
//! (`#[cfg(test)]` items and modules) is left out: a module's tests may use
//! a harness that uses the module.
//!
//! Each crate root counts on its own: a library, its binaries (`src/main.rs`,
//! `src/bin/`), its integration tests, examples and benches.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from its crate root (`[]` is the root).
type ModPath = Vec<String>;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Open,
    Close,
    Semi,
    Comma,
    Star,
    Other(char),
    End,
}

/// A token and its line.
#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

/// The tokens of `src` that name paths and items: comments, strings and
/// character literals are left out.
fn lex(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    // Skips a quoted literal from its opening `"` at `i`; counts lines.
    let skip_string = |mut i: usize, hashes: usize, raw: bool, line: &mut usize| -> usize {
        i += 1;
        while i < c.len() {
            match c[i] {
                '\\' if !raw => i += 1,
                '\n' => *line += 1,
                '"' if (0..hashes).all(|h| at(i + 1 + h) == '#') => return i + 1 + hashes,
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = skip_string(i, 0, false, &mut line);
        } else if ch == '\'' {
            // A character literal ('a', '\n', '\u{1F600}'), or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // Raw and byte strings (r"..", r#".."#, b"..", br".."), byte characters (b'x').
            let hashes = (i..).take_while(|&k| at(k) == '#').count();
            if matches!(word.as_str(), "r" | "br") && at(i + hashes) == '"' {
                i = skip_string(i + hashes, hashes, true, &mut line);
            } else if word == "b" && at(i) == '"' {
                i = skip_string(i, 0, false, &mut line);
            } else if word == "b" && at(i) == '\'' {
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    i += if c[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            } else if word == "r" && hashes == 1 {
                i += 1; // a raw identifier (r#type): the identifier follows
            } else {
                out.push(Token { tok: Tok::Ident(word), line });
            }
        } else {
            let tok = match ch {
                ':' if at(i + 1) == ':' => {
                    i += 1;
                    Tok::Sep
                }
                '{' => Tok::Open,
                '}' => Tok::Close,
                ';' => Tok::Semi,
                ',' => Tok::Comma,
                '*' => Tok::Star,
                other => Tok::Other(other),
            };
            out.push(Token { tok, line });
            i += 1;
        }
    }
    out.push(Token { tok: Tok::End, line });
    out
}

/// Where a path starts.
#[derive(Clone, Debug, PartialEq)]
enum Base {
    /// `crate::`, `super::` or `self::`: from the crate root.
    Absolute,
    /// A bare first segment: a child of the module it is written in, or
    /// another crate.
    Relative(ModPath),
}

/// A path as written, made absolute where it can be.
#[derive(Clone, Debug)]
struct Named {
    base: Base,
    segments: Vec<String>,
}

/// A module: its file, the items it defines, what it imports, what it names.
#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    /// Items defined here (functions, types, traits, constants, modules).
    items: BTreeSet<String>,
    /// Names brought in by `use`, and the paths they stand for.
    imports: BTreeMap<String, Named>,
    /// `use path::*`.
    globs: Vec<Named>,
    /// Every path this module names: (path, line).
    names: Vec<(Named, usize)>,
}

/// Per pair of sibling modules (from, to), a place that makes the edge.
type Edges = BTreeMap<(String, String), (PathBuf, usize)>;

/// One crate's modules.
#[derive(Debug, Default)]
struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

/// The path that `segments` (starting with `crate`, `super` or `self`, or
/// not) means in `module`.
fn path_in(module: &[String], segments: &[String]) -> Named {
    let mut segments: Vec<String> = segments.to_vec();
    if segments.last().is_some_and(|s| s == "self") {
        segments.pop();
    }
    match segments.first().map(String::as_str) {
        Some("crate") => Named { base: Base::Absolute, segments: segments[1..].to_vec() },
        Some("self") => Named { base: Base::Absolute, segments: module.iter().chain(&segments[1..]).cloned().collect() },
        Some("super") => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            let keep = module.len().saturating_sub(ups);
            Named { base: Base::Absolute, segments: module[..keep].iter().chain(&segments[ups..]).cloned().collect() }
        }
        _ => Named { base: Base::Relative(module.to_vec()), segments },
    }
}

/// One `use` tree's leaves: (path, the name it binds, whether a glob).
fn use_tree(t: &[Token], i: &mut usize, prefix: &[String], out: &mut Vec<(Vec<String>, Option<String>, bool)>) {
    let mut path = prefix.to_vec();
    loop {
        match &t[*i].tok {
            Tok::Ident(s) => {
                path.push(s.clone());
                *i += 1;
                if t[*i].tok == Tok::Sep {
                    *i += 1;
                    continue;
                }
                let mut alias = None;
                if t[*i].tok == Tok::Ident("as".into()) {
                    *i += 1;
                    if let Tok::Ident(a) = &t[*i].tok {
                        alias = Some(a.clone());
                        *i += 1;
                    }
                }
                out.push((path, alias, false));
                return;
            }
            Tok::Star => {
                *i += 1;
                out.push((path, None, true));
                return;
            }
            Tok::Open => {
                *i += 1;
                loop {
                    match t[*i].tok {
                        Tok::Close => {
                            *i += 1;
                            return;
                        }
                        Tok::End => return,
                        Tok::Comma => *i += 1,
                        _ => {
                            let before = *i;
                            use_tree(t, i, &path, out);
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
            }
            Tok::Sep => *i += 1,
            _ => return,
        }
    }
}

/// Whether `#[cfg(test)]` starts at `i`.
fn cfg_test_at(t: &[Token], i: usize) -> bool {
    let want =
        [Tok::Other('#'), Tok::Other('['), Tok::Ident("cfg".into()), Tok::Other('('), Tok::Ident("test".into()), Tok::Other(')'), Tok::Other(']')];
    t.len() >= i + want.len() && want.iter().zip(&t[i..]).all(|(w, x)| *w == x.tok)
}

/// The index after the item starting at `i`: its `;`, or the `}` closing its first `{`.
fn item_end(t: &[Token], mut i: usize) -> usize {
    while i < t.len() {
        match t[i].tok {
            Tok::Semi | Tok::End => return i + 1,
            Tok::Open => {
                let mut depth = 0;
                while i < t.len() {
                    match t[i].tok {
                        Tok::Open => depth += 1,
                        Tok::Close => {
                            depth -= 1;
                            if depth == 0 {
                                return i + 1;
                            }
                        }
                        Tok::End => return i,
                        _ => {}
                    }
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    i
}

impl Crate {
    /// The crate whose root is `root`.
    fn read(root: &Path) -> Crate {
        let mut krate = Crate::default();
        let dir = root.parent().expect("a root has a directory").to_path_buf();
        krate.read_file(root, Vec::new(), dir);
        krate
    }

    /// Reads `file`, module `path`, whose `mod x;` children are in `children`.
    fn read_file(&mut self, file: &Path, path: ModPath, children: PathBuf) {
        let src = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let t = lex(&src);
        self.modules.entry(path.clone()).or_default().file = file.to_path_buf();
        // Inline modules open here: (path, its directory, the depth its `}` returns to).
        let mut stack: Vec<(ModPath, PathBuf, usize)> = vec![(path, children, usize::MAX)];
        let (mut depth, mut i) = (0usize, 0usize);
        while t[i].tok != Tok::End {
            let (cur, dir, _) = stack.last().expect("the file's module").clone();
            if cfg_test_at(&t, i) {
                i = item_end(&t, i);
                continue;
            }
            match &t[i].tok {
                Tok::Open => depth += 1,
                Tok::Close => {
                    depth = depth.saturating_sub(1);
                    if stack.last().is_some_and(|s| s.2 == depth) {
                        stack.pop();
                    }
                }
                Tok::Ident(w) if w == "mod" => {
                    if let Tok::Ident(name) = &t[i + 1].tok {
                        let name = name.clone();
                        let child: ModPath = cur.iter().cloned().chain([name.clone()]).collect();
                        self.modules.entry(cur.clone()).or_default().items.insert(name.clone());
                        match t[i + 2].tok {
                            Tok::Open => {
                                stack.push((child, dir.join(&name), depth));
                                depth += 1;
                                i += 3;
                                continue;
                            }
                            Tok::Semi => {
                                let (flat, nested) = (dir.join(format!("{name}.rs")), dir.join(&name).join("mod.rs"));
                                let file = if flat.exists() { flat } else { nested };
                                self.read_file(&file, child, dir.join(&name));
                            }
                            _ => {}
                        }
                    }
                }
                Tok::Ident(w) if w == "use" => {
                    let line = t[i].line;
                    i += 1;
                    let mut leaves = Vec::new();
                    use_tree(&t, &mut i, &[], &mut leaves);
                    let module = self.modules.entry(cur.clone()).or_default();
                    for (segments, alias, glob) in leaves {
                        let p = path_in(&cur, &segments);
                        module.names.push((p.clone(), line));
                        if glob {
                            module.globs.push(p);
                        } else if let Some(name) = alias.or_else(|| p.segments.last().cloned()) {
                            module.imports.insert(name, p);
                        }
                    }
                    continue;
                }
                Tok::Ident(w) if matches!(w.as_str(), "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "union") => {
                    if let Tok::Ident(name) = &t[i + 1].tok {
                        self.modules.entry(cur.clone()).or_default().items.insert(name.clone());
                    }
                }
                Tok::Ident(w) if matches!(w.as_str(), "crate" | "super" | "self") && t[i + 1].tok == Tok::Sep => {
                    let line = t[i].line;
                    let mut segments = vec![w.clone()];
                    i += 1;
                    while t[i].tok == Tok::Sep {
                        match &t[i + 1].tok {
                            Tok::Ident(s) => {
                                segments.push(s.clone());
                                i += 2;
                            }
                            _ => break,
                        }
                    }
                    self.modules.entry(cur.clone()).or_default().names.push((path_in(&cur, &segments), line));
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// `path` from the crate root; `None` for another crate's.
    fn absolute(&self, path: &Named) -> Option<Vec<String>> {
        match &path.base {
            Base::Absolute => Some(path.segments.clone()),
            Base::Relative(from) => {
                let first = path.segments.first()?;
                let child: ModPath = from.iter().chain([first]).cloned().collect();
                self.modules.contains_key(&child).then(|| from.iter().chain(&path.segments).cloned().collect())
            }
        }
    }

    /// The module that defines what `path` names; `None` outside this crate.
    fn resolve(&self, path: &Named) -> Option<ModPath> {
        let mut segments = self.absolute(path)?;
        // Re-exports are followed, a few deep at the most.
        'restart: for _ in 0..16 {
            let mut cur: ModPath = Vec::new();
            for (k, seg) in segments.iter().enumerate() {
                let child: ModPath = cur.iter().chain([seg]).cloned().collect();
                if self.modules.contains_key(&child) {
                    cur = child;
                    continue;
                }
                let module = &self.modules[&cur];
                if module.items.contains(seg) {
                    return Some(cur);
                }
                let follow = module.imports.get(seg).cloned().or_else(|| {
                    module
                        .globs
                        .iter()
                        .find(|g| self.resolve(g).is_some_and(|m| self.has(&m, seg)))
                        .map(|g| Named { base: g.base.clone(), segments: g.segments.iter().chain([seg]).cloned().collect() })
                });
                let Some(import) = follow else { return Some(cur) };
                segments = self.absolute(&import)?.into_iter().chain(segments[k + 1..].iter().cloned()).collect();
                continue 'restart;
            }
            return Some(cur);
        }
        None
    }

    /// Whether module `m` has `name` (a module, an item or an import).
    fn has(&self, m: &ModPath, name: &str) -> bool {
        let module = &self.modules[m];
        module.items.contains(name) || module.imports.contains_key(name)
    }

    /// The cycles: per parent module, each set of its children that reach
    /// one another, with an example of each edge among them.
    fn cycles(&self) -> Vec<String> {
        // parent -> (from child, to child) -> where
        let mut edges: BTreeMap<ModPath, Edges> = BTreeMap::new();
        for (from, module) in &self.modules {
            for (path, line) in &module.names {
                let Some(to) = self.resolve(path) else { continue };
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue;
                }
                edges
                    .entry(from[..common].to_vec())
                    .or_default()
                    .entry((from[common].clone(), to[common].clone()))
                    .or_insert_with(|| (module.file.clone(), *line));
            }
        }
        let mut found = Vec::new();
        for (parent, es) in &edges {
            let nodes: BTreeSet<&String> = es.keys().flat_map(|(a, b)| [a, b]).collect();
            let reaches = |a: &String, b: &String| -> bool {
                let (mut seen, mut todo) = (BTreeSet::new(), vec![a]);
                while let Some(x) = todo.pop() {
                    for (_, t) in es.keys().filter(|(f, _)| f == x) {
                        if t == b {
                            return true;
                        }
                        if seen.insert(t) {
                            todo.push(t);
                        }
                    }
                }
                false
            };
            let mut done: BTreeSet<&String> = BTreeSet::new();
            for &a in &nodes {
                if done.contains(a) {
                    continue;
                }
                let scc: BTreeSet<&String> = nodes.iter().copied().filter(|&b| b == a || (reaches(a, b) && reaches(b, a))).collect();
                done.extend(scc.iter().copied());
                if scc.len() < 2 {
                    continue;
                }
                let under = if parent.is_empty() { "the crate root".to_string() } else { parent.join("::") };
                let mut text = format!("a cycle among {:?} under {under}:", scc);
                for ((f, t), (file, line)) in es.iter().filter(|((f, t), _)| scc.contains(f) && scc.contains(t)) {
                    text += &format!("\n    {f} -> {t} ({}:{line})", file.display());
                }
                found.push(text);
            }
        }
        found
    }
}

/// Every crate root of the workspace at `root`: its members' libraries,
/// binaries, integration tests, examples and benches.
fn crate_roots(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let members = manifest.lines().find(|l| l.trim_start().starts_with("members")).expect("a members list");
    let mut roots = Vec::new();
    for member in members.split('"').skip(1).step_by(2) {
        let dir = root.join(member);
        for f in ["src/lib.rs", "src/main.rs", "build.rs"] {
            if dir.join(f).exists() {
                roots.push(dir.join(f));
            }
        }
        for sub in ["src/bin", "tests", "examples", "benches"] {
            let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
            let mut entries: Vec<PathBuf> = entries.map(|e| e.expect("a directory entry").path()).collect();
            entries.sort();
            for p in entries {
                if p.extension().is_some_and(|e| e == "rs") {
                    roots.push(p);
                } else if p.join("main.rs").exists() {
                    roots.push(p.join("main.rs"));
                }
            }
        }
    }
    roots
}

/// The cycles of every crate under `root`.
fn workspace_cycles(root: &Path) -> (usize, Vec<String>) {
    let roots = crate_roots(root);
    let mut found = Vec::new();
    for r in &roots {
        for c in Crate::read(r).cycles() {
            let c = c.replace(&format!("{}/", root.display()), "");
            found.push(format!("{}: {c}", r.strip_prefix(root).unwrap_or(r).display()));
        }
    }
    (roots.len(), found)
}

#[test]
fn no_module_imports_itself_through_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let (crates, cycles) = workspace_cycles(root);
    assert!(crates >= 7, "found only {crates} crate roots under {}", root.display());
    assert!(cycles.is_empty(), "import cycles between modules:\n{}", cycles.join("\n"));
}

/// A throwaway workspace of `files` (path, text) under the temporary directory.
fn scratch(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcd-import-cycles-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("a directory")).expect("a scratch directory");
        std::fs::write(p, text).expect("a scratch file");
    }
    std::fs::write(dir.join("Cargo.toml"), "[workspace]\nmembers = [\"k\"]\n").expect("a manifest");
    dir
}

#[test]
fn a_cycle_through_a_re_export_and_a_use_group_is_found() {
    let dir = scratch(
        "cycle",
        &[
            ("k/src/lib.rs", "mod a;\nmod b;\npub use b::Thing;\n"),
            // a -> b through the root's re-export; b -> a through a group and `super`.
            ("k/src/a.rs", "use crate::Thing;\npub fn f() -> Thing { Thing }\n"),
            ("k/src/b/mod.rs", "mod inner;\npub struct Thing;\n"),
            ("k/src/b/inner.rs", "use super::super::{a::f, b::Thing};\n// crate::c is a comment\nfn g() -> Thing { f() }\n"),
        ],
    );
    let (_, cycles) = workspace_cycles(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].contains("\"a\", \"b\"") && cycles[0].contains("a -> b") && cycles[0].contains("b -> a"), "{}", cycles[0]);
    assert!(cycles[0].contains("inner.rs:1"), "the edge's place: {}", cycles[0]);
}

#[test]
fn parents_children_tests_and_text_make_no_cycle() {
    let dir = scratch(
        "clean",
        &[
            // The root re-exports its children; a child uses its parent's item.
            ("k/src/lib.rs", "mod a;\nmod b;\npub use a::A;\npub struct Root;\n"),
            ("k/src/a.rs", "pub struct A;\nfn r() -> crate::Root { crate::Root }\nfn b() { crate::b::g() }\n"),
            // b's tests use a: test code is left out, so is text.
            (
                "k/src/b.rs",
                "pub fn g() {}\nconst S: &str = \"crate::a::A\";\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n#[cfg(test)]\nuse crate::A;\n",
            ),
        ],
    );
    let (crates, cycles) = workspace_cycles(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(crates, 1);
    assert!(cycles.is_empty(), "{cycles:?}");
}
