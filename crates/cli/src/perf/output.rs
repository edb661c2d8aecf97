//! What a run shows: its failure ([`PerfError`]), perftest's text ([`Printer`]) and the
//! progress line ([`Progress`]). Every other module of `perf` reports through these, so they
//! depend only on what is printed: the flags (`args`) and the result rows (`report`).

use std::fmt;
use std::io::Write;
use std::time::{Duration, Instant};

use super::args::{Config, OutputLevel};
use super::report::Row;

/// A failed run, with the message to print.
#[derive(Debug)]
pub(crate) struct PerfError {
    msg: String,
    /// The device's non-zero counters when the run failed after the device was up.
    pub(crate) counters: Option<Vec<(String, u64)>>,
}

impl PerfError {
    pub(crate) fn new(msg: impl Into<String>) -> PerfError {
        PerfError {
            msg: msg.into(),
            counters: None,
        }
    }

    /// A data-check failure.
    pub(crate) fn check(msg: impl Into<String>) -> PerfError {
        PerfError::new(format!("data check failed: {}", msg.into()))
    }

    /// Prints the message and, if known, the device's counters, to stderr.
    pub(crate) fn report(&self, prefix: &str) {
        eprintln!("softrdma perf: {prefix}{}", self.msg);
        if let Some(c) = &self.counters {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "softrdma perf: {prefix}device counters at the failure (non-zero):"
            );
            let _ = crate::devinfo::write_counter_lines(&mut err, c);
        }
    }
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl<E: std::error::Error> From<E> for PerfError {
    fn from(e: E) -> PerfError {
        PerfError::new(e.to_string())
    }
}

/// Where perftest's text goes: stdout, or nowhere (the loopback server, `--json`).
pub(crate) struct Printer {
    pub(crate) on: bool,
    /// `--output`: only each result's figure (and the warnings perftest prints regardless).
    pub(crate) figures: Option<OutputLevel>,
}

impl Printer {
    /// A printer for `cfg`'s text (`on`: not the loopback server, not `--json`).
    pub(crate) fn new(cfg: &Config, on: bool) -> Printer {
        Printer {
            on: on && !cfg.json,
            figures: cfg.output,
        }
    }

    /// A line of perftest's text: banners, tables, notes (none with `--output`).
    pub(crate) fn line(&mut self, s: &str) {
        if self.figures.is_none() {
            self.always(s);
        }
    }

    /// A line perftest prints whatever `--output` says (its argument warnings).
    pub(crate) fn always(&mut self, s: &str) {
        if self.on {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{s}");
            let _ = out.flush();
        }
    }

    /// A result: its table row `text`, or with `--output` its one figure as perftest prints
    /// it (`%lf`).
    pub(crate) fn result(&mut self, row: &Row, text: &str) {
        match self.figures {
            Some(level) => self.always(&format!("{:.6}", row.figure(level))),
            None => self.line(text),
        }
    }
}

/// A one-line progress display for long runs, on stderr when it is a terminal.
pub(crate) struct Progress {
    on: bool,
    label: String,
    started: Instant,
    last: Instant,
    shown: bool,
}

impl Progress {
    pub(crate) fn new(on: bool) -> Progress {
        let now = Instant::now();
        Progress {
            on,
            label: String::new(),
            started: now,
            last: now,
            shown: false,
        }
    }

    pub(crate) fn start(&mut self, label: &str) {
        if self.on {
            self.label = label.to_owned();
            self.started = Instant::now();
            self.last = self.started;
        }
    }

    /// Shows `done` of `total` messages, at most four times a second and only once the run
    /// has lasted a second.
    pub(crate) fn tick(&mut self, done: u64, total: Option<u64>) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.last) < Duration::from_millis(250)
            || now.duration_since(self.started) < Duration::from_secs(1)
        {
            return;
        }
        self.last = now;
        let secs = now.duration_since(self.started).as_secs();
        let text = match total {
            Some(t) => format!(
                " {}: {done}/{t} ({}%), {secs} s",
                self.label,
                done * 100 / t.max(1)
            ),
            None => format!(" {}: {done} messages, {secs} s", self.label),
        };
        eprint!("\r{text}\x1b[K");
        self.shown = true;
    }

    pub(crate) fn finish(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }
}
