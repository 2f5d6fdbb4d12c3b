//! The compare-and-set loop as a sans-IO state machine.
//!
//! One loop carries a batch of commands (usually one): they are applied in order to the same
//! tree and written together with one compare-and-set, each with its own answer, exactly as if
//! they had run one after another. A driver that gathers the commands of concurrent callers
//! while a write is in flight turns N racing writers into one write instead of N-1 lost races.
//!
//! The loop decides everything (what to read, what to write, whether to retry, when to give up);
//! a driver only performs the store calls it asks for and feeds the results back:
//!
//! ```text
//! start() ─► Get ─► on_get(doc) ─► CompareAndSet{expected, value} ─► on_cas(won)
//!                      │                                                 │ won  ─► Done
//!                      ├─ nothing changed (views, no-ops, errors) ─► Done │ lost ─► Sleep(d) ─► on_slept() ─► Get
//!                      └─ unreadable document ─► Failed (nothing written) └ attempts exhausted ─► Done (all Conflict)
//! ```
//! The binding layer drives it with a Python store's coroutines; the unit tests drive it with
//! in-memory fakes. Because the store is compared against the exact document that was read, a
//! lost race re-applies the command to the fresh tree, so no concurrent edit is ever lost.
//!
//! A driver that already holds a recent copy of the document (the one it last wrote, or the one a
//! store handed back with a lost compare-and-set) may offer it with [`CasLoop::on_cached`]
//! instead of reading: a command that changes that copy goes straight to the compare-and-set
//! (one store round trip instead of two; a stale copy only loses the race), while an answer that
//! would not write (a view, a no-op, a command error) is never given from a copy that may be
//! stale — the loop asks for a fresh [`Step::Get`] first.
use crate::errors::ErrorCode;
use std::time::Duration;

use super::command::{apply, Command, Limits};
use super::error::{ErrorKind, MemoryError};
use super::path::Root;
use super::tree::Tree;

/// Retry policy of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CasConfig {
    /// Read-apply-write cycles before giving up with a conflict error.
    pub max_attempts: u32,
    /// Backoff after the first lost race is drawn uniformly from `[0, base]`, doubling per loss...
    pub backoff_base: Duration,
    /// ...up to this cap (full jitter).
    pub backoff_cap: Duration,
}

/// The default of [`CasConfig::max_attempts`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 32;

impl Default for CasConfig {
    fn default() -> Self {
        CasConfig {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_base: Duration::from_millis(1),
            backoff_cap: Duration::from_millis(50),
        }
    }
}

/// The most read-apply-write cycles a loop may be given.
pub const MAX_ATTEMPTS_LIMIT: u32 = 100_000;

impl CasConfig {
    /// [`CasConfig::with_max_attempts`], [`DEFAULT_MAX_ATTEMPTS`] when none is given.
    pub fn of(max_attempts: Option<i64>) -> Result<CasConfig, MemoryError> {
        Self::with_max_attempts(max_attempts.unwrap_or(i64::from(DEFAULT_MAX_ATTEMPTS)))
    }

    /// The default backoff with `max_attempts` as a caller gives it (any integer): 1 to
    /// [`MAX_ATTEMPTS_LIMIT`].
    pub fn with_max_attempts(max_attempts: i64) -> Result<CasConfig, MemoryError> {
        match u32::try_from(max_attempts) {
            Ok(n) if (1..=MAX_ATTEMPTS_LIMIT).contains(&n) => Ok(CasConfig {
                max_attempts: n,
                ..CasConfig::default()
            }),
            _ => Err(MemoryError::invalid(
                ErrorCode::InvalidArgument,
                format!("max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}, got {max_attempts}"),
            )),
        }
    }
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Read the document (`store.get(key)`), then call [`CasLoop::on_get`] (or offer a recent
    /// copy with [`CasLoop::on_cached`]).
    Get,
    /// `store.compare_and_set(key, expected, value)` (`expected: None` = only if absent), then
    /// call [`CasLoop::on_cas`].
    CompareAndSet { expected: Option<String>, value: String },
    /// Wait this long, then call [`CasLoop::on_slept`].
    Sleep(Duration),
    /// Finished: every command has its answer.
    Done(CasDone),
    /// The document cannot be used (not a memory tree of this root and version), or the driver
    /// misused the loop: every command of the batch fails with this error; nothing was written.
    Failed(MemoryError),
}

/// A finished batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasDone {
    /// One answer per command, in order: the tool result text, or the command's error (the
    /// command changed nothing).
    pub outcomes: Vec<Result<String, MemoryError>>,
    /// Read-apply cycles used (1 = no lost race).
    pub attempts: u32,
    /// False when nothing was written.
    pub written: bool,
}

/// What applying a batch makes of a document: the new tree when something changed, and each
/// command's answer.
type Applied = (Option<Tree>, Vec<Result<String, MemoryError>>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    AwaitGet,
    AwaitCas,
    AwaitSleep,
    Finished,
}

/// One batch's compare-and-set loop.
#[derive(Debug, Clone)]
pub struct CasLoop {
    root: Root,
    commands: Vec<Command>,
    limits: Limits,
    config: CasConfig,
    attempts: u32,
    rng: u64,
    pending: Vec<Result<String, MemoryError>>,
    state: State,
}

impl CasLoop {
    /// A loop for one command. `seed` feeds the backoff jitter (any value; tests pass a fixed
    /// one).
    pub fn new(root: Root, command: Command, limits: Limits, config: CasConfig, seed: u64) -> CasLoop {
        CasLoop::batch(root, vec![command], limits, config, seed)
    }

    /// A loop for several commands, applied in this order and written together.
    pub fn batch(root: Root, commands: Vec<Command>, limits: Limits, config: CasConfig, seed: u64) -> CasLoop {
        CasLoop {
            root,
            commands,
            limits,
            config,
            attempts: 0,
            rng: seed | 1,
            pending: Vec::new(),
            state: State::Idle,
        }
    }

    /// Commands in the batch.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// True for an empty batch.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Cycles used so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The first step (always [`Step::Get`]).
    pub fn start(&mut self) -> Step {
        if self.state != State::Idle {
            return self.misuse("start");
        }
        self.state = State::AwaitGet;
        Step::Get
    }

    /// Applies every command to `doc`: `None` when the document is unreadable (the error),
    /// else the new tree when something changed, and the answers.
    fn apply_all(&self, doc: Option<&str>) -> Result<Applied, MemoryError> {
        let mut tree = Tree::from_json(&self.root, doc)?;
        let mut changed = false;
        let outcomes = self
            .commands
            .iter()
            .map(|cmd| {
                let out = apply(&mut tree, cmd, &self.limits)?;
                changed |= out.changed;
                Ok(out.text)
            })
            .collect();
        Ok((changed.then_some(tree), outcomes))
    }

    /// Offers a copy of the document that may be stale (`None` = absent) in place of a read,
    /// when the loop asks for [`Step::Get`]. Returns [`Step::CompareAndSet`] against that copy
    /// when the batch changes it (counted as an attempt: a won write proves the copy was
    /// current, so every answer computed from it holds), and [`Step::Get`] otherwise: answers
    /// that write nothing (views, no-ops, errors) only ever come from a fresh read. A copy that
    /// is not a readable tree is ignored the same way.
    pub fn on_cached(&mut self, doc: Option<String>) -> Step {
        if self.state != State::AwaitGet {
            return self.misuse("on_cached");
        }
        if self.commands.iter().all(Command::is_read_only) {
            return Step::Get;
        }
        match self.apply_all(doc.as_deref()) {
            Ok((Some(tree), outcomes)) => {
                self.attempts += 1;
                self.pending = outcomes;
                self.state = State::AwaitCas;
                Step::CompareAndSet {
                    expected: doc,
                    value: tree.to_json(),
                }
            }
            _ => Step::Get,
        }
    }

    /// Feeds the document read from the store (`None` = key absent).
    pub fn on_get(&mut self, doc: Option<String>) -> Step {
        if self.state != State::AwaitGet {
            return self.misuse("on_get");
        }
        self.attempts += 1;
        match self.apply_all(doc.as_deref()) {
            Err(e) => self.fail(e),
            Ok((None, outcomes)) => self.finish(outcomes, false),
            Ok((Some(tree), outcomes)) => {
                self.pending = outcomes;
                self.state = State::AwaitCas;
                Step::CompareAndSet {
                    expected: doc,
                    value: tree.to_json(),
                }
            }
        }
    }

    /// Feeds the compare-and-set result (`true` = written).
    pub fn on_cas(&mut self, won: bool) -> Step {
        if self.state != State::AwaitCas {
            return self.misuse("on_cas");
        }
        if won {
            let outcomes = std::mem::take(&mut self.pending);
            return self.finish(outcomes, true);
        }
        self.pending.clear();
        if self.attempts >= self.config.max_attempts {
            let n = self.attempts;
            let outcomes = self
                .commands
                .iter()
                .map(|c| {
                    let cmd = c.name();
                    Err(MemoryError::new(
                        ErrorKind::Conflict,
                        ErrorCode::StoreConflict,
                        format!(
                            "{cmd} gave up after {n} compare-and-set attempts: other writers changed the memory \
                             tree every time; nothing was written. Call the command again (view the file first \
                             if it depends on the current text)"
                        ),
                    ))
                })
                .collect();
            return self.finish(outcomes, false);
        }
        let d = self.backoff();
        if d.is_zero() {
            self.state = State::AwaitGet;
            return Step::Get;
        }
        self.state = State::AwaitSleep;
        Step::Sleep(d)
    }

    /// Call after a [`Step::Sleep`].
    pub fn on_slept(&mut self) -> Step {
        if self.state != State::AwaitSleep {
            return self.misuse("on_slept");
        }
        self.state = State::AwaitGet;
        Step::Get
    }

    /// Full-jitter exponential backoff after `attempts` lost races.
    fn backoff(&mut self) -> Duration {
        let shift = (self.attempts.saturating_sub(1)).min(20);
        let base = self.config.backoff_base.as_micros() as u64;
        let cap = (base.saturating_mul(1u64 << shift)).min(self.config.backoff_cap.as_micros() as u64);
        if cap == 0 {
            return Duration::ZERO;
        }
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        Duration::from_micros(r % (cap + 1))
    }

    fn finish(&mut self, outcomes: Vec<Result<String, MemoryError>>, written: bool) -> Step {
        self.state = State::Finished;
        Step::Done(CasDone {
            outcomes,
            attempts: self.attempts,
            written,
        })
    }

    fn fail(&mut self, e: MemoryError) -> Step {
        self.state = State::Finished;
        self.pending.clear();
        Step::Failed(e)
    }

    fn misuse(&mut self, call: &str) -> Step {
        let state = self.state;
        self.fail(MemoryError::new(
            ErrorKind::Corrupt,
            ErrorCode::InternalError,
            format!(
                "memory compare-and-set loop misused: {call} called in state {state:?}; this is a bug in the driver"
            ),
        ))
    }
}
