//! Fault injection on a device's own wire: datagrams lost, duplicated, reordered, delayed or
//! corrupted on the way out of and into the device ([`DeviceConfig::faults`]), so that an
//! application's error handling can be tried without root, netem or a second host.
//!
//! Every datagram the device sends, and every one it receives, draws its fate from a seeded
//! generator, independently on each path: with `loss` 0.05 a round trip through the device
//! loses its request or its answer about one time in ten. Each path has a generator of its
//! own and draws in the order its datagrams pass, so the same seed and the same sequence of
//! packets sent (one thread posting) give the same faults on the way out, whenever the
//! answers come in. The transport sees what a faulty network would show it:
//! a lost datagram is simply not there, a corrupted one fails its ICRC at the receiver
//! (`drops.bad_icrc`), a duplicate arrives twice, a delayed or reordered one arrives late.
//! Each fault is counted in [`IoCounters`](crate::IoCounters) (`injected_*`): a datagram
//! lost on the way out is not counted as sent (`tx_datagrams`, what the socket took), and one
//! lost on the way in was received from the socket (`rx_datagrams`) but never reaches the
//! transport. So on a path that loses nothing else, what one device sent is what its peer
//! received, and what its engine built is what it sent plus `injected_tx_drops`, less
//! `injected_tx_duplicates`.
//!
//! [`DeviceConfig::faults`]: crate::DeviceConfig::faults

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use softrdma_proto::{DatagramMeta, Instant};

/// The most a reordered datagram is held back beyond [`FaultConfig::delay`]: long enough for
/// the datagrams of a burst behind it to overtake it, short next to any retransmit timeout.
pub const REORDER_SPAN: Duration = Duration::from_micros(100);

/// What the device does to its datagrams, each path on its own (see the module docs).
/// [`FaultConfig::NONE`], the default, does nothing and costs nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability that a datagram is held back by up to [`REORDER_SPAN`], so that later ones
    /// overtake it.
    pub reorder: f64,
    /// Delay added to every datagram.
    pub delay: Duration,
    /// Probability that one ICRC-covered bit of a datagram is flipped.
    pub corrupt: f64,
    /// Seed of every draw.
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> FaultConfig {
        FaultConfig::NONE
    }
}

impl FaultConfig {
    /// No faults.
    pub const NONE: FaultConfig = FaultConfig {
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        delay: Duration::ZERO,
        corrupt: 0.0,
        seed: 1,
    };

    /// The environment variable the drop-in libraries read a fault specification from
    /// (`softrdma exec --loss …` sets it).
    pub const ENV: &'static str = "SOFTRDMA_FAULTS";

    /// Whether nothing is injected.
    pub fn is_none(&self) -> bool {
        self.loss == 0.0
            && self.duplicate == 0.0
            && self.reorder == 0.0
            && self.delay.is_zero()
            && self.corrupt == 0.0
    }

    /// The specification in the environment ([`FaultConfig::ENV`]); [`FaultConfig::NONE`]
    /// when it is unset or empty.
    pub fn from_env() -> Result<FaultConfig, FaultSpecError> {
        match std::env::var(Self::ENV) {
            Ok(s) if !s.trim().is_empty() => s.parse(),
            _ => Ok(FaultConfig::NONE),
        }
    }

    /// Whether every probability is within 0..=1 and the delay at most [`MAX_DELAY_US`]
    /// (what [`Device::open`](crate::Device::open) checks).
    pub fn validate(&self) -> Result<(), FaultSpecError> {
        let probabilities = [
            ("loss", self.loss),
            ("dup", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ];
        for (key, p) in probabilities {
            if !(0.0..=1.0).contains(&p) {
                return Err(FaultSpecError::BadValue {
                    key: key.to_owned(),
                    value: p.to_string(),
                });
            }
        }
        if self.delay > Duration::from_micros(MAX_DELAY_US) {
            return Err(FaultSpecError::BadValue {
                key: "delay-us".to_owned(),
                value: self.delay.as_micros().to_string(),
            });
        }
        Ok(())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), FaultSpecError> {
        let bad = || FaultSpecError::BadValue {
            key: key.to_owned(),
            value: value.to_owned(),
        };
        let probability = || -> Result<f64, FaultSpecError> {
            let p: f64 = value.parse().map_err(|_| bad())?;
            if (0.0..=1.0).contains(&p) {
                Ok(p)
            } else {
                Err(bad())
            }
        };
        match key {
            "loss" => self.loss = probability()?,
            "dup" => self.duplicate = probability()?,
            "reorder" => self.reorder = probability()?,
            "corrupt" => self.corrupt = probability()?,
            "delay-us" => {
                let us: u64 = value.parse().map_err(|_| bad())?;
                if us > MAX_DELAY_US {
                    return Err(bad());
                }
                self.delay = Duration::from_micros(us);
            }
            "seed" => self.seed = value.parse().map_err(|_| bad())?,
            _ => return Err(FaultSpecError::UnknownKey(key.to_owned())),
        }
        Ok(())
    }
}

/// The longest delay accepted: one second, beyond any retransmit timeout worth testing.
pub const MAX_DELAY_US: u64 = 1_000_000;

/// The specification's form: `key=value` pairs separated by commas, keys `loss`, `dup`,
/// `reorder`, `corrupt` (probabilities 0..=1), `delay-us` (microseconds) and `seed`, e.g.
/// `loss=0.05,dup=0.01,seed=7`. Keys not given keep [`FaultConfig::NONE`]'s values.
impl FromStr for FaultConfig {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<FaultConfig, FaultSpecError> {
        let mut cfg = FaultConfig::NONE;
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| FaultSpecError::NotKeyValue(item.to_owned()))?;
            cfg.set(key.trim(), value.trim())?;
        }
        Ok(cfg)
    }
}

/// The specification [`FromStr`] reads back.
impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss={},dup={},reorder={},delay-us={},corrupt={},seed={}",
            self.loss,
            self.duplicate,
            self.reorder,
            self.delay.as_micros(),
            self.corrupt,
            self.seed
        )
    }
}

/// Why a fault specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    /// An item without `=`.
    #[error("{0:?} is not key=value (keys: loss, dup, reorder, delay-us, corrupt, seed)")]
    NotKeyValue(String),
    /// A key that is not one of the six.
    #[error("unknown fault {0:?} (keys: loss, dup, reorder, delay-us, corrupt, seed)")]
    UnknownKey(String),
    /// A value out of range or not a number.
    #[error("{key}={value:?}: a probability is 0..=1, delay-us 0..=1000000, seed a u64")]
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
    },
}

/// One datagram's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Fate {
    pub drop: bool,
    pub duplicate: bool,
    /// Byte and bit to flip, counted from the start of the UDP payload.
    pub corrupt: Option<(usize, u8)>,
    /// How long to hold it back (zero: not at all).
    pub hold: Duration,
}

/// A datagram held back, and where it goes when it is due.
pub(crate) struct Held {
    pub due: Instant,
    pub bytes: Vec<u8>,
    pub corrupt: Option<(usize, u8)>,
    pub route: Route,
}

/// A held datagram's way on: out to `dst` from `src_port`, or in with `meta`.
#[derive(Clone, Copy)]
pub(crate) enum Route {
    Out {
        dst: SocketAddr,
        src_port: u16,
        ecn: u8,
    },
    In(DatagramMeta),
}

/// The first byte of a RoCEv2 datagram a corruption may flip: the BTH's fifth byte (FECN,
/// BECN and reserved bits) is masked out of the ICRC, so a flip there would go unnoticed,
/// which no real corruption the ICRC is for does.
const FIRST_COVERED: usize = 5;

/// The faults of one device: the draws, what is held back, and the counts.
pub(crate) struct Faults {
    cfg: FaultConfig,
    /// One generator per path, so that what happens to the datagrams sent depends only on
    /// the sequence of datagrams sent, however the received ones interleave with them.
    tx: SplitMix,
    rx: SplitMix,
    /// Held datagrams, in the order they were held (not necessarily due order).
    pub held: VecDeque<Held>,
}

/// splitmix64: a statistically sound generator in three lines, seeded by any u64.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (no draw for 0, so a fault not asked for does not shift the
    /// sequence of the others).
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

impl Faults {
    pub(crate) fn new(cfg: FaultConfig) -> Faults {
        Faults {
            cfg,
            tx: SplitMix(cfg.seed),
            // Another stream of the same seed.
            rx: SplitMix(cfg.seed ^ 0x5bd1_e995_9e37_79b9),
            held: VecDeque::new(),
        }
    }

    /// The fate of a datagram of `len` bytes on its way out (`outgoing`) or in.
    pub(crate) fn draw(&mut self, len: usize, outgoing: bool) -> Fate {
        let cfg = self.cfg;
        let g = if outgoing { &mut self.tx } else { &mut self.rx };
        if g.chance(cfg.loss) {
            return Fate {
                drop: true,
                ..Fate::default()
            };
        }
        let corrupt = (len > FIRST_COVERED && g.chance(cfg.corrupt)).then(|| {
            let r = g.next_u64();
            let span = (len - FIRST_COVERED) as u64;
            (FIRST_COVERED + (r % span) as usize, ((r >> 32) % 8) as u8)
        });
        let duplicate = g.chance(cfg.duplicate);
        let mut hold = cfg.delay;
        if g.chance(cfg.reorder) {
            let span = REORDER_SPAN.as_nanos() as u64;
            hold += Duration::from_nanos(1 + g.next_u64() % span);
        }
        Fate {
            drop: false,
            duplicate,
            corrupt,
            hold,
        }
    }

    /// When the earliest held datagram is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.due).min()
    }

    /// Takes the held datagrams due at `now` that go the way `outgoing` says, in the order
    /// they were held.
    pub(crate) fn take_due(&mut self, now: Instant, outgoing: bool) -> Vec<Held> {
        if !self.held.iter().any(|h| h.due <= now) {
            return Vec::new();
        }
        let (due, keep): (VecDeque<Held>, VecDeque<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.due <= now && matches!(h.route, Route::Out { .. }) == outgoing);
        self.held = keep;
        due.into()
    }
}

/// Flips `bit` of byte `at` in `bytes`, if it is there.
pub(crate) fn flip(bytes: &mut [u8], (at, bit): (usize, u8)) {
    if let Some(b) = bytes.get_mut(at) {
        *b ^= 1 << bit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse() {
        let c: FaultConfig = "loss=0.05, dup=0.01,reorder=0.5,delay-us=250,corrupt=1,seed=7"
            .parse()
            .unwrap();
        assert_eq!(
            c,
            FaultConfig {
                loss: 0.05,
                duplicate: 0.01,
                reorder: 0.5,
                delay: Duration::from_micros(250),
                corrupt: 1.0,
                seed: 7,
            }
        );
        assert_eq!(c.to_string().parse::<FaultConfig>().unwrap(), c);
        assert!("".parse::<FaultConfig>().unwrap().is_none());
        assert!(!"delay-us=1".parse::<FaultConfig>().unwrap().is_none());
    }

    #[test]
    fn test_parse_bad() {
        assert_eq!(
            "loss=1.5".parse::<FaultConfig>(),
            Err(FaultSpecError::BadValue {
                key: "loss".into(),
                value: "1.5".into()
            })
        );
        assert!(matches!(
            "los=0.1".parse::<FaultConfig>(),
            Err(FaultSpecError::UnknownKey(k)) if k == "los"
        ));
        assert!(matches!(
            "loss".parse::<FaultConfig>(),
            Err(FaultSpecError::NotKeyValue(_))
        ));
        assert!("delay-us=1000001".parse::<FaultConfig>().is_err());
        assert!("loss=NaN".parse::<FaultConfig>().is_err());
    }

    #[test]
    fn draws_repeat_for_a_seed_and_follow_the_probabilities() {
        let cfg = FaultConfig {
            loss: 0.2,
            duplicate: 0.1,
            corrupt: 0.05,
            reorder: 0.1,
            seed: 42,
            ..FaultConfig::NONE
        };
        let run = |cfg| {
            let mut f = Faults::new(cfg);
            (0..20_000).map(|_| f.draw(1000, true)).collect::<Vec<_>>()
        };
        let a = run(cfg);
        assert_eq!(a, run(cfg), "same seed, same fates");
        assert_ne!(a, run(FaultConfig { seed: 43, ..cfg }));
        let share = |pred: fn(&Fate) -> bool| a.iter().filter(|f| pred(f)).count() as f64 / 2e4;
        assert!((share(|f| f.drop) - 0.2).abs() < 0.015);
        // The others are drawn for the datagrams not lost.
        assert!((share(|f| f.duplicate) - 0.08).abs() < 0.015);
        assert!((share(|f| f.corrupt.is_some()) - 0.04).abs() < 0.01);
        assert!((share(|f| !f.hold.is_zero()) - 0.08).abs() < 0.015);
        for f in &a {
            if let Some((at, bit)) = f.corrupt {
                assert!((FIRST_COVERED..1000).contains(&at) && bit < 8);
            }
            assert!(f.hold <= REORDER_SPAN);
        }
    }

    #[test]
    fn no_faults_draw_nothing() {
        let mut f = Faults::new(FaultConfig::NONE);
        assert!((0..1000).all(|_| f.draw(100, true) == Fate::default()));
        assert!((0..1000).all(|_| f.draw(100, false) == Fate::default()));
    }
}
