//! `softrdma perf`: perftest's benchmarks (`ib_write_bw` ... `ib_atomic_lat`) on a softrdma
//! device, speaking perftest's out-of-band protocol so either side can be the real perftest
//! on Linux Soft-RoCE or a RoCE NIC, and printing perftest's tables.
//!
//! - [`args`]: the command line, perftest's defaults and limits;
//! - [`output`]: failures, perftest's text, the progress line; [`layout`]: WR ids, strides,
//!   the data pattern;
//! - [`oob`]: connection, resources and key exchanges (via `softrdma_oob::perftest`);
//!   [`watch`]: the watchdog for silent peers;
//! - [`bw`]: bandwidth traffic, sending side; [`recv`]: the receiving side of SEND tests;
//!   [`duplex`]: bidirectional runs (`-b`); [`lat`]: latency traffic;
//! - [`check`]: the data check's stamps and marks; [`verify`]: what the receiving side checks;
//! - [`report`]: banner, address lines, tables, statistics, JSON.
//!
//! `--loopback` runs the server side on a thread of this process (127.0.0.1) and the client
//! on the main thread (127.0.0.2), over real UDP and TCP on the loopback interface.

mod args;
mod bw;
mod check;
mod cmlink;
mod control;
mod duplex;
mod lat;
mod layout;
mod oob;
mod output;
mod recv;
mod report;
mod verify;
mod watch;

use std::io::IsTerminal;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softrdma_oob::perftest::{BwReport, Role};

pub(crate) use args::Args;
use args::{Config, UsageError, Verb};
use oob::Conn;
use output::{PerfError, Printer, Progress};
use report::{BwRow, Outcome, Row, RESULT_LINE};

/// The report a bandwidth client sends its server (perftest's `bw_report_data`).
fn to_report(row: Option<&Row>) -> BwReport {
    match row {
        Some(Row::Bw(r)) => r.to_report(),
        _ => BwReport::default(),
    }
}

/// One side of a run, start to end.
fn run_side(
    cfg: &Config,
    conn: Conn,
    p: &mut Printer,
    progress: &mut Progress,
) -> Result<Outcome, PerfError> {
    // perftest warns while parsing its arguments, before anything else.
    let server = conn.is_server();
    let send_server = server && cfg.test.verb() == Verb::Send && !cfg.duplex;
    if cfg.test.is_bw() && (cfg.no_peak || send_server) && !cfg.no_peak_asked {
        p.always(args::NO_PEAK_WARNING);
    }
    let mut ctx = oob::setup(cfg, conn, p)?;
    let result = traffic(cfg, &mut ctx, p, progress);
    let result = match &ctx.watchdog {
        Some(w) => result.map_err(|e| w.explain(e)),
        None => result,
    };
    ctx.watchdog = None;
    let stats = ctx.device.stats();
    match result {
        Ok(mut out) => {
            if cfg.counters {
                out.device_counters = Some(crate::devinfo::counter_list(&stats));
            }
            Ok(out)
        }
        Err(mut e) => {
            e.counters = Some(crate::devinfo::nonzero_counters(&stats));
            Err(e)
        }
    }
}

/// Everything after the connection is set up: traffic, reports, checks, closing.
fn traffic(
    cfg: &Config,
    ctx: &mut oob::Ctx,
    p: &mut Printer,
    progress: &mut Progress,
) -> Result<Outcome, PerfError> {
    let role = ctx.role;
    let test = cfg.test;
    let verb = test.verb();
    let schedule = ctx.schedule;
    let duplex = cfg.duplex;
    // The server of WRITE/READ/atomic bandwidth (but with -b) and of READ/atomic latency
    // takes no part in the traffic: the device serves it.
    let passive = role == Role::Server
        && !duplex
        && (matches!(verb, Verb::Read | Verb::Atomic) || verb == Verb::Write && test.is_bw());
    // Who sends as a bandwidth client: the client, and with -b the server too.
    let sends_bw = test.is_bw() && (role == Role::Client || duplex);
    // Who receives SENDs: the server of send-bw, both sides of send-lat and of send-bw -b.
    let receives = verb == Verb::Send && (role == Role::Server || !test.is_bw() || duplex);
    // A passive latency server prints no table (its client measures everything).
    let shows_table = !passive || test.is_bw();
    let mut out = Outcome {
        mtu: ctx.mtu.bytes(),
        ..Outcome::default()
    };
    if shows_table {
        p.line(RESULT_LINE);
        p.line(report::table_header(cfg));
    }
    let mut checks = Vec::new();
    let mut sampled = 0u64;
    if !passive {
        // The sizes of the run (UD: shrunk to the path MTU, see `Config::for_path_mtu`).
        for size in ctx.cfg.sizes.clone() {
            let pre = if receives {
                recv::prepost(ctx, size)?
            } else {
                0
            };
            // perftest warms up after posting its work requests, before the size's sync.
            if cfg.warm_up && sends_bw {
                bw::warm_up(ctx, size)?;
            }
            for _ in 0..schedule.keys_before_size {
                ctx.sync()?;
            }
            let row = match test {
                args::TestName::SendBw if duplex => {
                    duplex::send(ctx, size, pre, &mut sampled, progress)?
                }
                _ if sends_bw => bw::client(ctx, size, progress)?,
                args::TestName::SendBw => recv::send_server(ctx, size, pre, &mut sampled)?,
                args::TestName::SendLat => lat::send_lat(ctx, size, pre, progress)?,
                args::TestName::WriteLat => lat::write_lat(ctx, size, progress)?,
                _ => lat::read_lat(ctx, size, progress)?,
            };
            if !schedule.size_report {
                p.result(&row, &row.render(cfg.gbits));
                out.rows.push(row);
            }
            for _ in 0..schedule.keys_after_size {
                ctx.sync()?;
            }
            if schedule.size_report {
                // -b: both sides show the sum of both directions; perftest picks the
                // extra-precision format by this side's own average.
                let (mine, theirs) = duplex::exchange(ctx, &row)?;
                let sum = mine.plus(&theirs);
                let text = sum.render_ext(cfg.gbits && mine.bw_avg < 0.1);
                p.result(&Row::Bw(sum), &text);
                out.rows.push(Row::Bw(sum));
                out.directions.push((mine, theirs));
            }
            for _ in 0..schedule.keys_after_report {
                ctx.sync()?;
            }
            if ctx.softrdma_check() && test == args::TestName::WriteLat {
                checks.push(lat::check_write_lat(ctx, size)?);
            }
        }
        if ctx.softrdma_check() && receives {
            let n = if test.is_bw() {
                format!("{sampled} sampled messages")
            } else {
                "every message".into()
            };
            checks.push(format!(
                "OK ({n} verified: each holds its sender's stamp for its place in the sequence)"
            ));
        }
        if ctx.softrdma_check() && (role == Role::Client || duplex) && verb == Verb::Read {
            checks.push(format!(
                "OK ({} sampled READs verified as they completed, each into a slot poisoned just before)",
                ctx.reads_verified
            ));
        }
    }
    if schedule.bw_report {
        ctx.sync()?;
        let mine = if role == Role::Client {
            to_report(out.rows.last())
        } else {
            BwReport::default()
        };
        let theirs = ctx.sess()?.exchange_bw_report(&mine)?;
        if passive {
            // A passive server shows the client's figures, as perftest does.
            let row = Row::Bw(BwRow::from(theirs));
            p.result(&row, &row.render(cfg.gbits));
            out.rows.push(row);
        }
    }
    if shows_table {
        p.line(RESULT_LINE);
    }
    let sess = ctx.sess.take();
    if schedule.close {
        if let Some(s) = sess {
            s.finish(&ctx.my[0])?;
        }
    } else {
        // ib_write_lat just exits; give our device a moment to acknowledge the peer's last
        // WRITE before it goes away.
        drop(sess);
        std::thread::sleep(Duration::from_millis(50));
    }
    // Between softrdma peers, after perftest's close: the client tells the server how many
    // messages each QP posted (see `check`).
    let counts_needed = schedule.close
        && matches!(
            test,
            args::TestName::WriteBw
                | args::TestName::SendBw
                | args::TestName::AtomicBw
                | args::TestName::AtomicLat
        );
    if ctx.softrdma_check() && counts_needed {
        // What this side posted; atomic warm-ups count, as they hit the peer's targets too.
        let mine: Vec<u64> = if verb == Verb::Atomic {
            ctx.sent
                .iter()
                .zip(&ctx.warmed)
                .map(|(s, w)| s + w)
                .collect()
        } else {
            ctx.sent.clone()
        };
        if duplex {
            let theirs = duplex::swap_counts(ctx, &mine)?;
            checks.push(verify::peer_counts(ctx, &theirs)?);
        } else if role == Role::Client {
            check::send_counts(&mut ctx.peek, &mine)?;
        } else {
            let wait = ctx.stall();
            let counts = check::read_counts(&mut ctx.peek, ctx.qps.len(), wait)?;
            checks.push(verify::peer_counts(ctx, &counts)?);
        }
    }
    // -R: the rdma_cm connections end here, the test QPs' first.
    if let Some(links) = ctx.links.take() {
        links.close(role == Role::Client);
    }
    if let control::Control::Cm(c) = &ctx.peek {
        c.disconnect();
    }
    if (passive || duplex) && cfg.check && verb == Verb::Read {
        // The READ source is ours: its bytes must not have changed, whoever read them.
        checks.push(verify::passive(ctx, &[])?);
    }
    if cfg.check && !ctx.peer_softrdma && checks.is_empty() {
        checks.push("not done (the peer is not a softrdma device)".into());
    }
    if !checks.is_empty() {
        out.check = Some(checks.join("; "));
    }
    out.counters = report::Counters::of(&ctx.send_cq.device().stats().engine);
    out.qp_ends = ctx.qps.len() as u64;
    if cfg.cc_line_bps.is_some() {
        let rates: Vec<String> = ctx
            .qps
            .iter()
            .filter_map(|qp| {
                let mbps = qp.query().cc_rate_mbps?;
                Some(format!("QP {:#06x} {mbps} Mb/s", qp.qp_num()))
            })
            .collect();
        p.line(&format!(" DCQCN rate now  : {}", rates.join(", ")));
    }
    Ok(out)
}

/// `softrdma perf`: exit status 0 on success, 1 if the run failed, 2 on usage errors.
pub(crate) fn run(args: &Args) -> ExitCode {
    let cfg = match args.resolve() {
        Ok(c) => c,
        Err(UsageError(m)) => {
            eprintln!("softrdma perf: error: {m}");
            return ExitCode::from(2);
        }
    };
    let progress_on = std::io::stderr().is_terminal();
    if args.loopback {
        return loopback(&cfg, progress_on);
    }
    let (conn, role) = match &args.server {
        Some(host) if cfg.rdma_cm => (
            Conn::CmConnect(host.clone(), cfg.port.unwrap_or(softrdma_oob::DEFAULT_PORT)),
            Role::Client,
        ),
        None if cfg.rdma_cm => {
            let Some(ip) = cfg.bind else {
                eprintln!(
                    "softrdma perf: error: with -R a server needs --bind IP (its rdma_cm \
                     listener is on a softrdma device, which needs an address)"
                );
                return ExitCode::from(2);
            };
            let port = cfg.port.unwrap_or(softrdma_oob::DEFAULT_PORT);
            (Conn::CmListen(ip, port, None), Role::Server)
        }
        Some(host) => (
            Conn::Connect(host.clone(), cfg.port.unwrap_or(softrdma_oob::DEFAULT_PORT)),
            Role::Client,
        ),
        None => {
            let port = cfg.port.unwrap_or(softrdma_oob::DEFAULT_PORT);
            let l = match cfg.bind {
                Some(ip) => softrdma_oob::listen((ip, port)),
                None => softrdma_oob::listen_any(port),
            };
            match l {
                Ok(l) => (Conn::Listen(l), Role::Server),
                Err(e) => {
                    eprintln!("softrdma perf: cannot listen on TCP port {port}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let mut p = Printer::new(&cfg, true);
    let mut progress = Progress::new(progress_on);
    match run_side(&cfg, conn, &mut p, &mut progress) {
        Ok(out) => {
            finish_text(&cfg, &mut p, out.check.as_deref(), None);
            print_counters(&mut p, &out);
            if cfg.json {
                println!("{}", report::json(&cfg, role, &out));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            progress.finish();
            e.report("");
            ExitCode::FAILURE
        }
    }
}

/// The device's counters after a successful run (`--counters`, text output).
fn print_counters(p: &mut Printer, out: &Outcome) {
    if let (Some(c), true) = (&out.device_counters, p.on) {
        let mut text = Vec::new();
        let _ = crate::devinfo::write_counter_lines(&mut text, c);
        for l in String::from_utf8_lossy(&text).lines() {
            p.line(l);
        }
        if let Some(rss) = report::peak_rss_bytes() {
            let ends = out.qp_ends.max(1);
            p.line(&format!(
                " Memory          : peak RSS {:.1} MiB, {} KiB per QP end ({} QP ends)",
                rss as f64 / f64::from(1 << 20),
                rss / ends / 1024,
                out.qp_ends
            ));
        }
    }
}

/// The data-check lines after the table.
fn finish_text(cfg: &Config, p: &mut Printer, mine: Option<&str>, server: Option<&str>) {
    if !cfg.check {
        return;
    }
    if let Some(c) = mine {
        p.line(&format!(" Data check      : {c}"));
    }
    if let Some(c) = server {
        p.line(&format!(" Data check (server side): {c}"));
    }
}

/// Both sides in this process: server on 127.0.0.1 (a thread), client on 127.0.0.2.
fn loopback(cfg: &Config, progress_on: bool) -> ExitCode {
    let server_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
    let client_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    // -R: the server's rdma_cm listener is on its device; the client starts once it is up.
    let (server_conn, port, ready) = if cfg.rdma_cm {
        let port = cfg.port.unwrap_or(softrdma_oob::DEFAULT_PORT);
        let (tx, rx) = std::sync::mpsc::channel();
        (Conn::CmListen(server_ip, port, Some(tx)), port, Some(rx))
    } else {
        let listener = match TcpListener::bind((server_ip, cfg.port.unwrap_or(0))) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("softrdma perf: cannot listen on {server_ip}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let port = match listener.local_addr() {
            Ok(a) => a.port(),
            Err(e) => {
                eprintln!("softrdma perf: {e}");
                return ExitCode::FAILURE;
            }
        };
        (Conn::Listen(listener), port, None)
    };
    let server_cfg = Config {
        bind: Some(server_ip),
        pcap: None,
        ..cfg.clone()
    };
    let server = std::thread::Builder::new()
        .name("perf-server".into())
        .spawn(move || {
            let mut p = Printer::new(&server_cfg, false);
            let mut progress = Progress::new(false);
            run_side(&server_cfg, server_conn, &mut p, &mut progress)
        });
    let server = match server {
        Ok(h) => h,
        Err(e) => {
            eprintln!("softrdma perf: cannot start the server thread: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client_cfg = Config {
        bind: Some(client_ip),
        ..cfg.clone()
    };
    let client_conn = match ready {
        Some(rx) => {
            // The server's thread ends without a word if it fails before listening.
            let _ = rx.recv_timeout(Duration::from_secs(10));
            Conn::CmConnect(server_ip.to_string(), port)
        }
        None => Conn::Connect(server_ip.to_string(), port),
    };
    let mut p = Printer::new(cfg, true);
    let mut progress = Progress::new(progress_on);
    let client = run_side(&client_cfg, client_conn, &mut p, &mut progress);
    if client.is_err() {
        // The server notices the client's socket closing; do not wait long for it.
        let t = Instant::now();
        while !server.is_finished() && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let server = if server.is_finished() || client.is_ok() {
        server
            .join()
            .unwrap_or_else(|_| Err(PerfError::new("the server thread panicked")))
    } else {
        Err(PerfError::new("the server side did not finish"))
    };
    match (client, server) {
        (Ok(mut out), Ok(s)) => {
            finish_text(cfg, &mut p, out.check.as_deref(), s.check.as_deref());
            out.counters = out.counters.add(s.counters);
            out.qp_ends += s.qp_ends;
            print_counters(&mut p, &out);
            // Both devices are this process's: the server's counters too (the receiving
            // side of a WRITE test, the sending side of a READ test).
            if let (Some(c), true) = (&s.device_counters, p.on) {
                p.line("server counters:");
                let mut text = Vec::new();
                let _ = crate::devinfo::write_counter_lines(&mut text, c);
                for l in String::from_utf8_lossy(&text).lines() {
                    p.line(l);
                }
            }
            if let Some(sc) = s.check {
                out.check = Some(match out.check {
                    Some(c) => format!("client: {c}; server: {sc}"),
                    None => format!("server: {sc}"),
                });
            }
            if cfg.json {
                println!("{}", report::json(cfg, Role::Client, &out));
            }
            ExitCode::SUCCESS
        }
        (Err(e), s) => {
            progress.finish();
            e.report("");
            if let Err(se) = s {
                se.report("server side: ");
            }
            ExitCode::FAILURE
        }
        (Ok(_), Err(e)) => {
            e.report("server side: ");
            ExitCode::FAILURE
        }
    }
}
