"""Small builders of tool calls and the envelopes tests expect, shared by the async-body,
driver-protocol and `invoke_many` turn tests."""

from __future__ import annotations

from typing import Any, Callable


def call(name: str, cid: str = "c1", **args: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "input": args}


def ok(value: Any) -> dict[str, Any]:
    return {"ok": True, "value": value}


def strip(env: dict[str, Any]) -> dict[str, Any]:
    out = dict(env)
    if out.get("ok"):
        assert isinstance(out.pop("elapsed_ms"), float), env
    return out


def timeout_env(name: str, limit: str) -> dict[str, Any]:
    return {"ok": False, "error": {
        "code": "timeout",
        "message": f"{name} did not finish within {limit}s. Do not retry immediately; tell the user the backend is slow."}}


def internal(name: str, what: str) -> dict[str, Any]:
    return {"ok": False, "error": {
        "code": "internal_error",
        "message": f"{name} failed: {what}. This is a bug in the tool, not in your arguments; do not retry."}}


def native_refusal(step: Callable[[Any], Any]) -> BaseException:
    """What a native coroutine that has not started raises when ``step`` is applied to it (for
    example ``lambda co: co.send(5)``): the oracle the core's own awaitables are compared with."""
    async def native() -> None:
        return None

    co = native()
    try:
        step(co)
    except BaseException as e:  # noqa: BLE001 - the oracle is whatever the coroutine raised
        return e
    finally:
        co.close()
    raise AssertionError("the native coroutine accepted the step")
