//! Lexical path normalisation and confinement under the memory root.
//!
//! Nothing here touches an operating-system file system: paths are keys of the tree document.
use super::error::MemoryError;
use crate::errors::ErrorCode;

/// The longest path accepted, in UTF-8 bytes, both as sent and after it is joined under the
/// root and normalised. Far above any useful note name, and it keeps one hostile name from
/// filling the tree (path names count toward `max_bytes` too).
pub const MAX_PATH_BYTES: usize = 1024;

/// The memory root a memory tool uses unless it is given another.
pub const DEFAULT_ROOT: &str = "/memories";

/// The memory root, e.g. `/memories`: absolute, normalised, not `/` itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    path: String,
    parts: Vec<String>,
}

impl Root {
    /// Validates and normalises a root such as `/memories`.
    ///
    /// Errors (`InvalidArgument`): not absolute, `/` itself, a backslash or NUL byte, or a `..`
    /// that climbs above `/`.
    pub fn new(root: &str) -> Result<Root, MemoryError> {
        let bad = |why: &str| {
            MemoryError::invalid(
                ErrorCode::InvalidRoot,
                format!("memory root {root:?} is not usable: {why}; pass an absolute directory such as \"/memories\""),
            )
        };
        if !root.starts_with('/') {
            return Err(bad("it must start with /"));
        }
        if root.contains('\0') || root.contains('\\') {
            return Err(bad("it contains a NUL byte or a backslash"));
        }
        let parts = split_normalised(root).ok_or_else(|| bad("it climbs above /"))?;
        if parts.is_empty() {
            return Err(bad("it must be a directory below /, not / itself"));
        }
        let path = format!("/{}", parts.join("/"));
        Ok(Root { path, parts })
    }

    /// [`Root::new`] of `root`, or of [`DEFAULT_ROOT`] when none is given.
    pub fn of(root: Option<&str>) -> Result<Root, MemoryError> {
        Root::new(root.unwrap_or(DEFAULT_ROOT))
    }

    /// The normalised root, e.g. `/memories`.
    pub fn as_str(&self) -> &str {
        &self.path
    }

    /// True when `path` (already normalised) is the root or lies below it.
    pub fn contains(&self, path: &str) -> bool {
        path == self.path || (path.starts_with(&self.path) && path[self.path.len()..].starts_with('/'))
    }

    /// True when `path` may be a key of a stored tree: normalised, strictly below the root, no
    /// NUL byte or backslash. Deliberately not the stricter rules for new paths (control
    /// characters, length), so a tree written by an older version stays readable.
    pub fn holds_stored(&self, path: &str) -> bool {
        if path.contains('\0') || path.contains('\\') || !path.starts_with('/') {
            return false;
        }
        match split_normalised(path) {
            Some(parts) => {
                parts.len() > self.parts.len()
                    && parts[..self.parts.len()] == self.parts[..]
                    && format!("/{}", parts.join("/")) == path
            }
            None => false,
        }
    }

    /// Resolves a path the model sent to a normalised absolute path under the root.
    ///
    /// Relative paths join under the root; `.` and empty segments vanish; `..` pops a segment.
    /// Errors: an empty path (`InvalidArgument`, code `missing_argument`); a NUL byte, a
    /// backslash, a `..` that climbs above `/`, or a result outside the root
    /// (`PermissionDenied`).
    pub fn resolve(&self, arg: &str, input: &str) -> Result<String, MemoryError> {
        if input.is_empty() {
            return Err(MemoryError::invalid(
                ErrorCode::MissingArgument,
                format!(
                    "{arg} is empty; pass a path under {root}, e.g. {root}/notes.md",
                    root = self.path
                ),
            ));
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(too_long(arg, input.len()));
        }
        if input.contains('\0') {
            return Err(MemoryError::permission(format!(
                "{arg} {input:?} contains a NUL byte; use a plain path under {}",
                self.path
            )));
        }
        if let Some(c) = input.chars().find(|c| c.is_control()) {
            return Err(MemoryError::permission(format!(
                "{arg} {input:?} contains the control character U+{:04X}; memory paths are plain \
                 names under {} without line breaks, tabs or other control characters",
                c as u32, self.path
            )));
        }
        if input.contains('\\') {
            return Err(MemoryError::permission(format!(
                "{arg} {input:?} contains a backslash; memory paths are POSIX paths separated by / under {}",
                self.path
            )));
        }
        let joined;
        let full = if input.starts_with('/') {
            input
        } else {
            joined = format!("{}/{}", self.path, input);
            &joined
        };
        let outside = || {
            MemoryError::permission(format!(
                "{arg} {input:?} is outside the memory directory {root}; use a path under {root}/ \
                 (relative paths are joined under it)",
                root = self.path
            ))
        };
        let parts = split_normalised(full).ok_or_else(outside)?;
        if parts.len() < self.parts.len() || parts[..self.parts.len()] != self.parts[..] {
            return Err(outside());
        }
        let resolved = format!("/{}", parts.join("/"));
        if resolved.len() > MAX_PATH_BYTES {
            return Err(too_long(arg, resolved.len()));
        }
        Ok(resolved)
    }
}

fn too_long(arg: &str, len: usize) -> MemoryError {
    MemoryError::invalid(
        ErrorCode::PathTooLong,
        format!(
            "{arg} is {len} bytes long; a memory path may be at most {MAX_PATH_BYTES} bytes \
             (UTF-8, root included): choose a shorter name"
        ),
    )
}

/// Splits an absolute path into normalised segments; None when `..` climbs above `/`.
fn split_normalised(path: &str) -> Option<Vec<String>> {
    let mut parts: Vec<String> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s.to_string()),
        }
    }
    Some(parts)
}

/// The parent directory of a normalised absolute path (`/a/b` → `/a`); None for `/a`.
pub fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::error::ErrorKind;

    fn root() -> Root {
        Root::new("/memories").unwrap()
    }

    #[test]
    fn root_is_normalised_and_validated() {
        assert_eq!(Root::new("/memories/").unwrap().as_str(), "/memories");
        assert_eq!(Root::new("//a/./b/../c").unwrap().as_str(), "/a/c");
        for bad in ["memories", "/", "/..", "/a\\b", "/a\0", ""] {
            let e = Root::new(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{bad:?}");
            assert_eq!(e.code.as_str(), "invalid_root");
        }
    }

    #[test]
    fn resolves_inside_root() {
        let r = root();
        assert_eq!(r.resolve("path", "/memories").unwrap(), "/memories");
        assert_eq!(r.resolve("path", "/memories/").unwrap(), "/memories");
        assert_eq!(r.resolve("path", "/memories/a.txt").unwrap(), "/memories/a.txt");
        assert_eq!(r.resolve("path", "/memories/a/../b").unwrap(), "/memories/b");
        assert_eq!(r.resolve("path", "/memories/./x//y/").unwrap(), "/memories/x/y");
        assert_eq!(r.resolve("path", "notes/a.md").unwrap(), "/memories/notes/a.md");
        assert_eq!(r.resolve("path", "./a").unwrap(), "/memories/a");
        assert_eq!(r.resolve("path", "a/..").unwrap(), "/memories");
        assert_eq!(r.resolve("path", "/memories/../memories/z").unwrap(), "/memories/z");
    }

    #[test]
    fn refuses_escapes_with_permission_denied() {
        let r = root();
        for bad in [
            "/memories/../etc/passwd",
            "../x",
            "..",
            "/etc/passwd",
            "/memoriesX/a",
            "/memorie",
            "/",
            "/..",
            "/memories/../../../..",
            "a/../../b",
            "/memories\\..\\x",
            "a\\b",
            "a\0b",
            "//etc",
        ] {
            let e = r.resolve("path", bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::PermissionDenied, "{bad:?}");
            assert_eq!(e.code.as_str(), "permission_denied");
        }
        let e = r.resolve("path", "/etc/passwd").unwrap_err();
        assert_eq!(
            e.message,
            "path \"/etc/passwd\" is outside the memory directory /memories; use a path under \
             /memories/ (relative paths are joined under it)"
        );
        let e = r.resolve("old_path", "a\\b").unwrap_err();
        assert_eq!(
            e.message,
            "old_path \"a\\\\b\" contains a backslash; memory paths are POSIX paths separated by / under /memories"
        );
    }

    #[test]
    fn control_characters_are_refused_like_escapes() {
        let r = root();
        for bad in [
            "/memories/notes\n/memories/passwords.md",
            "a\tb",
            "a\rb",
            "a\u{7f}",
            "a\u{85}b",
        ] {
            let e = r.resolve("path", bad).unwrap_err();
            assert_eq!(
                (e.kind, e.code.as_str()),
                (ErrorKind::PermissionDenied, "permission_denied"),
                "{bad:?}"
            );
        }
        let e = r
            .resolve("path", "/memories/notes\n/memories/passwords.md")
            .unwrap_err();
        assert_eq!(
            e.message,
            "path \"/memories/notes\\n/memories/passwords.md\" contains the control character U+000A; \
             memory paths are plain names under /memories without line breaks, tabs or other control characters"
        );
        assert_eq!(
            r.resolve("path", "/memories/caf\u{e9} \u{1f600}.md").unwrap(),
            "/memories/caf\u{e9} \u{1f600}.md"
        );
    }

    #[test]
    fn path_length_is_capped_as_sent_and_resolved() {
        let r = root();
        let longest = format!("/memories/{}", "a".repeat(MAX_PATH_BYTES - "/memories/".len()));
        assert_eq!(r.resolve("path", &longest).unwrap(), longest);
        let e = r.resolve("path", &format!("{longest}b")).unwrap_err();
        assert_eq!((e.kind, e.code.as_str()), (ErrorKind::InvalidArgument, "path_too_long"));
        assert_eq!(
            e.message,
            "path is 1025 bytes long; a memory path may be at most 1024 bytes (UTF-8, root included): \
             choose a shorter name"
        );
        // relative: fits as sent, too long once joined under the root
        let rel = "a".repeat(MAX_PATH_BYTES - 5);
        let e = r.resolve("new_path", &rel).unwrap_err();
        assert_eq!(e.message, "new_path is 1029 bytes long; a memory path may be at most 1024 bytes (UTF-8, root included): choose a shorter name");
        let e = r.resolve("path", &"x".repeat(1 << 20)).unwrap_err();
        assert_eq!(e.code.as_str(), "path_too_long");
    }

    #[test]
    fn empty_path_is_a_missing_argument() {
        let e = root().resolve("path", "").unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert_eq!(e.code.as_str(), "missing_argument");
        assert_eq!(
            e.message,
            "path is empty; pass a path under /memories, e.g. /memories/notes.md"
        );
    }

    #[test]
    fn contains_and_parent() {
        let r = root();
        assert!(r.contains("/memories"));
        assert!(r.contains("/memories/a"));
        assert!(!r.contains("/memoriesa"));
        assert!(!r.contains("/memo"));
        assert_eq!(parent("/memories/a/b"), Some("/memories/a"));
        assert_eq!(parent("/memories"), None);
    }
}
