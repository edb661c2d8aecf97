//! The sysfs directory of `softrdma0` that `softrdma exec` gives the programs it runs.
//!
//! A kernel RDMA device has `/sys/class/infiniband/<name>`, and some programs read it beside
//! the verbs: rdma-core's own tests find a device's IP address through its netdev, the one
//! entry of `device/net/`, and skip every rdma_cm test without it; UCX takes each GID's RoCE
//! version from `ports/1/gid_attrs/types/<i>` and reads RoCE v1 when it is missing. Nobody can
//! create files in sysfs, so exec writes the directory into the run directory
//! ([`softrdma::run_directory`]) and its preload (`crates/ibverbs/preload/devnode.c`) answers
//! for `/sys/class/infiniband/softrdma0` from there (`SOFTRDMA_SYSFS`).
//!
//! What it holds, as the kernel writes it for rxe (the files the programs above read, and
//! those that say what the device is):
//!
//! | entry | content |
//! |---|---|
//! | `node_type` | `1: CA` |
//! | `node_guid` | the device's node GUID, `xxxx:xxxx:xxxx:xxxx` |
//! | `device/net/<if>` | a link to `/sys/class/net/<if>`, the interface holding the address (`lo` for loopback) |
//! | `ports/1/state`, `ports/1/link_layer` | `4: ACTIVE`, `Ethernet` |
//! | `ports/1/gids/<i>` | each GID of the table ([`softrdma::gid::table_of`]), as 8 groups of 4 hex digits |
//! | `ports/1/gid_attrs/types/<i>`, `…/ndevs/<i>` | `RoCE v2`; the interface |
//!
//! One directory per address and network namespace, shared by every program exec runs there.
//! Each file is replaced whole (written beside it, then renamed), so a program reading it while
//! another exec rewrites it sees one content or the other, and entries the device no longer has
//! are removed.

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use softrdma::GidType;

/// An entry of the directory: a file's content, or where a link points.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File(String),
    Link(PathBuf),
}

/// The directory's entries for a device on `ip`, by path relative to it.
fn entries(ip: IpAddr) -> BTreeMap<PathBuf, Entry> {
    let mut e = BTreeMap::new();
    let file = |s: String| Entry::File(s + "\n");
    let guid = softrdma::gid::node_guid(ip);
    let groups = [guid >> 48, guid >> 32, guid >> 16, guid].map(|g| format!("{:04x}", g & 0xffff));
    e.insert("node_type".into(), file("1: CA".into()));
    e.insert("node_guid".into(), file(groups.join(":")));
    e.insert("ports/1/state".into(), file("4: ACTIVE".into()));
    e.insert("ports/1/link_layer".into(), file("Ethernet".into()));
    let netdev = softrdma::gid::interface_name_of(ip);
    if let Some(name) = &netdev {
        let link = Path::new("/sys/class/net").join(name);
        e.insert(Path::new("device/net").join(name), Entry::Link(link));
    }
    for entry in softrdma::gid::table_of(ip) {
        let i = entry.index.to_string();
        let groups: Vec<String> = entry
            .gid
            .0
            .chunks(2)
            .map(|b| format!("{:02x}{:02x}", b[0], b[1]))
            .collect();
        e.insert(Path::new("ports/1/gids").join(&i), file(groups.join(":")));
        let kind = match entry.gid_type {
            GidType::RoceV2 => "RoCE v2",
        };
        e.insert(
            Path::new("ports/1/gid_attrs/types").join(&i),
            file(kind.into()),
        );
        if let Some(name) = &netdev {
            e.insert(
                Path::new("ports/1/gid_attrs/ndevs").join(&i),
                file(name.clone()),
            );
        }
    }
    e
}

/// Writes (or brings up to date) the directory for a device on `ip` and returns its path.
pub(crate) fn write(ip: IpAddr) -> io::Result<PathBuf> {
    let run = softrdma::run_directory().map_err(io::Error::other)?;
    let netns = std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino());
    let root = run.join(format!("sysfs-{ip}-net{netns}"));
    write_tree(&root, &entries(ip))?;
    Ok(root)
}

/// Makes `root` hold exactly `entries`: each missing or different one replaced whole, each
/// one not among them removed.
fn write_tree(root: &Path, entries: &BTreeMap<PathBuf, Entry>) -> io::Result<()> {
    for (rel, entry) in entries {
        let path = root.join(rel);
        let dir = path.parent().expect("an entry has a parent");
        std::fs::create_dir_all(dir)?;
        let current = match entry {
            Entry::File(_) => std::fs::read_to_string(&path).ok().map(Entry::File),
            Entry::Link(_) => std::fs::read_link(&path).ok().map(Entry::Link),
        };
        if current.as_ref() == Some(entry) {
            continue;
        }
        let name = path
            .file_name()
            .expect("an entry has a name")
            .to_string_lossy();
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        match entry {
            Entry::File(content) => std::fs::write(&tmp, content)?,
            Entry::Link(target) => std::os::unix::fs::symlink(target, &tmp)?,
        }
        std::fs::rename(&tmp, &path)?;
    }
    remove_others(root, Path::new(""), entries)
}

/// Removes what lies under `root/rel` that `entries` neither names nor leads to.
fn remove_others(root: &Path, rel: &Path, entries: &BTreeMap<PathBuf, Entry>) -> io::Result<()> {
    for dirent in std::fs::read_dir(root.join(rel))? {
        let dirent = dirent?;
        let child = rel.join(dirent.file_name());
        if entries.contains_key(&child) {
            continue;
        }
        let path = dirent.path();
        if entries.keys().any(|k| k.starts_with(&child)) {
            if dirent.file_type()?.is_dir() {
                remove_others(root, &child, entries)?;
            }
        } else if dirent.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_device_entries_name_lo_and_every_gid() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let e = entries(ip);
        assert_eq!(
            e.get(Path::new("device/net/lo")),
            Some(&Entry::Link("/sys/class/net/lo".into()))
        );
        assert_eq!(
            e.get(Path::new("ports/1/gids/0")),
            Some(&Entry::File(
                "0000:0000:0000:0000:0000:ffff:7f00:0001\n".into()
            ))
        );
        for i in 0..3 {
            let types = Path::new("ports/1/gid_attrs/types").join(i.to_string());
            assert_eq!(e.get(&types), Some(&Entry::File("RoCE v2\n".into())));
            let ndevs = Path::new("ports/1/gid_attrs/ndevs").join(i.to_string());
            assert_eq!(e.get(&ndevs), Some(&Entry::File("lo\n".into())));
        }
        assert!(!e.contains_key(Path::new("ports/1/gids/3")));
    }

    #[test]
    fn rewriting_replaces_changed_entries_and_removes_stale_ones() {
        let dir = std::env::temp_dir().join(format!("softrdma-sysfs-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut e = entries("127.0.0.1".parse().unwrap());
        write_tree(&dir, &e).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("device/net/lo")).unwrap(),
            Path::new("/sys/class/net/lo")
        );
        e.remove(Path::new("device/net/lo"));
        e.insert(
            "device/net/eth9".into(),
            Entry::Link("/sys/class/net/eth9".into()),
        );
        e.insert("node_type".into(), Entry::File("2: SWITCH\n".into()));
        write_tree(&dir, &e).unwrap();
        let net: Vec<_> = std::fs::read_dir(dir.join("device/net"))
            .unwrap()
            .map(|d| d.unwrap().file_name())
            .collect();
        assert_eq!(net, ["eth9"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("node_type")).unwrap(),
            "2: SWITCH\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
