//! The tree document: every file of one memory namespace, keyed by normalised absolute path,
//! serialised as one JSON document so a store can change it with a single compare-and-set.
//!
//! Format (version 1), keys in this order, files sorted by path:
//! `{"format": "agentkit-memory-tree", "version": 1, "root": "/memories", "files": {"/memories/a.md": "text"}}`.
//! Directories are implicit: a directory exists when a file lies below it (the root always exists).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::MemoryError;
use super::path::Root;

/// The `format` field of every tree document.
pub const FORMAT: &str = "agentkit-memory-tree";
/// The document version this code reads and writes.
pub const VERSION: u32 = 1;

#[derive(Serialize)]
struct DocOut<'a> {
    format: &'static str,
    version: u32,
    root: &'a str,
    files: &'a BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct DocIn {
    format: String,
    version: u32,
    root: String,
    files: BTreeMap<String, String>,
}

/// One memory tree: files (path → text) under a root, with its size (the UTF-8 bytes of every
/// file's path and text, the figure `max_bytes` bounds) kept up to date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    root: Root,
    files: BTreeMap<String, String>,
    bytes: u64,
}

impl Tree {
    /// An empty tree under `root`.
    pub fn empty(root: Root) -> Tree {
        Tree {
            root,
            files: BTreeMap::new(),
            bytes: 0,
        }
    }

    /// Parses a stored document; `None` (the key is absent) is the empty tree.
    ///
    /// Errors (`Corrupt`): not JSON of this format, another version, another root, or a file
    /// path that is not a normalised path strictly below the root.
    pub fn from_json(root: &Root, doc: Option<&str>) -> Result<Tree, MemoryError> {
        let Some(text) = doc else {
            return Ok(Tree::empty(root.clone()));
        };
        let parsed: DocIn = serde_json::from_str(text).map_err(|e| {
            MemoryError::corrupt(format!(
                "the stored memory tree is not a valid {FORMAT} document ({e}); inspect the \
                 store key, or delete it to start an empty memory"
            ))
        })?;
        if parsed.format != FORMAT || parsed.version != VERSION {
            return Err(MemoryError::corrupt(format!(
                "the stored memory tree has format {:?} version {}; this agentkit-tools reads \
                 {FORMAT:?} version {VERSION}: upgrade agentkit-tools or use another namespace",
                parsed.format, parsed.version
            )));
        }
        if parsed.root != root.as_str() {
            return Err(MemoryError::corrupt(format!(
                "the stored memory tree was written with root {:?}, not {:?}; open it with \
                 root={:?} or use another namespace",
                parsed.root,
                root.as_str(),
                parsed.root
            )));
        }
        let mut bytes = 0u64;
        for (path, text) in &parsed.files {
            let ok = root.holds_stored(path);
            if !ok {
                return Err(MemoryError::corrupt(format!(
                    "the stored memory tree holds the path {path:?}, which is not a normalised \
                     path below {:?}; repair or delete the store key",
                    root.as_str()
                )));
            }
            bytes += (path.len() + text.len()) as u64;
        }
        Ok(Tree {
            root: root.clone(),
            files: parsed.files,
            bytes,
        })
    }

    /// The document text (deterministic: same files → same bytes).
    pub fn to_json(&self) -> String {
        let doc = DocOut {
            format: FORMAT,
            version: VERSION,
            root: self.root.as_str(),
            files: &self.files,
        };
        // Serialising strings and maps of strings cannot fail.
        serde_json::to_string(&doc).unwrap_or_default()
    }

    pub fn root(&self) -> &Root {
        &self.root
    }
    /// Total UTF-8 bytes of all file paths and texts (what `max_bytes` bounds).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// Number of files.
    pub fn file_count(&self) -> u64 {
        self.files.len() as u64
    }
    pub fn files(&self) -> &BTreeMap<String, String> {
        &self.files
    }
    pub fn get(&self, path: &str) -> Option<&str> {
        self.files.get(path).map(String::as_str)
    }
    /// True for the root and for any path with a file below it.
    pub fn is_dir(&self, path: &str) -> bool {
        path == self.root.as_str() || self.below(path).next().is_some()
    }
    /// The files strictly below directory `dir`, in path order.
    pub fn below<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a String, &'a String)> + 'a {
        let prefix = format!("{dir}/");
        self.files
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
    }

    pub(crate) fn insert_file(&mut self, path: String, text: String) {
        let plen = path.len() as u64;
        self.bytes += text.len() as u64;
        match self.files.insert(path, text) {
            Some(old) => self.bytes -= old.len() as u64,
            None => self.bytes += plen,
        }
    }
    pub(crate) fn remove_file(&mut self, path: &str) -> Option<String> {
        let old = self.files.remove(path)?;
        self.bytes -= (path.len() + old.len()) as u64;
        Some(old)
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
    fn absent_document_is_empty_tree() {
        let t = Tree::from_json(&root(), None).unwrap();
        assert_eq!(t.file_count(), 0);
        assert_eq!(t.bytes(), 0);
        assert_eq!(
            t.to_json(),
            r#"{"format":"agentkit-memory-tree","version":1,"root":"/memories","files":{}}"#
        );
    }

    #[test]
    fn round_trips_sorted_and_counts_utf8_bytes() {
        let mut t = Tree::empty(root());
        t.insert_file("/memories/z".into(), "é".into());
        t.insert_file("/memories/a/b".into(), "xyz".into());
        assert_eq!(t.bytes(), 5 + 11 + 13);
        let doc = t.to_json();
        assert_eq!(
            doc,
            r#"{"format":"agentkit-memory-tree","version":1,"root":"/memories","files":{"/memories/a/b":"xyz","/memories/z":"é"}}"#
        );
        let back = Tree::from_json(&root(), Some(&doc)).unwrap();
        assert_eq!(back, t);
        assert!(back.is_dir("/memories/a"));
        assert!(back.is_dir("/memories"));
        assert!(!back.is_dir("/memories/z"));
        t.insert_file("/memories/z".into(), "ab".into());
        assert_eq!(t.bytes(), 5 + 11 + 13);
        assert_eq!(t.remove_file("/memories/z"), Some("ab".into()));
        assert_eq!(t.bytes(), 3 + 13);
    }

    #[test]
    fn nul_in_text_is_escaped() {
        let mut t = Tree::empty(root());
        t.insert_file("/memories/n".into(), "a\0b".into());
        assert!(t.to_json().contains(r#""a\u0000b""#));
    }

    #[test]
    fn rejects_foreign_documents() {
        let r = root();
        let cases = [
            "not json",
            r#"{"format":"other","version":1,"root":"/memories","files":{}}"#,
            r#"{"format":"agentkit-memory-tree","version":2,"root":"/memories","files":{}}"#,
            r#"{"format":"agentkit-memory-tree","version":1,"root":"/notes","files":{}}"#,
            r#"{"format":"agentkit-memory-tree","version":1,"root":"/memories","files":{"/etc/x":"a"}}"#,
            r#"{"format":"agentkit-memory-tree","version":1,"root":"/memories","files":{"/memories/a/../b":"a"}}"#,
            r#"{"format":"agentkit-memory-tree","version":1,"root":"/memories","files":{"/memories":"a"}}"#,
        ];
        for c in cases {
            let e = Tree::from_json(&r, Some(c)).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Corrupt, "{c}");
        }
        let e = Tree::from_json(&r, Some(cases[2])).unwrap_err();
        assert_eq!(
            e.message,
            "the stored memory tree has format \"agentkit-memory-tree\" version 2; this agentkit-tools \
             reads \"agentkit-memory-tree\" version 1: upgrade agentkit-tools or use another namespace"
        );
    }
}
