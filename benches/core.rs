//! Criterion benches of the pure-Rust core (issue 6): the docstring parser, schema assembly and
//! validator compilation (a tool definition's share in the core), validation of a valid and an
//! invalid call, and the truncation of a rendered result. The tool is the 6-parameter tool of
//! `benches/compare.py`.
//!
//! Run: `cargo bench --bench core` (add `-- --quick` for a short run).

use std::hint::black_box;

use agentkit_tools_core::{docstring, render, schema, validate};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

const DOC: &str = "Search the project's documentation for pages that match a query.

Pages are ranked by relevance and their titles returned best first; narrow the search
with a scope and tags when the first results are too broad.

Args:
    query: The words to look for, as the user would type them.
    scope: Which part of the project to search.
    tags: Only pages that carry all of these tags.
    exact: Match the query as one phrase instead of any of its words.
    limit: The most titles to return.
    min_score: Drop pages whose relevance score is below this (0 to 1).

Returns:
    The titles of the matching pages, best first.
";

fn params() -> Vec<schema::ParamSpec> {
    let p = |name: &str, schema: Value, required: bool, default: Option<Value>| schema::ParamSpec {
        name: name.to_owned(),
        schema,
        required,
        default,
        description: None,
    };
    vec![
        p("query", json!({"type": "string"}), true, None),
        p(
            "scope",
            json!({"type": "string", "enum": ["all", "code", "issues", "docs"]}),
            true,
            None,
        ),
        p(
            "tags",
            json!({"type": "array", "items": {"type": "string"}}),
            true,
            None,
        ),
        p("exact", json!({"type": "boolean"}), true, None),
        p("limit", json!({"type": "integer"}), false, Some(json!(10))),
        p(
            "min_score",
            json!({"anyOf": [{"type": "number"}, {"type": "null"}]}),
            false,
            Some(Value::Null),
        ),
    ]
}

fn benches(c: &mut Criterion) {
    c.bench_function("docstring::parse (Google, 6 args)", |b| {
        b.iter(|| docstring::parse(black_box(DOC)))
    });
    c.bench_function("schema::define (6 params)", |b| {
        b.iter(|| schema::define("search_docs", None, Some(black_box(DOC)), params(), false))
    });
    let parameters = schema::define("search_docs", None, Some(DOC), params(), false)
        .expect("valid")
        .parameters;
    c.bench_function("ArgumentValidator::new (compile)", |b| {
        b.iter(|| validate::ArgumentValidator::new(black_box(parameters.clone()), vec![]))
    });
    c.bench_function("jsonschema::meta::validate (schema check only)", |b| {
        b.iter(|| jsonschema::meta::validate(black_box(&parameters)).is_ok())
    });
    let v = validate::ArgumentValidator::new(parameters, vec![]).expect("valid schema");
    let good = json!({"query": "rate limits", "scope": "docs", "tags": ["api", "http"], "exact": false, "limit": 5});
    let bad = json!({"query": "rate limits", "scope": "everything", "tags": ["api"], "exact": "maybe"});
    assert!(v.check(&good).is_ok());
    assert!(v.check(&bad).is_err());
    c.bench_function("ArgumentValidator::check (valid call)", |b| {
        b.iter(|| v.check(black_box(&good)))
    });
    c.bench_function("ArgumentValidator::check (2 problems) + message", |b| {
        b.iter(|| {
            let r = v.check(black_box(&bad)).expect_err("invalid");
            agentkit_tools_core::errors::invalid_arguments_message("search_docs", &r, v.accepted())
        })
    });
    let long: String = "Ünïcödé result line, repeated to overflow the limit.\n".repeat(200);
    c.bench_function("render::truncate (10 kB to 2000 chars)", |b| {
        b.iter(|| render::truncate(black_box(&long), 2000))
    });
}

criterion_group!(core, benches);
criterion_main!(core);
