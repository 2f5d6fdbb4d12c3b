"""``FrozenDict`` / ``FrozenList`` / ``deep_freeze`` (SPEC §7, §11 "Value objects")."""

from __future__ import annotations

import copy
import json
import pickle
from collections import namedtuple

import pytest

from agentkit_tools import FrozenDict, FrozenList, deep_freeze

DICT_MUTATIONS = [
    ("setitem", lambda d: d.__setitem__("x", 1)),
    ("delitem", lambda d: d.__delitem__("a")),
    ("ior", lambda d: d.__ior__({"x": 1})),
    ("clear", lambda d: d.clear()),
    ("pop", lambda d: d.pop("a")),
    ("popitem", lambda d: d.popitem()),
    ("setdefault", lambda d: d.setdefault("x", 1)),
    ("update", lambda d: d.update(x=1)),
]

LIST_MUTATIONS = [
    ("setitem", lambda v: v.__setitem__(0, 9)),
    ("setslice", lambda v: v.__setitem__(slice(0, 1), [9])),
    ("delitem", lambda v: v.__delitem__(0)),
    ("iadd", lambda v: v.__iadd__([9])),
    ("imul", lambda v: v.__imul__(2)),
    ("append", lambda v: v.append(9)),
    ("clear", lambda v: v.clear()),
    ("extend", lambda v: v.extend([9])),
    ("insert", lambda v: v.insert(0, 9)),
    ("pop", lambda v: v.pop()),
    ("remove", lambda v: v.remove(1)),
    ("reverse", lambda v: v.reverse()),
    ("sort", lambda v: v.sort()),
]


@pytest.mark.parametrize("name,mutate", DICT_MUTATIONS, ids=[n for n, _ in DICT_MUTATIONS])
def test_frozen_dict_refuses_every_mutation(name, mutate):
    d = FrozenDict({"a": 1, "b": 2})
    with pytest.raises(TypeError, match="frozen value") as info:
        mutate(d)
    assert str(info.value) == (
        "FrozenDict is a frozen value: tool arguments and schemas cannot be changed in place; "
        "copy it first (dict(x) / list(x), a shallow copy)"
    )
    assert d == {"a": 1, "b": 2}


@pytest.mark.parametrize("name,mutate", LIST_MUTATIONS, ids=[n for n, _ in LIST_MUTATIONS])
def test_frozen_list_refuses_every_mutation(name, mutate):
    v = FrozenList([1, 2, 3])
    with pytest.raises(TypeError, match="FrozenList is a frozen value"):
        mutate(v)
    assert v == [1, 2, 3]


def test_augmented_assignment_refused_and_binding_unchanged():
    d = FrozenDict(a=1)
    with pytest.raises(TypeError, match="frozen value"):
        d |= {"b": 2}
    v = FrozenList([1])
    with pytest.raises(TypeError, match="frozen value"):
        v += [2]
    assert (d, v) == ({"a": 1}, [1])


def test_dict_of_frozen_is_a_shallow_mutable_copy():
    frozen = deep_freeze({"a": [1, 2], "b": {"c": 3}})
    plain = dict(frozen)
    assert type(plain) is dict
    plain["z"] = 0
    assert plain == {"a": [1, 2], "b": {"c": 3}, "z": 0}
    assert frozen == {"a": [1, 2], "b": {"c": 3}}
    # shallow: the nested values are the same (frozen) objects
    assert plain["a"] is frozen["a"] and type(plain["a"]) is FrozenList
    assert type(list(frozen["a"])) is list
    # non-mutating operators give plain containers
    assert type(frozen | {"y": 1}) is dict
    assert type(frozen["a"] + [3]) is list


def test_equality_json_and_isinstance():
    frozen = deep_freeze({"name": "é", "items": [1, {"k": None}], "t": (1, [2])})
    assert frozen == {"name": "é", "items": [1, {"k": None}], "t": (1, [2])}
    assert isinstance(frozen, dict) and isinstance(frozen["items"], list)
    assert type(frozen["t"]) is tuple and type(frozen["t"][1]) is FrozenList
    assert json.dumps(frozen, ensure_ascii=False, sort_keys=True) == (
        '{"items": [1, {"k": null}], "name": "é", "t": [1, [2]]}'
    )
    assert repr(FrozenDict(a=FrozenList([1]))) == "FrozenDict({'a': FrozenList([1])})"


def test_pickle_keeps_the_frozen_types():
    frozen = deep_freeze({"a": [1, {"b": [2]}]})
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(frozen, protocol=protocol))
        assert back == frozen
        assert (type(back), type(back["a"]), type(back["a"][1]), type(back["a"][1]["b"])) == (
            FrozenDict, FrozenList, FrozenDict, FrozenList,
        )


def test_copy_and_deepcopy():
    frozen = deep_freeze({"a": [1, 2]})
    assert copy.copy(frozen) is frozen
    deep = copy.deepcopy(frozen)
    assert deep == frozen and type(deep) is FrozenDict and type(deep["a"]) is FrozenList
    # a shallow FrozenDict may hold a mutable list: deepcopy must not share it
    shallow = FrozenDict({"a": [1]})
    clone = copy.deepcopy(shallow)
    shallow["a"].append(2)
    assert clone == {"a": [1]} and type(clone) is FrozenDict
    assert copy.deepcopy(FrozenList([[1]])) == [[1]]


def test_frozen_dict_is_shallow_and_deep_freeze_is_deep():
    shallow = FrozenDict({"a": [1]})
    assert type(shallow["a"]) is list
    deep = deep_freeze({"a": [1, {"b": []}]})
    with pytest.raises(TypeError, match="frozen value"):
        deep["a"][1]["b"].append(1)


def test_deep_freeze_leaves_other_values_alone():
    Point = namedtuple("Point", "x y")
    p = Point([1], 2)
    already = FrozenDict(a=1)
    assert deep_freeze(p) is p
    assert deep_freeze(already) is already
    assert deep_freeze("text") == "text" and deep_freeze(None) is None
    s = {1, 2}
    assert deep_freeze(s) is s


def test_hash_follows_equality():
    a = deep_freeze({"x": [1, {"y": 2}], "z": 3})
    b = deep_freeze({"z": 3, "x": [1, {"y": 2}]})
    assert hash(a) == hash(b)
    assert hash(FrozenList([1, 2])) == hash(FrozenList([1, 2]))
    assert {a: "v"}[b] == "v"
