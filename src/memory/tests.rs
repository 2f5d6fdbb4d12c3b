//! Unit tests of the command engine, the argument checks and the compare-and-set loop.
use std::collections::HashMap;
use std::time::Duration;

use super::*;

fn root() -> Root {
    Root::new("/memories").unwrap()
}

fn tree_with(files: &[(&str, &str)]) -> Tree {
    let mut t = Tree::empty(root());
    for (p, x) in files {
        t.insert_file(p.to_string(), x.to_string());
    }
    t
}

fn run(t: &mut Tree, cmd: Command) -> Result<Outcome, MemoryError> {
    apply(t, &cmd, &Limits::default())
}

fn view(p: &str) -> Command {
    Command::View {
        path: p.into(),
        view_range: None,
        numbered: false,
    }
}
fn view_range(p: &str, a: i64, b: i64) -> Command {
    Command::View {
        path: p.into(),
        view_range: Some((a, b)),
        numbered: false,
    }
}
fn create(p: &str, x: &str) -> Command {
    Command::Create {
        path: p.into(),
        file_text: x.into(),
        overwrite: false,
    }
}
fn replace(p: &str, a: &str, b: &str) -> Command {
    Command::StrReplace {
        path: p.into(),
        old_str: a.into(),
        new_str: b.into(),
    }
}
fn insert(p: &str, n: i64, x: &str) -> Command {
    Command::Insert {
        path: p.into(),
        insert_line: n,
        insert_text: x.into(),
    }
}
fn delete(p: &str) -> Command {
    Command::Delete { path: p.into() }
}
fn rename(a: &str, b: &str) -> Command {
    Command::Rename {
        old_path: a.into(),
        new_path: b.into(),
    }
}

/// Asserts the command fails with (kind, code, message) and leaves the tree unchanged.
fn fails(t: &mut Tree, cmd: Command, kind: ErrorKind, code: &str, message: &str) {
    let before = t.clone();
    let e = run(t, cmd).unwrap_err();
    assert_eq!((e.kind, e.code.as_str(), e.message.as_str()), (kind, code, message));
    assert_eq!(*t, before, "a failed command changed the tree");
}

// ---------------------------------------------------------------- view

#[test]
fn view_lists_directories_sorted_one_per_line() {
    let mut t = tree_with(&[
        ("/memories/b.md", "B"),
        ("/memories/a/x.md", "X"),
        ("/memories/a/y.md", "Y"),
    ]);
    let out = run(&mut t, view("/memories")).unwrap();
    assert_eq!(
        out,
        Outcome {
            changed: false,
            text: "/memories/a/x.md\n/memories/a/y.md\n/memories/b.md".into()
        }
    );
    assert_eq!(
        run(&mut t, view("a")).unwrap().text,
        "/memories/a/x.md\n/memories/a/y.md"
    );
    assert_eq!(run(&mut Tree::empty(root()), view("/memories")).unwrap().text, "");
}

#[test]
fn view_file_and_ranges() {
    let mut t = tree_with(&[("/memories/f", "one\ntwo\nthree\n")]);
    assert_eq!(run(&mut t, view("/memories/f")).unwrap().text, "one\ntwo\nthree\n");
    assert_eq!(run(&mut t, view_range("/memories/f", 2, 3)).unwrap().text, "two\nthree");
    assert_eq!(run(&mut t, view_range("/memories/f", 1, 1)).unwrap().text, "one");
    assert_eq!(
        run(&mut t, view_range("/memories/f", 2, -1)).unwrap().text,
        "two\nthree"
    );
    let msg = "view_range [0, 2] is out of range for /memories/f, which has 3 line(s); pass [start, end] \
               with 1 <= start <= end <= 3 (end may be -1 for the last line), or omit view_range to read the whole file";
    fails(
        &mut t,
        view_range("/memories/f", 0, 2),
        ErrorKind::InvalidArgument,
        "out_of_range",
        msg,
    );
    for (a, b) in [(3, 2), (1, 4), (4, 4), (2, -2)] {
        let e = run(&mut t, view_range("/memories/f", a, b)).unwrap_err();
        assert_eq!(e.code.as_str(), "out_of_range", "[{a}, {b}]");
    }
    let mut e = tree_with(&[("/memories/e", "")]);
    assert_eq!(
        run(&mut e, view_range("/memories/e", 1, 1)).unwrap_err().code.as_str(),
        "out_of_range"
    );
    // Not "pass [start, end] with 1 <= start <= end <= 0", which no range meets.
    fails(
        &mut e,
        view_range("/memories/e", 1, -1),
        ErrorKind::InvalidArgument,
        "out_of_range",
        "view_range [1, -1] is out of range for /memories/e, which is empty (0 lines); omit view_range to \
         view it, or add text with create (overwrite=true) or insert at line 0",
    );
}

#[test]
fn view_errors() {
    let mut t = tree_with(&[("/memories/d/f", "x")]);
    fails(
        &mut t,
        view("/memories/nope"),
        ErrorKind::NotFound,
        "not_found",
        "no file or directory at /memories/nope; view /memories to list the existing files",
    );
    fails(
        &mut t,
        view_range("/memories/d", 1, 1),
        ErrorKind::InvalidArgument,
        "is_a_directory",
        "/memories/d is a directory; view_range applies to files only: omit it to list the directory",
    );
    fails(
        &mut t,
        view("/etc/passwd"),
        ErrorKind::PermissionDenied,
        "permission_denied",
        "path \"/etc/passwd\" is outside the memory directory /memories; use a path under /memories/ \
         (relative paths are joined under it)",
    );
}

// ---------------------------------------------------------------- create

#[test]
fn create_writes_and_refuses_clobber() {
    let mut t = Tree::empty(root());
    let out = run(&mut t, create("notes/a.md", "héllo")).unwrap();
    assert_eq!(
        out,
        Outcome {
            changed: true,
            text: "File created successfully at /memories/notes/a.md (6 bytes).".into()
        }
    );
    assert_eq!(t.get("/memories/notes/a.md"), Some("héllo"));
    assert_eq!(t.bytes(), 6 + 20); // text and path
    fails(
        &mut t,
        create("/memories/notes/a.md", "other"),
        ErrorKind::AlreadyExists,
        "already_exists",
        "/memories/notes/a.md already exists; pass overwrite=true to replace it, use str_replace or insert \
         to edit it, or pick another path",
    );
    let over = Command::Create {
        path: "/memories/notes/a.md".into(),
        file_text: "new".into(),
        overwrite: true,
    };
    assert_eq!(
        run(&mut t, over).unwrap().text,
        "File /memories/notes/a.md overwritten (3 bytes)."
    );
    assert_eq!(t.get("/memories/notes/a.md"), Some("new"));
    assert_eq!(t.bytes(), 3 + 20);
    assert_eq!(t.file_count(), 1);
}

#[test]
fn create_refuses_directories_and_files_as_parents() {
    let mut t = tree_with(&[("/memories/d/f", "x"), ("/memories/file", "y")]);
    fails(
        &mut t,
        create("/memories", "x"),
        ErrorKind::InvalidArgument,
        "is_a_directory",
        "/memories is the memory root directory; create a file below it, e.g. /memories/notes.md",
    );
    fails(
        &mut t,
        create("/memories/d", "x"),
        ErrorKind::InvalidArgument,
        "is_a_directory",
        "/memories/d is a directory; choose a file path such as /memories/d/notes.md",
    );
    fails(
        &mut t,
        create("/memories/file/sub/x", "x"),
        ErrorKind::InvalidArgument,
        "not_a_directory",
        "/memories/file is a file, so /memories/file/sub/x cannot be created below it; choose another path",
    );
    fails(&mut t, create("../x", "x"), ErrorKind::PermissionDenied, "permission_denied",
        "path \"../x\" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)");
    let e = run(&mut t, create("a\0b", "x")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
}

// ---------------------------------------------------------------- str_replace

#[test]
fn str_replace_exactly_once() {
    let mut t = tree_with(&[("/memories/f", "alpha\nbeta\ngamma\n")]);
    let out = run(&mut t, replace("/memories/f", "beta", "BETA")).unwrap();
    assert_eq!(
        out,
        Outcome {
            changed: true,
            text: "The file /memories/f has been edited.".into()
        }
    );
    assert_eq!(t.get("/memories/f"), Some("alpha\nBETA\ngamma\n"));
    // Deleting text with an empty new_str.
    run(&mut t, replace("/memories/f", "BETA\n", "")).unwrap();
    assert_eq!(t.get("/memories/f"), Some("alpha\ngamma\n"));
    // A replacement that changes nothing needs no write.
    assert!(!run(&mut t, replace("/memories/f", "alpha", "alpha")).unwrap().changed);
    assert_eq!(t.bytes(), 12 + 11);
}

#[test]
fn str_replace_errors_say_how_many_and_what_to_do() {
    let mut t = tree_with(&[("/memories/f", "x = 1\ny = 1\nz = 1\n"), ("/memories/aaa", "aaa")]);
    fails(
        &mut t,
        replace("/memories/f", "= 1", "= 2"),
        ErrorKind::InvalidArgument,
        "ambiguous_match",
        "old_str occurs 3 times in /memories/f (at lines 1, 2, 3); it must occur exactly once: add \
         surrounding context to old_str so it matches only the place you mean",
    );
    // Overlapping occurrences count.
    fails(
        &mut t,
        replace("/memories/aaa", "aa", "b"),
        ErrorKind::InvalidArgument,
        "ambiguous_match",
        "old_str occurs 2 times in /memories/aaa (at lines 1, 1); it must occur exactly once: add \
         surrounding context to old_str so it matches only the place you mean",
    );
    fails(
        &mut t,
        replace("/memories/f", "w = 1", "w = 2"),
        ErrorKind::InvalidArgument,
        "no_match",
        "old_str was not found in /memories/f; view the file and copy the exact text, including \
         whitespace and line breaks",
    );
    fails(
        &mut t,
        replace("/memories/f", "", "x"),
        ErrorKind::InvalidArgument,
        "missing_argument",
        "old_str is empty; pass the exact text to replace in /memories/f, copied from a view of the file",
    );
    fails(
        &mut t,
        replace("/memories/missing", "a", "b"),
        ErrorKind::NotFound,
        "not_found",
        "no file at /memories/missing; create it first with the create command, or view /memories to list \
         the existing files",
    );
    let mut d = tree_with(&[("/memories/d/f", "a")]);
    fails(
        &mut d,
        replace("/memories/d", "a", "b"),
        ErrorKind::InvalidArgument,
        "is_a_directory",
        "/memories/d is a directory; str_replace needs a file path (view /memories/d to list its files)",
    );
}

#[test]
fn str_replace_lists_the_first_ten_matches_and_counts_the_rest() {
    let text: String = (1..=25).map(|i| format!("item {i}: todo\n")).collect();
    let mut t = tree_with(&[("/memories/f", &text), ("/memories/e", "h\u{e9}\u{e9}\u{e9}\n\u{e9}")]);
    fails(
        &mut t,
        replace("/memories/f", "todo", "done"),
        ErrorKind::InvalidArgument,
        "ambiguous_match",
        "old_str occurs 25 times in /memories/f (at lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 15 more); it must \
         occur exactly once: add surrounding context to old_str so it matches only the place you mean",
    );
    // Multi-byte characters: overlapping matches start on character boundaries only.
    fails(
        &mut t,
        replace("/memories/e", "\u{e9}\u{e9}", "x"),
        ErrorKind::InvalidArgument,
        "ambiguous_match",
        "old_str occurs 2 times in /memories/e (at lines 1, 1); it must occur exactly once: add \
         surrounding context to old_str so it matches only the place you mean",
    );
    run(&mut t, replace("/memories/e", "\u{e9}\n\u{e9}", "!")).unwrap();
    assert_eq!(t.get("/memories/e"), Some("h\u{e9}\u{e9}!"));
    // A needle with a repeated prefix (a failure-table path) is found where it is.
    let mut k = tree_with(&[("/memories/k", "aabaabaaab\nabaaab")]);
    run(&mut k, replace("/memories/k", "aabaaab", "X")).unwrap();
    assert_eq!(k.get("/memories/k"), Some("aabX\nabaaab"));
}

#[test]
fn str_replace_counting_is_linear_for_needles_that_match_almost_everywhere() {
    // Restarting a search after each overlapping match took time quadratic in these sizes
    // (minutes for the first, far longer for the second); one pass takes milliseconds.
    let mut t = tree_with(&[("/memories/a", &"a".repeat(4_000_000))]);
    let e = run(&mut t, replace("/memories/a", "a", "b")).unwrap_err();
    assert_eq!(
        e.message,
        "old_str occurs 4000000 times in /memories/a (at lines 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 and 3999990 more); \
         it must occur exactly once: add surrounding context to old_str so it matches only the place you mean"
    );
    let e = run(&mut t, replace("/memories/a", &"a".repeat(1_000_000), "b")).unwrap_err();
    assert!(
        e.message.starts_with(
            "old_str occurs 3000001 times in /memories/a (at lines 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 and 2999991 more)"
        ),
        "{}",
        e.message
    );
    let e = run(
        &mut t,
        replace("/memories/a", &format!("{}b", "a".repeat(1_000_000)), "b"),
    )
    .unwrap_err();
    assert_eq!(e.code.as_str(), "no_match");
}

// ---------------------------------------------------------------- insert

#[test]
fn insert_adds_whole_lines() {
    let mut t = tree_with(&[("/memories/f", "a\nb\n")]);
    assert_eq!(
        run(&mut t, insert("/memories/f", 0, "top")).unwrap().text,
        "Text inserted after line 0 of /memories/f."
    );
    assert_eq!(t.get("/memories/f"), Some("top\na\nb\n"));
    run(&mut t, insert("/memories/f", 2, "mid\n")).unwrap();
    assert_eq!(t.get("/memories/f"), Some("top\na\nmid\nb\n"));
    run(&mut t, insert("/memories/f", 4, "end1\nend2")).unwrap();
    assert_eq!(t.get("/memories/f"), Some("top\na\nmid\nb\nend1\nend2\n"));
    // A text without a final line break gets none: the inserted line's own break is dropped.
    let mut u = tree_with(&[("/memories/g", "x\ny")]);
    run(&mut u, insert("/memories/g", 2, "z")).unwrap();
    assert_eq!(u.get("/memories/g"), Some("x\ny\nz"));
    let mut u = tree_with(&[("/memories/g", "a\nb")]);
    run(&mut u, insert("/memories/g", 2, "end\n")).unwrap();
    assert_eq!(u.get("/memories/g"), Some("a\nb\nend"));
    // After the empty last line of a text that ends with a line break.
    let mut u = tree_with(&[("/memories/g", "a\nb\n")]);
    run(&mut u, insert("/memories/g", 3, "end\n")).unwrap();
    assert_eq!(u.get("/memories/g"), Some("a\nb\n\nend"));
    let mut e = tree_with(&[("/memories/e", "")]);
    run(&mut e, insert("/memories/e", 0, "first")).unwrap();
    assert_eq!(e.get("/memories/e"), Some("first\n"));
}

#[test]
fn insert_line_must_be_in_range() {
    let mut t = tree_with(&[("/memories/f", "a\nb\n")]);
    let msg3 = "insert_line 4 is out of range for /memories/f, which has 3 line(s) counting an empty last \
         line after a final line break; pass 0 to insert at the top or a value from 1 to 3 to insert \
         after that line";
    fails(
        &mut t,
        insert("/memories/f", 4, "x"),
        ErrorKind::InvalidArgument,
        "out_of_range",
        msg3,
    );
    let e = run(&mut t, insert("/memories/f", -1, "x")).unwrap_err();
    assert_eq!(e.code.as_str(), "out_of_range");
    fails(&mut t, insert("/memories/nope", 0, "x"), ErrorKind::NotFound, "not_found",
        "no file at /memories/nope; create it first with the create command, or view /memories to list the existing files");
}

// ---------------------------------------------------------------- delete

#[test]
fn delete_files_and_directories_never_the_root() {
    let mut t = tree_with(&[
        ("/memories/a", "1"),
        ("/memories/d/x", "22"),
        ("/memories/d/y/z", "333"),
        ("/memories/dd", "4"),
    ]);
    assert_eq!(
        run(&mut t, delete("/memories/a")).unwrap().text,
        "Deleted file /memories/a."
    );
    assert_eq!(
        run(&mut t, delete("d")).unwrap().text,
        "Deleted directory /memories/d (2 file(s))."
    );
    assert_eq!(t.files().keys().collect::<Vec<_>>(), vec!["/memories/dd"]);
    assert_eq!(t.bytes(), 1 + 12);
    fails(
        &mut t,
        delete("/memories"),
        ErrorKind::PermissionDenied,
        "permission_denied",
        "refusing to delete the memory root /memories; delete the files or directories below it one by one",
    );
    fails(
        &mut t,
        delete("/memories/x/.."),
        ErrorKind::PermissionDenied,
        "permission_denied",
        "refusing to delete the memory root /memories; delete the files or directories below it one by one",
    );
    fails(
        &mut t,
        delete("/memories/d"),
        ErrorKind::NotFound,
        "not_found",
        "no file or directory at /memories/d; view /memories to list the existing files",
    );
    fails(&mut t, delete("/tmp"), ErrorKind::PermissionDenied, "permission_denied",
        "path \"/tmp\" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)");
}

// ---------------------------------------------------------------- rename

#[test]
fn rename_files_and_directories() {
    let mut t = tree_with(&[("/memories/a", "1"), ("/memories/d/x", "2"), ("/memories/d/y/z", "3")]);
    assert_eq!(
        run(&mut t, rename("/memories/a", "/memories/sub/b")).unwrap().text,
        "Renamed /memories/a to /memories/sub/b."
    );
    assert_eq!(
        run(&mut t, rename("d", "e")).unwrap().text,
        "Renamed directory /memories/d to /memories/e (2 file(s))."
    );
    assert_eq!(
        t.files()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("/memories/e/x", "2"),
            ("/memories/e/y/z", "3"),
            ("/memories/sub/b", "1")
        ]
    );
    assert_eq!(t.bytes(), 3 + 13 + 15 + 15);
}

#[test]
fn rename_refusals() {
    let mut t = tree_with(&[("/memories/a", "1"), ("/memories/b", "2"), ("/memories/d/x", "3")]);
    fails(&mut t, rename("/memories/a", "/memories/b"), ErrorKind::AlreadyExists, "already_exists",
        "cannot rename /memories/a to /memories/b: /memories/b already exists; delete it first or choose another new_path");
    fails(&mut t, rename("/memories/a", "/memories/d"), ErrorKind::AlreadyExists, "already_exists",
        "cannot rename /memories/a to /memories/d: /memories/d already exists; delete it first or choose another new_path");
    // Onto itself: not "already exists; delete it first" (following that loses the file).
    let same = "old_path and new_path are both /memories/a, so there is nothing to rename and nothing was \
                changed; pass the new name as new_path";
    fails(
        &mut t,
        rename("/memories/a", "/memories/a"),
        ErrorKind::InvalidArgument,
        "invalid_argument",
        same,
    );
    fails(
        &mut t,
        rename("a", "/memories/x/../a/"),
        ErrorKind::InvalidArgument,
        "invalid_argument",
        same,
    );
    fails(
        &mut t,
        rename("/memories/d", "d"),
        ErrorKind::InvalidArgument,
        "invalid_argument",
        "old_path and new_path are both /memories/d, so there is nothing to rename and nothing was changed; pass \
         the new name as new_path",
    );
    fails(
        &mut t,
        rename("/memories/nope", "/memories/nope"),
        ErrorKind::NotFound,
        "not_found",
        "no file or directory at /memories/nope; view /memories to list the existing files",
    );
    fails(
        &mut t,
        rename("/memories/zz", "/memories/c"),
        ErrorKind::NotFound,
        "not_found",
        "no file or directory at /memories/zz; view /memories to list the existing files",
    );
    fails(
        &mut t,
        rename("/memories", "/memories/r"),
        ErrorKind::PermissionDenied,
        "permission_denied",
        "cannot rename /memories to /memories/r: the memory root /memories cannot be moved or replaced",
    );
    fails(
        &mut t,
        rename("/memories/d", "/memories/d/inner"),
        ErrorKind::InvalidArgument,
        "invalid_argument",
        "cannot move directory /memories/d into itself (/memories/d/inner); choose a new_path outside /memories/d",
    );
    fails(
        &mut t,
        rename("/memories/d", "/memories/a/x"),
        ErrorKind::InvalidArgument,
        "not_a_directory",
        "/memories/a is a file, so /memories/a/x cannot be created below it; choose another path",
    );
    fails(&mut t, rename("/memories/a", "/elsewhere/a"), ErrorKind::PermissionDenied, "permission_denied",
        "new_path \"/elsewhere/a\" is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)");
}

// ---------------------------------------------------------------- limits

#[test]
fn max_bytes_refuses_growth_and_changes_nothing() {
    // "/memories/a" and "/memories/b" are 11 bytes each: paths count as well as texts.
    let limits = Limits {
        max_bytes: 30,
        max_files: 100,
    };
    let mut t = tree_with(&[("/memories/a", "12345678")]);
    assert_eq!(t.bytes(), 19);
    let before = t.clone();
    let e = apply(&mut t, &create("/memories/b", "xyz"), &limits).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Limit);
    assert_eq!(e.code.as_str(), "memory_limit");
    assert_eq!(
        e.limit,
        Some(LimitInfo {
            limit: "max_bytes",
            maximum: 30,
            used: 19,
            requested: 33
        })
    );
    assert_eq!(
        e.message,
        "memory limit max_bytes=30 exceeded: the tree holds 19 bytes (file texts and paths) and this \
         create on /memories/b would make it 33 bytes (+14); nothing was changed. Shorten or delete files \
         under /memories, then try again"
    );
    assert_eq!(t, before);
    let e = apply(&mut t, &replace("/memories/a", "1", "1234567890123"), &limits).unwrap_err();
    assert_eq!(
        e.limit,
        Some(LimitInfo {
            limit: "max_bytes",
            maximum: 30,
            used: 19,
            requested: 31
        })
    );
    assert_eq!(t, before);
    // Exactly at the limit is fine: an empty file costs its path.
    apply(&mut t, &create("/memories/b", ""), &limits).unwrap();
    assert_eq!(t.bytes(), 30);
    let e = apply(&mut t, &insert("/memories/b", 0, ""), &limits).unwrap_err();
    assert_eq!(
        e.limit,
        Some(LimitInfo {
            limit: "max_bytes",
            maximum: 30,
            used: 30,
            requested: 31
        })
    );
    // A rename that lengthens a path grows the tree; one that shortens it is always allowed.
    let e = apply(&mut t, &rename("/memories/b", "/memories/bb"), &limits).unwrap_err();
    assert_eq!(
        e.limit,
        Some(LimitInfo {
            limit: "max_bytes",
            maximum: 30,
            used: 30,
            requested: 31
        })
    );
    assert_eq!(
        e.message,
        "memory limit max_bytes=30 exceeded: the tree holds 30 bytes (file texts and paths) and this \
         rename on /memories/bb would make it 31 bytes (+1); nothing was changed. Shorten or delete files \
         under /memories, then try again"
    );
    apply(&mut t, &rename("/memories/b", "/memories/c/../b2"), &limits).unwrap_err();
    apply(&mut t, &rename("/memories/a", "/memories/x"), &limits).unwrap();
    assert_eq!(t.bytes(), 30);
    // Shrinking is always allowed, even over a lowered limit.
    let tight = Limits {
        max_bytes: 5,
        max_files: 100,
    };
    apply(&mut t, &replace("/memories/x", "12345678", "1234567"), &tight).unwrap();
    assert_eq!(t.bytes(), 29);
}

#[test]
fn empty_files_with_long_names_cannot_outgrow_max_bytes() {
    let limits = Limits {
        max_bytes: 100,
        max_files: 100,
    };
    let mut t = Tree::empty(root());
    let long = format!("/memories/{}", "n".repeat(80));
    apply(&mut t, &create(&long, ""), &limits).unwrap();
    assert_eq!(t.bytes(), 90);
    let e = apply(&mut t, &create(&format!("{long}2"), ""), &limits).unwrap_err();
    assert_eq!(
        e.limit,
        Some(LimitInfo {
            limit: "max_bytes",
            maximum: 100,
            used: 90,
            requested: 181
        })
    );
    assert_eq!(t.file_count(), 1);
}

// ---------------------------------------------------------------- the tool's view (numbered)

#[test]
fn numbered_view_for_the_model() {
    let mut t = tree_with(&[
        ("/memories/f", "one\ntwo\nthree\n"),
        ("/memories/e", ""),
        ("/memories/g", "x\n\ny"),
    ]);
    let nv = |p: &str, r: Option<(i64, i64)>| Command::View {
        path: p.into(),
        view_range: r,
        numbered: true,
    };
    assert_eq!(
        run(&mut t, nv("/memories/f", None)).unwrap().text,
        "     1\tone\n     2\ttwo\n     3\tthree"
    );
    assert_eq!(
        run(&mut t, nv("/memories/f", Some((2, -1)))).unwrap().text,
        "     2\ttwo\n     3\tthree"
    );
    assert_eq!(
        run(&mut t, nv("/memories/g", None)).unwrap().text,
        "     1\tx\n     2\t\n     3\ty"
    );
    assert_eq!(
        run(&mut t, nv("/memories/e", None)).unwrap().text,
        "The file /memories/e is empty."
    );
    // Directories list as the backends do; an empty one says so.
    assert_eq!(
        run(&mut t, nv("/memories", None)).unwrap().text,
        "/memories/e\n/memories/f\n/memories/g"
    );
    assert_eq!(
        run(&mut Tree::empty(root()), nv("/memories", None)).unwrap().text,
        "The directory /memories is empty."
    );
    // "/" lists everything for a backend caller, never for the tool.
    assert_eq!(
        run(&mut t, view("/")).unwrap().text,
        "/memories/e\n/memories/f\n/memories/g"
    );
    assert_eq!(
        run(&mut t, nv("/", None)).unwrap_err().code.as_str(),
        "permission_denied"
    );
    assert_eq!(
        number_lines("/memories/h", &"l\n".repeat(1_000_000), 1).lines().last(),
        Some("1000000\tl")
    );
}

#[test]
fn max_files_refuses_new_files_only() {
    let limits = Limits {
        max_bytes: 1000,
        max_files: 2,
    };
    let mut t = tree_with(&[("/memories/a", "1"), ("/memories/b", "2")]);
    let before = t.clone();
    let e = apply(&mut t, &create("/memories/c", "3"), &limits).unwrap_err();
    assert_eq!(
        e.limit,
        Some(LimitInfo {
            limit: "max_files",
            maximum: 2,
            used: 2,
            requested: 3
        })
    );
    assert_eq!(
        e.message,
        "memory limit max_files=2 exceeded: the tree holds 2 files and this create would make it 3; nothing \
         was changed. Delete or merge files under /memories, then try again"
    );
    assert_eq!(t, before);
    // Overwriting, editing and renaming do not add files.
    let over = Command::Create {
        path: "/memories/a".into(),
        file_text: "x".into(),
        overwrite: true,
    };
    apply(&mut t, &over, &limits).unwrap();
    apply(&mut t, &rename("/memories/b", "/memories/c"), &limits).unwrap();
    assert_eq!(t.file_count(), 2);
}

#[test]
fn str_replace_over_max_bytes_reports_exact_numbers() {
    let limits = Limits {
        max_bytes: 10,
        max_files: 100,
    };
    let mut t = tree_with(&[("/memories/a", "12345678")]);
    let e = apply(&mut t, &replace("/memories/a", "1", "1234"), &limits).unwrap_err();
    assert_eq!(
        e.limit,
        Some(LimitInfo {
            limit: "max_bytes",
            maximum: 10,
            used: 8 + 11,
            requested: 11 + 11
        })
    );
}

// ---------------------------------------------------------------- arguments

fn args(command: &str) -> CommandArgs {
    CommandArgs {
        command: Some(command.into()),
        ..Default::default()
    }
}

#[test]
fn args_build_each_command() {
    let a = CommandArgs {
        path: Some("/memories/f".into()),
        view_range: Some((1, 2)),
        ..args("view")
    };
    assert_eq!(
        a.into_command().unwrap(),
        Command::View {
            path: "/memories/f".into(),
            view_range: Some((1, 2)),
            numbered: false,
        }
    );
    let a = CommandArgs {
        path: Some("f".into()),
        file_text: Some("t".into()),
        ..args("create")
    };
    assert_eq!(
        a.into_command().unwrap(),
        Command::Create {
            path: "f".into(),
            file_text: "t".into(),
            overwrite: false
        }
    );
    let a = CommandArgs {
        path: Some("f".into()),
        old_str: Some("a".into()),
        new_str: Some("".into()),
        ..args("str_replace")
    };
    assert_eq!(
        a.into_command().unwrap(),
        Command::StrReplace {
            path: "f".into(),
            old_str: "a".into(),
            new_str: "".into()
        }
    );
    let a = CommandArgs {
        path: Some("f".into()),
        insert_line: Some(3),
        insert_text: Some("x".into()),
        ..args("insert")
    };
    assert_eq!(
        a.into_command().unwrap(),
        Command::Insert {
            path: "f".into(),
            insert_line: 3,
            insert_text: "x".into()
        }
    );
    let a = CommandArgs {
        path: Some("f".into()),
        ..args("delete")
    };
    assert_eq!(a.into_command().unwrap(), Command::Delete { path: "f".into() });
    let a = CommandArgs {
        path: Some("f".into()),
        new_path: Some("g".into()),
        ..args("rename")
    };
    assert_eq!(
        a.into_command().unwrap(),
        Command::Rename {
            old_path: "f".into(),
            new_path: "g".into()
        }
    );
    let a = CommandArgs {
        path: Some("f".into()),
        old_path: Some("f".into()),
        new_path: Some("g".into()),
        ..args("rename")
    };
    assert_eq!(
        a.into_command().unwrap(),
        Command::Rename {
            old_path: "f".into(),
            new_path: "g".into()
        }
    );
}

#[test]
fn args_errors_name_every_problem() {
    let e = CommandArgs::default().into_command().unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "missing_argument",
            "missing required argument command; pass one of view, create, str_replace, insert, delete, rename"
        )
    );
    let e = args("move").into_command().unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "invalid_argument",
            "unknown command \"move\"; use one of view, create, str_replace, insert, delete, rename"
        )
    );
    let e = args("insert").into_command().unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "missing_argument",
            "command \"insert\" is missing required argument(s) path, insert_line, insert_text; it takes path, \
         insert_line, insert_text (required: path, insert_line, insert_text)"
        )
    );
    let e = CommandArgs {
        path: Some("f".into()),
        ..args("str_replace")
    }
    .into_command()
    .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "missing_argument",
            "command \"str_replace\" is missing required argument(s) old_str, new_str; it takes path, old_str, \
         new_str (required: path, old_str, new_str)"
        )
    );
    let e = CommandArgs {
        path: Some("f".into()),
        file_text: Some("x".into()),
        overwrite: Some(true),
        ..args("view")
    }
    .into_command()
    .unwrap_err();
    assert_eq!((e.code.as_str(), e.message.as_str()), ("unexpected_argument",
        "command \"view\" does not take file_text, overwrite; it takes path, view_range. Remove the others and call again"));
    let e = CommandArgs {
        unknown: vec!["colour".into()],
        ..args("view")
    }
    .into_command()
    .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "unexpected_argument",
            "unexpected argument(s) colour; the memory tool accepts command, path, file_text, overwrite, old_str, \
         new_str, insert_line, insert_text, view_range, old_path, new_path. Remove them and call again"
        )
    );
    let e = CommandArgs {
        path: Some("a".into()),
        old_path: Some("b".into()),
        new_path: Some("c".into()),
        ..args("rename")
    }
    .into_command()
    .unwrap_err();
    assert_eq!((e.code.as_str(), e.message.as_str()), ("invalid_argument",
        "rename got path \"a\" and old_path \"b\", which differ; pass only old_path (path is an alias of it) and new_path"));
    let e = CommandArgs {
        new_path: Some("c".into()),
        ..args("rename")
    }
    .into_command()
    .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "missing_argument",
            "command \"rename\" is missing required argument(s) old_path; it takes old_path, new_path, path \
         (required: old_path, new_path)"
        )
    );
}

// ---------------------------------------------------------------- compare-and-set loop

/// A fake store that loses the first `lose` compare-and-sets on purpose: before answering
/// false it lets a rival edit land, as a concurrent writer would.
struct FakeStore {
    docs: HashMap<String, String>,
    lose: u32,
    rival: Option<Box<dyn FnMut(Option<String>) -> String>>,
    gets: u32,
    cas_calls: u32,
}

impl FakeStore {
    fn new() -> Self {
        FakeStore {
            docs: HashMap::new(),
            lose: 0,
            rival: None,
            gets: 0,
            cas_calls: 0,
        }
    }
    fn get(&mut self, key: &str) -> Option<String> {
        self.gets += 1;
        self.docs.get(key).cloned()
    }
    fn cas(&mut self, key: &str, expected: Option<&str>, value: &str) -> bool {
        self.cas_calls += 1;
        if self.lose > 0 {
            self.lose -= 1;
            if let Some(r) = self.rival.as_mut() {
                let next = r(self.docs.get(key).cloned());
                self.docs.insert(key.into(), next);
            }
            return false;
        }
        if self.docs.get(key).map(String::as_str) != expected {
            return false;
        }
        self.docs.insert(key.into(), value.into());
        true
    }
}

/// The answer of a one-command loop.
#[derive(Debug, Clone, PartialEq, Eq)]
struct One {
    text: String,
    attempts: u32,
    written: bool,
}

/// Drives a one-command loop to the end against `store`, recording the sleeps.
fn drive(store: &mut FakeStore, key: &str, m: CasLoop) -> (Result<One, MemoryError>, Vec<Duration>) {
    let (r, sleeps) = drive_batch(store, key, m);
    let r = r.and_then(|d| {
        assert_eq!(d.outcomes.len(), 1);
        let text = d.outcomes.into_iter().next().unwrap()?;
        Ok(One {
            text,
            attempts: d.attempts,
            written: d.written,
        })
    });
    (r, sleeps)
}

/// Drives a loop to the end against `store`, recording the sleeps.
fn drive_batch(store: &mut FakeStore, key: &str, mut m: CasLoop) -> (Result<CasDone, MemoryError>, Vec<Duration>) {
    let mut sleeps = Vec::new();
    let mut step = m.start();
    loop {
        step = match step {
            Step::Get => {
                let d = store.get(key);
                m.on_get(d)
            }
            Step::CompareAndSet { expected, value } => {
                let won = store.cas(key, expected.as_deref(), &value);
                m.on_cas(won)
            }
            Step::Sleep(d) => {
                sleeps.push(d);
                m.on_slept()
            }
            Step::Done(d) => return (Ok(d), sleeps),
            Step::Failed(e) => return (Err(e), sleeps),
        }
    }
}

fn cas_loop(cmd: Command) -> CasLoop {
    CasLoop::new(root(), cmd, Limits::default(), CasConfig::default(), 42)
}

fn doc(files: &[(&str, &str)]) -> String {
    tree_with(files).to_json()
}

#[test]
fn cas_first_write_uses_expected_none() {
    let mut m = cas_loop(create("/memories/a", "x"));
    assert_eq!(m.start(), Step::Get);
    assert_eq!(
        m.on_get(None),
        Step::CompareAndSet {
            expected: None,
            value: doc(&[("/memories/a", "x")])
        }
    );
    assert_eq!(
        m.on_cas(true),
        Step::Done(CasDone {
            outcomes: vec![Ok("File created successfully at /memories/a (1 bytes).".into())],
            attempts: 1,
            written: true
        })
    );
}

#[test]
fn cas_view_and_noop_never_write() {
    let mut s = FakeStore::new();
    s.docs.insert("k".into(), doc(&[("/memories/a", "x")]));
    let (r, _) = drive(&mut s, "k", cas_loop(view("/memories/a")));
    assert_eq!(
        r.unwrap(),
        One {
            text: "x".into(),
            attempts: 1,
            written: false
        }
    );
    let (r, _) = drive(&mut s, "k", cas_loop(replace("/memories/a", "x", "x")));
    assert!(!r.unwrap().written);
    assert_eq!(s.cas_calls, 0);
}

#[test]
fn cas_lost_first_race_retries_against_fresh_tree() {
    let mut s = FakeStore::new();
    s.docs
        .insert("k".into(), doc(&[("/memories/f", "line1: todo\nline2: todo\n")]));
    s.lose = 1;
    // The rival edits line 2 while we edit line 1.
    s.rival = Some(Box::new(|cur| {
        let root = root();
        let mut t = Tree::from_json(&root, cur.as_deref()).unwrap();
        apply(
            &mut t,
            &replace("/memories/f", "line2: todo", "line2: done"),
            &Limits::default(),
        )
        .unwrap();
        t.to_json()
    }));
    let (r, sleeps) = drive(
        &mut s,
        "k",
        cas_loop(replace("/memories/f", "line1: todo", "line1: done")),
    );
    let done = r.unwrap();
    assert_eq!(
        done,
        One {
            text: "The file /memories/f has been edited.".into(),
            attempts: 2,
            written: true
        }
    );
    assert_eq!(s.gets, 2);
    assert_eq!(s.cas_calls, 2);
    assert!(sleeps.len() <= 1);
    assert!(sleeps.iter().all(|d| *d <= Duration::from_millis(1)));
    assert_eq!(s.docs["k"], doc(&[("/memories/f", "line1: done\nline2: done\n")]));
}

#[test]
fn cas_racing_same_old_str_gets_no_match_on_retry() {
    let mut s = FakeStore::new();
    s.docs.insert("k".into(), doc(&[("/memories/f", "status: open\n")]));
    s.lose = 1;
    s.rival = Some(Box::new(|_| doc(&[("/memories/f", "status: closed by rival\n")])));
    let (r, _) = drive(
        &mut s,
        "k",
        cas_loop(replace("/memories/f", "status: open", "status: closed by us")),
    );
    let e = r.unwrap_err();
    assert_eq!(e.code.as_str(), "no_match");
    assert_eq!(s.docs["k"], doc(&[("/memories/f", "status: closed by rival\n")]));
}

#[test]
fn cas_gives_up_after_max_attempts_and_writes_nothing() {
    let mut s = FakeStore::new();
    s.docs.insert("k".into(), doc(&[("/memories/f", "v0")]));
    s.lose = u32::MAX;
    let mut n = 0;
    s.rival = Some(Box::new(move |_| {
        n += 1;
        doc(&[("/memories/f", &format!("v{n}"))])
    }));
    let (r, sleeps) = drive(&mut s, "k", cas_loop(insert("/memories/f", 0, "mine")));
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Conflict);
    assert_eq!(e.code.as_str(), "store_conflict");
    assert_eq!(
        e.message,
        "insert gave up after 32 compare-and-set attempts: other writers changed the memory tree every time; \
         nothing was written. Call the command again (view the file first if it depends on the current text)"
    );
    assert_eq!(s.cas_calls, 32);
    assert_eq!(s.gets, 32);
    assert_eq!(s.docs["k"], doc(&[("/memories/f", "v32")]));
    // Backoff: at most 31 sleeps, each within its full-jitter cap.
    assert!(sleeps.len() <= 31);
    for (i, d) in sleeps.iter().enumerate() {
        assert!(*d <= Duration::from_millis(50), "sleep {i}: {d:?}");
    }
}

#[test]
fn cas_backoff_caps_double_then_saturate() {
    let cfg = CasConfig {
        max_attempts: 10,
        backoff_base: Duration::from_millis(1),
        backoff_cap: Duration::from_millis(4),
    };
    let mut m = CasLoop::new(root(), create("/memories/a", "x"), Limits::default(), cfg, 7);
    let mut step = m.start();
    let mut caps_ok = true;
    for attempt in 1..=9u32 {
        assert_eq!(step, Step::Get);
        step = m.on_get(None);
        assert!(matches!(step, Step::CompareAndSet { .. }));
        step = m.on_cas(false);
        let cap = Duration::from_millis(1u64 << (attempt - 1).min(2));
        match step {
            Step::Sleep(d) => {
                caps_ok &= d <= cap;
                step = m.on_slept();
            }
            Step::Get => {}
            ref other => panic!("unexpected {other:?}"),
        }
    }
    assert!(caps_ok);
    assert_eq!(
        m.on_get(None).clone(),
        Step::CompareAndSet {
            expected: None,
            value: doc(&[("/memories/a", "x")])
        }
    );
    assert!(
        matches!(m.on_cas(false), Step::Done(CasDone { ref outcomes, written: false, .. })
        if matches!(outcomes[..], [Err(ref e)] if e.kind == ErrorKind::Conflict))
    );
    assert_eq!(m.attempts(), 10);
}

#[test]
fn cas_command_errors_and_corrupt_documents_fail_without_retry() {
    let mut s = FakeStore::new();
    let (r, _) = drive(&mut s, "k", cas_loop(view("/memories/none")));
    assert_eq!(r.unwrap_err().kind, ErrorKind::NotFound);
    s.docs.insert("k".into(), "{\"format\": 1}".into());
    let (r, _) = drive(&mut s, "k", cas_loop(create("/memories/a", "x")));
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt);
    assert_eq!(s.cas_calls, 0);
    assert_eq!(s.docs["k"], "{\"format\": 1}");
}

#[test]
fn cas_limits_refuse_inside_the_loop() {
    let mut s = FakeStore::new();
    let m = CasLoop::new(
        root(),
        create("/memories/a", "12345"),
        Limits {
            max_bytes: 4,
            max_files: 9,
        },
        CasConfig::default(),
        1,
    );
    let (r, _) = drive(&mut s, "k", m);
    let e = r.unwrap_err();
    assert_eq!(
        e.limit,
        Some(LimitInfo {
            limit: "max_bytes",
            maximum: 4,
            used: 0,
            requested: 5 + 11
        })
    );
    assert_eq!(s.cas_calls, 0);
    assert!(s.docs.is_empty());
}

#[test]
fn cas_misuse_is_an_error_not_a_panic() {
    let mut m = cas_loop(view("/memories"));
    match m.on_cas(true) {
        Step::Failed(e) => assert_eq!(e.code.as_str(), "internal_error"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn many_sequential_edits_on_distinct_lines_all_land() {
    let mut s = FakeStore::new();
    let text: String = (0..20).map(|i| format!("line {i:02}: todo\n")).collect();
    drive(&mut s, "k", cas_loop(create("/memories/f", &text))).0.unwrap();
    for i in 0..20 {
        s.lose = (i % 3) as u32;
        let (r, _) = drive(
            &mut s,
            "k",
            cas_loop(replace(
                "/memories/f",
                &format!("line {i:02}: todo"),
                &format!("line {i:02}: done"),
            )),
        );
        assert_eq!(r.unwrap().attempts, 1 + (i % 3) as u32);
    }
    let t = Tree::from_json(&root(), s.docs.get("k").map(String::as_str)).unwrap();
    let expect: String = (0..20).map(|i| format!("line {i:02}: done\n")).collect();
    assert_eq!(t.get("/memories/f"), Some(expect.as_str()));
}

#[test]
fn cas_cached_copy_that_changes_goes_straight_to_the_write() {
    let mut s = FakeStore::new();
    let before = doc(&[("/memories/f", "a: todo\n")]);
    s.docs.insert("k".into(), before.clone());
    let mut m = cas_loop(replace("/memories/f", "a: todo", "a: done"));
    assert_eq!(m.start(), Step::Get);
    let after = doc(&[("/memories/f", "a: done\n")]);
    assert_eq!(
        m.on_cached(Some(before.clone())),
        Step::CompareAndSet {
            expected: Some(before),
            value: after.clone()
        }
    );
    assert!(s.cas("k", Some(&doc(&[("/memories/f", "a: todo\n")])), &after));
    assert_eq!(
        m.on_cas(true),
        Step::Done(CasDone {
            outcomes: vec![Ok("The file /memories/f has been edited.".into())],
            attempts: 1,
            written: true
        })
    );
    assert_eq!(s.gets, 0);
}

#[test]
fn cas_cached_copy_never_answers_what_does_not_write() {
    let copy = doc(&[("/memories/f", "x")]);
    for cmd in [
        view("/memories/f"),
        replace("/memories/f", "x", "x"),
        replace("/memories/f", "nope", "y"),
        create("/memories/f", "again"),
    ] {
        let mut m = cas_loop(cmd.clone());
        m.start();
        assert_eq!(m.on_cached(Some(copy.clone())), Step::Get, "{cmd:?}");
        assert_eq!(m.attempts(), 0);
    }
    // Not a tree: ignored the same way; the fresh read decides.
    let mut m = cas_loop(create("/memories/a", "x"));
    m.start();
    assert_eq!(m.on_cached(Some("{\"format\": 1}".into())), Step::Get);
    assert!(matches!(m.on_get(None), Step::CompareAndSet { expected: None, .. }));
}

#[test]
fn cas_stale_cached_copy_loses_and_the_edit_lands_on_the_fresh_tree() {
    let mut s = FakeStore::new();
    let stale = doc(&[("/memories/f", "1: todo\n2: todo\n")]);
    let fresh = doc(&[("/memories/f", "1: todo\n2: done\n")]);
    s.docs.insert("k".into(), fresh);
    let mut m = cas_loop(replace("/memories/f", "1: todo", "1: done"));
    m.start();
    let Step::CompareAndSet { expected, value } = m.on_cached(Some(stale)) else {
        panic!("expected a write")
    };
    assert!(!s.cas("k", expected.as_deref(), &value));
    let mut step = m.on_cas(false);
    if let Step::Sleep(_) = step {
        step = m.on_slept();
    }
    assert_eq!(step, Step::Get);
    let d = s.get("k");
    let Step::CompareAndSet { expected, value } = m.on_get(d) else {
        panic!("expected a write")
    };
    assert!(s.cas("k", expected.as_deref(), &value));
    assert!(matches!(
        m.on_cas(true),
        Step::Done(CasDone {
            attempts: 2,
            written: true,
            ..
        })
    ));
    assert_eq!(s.docs["k"], doc(&[("/memories/f", "1: done\n2: done\n")]));
}

#[test]
fn cas_batch_applies_in_order_with_one_write_and_one_answer_each() {
    let mut s = FakeStore::new();
    s.docs.insert("k".into(), doc(&[("/memories/f", "a\n")]));
    let m = CasLoop::batch(
        root(),
        vec![
            replace("/memories/f", "a", "b"),
            replace("/memories/f", "a", "c"),
            create("/memories/g", "new"),
            view("/memories/f"),
            create("/memories/g", "clobber"),
        ],
        Limits::default(),
        CasConfig::default(),
        3,
    );
    let (r, _) = drive_batch(&mut s, "k", m);
    let d = r.unwrap();
    assert_eq!((d.attempts, d.written), (1, true));
    assert_eq!(s.cas_calls, 1);
    assert_eq!(d.outcomes[0], Ok("The file /memories/f has been edited.".into()));
    assert_eq!(d.outcomes[1].as_ref().unwrap_err().code.as_str(), "no_match");
    assert_eq!(
        d.outcomes[2],
        Ok("File created successfully at /memories/g (3 bytes).".into())
    );
    assert_eq!(d.outcomes[3], Ok("b\n".into()));
    assert_eq!(d.outcomes[4].as_ref().unwrap_err().code.as_str(), "already_exists");
    assert_eq!(s.docs["k"], doc(&[("/memories/f", "b\n"), ("/memories/g", "new")]));
}

#[test]
fn cas_batch_that_changes_nothing_writes_nothing() {
    let mut s = FakeStore::new();
    s.docs.insert("k".into(), doc(&[("/memories/f", "a")]));
    let m = CasLoop::batch(
        root(),
        vec![view("/memories/f"), delete("/memories/none")],
        Limits::default(),
        CasConfig::default(),
        3,
    );
    let d = drive_batch(&mut s, "k", m).0.unwrap();
    assert_eq!((d.attempts, d.written, s.cas_calls), (1, false, 0));
    assert_eq!(d.outcomes[0], Ok("a".into()));
    assert_eq!(d.outcomes[1].as_ref().unwrap_err().kind, ErrorKind::NotFound);
}

#[test]
fn cas_batch_exhausted_gives_each_command_its_own_conflict() {
    let mut s = FakeStore::new();
    s.docs.insert("k".into(), doc(&[("/memories/f", "v0")]));
    s.lose = u32::MAX;
    let mut n = 0;
    s.rival = Some(Box::new(move |_| {
        n += 1;
        doc(&[("/memories/f", &format!("v{n}"))])
    }));
    let cfg = CasConfig {
        max_attempts: 2,
        ..CasConfig::default()
    };
    let m = CasLoop::batch(
        root(),
        vec![insert("/memories/f", 0, "x"), delete("/memories/f")],
        Limits::default(),
        cfg,
        3,
    );
    let d = drive_batch(&mut s, "k", m).0.unwrap();
    assert!(!d.written);
    let msgs: Vec<String> = d.outcomes.into_iter().map(|o| o.unwrap_err().message).collect();
    assert!(msgs[0].starts_with("insert gave up after 2 compare-and-set attempts"));
    assert!(msgs[1].starts_with("delete gave up after 2 compare-and-set attempts"));
}

#[test]
fn options_are_checked_by_the_core() {
    assert_eq!(
        Limits::new(0, 0).unwrap(),
        Limits {
            max_bytes: 0,
            max_files: 0
        }
    );
    assert_eq!(Limits::new(8_388_608, 4096).unwrap(), Limits::default());
    assert_eq!(Limits::new(i64::MAX, 1).unwrap().max_bytes, i64::MAX as u64);
    for (b, f) in [(-1, 0), (0, -1), (i64::MIN, i64::MIN)] {
        let e = Limits::new(b, f).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert_eq!(
            e.message,
            format!("max_bytes and max_files must be >= 0, got max_bytes={b}, max_files={f}")
        );
    }
    for n in [1, 32, 100_000] {
        let c = CasConfig::with_max_attempts(n).unwrap();
        assert_eq!(
            c,
            CasConfig {
                max_attempts: n as u32,
                ..CasConfig::default()
            }
        );
    }
    for n in [0, -1, 100_001, i64::from(u32::MAX) + 1, i64::MIN] {
        let e = CasConfig::with_max_attempts(n).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert_eq!(e.message, format!("max_attempts must be between 1 and 100000, got {n}"));
    }
}
