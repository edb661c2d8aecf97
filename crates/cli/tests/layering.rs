//! The workspace's module layering: inside every crate, modules refer to each other in one
//! direction only (no `a` uses `b` uses `a`), so each file reads with what it depends on below
//! it. A reference is a `use` of, or a path through, another module of the crate (`crate::x`,
//! `super::x`, `self::x`, a child declared here); comments and `#[cfg(test)] mod tests` do not
//! count, nor does the crate root, which only re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Cycles that exist today and have an issue that removes them. Each entry is a sorted set of
/// modules; the test fails when it no longer finds one (remove the entry) or finds any other.
const KNOWN: &[(&str, &[&str])] = &[];

fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read src dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            match parts.last().map(String::as_str) {
                Some("mod") => {
                    parts.pop();
                }
                Some("lib" | "main") if parts.len() == 1 => parts.clear(),
                _ => {}
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The code of a file without comments and without its unit-test module.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).expect("read source");
    let text = [
        "#[cfg(test)]\nmod tests",
        "#[cfg(test)]\npub(crate) mod tests",
    ]
    .iter()
    .filter_map(|head| text.find(head))
    .min()
    .map_or(text.as_str(), |at| &text[..at]);
    // `pub(in crate::a::b)` names where an item is visible, not a module it uses.
    let mut text = text.to_string();
    while let Some(at) = text.find("pub(in ") {
        let end = text[at..].find(')').map_or(text.len(), |e| at + e + 1);
        text.replace_range(at..end, "pub(crate)");
    }
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Paths like `crate::a::b`, `super::x`, `self::y` in `code`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for head in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(head) {
            let start = from + at;
            from = start + head.len();
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let mut end = start;
            while end < bytes.len()
                && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_' || bytes[end] == b':')
            {
                end += 1;
            }
            out.push(
                code[start..end]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
            );
        }
    }
    out
}

fn resolve(mods: &BTreeMap<String, PathBuf>, current: &str, path: &[String]) -> Option<String> {
    let mut base: Vec<&str> = if current.is_empty() {
        Vec::new()
    } else {
        current.split("::").collect()
    };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    (0..=rest.len()).rev().find_map(|n| {
        let mut cand: Vec<&str> = base.clone();
        cand.extend(rest[..n].iter().map(String::as_str));
        let name = cand.join("::");
        mods.contains_key(&name).then_some(name)
    })
}

/// Strongly connected groups of more than one module.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    // Two modules are in one group when each reaches the other.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for n in edges.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut groups: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &reaches {
        if !r.contains(*m) {
            continue;
        }
        let group: BTreeSet<String> = r
            .iter()
            .filter(|n| reaches.get(n).is_some_and(|rn| rn.contains(*m)))
            .cloned()
            .collect();
        if group.len() > 1 && !groups.contains(&group) {
            groups.push(group);
        }
    }
    groups
}

#[test]
fn no_module_cycles_in_any_crate() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found: Vec<(String, BTreeSet<String>)> = Vec::new();
    let mut names: Vec<PathBuf> = fs::read_dir(&crates)
        .expect("crates dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    names.sort();
    assert!(names.len() >= 7, "found only {names:?}");
    for dir in names {
        let krate = dir.file_name().unwrap().to_string_lossy().into_owned();
        let mods = modules(&dir.join("src"));
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (m, path) in &mods {
            let code = code(path);
            let mut targets = BTreeSet::new();
            for p in paths(&code) {
                if let Some(t) = resolve(&mods, m, &p) {
                    targets.insert(t);
                }
            }
            // `use child::...` of a child module declared in this file.
            for line in code.lines() {
                let l = line.trim_start();
                // Any visibility: `pub(crate) use child::*` re-exports (and so depends on) the
                // child as much as `use child::x` does.
                let l = match l.strip_prefix("pub") {
                    Some(rest) if rest.starts_with('(') => {
                        rest.split_once(')').map_or(l, |(_, r)| r)
                    }
                    Some(rest) => rest,
                    None => l,
                };
                let Some(rest) = l.trim_start().strip_prefix("use ") else {
                    continue;
                };
                // The deepest module the path names (`use child::state::X` depends on
                // `child::state`, not on all of `child`), as `resolve` finds it for `crate::`.
                let segments: Vec<&str> = rest
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or("")
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .collect();
                let deepest = (1..=segments.len()).rev().find_map(|n| {
                    let path = segments[..n].join("::");
                    let child = if m.is_empty() {
                        path
                    } else {
                        format!("{m}::{path}")
                    };
                    mods.contains_key(&child).then_some(child)
                });
                if let Some(child) = deepest {
                    targets.insert(child);
                }
            }
            targets.retain(|t| t != m && !t.is_empty());
            if !m.is_empty() {
                edges.insert(m.clone(), targets);
            }
        }
        for group in cycles(&edges) {
            found.push((krate.clone(), group));
        }
    }
    let known: Vec<(String, BTreeSet<String>)> = KNOWN
        .iter()
        .map(|(k, g)| (k.to_string(), g.iter().map(|s| s.to_string()).collect()))
        .collect();
    let new: Vec<_> = found.iter().filter(|f| !known.contains(f)).collect();
    let gone: Vec<_> = known.iter().filter(|k| !found.contains(k)).collect();
    assert!(
        new.is_empty(),
        "modules that import each other in a circle: {new:?}"
    );
    assert!(
        gone.is_empty(),
        "these known cycles are gone: remove them from KNOWN: {gone:?}"
    );
}
