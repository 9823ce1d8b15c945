"""Dataclass configs overridable from the command line.

Every component has one dataclass config with a docstring per field and validation in
``__post_init__``. Recipes call :func:`parse_overrides` so that users can write::

    python -m recipes.grpo_frozenlake mode=sync trainer.lr=3e-4 total_steps=50

Nested dataclass fields are addressed with dots. Values are parsed by the field's type
(int, float, bool, str, Optional[...], list/tuple of those, dict via JSON). A config class may declare
``RENAMED`` (old key -> new key: the old one still works, with a one-line warning, for one release) and
``DERIVED`` (key -> what it is derived from: computed by the config, never set from the command line).
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import logging
import os
import sys
import types
import typing
from typing import Any, NoReturn, Sequence, TypeVar

T = TypeVar("T")
log = logging.getLogger("rollart.config")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ConfigError(ValueError):
    """A configuration value was wrong; the message names the field and what to do."""


ONE_LINE_ERRORS: list[type[BaseException]] = [ConfigError]
"""Errors whose message says all a user needs (see :func:`one_line_error`)."""


def one_line_error(cls: type[T]) -> type[T]:
    """Class decorator: ``cls`` is one of the errors :func:`exit_on_config_error` turns into one ``error: ...``
    line instead of a traceback when it ends a command-line run."""
    ONE_LINE_ERRORS.append(cls)
    return cls


def _parse_value(raw: str, tp: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:  # Optional[int] and int | None alike
        non_none = [a for a in args if a is not type(None)]
        if raw.lower() in ("none", "null") and len(non_none) < len(args):
            return None
        errors = []
        for a in non_none:
            try:
                return _parse_value(raw, a, name)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError("; ".join(errors))
    if origin is typing.Literal:
        for a in args:
            if str(a) == raw:
                return a
        raise ConfigError(f"{name}={raw!r}: expected one of {list(args)}")
    if tp is bool:
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{name}={raw!r}: expected a boolean (true/false)")
    if tp in (int, float):
        try:
            return tp(raw)
        except ValueError:
            raise ConfigError(f"{name}={raw!r}: expected {tp.__name__}") from None
    if tp is str or tp is Any:
        return raw
    if origin in (list, tuple) or tp in (list, tuple):
        items = _parse_items(raw, name)
        if (origin or tp) is tuple and args and Ellipsis not in args:  # tuple[float, float]: fixed length
            if len(items) != len(args):
                raise ConfigError(f"{name}={raw!r}: expected {len(args)} comma-separated values "
                                  f"({', '.join(getattr(a, '__name__', str(a)) for a in args)})")
            return tuple(_parse_value(str(x), a, name) for x, a in zip(items, args))
        elem = args[0] if args else str
        parsed = [_parse_value(str(x), elem, name) for x in items]
        return tuple(parsed) if (origin or tp) is tuple else parsed
    if origin is dict or tp is dict:
        value = _literal(raw)
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a JSON object, got {raw!r}; write it in single quotes, "
                              f"e.g. {name}='{{\"FrozenLake\": \"H800\", \"default\": \"H20\"}}'")
        return value
    raise ConfigError(f"{name}: cannot parse values of type {tp!r} from the command line")


def _parse_items(raw: str, name: str) -> list:
    if not raw.startswith(("[", "(")):
        return [s.strip() for s in raw.split(",") if s.strip()]
    items = _literal(raw)  # JSON, or the Python form --help prints
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"{name}: expected comma-separated values (e.g. a,b) or a JSON list, got {raw!r}")
    return list(items)


def _literal(raw: str) -> Any:
    """JSON, else a Python literal (as ``--help`` shows it: ``{'a': 'b'}``, ``('H800', 'H20')``); None if neither."""
    import ast
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def apply_overrides(cfg: T, overrides: Sequence[str]) -> T:
    """Return a copy of dataclass ``cfg`` with ``key=value`` overrides applied (dots for nesting)."""
    changes: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"bad override {item!r}: write key=value (e.g. total_steps=20), and quote a value "
                              "holding spaces or braces: proxy.hw_affinity='{\"FrozenLake\": \"H800\"}'")
        key, raw = item.split("=", 1)
        changes[_setting_key(key)] = raw
    return _apply(cfg, _checked_keys(type(cfg), changes), prefix="", parse=True)


def _setting_key(key: str) -> str:
    """``--trainer.kl-coef`` -> ``trainer.kl_coef``: how a command line's key names a setting."""
    return key.lstrip("-").replace("-", "_")


def apply_values(cfg: T, values: dict[str, Any]) -> T:
    """Like :func:`apply_overrides` with typed values: ``apply_values(cfg, {"rollout.group_size": 4})``."""
    return _apply(cfg, _checked_keys(type(cfg), dict(values)), prefix="", parse=False)


def _checked_keys(cls: type, changes: dict[str, Any]) -> dict[str, Any]:
    """Renamed keys moved to their new place (warning once each); derived keys refused."""
    renamed: dict[str, str] = getattr(cls, "RENAMED", {})
    derived: dict[str, str] = getattr(cls, "DERIVED", {})
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if key in renamed:
            log.warning("%s is renamed %s; the old name goes in the next release", key, renamed[key])
            key = renamed[key]
        if key in derived:
            raise ConfigError(f"{key} is derived from {derived[key]}; set that instead")
        out[key] = value
    return out


def _apply(cfg: T, changes: dict[str, Any], prefix: str, parse: bool) -> T:
    types = _field_types(type(cfg))
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, raw in changes.items():
        head, _, rest = key.partition(".")
        if head not in types:
            close = difflib.get_close_matches(head, list(types), n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(prefix + c for c in close)}?" if close else \
                "--help lists every setting"
            raise ConfigError(f"unknown setting {prefix + head!r} for {type(cfg).__name__}; {hint}")
        shorthand = getattr(types[head], "SHORTHAND", "") if dataclasses.is_dataclass(types[head]) else ""
        if rest or shorthand:  # data=PATH sets data.path where DatasetConfig.SHORTHAND = "path"
            nested.setdefault(head, {})[rest or shorthand] = raw
        else:
            direct[head] = _parse_value(raw, types[head], prefix + head) if parse else raw
    for head, sub in nested.items():
        inner = getattr(cfg, head)
        if not dataclasses.is_dataclass(inner):
            raise ConfigError(f"{prefix + head} is not a nested config; write {prefix + head}=VALUE")
        direct[head] = _apply(inner, sub, prefix + head + ".", parse)
    try:
        return dataclasses.replace(cfg, **direct)  # runs the dataclass's __post_init__ validation
    except (ValueError, TypeError) as e:  # the same one-line error, naming the field by its full key
        raise ConfigError(f"{prefix}{e}" if prefix and not str(e).startswith(prefix) else str(e)) from None


def parse_overrides(cfg: T, argv: Sequence[str] | None = None, doc: str | None = None) -> T:
    """Apply ``sys.argv[1:]`` (or ``argv``) overrides to ``cfg``; ``--help`` prints ``doc`` (e.g. the recipe's
    docstring: what it does, how to run it, what to watch) and then every field."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        if doc:
            print(doc.strip() + "\n\nSettings (key=value):")
        print(describe(cfg))
        renamed = getattr(type(cfg), "RENAMED", {})
        if renamed:
            print("\nRenamed (the old key still works, with a warning, until the next release): "
                  + ", ".join(f"{old} -> {new}" for old, new in renamed.items()))
        raise SystemExit(0)
    with exit_on_config_error():
        return apply_overrides(cfg, _flags_to_overrides(argv))


def given_keys(argv: Sequence[str] | None = None) -> set[str]:
    """The settings ``sys.argv[1:]`` (or ``argv``) names, as :func:`parse_overrides` reads them: for a recipe
    default that depends on what the user set."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return {_setting_key(item.split("=", 1)[0]) for item in _flags_to_overrides(argv)}


def _flags_to_overrides(argv: list[str]) -> list[str]:
    """``--resume`` -> ``resume=true``; argparse habits ``--mode sync`` -> ``mode=sync``; the rest unchanged."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and "=" not in arg:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and "=" not in nxt and not nxt.startswith("--"):
                out.append(f"{arg}={nxt}")
                i += 2
                continue
            out.append(f"{arg}=true")  # a bare flag is a boolean switched on
        else:
            out.append(arg)
        i += 1
    return out


def exit_with_error(message: str) -> NoReturn:
    """End a command-line run with one line, ``error: <message>``, on stderr and exit status 1.

    It raises ``SystemExit`` (so a caller or a test can still catch it). Called while an exception is being
    handled with ``ROLLART_TRACEBACK=1`` set, it re-raises that exception instead, traceback and all.
    """
    handled = sys.exc_info()[1]
    if handled is not None and os.environ.get("ROLLART_TRACEBACK"):
        raise handled
    raise SystemExit(f"error: {message}") from None


@contextlib.contextmanager
def exit_on_config_error(*also: type[BaseException]):
    """The one way a command-line entry point (a recipe's ``main``, a ``python -m rollart...`` main, a tool)
    ends with a one-line error: a ConfigError, another of ONE_LINE_ERRORS or one of ``also`` raised inside
    becomes :func:`exit_with_error`; any other exception (a bug) stays a traceback.

    Use it as ``with exit_on_config_error(): ...`` or as a decorator, ``@exit_on_config_error()`` on ``main``.
    Nothing is installed process-wide: importing rollart leaves ``sys.excepthook`` alone, so a plain script
    wraps its run in this to get the same one-line errors.
    """
    try:
        yield
    except (*ONE_LINE_ERRORS, *also) as e:
        exit_with_error(str(e))


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def describe(cfg: Any, prefix: str = "", derived: dict[str, str] | None = None) -> str:
    """A readable listing of every field, its value, and the docstring under it in the source (derived
    fields say what they are derived from)."""
    derived = getattr(type(cfg), "DERIVED", {}) if derived is None else derived
    lines = []
    docs = field_docs(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = prefix + f.name
        if dataclasses.is_dataclass(value):
            lines.append(describe(value, key + ".", derived))
        else:
            doc = f"derived from {derived[key]}" if key in derived else docs.get(f.name, "")
            lines.append(f"  {key} = {value!r}" + (f"    # {doc}" if doc else ""))
    return "\n".join(lines)


def field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under dataclass fields (the CleanRL ``Args`` convention), inherited ones included."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a recipe's config subclass keeps the docs of PipelineConfig's fields
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for stmt, nxt in zip(body, body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs
