//! Limits shared by the subcommands: how long anything may be waited for, and bounded waits
//! for the things the standard library only offers unbounded (accepting a connection).
//!
//! Every duration a user types goes through [`wait_seconds`], so `inf`, `NaN`, negative and
//! absurd values are usage errors (exit status 2, from clap) instead of panics or silent
//! "forever"s.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The longest wait a flag may ask for: one year.
pub(crate) const MAX_WAIT_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// How often a bounded accept looks for a connection.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// clap value parser of a wait in seconds: a finite number from 0 to [`MAX_WAIT_SECS`]
/// (fractions allowed). 0 means "no limit" (see [`limit`]).
pub(crate) fn wait_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !v.is_finite() || !(0.0..=MAX_WAIT_SECS).contains(&v) {
        return Err(format!(
            "{s} is not a number of seconds between 0 and {MAX_WAIT_SECS} (one year)"
        ));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("{s}: {e}"))
}

/// A parsed wait as a limit: zero is none.
pub(crate) fn limit(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// Accepts one connection, giving up after `limit` (`None`: wait as long as it takes).
pub(crate) fn accept_within(
    listener: &TcpListener,
    limit: Option<Duration>,
) -> io::Result<(TcpStream, SocketAddr)> {
    let Some(limit) = limit else {
        return listener.accept();
    };
    let deadline = Instant::now() + limit;
    listener.set_nonblocking(true)?;
    let r = loop {
        match listener.accept() {
            Ok(c) => break Ok(c),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no connection within {} s", fmt_secs(limit.as_secs_f64())),
                    ));
                }
                std::thread::sleep(left.min(ACCEPT_POLL));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    listener.set_nonblocking(false)?;
    let (stream, peer) = r?;
    stream.set_nonblocking(false)?;
    Ok((stream, peer))
}

/// Seconds for a message: `2`, `0.5`.
pub(crate) fn fmt_secs(s: f64) -> String {
    let t = format!("{s:.3}");
    t.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A probability typed on the command line: a number in [0, 1].
pub(crate) fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability in [0, 1]"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_finite_and_bounded() {
        assert_eq!(wait_seconds("0").map(limit), Ok(None));
        assert_eq!(wait_seconds("2"), Ok(Duration::from_secs(2)));
        assert_eq!(wait_seconds("0.25"), Ok(Duration::from_millis(250)));
        for bad in ["inf", "-inf", "NaN", "1e30", "-1", "31536001", "", "x"] {
            assert!(wait_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(fmt_secs(2.0), "2");
        assert_eq!(fmt_secs(0.25), "0.25");
    }
}
