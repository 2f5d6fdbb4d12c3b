//! Per-command argument checks: turns the model's (already type-converted) arguments into a
//! [`Command`], naming every missing or misplaced argument at once.
use super::command::{Command, COMMANDS};
use super::error::MemoryError;
use crate::errors::ErrorCode;

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

/// The type an argument of the `memory` schema takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgType {
    Str,
    Bool,
    Int,
    /// `[start, end]`, two integers.
    Range,
}

impl ArgType {
    /// The type of argument `key` (None: a key the schema does not declare).
    pub fn of(key: &str) -> Option<ArgType> {
        Some(match key {
            "command" | "path" | "file_text" | "old_str" | "new_str" | "insert_text" | "old_path" | "new_path" => {
                ArgType::Str
            }
            "overwrite" => ArgType::Bool,
            "insert_line" => ArgType::Int,
            "view_range" => ArgType::Range,
            _ => return None,
        })
    }

    /// What a value of this type is, as an error message names it.
    pub fn expected(self) -> &'static str {
        match self {
            ArgType::Str => "a string",
            ArgType::Bool => "a boolean (true or false)",
            ArgType::Int => "an integer",
            ArgType::Range => "an array of two integers [start, end]",
        }
    }
}

/// What a string argument must be besides a string: text Python can hand over as UTF-8.
pub const EXPECTED_UNICODE: &str = "valid Unicode text (no lone surrogates)";
/// What an integer argument must be besides an integer.
pub const EXPECTED_INT_64: &str = "an integer within 64 bits";

/// One argument's value, converted to its [`ArgType`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgValue {
    Str(String),
    Bool(bool),
    Int(i64),
    Range(i64, i64),
}

/// The error for argument `name` whose value (of type `got`) is not `expected`.
pub fn bad_type(name: &str, expected: &str, got: &str) -> MemoryError {
    MemoryError::invalid(
        ErrorCode::InvalidArgument,
        format!("{name} must be {expected}, got {got}; send {name} as {expected} and call again"),
    )
}

/// What the host found a value sent for an integer argument (or an item of a range) to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntRead {
    /// An integer within 64 bits.
    Int(i64),
    /// An integer beyond 64 bits.
    Big,
    /// A boolean: no integer (JSON tells `true` from `1`, though Python's `bool` is an `int`).
    Bool,
    /// Anything else.
    Other,
}

impl IntRead {
    /// The integer an argument takes from it (None: it takes none).
    pub fn value(self) -> Option<i64> {
        match self {
            IntRead::Int(i) => Some(i),
            IntRead::Big | IntRead::Bool | IntRead::Other => None,
        }
    }
}

/// Integer argument `name` from what was read; `got`: the type the value has, for the error
/// (an integer beyond 64 bits is told so).
pub fn int_arg(name: &str, read: IntRead, got: impl FnOnce() -> String) -> Result<ArgValue, MemoryError> {
    match read {
        IntRead::Int(i) => Ok(ArgValue::Int(i)),
        IntRead::Big => Err(bad_type(name, EXPECTED_INT_64, &got())),
        IntRead::Bool | IntRead::Other => Err(bad_type(name, ArgType::Int.expected(), &got())),
    }
}

/// Range argument `name` from the items of the sequence sent (None: a value that is no sequence,
/// or a string): exactly two integers within 64 bits; `got` as for [`int_arg`].
pub fn range_arg(name: &str, items: Option<&[IntRead]>, got: impl FnOnce() -> String) -> Result<ArgValue, MemoryError> {
    if let Some([a, b]) = items {
        if let (Some(a), Some(b)) = (a.value(), b.value()) {
            return Ok(ArgValue::Range(a, b));
        }
    }
    Err(bad_type(name, ArgType::Range.expected(), &got()))
}

/// Why the `memory` tool's arguments were refused as a whole: they are not a mapping.
pub const NOT_A_MAPPING: &str = "memory tool arguments must be a dict (a JSON object); pass them as one";

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

    /// Set argument `key` (a declared one, see [`ArgType::of`]; `value` None: absent, as JSON
    /// `null`). An absent `command` leaves the one already set. Any other key is noted as
    /// unknown.
    pub fn set(&mut self, key: &str, value: Option<ArgValue>) {
        use ArgValue as V;
        let text = |v: &Option<ArgValue>| match v {
            Some(V::Str(s)) => Some(s.clone()),
            _ => None,
        };
        match key {
            "command" => {
                if let Some(c) = text(&value) {
                    self.command = Some(c);
                }
            }
            "path" => self.path = text(&value),
            "file_text" => self.file_text = text(&value),
            "old_str" => self.old_str = text(&value),
            "new_str" => self.new_str = text(&value),
            "insert_text" => self.insert_text = text(&value),
            "old_path" => self.old_path = text(&value),
            "new_path" => self.new_path = text(&value),
            "overwrite" => self.overwrite = if let Some(V::Bool(b)) = value { Some(b) } else { None },
            "insert_line" => self.insert_line = if let Some(V::Int(i)) = value { Some(i) } else { None },
            "view_range" => {
                self.view_range = if let Some(V::Range(a, b)) = value {
                    Some((a, b))
                } else {
                    None
                }
            }
            other => self.unknown.push(other.to_owned()),
        }
    }

    /// [`CommandArgs::into_command`], a view answering as `numbered` says (see
    /// [`Command::View`]).
    pub fn into_command_numbered(self, numbered: bool) -> Result<Command, MemoryError> {
        match self.into_command()? {
            Command::View { path, view_range, .. } => Ok(Command::View {
                path,
                view_range,
                numbered,
            }),
            c => Ok(c),
        }
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
                format!("missing required argument command; pass one of {}", COMMANDS.join(", ")),
            ));
        };
        if !COMMANDS.contains(&command.as_str()) {
            return Err(MemoryError::invalid(
                ErrorCode::InvalidArgument,
                format!("unknown command {command:?}; use one of {}", COMMANDS.join(", ")),
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

#[cfg(test)]
mod set_tests {
    use super::*;

    #[test]
    fn arguments_by_type() {
        assert_eq!(ArgType::of("view_range"), Some(ArgType::Range));
        assert_eq!(ArgType::of("overwrite"), Some(ArgType::Bool));
        assert_eq!(ArgType::of("insert_line"), Some(ArgType::Int));
        assert_eq!(ArgType::of("new_path"), Some(ArgType::Str));
        assert_eq!(ArgType::of("colour"), None);
        for a in ARGUMENTS {
            assert!(ArgType::of(a).is_some(), "{a}");
        }
        let e = bad_type("insert_line", ArgType::Int.expected(), "str");
        assert_eq!(
            e.message,
            "insert_line must be an integer, got str; send insert_line as an integer and call again"
        );
        assert_eq!(e.code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn integers_and_ranges_from_what_was_read() {
        let got = || "bool".to_owned();
        assert_eq!(int_arg("insert_line", IntRead::Int(-3), got), Ok(ArgValue::Int(-3)));
        assert_eq!(
            int_arg("insert_line", IntRead::Bool, got).unwrap_err().message,
            "insert_line must be an integer, got bool; send insert_line as an integer and call again"
        );
        assert_eq!(
            int_arg("insert_line", IntRead::Big, || "int".to_owned())
                .unwrap_err()
                .message,
            "insert_line must be an integer within 64 bits, got int; send insert_line as an integer within 64 \
             bits and call again"
        );
        assert_eq!(
            int_arg("insert_line", IntRead::Other, || "str".to_owned())
                .unwrap_err()
                .code,
            ErrorCode::InvalidArgument
        );
        let list = || "list".to_owned();
        assert_eq!(
            range_arg("view_range", Some(&[IntRead::Int(1), IntRead::Int(-1)]), list),
            Ok(ArgValue::Range(1, -1))
        );
        let refused = "view_range must be an array of two integers [start, end], got list; send view_range as \
                       an array of two integers [start, end] and call again";
        for items in [
            &[IntRead::Int(1)][..],
            &[IntRead::Int(1), IntRead::Int(2), IntRead::Int(3)],
            &[IntRead::Int(1), IntRead::Bool],
            &[IntRead::Big, IntRead::Int(2)],
            &[IntRead::Int(1), IntRead::Other],
            &[],
        ] {
            assert_eq!(range_arg("view_range", Some(items), list).unwrap_err().message, refused);
        }
        assert_eq!(
            range_arg("view_range", None, || "str".to_owned()).unwrap_err().message,
            refused.replace("got list", "got str")
        );
        assert_eq!(
            NOT_A_MAPPING,
            "memory tool arguments must be a dict (a JSON object); pass them as one"
        );
    }

    #[test]
    fn set_builds_the_command() {
        let mut a = CommandArgs {
            command: Some("view".into()),
            ..Default::default()
        };
        a.set("command", None); // absent: the command given stays
        a.set("path", Some(ArgValue::Str("/memories/a.md".into())));
        a.set("view_range", Some(ArgValue::Range(1, 3)));
        a.set("old_str", None);
        assert_eq!(
            a.clone().into_command_numbered(true),
            Ok(Command::View {
                path: "/memories/a.md".into(),
                view_range: Some((1, 3)),
                numbered: true
            })
        );
        a.set("colour", Some(ArgValue::Str("red".into())));
        assert_eq!(a.unknown, vec!["colour".to_owned()]);
        let mut c = CommandArgs::default();
        c.set("command", Some(ArgValue::Str("create".into())));
        c.set("path", Some(ArgValue::Str("/memories/b.md".into())));
        c.set("file_text", Some(ArgValue::Str("x".into())));
        c.set("overwrite", Some(ArgValue::Bool(true)));
        assert_eq!(
            c.into_command_numbered(true),
            Ok(Command::Create {
                path: "/memories/b.md".into(),
                file_text: "x".into(),
                overwrite: true
            })
        );
    }
}
