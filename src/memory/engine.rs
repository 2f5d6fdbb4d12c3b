//! What the engine of a store-backed memory hands its driver: a batch's compare-and-set loop as
//! three answers ([`CasRun`]: write this, read again after that long, finished) and the answer
//! to a read-only command from the document as read ([`ReadCache`]: an unchanged document is not
//! parsed again).
use std::time::Duration;

use super::cas::{CasLoop, Step};
use super::command::{apply, Command, Limits};
use super::error::MemoryError;
use super::path::Root;
use super::tree::Tree;

/// A batch's compare-and-set loop as its driver steps it: read the document, [`CasRun::on_get`];
/// while that asks for a write, `compare_and_set` and [`CasRun::on_cas`]; then
/// [`CasRun::outcomes`]. An `Err` is a step the loop did not expect (a bug, named).
#[derive(Debug, Clone)]
pub struct CasRun {
    machine: CasLoop,
    outcomes: Option<Vec<Result<String, MemoryError>>>,
    written: bool,
}

impl CasRun {
    /// The loop `machine`, started: its first step is always a read of the document.
    pub fn begin(mut machine: CasLoop) -> Result<CasRun, String> {
        match machine.start() {
            Step::Get => Ok(CasRun {
                machine,
                outcomes: None,
                written: false,
            }),
            other => Err(format!(
                "memory compare-and-set loop started with {other:?}; this is a bug"
            )),
        }
    }

    /// The step `step` is an answer (`Done`, or `Failed`: every command fails with its error):
    /// kept, None; else the step.
    fn finish(&mut self, step: Step) -> Option<Step> {
        match step {
            Step::Done(done) => {
                self.outcomes = Some(done.outcomes);
                self.written = done.written;
                None
            }
            Step::Failed(e) => {
                self.outcomes = Some(vec![Err(e); self.machine.len()]);
                None
            }
            other => Some(other),
        }
    }

    /// The document as read (None: absent): the new document text to write against it, or None
    /// once finished.
    pub fn on_get(&mut self, doc: Option<String>) -> Result<Option<String>, String> {
        let step = self.machine.on_get(doc);
        match self.finish(step) {
            None => Ok(None),
            Some(Step::CompareAndSet { value, .. }) => Ok(Some(value)),
            Some(other) => Err(format!(
                "memory compare-and-set loop asked for {other:?} after a read; this is a bug"
            )),
        }
    }

    /// A recent copy of the document that may be stale (None: it cannot be used, or absent) in
    /// place of a read: the new document text to write against that copy, or None (read it).
    pub fn on_cached(&mut self, doc: Option<String>) -> Result<Option<String>, String> {
        let step = self.machine.on_cached(doc);
        match self.finish(step) {
            None | Some(Step::Get) => Ok(None),
            Some(Step::CompareAndSet { value, .. }) => Ok(Some(value)),
            Some(other) => Err(format!(
                "memory compare-and-set loop asked for {other:?} after a cached copy; this is a bug"
            )),
        }
    }

    /// The write's result (`won`): None once finished, else how long to wait (zero: none)
    /// before reading the document again.
    pub fn on_cas(&mut self, won: bool) -> Result<Option<Duration>, String> {
        let step = self.machine.on_cas(won);
        match self.finish(step) {
            None => Ok(None),
            Some(Step::Get) => Ok(Some(Duration::ZERO)),
            Some(Step::Sleep(d)) => match self.machine.on_slept() {
                Step::Get => Ok(Some(d)),
                other => Err(format!(
                    "memory compare-and-set loop asked for {other:?} after a wait; this is a bug"
                )),
            },
            Some(other) => Err(format!(
                "memory compare-and-set loop asked for {other:?} after a write; this is a bug"
            )),
        }
    }

    /// Once finished, one outcome per command in order; None before.
    pub fn outcomes(&self) -> Option<&[Result<String, MemoryError>]> {
        self.outcomes.as_deref()
    }

    /// Read-apply cycles used so far (1 = no lost race).
    pub fn attempts(&self) -> u32 {
        self.machine.attempts()
    }

    /// The batch's document was written (its compare-and-set won).
    pub fn written(&self) -> bool {
        self.written
    }
}

/// The document text a read last parsed, and its tree: a read-only command on an unchanged
/// document skips the parse.
#[derive(Debug, Default)]
pub struct ReadCache(Option<(String, Tree)>);

impl ReadCache {
    /// The answer of read-only command `cmd` on document `text` (of a tree under `root`).
    pub fn answer(&mut self, root: &Root, text: &str, cmd: &Command, limits: &Limits) -> Result<String, MemoryError> {
        let tree = match &mut self.0 {
            Some((t, tree)) if t == text => tree,
            slot => {
                let tree = Tree::from_json(root, Some(text))?;
                &mut slot.insert((text.to_owned(), tree)).1
            }
        };
        // A read-only command leaves the tree as it was, so the cached tree stays the document's.
        apply(tree, cmd, limits).map(|o| o.text)
    }
}

/// The answer of read-only command `cmd` on document `doc` (None: absent), parsed for this read
/// alone.
pub fn answer_once(root: &Root, doc: Option<&str>, cmd: &Command, limits: &Limits) -> Result<String, MemoryError> {
    let mut tree = Tree::from_json(root, doc)?;
    apply(&mut tree, cmd, limits).map(|o| o.text)
}

/// Why a store's answer cannot be used, for the driver to raise: `store.get` (or a cached copy,
/// `source`) handed back a `got` instead of the tree document.
pub fn not_a_document_message(source: &str, got: &str) -> String {
    format!(
        "{source} returned {got}, expected the tree document (str or dict) or None; fix the StorePort implementation"
    )
}

/// Why a stored tree document handed back as a mapping cannot be used (`why`: what is not JSON).
pub fn mapping_not_json_message(why: &str) -> String {
    format!("the stored memory tree is a mapping that is not JSON ({why}); inspect the store key")
}

/// Why `store.compare_and_set`'s answer (a `got`) cannot be used.
pub fn cas_not_bool_message(got: &str) -> String {
    format!("store.compare_and_set returned {got}, expected bool; fix the StorePort implementation")
}

/// Whether a read may answer `cmd`: only a command that never writes (else why not, for the
/// driver to raise; a command that writes needs the compare-and-set loop).
pub fn readable(cmd: &Command) -> Result<(), String> {
    if cmd.is_read_only() {
        Ok(())
    } else {
        Err(read_writes_message(cmd.name()))
    }
}

/// Why a read was refused: `command` writes (it needs the compare-and-set loop).
pub fn read_writes_message(command: &str) -> String {
    format!("MemoryStoreEngine.read answers commands that never write; {command} writes: use begin")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{CasConfig, ErrorKind};

    fn root() -> Root {
        Root::new("/memories").unwrap()
    }

    fn limits() -> Limits {
        Limits::new(1 << 20, 100).unwrap()
    }

    fn create(path: &str, text: &str) -> Command {
        Command::Create {
            path: path.into(),
            file_text: text.into(),
            overwrite: false,
        }
    }

    fn view(path: &str) -> Command {
        Command::View {
            path: path.into(),
            view_range: None,
            numbered: false,
        }
    }

    fn run(cmds: Vec<Command>, attempts: i64) -> CasRun {
        let config = CasConfig::with_max_attempts(attempts).unwrap();
        CasRun::begin(CasLoop::batch(root(), cmds, limits(), config, 7)).unwrap()
    }

    #[test]
    fn a_write_won_at_once() {
        let mut r = run(vec![create("/memories/a.md", "hi")], 3);
        let doc = r.on_get(None).unwrap().expect("a write");
        assert!(doc.contains("/memories/a.md"));
        assert_eq!(r.outcomes(), None);
        assert_eq!(r.on_cas(true), Ok(None));
        assert_eq!(r.outcomes().map(<[_]>::len), Some(1));
        assert!(r.outcomes().unwrap()[0].is_ok());
        assert!(r.written());
        assert_eq!(r.attempts(), 1);
        // A step the loop does not expect any more fails every command, naming the misuse.
        assert_eq!(r.on_cas(true), Ok(None));
        let e = r.outcomes().unwrap()[0].clone().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(
            e.message
                .starts_with("memory compare-and-set loop misused: on_cas called in state Finished"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_lost_race_reads_again_then_gives_up() {
        let mut r = run(vec![create("/memories/a.md", "hi")], 2);
        assert!(r.on_get(None).unwrap().is_some());
        let wait = r.on_cas(false).unwrap().expect("read again");
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert!(r.on_get(None).unwrap().is_some());
        assert_eq!(r.on_cas(false), Ok(None));
        let out = r.outcomes().unwrap();
        assert_eq!(out[0].as_ref().unwrap_err().kind, ErrorKind::Conflict);
        assert!(!r.written());
        assert_eq!(r.attempts(), 2);
    }

    #[test]
    fn a_view_writes_nothing_and_a_bad_document_fails_every_command() {
        let mut r = run(vec![view("/memories")], 3);
        assert_eq!(r.on_cached(None), Ok(None)); // views only from a fresh read
        assert_eq!(r.on_get(None), Ok(None));
        assert!(r.outcomes().unwrap()[0].is_ok());
        assert!(!r.written());
        let mut r = run(vec![create("/memories/a.md", "x"), view("/memories")], 3);
        assert_eq!(r.on_get(Some("not json".into())), Ok(None));
        let out = r.outcomes().unwrap();
        assert_eq!(out.len(), 2);
        assert!(out
            .iter()
            .all(|o| o.as_ref().is_err_and(|e| e.kind == ErrorKind::Corrupt)));
    }

    #[test]
    fn a_read_answers_only_commands_that_never_write() {
        assert_eq!(readable(&view("/memories/a.md")), Ok(()));
        assert_eq!(
            readable(&create("/memories/a.md", "x")),
            Err("MemoryStoreEngine.read answers commands that never write; create writes: use begin".to_owned())
        );
        assert_eq!(
            readable(&Command::Delete {
                path: "/memories/a.md".into()
            }),
            Err("MemoryStoreEngine.read answers commands that never write; delete writes: use begin".to_owned())
        );
    }

    #[test]
    fn the_defaults() {
        use crate::memory::{DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, DEFAULT_ROOT};
        assert_eq!(DEFAULT_ROOT, "/memories");
        assert_eq!(Root::new(DEFAULT_ROOT).unwrap().as_str(), "/memories");
        assert_eq!((DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES), (8_388_608, 4096));
        assert_eq!(
            Limits::default(),
            Limits {
                max_bytes: 8_388_608,
                max_files: 4096
            }
        );
        assert_eq!(DEFAULT_MAX_ATTEMPTS, 32);
        assert_eq!(CasConfig::default().max_attempts, 32);
        // Not given: the default; given: checked as given.
        assert_eq!(Limits::of(None, None), Ok(Limits::default()));
        assert_eq!(
            Limits::of(Some(10), None),
            Ok(Limits {
                max_bytes: 10,
                max_files: 4096
            })
        );
        assert_eq!(
            Limits::of(None, Some(-1)).unwrap_err().message,
            "max_bytes and max_files must be >= 0, got max_bytes=8388608, max_files=-1"
        );
        assert_eq!(Root::of(None).unwrap().as_str(), "/memories");
        assert_eq!(Root::of(Some("/notes/")).unwrap().as_str(), "/notes");
        assert_eq!(CasConfig::of(None), Ok(CasConfig::default()));
        assert_eq!(CasConfig::of(Some(3)).unwrap().max_attempts, 3);
        assert!(CasConfig::of(Some(0)).is_err());
    }

    #[test]
    fn the_read_cache_parses_a_changed_document_only() {
        let (root, limits) = (root(), limits());
        let mut tree = Tree::empty(root.clone());
        apply(&mut tree, &create("/memories/a.md", "one"), &limits).unwrap();
        let doc = tree.to_json();
        let mut cache = ReadCache::default();
        let cmd = view("/memories/a.md");
        assert_eq!(cache.answer(&root, &doc, &cmd, &limits).unwrap(), "one");
        assert_eq!(cache.answer(&root, &doc, &cmd, &limits).unwrap(), "one");
        apply(
            &mut tree,
            &Command::Delete {
                path: "/memories/a.md".into(),
            },
            &limits,
        )
        .unwrap();
        apply(&mut tree, &create("/memories/a.md", "two"), &limits).unwrap();
        assert_eq!(cache.answer(&root, &tree.to_json(), &cmd, &limits).unwrap(), "two");
        assert_eq!(
            cache.answer(&root, "[]", &cmd, &limits).unwrap_err().kind,
            ErrorKind::Corrupt
        );
        assert_eq!(answer_once(&root, Some(&doc), &cmd, &limits).unwrap(), "one");
        assert_eq!(
            answer_once(&root, None, &cmd, &limits).unwrap_err().kind,
            ErrorKind::NotFound
        );
    }

    #[test]
    fn store_answers_that_cannot_be_used() {
        assert_eq!(
            not_a_document_message("store.get", "int"),
            "store.get returned int, expected the tree document (str or dict) or None; fix the StorePort implementation"
        );
        assert_eq!(
            mapping_not_json_message("NaN"),
            "the stored memory tree is a mapping that is not JSON (NaN); inspect the store key"
        );
        assert_eq!(
            cas_not_bool_message("NoneType"),
            "store.compare_and_set returned NoneType, expected bool; fix the StorePort implementation"
        );
        assert_eq!(
            read_writes_message("create"),
            "MemoryStoreEngine.read answers commands that never write; create writes: use begin"
        );
    }
}
