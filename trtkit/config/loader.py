"""Strict conversion of plain YAML data into the config dataclasses.

One way to validate config: unknown keys are rejected with a suggestion, every error names the
field path (``build.max_batch_size``) and what would fix it. Cross-field rules live in rules.py.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from trtkit.errors import ConfigError


class ConfigProblems(ConfigError):
    """Several problems of one config, found in one pass, each naming its field and fix. ``partial``: the
    object built with defaults in place of the fields that failed (None when a required one is missing), so
    the cross-field rules can still run over the rest."""

    def __init__(self, problems: list[str], partial: Any = None) -> None:
        self.problems = problems
        self.partial = partial
        text = problems[0] if len(problems) == 1 else (
            f"{len(problems)} problems, each with its fix:\n" + "\n".join(f"  {p}" for p in problems))
        super().__init__(text)


def problems_of(exc: ConfigError) -> list[str]:
    return list(exc.problems) if isinstance(exc, ConfigProblems) else [str(exc)]


def bounded(default: Any, *, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None, doc: str = "") -> Any:
    """A dataclass field with numeric bounds that the loader checks."""
    return dataclasses.field(default=default, metadata={"ge": ge, "gt": gt, "le": le, "lt": lt, "doc": doc})


def described(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, doc: str = "",
              check: Any = None) -> Any:
    """A documented field; ``check(value)`` returns what is wrong with a value (and the fix), or None."""
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"doc": doc, "check": check})
    return dataclasses.field(default=default, metadata={"doc": doc, "check": check})


def derived(default: Any, *, doc: str = "") -> Any:
    """A field that resolution fills in, never the YAML: the loader refuses it as a key, to_plain leaves it out."""
    return dataclasses.field(default=default, compare=False, repr=False, metadata={"doc": doc, "derived": True})


def yaml_fields(cls: Any) -> list[dataclasses.Field]:
    """The fields a YAML file may set (all but the ``derived`` ones)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("derived")]


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _check_bounds(value: Any, meta: typing.Mapping[str, Any], path: str) -> None:
    if value is None or isinstance(value, bool):
        return
    for key, fails, word in (("ge", lambda v, b: v < b, ">="), ("gt", lambda v, b: v <= b, ">"),
                             ("le", lambda v, b: v > b, "<="), ("lt", lambda v, b: v >= b, "<")):
        bound = meta.get(key)
        if bound is not None and fails(value, bound):
            raise ConfigError(f"{path}: must be {word} {bound}, got {value}; set it to a value {word} {bound}")


def _convert(value: Any, tp: Any, path: str) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if value is None:
            if type(None) in get_args(tp):
                return None
            raise ConfigError(f"{path}: must not be empty; give a value or remove the key to use the default")
        errors = []
        for option in options:
            try:
                return _convert(value, option, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0])
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            hint = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            tip = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(f"{path}: {value!r} is not one of {', '.join(repr(a) for a in allowed)}{tip}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: must be a list, got {type(value).__name__}")
        (item_type,) = get_args(tp)
        items, problems = [], []
        for i, item in enumerate(value):
            try:
                items.append(_convert(item, item_type, f"{path}[{i}]"))
            except ConfigError as exc:
                problems += problems_of(exc)
        if problems:
            raise ConfigProblems(problems)
        return items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: must be a mapping, got {type(value).__name__}")
        key_type, item_type = get_args(tp)
        return {_convert(k, key_type, path): _convert(v, item_type, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return load_dataclass(tp, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: must be a whole number, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: must be a string, got {value!r}; quote it in the YAML")
        return value
    if tp is object:  # plain YAML data another validator checks (pytorch.llm_api_options: config/llm_api.py)
        return value
    raise ConfigError(f"{path}: unsupported type {_type_name(tp)}")


def load_dataclass(cls: Any, data: Any, path: str = "") -> Any:
    """Build ``cls`` from a mapping, rejecting unknown keys and checking types and bounds."""
    where = path or "config"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping of keys to values, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in yaml_fields(cls)}
    problems = []
    for key in data:
        if key not in fields:
            hint = _suggest(str(key), list(fields))
            tip = f"; did you mean {hint[0]!r}?" if hint else f"; known keys: {', '.join(fields)}"
            problems.append(f"{_join(path, key)}: unknown key{tip}")
    kwargs = {}
    for name, field in fields.items():
        sub = _join(path, name)
        try:
            if name in data:
                value = _convert(data[name], hints[name], sub)
                _check_bounds(value, field.metadata, sub)
                _check_value(value, field.metadata, sub)
                kwargs[name] = value
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{sub}: is required; add it to the config")
        except ConfigError as exc:
            problems += problems_of(exc)
            if isinstance(exc, ConfigProblems) and exc.partial is not None:
                kwargs[name] = exc.partial
    if problems:
        raise ConfigProblems(problems, _partial(cls, kwargs))
    return cls(**kwargs)


def _partial(cls: Any, kwargs: dict[str, Any]) -> Any:
    try:
        return cls(**kwargs)
    except TypeError:  # a required field failed: nothing to run the cross-field rules on
        return None


def _check_value(value: Any, meta: typing.Mapping[str, Any], path: str) -> None:
    """A field's own check (``described(check=...)``): a message naming the fix, or None."""
    check = meta.get("check")
    message = check(value) if check is not None and value is not None else None
    if message:
        raise ConfigError(f"{path}: {message}")


def to_plain(obj: Any) -> Any:
    """The inverse of load_dataclass: plain dicts and lists, ready for YAML or JSON."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in yaml_fields(obj)}
    if isinstance(obj, list):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def _suggest(word: str, known: list[str]) -> list[str]:
    close = difflib.get_close_matches(word, known, n=1)
    if close:
        return close
    return [k for k in known if k.startswith(word) or word.startswith(k)][:1]


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)
