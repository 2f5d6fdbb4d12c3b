//! The compare-and-set loop as a sans-IO state machine.
//!
//! The loop decides everything (what to read, what to write, whether to retry, when to give up);
//! a driver only performs the store calls it asks for and feeds the results back:
//!
//! ```text
//! start() ─► Get ─► on_get(doc) ─► CompareAndSet{expected, value} ─► on_cas(won)
//!                      │                                                 │ won  ─► Done
//!                      ├─ unchanged (view, no-op edit) ─► Done            │ lost ─► Sleep(d) ─► on_slept() ─► Get
//!                      └─ command error ─► Failed (nothing written)       └ attempts exhausted ─► Failed(Conflict)
//! ```
//! The binding layer drives it with a Python store's coroutines; the unit tests drive it with
//! in-memory fakes. Because the store is compared against the exact document that was read, a
//! lost race re-applies the command to the fresh tree, so no concurrent edit is ever lost.
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

impl Default for CasConfig {
    fn default() -> Self {
        CasConfig {
            max_attempts: 32,
            backoff_base: Duration::from_millis(1),
            backoff_cap: Duration::from_millis(50),
        }
    }
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Read the document (`store.get(key)`), then call [`CasLoop::on_get`].
    Get,
    /// `store.compare_and_set(key, expected, value)` (`expected: None` = only if absent), then
    /// call [`CasLoop::on_cas`].
    CompareAndSet {
        expected: Option<String>,
        value: String,
    },
    /// Wait this long, then call [`CasLoop::on_slept`].
    Sleep(Duration),
    /// Finished successfully.
    Done(CasDone),
    /// Finished with an error; nothing was written.
    Failed(MemoryError),
}

/// A successful command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasDone {
    /// The tool result text.
    pub text: String,
    /// Read-apply cycles used (1 = no lost race).
    pub attempts: u32,
    /// False when the command changed nothing (no write was made).
    pub written: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    AwaitGet,
    AwaitCas,
    AwaitSleep,
    Finished,
}

/// One command's compare-and-set loop.
#[derive(Debug, Clone)]
pub struct CasLoop {
    root: Root,
    command: Command,
    limits: Limits,
    config: CasConfig,
    attempts: u32,
    rng: u64,
    pending: Option<String>,
    state: State,
}

impl CasLoop {
    /// `seed` feeds the backoff jitter (any value; tests pass a fixed one).
    pub fn new(
        root: Root,
        command: Command,
        limits: Limits,
        config: CasConfig,
        seed: u64,
    ) -> CasLoop {
        CasLoop {
            root,
            command,
            limits,
            config,
            attempts: 0,
            rng: seed | 1,
            pending: None,
            state: State::Idle,
        }
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

    /// Feeds the document read from the store (`None` = key absent).
    pub fn on_get(&mut self, doc: Option<String>) -> Step {
        if self.state != State::AwaitGet {
            return self.misuse("on_get");
        }
        self.attempts += 1;
        let mut tree = match Tree::from_json(&self.root, doc.as_deref()) {
            Ok(t) => t,
            Err(e) => return self.fail(e),
        };
        match apply(&mut tree, &self.command, &self.limits) {
            Err(e) => self.fail(e),
            Ok(out) if !out.changed => {
                self.state = State::Finished;
                Step::Done(CasDone {
                    text: out.text,
                    attempts: self.attempts,
                    written: false,
                })
            }
            Ok(out) => {
                self.pending = Some(out.text);
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
            self.state = State::Finished;
            return Step::Done(CasDone {
                text: self.pending.take().unwrap_or_default(),
                attempts: self.attempts,
                written: true,
            });
        }
        self.pending = None;
        if self.attempts >= self.config.max_attempts {
            let n = self.attempts;
            let cmd = self.command.name();
            return self.fail(MemoryError::new(
                ErrorKind::Conflict,
                ErrorCode::StoreConflict,
                format!(
                    "{cmd} gave up after {n} compare-and-set attempts: other writers changed the memory \
                     tree every time; nothing was written. Call the command again (view the file first \
                     if it depends on the current text)"
                ),
            ));
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
        let cap =
            (base.saturating_mul(1u64 << shift)).min(self.config.backoff_cap.as_micros() as u64);
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

    fn fail(&mut self, e: MemoryError) -> Step {
        self.state = State::Finished;
        self.pending = None;
        Step::Failed(e)
    }

    fn misuse(&mut self, call: &str) -> Step {
        let state = self.state;
        self.fail(MemoryError::new(
            ErrorKind::Corrupt,
            ErrorCode::InternalError,
            format!("memory compare-and-set loop misused: {call} called in state {state:?}; this is a bug in the driver"),
        ))
    }
}
