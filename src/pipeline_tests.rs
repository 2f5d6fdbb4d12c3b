use super::*;
use crate::errors::ErrorCode;
use crate::middleware::store_key;

fn code(c: ErrorCode) -> Code {
    Code::Known(c)
}

type P = Pipeline<&'static str>;
type M = CallMachine<&'static str>;

fn at(mono: f64) -> Time {
    Time {
        mono,
        unix: 1_000_000.0 + mono,
    }
}

fn facts(name: &str) -> Facts {
    Facts {
        name: Some(name.into()),
        admitted: true,
        scope: "run".into(),
        canonical: "{}".into(),
        read_only: true,
        retry_safe: true,
        ..Facts::default()
    }
}

fn side_effecting(name: &str) -> Facts {
    Facts {
        read_only: false,
        retry_safe: false,
        ..facts(name)
    }
}

fn default_rules() -> Vec<Rule> {
    vec![
        Rule::Audit,
        Rule::Approval { approver: false },
        Rule::Repeat { limit: 3 },
        Rule::Idempotency {
            shared: false,
            lease_s: 60.0,
        },
        Rule::Retry {
            policy: RetryPolicy::default(),
            breaker: None,
        },
        Rule::Timeout { default_s: 10.0 },
    ]
}

fn ok_env(v: &'static str, ms: f64) -> Env<&'static str> {
    Env::Ok {
        value: Val::Obj(v),
        elapsed_ms: ms,
        deduplicated: false,
    }
}

fn run_ok(p: &mut P, f: Facts, v: &'static str) -> Step<&'static str> {
    let (mut m, step) = p.begin(f, at(0.0));
    assert_eq!(step, Step::RunBody { timeout_s: Some(10.0) });
    p.feed(&mut m, Event::BodyOk(v), at(0.002))
}

fn transient() -> Event<&'static str> {
    Event::BodyFailed {
        kind: FailureKind::Transient,
        code: code(ErrorCode::InternalError),
    }
}

#[test]
fn a_plain_call_runs_the_body_once_under_its_deadline() {
    let mut p = P::new(default_rules());
    assert_eq!(run_ok(&mut p, facts("add"), "7"), Step::Done(ok_env("7", 2.0)));
    let (m, _) = p.begin(
        Facts {
            tool_timeout_s: Some(0.5),
            ..facts("add")
        },
        at(0.0),
    );
    assert_eq!(m.attempts(), 1);
}

#[test]
fn approval_refused_approved_and_host_approved() {
    let rules = vec![Rule::Approval { approver: true }, Rule::Timeout { default_s: 10.0 }];
    let mut p = P::new(rules);
    let gated = Facts {
        requires_approval: true,
        ..facts("pay")
    };
    let (mut m, step) = p.begin(gated.clone(), at(0.0));
    assert_eq!(step, Step::AskApprover);
    assert_eq!(
        p.feed(&mut m, Event::Approved(false), at(0.0)),
        Step::Done(Env::Refused(Refusal::ApprovalRequired))
    );
    assert_eq!(m.attempts(), 0);
    let (mut m, step) = p.begin(gated.clone(), at(0.0));
    assert_eq!(step, Step::AskApprover);
    assert_eq!(
        p.feed(&mut m, Event::Approved(true), at(0.0)),
        Step::RunBody { timeout_s: Some(10.0) }
    );
    let (_, step) = p.begin(
        Facts {
            host_approved: true,
            ..gated.clone()
        },
        at(0.0),
    );
    assert_eq!(step, Step::RunBody { timeout_s: Some(10.0) });
    // without an approver: refused at once
    let mut p = P::new(vec![Rule::Approval { approver: false }]);
    assert_eq!(
        p.begin(gated, at(0.0)).1,
        Step::Done(Env::Refused(Refusal::ApprovalRequired))
    );
}

#[test]
fn repeats_are_refused_and_a_side_effecting_success_resets_them() {
    let mut p = P::new(vec![Rule::Repeat { limit: 3 }]);
    let read = facts("look");
    for _ in 0..2 {
        let (mut m, step) = p.begin(read.clone(), at(0.0));
        assert_eq!(step, Step::RunBody { timeout_s: None });
        p.feed(&mut m, Event::BodyOk("x"), at(0.0));
    }
    assert_eq!(
        p.begin(read.clone(), at(0.0)).1,
        Step::Done(Env::Refused(Refusal::Repeated { count: 3 }))
    );
    assert_eq!(
        p.begin(read.clone(), at(0.0)).1,
        Step::Done(Env::Refused(Refusal::Repeated { count: 4 }))
    );
    // a failed side-effecting call does not reset; a successful one does
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    p.feed(&mut m, transient(), at(0.0));
    assert!(matches!(
        p.begin(read.clone(), at(0.0)).1,
        Step::Done(Env::Refused(Refusal::Repeated { count: 5 }))
    ));
    let (mut m, _) = p.begin(
        Facts {
            canonical: "{\"b\":1}".into(),
            ..side_effecting("send")
        },
        at(0.0),
    );
    p.feed(&mut m, Event::BodyOk("sent"), at(0.0));
    assert_eq!(p.begin(read.clone(), at(0.0)).1, Step::RunBody { timeout_s: None });
    // calls that were not admitted count too; calls without a name do not
    let bad = Facts {
        admitted: false,
        rejection_code: Some(code(ErrorCode::UnknownTool)),
        ..facts("nope")
    };
    for _ in 0..2 {
        assert_eq!(
            p.begin(bad.clone(), at(0.0)).1,
            Step::Done(Env::Rejected {
                code: code(ErrorCode::UnknownTool)
            })
        );
    }
    assert_eq!(
        p.begin(bad, at(0.0)).1,
        Step::Done(Env::Refused(Refusal::Repeated { count: 3 }))
    );
    let nameless = Facts {
        name: None,
        admitted: false,
        rejection_code: Some(code(ErrorCode::InvalidCall)),
        ..facts("")
    };
    for _ in 0..4 {
        assert_eq!(
            p.begin(nameless.clone(), at(0.0)).1,
            Step::Done(Env::Rejected {
                code: code(ErrorCode::InvalidCall)
            })
        );
    }
}

#[test]
fn idempotent_hit_in_flight_wait_and_window_close() {
    let mut p = P::new(vec![Rule::Idempotency {
        shared: false,
        lease_s: 60.0,
    }]);
    let send = side_effecting("send");
    let (mut first, step) = p.begin(send.clone(), at(0.0));
    assert_eq!(step, Step::RunBody { timeout_s: None });
    // an identical call while the first runs waits for it
    let (mut second, step) = p.begin(send.clone(), at(0.0));
    let Step::WaitInFlight(ticket) = step else {
        panic!("{step:?}")
    };
    assert_eq!(
        p.feed(&mut first, Event::BodyOk("r1"), at(0.001)),
        Step::Done(ok_env("r1", 1.0))
    );
    assert_eq!(first.take_wakes(), vec![ticket]);
    let hit = Env::Ok {
        value: Val::Obj("r1"),
        elapsed_ms: 0.0,
        deduplicated: true,
    };
    assert_eq!(p.feed(&mut second, Event::Woken, at(0.0)), Step::Done(hit.clone()));
    assert_eq!(p.begin(send.clone(), at(0.0)).1, Step::Done(hit));
    // read-only calls pass through
    assert_eq!(p.begin(facts("send"), at(0.0)).1, Step::RunBody { timeout_s: None });
    // another side-effecting success closes the window
    let (mut other, _) = p.begin(
        Facts {
            canonical: "{\"x\":1}".into(),
            ..send.clone()
        },
        at(0.0),
    );
    p.feed(&mut other, Event::BodyOk("r2"), at(0.0));
    let (mut again, step) = p.begin(send.clone(), at(0.0));
    assert_eq!(step, Step::RunBody { timeout_s: None });
    // a failure is never cached (its own ticket is handed back: nobody waits on it)
    assert!(matches!(
        p.feed(&mut again, transient(), at(0.0)),
        Step::Done(Env::Failed { .. })
    ));
    assert_eq!(again.take_wakes().len(), 1);
    assert_eq!(p.begin(send.clone(), at(0.0)).1, Step::RunBody { timeout_s: None });
    assert_eq!(p.sizes(), (0, 2, 0));
}

#[test]
fn an_aborted_call_releases_its_claim_and_records_the_cancellation() {
    let mut p = P::new(vec![
        Rule::Audit,
        Rule::Idempotency {
            shared: false,
            lease_s: 60.0,
        },
    ]);
    let send = Facts {
        audit: vec![Observed::Record],
        ..side_effecting("send")
    };
    let (mut first, _) = p.begin(send.clone(), at(0.0));
    let (_, step) = p.begin(send.clone(), at(0.0));
    let Step::WaitInFlight(ticket) = step else {
        panic!("{step:?}")
    };
    let steps = p.abort(&mut first, true, at(0.5));
    let cancelled = AuditRecord {
        outcome: "cancelled".into(),
        attempts: 1,
        elapsed_ms: 500.0,
        decision: "failed",
    };
    assert_eq!(steps, vec![(0, Step::Record(cancelled))]);
    assert_eq!(first.take_wakes(), vec![ticket]);
    assert_eq!(p.sizes().1, 0);
}

#[test]
fn retry_with_backoff_then_the_last_envelope() {
    let policy = RetryPolicy {
        max_attempts: 3,
        base_s: 0.5,
        cap_s: 30.0,
    };
    let mut p = P::with_seed(
        vec![Rule::Retry { policy, breaker: None }, Rule::Timeout { default_s: 2.0 }],
        7,
    );
    let (mut m, _) = p.begin(facts("get"), at(0.0));
    let mut delays = vec![];
    for attempt in 1..=3 {
        match p.feed(&mut m, transient(), at(0.0)) {
            Step::Sleep(d) => {
                assert!((0.0..policy.ceiling_s(attempt)).contains(&d), "{d}");
                delays.push(d);
                assert_eq!(
                    p.feed(&mut m, Event::Slept, at(0.0)),
                    Step::RunBody { timeout_s: Some(2.0) }
                );
            }
            Step::Done(env) => {
                assert_eq!(attempt, 3);
                assert_eq!(
                    env,
                    Env::Failed {
                        kind: FailureKind::Transient,
                        code: code(ErrorCode::InternalError)
                    }
                );
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((delays.len(), m.attempts()), (2, 3));
    // not retried: a deadline, a permanent failure, a call that is not retry-safe
    for (f, ev) in [
        (
            facts("get"),
            Event::BodyFailed {
                kind: FailureKind::Deadline,
                code: code(ErrorCode::Timeout),
            },
        ),
        (
            facts("get"),
            Event::BodyFailed {
                kind: FailureKind::Permanent,
                code: code(ErrorCode::InternalError),
            },
        ),
        (side_effecting("send"), transient()),
    ] {
        let (mut m, _) = p.begin(f, at(0.0));
        assert!(matches!(p.feed(&mut m, ev, at(0.0)), Step::Done(Env::Failed { .. })));
    }
}

#[test]
fn breaker_opens_refuses_half_opens_and_closes() {
    let policy = RetryPolicy {
        max_attempts: 1,
        base_s: 0.0,
        cap_s: 0.0,
    };
    let mut p = P::new(vec![Rule::Retry {
        policy,
        breaker: Some((2, 10.0)),
    }]);
    for _ in 0..2 {
        let (mut m, _) = p.begin(facts("flaky"), at(0.0));
        assert!(matches!(
            p.feed(&mut m, transient(), at(1.0)),
            Step::Done(Env::Failed { .. })
        ));
    }
    let open = p.begin(facts("flaky"), at(5.0)).1;
    assert_eq!(
        open,
        Step::Done(Env::Refused(Refusal::CircuitOpen {
            failures: 2,
            retry_after_s: 6.0
        }))
    );
    let (mut trial, step) = p.begin(facts("flaky"), at(11.0)); // half-open: one trial
    assert_eq!(step, Step::RunBody { timeout_s: None });
    assert!(matches!(
        p.begin(facts("flaky"), at(11.0)).1,
        Step::Done(Env::Refused(Refusal::CircuitOpen { .. }))
    ));
    assert_eq!(
        p.feed(&mut trial, Event::BodyOk("up"), at(11.5)),
        Step::Done(ok_env("up", 500.0))
    );
    assert_eq!(p.begin(facts("flaky"), at(11.6)).1, Step::RunBody { timeout_s: None });
    // the open circuit ends the retries of a call
    let policy = RetryPolicy {
        max_attempts: 5,
        base_s: 0.0,
        cap_s: 0.0,
    };
    let mut p = P::new(vec![Rule::Retry {
        policy,
        breaker: Some((2, 10.0)),
    }]);
    let (mut m, _) = p.begin(facts("flaky"), at(0.0));
    assert_eq!(p.feed(&mut m, transient(), at(0.0)), Step::Sleep(0.0));
    assert_eq!(p.feed(&mut m, Event::Slept, at(0.0)), Step::RunBody { timeout_s: None });
    assert!(matches!(
        p.feed(&mut m, transient(), at(0.0)),
        Step::Done(Env::Failed { .. })
    ));
    assert_eq!(m.attempts(), 2);
}

#[test]
fn timeout_is_cut_to_the_context_deadline() {
    let mut p = P::new(vec![Rule::Timeout { default_s: 10.0 }]);
    assert_eq!(
        p.begin(
            Facts {
                tool_timeout_s: Some(3.0),
                ..facts("t")
            },
            at(0.0)
        )
        .1,
        Step::RunBody { timeout_s: Some(3.0) }
    );
    let near = Facts {
        deadline: Some(101.5),
        ..facts("t")
    };
    assert_eq!(
        p.begin(near.clone(), at(100.0)).1,
        Step::RunBody { timeout_s: Some(1.5) }
    );
    assert_eq!(p.begin(near, at(200.0)).1, Step::RunBody { timeout_s: Some(0.0) });
}

#[test]
fn egress_refusal() {
    let allow = HostAllowList::new(["example.com"]);
    let mut p = P::new(vec![Rule::Egress { allow }]);
    let fetch = |url: &str| Facts {
        url: Some(("url".into(), url.into())),
        ..facts("fetch")
    };
    assert_eq!(
        p.begin(fetch("https://api.example.com/x"), at(0.0)).1,
        Step::RunBody { timeout_s: None }
    );
    let Step::Done(Env::Refused(Refusal::EgressDenied {
        url_arg,
        denial,
        allowed,
    })) = p.begin(fetch("https://evil.test"), at(0.0)).1
    else {
        panic!()
    };
    assert_eq!((url_arg.as_str(), allowed), ("url", vec!["example.com".to_owned()]));
    assert_eq!(denial, EgressDenial::HostNotAllowed("evil.test".into()));
    assert_eq!(p.begin(facts("fetch"), at(0.0)).1, Step::RunBody { timeout_s: None });
}

#[test]
fn audit_records_fields_and_decisions() {
    let mut p = P::new(default_rules());
    let seen = Facts {
        audit: vec![Observed::Record],
        ..facts("add")
    };
    let (mut m, _) = p.begin(seen.clone(), at(0.0));
    let step = p.feed(&mut m, Event::BodyOk("7"), at(0.25));
    assert_eq!(
        step,
        Step::Record(AuditRecord {
            outcome: "ok".into(),
            attempts: 1,
            elapsed_ms: 250.0,
            decision: "executed"
        })
    );
    assert_eq!(p.feed(&mut m, Event::Recorded, at(0.3)), Step::Done(ok_env("7", 250.0)));
    // refused (repeat), failed, deduplicated; a span first when asked
    p.begin(seen.clone(), at(0.0));
    let (mut m, step) = p.begin(seen.clone(), at(0.0));
    let Step::Record(rec) = step else { panic!("{step:?}") };
    assert_eq!(
        (rec.outcome.as_str(), rec.decision, rec.attempts),
        ("repeated_call", "refused", 0)
    );
    assert_eq!(
        p.feed(&mut m, Event::Recorded, at(0.0)),
        Step::Done(Env::Refused(Refusal::Repeated { count: 3 }))
    );
    let spanned = Facts {
        audit: vec![Observed::Span],
        ..side_effecting("send")
    };
    let (mut m, step) = p.begin(spanned.clone(), at(0.0));
    assert_eq!(step, Step::AuditOpen);
    assert_eq!(
        p.feed(&mut m, Event::Opened, at(0.0)),
        Step::RunBody { timeout_s: Some(10.0) }
    );
    assert!(matches!(
        p.feed(&mut m, Event::BodyOk("ok"), at(0.0)),
        Step::Record(AuditRecord {
            decision: "executed",
            ..
        })
    ));
    p.feed(&mut m, Event::Recorded, at(0.0));
    let (mut m, _) = p.begin(spanned, at(0.0));
    assert_eq!(
        p.feed(&mut m, Event::Opened, at(0.0)),
        Step::Record(AuditRecord {
            outcome: "ok".into(),
            attempts: 0,
            elapsed_ms: 0.0,
            decision: "deduplicated"
        })
    );
    let (mut m, _) = p.begin(
        Facts {
            canonical: "{\"n\":1}".into(),
            ..seen
        },
        at(0.0),
    );
    let step = p.feed(
        &mut m,
        Event::BodyFailed {
            kind: FailureKind::Permanent,
            code: code(ErrorCode::OutputMismatch),
        },
        at(0.0),
    );
    assert!(
        matches!(step, Step::Record(AuditRecord { decision: "failed", .. })),
        "{step:?}"
    );
    // unobserved: no record
    assert_eq!(run_ok(&mut p, facts("add2"), "1"), Step::Done(ok_env("1", 2.0)));
}

fn shared() -> P {
    P::with_seed(
        vec![
            Rule::Idempotency {
                shared: true,
                lease_s: 60.0,
            },
            Rule::Retry {
                policy: RetryPolicy::default(),
                breaker: None,
            },
            Rule::Timeout { default_s: 100.0 },
        ],
        1,
    )
}

fn key() -> String {
    store_key("run", "send", "{}")
}

#[test]
fn shared_store_claim_run_and_finish() {
    let mut p = shared();
    let (mut m, step) = p.begin(side_effecting("send"), at(0.0));
    assert_eq!(step, Step::StoreGet(key()));
    let Step::StoreCas {
        key: k,
        expected: None,
        value,
    } = p.feed(&mut m, Event::StoreGot(None), at(0.0))
    else {
        panic!()
    };
    assert_eq!(k, key());
    assert!(value.starts_with("{\"s\":\"running\",\"owner\":\""), "{value}");
    // the lease covers the timeout rule's default (100 s, one attempt: not retry-safe) + 5 s
    assert!(
        value.ends_with(&format!("\"until\":{}}}", Value::from(1_000_000.0 + 105.0))),
        "{value}"
    );
    assert_eq!(
        p.feed(&mut m, Event::StoreCas(true), at(0.0)),
        Step::RunBody { timeout_s: Some(100.0) }
    );
    assert!(m.wants_value_json());
    m.set_value_json(Some("{\"id\":1}".into()));
    assert_eq!(
        p.feed(&mut m, Event::BodyOk("r"), at(0.0)),
        Step::StoreSet(window_key("run"), key())
    );
    assert_eq!(
        p.feed(&mut m, Event::StoreSet, at(0.0)),
        Step::StoreCas {
            key: key(),
            expected: Some(value),
            value: "{\"s\":\"done\",\"value\":{\"id\":1}}".into()
        }
    );
    assert_eq!(
        p.feed(&mut m, Event::StoreCas(true), at(0.0)),
        Step::Done(ok_env("r", 0.0))
    );
    // in-process hit: checked against the store's window
    let (mut m, step) = p.begin(side_effecting("send"), at(0.0));
    assert_eq!(step, Step::StoreGet(window_key("run")));
    let hit = Env::Ok {
        value: Val::Obj("r"),
        elapsed_ms: 0.0,
        deduplicated: true,
    };
    assert_eq!(p.feed(&mut m, Event::StoreGot(Some(key())), at(0.0)), Step::Done(hit));
    // closed by another worker: claimed again
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    assert_eq!(
        p.feed(&mut m, Event::StoreGot(Some("other".into())), at(0.0)),
        Step::StoreGet(key())
    );
}

/// The store's failure the machine asks the driver to log after `CLAIM_TRIES` lost claims.
fn refused_every_claim() -> Step<&'static str> {
    Step::StoreFailing {
        key: key(),
        why: "store.compare_and_set refused 8 claims in a row, each over the record its get had just answered; fix the StorePort implementation (compare_and_set must write and return True when the key holds exactly the expected value)".into(),
    }
}

/// Lose claims (each over a read showing nothing live) until the machine asks for something
/// else than claiming again; returns the claims made and that step.
fn lose_claims(
    p: &mut P,
    m: &mut CallMachine<&'static str>,
    mut step: Step<&'static str>,
) -> (u32, Step<&'static str>) {
    let mut claims = 0;
    while let Step::StoreCas { expected: None, .. } = step {
        claims += 1;
        step = p.feed(m, Event::StoreCas(false), at(0.0));
        if step == Step::StoreGet(key()) {
            step = p.feed(m, Event::StoreGot(None), at(0.0));
        }
    }
    (claims, step)
}

#[test]
fn shared_store_refusing_every_claim_is_a_failing_store() {
    // A store whose compare_and_set refuses every claim (its get showing nothing live) is held
    // failing by the machine after CLAIM_TRIES claims lost in a row without a wait: it asks the
    // driver to log that (no store call raised), then the call runs without sharing.
    let mut p = shared();
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    let first = p.feed(&mut m, Event::StoreGot(None), at(0.0));
    let (claims, step) = lose_claims(&mut p, &mut m, first);
    assert_eq!((claims, CLAIM_TRIES), (8, 8));
    assert_eq!(step, refused_every_claim());
    assert_eq!(
        p.feed(&mut m, Event::StoreFailed, at(0.0)),
        Step::RunBody { timeout_s: Some(100.0) }
    );
    assert!(!m.wants_value_json());
    assert_eq!(
        p.feed(&mut m, Event::BodyOk("r"), at(0.0)),
        Step::Done(ok_env("r", 0.0))
    );
    // a wait on a live claim starts the count again: 7 lost, a wait, 8 more lost
    let mut p = shared();
    let running = format!("{{\"s\":\"running\",\"owner\":\"x\",\"until\":{}}}", 1_000_000.0 + 30.0);
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    let mut claims = 0;
    let mut step = p.feed(&mut m, Event::StoreGot(None), at(0.0));
    while let Step::StoreCas { .. } = step {
        claims += 1;
        step = p.feed(&mut m, Event::StoreCas(false), at(0.0));
        if step == Step::StoreGet(key()) {
            let doc = if claims == 7 { Some(running.clone()) } else { None };
            step = p.feed(&mut m, Event::StoreGot(doc), at(0.0));
            if step == Step::Sleep(POLL_S) {
                step = p.feed(&mut m, Event::Slept, at(0.0));
                assert_eq!(step, Step::StoreGet(key()));
                step = p.feed(&mut m, Event::StoreGot(None), at(0.0));
            }
        }
    }
    assert_eq!(claims, 15);
    assert_eq!(step, refused_every_claim());
    assert_eq!(
        p.feed(&mut m, Event::StoreFailed, at(0.0)),
        Step::RunBody { timeout_s: Some(100.0) }
    );
    assert!(!m.wants_value_json());
    // the eighth claim may still be won: 7 lost, then the call runs sharing its claim
    let mut p = shared();
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    let mut step = p.feed(&mut m, Event::StoreGot(None), at(0.0));
    for _ in 0..7 {
        assert!(matches!(step, Step::StoreCas { expected: None, .. }), "{step:?}");
        assert_eq!(p.feed(&mut m, Event::StoreCas(false), at(0.0)), Step::StoreGet(key()));
        step = p.feed(&mut m, Event::StoreGot(None), at(0.0));
    }
    let Step::StoreCas {
        expected: None,
        value: mine,
        ..
    } = step
    else {
        panic!("{step:?}")
    };
    assert_eq!(
        p.feed(&mut m, Event::StoreCas(true), at(0.0)),
        Step::RunBody { timeout_s: Some(100.0) }
    );
    assert!(m.wants_value_json());
    assert_eq!(
        p.abort(&mut m, true, at(0.0)),
        vec![(
            0,
            Step::StoreCas {
                key: key(),
                expected: Some(mine),
                value: FREE.into()
            }
        )]
    );
}

#[test]
fn a_store_held_failing_is_logged_then_answered_as_failed() {
    // Only `StoreFailed` answers the machine's `StoreFailing`: any other event is a misuse.
    let mut p = shared();
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    let first = p.feed(&mut m, Event::StoreGot(None), at(0.0));
    assert_eq!(lose_claims(&mut p, &mut m, first), (8, refused_every_claim()));
    let internal = Step::Done(Env::Failed {
        kind: FailureKind::Permanent,
        code: code(ErrorCode::InternalError),
    });
    assert_eq!(p.feed(&mut m, Event::StoreCas(false), at(0.0)), internal);
    // aborted while its failure is logged: no claim of this call to release (none was written)
    let mut p = shared();
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    let first = p.feed(&mut m, Event::StoreGot(None), at(0.0));
    assert_eq!(lose_claims(&mut p, &mut m, first), (8, refused_every_claim()));
    assert_eq!(p.abort(&mut m, true, at(0.0)), vec![]);
}

#[test]
fn shared_store_hit_wait_and_failure() {
    let mut p = shared();
    let done = "{\"s\":\"done\",\"value\":{\"cached\":[1,2]}}".to_owned();
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    assert_eq!(
        p.feed(&mut m, Event::StoreGot(Some(done.clone())), at(0.0)),
        Step::StoreGet(window_key("run"))
    );
    let hit = Env::Ok {
        value: Val::Json(serde_json::json!({"cached": [1, 2]})),
        elapsed_ms: 0.0,
        deduplicated: true,
    };
    assert_eq!(p.feed(&mut m, Event::StoreGot(Some(key())), at(0.0)), Step::Done(hit));
    assert_eq!(p.sizes().1, 0); // released: a stored hit is not held in-process
                                // window closed: claim over the done record
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    p.feed(&mut m, Event::StoreGot(Some(done.clone())), at(0.0));
    let step = p.feed(&mut m, Event::StoreGot(None), at(0.0));
    assert!(
        matches!(step, Step::StoreCas { expected: Some(ref e), .. } if *e == done),
        "{step:?}"
    );
    // lost the race: read again; running elsewhere within its lease: poll
    assert_eq!(p.feed(&mut m, Event::StoreCas(false), at(0.0)), Step::StoreGet(key()));
    let running = format!("{{\"s\":\"running\",\"owner\":\"x\",\"until\":{}}}", 1_000_000.0 + 30.0);
    assert_eq!(
        p.feed(&mut m, Event::StoreGot(Some(running.clone())), at(0.0)),
        Step::Sleep(POLL_S)
    );
    assert_eq!(p.feed(&mut m, Event::Slept, at(0.0)), Step::StoreGet(key()));
    // its lease ran out (a crashed worker): taken over
    assert!(matches!(
        p.feed(&mut m, Event::StoreGot(Some(running)), at(40.0)),
        Step::StoreCas { .. }
    ));
    assert_eq!(
        p.feed(&mut m, Event::StoreFailed, at(40.0)),
        Step::RunBody { timeout_s: Some(100.0) }
    );
    assert!(!m.wants_value_json());
    assert!(matches!(
        p.feed(&mut m, transient(), at(40.0)),
        Step::Done(Env::Failed { .. })
    ));
    // a failure frees the shared claim
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    let Step::StoreCas { value: mine, .. } = p.feed(&mut m, Event::StoreGot(None), at(0.0)) else {
        panic!()
    };
    p.feed(&mut m, Event::StoreCas(true), at(0.0));
    let step = p.feed(
        &mut m,
        Event::BodyFailed {
            kind: FailureKind::Permanent,
            code: code(ErrorCode::InternalError),
        },
        at(0.0),
    );
    assert_eq!(
        step,
        Step::StoreCas {
            key: key(),
            expected: Some(mine),
            value: "{\"s\":\"free\"}".into()
        }
    );
    assert!(matches!(
        p.feed(&mut m, Event::StoreCas(true), at(0.0)),
        Step::Done(Env::Failed { .. })
    ));
}

#[test]
fn the_lease_covers_every_attempt_and_the_backoff() {
    let p = shared();
    let m: M = p_machine(
        &p,
        Facts {
            tool_timeout_s: Some(2.0),
            ..facts("send")
        },
    );
    // retry-safe: 3 attempts of 2 s + backoff ceilings 0.5 + 1.0 + 5 s; at least lease_s (60)
    assert_eq!(p.lease_s(&m, 0, at(0.0)), 60.0);
    let mut rules = p.rules().to_vec();
    rules[0] = Rule::Idempotency {
        shared: true,
        lease_s: 1.0,
    };
    let p = P::new(rules);
    assert_eq!(p.lease_s(&m, 0, at(0.0)), 2.0 * 3.0 + 1.5 + 5.0);
    let near = p_machine(
        &p,
        Facts {
            deadline: Some(4.0),
            ..facts("send")
        },
    );
    assert_eq!(p.lease_s(&near, 0, at(1.0)), 3.0 + 5.0);
}

fn p_machine(p: &P, f: Facts) -> M {
    let mut m = CallMachine::with_facts(f);
    m.frames = Frames::idle(p.rules().len());
    m
}

#[test]
fn a_driver_feeding_the_wrong_event_gets_an_internal_error_not_a_panic() {
    let mut p = P::new(default_rules());
    let (mut m, _) = p.begin(facts("add"), at(0.0));
    assert_eq!(
        p.feed(&mut m, Event::Slept, at(0.0)),
        Step::Done(Env::Failed {
            kind: FailureKind::Permanent,
            code: code(ErrorCode::InternalError)
        })
    );
    assert!(matches!(
        p.feed(&mut m, Event::BodyOk("x"), at(0.0)),
        Step::Done(Env::Failed { .. })
    ));
}

// ---------------------------------------------------------------- an aborted shared claim

fn audited_shared() -> P {
    P::with_seed(
        vec![
            Rule::Audit,
            Rule::Idempotency {
                shared: true,
                lease_s: 60.0,
            },
            Rule::Retry {
                policy: RetryPolicy {
                    max_attempts: 3,
                    base_s: 0.5,
                    cap_s: 30.0,
                },
                breaker: None,
            },
            Rule::Timeout { default_s: 100.0 },
        ],
        1,
    )
}

fn audited_send() -> Facts {
    Facts {
        audit: vec![Observed::Record],
        ..side_effecting("send")
    }
}

fn release(mine: &str, value: &str) -> (usize, Step<&'static str>) {
    (
        1,
        Step::StoreCas {
            key: key(),
            expected: Some(mine.into()),
            value: value.into(),
        },
    )
}

fn cancelled(attempts: u32, elapsed_ms: f64) -> (usize, Step<&'static str>) {
    (
        0,
        Step::Record(AuditRecord {
            outcome: "cancelled".into(),
            attempts,
            elapsed_ms,
            decision: "failed",
        }),
    )
}

/// Begin a call of `send` through `audited_shared` and claim it in the store: its claim record.
fn claimed(p: &mut P, f: Facts) -> (M, String) {
    let (mut m, step) = p.begin(f, at(0.0));
    assert_eq!(step, Step::StoreGet(key()));
    let Step::StoreCas {
        value: mine,
        expected: None,
        ..
    } = p.feed(&mut m, Event::StoreGot(None), at(0.0))
    else {
        panic!()
    };
    assert_eq!(
        p.feed(&mut m, Event::StoreCas(true), at(0.0)),
        Step::RunBody { timeout_s: Some(100.0) }
    );
    (m, mine)
}

#[test]
fn a_call_aborted_while_its_body_runs_frees_exactly_its_own_claim() {
    let mut p = audited_shared();
    let (mut m, mine) = claimed(&mut p, audited_send());
    // an identical call of this worker waits for it
    let (mut waiter, step) = p.begin(audited_send(), at(0.1));
    let Step::WaitInFlight(ticket) = step else {
        panic!("{step:?}")
    };
    assert_eq!(
        p.abort(&mut m, true, at(0.25)),
        vec![release(&mine, FREE), cancelled(1, 250.0)]
    );
    assert_eq!(m.take_wakes(), vec![ticket]);
    assert_eq!(p.sizes().1, 0); // the aborted call holds nothing (the waiter claims when it runs)
                                // the waiter claims over the freed record and runs the body (no result was left)
    assert_eq!(p.feed(&mut waiter, Event::Woken, at(0.3)), Step::StoreGet(key()));
    let step = p.feed(&mut waiter, Event::StoreGot(Some(FREE.into())), at(0.3));
    assert!(
        matches!(step, Step::StoreCas { expected: Some(ref e), .. } if e == FREE),
        "{step:?}"
    );
    assert_eq!(
        p.feed(&mut waiter, Event::StoreCas(true), at(0.3)),
        Step::RunBody { timeout_s: Some(100.0) }
    );
    assert_eq!(waiter.attempts(), 1);
    // aborting a finished call asks for nothing
    assert_eq!(p.abort(&mut m, true, at(1.0)), vec![]);
    // not a cancellation: the record says internal_error
    let steps = p.abort(&mut waiter, false, at(0.5));
    assert!(
        matches!(&steps[1].1, Step::Record(AuditRecord { outcome, .. }) if outcome == ErrorCode::InternalError.as_str()),
        "{steps:?}"
    );
}

#[test]
fn a_call_aborted_while_its_claim_is_being_written_frees_it() {
    let mut p = audited_shared();
    let (mut m, _) = p.begin(audited_send(), at(0.0));
    let Step::StoreCas { value: mine, .. } = p.feed(&mut m, Event::StoreGot(None), at(0.0)) else {
        panic!()
    };
    // the store may have written the claim: it is freed from exactly that record
    assert_eq!(
        p.abort(&mut m, true, at(0.0)),
        vec![release(&mine, FREE), cancelled(0, 0.0)]
    );
    assert_eq!(p.sizes().1, 0);
}

#[test]
fn a_call_aborted_before_it_wrote_a_claim_asks_the_store_for_nothing() {
    let mut p = audited_shared();
    let running = format!("{{\"s\":\"running\",\"owner\":\"x\",\"until\":{}}}", 1_000_000.0 + 30.0);
    let done = "{\"s\":\"done\",\"value\":1}".to_owned();
    type Reach<'a> = &'a dyn Fn(&mut P, &mut M) -> Step<&'static str>;
    let aborted_at: [Reach; 4] = [
        // reading the record
        &|_, _| Step::StoreGet(key()),
        // polling another worker's claim
        &|p, m| p.feed(m, Event::StoreGot(Some(running.clone())), at(0.0)),
        // checking the window of a stored result
        &|p, m| p.feed(m, Event::StoreGot(Some(done.clone())), at(0.0)),
        // lost the race for the claim: reading again
        &|p, m| {
            p.feed(m, Event::StoreGot(None), at(0.0));
            p.feed(m, Event::StoreCas(false), at(0.0))
        },
    ];
    for (n, go) in aborted_at.iter().enumerate() {
        let (mut m, _) = p.begin(audited_send(), at(0.0));
        let step = go(&mut p, &mut m);
        assert!(matches!(step, Step::StoreGet(_) | Step::Sleep(_)), "{n}: {step:?}");
        assert_eq!(p.abort(&mut m, true, at(0.0)), vec![cancelled(0, 0.0)], "{n}");
        assert_eq!(p.sizes().1, 0, "{n}");
    }
    // waiting for an identical call in flight: nothing held, nobody to wake
    let (mut first, _) = claimed(&mut p, audited_send());
    let (mut waiter, _) = p.begin(audited_send(), at(0.0));
    assert_eq!(p.abort(&mut waiter, true, at(0.0)), vec![cancelled(0, 0.0)]);
    assert_eq!(waiter.take_wakes(), Vec::<u64>::new());
    first.set_value_json(Some("1".into()));
    assert_eq!(
        p.feed(&mut first, Event::BodyOk("r"), at(0.0)),
        Step::StoreSet(window_key("run"), key())
    );
}

#[test]
fn a_call_aborted_while_it_stores_its_result_writes_the_result_not_a_release() {
    let done = "{\"s\":\"done\",\"value\":{\"id\":1}}";
    // aborted while the window is written, then while the result is
    for window_written in [false, true] {
        let mut p = audited_shared();
        let (mut m, mine) = claimed(&mut p, audited_send());
        m.set_value_json(Some("{\"id\":1}".into()));
        assert_eq!(
            p.feed(&mut m, Event::BodyOk("r"), at(0.5)),
            Step::StoreSet(window_key("run"), key())
        );
        if window_written {
            let step = p.feed(&mut m, Event::StoreSet, at(0.5));
            assert_eq!(
                step,
                Step::StoreCas {
                    key: key(),
                    expected: Some(mine.clone()),
                    value: done.into()
                }
            );
        }
        assert_eq!(
            p.abort(&mut m, true, at(0.5)),
            vec![release(&mine, done), cancelled(1, 500.0)]
        );
        // this worker holds the result: its repeat is answered from it (the window still open)
        let (mut again, step) = p.begin(audited_send(), at(1.0));
        assert_eq!(step, Step::StoreGet(window_key("run")));
        assert!(matches!(
            p.feed(&mut again, Event::StoreGot(Some(key())), at(1.0)),
            Step::Record(AuditRecord {
                decision: "deduplicated",
                ..
            })
        ));
    }
}

#[test]
fn a_call_aborted_after_a_failure_or_in_its_backoff_frees_its_claim() {
    let permanent = Event::BodyFailed {
        kind: FailureKind::Permanent,
        code: code(ErrorCode::InternalError),
    };
    // aborted while the failure's release is written: written again (the first may be lost)
    let mut p = audited_shared();
    let (mut m, mine) = claimed(&mut p, audited_send());
    assert_eq!(
        p.feed(&mut m, permanent, at(0.1)),
        Step::StoreCas {
            key: key(),
            expected: Some(mine.clone()),
            value: FREE.into()
        }
    );
    assert_eq!(
        p.abort(&mut m, true, at(0.1)),
        vec![release(&mine, FREE), cancelled(1, 100.0)]
    );
    assert_eq!(p.sizes().1, 0);
    // a retry-safe call aborted while it backs off before its next attempt
    let mut p = audited_shared();
    let (mut m, mine) = claimed(
        &mut p,
        Facts {
            retry_safe: true,
            ..audited_send()
        },
    );
    assert!(matches!(p.feed(&mut m, transient(), at(0.2)), Step::Sleep(_)));
    assert_eq!(
        p.abort(&mut m, true, at(0.2)),
        vec![release(&mine, FREE), cancelled(1, 200.0)]
    );
    assert_eq!(p.sizes().1, 0);
}

#[test]
fn needs_follow_the_rules() {
    assert_eq!(Needs::of(&[]), Needs::default());
    assert_eq!(
        Needs::of(&default_rules()),
        Needs {
            approval: true,
            counts: true,
            read_only: true,
            retry: true,
            timeout: true,
            egress: false,
            audit: true,
            store: false
        }
    );
    assert_eq!(
        Needs::of(&[Rule::Timeout { default_s: 1.0 }]),
        Needs {
            timeout: true,
            ..Needs::default()
        }
    );
    assert_eq!(
        Needs::of(&[Rule::Repeat { limit: 2 }]),
        Needs {
            counts: true,
            read_only: true,
            ..Needs::default()
        }
    );
    assert_eq!(
        Needs::of(&[Rule::Idempotency {
            shared: true,
            lease_s: 5.0
        }]),
        Needs {
            counts: true,
            read_only: true,
            timeout: true,
            store: true,
            ..Needs::default()
        }
    );
    assert_eq!(
        Needs::of(&[Rule::Idempotency {
            shared: false,
            lease_s: 5.0
        }]),
        Needs {
            counts: true,
            read_only: true,
            timeout: true,
            ..Needs::default()
        }
    );
    assert_eq!(
        Needs::of(&[Rule::Retry {
            policy: RetryPolicy::default(),
            breaker: Some((3, 1.0))
        }]),
        Needs {
            retry: true,
            read_only: true,
            ..Needs::default()
        }
    );
    assert_eq!(
        Needs::of(&[
            Rule::Egress {
                allow: HostAllowList::new(vec!["a.example".to_owned()])
            },
            Rule::Approval { approver: true }
        ]),
        Needs {
            egress: true,
            approval: true,
            ..Needs::default()
        }
    );
    assert_eq!(
        audit_rules(&[Rule::Audit, Rule::Timeout { default_s: 1.0 }, Rule::Audit]),
        vec![0, 2]
    );
    assert_eq!(audit_rules(&default_rules()[1..]), Vec::<usize>::new());
}

#[test]
fn the_first_retry_rule_classifies_failures() {
    let retry = |n| Rule::Retry {
        policy: RetryPolicy::new(n, 0.0, 0.0).unwrap(),
        breaker: None,
    };
    assert_eq!(classifying_rule(&[Rule::Audit, retry(2), retry(3)]), Some(1));
    assert_eq!(classifying_rule(&[retry(2)]), Some(0));
    assert_eq!(classifying_rule(&[Rule::Audit, Rule::Timeout { default_s: 1.0 }]), None);
    assert_eq!(classifying_rule(&[]), None);
}

#[test]
fn canonical_text_only_when_something_reads_it() {
    let bare = Needs::default();
    let timeout = Needs::of(&[Rule::Timeout { default_s: 1.0 }]);
    let counted = Needs::of(&[Rule::Repeat { limit: 2 }]);
    let idempotent = Needs::of(&[Rule::Idempotency {
        shared: false,
        lease_s: 60.0,
    }]);
    let shared = Needs::of(&[Rule::Idempotency {
        shared: true,
        lease_s: 60.0,
    }]);
    // admitted: a shared store keyed on it, an audit record's hash, the approval refusal's
    // message; the rules that count identical calls key on the arguments' key instead
    assert!(!bare.canonical_of_admitted(false, false));
    assert!(!timeout.canonical_of_admitted(false, false));
    assert!(!counted.canonical_of_admitted(false, false));
    assert!(!idempotent.canonical_of_admitted(false, false));
    assert!(shared.canonical_of_admitted(false, false));
    assert!(bare.canonical_of_admitted(true, false));
    assert!(bare.canonical_of_admitted(false, true));
    assert!(counted.key_of_admitted() && idempotent.key_of_admitted() && shared.key_of_admitted());
    assert!(!bare.key_of_admitted() && !timeout.key_of_admitted());
    // rejected: counted only when it names a tool; hashed whenever observed
    assert!(!counted.canonical_of_rejected(false, false));
    assert!(counted.canonical_of_rejected(true, false));
    assert!(!bare.canonical_of_rejected(true, false));
    assert!(bare.canonical_of_rejected(false, true));
}

#[test]
fn body_kinds() {
    assert_eq!(BodyKind::of(false, true, true), BodyKind::Tool);
    assert_eq!(BodyKind::of(true, true, true), BodyKind::Async);
    assert_eq!(BodyKind::of(true, false, true), BodyKind::Inline);
    assert_eq!(BodyKind::of(true, false, false), BodyKind::Worker);
}

#[test]
fn retry_safety_and_observed_levels() {
    assert!(retry_safe(true, false, false));
    assert!(retry_safe(false, true, true));
    assert!(!retry_safe(false, true, false)); // read-only by default, effects never declared
    assert!(!retry_safe(false, false, true));
    assert_eq!(
        [(false, false), (false, true), (true, false), (true, true)].map(|(t, r)| Observed::of(t, r)),
        [Observed::No, Observed::Record, Observed::Span, Observed::Span]
    );
    assert_eq!(
        [Observed::No, Observed::Record, Observed::Span].map(Observed::level),
        [0, 1, 2]
    );
}

#[test]
fn a_refusal_is_its_failure() {
    use crate::envelope::Failure;
    type F = Failure<'static, serde_json::Map<String, serde_json::Value>>;
    let cases = [
        (Refusal::ApprovalRequired, F::approval_required("t", "{\"a\":1}")),
        (Refusal::Repeated { count: 3 }, F::repeated_call("t", 3)),
        (
            Refusal::CircuitOpen {
                failures: 2,
                retry_after_s: 60.0,
            },
            F::circuit_open("t", 2, 60.0),
        ),
    ];
    for (r, want) in cases {
        let got: F = r.failure("t", "{\"a\":1}");
        assert_eq!(got.error_json(), want.error_json());
        assert_eq!(got.code.as_str(), r.code().as_str());
    }
}

#[test]
fn a_deduplicated_success_took_the_time_since_its_call_began() {
    let mut p = P::new(vec![Rule::Idempotency {
        shared: false,
        lease_s: 60.0,
    }]);
    let send = side_effecting("send");
    let (mut first, _) = p.begin(send.clone(), at(1.0));
    let (mut second, step) = p.begin(send.clone(), at(1.5));
    assert!(matches!(step, Step::WaitInFlight(_)), "{step:?}");
    p.feed(&mut first, Event::BodyOk("r1"), at(2.0));
    let hit = |ms| {
        Step::Done(Env::Ok {
            value: Val::Obj("r1"),
            elapsed_ms: ms,
            deduplicated: true,
        })
    };
    assert_eq!(p.feed(&mut second, Event::Woken, at(2.25)), hit(750.0));
    // answered at once: no time at all
    assert_eq!(p.begin(send, at(3.0)).1, hit(0.0));
}

#[test]
fn the_core_runs_only_inline_and_async_bodies_itself_and_none_past_its_deadline() {
    for kind in [BodyKind::Inline, BodyKind::Async] {
        assert!(kind.runs_here(true, None));
        assert!(kind.runs_here(true, Some(0.5)));
        assert!(!kind.runs_here(false, Some(0.5)));
        assert!(!kind.runs_here(true, Some(0.0)));
        assert!(!kind.runs_here(true, Some(-1.0)));
    }
    for kind in [BodyKind::Worker, BodyKind::Tool] {
        assert!(!kind.runs_here(true, None));
    }
}

#[test]
fn a_call_without_a_run_id_is_in_the_default_scope() {
    let default: std::sync::Arc<str> = "default".into();
    assert_eq!(&*scope_of(None, &default), "default");
    assert_eq!(&*scope_of(Some("r1"), &default), "r1");
    assert_eq!(deadline_at(10.0, 2.5), 12.5);
    assert_eq!(deadline_at(10.0, -1.0), 9.0);
}

#[test]
fn raw_arguments_have_a_canonical_text_whatever_they_are() {
    let v = serde_json::json!({"b": 1, "a": [2]});
    assert_eq!(raw_canonical(RawArgs::Value(&v)), "{\"a\":[2],\"b\":1}");
    assert_eq!(
        raw_canonical(RawArgs::Text("{ \"b\":1,\"a\":[2]}")),
        "{\"a\":[2],\"b\":1}"
    );
    assert_eq!(raw_canonical(RawArgs::Text("{not json")), "{not json");
    assert_eq!(raw_canonical(RawArgs::Absent), "{}");
    assert_eq!(raw_canonical(RawArgs::Canonical("{\"x\":1}".into())), "{\"x\":1}");
    assert_eq!(raw_canonical(RawArgs::Printed("{'x': {1, 2}}".into())), "{'x': {1, 2}}");
    assert_eq!(
        raw_canonical(RawArgs::Unreadable(Some("Weird".into()))),
        "<unreadable Weird>"
    );
    assert_eq!(raw_canonical(RawArgs::Unreadable(None)), "<unreadable object>");
}

#[test]
fn an_egress_url_is_the_text_of_a_set_value_and_none_when_missing_or_null() {
    let text = |v: i32| Ok::<_, ()>(format!("as text {v}"));
    assert_eq!(
        egress_url("url".into(), UrlValue::Set(5), text),
        Ok(Some(("url".to_owned(), "as text 5".to_owned())))
    );
    let never = |_: i32| -> Result<String, ()> { panic!("asked") };
    assert_eq!(egress_url("url".into(), UrlValue::Missing, never), Ok(None));
    assert_eq!(egress_url("url".into(), UrlValue::Null, never), Ok(None));
    // What reading its text raises fails the call.
    assert_eq!(egress_url("url".into(), UrlValue::Set(1), |_| Err("str")), Err("str"));
}

#[test]
fn an_egress_check_without_a_url_lets_the_call_through() {
    let mut p = P::new(vec![Rule::Egress {
        allow: HostAllowList::new(["good.com"]),
    }]);
    let (_, step) = p.begin(facts("get"), at(0.0));
    assert_eq!(step, Step::RunBody { timeout_s: None });
    let mut f = facts("get");
    f.url = egress_url("url".into(), UrlValue::Set("http://evil.com/"), |u| {
        Ok::<_, ()>(u.to_owned())
    })
    .unwrap();
    let (_, step) = p.begin(f, at(0.0));
    assert!(
        matches!(step, Step::Done(Env::Refused(Refusal::EgressDenied { .. }))),
        "{step:?}"
    );
}

#[test]
fn a_waiting_call_is_woken_by_its_own_loop_or_through_it() {
    let never = || -> Result<bool, ()> { panic!("asked") };
    assert_eq!(wake(true, never), Ok(Wake::Nothing));
    assert_eq!(wake(false, || Ok::<_, ()>(true)), Ok(Wake::SetResult));
    assert_eq!(wake(false, || Ok::<_, ()>(false)), Ok(Wake::SetResultThreadsafe));
    assert_eq!(wake(false, || Err("get_loop")), Err("get_loop"));
}

#[test]
fn only_an_async_body_is_lent_to_a_turns_relay() {
    assert!(BodyKind::Async.lent(true));
    for k in [BodyKind::Inline, BodyKind::Worker, BodyKind::Tool] {
        assert!(!k.lent(true));
    }
    for k in [BodyKind::Async, BodyKind::Inline, BodyKind::Worker, BodyKind::Tool] {
        assert!(!k.lent(false));
    }
}

#[test]
fn a_passed_envelope_keeps_its_value_only_for_a_success() {
    let e: Env<&str> = Env::passed(true, true, None, None, || Some("v"));
    assert_eq!(
        e,
        Env::Passed {
            ok: true,
            deduplicated: true,
            code: code(ErrorCode::InternalError),
            kind: None,
            value: Some("v"),
        }
    );
    assert_eq!(e.outcome(), "ok");
    let e: Env<&str> = Env::passed(
        false,
        false,
        Some("rate_limited".into()),
        Some(FailureKind::Transient),
        || panic!("asked"),
    );
    assert_eq!(
        e,
        Env::Passed {
            ok: false,
            deduplicated: false,
            code: Code::Own("rate_limited".into()),
            kind: Some(FailureKind::Transient),
            value: None,
        }
    );
    assert_eq!(e.outcome(), "rate_limited");
    // No envelope at all (not a dict): neither flag nor code.
    let e: Env<&str> = Env::passed(false, false, None, None, || panic!("asked"));
    assert_eq!(e.outcome(), "internal_error");
    assert!(!e.ok());
}

#[test]
fn only_a_successs_value_is_given_as_json_text() {
    let mut p = shared();
    let (mut m, _) = p.begin(side_effecting("send"), at(0.0));
    let _ = p.feed(&mut m, Event::StoreGot(None), at(0.0));
    assert_eq!(
        p.feed(&mut m, Event::StoreCas(true), at(0.0)),
        Step::RunBody { timeout_s: Some(100.0) }
    );
    let ok: Env<&str> = Env::passed(true, false, None, None, || Some("v"));
    let failed: Env<&str> = Env::passed(false, false, Some("timeout".into()), None, || None);
    assert!(m.wants_json_of(&ok));
    assert!(!m.wants_json_of(&failed));
    // No shared claim held: no text wanted, even of a success.
    let (m, _) = shared().begin(facts("read"), at(0.0));
    assert!(!m.wants_json_of(&ok));
}

#[test]
fn an_admitted_calls_text_and_key_are_made_only_when_read() {
    let v = serde_json::json!({"b": 1, "a": 2});
    let text = "{\"a\":2,\"b\":1}".to_owned();
    let none = Needs::default();
    assert_eq!(admitted_identity(&none, &v, false, false), (String::new(), Vec::new()));
    assert_eq!(admitted_identity(&none, &v, true, false), (text.clone(), Vec::new()));
    assert_eq!(admitted_identity(&none, &v, false, true), (text.clone(), Vec::new()));
    let counts = Needs {
        counts: true,
        ..Needs::default()
    };
    assert_eq!(
        admitted_identity(&counts, &v, false, false),
        (String::new(), crate::middleware::args_key(&v))
    );
    assert_eq!(
        admitted_identity(&counts, &v, true, false),
        crate::middleware::canonical_and_key(&v)
    );
    let store = Needs {
        store: true,
        ..Needs::default()
    };
    assert_eq!(admitted_identity(&store, &v, false, false), (text, Vec::new()));
}

#[test]
fn an_audit_record_has_its_fields_in_order() {
    let r = AuditRecord {
        outcome: "timeout".into(),
        attempts: 2,
        elapsed_ms: 12.5,
        decision: "failed",
    };
    let record: Vec<_> = AuditRecord::KEYS.into_iter().zip(r.values(Some("t"), "{}")).collect();
    assert_eq!(
        record,
        [
            ("tool", AuditValue::Text(Some("t"))),
            ("call_id", AuditValue::CallId),
            ("args_hash", AuditValue::Owned(crate::middleware::args_hash("{}"))),
            ("outcome", AuditValue::Text(Some("timeout"))),
            ("attempts", AuditValue::Count(2)),
            ("elapsed_ms", AuditValue::Number(12.5)),
            ("decision", AuditValue::Text(Some("failed"))),
        ]
    );
    assert_eq!(r.values(None, "{}")[0], AuditValue::Text(None));
}

#[test]
fn the_host_approved_a_call_by_its_flag_its_name_or_its_id() {
    let never = || -> Result<bool, &str> { panic!("not asked") };
    let never_id = || -> Result<Option<bool>, &str> { panic!("not asked") };
    let coll = || Ok(Approvals::Collection);
    let type_error = |e: &&str| *e == "TypeError";
    assert_eq!(
        host_approved(true, || panic!("not read"), never, never_id, type_error),
        Ok(true)
    );
    for a in [Approvals::Absent, Approvals::Text, Approvals::Empty] {
        assert_eq!(host_approved(false, || Ok(a), never, never_id, type_error), Ok(false));
    }
    assert_eq!(host_approved(false, coll, || Ok(true), never_id, type_error), Ok(true));
    assert_eq!(
        host_approved(false, coll, || Ok(false), || Ok(Some(true)), type_error),
        Ok(true)
    );
    assert_eq!(
        host_approved(false, coll, || Ok(false), || Ok(Some(false)), type_error),
        Ok(false)
    );
    assert_eq!(
        host_approved(false, coll, || Ok(false), || Ok(None), type_error),
        Ok(false)
    );
    // a collection that cannot hold them approves nothing; another error fails the call
    assert_eq!(
        host_approved(false, coll, || Err("TypeError"), never_id, type_error),
        Ok(false)
    );
    assert_eq!(
        host_approved(false, coll, || Ok(false), || Err("TypeError"), type_error),
        Ok(false)
    );
    assert_eq!(
        host_approved(false, coll, || Err("boom"), never_id, type_error),
        Err("boom")
    );
    assert_eq!(
        host_approved(false, || Err("boom"), never, never_id, type_error),
        Err("boom")
    );
}

#[test]
fn a_call_is_observed_by_the_first_reader_asked() {
    let never = || -> Result<bool, ()> { panic!("not asked") };
    let yes = || Ok::<_, ()>(true);
    let no = || Ok::<_, ()>(false);
    assert_eq!(Observed::asked(true, never, never, never), Ok(Observed::Span));
    assert_eq!(Observed::asked(false, yes, never, never), Ok(Observed::Record));
    assert_eq!(Observed::asked(false, no, yes, never), Ok(Observed::Record));
    assert_eq!(Observed::asked(false, no, no, yes), Ok(Observed::Record));
    assert_eq!(Observed::asked(false, no, no, no), Ok(Observed::No));
    assert_eq!(Observed::asked(false, no, || Err(()), never), Err(()));
    let never = |_: &&str| -> bool { panic!("not asked") };
    assert_eq!(Observed::traced(Ok(Some(true)), never), Ok(true));
    assert_eq!(Observed::traced(Ok(Some(false)), never), Ok(false));
    assert_eq!(Observed::traced(Ok(None), never), Ok(false));
    assert_eq!(Observed::traced(Err("unreadable"), |_| false), Ok(true));
    assert_eq!(Observed::traced(Err("stop"), |_| true), Err("stop"));
}

#[test]
fn only_a_shared_store_reads_the_wall_clock() {
    let shared = |shared| Needs::of(&[Rule::Idempotency { shared, lease_s: 60.0 }]);
    assert!(shared(true).wall_clock());
    assert!(!shared(false).wall_clock());
    assert!(!Needs::of(&default_rules()).wall_clock());
}

#[test]
fn facts_in_scope_are_the_default_facts_in_that_scope() {
    let scope: std::sync::Arc<str> = "run-7".into();
    let made = Facts::in_scope(scope.clone());
    let defaulted = Facts {
        scope,
        ..Facts::default()
    };
    assert_eq!(format!("{made:?}"), format!("{defaulted:?}"));
}

// ------------------------------------------------------------------ reading an admitted call's facts

/// A call's tool, context and arguments as plain answers; every read is logged in order.
struct Fake {
    asked: std::cell::RefCell<Vec<&'static str>>,
    requires_approval: bool,
    hook: Option<bool>,
    side_effecting: bool,
    idempotent: bool,
    undeclared: bool,
    deadline_left: Option<f64>,
    url_arg: Option<&'static str>,
    url: UrlValue<&'static str>,
    /// The read that raises (its name), if any.
    fails: Option<&'static str>,
}

impl Default for Fake {
    fn default() -> Self {
        Fake {
            asked: std::cell::RefCell::new(Vec::new()),
            requires_approval: false,
            hook: None,
            side_effecting: false,
            idempotent: false,
            undeclared: false,
            deadline_left: None,
            url_arg: None,
            url: UrlValue::Missing,
            fails: None,
        }
    }
}

impl Fake {
    fn ask<T>(&self, what: &'static str, answer: T) -> Result<T, &'static str> {
        self.asked.borrow_mut().push(what);
        if self.fails == Some(what) {
            return Err(what);
        }
        Ok(answer)
    }
}

impl AdmittedReads for Fake {
    type Error = &'static str;
    type Value = &'static str;
    fn name(&self) -> Result<String, &'static str> {
        self.ask("name", "t".to_owned())
    }
    fn requires_approval(&self) -> Result<bool, &'static str> {
        self.ask("requires_approval", self.requires_approval)
    }
    fn host_approved(&self, name: &str) -> Result<bool, &'static str> {
        self.ask("host_approved", name == "t")
    }
    fn has_read_only_hook(&self) -> Result<bool, &'static str> {
        self.ask("has_read_only_hook", self.hook.is_some())
    }
    fn ask_read_only_hook(&self) -> Result<bool, &'static str> {
        self.ask("ask_read_only_hook", self.hook.unwrap_or(false))
    }
    fn side_effecting(&self) -> Result<bool, &'static str> {
        self.ask("side_effecting", self.side_effecting)
    }
    fn idempotent(&self) -> Result<bool, &'static str> {
        self.ask("idempotent", self.idempotent)
    }
    fn undeclared(&self) -> Result<bool, &'static str> {
        self.ask("undeclared", self.undeclared)
    }
    fn timeout_s(&self) -> Result<Option<f64>, &'static str> {
        self.ask("timeout_s", Some(2.5))
    }
    fn deadline_left(&self) -> Result<Option<f64>, &'static str> {
        self.ask("deadline_left", self.deadline_left)
    }
    fn url_arg(&self) -> Result<Option<String>, &'static str> {
        self.ask("url_arg", self.url_arg.map(str::to_owned))
    }
    fn url_value(&self, arg: &str) -> UrlValue<&'static str> {
        self.asked.borrow_mut().push("url_value");
        assert_eq!(Some(arg), self.url_arg);
        self.url
    }
    fn url_text(&self, value: &'static str) -> Result<String, &'static str> {
        self.ask("url_text", value.to_uppercase())
    }
}

fn all_needs() -> Needs {
    Needs::of(&default_rules()).with_egress_and_approval()
}

impl Needs {
    fn with_egress_and_approval(mut self) -> Needs {
        self.approval = true;
        self.egress = true;
        self
    }
}

#[test]
fn read_admitted_asks_every_fact_a_rule_reads_in_order() {
    let r = Fake {
        requires_approval: true,
        idempotent: false,
        deadline_left: Some(4.0),
        url_arg: Some("url"),
        url: UrlValue::Set("http://x"),
        ..Fake::default()
    };
    let mut f = Facts::in_scope("run".into());
    f.read_admitted(&all_needs(), &r, || 10.5).unwrap();
    assert_eq!(
        *r.asked.borrow(),
        [
            "name",
            "requires_approval",
            "host_approved",
            "has_read_only_hook",
            "side_effecting",
            "idempotent",
            "undeclared",
            "timeout_s",
            "deadline_left",
            "url_arg",
            "url_value",
            "url_text"
        ]
    );
    assert!(f.admitted);
    assert_eq!(f.name.as_deref(), Some("t"));
    assert!(f.requires_approval && f.host_approved);
    assert!(f.read_only);
    assert!(f.retry_safe); // read-only and declared
    assert_eq!(f.tool_timeout_s, Some(2.5));
    assert_eq!(f.deadline, Some(14.5));
    assert_eq!(f.url, Some(("url".to_owned(), "HTTP://X".to_owned())));
}

#[test]
fn read_admitted_asks_only_what_the_answers_before_make_matter() {
    // No approval needed: the host is not asked; a hook answers read-only (side_effecting not
    // asked); undeclared effects: a read-only call is not retry-safe; no deadline in the
    // context: the clock is not read; no URL argument: no value read.
    let r = Fake {
        hook: Some(true),
        side_effecting: true,
        undeclared: true,
        ..Fake::default()
    };
    let mut f = Facts::in_scope("run".into());
    f.read_admitted(&all_needs(), &r, || panic!("the clock is read only for a deadline"))
        .unwrap();
    assert_eq!(
        *r.asked.borrow(),
        [
            "name",
            "requires_approval",
            "has_read_only_hook",
            "ask_read_only_hook",
            "idempotent",
            "undeclared",
            "timeout_s",
            "deadline_left",
            "url_arg"
        ]
    );
    assert!(!f.requires_approval && !f.host_approved);
    assert!(f.read_only && !f.retry_safe);
    assert_eq!((f.deadline, f.url.clone()), (None, None));

    // A URL argument the call leaves unset or None: nothing to check, its text not asked.
    for url in [UrlValue::Missing, UrlValue::Null] {
        let r = Fake {
            url_arg: Some("u"),
            url,
            ..Fake::default()
        };
        let mut f = Facts::in_scope("run".into());
        f.read_admitted(&all_needs(), &r, || 0.0).unwrap();
        assert_eq!(r.asked.borrow().last(), Some(&"url_value"));
        assert_eq!(f.url, None);
    }
}

#[test]
fn read_admitted_under_no_rule_reads_the_name_alone() {
    let r = Fake::default();
    let mut f = Facts::in_scope("run".into());
    f.read_admitted(&Needs::default(), &r, || 0.0).unwrap();
    assert_eq!(*r.asked.borrow(), ["name"]);
    assert!(f.admitted);
    assert_eq!(f.name.as_deref(), Some("t"));
    // Only the retry rule: read-only as the retry reads it, idempotent and undeclared too.
    let retry = Needs::of(&[Rule::Retry {
        policy: RetryPolicy::default(),
        breaker: None,
    }]);
    let r = Fake {
        idempotent: true,
        side_effecting: true,
        ..Fake::default()
    };
    let mut f = Facts::in_scope("run".into());
    f.read_admitted(&retry, &r, || 0.0).unwrap();
    assert_eq!(
        *r.asked.borrow(),
        [
            "name",
            "has_read_only_hook",
            "side_effecting",
            "idempotent",
            "undeclared"
        ]
    );
    assert!(!f.read_only && f.retry_safe);
}

#[test]
fn read_admitted_stops_at_the_first_read_that_fails() {
    let r = Fake {
        requires_approval: true,
        fails: Some("host_approved"),
        ..Fake::default()
    };
    let mut f = Facts::in_scope("run".into());
    assert_eq!(f.read_admitted(&all_needs(), &r, || 0.0), Err("host_approved"));
    assert_eq!(*r.asked.borrow(), ["name", "requires_approval", "host_approved"]);
    assert_eq!(f.name, None);
}

#[test]
fn identify_makes_the_text_and_key_only_when_read() {
    let value = serde_json::json!({"b": 1, "a": [2]});
    let counts = Needs::of(&[Rule::Repeat { limit: 3 }]);
    let none = Needs::default();
    let text = || Ok::<_, ()>("from args".to_owned());
    let unread = || -> Result<String, ()> { panic!("the text is made only when read") };

    let mut f = Facts::in_scope("run".into());
    f.identify(&none, Identity::Text("{}".into()), false, unread).unwrap();
    assert_eq!((f.canonical.as_str(), f.key.len()), ("{}", 0));

    // The validated arguments: the key alone for a rule that counts; the text too when observed
    // (the text is the key then).
    let mut f = Facts::in_scope("run".into());
    f.identify(&counts, Identity::Of(value.clone()), false, unread).unwrap();
    assert_eq!(
        (f.canonical.as_str(), f.key.clone()),
        ("", crate::middleware::args_key(&value))
    );
    let mut f = Facts::in_scope("run".into());
    f.identify(&counts, Identity::Of(value.clone()), true, unread).unwrap();
    assert_eq!(f.canonical, r#"{"a":[2],"b":1}"#);
    let mut f = Facts::in_scope("run".into());
    f.identify(&none, Identity::Of(value.clone()), false, unread).unwrap();
    assert_eq!((f.canonical.as_str(), f.key.len()), ("", 0));

    // A key made at admission: the text from the arguments only when read (an approval refusal
    // quotes it).
    let mut f = Facts::in_scope("run".into());
    f.identify(&counts, Identity::Key(vec![1, 2]), false, unread).unwrap();
    assert_eq!((f.canonical.as_str(), f.key.clone()), ("", vec![1, 2]));
    let mut f = Facts::in_scope("run".into());
    f.requires_approval = true;
    f.identify(&counts, Identity::Key(vec![1, 2]), false, text).unwrap();
    assert_eq!((f.canonical.as_str(), f.key.clone()), ("from args", vec![1, 2]));

    // Only the arguments: the text when anything reads the identity, which is then the key.
    let mut f = Facts::in_scope("run".into());
    f.identify(&counts, Identity::FromArgs, false, text).unwrap();
    assert_eq!((f.canonical.as_str(), f.key.len()), ("from args", 0));
    let mut f = Facts::in_scope("run".into());
    f.identify(&none, Identity::FromArgs, false, unread).unwrap();
    assert_eq!(f.canonical, "");
    let mut f = Facts::in_scope("run".into());
    assert_eq!(f.identify(&counts, Identity::FromArgs, false, || Err(7)), Err(7));
}

#[test]
fn observe_keeps_an_entry_per_rule_only_once_one_observes() {
    let mut f = Facts::in_scope("run".into());
    let mut asked = Vec::new();
    let observed = f
        .observe(&[0, 3], 5, |nth, i| {
            asked.push((nth, i));
            Ok::<_, ()>(Observed::No)
        })
        .unwrap();
    assert!(!observed);
    assert_eq!(asked, [(0, 0), (1, 3)]);
    assert!(f.audit.is_empty());

    let mut f = Facts::in_scope("run".into());
    let answers = [Observed::No, Observed::Span];
    let observed = f.observe(&[1, 3], 4, |nth, _| Ok::<_, ()>(answers[nth])).unwrap();
    assert!(observed);
    assert_eq!(f.audit, [Observed::No, Observed::No, Observed::No, Observed::Span]);

    // What asking raises fails the call; nothing after it is asked.
    let mut f = Facts::in_scope("run".into());
    let mut asked = 0;
    let r = f.observe(&[0, 1], 2, |_, _| {
        asked += 1;
        Err("raised")
    });
    assert_eq!((r, asked), (Err("raised"), 1));
}

#[test]
fn time_reads_the_wall_clock_only_when_asked() {
    mono_now(); // the clock's first reading is behind `a`
    let a = std::time::Instant::now();
    let t = Time::at(false, a);
    assert_eq!(t.unix, 0.0);
    assert_eq!(t.mono, mono_at(a));
    let later = a + std::time::Duration::from_millis(1500);
    assert!((mono_at(later) - mono_at(a) - 1.5).abs() < 1e-9);
    assert!(Time::at(true, a).unix > 1.7e9);
    assert!(Time::now(false).mono >= t.mono);
    // An instant before the clock's first reading reads 0.
    let before = a.checked_sub(std::time::Duration::from_secs(3600 * 24 * 365));
    if let Some(before) = before {
        assert_eq!(mono_at(before), 0.0);
    }
}

#[test]
fn a_rejected_call_s_raw_text_only_when_read() {
    let counts = Needs::of(&[Rule::Repeat { limit: 3 }]);
    let value = serde_json::json!({"b": 1, "a": 2});
    let unread = |_: &str| -> Result<String, ()> { panic!("the text is made only when read") };
    let invalid = Code::Known(ErrorCode::InvalidArguments);

    // A named call the repeat guard counts: the parsed arguments' canonical text.
    let mut f = Facts::in_scope("run".into());
    f.rejected(
        &counts,
        invalid.clone(),
        Some("t".into()),
        false,
        RawSent::Parsed(&value),
        unread,
    )
    .unwrap();
    assert_eq!(
        (f.rejection_code.clone(), f.name.as_deref(), f.canonical.as_str()),
        (Some(invalid.clone()), Some("t"), r#"{"a":2,"b":1}"#)
    );
    // Only held as the host's object: its text from the binding.
    let mut f = Facts::in_scope("run".into());
    f.rejected(
        &counts,
        invalid.clone(),
        Some("t".into()),
        false,
        RawSent::Held("x"),
        |a| Ok::<_, ()>(format!("<{a}>")),
    )
    .unwrap();
    assert_eq!(f.canonical, "<x>");
    let mut f = Facts::in_scope("run".into());
    f.rejected(
        &counts,
        invalid.clone(),
        Some("t".into()),
        false,
        RawSent::<&str>::Absent,
        unread,
    )
    .unwrap();
    assert_eq!(f.canonical, "{}");
    // Unnamed and unobserved: nothing reads it; observed: an audit record hashes it.
    let mut f = Facts::in_scope("run".into());
    f.rejected(&counts, invalid.clone(), None, false, RawSent::Held("x"), unread)
        .unwrap();
    assert_eq!((f.name.clone(), f.canonical.as_str()), (None, ""));
    let mut f = Facts::in_scope("run".into());
    f.rejected(
        &Needs::default(),
        invalid.clone(),
        None,
        true,
        RawSent::Held("x"),
        |a| Ok::<_, ()>(a.to_owned()),
    )
    .unwrap();
    assert_eq!(f.canonical, "x");
    let mut f = Facts::in_scope("run".into());
    f.rejected(
        &Needs::default(),
        invalid,
        Some("t".into()),
        false,
        RawSent::Parsed(&value),
        unread,
    )
    .unwrap();
    assert_eq!(f.canonical, "");
    assert!(!f.admitted);
    // What making the host's object's text raised (a stop) is raised.
    let mut f = Facts::in_scope("run".into());
    let raised = f.rejected(
        &counts,
        Code::Known(ErrorCode::UnknownTool),
        Some("t".into()),
        false,
        RawSent::Held("x"),
        |_| Err("KeyboardInterrupt"),
    );
    assert_eq!(raised, Err("KeyboardInterrupt"));
}

#[test]
fn held_arguments_read_as_json_else_print_else_name_their_type_and_a_stop_propagates() {
    let stop = |e: &&str| *e == "stop";
    let never = || -> Result<String, &str> { panic!("not asked") };
    let no_type = || -> Option<String> { panic!("not asked") };
    let ok = |t: &str| -> Result<String, &str> { Ok(t.to_owned()) };
    assert_eq!(
        held_canonical(|| ok("{\"a\":1}"), never, no_type, stop),
        Ok("{\"a\":1}".into())
    );
    assert_eq!(
        held_canonical(|| Err("TypeError"), || ok("<A>"), no_type, stop),
        Ok("<A>".into())
    );
    assert_eq!(
        held_canonical(|| Err("TypeError"), || Err("ValueError"), || Some("A".into()), stop),
        Ok("<unreadable A>".into())
    );
    assert_eq!(
        held_canonical(|| Err("TypeError"), || Err("ValueError"), || None, stop),
        Ok("<unreadable object>".into())
    );
    assert_eq!(held_canonical(|| Err("stop"), never, no_type, stop), Err("stop"));
    assert_eq!(
        held_canonical(|| Err("TypeError"), || Err("stop"), no_type, stop),
        Err("stop")
    );
}

#[test]
fn a_record_its_driver_never_emitted_is_the_aborts_to_emit_and_one_written_in_a_task_the_aborts_to_wait_for() {
    let mut p = P::new(default_rules());
    // (each part a tool of its own: the repeat guard refuses a third identical call)
    let seen = |name: &str| Facts {
        audit: vec![Observed::Record],
        ..facts(name)
    };
    let ok = AuditRecord {
        outcome: "ok".into(),
        attempts: 1,
        elapsed_ms: 250.0,
        decision: "executed",
    };
    // The record step handed out, then the task that was to take it cancelled before its first
    // step: the call's abort emits that record (the call's outcome), not a cancellation.
    let (mut m, _) = p.begin(seen("a"), at(0.0));
    assert_eq!(p.feed(&mut m, Event::BodyOk("7"), at(0.25)), Step::Record(ok.clone()));
    m.unperformed();
    assert_eq!(p.abort(&mut m, true, at(0.5)), vec![(0, Step::Record(ok.clone()))]);
    assert_eq!(p.abort(&mut m, true, at(0.6)), vec![]);
    // Performed (the driver awaits the sink when it is aborted): the sink has it, nothing again.
    let (mut m, _) = p.begin(seen("b"), at(0.0));
    assert_eq!(p.feed(&mut m, Event::BodyOk("7"), at(0.25)), Step::Record(ok.clone()));
    assert_eq!(p.abort(&mut m, true, at(0.5)), vec![]);
    // Written in a task of its own (the caller's cancellation ends only its wait): the abort
    // waits for that task, and emits nothing again; then nothing is left to wait for.
    let (mut m, _) = p.begin(seen("e"), at(0.0));
    assert_eq!(p.feed(&mut m, Event::BodyOk("7"), at(0.25)), Step::Record(ok.clone()));
    m.recording();
    assert_eq!(p.abort(&mut m, true, at(0.5)), vec![(0, Step::Recording(ok.clone()))]);
    assert_eq!(p.abort(&mut m, true, at(0.6)), vec![]);
    // Emitted: an abort afterwards (none is asked once the call finished) and a step left
    // unperformed or a task said later say nothing of it.
    let (mut m, _) = p.begin(seen("c"), at(0.0));
    p.feed(&mut m, Event::BodyOk("7"), at(0.25));
    m.recording();
    assert_eq!(p.feed(&mut m, Event::Recorded, at(0.3)), Step::Done(ok_env("7", 250.0)));
    m.unperformed();
    m.recording();
    assert_eq!(p.abort(&mut m, true, at(0.5)), vec![]);
    // Before any record was handed out, an abort records the cancellation as before.
    let (mut m, step) = p.begin(seen("d"), at(0.0));
    assert!(matches!(step, Step::RunBody { .. }), "{step:?}");
    m.unperformed();
    m.recording();
    let steps = p.abort(&mut m, true, at(0.5));
    assert!(
        matches!(&steps[..], [(0, Step::Record(r))] if r.outcome == "cancelled"),
        "{steps:?}"
    );
}

#[test]
fn rule_kinds_by_name() {
    assert_eq!(RuleKind::of("repeat_guard"), Ok(RuleKind::Repeat));
    for (kind, name) in RuleKind::NAMES {
        assert_eq!(RuleKind::of(name), Ok(kind));
    }
    assert_eq!(
        RuleKind::of("Retry"),
        Err(r#"unknown pipeline rule "Retry""#.to_owned())
    );
    assert_eq!(RuleKind::of(""), Err(r#"unknown pipeline rule """#.to_owned()));
}

#[test]
fn a_reseeded_pipeline_draws_from_its_new_seed_only() {
    let (mut a, mut b) = (P::with_seed(default_rules(), 1), P::with_seed(default_rules(), 1));
    assert_eq!(a.rng.u64(..), b.rng.u64(..)); // copies draw alike
    a.reseed(2);
    b.reseed(3);
    assert_ne!(a.rng.u64(..), b.rng.u64(..));
    a.reseed(7);
    assert_eq!(a.rng.u64(..), fastrand::Rng::with_seed(7).u64(..));
    // Only a retry's jitter and a shared store's claims draw.
    assert!(Needs::of(&default_rules()).draws());
    assert!(!Needs::of(&[Rule::Repeat { limit: 3 }, Rule::Audit]).draws());
}

#[test]
fn a_call_holds_one_idle_frame_per_rule_inline_up_to_the_bound_else_on_the_heap() {
    assert!(Frames::default().is_empty());
    for n in [0, 1, 6, INLINE_FRAMES, INLINE_FRAMES + 1, 20] {
        let mut f = Frames::idle(n);
        assert_eq!(f.len(), n);
        assert!(f.iter().all(|x| matches!(x, Frame::Idle)));
        assert_eq!(matches!(f, Frames::Inline { .. }), n > 0 && n <= INLINE_FRAMES);
        if n > 0 {
            f[n - 1] = Frame::Audit { started: 1.0 };
            assert!(matches!(f[n - 1], Frame::Audit { started } if started == 1.0));
            assert!(f[..n - 1].iter().all(|x| matches!(x, Frame::Idle)));
        }
    }
}
