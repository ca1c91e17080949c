//! The library's imports follow the order that docs/architecture.md
//! documents: the `text` block under its "Layering" heading lists the
//! top-level modules of src/, one layer a line, from the one that imports
//! the most down to the ones that import nothing of the crate. This test
//! reads the sources and the document as text, and fails,
//! naming the file and line of every offending import at once, when:
//!
//! - a top-level module imports a module on its own line of the block
//!   (peers do not import each other) or on a line above it, or the block
//!   misses a module of src/ or names one that is not there (`lib.rs`, the
//!   root that declares and re-exports them, is exempt);
//! - imports go round a circle, among the top-level modules (tests'
//!   imports included) or among the files of one folder, its `mod.rs`
//!   included: a file may use what its folder's `mod.rs` defines (the
//!   folder's traits, say) only if `mod.rs`'s own code does not use that
//!   file, or the arrow runs back up. What a `mod.rs` re-exports (`pub use
//!   x::Item`) is not its own import: the item stays its file's.
//!
//! Imports are `use` declarations (nested groups too) and the paths in code
//! that start with `crate::`, `super::` or `self::`, resolved through the
//! re-exports of `lib.rs` and of each `mod.rs`. Comments, doc comments and
//! literals are skipped, and so are `#[cfg(doc)]` imports, which only bring
//! names into scope for rustdoc's links and are no dependency of the code.
//! Tests (`#[cfg(test)]` items, `tests.rs` files) may import up the layers,
//! but their imports count for the circles among the top-level modules: a
//! test that needs a module above its own belongs to that module.
//!
//! It also holds the crate to its words, the Glossary of the same
//! document: each name a row defines (in backticks) is declared in the
//! place the row gives, and each type or path a description names is
//! declared where it says; and no public type shares its name with an
//! internal one anywhere in src/ (one name, one type).
//!
//! The checker's own tests, at the end of this file, feed it small made-up
//! crates, so that it cannot pass by seeing nothing.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

/// Imports between the files of one folder that close a circle, as (the
/// importing file or folder, the imported one), known and tolerated until
/// the code moves: the circles are checked without these edges, and the
/// test fails if an entry no longer occurs, so that the list only shrinks.
/// Do not add to it.
const KNOWN_CIRCLES: &[(&str, &str)] = &[];

/// Names a public type shares with an internal one, as (the name, the file
/// of the internal one), known and tolerated until the code moves: only
/// for a file another change is rewriting, and the test fails once an
/// entry no longer occurs, so that the list only shrinks. The parking lot's
/// two rungs (`Rung`: PARKED, DORMANT), in files its rewrite holds (#46),
/// until it speaks `ladder::Rung`.
const KNOWN_NAMESAKES: &[(&str, &str)] = &[];

/// A folder's mod.rs, as a node of its folder's imports (no module is
/// named so: `mod` is a keyword).
const MOD_RS: &str = "mod";

/// How the block today's imports make is introduced, after violations of
/// the layers.
const SUGGESTED: &str = "The Layering block as today's imports make it";

/// The whole check on the crate as it is.
#[test]
fn the_imports_follow_docs_architecture_md() {
    let (sources, doc) = the_crate();
    let violations = check(&sources.files(), &doc, KNOWN_CIRCLES);
    assert_none(&violations, "of the layering in docs/architecture.md");
}

/// No circle among the top-level modules, tests' imports included.
#[test]
fn no_circle_among_the_top_level_modules_tests_included() {
    let (sources, _) = the_crate();
    let violations = top_level_circles(&sources.files());
    assert_none(&violations, "among the top-level modules of src/");
}

/// The glossary of docs/architecture.md names what src/ declares.
#[test]
fn the_glossary_names_what_src_declares() {
    let (sources, doc) = the_crate();
    let violations = glossary_violations(&sources.files(), &doc);
    assert_none(&violations, "in the Glossary of docs/architecture.md");
}

/// A public type's name is no internal type's.
#[test]
fn no_public_type_shares_its_name_with_an_internal_one() {
    let (sources, _) = the_crate();
    let violations = shared_names(&sources.files(), KNOWN_NAMESAKES);
    assert_none(&violations, "of one name per type");
}

/// The sources of src/ and the text of docs/architecture.md.
fn the_crate() -> (Sources, String) {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut sources = Vec::new();
    read_sources(&root.join("src"), "", &mut sources);
    assert!(
        sources.iter().any(|(file, _)| file == "lib.rs"),
        "no src/lib.rs under {}",
        root.display()
    );
    let doc = fs::read_to_string(root.join("docs/architecture.md"))
        .unwrap_or_else(|error| panic!("cannot read docs/architecture.md: {error}"));
    (Sources(sources), doc)
}

/// Files as (path relative to src/, text).
struct Sources(Vec<(String, String)>);

impl Sources {
    fn files(&self) -> Vec<(&str, &str)> {
        (self.0.iter())
            .map(|(file, text)| (file.as_str(), text.as_str()))
            .collect()
    }
}

#[track_caller]
fn assert_none(violations: &[String], what: &str) {
    assert!(
        violations.is_empty(),
        "{} violation(s) {what}:\n\n{}\n",
        violations.len(),
        violations.join("\n\n")
    );
}

/// Every `.rs` file under `dir`, as (path relative to src/, text), sorted.
fn read_sources(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a UTF-8 file name");
        if path.is_dir() {
            read_sources(&path, &format!("{prefix}{name}/"), out);
        } else if name.ends_with(".rs") {
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
            out.push((format!("{prefix}{name}"), text));
        }
    }
}

// ---------------------------------------------------------------------------
// The checker.
// ---------------------------------------------------------------------------

/// Checks `sources` (paths relative to src/, with their text) against the
/// Layering block of `doc`, allowing the (from, to) imports of
/// `allowed_circles`; returns every violation, each a message for a
/// person.
fn check(sources: &[(&str, &str)], doc: &str, allowed_circles: &[(&str, &str)]) -> Vec<String> {
    let krate = Crate::parse(sources, Tests::Skipped);
    let mut violations = Vec::new();

    // The layers, and the top-level modules each line names.
    let tops = krate.children(&[]);
    let mut layer_of: BTreeMap<String, usize> = BTreeMap::new();
    match parse_layering(doc) {
        Err(message) => violations.push(message),
        Ok(layers) => {
            for (index, names) in layers.iter().enumerate() {
                for name in names {
                    if !tops.contains(name) {
                        violations.push(format!(
                            "docs/architecture.md: the Layering block names `{name}` (line {} of \
                             the block), which is no module of src/ (no src/{name}.rs, no \
                             src/{name}/mod.rs): remove it, or fix its spelling.",
                            index + 1
                        ));
                    } else if let Some(first) = layer_of.insert(name.clone(), index) {
                        violations.push(format!(
                            "docs/architecture.md: the Layering block names `{name}` twice (lines \
                             {} and {} of the block): keep it on one line.",
                            first + 1,
                            index + 1
                        ));
                    }
                }
            }
            for top in &tops {
                if !layer_of.contains_key(top) {
                    violations.push(format!(
                        "{}: the top-level module `{top}` is missing from the Layering block of \
                         docs/architecture.md: add it on the line of its layer, below every \
                         module that imports it and above every module it imports.",
                        krate
                            .file_of(std::slice::from_ref(top))
                            .map_or("src/", |info| info.path.as_str())
                    ));
                }
            }
        }
    }

    // Each import, resolved: against the layers (a), and as an edge
    // between the files of a folder, its mod.rs included, for the circles
    // (b).
    let mut edges: BTreeMap<Vec<String>, BTreeMap<(String, String), String>> = BTreeMap::new();
    let mut seen_a = BTreeSet::new();
    for (info, import, target) in krate.imports() {
        let own = &info.module[0];
        let at = format!("{}:{}", info.path, import.line);
        let written = import.written();

        // (a) the layers.
        for module in &target.visited {
            let Some(other) = module.first() else {
                continue;
            };
            if other == own || !seen_a.insert((info.path.clone(), import.line, other.clone())) {
                continue;
            }
            let (Some(&mine), Some(&theirs)) = (layer_of.get(own), layer_of.get(other)) else {
                continue; // reported as missing from the block
            };
            if theirs == mine {
                violations.push(format!(
                    "{at}: `{own}` imports `{other}` (`{written}`), but they are peers on \
                     line {} of the Layering block, and peers must not import each other. \
                     Move what `{own}` needs of `{other}` into a module below both (or move \
                     the code that needs it), or update the Layering block in \
                     docs/architecture.md if the new order is intended (`{other}` on a line \
                     below `{own}`).",
                    mine + 1
                ));
            } else if theirs < mine {
                violations.push(format!(
                    "{at}: `{own}` (line {} of the Layering block) imports `{other}` \
                     (`{written}`), which is on line {}, above it: a module may import only \
                     the modules on the lines below its own. Move what `{own}` needs of \
                     `{other}` down, or the code that needs it up, or update the Layering \
                     block in docs/architecture.md if the new order is intended.",
                    mine + 1,
                    theirs + 1
                ));
            }
        }

        // (b) edges between the files of a folder, at every level of
        // folders: between siblings; from a file to its folder's
        // mod.rs, for an item mod.rs defines; from a mod.rs's own code
        // to one of its files (not its re-exports).
        let mut edge = |folder: &[String], from: &String, to: &String| {
            edges
                .entry(folder.to_vec())
                .or_default()
                .entry((from.clone(), to.clone()))
                .or_insert_with(|| format!("{at} (`{written}`)"));
        };
        for module in &target.visited {
            for level in 0..info.module.len() {
                let folder = &info.module[..level];
                if module.len() > level
                    && module[..level] == *folder
                    && module[level] != info.module[level]
                {
                    edge(folder, &info.module[level], &module[level]);
                }
            }
            let own_code = info.path.ends_with("/mod.rs")
                && (import.reexport.as_ref()).is_none_or(|name| info.mentioned.contains(name));
            if own_code && module.len() > info.module.len() && module.starts_with(&info.module) {
                edge(&info.module, &MOD_RS.to_owned(), &module[info.module.len()]);
            }
        }
        let level = target.module.len();
        if level > 0 && level < info.module.len() && info.module.starts_with(&target.module) {
            edge(&target.module, &info.module[level], &MOD_RS.to_owned());
        }
    }

    // With the layers off, the block today's imports make.
    if violations.iter().any(|v| v.contains("Layering block")) {
        let top_edges = edges.get(&Vec::new()).cloned().unwrap_or_default();
        violations.push(format!(
            "{SUGGESTED} (each module on the line just above the highest one it imports):\
             \n\n```text\n{}\n```",
            layers_of(&tops, &top_edges).join("\n")
        ));
    }

    // (b) the circles, folder by folder, without the known edges; those
    // among the top-level modules are `top_level_circles`'s, tests included.
    edges.remove(&Vec::new());
    let mut used_circles = BTreeSet::new();
    for (folder, edges) in &mut edges {
        edges.retain(|(from, to), _| {
            let key = (krate.shown(folder, from), krate.shown(folder, to));
            let known = allowed_circles.contains(&(key.0.as_str(), key.1.as_str()));
            if known {
                used_circles.insert(key);
            }
            !known
        });
    }
    for &(from, to) in allowed_circles {
        if !used_circles.contains(&(from.to_owned(), to.to_owned())) {
            violations.push(format!(
                "KNOWN_CIRCLES in tests/layering.rs lists (\"{from}\", \"{to}\"), but {from} no \
                 longer imports {to}: remove the entry."
            ));
        }
    }
    for (folder, edges) in &edges {
        for circle in circles(edges) {
            violations.push(krate.circle_message(folder, &circle, edges));
        }
    }
    violations
}

/// The circles of imports among the top-level modules of src/, each a
/// message for a person. Tests' imports count here (`#[cfg(test)]` items,
/// `tests.rs` files): a test that imports a module above its own closes a
/// circle as surely as code does (`rewind.rs`'s test of `io::Replay` did,
/// `io` → `rewind` → `io`, when `Replay` was `io`'s). `#[cfg(doc)]`
/// imports still do not: no code depends on them.
fn top_level_circles(sources: &[(&str, &str)]) -> Vec<String> {
    let krate = Crate::parse(sources, Tests::Counted);
    let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
    for (info, import, target) in krate.imports() {
        let own = &info.module[0];
        for other in target.visited.iter().filter_map(|module| module.first()) {
            if other != own {
                (edges.entry((own.clone(), other.clone()))).or_insert_with(|| {
                    format!("{}:{} (`{}`)", info.path, import.line, import.written())
                });
            }
        }
    }
    (circles(&edges).iter())
        .map(|circle| krate.circle_message(&[], circle, &edges))
        .collect()
}

/// The layers of docs/architecture.md: the lines of the first `text` block
/// under "## Layering", top first, each the module names it lists
/// (separated by spaces or commas).
fn parse_layering(doc: &str) -> Result<Vec<Vec<String>>, String> {
    let missing = "docs/architecture.md has no Layering block: a ```text block under the \
                   \"## Layering\" heading, one line per layer, top (imports the most) first";
    let mut lines = doc.lines().skip_while(|line| line.trim() != "## Layering");
    lines.next().ok_or(missing)?;
    let mut lines = lines
        .take_while(|line| !line.starts_with("## "))
        .skip_while(|line| line.trim() != "```text");
    lines.next().ok_or(missing)?;
    let mut layers = Vec::new();
    for line in lines {
        if line.trim() == "```" {
            return if layers.is_empty() {
                Err(missing.to_owned())
            } else {
                Ok(layers)
            };
        }
        let names: Vec<String> = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect();
        if !names.is_empty() {
            layers.push(names);
        }
    }
    Err(format!("{missing} (the block is not closed)"))
}

/// The layers `edges` (between the top-level modules `tops`) make, top
/// first: each module one line above the highest it imports, those that
/// import none on the last line.
fn layers_of(tops: &BTreeSet<String>, edges: &BTreeMap<(String, String), String>) -> Vec<String> {
    fn level(
        module: &str,
        edges: &BTreeMap<(String, String), String>,
        depth: usize,
        memo: &mut BTreeMap<String, usize>,
    ) -> usize {
        if let Some(&known) = memo.get(module) {
            return known;
        }
        // A circle has no level: cut it off.
        let below = if depth > 64 {
            0
        } else {
            (edges.keys())
                .filter(|(from, _)| from == module)
                .map(|(_, to)| 1 + level(to, edges, depth + 1, memo))
                .max()
                .unwrap_or(0)
        };
        memo.insert(module.to_owned(), below);
        below
    }
    let mut memo = BTreeMap::new();
    let mut lines: Vec<Vec<&str>> = Vec::new();
    for top in tops {
        let at = level(top, edges, 0, &mut memo);
        if lines.len() <= at {
            lines.resize(at + 1, Vec::new());
        }
        lines[at].push(top);
    }
    lines.iter().rev().map(|line| line.join(" ")).collect()
}

/// Every circle of a folder's sibling edges ((from, to) → evidence), each as
/// its nodes from the smallest back to itself: one per group of siblings
/// that reach each other.
fn circles(edges: &BTreeMap<(String, String), String>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    let reach = |start: &str| -> BTreeMap<String, String> {
        // Each node reachable from `start`, with the node it was reached from.
        let mut parent = BTreeMap::new();
        let mut queue = VecDeque::from([start.to_owned()]);
        while let Some(node) = queue.pop_front() {
            for &to in next.get(node.as_str()).into_iter().flatten() {
                if !parent.contains_key(to) {
                    parent.insert(to.to_owned(), node.clone());
                    queue.push_back(to.to_owned());
                }
            }
        }
        parent
    };
    let mut done = BTreeSet::new();
    let mut found = Vec::new();
    for &node in next.keys() {
        if done.contains(node) {
            continue;
        }
        let parent = reach(node);
        if !parent.contains_key(node) {
            continue; // not on a circle
        }
        for other in parent.keys() {
            if reach(other).contains_key(node) {
                done.insert(other.clone());
            }
        }
        // Back from `node` along the way it was reached, then forward.
        let mut circle = vec![node.to_owned()];
        let mut at = parent[node].clone();
        while at != node {
            circle.push(at.clone());
            at = parent[&at].clone();
        }
        circle.push(node.to_owned());
        circle.reverse();
        found.push(circle);
    }
    found
}

// ---------------------------------------------------------------------------
// The words: the glossary against the sources, one type per name.
// ---------------------------------------------------------------------------

/// Checks the table under "## Glossary" in `doc` against `sources`: each
/// row's places (its last column: `conn`, `wire/asleep.rs`) are files or
/// folders of src/; each name it defines (its first column, in backticks)
/// is declared in one of those places, the file named for it; and each
/// type or path its description names (`upgrade::Woken`, `Asleep`) is
/// declared where the path says, or anywhere in src/. Declared: a `struct`,
/// `enum`, `union`, `trait`, `type`, `fn`, `const`, `static`, `mod` or
/// `macro_rules!` of that name outside tests; after a type, the names of
/// its members (`Lot::sleep`) need only occur in its file.
fn glossary_violations(sources: &[(&str, &str)], doc: &str) -> Vec<String> {
    let rows = match glossary_rows(doc) {
        Ok(rows) => rows,
        Err(message) => return vec![message],
    };
    let files: Vec<Declared> = (sources.iter())
        .filter(|(file, _)| module_path(file, Tests::Skipped).is_some())
        .map(|&(file, text)| Declared::of(file, text))
        .collect();
    let mut violations = Vec::new();
    for (line, cells) in rows {
        let [names, description, places] = &cells[..] else {
            violations.push(format!(
                "docs/architecture.md:{line}: a Glossary row has {} cells, not three (name, what \
                 it is, where)",
                cells.len()
            ));
            continue;
        };
        let at = format!("docs/architecture.md:{line}");
        let places = backticked(places);
        for place in &places {
            if within(&files, place).is_empty() {
                violations.push(format!(
                    "{at}: the Glossary places a word in `{place}`, which is no file or folder of \
                     src/: fix the place."
                ));
            }
        }
        for name in backticked(names) {
            if let Err(problem) = find(&files, &name, &places) {
                violations.push(format!(
                    "{at}: the Glossary defines `{name}`, but {problem}: rename the row after the \
                     code, or the code after the row, or correct its place (`{}`).",
                    places.join("`, `")
                ));
            }
        }
        for term in backticked(description) {
            let named = term.contains("::") || term.chars().any(char::is_uppercase);
            let path = term
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == ':');
            if named && path {
                if let Err(problem) = find(&files, &term, &[]) {
                    violations.push(format!(
                        "{at}: the Glossary names `{term}`, but {problem}: rename it after the \
                         code."
                    ));
                }
            }
        }
    }
    violations
}

/// The rows of the table under "## Glossary", each with its line in `doc`
/// and its cells; the header and its rule are left out.
fn glossary_rows(doc: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let rows: Vec<(usize, Vec<String>)> = (doc.lines().enumerate())
        .skip_while(|(_, line)| line.trim() != "## Glossary")
        .skip(1)
        .take_while(|(_, line)| !line.starts_with("## "))
        .filter(|(_, line)| line.trim_start().starts_with('|'))
        .map(|(index, line)| {
            let cells = line.trim().trim_matches('|').split('|');
            (
                index + 1,
                cells.map(|cell| cell.trim().to_owned()).collect(),
            )
        })
        .skip(2)
        .collect();
    if rows.is_empty() {
        return Err(
            "docs/architecture.md has no Glossary: a table under \"## Glossary\" with a \
                    row per word (name | what it is | where)"
                .to_owned(),
        );
    }
    Ok(rows)
}

/// What is in backticks in `text`.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// One file of src/ (tests left out): what it declares, and every name it
/// uses.
struct Declared {
    file: String,
    items: BTreeSet<String>,
    idents: BTreeSet<String>,
}

impl Declared {
    fn of(file: &str, text: &str) -> Declared {
        let tokens = strip_cfg(lex(text), Tests::Skipped);
        let is = |index: usize, text: &str| tokens.get(index).is_some_and(|t| t.is(text));
        let mut items = BTreeSet::new();
        for (index, token) in tokens.iter().enumerate() {
            let keyword = [
                "struct", "enum", "union", "trait", "type", "fn", "const", "static",
            ];
            let name = match token.text.as_str() {
                _ if token.kind != Kind::Ident => None,
                "macro_rules" if is(index + 1, "!") => tokens.get(index + 2),
                "mod" => tokens.get(index + 1),
                text if keyword.contains(&text) => tokens.get(index + 1),
                _ => None,
            };
            if let Some(name) = name.filter(|name| name.kind == Kind::Ident) {
                items.insert(name.text.clone());
            }
        }
        let idents = (tokens.iter())
            .filter(|token| token.kind == Kind::Ident)
            .map(|token| token.text.clone())
            .collect();
        Declared {
            file: file.to_owned(),
            items,
            idents,
        }
    }
}

/// The files of `place`: the file `x/y.rs` itself, or the module `x/y`
/// (`x/y.rs`, or everything under `x/y/`).
fn within<'a>(files: &'a [Declared], place: &str) -> Vec<&'a Declared> {
    let place = place.trim_end_matches('/');
    (files.iter())
        .filter(|declared| {
            let file = declared.file.as_str();
            if place.ends_with(".rs") {
                file == place
            } else {
                file.strip_prefix(place)
                    .is_some_and(|rest| rest == ".rs" || rest.starts_with('/'))
            }
        })
        .collect()
}

/// Finds `term` (`Item`, `module::Item`, `Item::member`, `module`) among
/// `files`, in `places` if there are any; `Err` says what is missing.
fn find(files: &[Declared], term: &str, places: &[String]) -> Result<(), String> {
    let segments: Vec<&str> = term.split("::").collect();
    // The module the path starts with, if it does.
    let mut module = String::new();
    let mut rest = &segments[..];
    while let Some((first, after)) = rest.split_first() {
        let longer = if module.is_empty() {
            (*first).to_owned()
        } else {
            format!("{module}/{first}")
        };
        if first.starts_with(char::is_lowercase) && !within(files, &longer).is_empty() {
            module = longer;
            rest = after;
        } else {
            break;
        }
    }
    let Some((item, members)) = rest.split_first() else {
        return Ok(()); // a module
    };
    let (candidates, where_): (Vec<&Declared>, String) = if !module.is_empty() {
        (within(files, &module), format!("src/{module}"))
    } else if !places.is_empty() {
        let candidates = places
            .iter()
            .flat_map(|place| within(files, place))
            .collect();
        (
            candidates,
            format!("its place (src/{})", places.join(", src/")),
        )
    } else {
        (files.iter().collect(), "src/".to_owned())
    };
    let declaring: Vec<&Declared> = (candidates.into_iter())
        .filter(|declared| declared.items.contains(*item))
        .collect();
    if declaring.is_empty() {
        return Err(format!("nothing named `{item}` is declared in {where_}"));
    }
    for member in members {
        if !declaring
            .iter()
            .any(|declared| declared.idents.contains(*member))
        {
            let file = &declaring[0].file;
            return Err(format!(
                "src/{file}, where `{item}` is declared, has no `{member}`"
            ));
        }
    }
    Ok(())
}

/// The names that are a public type's (`pub struct`, `enum`, `union`,
/// `trait`, `type`) and an internal type's (declared `pub(crate)`,
/// `pub(super)`, `pub(in …)` or private), anywhere in src/, tests included:
/// one name, one type, as tokio has one `Registration`. Associated types
/// (`type Addr` in a trait or an impl) are no types of their own. The
/// (name, file) pairs of `known` are tolerated, and reported once they no
/// longer occur.
fn shared_names(sources: &[(&str, &str)], known: &[(&str, &str)]) -> Vec<String> {
    let mut declared: BTreeMap<String, [Vec<String>; 2]> = BTreeMap::new();
    for &(file, text) in sources {
        for (name, public, line) in type_declarations(&lex(text)) {
            let places = declared.entry(name).or_default();
            places[usize::from(public)].push(format!("src/{file}:{line}"));
        }
    }
    let mut violations = Vec::new();
    let mut used: BTreeSet<&(&str, &str)> = BTreeSet::new();
    for (name, [internal, public]) in declared {
        let mut tolerated = |place: &String| {
            let entry = known.iter().find(|&&(known, file)| {
                known == name && place.strip_prefix(file).is_some_and(|l| l.starts_with(':'))
            });
            used.extend(entry);
            entry.is_some()
        };
        let internal: Vec<String> = internal.into_iter().filter(|p| !tolerated(p)).collect();
        if !internal.is_empty() && !public.is_empty() {
            violations.push(format!(
                "`{name}` is a public type ({}) and an internal one ({}): a name is a promise \
                 of one thing. Rename the internal one after what it is to its own module.",
                public.join(", "),
                internal.join(", ")
            ));
        }
    }
    for entry @ (name, file) in known {
        if !used.contains(entry) {
            violations.push(format!(
                "KNOWN_NAMESAKES in tests/layering.rs lists (\"{name}\", \"{file}\"), but {file} \
                 declares no `{name}` any more: remove the entry."
            ));
        }
    }
    violations
}

/// The types `tokens` declare: (name, whether it is `pub`, line).
fn type_declarations(tokens: &[Token]) -> Vec<(String, bool, usize)> {
    let is = |index: usize, text: &str| tokens.get(index).is_some_and(|t| t.is(text));
    // For each open `{`: whether it holds the items of a trait or an impl.
    let mut blocks: Vec<bool> = Vec::new();
    // The item being read so far is a trait or an impl.
    let mut trait_or_impl = false;
    let mut found = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        if token.kind == Kind::Punct {
            match token.text.as_str() {
                "{" => blocks.push(std::mem::take(&mut trait_or_impl)),
                "}" => {
                    blocks.pop();
                    trait_or_impl = false;
                }
                ";" => trait_or_impl = false,
                _ => {}
            }
            continue;
        }
        let keyword = token.text.as_str();
        if token.kind != Kind::Ident {
            continue;
        }
        trait_or_impl |= keyword == "trait" || keyword == "impl";
        let associated = keyword == "type" && blocks.last() == Some(&true);
        if !["struct", "enum", "union", "trait", "type"].contains(&keyword) || associated {
            continue;
        }
        let Some(name) = tokens.get(index + 1).filter(|t| t.kind == Kind::Ident) else {
            continue; // `$name` in a macro
        };
        let public = index > 0 && is(index - 1, "pub");
        found.push((name.text.clone(), public, token.line));
    }
    found
}

/// The crate: its files by module path.
#[derive(Debug)]
struct Crate {
    files: BTreeMap<Vec<String>, FileInfo>,
}

/// One source file.
#[derive(Debug)]
struct FileInfo {
    /// Its path as shown: `src/conn/h1.rs`.
    path: String,
    /// Its module path: `["conn", "h1"]`; empty for lib.rs.
    module: Vec<String>,
    /// The names it defines at its top (inline modules too).
    items: BTreeSet<String>,
    /// The names its top-level `use` declarations bring in, with the path
    /// as written.
    aliases: BTreeMap<String, Vec<String>>,
    /// The imports that count.
    imports: Vec<Import>,
    /// The names its code mentions outside `use` declarations.
    mentioned: BTreeSet<String>,
}

/// One import: a leaf of a `use` tree, or a path in code.
#[derive(Debug)]
struct Import {
    line: usize,
    /// The module it is written in: the file's, then inline modules.
    scope: Vec<String>,
    /// As written (`super::x::Y`); a `self` leaf is its prefix.
    path: Vec<String>,
    glob: bool,
    /// A `pub use`, with the name it brings in: a re-export, which a
    /// mod.rs makes for its files' items, and no import of its own code
    /// unless the code mentions the name.
    reexport: Option<String>,
}

impl Import {
    fn written(&self) -> String {
        let mut text = self.path.join("::");
        if self.glob {
            text.push_str("::*");
        }
        text
    }
}

/// Where an absolute path leads.
#[derive(Debug)]
struct Target {
    /// Every module whose namespace the path went through, the crate root
    /// and re-exports included, the last one where it ended.
    visited: Vec<Vec<String>>,
    /// The module where it ended: where the item it names is defined (or
    /// the module it names).
    module: Vec<String>,
}

/// Whether tests' code is read: `#[cfg(test)]` items and `tests.rs` files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tests {
    /// Skipped: tests may import anything up the layers.
    Skipped,
    /// Read as the code of the module they test.
    Counted,
}

impl Crate {
    fn parse(sources: &[(&str, &str)], tests: Tests) -> Crate {
        let mut files = BTreeMap::new();
        for &(file, text) in sources {
            let Some(module) = module_path(file, tests) else {
                continue;
            };
            let mut info = FileInfo {
                path: format!("src/{file}"),
                module: module.clone(),
                items: BTreeSet::new(),
                aliases: BTreeMap::new(),
                imports: Vec::new(),
                mentioned: BTreeSet::new(),
            };
            scan(&strip_cfg(lex(text), tests), &mut info);
            files.insert(module, info);
        }
        Crate { files }
    }

    fn file_of(&self, module: &[String]) -> Option<&FileInfo> {
        self.files.get(module)
    }

    /// Every import of a module (lib.rs, the root, is exempt) that leads
    /// into the crate, with where it leads.
    fn imports(&self) -> impl Iterator<Item = (&FileInfo, &Import, Target)> {
        (self.files.values())
            .filter(|info| !info.module.is_empty())
            .flat_map(|info| info.imports.iter().map(move |import| (info, import)))
            .filter_map(|(info, import)| {
                // `None`: another crate's path, or a re-export of another
                // crate's item.
                let absolute = self.absolute(info, &import.scope, &import.path, 0)?;
                Some((info, import, self.resolve(&absolute, 0)?))
            })
    }

    /// The child `name` of `folder` as a person finds it:
    /// `src/transport/tls/` for a folder, `src/transport/stream.rs` for a
    /// file, `src/d/mod.rs` for [`MOD_RS`].
    fn shown(&self, folder: &[String], name: &String) -> String {
        if name == MOD_RS {
            return format!("src/{}/mod.rs", folder.join("/"));
        }
        let module = [folder, std::slice::from_ref(name)].concat();
        let path = (self.file_of(&module)).map_or(String::new(), |info| info.path.clone());
        path.strip_suffix("mod.rs")
            .map_or(path.clone(), str::to_owned)
    }

    /// A circle of imports among the children of `folder` (the top-level
    /// modules for the root), with the import behind each arrow
    /// (`evidence`).
    fn circle_message(
        &self,
        folder: &[String],
        circle: &[String],
        evidence: &BTreeMap<(String, String), String>,
    ) -> String {
        let place = if folder.is_empty() {
            "among the top-level modules of src/".to_owned()
        } else {
            format!("among the files of src/{}/", folder.join("/"))
        };
        let names: Vec<String> = circle.iter().map(|name| self.shown(folder, name)).collect();
        let mut message = format!("a circle of imports {place}: {}", names.join(" → "));
        for pair in circle.windows(2) {
            let import = &evidence[&(pair[0].clone(), pair[1].clone())];
            let _ = write!(message, "\n    {} → {}: {import}", pair[0], pair[1]);
        }
        message.push_str(
            "\n  A circle means a concept lives in the wrong file: move what both sides need \
             into one of them, or into a file (or module) that both import, so that the \
             imports go one way.",
        );
        message
    }

    /// The child modules of `module` that are files.
    fn children(&self, module: &[String]) -> BTreeSet<String> {
        self.files
            .keys()
            .filter(|path| path.len() == module.len() + 1 && path[..module.len()] == *module)
            .map(|path| path[module.len()].clone())
            .collect()
    }

    /// `path`, written in `scope` of `info`, from the crate root; `None` for
    /// another crate's.
    fn absolute(
        &self,
        info: &FileInfo,
        scope: &[String],
        path: &[String],
        depth: usize,
    ) -> Option<Vec<String>> {
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some(path[1..].to_vec()),
            "super" | "self" => {
                let mut base = scope.to_vec();
                let mut rest = path;
                while let Some(head) = rest
                    .first()
                    .filter(|head| *head == "super" || *head == "self")
                {
                    if head == "super" {
                        base.pop()?;
                    }
                    rest = &rest[1..];
                }
                base.extend_from_slice(rest);
                Some(base)
            }
            name => {
                // Relative to the file's module (Rust 2018's uniform paths):
                // a child, an item or a name it imports; inside an inline
                // module, taken as another crate's.
                if scope.len() != info.module.len() || depth > 16 {
                    return None;
                }
                if self.children(&info.module).contains(name) || info.items.contains(name) {
                    let mut absolute = info.module.clone();
                    absolute.extend_from_slice(path);
                    return Some(absolute);
                }
                let alias = info.aliases.get(name)?;
                let mut absolute = self.absolute(info, &info.module, alias, depth + 1)?;
                absolute.extend_from_slice(&path[1..]);
                Some(absolute)
            }
        }
    }

    /// Follows an absolute path through modules and re-exports; `None` if it
    /// leads to another crate.
    fn resolve(&self, path: &[String], depth: usize) -> Option<Target> {
        let mut module: Vec<String> = Vec::new();
        let mut visited = vec![Vec::new()];
        for (index, name) in path.iter().enumerate() {
            if self
                .files
                .contains_key(&[&module[..], std::slice::from_ref(name)].concat())
            {
                module.push(name.clone());
                visited.push(module.clone());
                continue;
            }
            let info = self.file_of(&module);
            let defined = info.is_some_and(|info| info.items.contains(name));
            if let Some(info) = info.filter(|_| !defined && depth < 16) {
                if let Some(alias) = info.aliases.get(name) {
                    // A re-export (or an import): on from what it names.
                    let mut absolute = self.absolute(info, &info.module, alias, 0)?;
                    absolute.extend_from_slice(&path[index + 1..]);
                    let mut target = self.resolve(&absolute, depth + 1)?;
                    visited.append(&mut target.visited);
                    target.visited = visited;
                    return Some(target);
                }
            }
            return Some(Target { visited, module });
        }
        Some(Target {
            visited,
            module: module.clone(),
        })
    }
}

/// The module path of a file relative to src/: `conn/h1.rs` → `conn::h1`,
/// `conn/mod.rs` → `conn`, `lib.rs` → the root; `None` for tests' files
/// when tests are skipped.
fn module_path(file: &str, tests: Tests) -> Option<Vec<String>> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if tests == Tests::Skipped && parts.last().is_some_and(|last| last == "tests") {
        return None;
    }
    if parts.last().is_some_and(|last| last == "mod") || parts == ["lib"] {
        parts.pop();
    }
    Some(parts)
}

// ---------------------------------------------------------------------------
// The parser: a tokenizer that drops comments and literals, then a scan.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ident,
    Punct,
    Literal,
    Lifetime,
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    text: String,
    line: usize,
}

impl Token {
    fn is(&self, text: &str) -> bool {
        self.kind != Kind::Literal && self.text == text
    }
}

/// Rust's tokens, as far as imports need them: identifiers (raw ones
/// unprefixed), `::`, single punctuation, and one `Literal` for each string,
/// character or number; comments (doc comments too) are dropped.
fn lex(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let at = |index: usize| chars.get(index).copied().unwrap_or('\0');
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut tokens = Vec::new();
    let (mut index, mut line) = (0, 1);
    while index < chars.len() {
        let c = chars[index];
        let start = index;
        let kind;
        if c == '/' && at(index + 1) == '/' {
            while index < chars.len() && chars[index] != '\n' {
                index += 1;
            }
            continue;
        } else if c == '/' && at(index + 1) == '*' {
            let mut depth = 0;
            loop {
                if index >= chars.len() {
                    break;
                } else if chars[index] == '/' && at(index + 1) == '*' {
                    depth += 1;
                    index += 2;
                } else if chars[index] == '*' && at(index + 1) == '/' {
                    depth -= 1;
                    index += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[index] == '\n');
                    index += 1;
                }
            }
            continue;
        } else if c.is_whitespace() {
            line += usize::from(c == '\n');
            index += 1;
            continue;
        } else if let Some(end) = string_end(&chars, index) {
            kind = Kind::Literal;
            index = end;
        } else if c == '\'' || (c == 'b' && at(index + 1) == '\'') {
            let quote = if c == 'b' { index + 1 } else { index };
            if at(quote + 1) == '\\' {
                index = quote + 3;
                while index < chars.len() && chars[index] != '\'' {
                    index += 1;
                }
                index += 1;
                kind = Kind::Literal;
            } else if at(quote + 2) == '\'' {
                index = quote + 3;
                kind = Kind::Literal;
            } else {
                index = quote + 1;
                while ident(at(index)) {
                    index += 1;
                }
                kind = Kind::Lifetime;
            }
        } else if c == 'r'
            && at(index + 1) == '#'
            && (at(index + 2).is_alphabetic() || at(index + 2) == '_')
        {
            index += 2;
            let from = index;
            while ident(at(index)) {
                index += 1;
            }
            tokens.push(Token {
                kind: Kind::Ident,
                text: chars[from..index].iter().collect(),
                line,
            });
            continue;
        } else if c.is_ascii_digit() {
            while ident(at(index)) || (at(index) == '.' && at(index + 1).is_ascii_digit()) {
                index += 1;
            }
            kind = Kind::Literal;
        } else if ident(c) {
            while ident(at(index)) {
                index += 1;
            }
            kind = Kind::Ident;
        } else if c == ':' && at(index + 1) == ':' {
            index += 2;
            kind = Kind::Punct;
        } else {
            index += 1;
            kind = Kind::Punct;
        }
        let text: String = chars[start..index.min(chars.len())].iter().collect();
        let newlines = text.matches('\n').count();
        tokens.push(Token { kind, text, line });
        line += newlines;
    }
    tokens
}

/// The end of the string literal at `index` (`"…"`, `b"…"`, `c"…"`, raw
/// ones with their `#`s), if one starts there.
fn string_end(chars: &[char], index: usize) -> Option<usize> {
    let at = |index: usize| chars.get(index).copied().unwrap_or('\0');
    let mut index = index;
    if at(index) == 'b' || at(index) == 'c' {
        index += 1;
    }
    if at(index) == 'r' {
        index += 1;
        let mut hashes = 0;
        while at(index) == '#' {
            hashes += 1;
            index += 1;
        }
        if at(index) != '"' {
            return None;
        }
        index += 1;
        while index < chars.len() {
            if chars[index] == '"' && (1..=hashes).all(|k| at(index + k) == '#') {
                return Some(index + 1 + hashes);
            }
            index += 1;
        }
        return Some(chars.len());
    }
    if at(index) != '"' {
        return None;
    }
    index += 1;
    while index < chars.len() {
        match chars[index] {
            '\\' => index += 2,
            '"' => return Some(index + 1),
            _ => index += 1,
        }
    }
    Some(chars.len())
}

/// The tokens without the items under `#[cfg(doc)]` (imports for
/// rustdoc's links only) and, if tests are skipped, under `#[cfg(test)]`;
/// an inner `#![cfg(…)]` of either drops the whole file.
fn strip_cfg(tokens: Vec<Token>, tests: Tests) -> Vec<Token> {
    let cfg_at = |index: usize, inner: bool| -> Option<usize> {
        // `#[cfg(test)]` or `#[cfg(doc)]` at `index`: the index after it.
        let shape: &[&str] = if inner {
            &["#", "!", "[", "cfg", "("]
        } else {
            &["#", "[", "cfg", "("]
        };
        let after = index + shape.len();
        let matches = shape
            .iter()
            .enumerate()
            .all(|(k, text)| tokens.get(index + k).is_some_and(|t| t.is(text)))
            && tokens
                .get(after)
                .is_some_and(|t| t.is("doc") || (tests == Tests::Skipped && t.is("test")))
            && tokens.get(after + 1).is_some_and(|t| t.is(")"))
            && tokens.get(after + 2).is_some_and(|t| t.is("]"));
        matches.then_some(after + 3)
    };
    let mut kept = Vec::new();
    let mut index = 0;
    while index < tokens.len() {
        if cfg_at(index, true).is_some() {
            return Vec::new();
        }
        let Some(mut next) = cfg_at(index, false) else {
            kept.push(tokens[index].clone());
            index += 1;
            continue;
        };
        // Further attributes, then the item: up to its `;`, or the `}` that
        // closes its body, or the `}` of what encloses it.
        let mut depth = 0i32;
        while next < tokens.len() {
            let token = &tokens[next];
            next += 1;
            match token.text.as_str() {
                _ if token.kind != Kind::Punct => {}
                "(" | "[" | "{" => depth += 1,
                ")" | "]" => depth -= 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                    if depth < 0 {
                        next -= 1;
                        break;
                    }
                }
                ";" if depth == 0 => break,
                _ => {}
            }
        }
        index = next;
    }
    kept
}

/// Fills `info` from its file's tokens: the names defined at the top, the
/// names its top-level `use`s bring in, and every import.
fn scan(tokens: &[Token], info: &mut FileInfo) {
    let is = |index: usize, text: &str| tokens.get(index).is_some_and(|t| t.is(text));
    let ident_at = |index: usize| {
        tokens
            .get(index)
            .filter(|t| t.kind == Kind::Ident)
            .map(|t| t.text.clone())
    };
    let mut depth = 0usize;
    // Inline modules (`mod name { … }`) open here, with the depth inside.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut index = 0;
    while index < tokens.len() {
        let token = &tokens[index];
        let top = depth == 0 && inline.is_empty();
        let scope = || {
            let mut scope = info.module.clone();
            scope.extend(inline.iter().map(|(name, _)| name.clone()));
            scope
        };
        match (token.kind, token.text.as_str()) {
            (Kind::Punct, "{") => depth += 1,
            (Kind::Punct, "}") => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|&(_, inside)| depth < inside) {
                    inline.pop();
                }
            }
            (Kind::Ident, "use") if !is(index + 1, "<") => {
                // `pub use`, `pub(crate) use`, `pub(in path) use`.
                let reexport = index > 0
                    && (is(index - 1, "pub")
                        || (is(index - 1, ")")
                            && (0..index - 1)
                                .rev()
                                .find(|&j| is(j, "("))
                                .is_some_and(|j| j > 0 && is(j - 1, "pub"))));
                let mut leaves = Vec::new();
                index = use_tree(tokens, index + 1, Vec::new(), &mut leaves);
                let scope = scope();
                for leaf in leaves {
                    if top && !leaf.glob {
                        if let Some(name) = leaf.name.clone() {
                            info.aliases.insert(name, leaf.path.clone());
                        }
                    }
                    info.imports.push(Import {
                        line: leaf.line,
                        scope: scope.clone(),
                        path: leaf.path,
                        glob: leaf.glob,
                        reexport: reexport.then(|| leaf.name.clone().unwrap_or_default()),
                    });
                }
                continue;
            }
            (Kind::Ident, "mod") if is(index + 2, "{") => {
                if let Some(name) = ident_at(index + 1) {
                    if top {
                        info.items.insert(name.clone());
                    }
                    depth += 1;
                    inline.push((name, depth));
                    index += 3;
                    continue;
                }
            }
            (
                Kind::Ident,
                "struct" | "enum" | "union" | "trait" | "fn" | "type" | "const" | "static",
            ) if top => {
                let skip = usize::from(is(index + 1, "mut"));
                if let Some(name) = ident_at(index + 1 + skip) {
                    let keyword =
                        ["fn", "unsafe", "async", "extern", "_", "for"].contains(&name.as_str());
                    if !keyword {
                        info.items.insert(name);
                    }
                }
            }
            (Kind::Ident, "macro_rules") if top && is(index + 1, "!") => {
                if let Some(name) = ident_at(index + 2) {
                    info.items.insert(name);
                }
            }
            (Kind::Ident, "crate" | "super" | "self")
                if is(index + 1, "::")
                    && !(index > 0 && (is(index - 1, "::") || is(index - 1, "$")))
                    && !(index > 2
                        && is(index - 1, "in")
                        && is(index - 2, "(")
                        && is(index - 3, "pub")) =>
            {
                let line = token.line;
                let mut path = vec![token.text.clone()];
                index += 1;
                while is(index, "::") {
                    match ident_at(index + 1) {
                        Some(name) => path.push(name),
                        None => break,
                    }
                    index += 2;
                }
                info.imports.push(Import {
                    line,
                    scope: scope(),
                    path,
                    glob: false,
                    reexport: None,
                });
                continue;
            }
            (Kind::Ident, name) => {
                info.mentioned.insert(name.to_owned());
            }
            _ => {}
        }
        index += 1;
    }
}

/// One leaf of a `use` tree.
#[derive(Debug)]
struct Leaf {
    path: Vec<String>,
    /// The name it brings into scope (`None` for a glob).
    name: Option<String>,
    glob: bool,
    line: usize,
}

/// Parses the `use` tree at `index` under `prefix`, pushing its leaves;
/// returns the index after it (after the `;` of a whole declaration).
fn use_tree(tokens: &[Token], mut index: usize, prefix: Vec<String>, out: &mut Vec<Leaf>) -> usize {
    let is = |index: usize, text: &str| tokens.get(index).is_some_and(|t| t.is(text));
    let mut path = prefix;
    if is(index, "::") {
        path.push("::".to_owned()); // `::name`: another crate's
        index += 1;
    }
    let end = loop {
        let Some(token) = tokens.get(index) else {
            return index;
        };
        if token.is("{") {
            index += 1;
            while index < tokens.len() && !is(index, "}") {
                index = use_tree(tokens, index, path.clone(), out);
                if is(index, ",") {
                    index += 1;
                }
            }
            break index + 1;
        } else if token.is("*") {
            out.push(Leaf {
                path: path.clone(),
                name: None,
                glob: true,
                line: token.line,
            });
            break index + 1;
        } else if token.kind == Kind::Ident {
            path.push(token.text.clone());
            index += 1;
            if is(index, "::") {
                index += 1;
                continue;
            }
            let mut name = token.text.clone();
            if token.text == "self" {
                path.pop();
                name = path.last().cloned().unwrap_or_default();
            }
            if is(index, "as") {
                if let Some(alias) = tokens.get(index + 1) {
                    name = alias.text.clone();
                }
                index += 2;
            }
            out.push(Leaf {
                path: path.clone(),
                name: Some(name),
                glob: false,
                line: token.line,
            });
            break index;
        } else {
            break index; // not a path: give up on this tree
        }
    };
    if is(end, ";") { end + 1 } else { end }
}

// ---------------------------------------------------------------------------
// The checker's tests: made-up crates, each with what it must find.
// ---------------------------------------------------------------------------

/// A document whose Layering block has `layers`, one a line.
fn doc(layers: &[&str]) -> String {
    format!(
        "# Architecture\n\n## Layering\n\nImports go one way.\n\n```text\n{}\n```\n\n## Next\n",
        layers.join("\n")
    )
}

/// The violations of a made-up crate (lib.rs declares `a`, `b` and `c`),
/// with nothing allowed.
fn violations(files: &[(&str, &str)], layers: &[&str]) -> Vec<String> {
    let mut sources = vec![("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::A;\n")];
    sources.extend_from_slice(files);
    check(&sources, &doc(layers), &[])
}

/// Asserts that `found` has exactly one violation per entry of `expected`,
/// each with all the entry's parts.
#[track_caller]
fn assert_found(found: &[String], expected: &[&[&str]]) {
    // The block today's imports make comes with any layer violation: not
    // one of its own.
    let found: Vec<&String> = (found.iter())
        .filter(|message| !message.starts_with(SUGGESTED))
        .collect();
    let shown = found
        .iter()
        .map(|m| m.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    assert_eq!(found.len(), expected.len(), "violations found:\n\n{shown}");
    for parts in expected {
        assert!(
            found
                .iter()
                .any(|message| parts.iter().all(|part| message.contains(part))),
            "no violation with {parts:?} among:\n\n{shown}"
        );
    }
}

const A: (&str, &str) = ("a.rs", "pub struct A;\n");
const B: (&str, &str) = ("b.rs", "pub struct B;\npub fn size() -> usize { 0 }\n");
const C: (&str, &str) = ("c.rs", "pub struct C;\n");

#[test]
fn imports_down_the_layers_pass() {
    let a = (
        "a.rs",
        "use crate::b::B;\nuse crate::c::{self, C};\npub struct A(B, C);\nfn f() -> usize { crate::b::size() }\n",
    );
    let b = (
        "b.rs",
        "use crate::c::C;\npub struct B(C);\npub fn size() -> usize { 0 }\n",
    );
    assert_found(&violations(&[a, b, C], &["a", "b", "c"]), &[]);
}

#[test]
fn an_import_up_the_layers_fails() {
    let c = (
        "c.rs",
        "pub struct C;\nuse crate::A;\nfn f() -> usize {\n    crate::b::size()\n}\n",
    );
    assert_found(
        &violations(&[A, B, c], &["a", "b", "c"]),
        &[
            &[
                "src/c.rs:2:",
                "`c` (line 3 of the Layering block) imports `a` (`crate::A`)",
                "update the Layering block in docs/architecture.md",
            ],
            &[
                "src/c.rs:4:",
                "imports `b` (`crate::b::size`)",
                "lines below its own",
            ],
        ],
    );
}

#[test]
fn an_import_between_peers_fails() {
    let b = ("b.rs", "use crate::c::C;\npub struct B(C);\n");
    assert_found(
        &violations(&[A, b, C], &["a", "b c"]),
        &[&[
            "src/b.rs:1:",
            "`b` imports `c`",
            "peers on line 2",
            "update the Layering block",
        ]],
    );
}

#[test]
fn nested_use_groups_are_read() {
    let c = (
        "c.rs",
        "use crate::{\n    a::{self, A},\n    b::{B, size as len},\n};\n",
    );
    assert_found(
        &violations(&[A, B, c], &["a", "b", "c"]),
        &[
            &["src/c.rs:2:", "imports `a`"],
            &["src/c.rs:3:", "imports `b`"],
        ],
    );
}

#[test]
fn comments_literals_and_lifetimes_are_skipped() {
    let c = (
        "c.rs",
        concat!(
            "//! [`A`](crate::a::A), crate::b\n",
            "// use crate::a::A;\n",
            "/* use crate::a::A; /* nested */ crate::b::B */\n",
            "/// [`A`](crate::a::A)\n",
            "const S: &str = \"use crate::a::A; \\\" crate::b::B\";\n",
            "const R: &str = r#\"crate::a::A \"quoted\" crate::b\"#;\n",
            "const Q: char = '\"';\n",
            "fn f<'a>(x: &'a str, _: [u8; 2]) -> &'a str { x }\n",
            "use crate::b::B;\n",
        ),
    );
    assert_found(
        &violations(&[A, B, c], &["a", "b", "c"]),
        &[&["src/c.rs:9:", "imports `b`"]],
    );
}

#[test]
fn test_and_doc_only_imports_are_ignored() {
    let c = (
        "c/mod.rs",
        concat!(
            "pub struct C;\n",
            "#[cfg(doc)]\nuse crate::a::A;\n",
            "#[cfg(test)]\nuse crate::b::B;\n",
            "#[cfg(test)]\nmod tests;\n",
            "#[cfg(test)]\n#[allow(unused)]\nmod more {\n    use crate::a::A;\n    fn f() -> usize { crate::b::size() }\n}\n",
            "#[cfg(test)]\nimpl C {\n    fn g() -> crate::a::A { crate::a::A }\n}\n",
        ),
    );
    let tests = ("c/tests.rs", "use crate::a::A;\nuse super::C;\n");
    assert_found(&violations(&[A, B, c, tests], &["a", "b", "c"]), &[]);
}

/// Folder `d`: `mod.rs` defines `Top` and `helper`, re-exports `Item` and
/// `Other` from `y`; `x`, `y` and the folder `z` are its files.
const D: (&str, &str) = (
    "d/mod.rs",
    "mod x;\nmod y;\nmod z;\npub(crate) use y::Item;\npub(crate) use self::y::Other as Renamed;\npub(crate) struct Top;\nfn helper() {}\n",
);
const Y: (&str, &str) = (
    "d/y.rs",
    "pub(crate) struct Item;\npub(crate) struct Other;\n",
);
const Z: (&str, &str) = ("d/z/mod.rs", "mod w;\n");
const W: (&str, &str) = ("d/z/w.rs", "pub(crate) struct W;\n");

/// The violations of a made-up crate whose only module is the folder `d`.
fn folder_violations(files: &[(&str, &str)]) -> Vec<String> {
    let mut sources = vec![("lib.rs", "mod d;\n"), D];
    sources.extend_from_slice(files);
    check(&sources, &doc(&["d"]), &[])
}

#[test]
fn a_file_may_use_what_its_folders_mod_rs_defines() {
    // mod.rs's own code uses no file of the folder: its items are the
    // folder's interface.
    let x = (
        "d/x.rs",
        "use super::Top;\nfn f() {\n    super::helper();\n}\n",
    );
    let w = ("d/z/w.rs", "use crate::d::Top;\n");
    assert_found(&folder_violations(&[x, Y, Z, w]), &[]);
}

#[test]
fn an_arrow_back_up_to_a_mod_rs_that_uses_the_file_fails() {
    let d = (
        "d/mod.rs",
        "mod x;\nmod y;\nmod z;\npub(crate) use x::run;\npub(crate) use y::Item;\npub(crate) struct Top;\nfn f() { run(); }\n",
    );
    let x = ("d/x.rs", "use super::Top;\npub(crate) fn run() {}\n");
    let sources = [("lib.rs", "mod d;\n"), d, x, Y, Z, W];
    assert_found(
        &check(&sources, &doc(&["d"]), &[]),
        &[&[
            "a circle of imports among the files of src/d/: src/d/mod.rs → src/d/x.rs → src/d/mod.rs",
            "mod → x: src/d/mod.rs:4 (`x::run`)",
            "x → mod: src/d/x.rs:1 (`super::Top`)",
        ]],
    );
    // A re-export mod.rs's code does not use is no import of its own:
    // `y` may use `Top`.
    let y = ("d/y.rs", "pub(crate) struct Item(super::Top);\n");
    let sources = [
        ("lib.rs", "mod d;\n"),
        d,
        ("d/x.rs", "pub(crate) fn run() {}\n"),
        y,
        Z,
        W,
    ];
    assert_found(&check(&sources, &doc(&["d"]), &[]), &[]);
}

#[test]
fn siblings_and_what_mod_rs_reexports_from_them_pass() {
    let x = (
        "d/x.rs",
        "use super::Item;\nuse super::{Renamed, y};\nuse super::z::w::W;\nfn f() -> super::y::Other { let _ = crate::d::Item; y::Other }\n",
    );
    assert_found(&folder_violations(&[x, Y, Z, W]), &[]);
}

#[test]
fn a_circle_among_the_files_of_a_folder_fails() {
    let x = ("d/x.rs", "use super::Item;\npub(crate) struct X;\n");
    let y = (
        "d/y.rs",
        "pub(crate) struct Item;\npub(crate) struct Other;\nfn f(_: super::z::w::W) {}\n",
    );
    let w = ("d/z/w.rs", "pub(crate) struct W(crate::d::x::X);\n");
    assert_found(
        &folder_violations(&[x, y, Z, w]),
        &[&[
            "a circle of imports among the files of src/d/: src/d/x.rs → src/d/y.rs → src/d/z/ → src/d/x.rs",
            "x → y: src/d/x.rs:1 (`super::Item`)",
            "y → z: src/d/y.rs:3",
            "z → x: src/d/z/w.rs:1",
        ]],
    );
    let mut sources = vec![("lib.rs", "mod d;\n"), D, x, y, Z, w];
    let known = [("src/d/z/", "src/d/x.rs")];
    assert_found(&check(&sources, &doc(&["d"]), &known), &[]);
    sources[5] = W;
    assert_found(
        &check(&sources, &doc(&["d"]), &known),
        &[&["KNOWN_CIRCLES", "remove the entry"]],
    );
}

#[test]
fn a_circle_among_top_level_modules_fails() {
    let a = ("a.rs", "use crate::b::B;\npub struct A;\n");
    let b = ("b.rs", "pub struct B;\nfn f(_: crate::A) {}\n");
    let sources = [("lib.rs", "mod a;\nmod b;\npub use a::A;\n"), a, b];
    assert_found(
        &top_level_circles(&sources),
        &[&[
            "a circle of imports among the top-level modules of src/: src/a.rs → src/b.rs → src/a.rs",
            "a → b: src/a.rs:1 (`crate::b::B`)",
            "b → a: src/b.rs:2 (`crate::A`)",
        ]],
    );
}

#[test]
fn a_circle_through_tests_among_top_level_modules_fails() {
    // `b`'s tests import `a`, which imports `b`: the layers let tests
    // import anything, the circles do not.
    let a = ("a.rs", "use crate::b::B;\npub struct A(B);\n");
    let b = (
        "b/mod.rs",
        "pub struct B;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod more {\n    use crate::a::A;\n}\n",
    );
    let tests = ("b/tests.rs", "use super::B;\nfn f(_: crate::A) {}\n");
    let lib = ("lib.rs", "mod a;\nmod b;\npub use a::A;\n");
    let sources = [lib, a, b, tests];
    assert_found(&check(&sources, &doc(&["a", "b"]), &[]), &[]);
    assert_found(
        &top_level_circles(&sources),
        &[&[
            "src/a.rs → src/b/ → src/a.rs",
            "b → a: src/b/mod.rs:6 (`crate::a::A`)",
        ]],
    );
    // `#[cfg(doc)]` imports still do not count.
    let b = ("b.rs", "pub struct B;\n#[cfg(doc)]\nuse crate::a::A;\n");
    assert_found(&top_level_circles(&[lib, a, b]), &[]);
}

#[test]
fn the_block_names_every_module_once() {
    assert_found(
        &violations(&[A, B, C], &["a b", "zz", "a"]),
        &[
            &["`zz`", "no module of src/"],
            &["`a` twice"],
            &["src/c.rs: the top-level module `c` is missing from the Layering block"],
        ],
    );
    let sources = [("lib.rs", "mod a;\n"), A];
    assert_found(
        &check(&sources, "# Architecture\n\n## Layering\n\nProse.\n", &[]),
        &[&["no Layering block"]],
    );
}

/// A made-up crate for the glossary: `a.rs` and the folder `d`.
const WORDS: &[(&str, &str)] = &[
    ("lib.rs", "mod a;\nmod d;\n"),
    (
        "a.rs",
        "pub struct Alpha;\nimpl Alpha {\n    pub fn run(&self) {}\n}\n#[cfg(test)]\nstruct Tested;\n",
    ),
    ("d/mod.rs", "mod e;\npub(crate) use e::Echo;\n"),
    (
        "d/e.rs",
        "pub(crate) enum Echo {\n    Loud,\n}\npub(crate) fn echo() {}\n",
    ),
];

/// A document whose Glossary has `rows` (name | what it is | where).
fn glossary(rows: &[&str]) -> String {
    format!(
        "# Architecture\n\n## Glossary\n\n| name | what it is | where |\n|---|---|---|\n{}\n\n## Next\n",
        rows.join("\n")
    )
}

#[test]
fn glossary_words_declared_where_it_says_pass() {
    let rows = [
        "| `Alpha`, `Alpha::run` | runs (see `d::Echo`, `Echo::Loud`, `e` and `h2`) | `a.rs` |",
        "| `Echo`, `echo` | what comes back | `d/e.rs`, `a.rs` |",
        "| `d` | a folder | `d` |",
        "| ladder | a word of prose, unchecked | `d/` |",
    ];
    assert_found(&glossary_violations(WORDS, &glossary(&rows)), &[]);
}

#[test]
fn glossary_words_missing_from_src_fail() {
    let rows = [
        "| `Alpha`, `Bogus` | a name no code declares | `a.rs` |",
        "| `Echo` | declared, but not where the row says | `a.rs` |",
        "| `Tested` | a test's type | `a.rs` |",
        "| `Alpha` | members and paths: `Alpha::walk`, `d::Alpha`, `Omega` | `a.rs` |",
        "| `Echo` | a place that is not there | `d/x.rs` |",
    ];
    assert_found(
        &glossary_violations(WORDS, &glossary(&rows)),
        &[
            &[
                "docs/architecture.md:7:",
                "defines `Bogus`",
                "nothing named `Bogus` is declared in its place (src/a.rs)",
            ],
            &[
                "docs/architecture.md:8:",
                "defines `Echo`",
                "in its place (src/a.rs)",
            ],
            &["docs/architecture.md:9:", "defines `Tested`"],
            &[
                "docs/architecture.md:10:",
                "names `Alpha::walk`",
                "src/a.rs, where `Alpha` is declared, has no `walk`",
            ],
            &[
                "docs/architecture.md:10:",
                "names `d::Alpha`",
                "nothing named `Alpha` is declared in src/d",
            ],
            &["docs/architecture.md:10:", "names `Omega`", "in src/"],
            &[
                "docs/architecture.md:11:",
                "`d/x.rs`, which is no file or folder of src/",
            ],
            &[
                "docs/architecture.md:11:",
                "defines `Echo`",
                "in its place (src/d/x.rs)",
            ],
        ],
    );
    assert_found(
        &glossary_violations(WORDS, "# Architecture\n\n## Next\n"),
        &[&["no Glossary"]],
    );
}

#[test]
fn a_public_type_with_an_internal_namesake_fails() {
    let sources = [
        (
            "a.rs",
            "pub struct Shared;\npub trait Source {\n    type Addr;\n}\npub type Alias = u8;\n",
        ),
        (
            "b.rs",
            "pub(crate) enum Shared {}\nimpl crate::a::Source for u8 {\n    type Addr = u8;\n}\nstruct Addr;\n",
        ),
        ("c/tests.rs", "#[test]\nfn t() {\n    struct Alias;\n}\n"),
    ];
    assert_found(
        &shared_names(&sources, &[]),
        &[
            &["`Shared` is a public type (src/a.rs:1) and an internal one (src/b.rs:1)"],
            &["`Alias` is a public type (src/a.rs:5) and an internal one (src/c/tests.rs:3)"],
        ],
    );
    let known = [("Shared", "src/b.rs"), ("Alias", "src/a.rs")];
    assert_found(
        &shared_names(&sources, &known),
        &[
            &["`Alias` is a public type"],
            &[
                "KNOWN_NAMESAKES",
                "(\"Alias\", \"src/a.rs\")",
                "remove the entry",
            ],
        ],
    );
}
