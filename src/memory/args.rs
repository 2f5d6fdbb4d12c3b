//! Per-command argument checks: turns the model's (already type-converted) arguments into a
//! [`Command`], naming every missing or misplaced argument at once.
use crate::errors::ErrorCode;
use super::command::{Command, COMMANDS};
use super::error::MemoryError;

/// The model's arguments for one call of the `memory` tool. `None` means absent (an explicit
/// JSON `null` counts as absent, so strict-mode renderings that send every key work).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandArgs {
    pub command: Option<String>,
    pub path: Option<String>,
    pub file_text: Option<String>,
    pub overwrite: Option<bool>,
    pub old_str: Option<String>,
    pub new_str: Option<String>,
    pub insert_line: Option<i64>,
    pub insert_text: Option<String>,
    pub view_range: Option<(i64, i64)>,
    pub old_path: Option<String>,
    pub new_path: Option<String>,
    /// Keys the schema does not declare.
    pub unknown: Vec<String>,
}

/// Every argument name of the `memory` schema, in schema order.
pub const ARGUMENTS: [&str; 11] = [
    "command",
    "path",
    "file_text",
    "overwrite",
    "old_str",
    "new_str",
    "insert_line",
    "insert_text",
    "view_range",
    "old_path",
    "new_path",
];

/// (required, optional) arguments of each command, besides `command`.
fn signature(command: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match command {
        "view" => (&["path"], &["view_range"]),
        "create" => (&["path", "file_text"], &["overwrite"]),
        "str_replace" => (&["path", "old_str", "new_str"], &[]),
        "insert" => (&["path", "insert_line", "insert_text"], &[]),
        "delete" => (&["path"], &[]),
        "rename" => (&["old_path", "new_path"], &["path"]),
        _ => (&[], &[]),
    }
}

impl CommandArgs {
    fn present(&self) -> Vec<&'static str> {
        let flags = [
            self.path.is_some(),
            self.file_text.is_some(),
            self.overwrite.is_some(),
            self.old_str.is_some(),
            self.new_str.is_some(),
            self.insert_line.is_some(),
            self.insert_text.is_some(),
            self.view_range.is_some(),
            self.old_path.is_some(),
            self.new_path.is_some(),
        ];
        ARGUMENTS[1..]
            .iter()
            .zip(flags)
            .filter(|(_, f)| *f)
            .map(|(n, _)| *n)
            .collect()
    }

    /// Checks the arguments of the selected command and builds it.
    ///
    /// Errors (`InvalidArgument`): code `missing_argument` (no command, or required arguments of
    /// the command absent), `unexpected_argument` (keys outside the schema, or arguments that
    /// belong to another command), `invalid_argument` (an unknown command, or `path` and
    /// `old_path` both given and different).
    pub fn into_command(self) -> Result<Command, MemoryError> {
        let accepted = ARGUMENTS.join(", ");
        if !self.unknown.is_empty() {
            return Err(MemoryError::invalid(
                ErrorCode::UnexpectedArgument,
                format!(
                    "unexpected argument(s) {}; the memory tool accepts {accepted}. Remove them and call again",
                    self.unknown.join(", ")
                ),
            ));
        }
        let Some(command) = self.command.clone() else {
            return Err(MemoryError::invalid(
                ErrorCode::MissingArgument,
                format!(
                    "missing required argument command; pass one of {}",
                    COMMANDS.join(", ")
                ),
            ));
        };
        if !COMMANDS.contains(&command.as_str()) {
            return Err(MemoryError::invalid(
                ErrorCode::InvalidArgument,
                format!(
                    "unknown command {command:?}; use one of {}",
                    COMMANDS.join(", ")
                ),
            ));
        }
        let (required, optional) = signature(&command);
        let present = self.present();
        let stray: Vec<&str> = present
            .iter()
            .copied()
            .filter(|n| !required.contains(n) && !optional.contains(n))
            .collect();
        let takes: Vec<&str> = required.iter().chain(optional.iter()).copied().collect();
        if !stray.is_empty() {
            return Err(MemoryError::invalid(
                ErrorCode::UnexpectedArgument,
                format!(
                    "command {command:?} does not take {}; it takes {}. Remove the others and call again",
                    stray.join(", "),
                    takes.join(", ")
                ),
            ));
        }
        // `path` is an alias of `old_path` for rename.
        let mut old_path = self.old_path.clone();
        if command == "rename" {
            match (&self.path, &self.old_path) {
                (Some(p), Some(o)) if p != o => {
                    return Err(MemoryError::invalid(
                        ErrorCode::InvalidArgument,
                        format!(
                            "rename got path {p:?} and old_path {o:?}, which differ; pass only old_path \
                             (path is an alias of it) and new_path"
                        ),
                    ))
                }
                (Some(p), None) => old_path = Some(p.clone()),
                _ => {}
            }
        }
        let missing: Vec<&str> = required
            .iter()
            .copied()
            .filter(|n| match *n {
                "old_path" => old_path.is_none(),
                n => !present.contains(&n),
            })
            .collect();
        if !missing.is_empty() {
            return Err(MemoryError::invalid(
                ErrorCode::MissingArgument,
                format!(
                    "command {command:?} is missing required argument(s) {}; it takes {} (required: {})",
                    missing.join(", "),
                    takes.join(", "),
                    required.join(", ")
                ),
            ));
        }
        let s = |v: Option<String>| v.unwrap_or_default();
        Ok(match command.as_str() {
            "view" => Command::View {
                path: s(self.path),
                view_range: self.view_range,
                numbered: false,
            },
            "create" => Command::Create {
                path: s(self.path),
                file_text: s(self.file_text),
                overwrite: self.overwrite.unwrap_or(false),
            },
            "str_replace" => Command::StrReplace {
                path: s(self.path),
                old_str: s(self.old_str),
                new_str: s(self.new_str),
            },
            "insert" => Command::Insert {
                path: s(self.path),
                insert_line: self.insert_line.unwrap_or(0),
                insert_text: s(self.insert_text),
            },
            "delete" => Command::Delete { path: s(self.path) },
            _ => Command::Rename {
                old_path: s(old_path),
                new_path: s(self.new_path),
            },
        })
    }
}
