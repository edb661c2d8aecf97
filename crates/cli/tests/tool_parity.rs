//! Every option the imitated programs list in their `--help` is taken by softrdma's
//! counterpart, or refused by it and named in the table of refusals of `docs/perf.md` (section
//! "The imitated tools' flags"), which this test reads.
//!
//! Whether softrdma takes an option is asked of softrdma itself, not of its `--help`: the
//! counterpart runs with the option (and a valid value) as a client of a closed TCP port, or
//! on an address the host does not have, so it stops right after its usage checks. Exit
//! status 2 is a refusal (clap's unknown argument and softrdma's own usage errors alike, such
//! as an option one mode of a subcommand refuses); any other status means the option passed.
//! Checks made only after the peer answered are beyond this test.
//!
//! A program that is not installed is reported and skipped (`.ci/run` installs perftest,
//! ibverbs-utils and rdmacm-utils).

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

/// An address no host interface has: a device or a server bound to it fails at once.
const NO_SUCH_ADDR: &str = "192.0.2.1";

/// One imitated program and how softrdma plays it.
struct Counterpart {
    tool: &'static str,
    /// The softrdma subcommand and the arguments that make it this program.
    command: &'static [&'static str],
    /// Arguments that make it a client stopping right after its usage checks, each group
    /// with the option spellings that take its place when probed (`{port}`: a closed port).
    base: &'static [(&'static [&'static str], &'static [&'static str])],
}

const PINGPONG_BASE: &[(&[&str], &[&str])] = &[
    (&["127.0.0.1"], &[]),
    (&["-p", "{port}"], &["-p", "--port"]),
];
const PERF_BASE: &[(&[&str], &[&str])] = &[
    (&["127.0.0.1"], &[]),
    (&["-p", "{port}"], &["-p", "--port"]),
];
/// The client's device on an address the host lacks; probing `-s` (the server) takes the
/// client's place.
const RPING_BASE: &[(&[&str], &[&str])] = &[
    (&["-c"], &["-c", "-s"]),
    (&["-a", "127.0.0.1"], &["-a", "-s"]),
    (&["-I", NO_SUCH_ADDR], &["-I", "-s"]),
    (&["-p", "{port}"], &["-p"]),
];
/// `-s` is the server to connect to, `-b` the local address (the host lacks it).
const CMATOSE_BASE: &[(&[&str], &[&str])] = &[
    (&["-s", "127.0.0.1"], &["-s"]),
    (&["-b", NO_SUCH_ADDR], &["-b"]),
];

const COUNTERPARTS: &[Counterpart] = &[
    Counterpart {
        tool: "ibv_rc_pingpong",
        command: &["pingpong"],
        base: PINGPONG_BASE,
    },
    Counterpart {
        tool: "ibv_uc_pingpong",
        command: &["pingpong", "--transport", "UC"],
        base: PINGPONG_BASE,
    },
    Counterpart {
        tool: "ibv_ud_pingpong",
        command: &["pingpong", "--transport", "UD"],
        base: PINGPONG_BASE,
    },
    Counterpart {
        tool: "ibv_srq_pingpong",
        command: &["pingpong", "--srq"],
        base: PINGPONG_BASE,
    },
    Counterpart {
        tool: "ib_write_bw",
        command: &["perf", "write-bw"],
        base: PERF_BASE,
    },
    Counterpart {
        tool: "ib_read_bw",
        command: &["perf", "read-bw"],
        base: PERF_BASE,
    },
    Counterpart {
        tool: "ib_send_bw",
        command: &["perf", "send-bw"],
        base: PERF_BASE,
    },
    Counterpart {
        tool: "ib_atomic_bw",
        command: &["perf", "atomic-bw"],
        base: PERF_BASE,
    },
    Counterpart {
        tool: "ib_write_lat",
        command: &["perf", "write-lat"],
        base: PERF_BASE,
    },
    Counterpart {
        tool: "ib_read_lat",
        command: &["perf", "read-lat"],
        base: PERF_BASE,
    },
    Counterpart {
        tool: "ib_send_lat",
        command: &["perf", "send-lat"],
        base: PERF_BASE,
    },
    Counterpart {
        tool: "ib_atomic_lat",
        command: &["perf", "atomic-lat"],
        base: PERF_BASE,
    },
    Counterpart {
        tool: "rping",
        command: &["rping"],
        base: RPING_BASE,
    },
    Counterpart {
        tool: "ucmatose",
        command: &["ucmatose"],
        base: CMATOSE_BASE,
    },
    Counterpart {
        tool: "udaddy",
        command: &["udaddy"],
        base: CMATOSE_BASE,
    },
];

/// What follows `option` on a probe's command line: a value valid for `tool`, or nothing for
/// a flag. An option softrdma takes with a value but that has none here is refused by clap
/// ("a value is required"), and the failure says so.
fn sample(tool: &str, option: &str, port: &str) -> Vec<String> {
    let perftest = tool.starts_with("ib_");
    let v: &[&str] = match option {
        "-p" | "--port" if tool == "udaddy" => &["0x111"], // udaddy's -p is the port space
        "-p" | "--port" => &[port],
        "-s" if tool == "rping" => &["-a", NO_SUCH_ADDR], // the server, on no address
        "-s" if matches!(tool, "ucmatose" | "udaddy") => &["127.0.0.1"],
        "-b" | "-I" if !perftest => &[NO_SUCH_ADDR],
        "-a" if tool == "rping" => &["127.0.0.1"],
        "-P" if tool == "ucmatose" => &["tcp"],
        "-P" if tool == "udaddy" => &["udp"],
        "-S" if !perftest => &["100"],
        "-C" if !perftest => &["10"],
        "-c" if matches!(tool, "ucmatose" | "udaddy") => &["1"],
        "-c" | "--connection" if perftest => &["RC"],
        "-d" if tool == "rping" => &[], // rping's -d is its debug output
        "-d" | "--ib-dev" => &["softrdma0"],
        "-i" | "--ib-port" => &["1"],
        "-s" | "--size" => &["64"],
        "-m" | "--mtu" => &["1024"],
        "-r" | "--rx-depth" => &["512"],
        "-n" | "--iters" => &["10"],
        "-l" | "--sl" => &["0"],
        "-g" | "--gid-idx" => &["1"],
        "-q" | "--num-qp" | "--qp" => &["2"],
        "-D" | "--duration" => &["1"],
        "-t" | "--tx-depth" => &["16"],
        "-Q" | "--cq-mod" => &["1"],
        "-x" | "--gid-index" => &["1"],
        "-o" | "--outs" => &["1"],
        "-I" | "--inline_size" => &["0"],
        "-A" | "--atomic_type" => &["FETCH_AND_ADD"],
        "--output" if tool.ends_with("_lat") => &["latency"],
        "--output" => &["bandwidth"],
        _ => &[],
    };
    v.iter().map(|s| s.to_string()).collect()
}

/// The program's path, if it is installed.
fn installed(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Runs `cmd` to its end (at most 30 s), stdin closed.
fn run(mut cmd: Command, what: &str) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!(
                "{what} did not stop after its usage checks:\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    child.wait_with_output().expect("output")
}

/// Every option `help` names, in order: `--long` names, short ones, and bundles of short
/// flags such as rping's `[-vVd]`. The programs print their usage to stdout or stderr and exit
/// 0 or not; the caller hands over both streams.
fn options_in(help: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let bytes = help.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = bytes[i] == b'-'
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || b"-_".contains(&bytes[i - 1])));
        if !starts {
            i += 1;
            continue;
        }
        let long = bytes.get(i + 1) == Some(&b'-');
        let from = if long { i + 2 } else { i + 1 };
        let mut end = from;
        while end < bytes.len()
            && (bytes[end].is_ascii_alphanumeric() || (long && b"-_".contains(&bytes[end])))
        {
            end += 1;
        }
        let name = help[from..end].trim_end_matches('-');
        if name.as_bytes().first().is_some_and(u8::is_ascii_alphabetic) {
            let found: Vec<String> = if long {
                vec![format!("--{name}")]
            } else {
                name.chars().map(|c| format!("-{c}")).collect()
            };
            for f in found {
                if !out.contains(&f) {
                    out.push(f);
                }
            }
        }
        i = end.max(i + 1);
    }
    out
}

/// A row of the table: the tool patterns it covers, its options and its reason.
struct Refusal {
    tools: Vec<String>,
    options: Vec<String>,
    reason: String,
}

/// The table of refusals in docs/perf.md's section on the imitated tools' flags.
fn refusals() -> Vec<Refusal> {
    let manual =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/perf.md"))
            .expect("docs/perf.md");
    let section = manual
        .split("\n## The imitated tools' flags\n")
        .nth(1)
        .expect("docs/perf.md has a section \"The imitated tools' flags\"");
    let section = section.split("\n## ").next().unwrap_or(section);
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let rows: Vec<Refusal> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 3, "refusal row {l:?}");
            Refusal {
                tools: ticked(cells[0]),
                options: ticked(cells[1]),
                reason: cells[2].trim().to_owned(),
            }
        })
        .collect();
    for r in &rows {
        assert!(
            !r.tools.is_empty() && !r.options.is_empty() && r.reason.len() > 10,
            "refusal row without tools, options or a reason: {:?} {:?} {:?}",
            r.tools,
            r.options,
            r.reason
        );
        assert!(
            r.options.iter().all(|o| o.starts_with('-')),
            "{:?}",
            r.options
        );
    }
    assert!(
        rows.len() >= 10,
        "the table of refusals in docs/perf.md: {} rows",
        rows.len()
    );
    rows
}

/// `pattern` with `*` matching any run of characters.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.len() >= head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
        }
    }
}

/// The reason docs/perf.md gives for refusing `option` of `tool`, if it lists it.
fn refusal_of<'a>(rows: &'a [Refusal], tool: &str, option: &str) -> Option<&'a str> {
    rows.iter()
        .find(|r| r.tools.iter().any(|t| glob(t, tool)) && r.options.iter().any(|o| o == option))
        .map(|r| r.reason.as_str())
}

/// A TCP port nothing listens on (one just given up by this process).
fn closed_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port().to_string()
}

/// softrdma's counterpart run with `probed` (an option and its value; none: the base alone).
fn probe(c: &Counterpart, probed: &[String], port: &str) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(c.command);
    let option = probed.first().map(String::as_str);
    for (args, displaced_by) in c.base {
        if option.is_some_and(|o| displaced_by.contains(&o)) {
            continue;
        }
        cmd.args(args.iter().map(|a| a.replace("{port}", port)));
    }
    cmd.args(probed);
    let what = format!("softrdma {} … {}", c.command.join(" "), probed.join(" "));
    run(cmd, &what)
}

fn refused(o: &Output) -> bool {
    o.status.code() == Some(2)
}

#[test]
fn every_option_of_the_imitated_tools_is_taken_or_refused_for_a_reason() {
    let rows = refusals();
    let mut problems: Vec<String> = Vec::new();
    let mut listed_unused: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let (mut tools, mut accepted, mut refusals_checked) = (0, 0, 0);
    for c in COUNTERPARTS {
        let Some(path) = installed(c.tool) else {
            eprintln!("tool parity: {} is not installed; skipping it", c.tool);
            continue;
        };
        tools += 1;
        let port = closed_port();
        let help = run(
            {
                let mut cmd = Command::new(&path);
                cmd.arg("--help");
                cmd
            },
            &format!("{} --help", c.tool),
        );
        let help = format!(
            "{}{}",
            String::from_utf8_lossy(&help.stdout),
            String::from_utf8_lossy(&help.stderr)
        );
        let options = options_in(&help);
        // Every one of these programs has a port option: an empty or foreign text is no help.
        assert!(
            options.len() >= 8 && options.iter().any(|o| o == "-p"),
            "{}: no options found in its --help:\n{help}",
            c.tool
        );
        // The probe itself must tell the two apart: the base alone passes, nonsense does not.
        let base = probe(c, &[], &port);
        assert!(
            !refused(&base),
            "{}: the probe's base command is refused:\n{}",
            c.tool,
            String::from_utf8_lossy(&base.stderr)
        );
        assert!(
            refused(&probe(c, &["--no-such-option".into()], &port)),
            "{}: an unknown option was not refused",
            c.tool
        );
        for option in &options {
            let mut probed = vec![option.clone()];
            probed.extend(sample(c.tool, option, &port));
            let o = probe(c, &probed, &port);
            match (refused(&o), refusal_of(&rows, c.tool, option)) {
                (false, None) => accepted += 1,
                (true, Some(_)) => refusals_checked += 1,
                (true, None) => problems.push(format!(
                    "{}: softrdma {} refuses {} (not in the table of refusals in docs/perf.md): {}",
                    c.tool,
                    c.command.join(" "),
                    probed.join(" "),
                    String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .next()
                        .unwrap_or("")
                )),
                (false, Some(why)) => problems.push(format!(
                    "{}: docs/perf.md lists {option} as refused ({why}), but softrdma {} takes it",
                    c.tool,
                    c.command.join(" ")
                )),
            }
        }
        for r in rows
            .iter()
            .filter(|r| r.tools.iter().any(|t| glob(t, c.tool)))
        {
            for o in r.options.iter().filter(|o| !options.contains(o)) {
                listed_unused
                    .entry(c.tool.to_owned())
                    .or_default()
                    .insert(o.clone());
            }
        }
    }
    for (tool, opts) in &listed_unused {
        eprintln!("tool parity: note: {tool}'s --help does not list {opts:?}, which docs/perf.md refuses for it");
    }
    eprintln!(
        "tool parity: {tools} tools checked, {accepted} options taken, {refusals_checked} refused as docs/perf.md lists"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn options_are_read_from_help_texts_as_the_programs_print_them() {
    let perftest = "  -a, --all  Run sizes from 2 till 2^23\n      --out_json_file=<file>  \
                    Name (Default: perftest_out.json)\n  -L, --hop_limit=<hop_limit>  Values 0-255\n";
    assert_eq!(
        options_in(perftest),
        ["-a", "--all", "--out_json_file", "-L", "--hop_limit"]
    );
    let rping = "rping -s [-vVd] [-S size]\n\t-s\t\tserver side.  To bind to any address with \
                 IPv6 use -a ::0\n";
    assert_eq!(options_in(rping), ["-s", "-v", "-V", "-d", "-S", "-a"]);
    let cmatose = "usage: ucmatose\n\t[-m(igrate)]\n\t[-p port_space - 0x111 for UDP]\n";
    assert_eq!(options_in(cmatose), ["-m", "-p"]);
}

#[test]
fn refusals_apply_to_the_tools_their_pattern_names() {
    assert!(glob("ib_*", "ib_write_bw"));
    assert!(glob("ib_*_lat", "ib_send_lat"));
    assert!(!glob("ib_*_lat", "ib_send_bw"));
    assert!(!glob("ibv_rc_pingpong", "ibv_uc_pingpong"));
    assert!(glob("rping", "rping"));
}
