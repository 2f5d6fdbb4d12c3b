//! The pure command engine: one memory command applied to a tree.
//!
//! `apply` validates everything and builds the new content before it mutates anything, so an
//! error always leaves the tree exactly as it was.
use super::error::{ErrorKind, LimitInfo, MemoryError};
use super::path::{parent, Root};
use super::tree::Tree;
use crate::errors::ErrorCode;

/// One command of the Anthropic memory-tool contract, with raw (unresolved) paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A directory: the sorted paths of the files below it, one per line. A file: its text, or
    /// lines `start..=end` (1-based; `end = -1` means the last line) joined by `\n`.
    ///
    /// `numbered` is the answer the `memory` tool gives the model: a file's lines carry 1-based
    /// line numbers (`{n:>6}\t{line}`), and an empty directory or file says so. The backend
    /// methods answer with the plain text (`numbered: false`). The path `/` (backends only; the
    /// tool refuses it) lists every file under the root.
    View {
        path: String,
        view_range: Option<(i64, i64)>,
        numbered: bool,
    },
    /// Writes a file; refuses an existing one unless `overwrite`.
    Create {
        path: String,
        file_text: String,
        overwrite: bool,
    },
    /// Replaces the only occurrence of `old_str`.
    StrReplace {
        path: String,
        old_str: String,
        new_str: String,
    },
    /// Inserts `insert_text` (its trailing line breaks dropped) as a line after line
    /// `insert_line` of the text split on `\n` (0 = at the top; a text ending in `\n` has an empty
    /// last line).
    Insert {
        path: String,
        insert_line: i64,
        insert_text: String,
    },
    /// Deletes a file, or a directory and every file below it; never the root.
    Delete { path: String },
    /// Moves a file or directory; never onto an existing path, never the root.
    Rename { old_path: String, new_path: String },
}

impl Command {
    /// The command's name as the model spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Command::View { .. } => "view",
            Command::Create { .. } => "create",
            Command::StrReplace { .. } => "str_replace",
            Command::Insert { .. } => "insert",
            Command::Delete { .. } => "delete",
            Command::Rename { .. } => "rename",
        }
    }
    /// True for commands that never write.
    pub fn is_read_only(&self) -> bool {
        matches!(self, Command::View { .. })
    }

    /// The same command with every path resolved under `root` (normalised and confined), as the
    /// `memory` tool does before any command reaches a backend it did not write.
    pub fn resolved(self, root: &Root) -> Result<Command, MemoryError> {
        Ok(match self {
            Command::View {
                path,
                view_range,
                numbered,
            } => Command::View {
                path: root.resolve("path", &path)?,
                view_range,
                numbered,
            },
            Command::Create {
                path,
                file_text,
                overwrite,
            } => Command::Create {
                path: root.resolve("path", &path)?,
                file_text,
                overwrite,
            },
            Command::StrReplace { path, old_str, new_str } => Command::StrReplace {
                path: root.resolve("path", &path)?,
                old_str,
                new_str,
            },
            Command::Insert {
                path,
                insert_line,
                insert_text,
            } => Command::Insert {
                path: root.resolve("path", &path)?,
                insert_line,
                insert_text,
            },
            Command::Delete { path } => Command::Delete {
                path: root.resolve("path", &path)?,
            },
            Command::Rename { old_path, new_path } => Command::Rename {
                old_path: root.resolve("old_path", &old_path)?,
                new_path: root.resolve("new_path", &new_path)?,
            },
        })
    }
}

/// The six command names, in schema order.
pub const COMMANDS: [&str; 6] = ["view", "create", "str_replace", "insert", "delete", "rename"];

/// Size limits of one tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum total UTF-8 bytes of all file paths and texts.
    pub max_bytes: u64,
    /// Maximum number of files.
    pub max_files: u64,
}

/// The default of [`Limits::max_bytes`]: 8 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 8_388_608;
/// The default of [`Limits::max_files`].
pub const DEFAULT_MAX_FILES: u64 = 4096;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: DEFAULT_MAX_BYTES,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

impl Limits {
    /// [`Limits::new`] where a limit not given (None) is its default ([`DEFAULT_MAX_BYTES`],
    /// [`DEFAULT_MAX_FILES`]).
    pub fn of(max_bytes: Option<i64>, max_files: Option<i64>) -> Result<Limits, MemoryError> {
        let d = Limits::default();
        let given = |v: Option<i64>, default: u64| v.unwrap_or(i64::try_from(default).unwrap_or(i64::MAX));
        Limits::new(given(max_bytes, d.max_bytes), given(max_files, d.max_files))
    }

    /// Limits as a caller gives them (any integers): both must be at least 0.
    pub fn new(max_bytes: i64, max_files: i64) -> Result<Limits, MemoryError> {
        match (u64::try_from(max_bytes), u64::try_from(max_files)) {
            (Ok(max_bytes), Ok(max_files)) => Ok(Limits { max_bytes, max_files }),
            _ => Err(MemoryError::invalid(
                ErrorCode::InvalidArgument,
                format!("max_bytes and max_files must be >= 0, got max_bytes={max_bytes}, max_files={max_files}"),
            )),
        }
    }
}

/// What a successful command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// False when the tree is unchanged (a view, or an edit that changed nothing): no write needed.
    pub changed: bool,
    /// The tool result text for the model.
    pub text: String,
}

/// Applies `cmd` to `tree` in place. On `Err` the tree is untouched.
pub fn apply(tree: &mut Tree, cmd: &Command, limits: &Limits) -> Result<Outcome, MemoryError> {
    let root = tree.root().clone();
    match cmd {
        Command::View {
            path,
            view_range,
            numbered,
        } => view(tree, &root, path, *view_range, *numbered),
        Command::Create {
            path,
            file_text,
            overwrite,
        } => {
            let p = root.resolve("path", path)?;
            if p == root.as_str() {
                return Err(MemoryError::invalid(
                    ErrorCode::IsADirectory,
                    format!("{p} is the memory root directory; create a file below it, e.g. {p}/notes.md"),
                ));
            }
            if tree.below(&p).next().is_some() {
                return Err(MemoryError::invalid(
                    ErrorCode::IsADirectory,
                    format!("{p} is a directory; choose a file path such as {p}/notes.md"),
                ));
            }
            check_parents_are_dirs(tree, &root, &p)?;
            let existed = tree.get(&p).is_some();
            if existed && !overwrite {
                return Err(MemoryError::exists(format!(
                    "{p} already exists; pass overwrite=true to replace it, use str_replace or \
                     insert to edit it, or pick another path"
                )));
            }
            check_write(tree, limits, cmd.name(), &p, file_text)?;
            let text = if existed {
                format!("File {p} overwritten ({} bytes).", file_text.len())
            } else {
                format!("File created successfully at {p} ({} bytes).", file_text.len())
            };
            tree.insert_file(p, file_text.clone());
            Ok(Outcome { changed: true, text })
        }
        Command::StrReplace { path, old_str, new_str } => {
            let p = root.resolve("path", path)?;
            let current = file_text(tree, &p, "str_replace")?;
            if old_str.is_empty() {
                return Err(MemoryError::invalid(
                    ErrorCode::MissingArgument,
                    format!("old_str is empty; pass the exact text to replace in {p}, copied from a view of the file"),
                ));
            }
            let found = Occurrences::of(current, old_str);
            match found.count {
                0 => Err(MemoryError::invalid(
                    ErrorCode::NoMatch,
                    format!(
                        "old_str was not found in {p}; view the file and copy the exact text, \
                         including whitespace and line breaks"
                    ),
                )),
                1 => {
                    let at = found.first[0];
                    let mut next = String::with_capacity(current.len() - old_str.len() + new_str.len());
                    next.push_str(&current[..at]);
                    next.push_str(new_str);
                    next.push_str(&current[at + old_str.len()..]);
                    let changed = next != current;
                    check_write(tree, limits, cmd.name(), &p, &next)?;
                    if changed {
                        tree.insert_file(p.clone(), next);
                    }
                    Ok(Outcome {
                        changed,
                        text: format!("The file {p} has been edited."),
                    })
                }
                n => {
                    let lines: Vec<String> = lines_of(current, &found.first).iter().map(usize::to_string).collect();
                    let more = match n - found.first.len() {
                        0 => String::new(),
                        rest => format!(" and {rest} more"),
                    };
                    Err(MemoryError::invalid(
                        ErrorCode::AmbiguousMatch,
                        format!(
                            "old_str occurs {n} times in {p} (at lines {}{more}); it must occur exactly \
                             once: add surrounding context to old_str so it matches only the place \
                             you mean",
                            lines.join(", ")
                        ),
                    ))
                }
            }
        }
        Command::Insert {
            path,
            insert_line,
            insert_text,
        } => {
            let p = root.resolve("path", path)?;
            let current = file_text(tree, &p, "insert")?;
            let lines: Vec<&str> = current.split('\n').collect();
            let n = lines.len() as i64;
            if *insert_line < 0 || *insert_line > n {
                return Err(MemoryError::invalid(
                    ErrorCode::OutOfRange,
                    format!(
                        "insert_line {insert_line} is out of range for {p}, which has {n} line(s) \
                         counting an empty last line after a final line break; pass 0 to insert at the \
                         top or a value from 1 to {n} to insert after that line"
                    ),
                ));
            }
            let k = *insert_line as usize;
            let new_line = insert_text.trim_end_matches('\n');
            let mut next = String::with_capacity(current.len() + new_line.len() + 1);
            for (i, l) in lines[..k]
                .iter()
                .chain(std::iter::once(&new_line))
                .chain(lines[k..].iter())
                .enumerate()
            {
                if i > 0 {
                    next.push('\n');
                }
                next.push_str(l);
            }
            check_write(tree, limits, cmd.name(), &p, &next)?;
            tree.insert_file(p.clone(), next);
            Ok(Outcome {
                changed: true,
                text: format!("Text inserted after line {k} of {p}."),
            })
        }
        Command::Delete { path } => {
            let p = root.resolve("path", path)?;
            if p == root.as_str() {
                return Err(MemoryError::permission(format!(
                    "refusing to delete the memory root {p}; delete the files or directories below it one by one"
                )));
            }
            if tree.get(&p).is_some() {
                tree.remove_file(&p);
                return Ok(Outcome {
                    changed: true,
                    text: format!("Deleted file {p}."),
                });
            }
            let doomed: Vec<String> = tree.below(&p).map(|(k, _)| k.clone()).collect();
            if doomed.is_empty() {
                return Err(not_found(&root, &p));
            }
            for k in &doomed {
                tree.remove_file(k);
            }
            Ok(Outcome {
                changed: true,
                text: format!("Deleted directory {p} ({} file(s)).", doomed.len()),
            })
        }
        Command::Rename { old_path, new_path } => {
            let old = root.resolve("old_path", old_path)?;
            let new = root.resolve("new_path", new_path)?;
            if old == root.as_str() || new == root.as_str() {
                return Err(MemoryError::permission(format!(
                    "cannot rename {old} to {new}: the memory root {} cannot be moved or replaced",
                    root.as_str()
                )));
            }
            let is_file = tree.get(&old).is_some();
            if !is_file && !tree.is_dir(&old) {
                return Err(not_found(&root, &old));
            }
            if old == new {
                return Err(MemoryError::invalid(
                    ErrorCode::InvalidArgument,
                    format!(
                        "old_path and new_path are both {old}, so there is nothing to rename and nothing \
                         was changed; pass the new name as new_path"
                    ),
                ));
            }
            if tree.get(&new).is_some() || tree.is_dir(&new) {
                return Err(MemoryError::exists(format!(
                    "cannot rename {old} to {new}: {new} already exists; delete it first or choose another new_path"
                )));
            }
            if !is_file && new.starts_with(&format!("{old}/")) {
                return Err(MemoryError::invalid(
                    ErrorCode::InvalidArgument,
                    format!("cannot move directory {old} into itself ({new}); choose a new_path outside {old}"),
                ));
            }
            check_parents_are_dirs(tree, &root, &new)?;
            let moved_files = if is_file { 1 } else { tree.below(&old).count() as u64 };
            // Only the paths change: each moved file's path grows (or shrinks) by the same amount.
            let growth = (new.len() as i64 - old.len() as i64) * moved_files as i64;
            check_size(tree, limits, cmd.name(), &new, growth, 0)?;
            if is_file {
                let text = tree.remove_file(&old).unwrap_or_default();
                tree.insert_file(new.clone(), text);
                return Ok(Outcome {
                    changed: true,
                    text: format!("Renamed {old} to {new}."),
                });
            }
            let moved: Vec<String> = tree.below(&old).map(|(k, _)| k.clone()).collect();
            for k in &moved {
                let text = tree.remove_file(k).unwrap_or_default();
                tree.insert_file(format!("{new}{}", &k[old.len()..]), text);
            }
            Ok(Outcome {
                changed: true,
                text: format!("Renamed directory {old} to {new} ({} file(s)).", moved.len()),
            })
        }
    }
}

fn view(
    tree: &Tree,
    root: &Root,
    path: &str,
    range: Option<(i64, i64)>,
    numbered: bool,
) -> Result<Outcome, MemoryError> {
    let p = if path == "/" && !numbered {
        root.as_str().to_string()
    } else {
        root.resolve("path", path)?
    };
    if let Some(text) = tree.get(&p) {
        let Some((start, end)) = range else {
            let text = if numbered {
                number_lines(&p, text, 1)
            } else {
                text.to_string()
            };
            return Ok(Outcome { changed: false, text });
        };
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let n = lines.len() as i64;
        let end_v = if end == -1 { n } else { end };
        if n == 0 {
            return Err(MemoryError::invalid(
                ErrorCode::OutOfRange,
                format!(
                    "view_range [{start}, {end}] is out of range for {p}, which is empty (0 lines); omit \
                     view_range to view it, or add text with create (overwrite=true) or insert at line 0"
                ),
            ));
        }
        if start < 1 || start > n || end_v < start || end_v > n {
            return Err(MemoryError::invalid(
                ErrorCode::OutOfRange,
                format!(
                    "view_range [{start}, {end}] is out of range for {p}, which has {n} line(s); \
                     pass [start, end] with 1 <= start <= end <= {n} (end may be -1 for the last line), \
                     or omit view_range to read the whole file"
                ),
            ));
        }
        let mut out: String = lines[(start - 1) as usize..end_v as usize].concat();
        if out.ends_with('\n') {
            out.pop();
        }
        if numbered {
            out = number_lines(&p, &out, start as usize);
        }
        return Ok(Outcome {
            changed: false,
            text: out,
        });
    }
    if tree.is_dir(&p) {
        if range.is_some() {
            return Err(MemoryError::invalid(
                ErrorCode::IsADirectory,
                format!("{p} is a directory; view_range applies to files only: omit it to list the directory"),
            ));
        }
        let listing: Vec<&str> = tree.below(&p).map(|(k, _)| k.as_str()).collect();
        let text = if numbered && listing.is_empty() {
            format!("The directory {p} is empty.")
        } else {
            listing.join("\n")
        };
        return Ok(Outcome { changed: false, text });
    }
    Err(not_found(root, &p))
}

/// The text as the `memory` tool shows it to the model: each line prefixed with its 1-based
/// number (the first line is `first`), right-aligned in six columns and a tab, as Anthropic's
/// memory-tool reference implementation shows files. A final line break adds no empty line.
pub fn number_lines(p: &str, text: &str, first: usize) -> String {
    if text.is_empty() {
        return format!("The file {p} is empty.");
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    let mut out = String::with_capacity(text.len() + 8 * (body.len() / 32 + 1));
    for (i, line) in body.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("{:>6}\t{line}", first + i));
    }
    out
}

fn not_found(root: &Root, p: &str) -> MemoryError {
    MemoryError::not_found(format!(
        "no file or directory at {p}; view {} to list the existing files",
        root.as_str()
    ))
}

/// The text of file `p`, or a not-found / is-a-directory error naming `command`.
fn file_text<'t>(tree: &'t Tree, p: &str, command: &str) -> Result<&'t str, MemoryError> {
    if let Some(t) = tree.get(p) {
        return Ok(t);
    }
    if tree.is_dir(p) {
        return Err(MemoryError::invalid(
            ErrorCode::IsADirectory,
            format!("{p} is a directory; {command} needs a file path (view {p} to list its files)"),
        ));
    }
    Err(MemoryError::not_found(format!(
        "no file at {p}; create it first with the create command, or view {} to list the existing files",
        tree.root().as_str()
    )))
}

/// Refuses a path whose ancestor (below the root) is a file.
fn check_parents_are_dirs(tree: &Tree, root: &Root, p: &str) -> Result<(), MemoryError> {
    let mut cur = parent(p);
    while let Some(dir) = cur {
        if dir == root.as_str() || !root.contains(dir) {
            break;
        }
        if tree.get(dir).is_some() {
            return Err(MemoryError::invalid(
                ErrorCode::NotADirectory,
                format!("{dir} is a file, so {p} cannot be created below it; choose another path"),
            ));
        }
        cur = parent(dir);
    }
    Ok(())
}

/// How many occurrences of a needle an ambiguous-match error spells out by line.
pub const LISTED_MATCHES: usize = 10;

/// The (possibly overlapping) occurrences of a needle in a text: how many, and the start offsets
/// of the first [`LISTED_MATCHES`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct Occurrences {
    count: usize,
    first: Vec<usize>,
}

impl Occurrences {
    /// Counts in one pass over `hay` (Knuth-Morris-Pratt on the UTF-8 bytes), so the time is
    /// linear in the text and the needle whatever they hold: restarting a search after each
    /// match is quadratic for a needle that matches almost everywhere (`"a"` in a text of `a`s,
    /// or a long run of `a`s in a longer one). A byte match of valid UTF-8 in valid UTF-8
    /// starts and ends on character boundaries.
    fn of(hay: &str, needle: &str) -> Occurrences {
        let (h, n) = (hay.as_bytes(), needle.as_bytes());
        let mut found = Occurrences {
            count: 0,
            first: Vec::new(),
        };
        if n.is_empty() || n.len() > h.len() {
            return found;
        }
        // fail[i]: the length of the longest proper prefix of n[..=i] that is also its suffix.
        let mut fail = vec![0usize; n.len()];
        let mut k = 0;
        for i in 1..n.len() {
            while k > 0 && n[i] != n[k] {
                k = fail[k - 1];
            }
            if n[i] == n[k] {
                k += 1;
            }
            fail[i] = k;
        }
        let mut k = 0;
        for (i, &b) in h.iter().enumerate() {
            while k > 0 && b != n[k] {
                k = fail[k - 1];
            }
            if b == n[k] {
                k += 1;
            }
            if k == n.len() {
                found.count += 1;
                if found.first.len() < LISTED_MATCHES {
                    found.first.push(i + 1 - n.len());
                }
                k = fail[k - 1];
            }
        }
        found
    }
}

/// The 1-based line numbers of the ascending byte offsets `at`, in one pass.
fn lines_of(text: &str, at: &[usize]) -> Vec<usize> {
    let bytes = text.as_bytes();
    let (mut line, mut from) = (1, 0);
    at.iter()
        .map(|&a| {
            line += bytes[from..a].iter().filter(|&&b| b == b'\n').count();
            from = a;
            line
        })
        .collect()
}

/// Refuses a write of `new_text` to file `p` that would grow the tree past a limit.
fn check_write(tree: &Tree, limits: &Limits, command: &str, p: &str, new_text: &str) -> Result<(), MemoryError> {
    let (growth, new_files) = match tree.get(p) {
        Some(old) => (new_text.len() as i64 - old.len() as i64, 0),
        None => ((p.len() + new_text.len()) as i64, 1),
    };
    check_size(tree, limits, command, p, growth, new_files)
}

/// Refuses a change that grows the tree by `growth` bytes (paths and texts) and `new_files`
/// files past a limit (the file count is checked first). Shrinking (or equal) use is always allowed, even when the tree is
/// already over a lowered limit.
fn check_size(
    tree: &Tree,
    limits: &Limits,
    command: &str,
    p: &str,
    growth: i64,
    new_files: u64,
) -> Result<(), MemoryError> {
    let used_files = tree.file_count();
    let new_files = used_files + new_files;
    if new_files > limits.max_files && new_files > used_files {
        return Err(limit_error(
            LimitInfo {
                limit: "max_files",
                maximum: limits.max_files,
                used: used_files,
                requested: new_files,
            },
            format!(
                "memory limit max_files={} exceeded: the tree holds {used_files} files and this \
                 {command} would make it {new_files}; nothing was changed. Delete or merge files under \
                 {}, then try again",
                limits.max_files,
                tree.root().as_str()
            ),
        ));
    }
    let used_bytes = tree.bytes();
    let new_bytes = (used_bytes as i64 + growth).max(0) as u64;
    if new_bytes > limits.max_bytes && new_bytes > used_bytes {
        return Err(limit_error(
            LimitInfo {
                limit: "max_bytes",
                maximum: limits.max_bytes,
                used: used_bytes,
                requested: new_bytes,
            },
            format!(
                "memory limit max_bytes={} exceeded: the tree holds {used_bytes} bytes (file texts and \
                 paths) and this {command} on {p} would make it {new_bytes} bytes ({:+}); nothing was \
                 changed. Shorten or delete files under {}, then try again",
                limits.max_bytes,
                new_bytes as i128 - used_bytes as i128,
                tree.root().as_str()
            ),
        ));
    }
    Ok(())
}

fn limit_error(info: LimitInfo, message: String) -> MemoryError {
    MemoryError {
        kind: ErrorKind::Limit,
        code: ErrorCode::MemoryLimit,
        message,
        limit: Some(info),
    }
}
