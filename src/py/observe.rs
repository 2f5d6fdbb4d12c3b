//! How a call is observed (the `audit()` rule): its record sent to the `agentkit_tools.audit`
//! log, the audit sink and `ctx.trace`, and its OpenTelemetry `execute_tool` span. The drive
//! (`super::drive`) performs these steps; this module is their conversions to and from Python.
use pyo3::exceptions::PyImportError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::drive::{log, own, propagates};
use super::pipeline::{debug_logged, helpers};
use crate::observe as rules;

/// What was found of opentelemetry-api (imported once, when an `audit()` rule is built or a
/// call first asks).
pub(super) struct Otel {
    /// The `opentelemetry.trace` module's namespace: its `_TRACER_PROVIDER` read as a dict entry.
    trace_dict: Py<PyDict>,
    get_tracer_provider: Py<PyAny>,
    get_current_span: Py<PyAny>,
    set_span_in_context: Py<PyAny>,
    /// `(NoOpTracerProvider, ProxyTracerProvider)`: with either, no span is recorded.
    no_ops: Py<PyTuple>,
    tracer: Py<PyAny>,
    status: Py<PyAny>,
    status_error: Py<PyAny>,
    attach: Py<PyAny>,
    detach: Py<PyAny>,
    /// The environment names a tracer provider (installed on its first lookup).
    from_env: bool,
}

static OTEL: PyOnceLock<Option<Otel>> = PyOnceLock::new();

/// opentelemetry-api when it is installed (None without it); looked for once.
fn otel(py: Python<'_>) -> PyResult<Option<&Otel>> {
    let found = OTEL.get_or_try_init(py, || {
        let found = (|| -> PyResult<Otel> {
            let context = py.import("opentelemetry.context")?;
            let trace = py.import("opentelemetry.trace")?;
            let status_code = trace.getattr("StatusCode")?;
            let no_ops = PyTuple::new(
                py,
                [
                    trace.getattr("NoOpTracerProvider")?,
                    trace.getattr("ProxyTracerProvider")?,
                ],
            )?;
            Ok(Otel {
                trace_dict: trace.dict().unbind(),
                get_tracer_provider: trace.getattr("get_tracer_provider")?.unbind(),
                get_current_span: trace.getattr("get_current_span")?.unbind(),
                set_span_in_context: trace.getattr("set_span_in_context")?.unbind(),
                no_ops: no_ops.unbind(),
                tracer: trace.call_method1("get_tracer", ("agentkit_tools",))?.unbind(),
                status: trace.getattr("Status")?.unbind(),
                status_error: status_code.getattr("ERROR")?.unbind(),
                attach: context.getattr("attach")?.unbind(),
                detach: context.getattr("detach")?.unbind(),
                from_env: py
                    .import("os")?
                    .getattr("environ")?
                    .contains("OTEL_PYTHON_TRACER_PROVIDER")?,
            })
        })();
        match found {
            Ok(o) => Ok(Some(o)),
            Err(e) if e.is_instance_of::<PyImportError>(py) => Ok(None),
            Err(e) => Err(e),
        }
    })?;
    Ok(found.as_ref())
}

/// opentelemetry when a tracer provider is installed (spans are recorded), else None: without
/// one every span would be a no-op that still costs more than the rest of the chain.
fn tracer(py: Python<'_>) -> PyResult<Option<&Otel>> {
    let Some(o) = otel(py)? else { return Ok(None) };
    let provider = o.get_tracer_provider.bind(py).call0()?;
    Ok(if provider.is_instance(o.no_ops.bind(py))? {
        None
    } else {
        Some(o)
    })
}

/// Whether a tracer provider is installed. Without a provider set yet (the global is only ever
/// set once) and none named by the environment, the answer is read from one attribute.
pub(super) fn tracing_on(py: Python<'_>) -> PyResult<bool> {
    let Some(o) = otel(py)? else { return Ok(false) }; // opentelemetry-api is not installed
    let unset = o
        .trace_dict
        .bind(py)
        .get_item(intern!(py, "_TRACER_PROVIDER"))?
        .is_some_and(|p| p.is_none());
    if !rules::provider_to_look_at(unset, o.from_env) {
        return Ok(false);
    }
    Ok(tracer(py)?.is_some())
}

/// Start the `execute_tool` span of call `call_id` of tool `name` and make it the current span:
/// the span and the token that makes the context before it current again (None: no tracer
/// provider is installed).
pub(super) fn open_span(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    call_id: &Bound<'_, PyAny>,
) -> PyResult<Option<Py<PyTuple>>> {
    let Some(o) = tracer(py)? else { return Ok(None) };
    let attributes = PyDict::new(py);
    attributes.set_item(intern!(py, rules::ATTR_OPERATION), intern!(py, rules::SPAN_NAME))?;
    let name = if name.is_truthy()? {
        name.clone()
    } else {
        PyString::new(py, "").into_any()
    };
    attributes.set_item(intern!(py, rules::ATTR_TOOL_NAME), name)?;
    if !call_id.is_none() {
        attributes.set_item(intern!(py, rules::ATTR_CALL_ID), call_id.str()?)?;
    }
    let kw = PyDict::new(py);
    kw.set_item(intern!(py, "attributes"), attributes)?;
    kw.set_item(intern!(py, "record_exception"), false)?;
    kw.set_item(intern!(py, "set_status_on_exception"), false)?;
    let span = o
        .tracer
        .bind(py)
        .call_method(intern!(py, "start_span"), (intern!(py, rules::SPAN_NAME),), Some(&kw))?;
    let token = o
        .attach
        .bind(py)
        .call1((o.set_span_in_context.bind(py).call1((&span,))?,))?;
    Ok(Some(PyTuple::new(py, [span, token])?.unbind()))
}

/// The span attributes of record `rec`, read as the core built it: taken before the record
/// goes to the log, the sink or `ctx.trace` (any of them may change it).
pub(super) fn span_attributes<'py>(py: Python<'py>, rec: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    // The names as interned strings, made once.
    static NAMES: PyOnceLock<Vec<(Py<PyString>, Py<PyString>)>> = PyOnceLock::new();
    let names = NAMES.get_or_init(py, || {
        rules::RECORD_ATTRIBUTES
            .iter()
            .map(|(f, a)| (PyString::intern(py, f).unbind(), PyString::intern(py, a).unbind()))
            .collect()
    });
    let a = PyDict::new(py);
    for (field, attribute) in names {
        a.set_item(attribute.bind(py), rec.get_item(field.bind(py))?)?;
    }
    Ok(a)
}

/// End a call's span (`opened`: what `open_span` gave), with the attributes `attrs` of its
/// record (see `span_attributes`; None: the call was aborted before its record) and the status
/// of its outcome. A call dropped and
/// garbage-collected (`exc` a `GeneratorExit`) is closed by the collector in whatever context is
/// current there, not in its task's: its span is ended but the context it was made current in is
/// not restored (that context goes with the task, and restoring it elsewhere fails and would be
/// logged as an error).
pub(super) fn close_span(
    py: Python<'_>,
    opened: &Bound<'_, PyTuple>,
    attrs: Option<&Bound<'_, PyAny>>,
    exc: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let (span, token) = (opened.get_item(0)?, opened.get_item(1)?);
    let o = otel(py)?.ok_or_else(|| PyImportError::new_err("opentelemetry"))?;
    let attributes = (|| -> PyResult<()> {
        let Some(a) = attrs else { return Ok(()) };
        let outcome = a.get_item(intern!(py, rules::ATTR_OUTCOME))?;
        span.call_method1(intern!(py, "set_attributes"), (a,))?;
        let end = rules::span_end(outcome.extract::<&str>().ok(), || Ok::<_, PyErr>(tracer(py)?.is_some()))?;
        if let rules::SpanEnd::Failed { status } = end {
            span.call_method1(
                intern!(py, "set_attribute"),
                (intern!(py, rules::ATTR_ERROR_TYPE), &outcome),
            )?;
            if status {
                span.call_method1(
                    intern!(py, "set_status"),
                    (o.status.bind(py).call1((o.status_error.bind(py), &outcome))?,),
                )?;
            }
        }
        Ok(())
    })();
    let detached = (|| -> PyResult<()> {
        let dropped = exc.is_some_and(|e| e.is_instance_of::<pyo3::exceptions::PyGeneratorExit>());
        // (A token of None: restored already, see `restore_context`.)
        if rules::detaches(token.is_none(), dropped, || {
            Ok::<_, PyErr>(o.get_current_span.bind(py).call0()?.is(&span))
        })? {
            o.detach.bind(py).call1((token,))?;
        }
        Ok(())
    })();
    span.call_method0(intern!(py, "end"))?;
    detached?;
    attributes
}

/// Make the context before span `opened` current again now, in the task it was made current
/// in (its call goes on elsewhere and its span is ended there): the span without its token.
pub(super) fn restore_context<'py>(py: Python<'py>, opened: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyTuple>> {
    let (span, token) = (opened.get_item(0)?, opened.get_item(1)?);
    if let Some(o) = otel(py)? {
        o.detach.bind(py).call1((token,))?;
    }
    PyTuple::new(py, [span, py.None().into_bound(py)])
}

/// The record `rec` of a call in `ctx` to the DEBUG log and the sink of the audit rule `cfg`:
/// the sink's awaitable (and the sink) when it returned one, to await (see `sink_failed`).
pub(super) fn record<'py>(
    py: Python<'py>,
    cfg: &Bound<'py, PyAny>,
    rec: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let h = helpers(py)?;
    let logged = (|| -> PyResult<()> {
        if !debug_logged(py, h)? {
            return Ok(());
        }
        let kw = PyDict::new(py);
        let extra = PyDict::new(py);
        extra.set_item(intern!(py, "audit"), rec)?;
        kw.set_item(intern!(py, "extra"), extra)?;
        static FIELDS: PyOnceLock<Vec<Py<PyString>>> = PyOnceLock::new();
        let fields = FIELDS.get_or_init(py, || {
            rules::LOG_FIELDS
                .iter()
                .map(|f| PyString::intern(py, f).unbind())
                .collect()
        });
        let mut args = vec![intern!(py, rules::LOG_LINE).clone().into_any()];
        for field in fields {
            args.push(rec.get_item(field.bind(py))?);
        }
        h.audit_log
            .bind(py)
            .call_method(intern!(py, "debug"), PyTuple::new(py, args)?, Some(&kw))?;
        Ok(())
    })();
    if let Err(e) = logged {
        failed(py, rules::LOG_FAILED, Vec::new(), e)?;
    }
    let sink = cfg.getattr(intern!(py, "sink"))?;
    if sink.is_none() {
        return Ok(None);
    }
    // (None, what a sync sink returns, is never awaitable: not asked)
    let answer = sink.call1((rec,)).and_then(|done| {
        let awaitable = !done.is_none() && own(py)?.isawaitable.bind(py).call1((&done,))?.is_truthy()?;
        Ok(awaitable.then_some(done))
    });
    match answer {
        Ok(Some(done)) => Ok(Some((done, sink))),
        Ok(None) => Ok(None),
        Err(e) => sink_failed(py, &sink, e).map(|()| None),
    }
}

/// Observation that raised `e`: logged as `msg` % `args` (the call's result is unaffected),
/// unless it propagates.
fn failed<'py>(py: Python<'py>, msg: &str, args: Vec<Bound<'py, PyAny>>, e: PyErr) -> PyResult<()> {
    if propagates(py, &e) {
        return Err(e);
    }
    log(py, &own(py)?.middleware_log, "error", msg, args, Some(&e));
    Ok(())
}

/// The audit sink `sink` raised `e` (or its awaitable did): logged (the call's result is
/// unaffected), unless it propagates.
pub(super) fn sink_failed(py: Python<'_>, sink: &Bound<'_, PyAny>, e: PyErr) -> PyResult<()> {
    failed(py, rules::SINK_FAILED, vec![sink.clone()], e)
}

/// The record `rec` to `ctx.trace` as a `"tool.call"` event (its `event` or `add_event` method,
/// or itself called); a failure is logged unless it propagates.
pub(super) fn traced(py: Python<'_>, rec: &Bound<'_, PyAny>, ctx: &Bound<'_, PyAny>) -> PyResult<()> {
    if ctx.is_none() {
        return Ok(());
    }
    // `getattr(obj, name, None)`: an absent attribute costs no `AttributeError`.
    let getattr = helpers(py)?.getattr.bind(py);
    let sent = (|| -> PyResult<()> {
        let trace = getattr.call1((ctx, intern!(py, "trace"), py.None()))?;
        if trace.is_none() {
            return Ok(());
        }
        let mut emit = None;
        static METHODS: PyOnceLock<Vec<Py<PyString>>> = PyOnceLock::new();
        let methods = METHODS.get_or_init(py, || {
            rules::TRACE_METHODS
                .iter()
                .map(|m| PyString::intern(py, m).unbind())
                .collect()
        });
        rules::trace_method(|i| -> PyResult<bool> {
            let m = getattr.call1((&trace, methods[i].bind(py), py.None()))?;
            let set = m.is_truthy()?;
            emit = set.then_some(m);
            Ok(set)
        })?;
        emit.unwrap_or_else(|| trace.clone())
            .call1((intern!(py, rules::TRACE_EVENT), rec))?;
        Ok(())
    })();
    match sent {
        Err(e) => failed(py, rules::TRACE_FAILED, Vec::new(), e),
        Ok(()) => Ok(()),
    }
}
