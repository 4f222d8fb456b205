"""Frozen config dataclasses <-> plain JSON dicts, for checkpoints' config.json (never pickle).

Nested dataclasses are rebuilt from their type hints; JSON lists become tuples where the field is a tuple.
Unknown keys are an error, so a typo in a config file cannot silently fall back to a default.

A field whose config class depends on a sibling field (a codec run's ``model`` config by its ``kind``) names a
function from the raw dict being read to that class in its metadata under :data:`CONFIG_CLASS`.

Named presets have one shape everywhere: ``PRESETS: dict[str, Callable[[], Config]]`` (each call builds a fresh
config) and a lookup through :func:`pick_preset`, whose error lists the names.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from duet.errors import DuetError

T = TypeVar("T")

CONFIG_CLASS = "config_class"  # field metadata: raw dict of the enclosing config -> the field's dataclass


def to_dict(config: Any) -> dict[str, Any]:
    """A dataclass -> JSON-ready dict (tuples become lists through ``json``)."""
    return dataclasses.asdict(config)


def _convert(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return from_dict(tp, value)
    if origin is tuple and isinstance(value, (list, tuple)):
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v) for v in value)
        if args and len(args) == len(value):
            return tuple(_convert(a, v) for a, v in zip(args, value))
        return tuple(value)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None) and value is None:
                return None
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg) and isinstance(value, dict):
                return from_dict(arg, value)
            if typing.get_origin(arg) is tuple and isinstance(value, (list, tuple)):
                return _convert(arg, value)
        return value
    return value


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build the frozen dataclass ``cls`` from a dict; missing keys take the defaults, unknown keys raise."""
    if not isinstance(data, dict):
        raise DuetError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise DuetError(f"{cls.__name__}: unknown config keys {unknown}")
    values = {k: _convert(hints[k], v) for k, v in data.items()}
    for name, f in fields.items():
        pick = f.metadata.get(CONFIG_CLASS)
        if pick is not None and not dataclasses.is_dataclass(values.get(name)):
            values[name] = from_dict(pick(data), data.get(name, {}))  # absent: that class's defaults
    return cls(**values)


def read_json(path: str | Path, cls: type[T]) -> T:
    """A JSON file written by :func:`write_json` (or by hand) as the frozen dataclass ``cls``."""
    return from_dict(cls, json.loads(Path(path).read_text()))


def write_json(path: str | Path, config: Any) -> None:
    Path(path).write_text(json.dumps(to_dict(config), indent=2) + "\n")


def pick_preset(presets: Mapping[str, Callable[[], T]], name: str, what: str) -> T:
    """``presets[name]()``, or a one-line error naming the ``what`` presets there are."""
    if name not in presets:
        raise DuetError(f"unknown {what} preset {name!r}; choose one of: {', '.join(presets)}")
    return presets[name]()
