"""Typed dataclass configs: load from YAML/JSON, dotted ``key=value`` overrides, type checks.

Every model and recipe has a ``@dataclass`` config whose fields carry a comment. This module
turns plain dicts into those dataclasses and back, and checks every value against the field's
annotation, so ``train.lr=abc`` fails with a message that names the key, the value and the type.

Example: ``apply_overrides(cfg, ["train.lr=3e-4", "model.preset=bert-mini"])``.

An override's text is read as its field's declared type, not by YAML's guess: a ``str`` field
keeps the literal text (``run_dir=010`` stays ``"010"``, not YAML's octal 8; ``1.10`` and
``1:30`` stay as typed), an ``int`` field takes plain integers and exactly integral numbers
(``steps=1e3``), a ``bool`` field true/false/1/0/yes/no, and only lists, mappings, sections and
``Any`` go through YAML. Float fields reject nan and ±inf (from files too) unless the field
opts in with ``field(..., metadata=ALLOW_NONFINITE)``. In a config file, too, a ``str`` setting
(or an item of a ``list[str]``) written as a number keeps the text it was written as
(``run_dir: 010`` is ``"010"``, ``labels: [1.10]`` is ``["1.10"]``), in YAML and in JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import decimal
import glob
import hashlib
import json
import logging
import math
import os
import re
import shutil
import socket
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from muppets.errors import ConfigError, DataError

logger = logging.getLogger(__name__)

T = TypeVar("T")

ALLOW_NONFINITE = types.MappingProxyType({"allow_nonfinite": True})
"""Field metadata for a float setting where nan / ±inf mean something: ``field(default=math.inf,
metadata=ALLOW_NONFINITE)``. Every other float field rejects them."""

_NULL_WORDS = ("null", "Null", "NULL", "~", "None")  # an override's text meaning None (optional fields)
_BOOL_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_MAX_INT_EXPONENT = 30  # `steps=1e30` is accepted; a larger exponent is a typo, not an integer to build


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _finite(field: dataclasses.Field) -> bool:
    """Whether a float field must be finite (the default) or opted in to nan / ±inf."""
    return not field.metadata.get("allow_nonfinite", False)


def _check_value(value: Any, annotation: Any, key: str, finite: bool = True) -> Any:
    """Return ``value`` converted to ``annotation`` or raise :class:`ConfigError` naming ``key``."""
    if annotation is str and isinstance(value, _Written):  # a number in a file, as it was written
        return value.text
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _check_union(value, typing.get_args(annotation), key, finite)
    if origin not in (list, tuple) and not dataclasses.is_dataclass(annotation):  # (their items are checked)
        value = _plain(value)
    if annotation is Any:
        return value
    if origin is typing.Literal:
        if value not in typing.get_args(annotation):
            raise ConfigError(f"{key}: {value!r} is not one of {list(typing.get_args(annotation))}", key=key)
        return value
    if origin in (list, tuple, dict):
        return _check_container(value, origin, typing.get_args(annotation), key, finite)
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping for {annotation.__name__}, got {value!r}", key=key)
        return from_dict(annotation, value, prefix=f"{key}.")
    if annotation is float:
        return _to_float(value, key, finite)
    if annotation in _SCALARS:
        return _SCALARS[annotation](value, key)
    if isinstance(annotation, type) and not isinstance(value, annotation):
        raise ConfigError(f"{key}: expected {annotation.__name__}, got {value!r}", key=key)
    return value


def _check_union(value: Any, args: tuple, key: str, finite: bool) -> Any:
    if value is None and type(None) in args:
        return None
    return _first_member(args, lambda arg: _check_value(value, arg, key, finite), key, f"{key}: {value!r}")


def _first_member(args: tuple, convert: typing.Callable[[Any], Any], key: str, what: str) -> Any:
    """``convert(member)`` for the first member type of a union (declared order, None aside) that
    takes the value; else a :class:`ConfigError` that starts with ``what`` (the key and value)."""
    for arg in args:
        if arg is not type(None):
            try:
                return convert(arg)
            except ConfigError:
                pass
    raise ConfigError(f"{what} matches none of {' | '.join(getattr(a, '__name__', str(a)) for a in args)}", key=key)


def _check_container(value: Any, origin: type, args: tuple, key: str, finite: bool) -> Any:
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}", key=key)
        return dict(value)
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list, got {value!r}", key=key)
    inner = args[0] if args else Any
    return [_check_value(v, inner, f"{key}[{i}]", finite) for i, v in enumerate(value)]


def _to_float(value: Any, key: str, finite: bool = True) -> float:
    number = value
    if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
        try:
            number = float(value)
        except ValueError:
            pass
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise ConfigError(f"{key}: expected a number, got {value!r}", key=key)
    if finite and not math.isfinite(number):  # nan / inf (or an overflow such as 1e400)
        raise ConfigError(f"{key}: expected a finite number, got {value!r}", key=key)
    return float(number)


def _to_int(value: Any, key: str) -> int:
    if isinstance(value, str):  # an override's text, or YAML 1.1's string for 1e3 (no dot)
        return _int_from_text(value, key)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer, got {value!r}", key=key)
    return value


def _int_from_text(text: str, key: str) -> int:
    """A plain decimal integer (``010`` is ten), or a number that is exactly integral (``1e3``)."""
    try:
        return int(text, 10)
    except ValueError:
        pass
    try:
        number = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        number = None
    if number is None or not number.is_finite() or number.adjusted() > _MAX_INT_EXPONENT \
            or number != number.to_integral_value():
        raise ConfigError(f"{key}: expected an integer, got {text!r}", key=key)
    return int(number)


def _to_bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true/false, got {value!r}", key=key)
    return value


def _to_str(value: Any, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{key}: expected a string, got {value!r}", key=key)
    return str(value)


_SCALARS = {int: _to_int, bool: _to_bool, str: _to_str}  # float: _to_float, which also takes `finite`


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys are an error that lists the valid ones."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {data!r}", key=prefix.rstrip(".") or None)
    hints = _field_types(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(
            f"unknown key {prefix}{unknown[0]!s}; valid keys of {cls.__name__}: {', '.join(names)}",
            key=f"{prefix}{unknown[0]!s}",
        )
    finite = {f.name: _finite(f) for f in dataclasses.fields(cls)}
    kwargs = {k: _check_value(v, hints[k], prefix + k, finite[k]) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{prefix or cls.__name__}: {err}", key=prefix.rstrip(".") or None) from err
    except ConfigError as err:  # a check in __post_init__: its key is relative to this section
        if not prefix:
            raise
        text = str(err)
        full = prefix + err.key if err.key else prefix.rstrip(".")
        raise ConfigError(prefix + text if err.key and text.startswith(err.key) else text, key=full) from err


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain-dict view of a (nested) config dataclass, JSON/YAML-serialisable."""
    return dataclasses.asdict(cfg)


def _parse_scalar(text: str) -> Any:
    if not text.strip():  # `tokenizer.path=` (or `=""` in a shell) means "", not YAML's null
        return ""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _from_text(text: str, annotation: Any, key: str, finite: bool) -> Any:
    """An override's text as the field's declared type; only containers, sections and ``Any`` use YAML."""
    origin = typing.get_origin(annotation)
    if annotation is str:
        return text
    if annotation is int:
        return _int_from_text(text, key)
    if annotation is float:
        return _to_float(text, key, finite)
    if annotation is bool:
        if text.strip().lower() not in _BOOL_WORDS:
            raise ConfigError(f"{key}: expected true/false, got {text!r}", key=key)
        return _BOOL_WORDS[text.strip().lower()]
    if origin in (typing.Union, types.UnionType):
        return _union_from_text(text, typing.get_args(annotation), key, finite)
    if origin is typing.Literal:
        for choice in typing.get_args(annotation):
            if str(choice) == text.strip():
                return choice
        raise ConfigError(f"{key}: {text!r} is not one of {list(typing.get_args(annotation))}", key=key)
    return _parse_scalar(text)


def _union_from_text(text: str, args: tuple, key: str, finite: bool) -> Any:
    """The first member type (in declared order) that reads ``text``; a null word (or, without a
    ``str`` member, empty text) is None when None is allowed."""
    if type(None) in args and (text.strip() in _NULL_WORDS or (not text.strip() and str not in args)):
        return None
    return _first_member(args, lambda arg: _from_text(text, arg, key, finite), key, f"{key}: {text!r}")


def apply_overrides(cfg: T, overrides: list[str]) -> T:
    """Return a copy of ``cfg`` with ``a.b.c=value`` overrides applied, each read as its field's
    type; ``tasks[1].weight=2`` reaches into a list of sections (e.g. a multi-task run's tasks)."""
    data = to_dict(cfg)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        node, cls = data, type(cfg)
        parts = key.strip().split(".")
        for depth, written in enumerate(parts):
            part, index = _indexed(written)
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                where = ".".join(parts[:depth]) or cls.__name__
                raise ConfigError(f"unknown key {key!r}: {part!r} is not in {where}; valid keys: {', '.join(names)}")
            if depth == len(parts) - 1 and index is None:
                field = next(f for f in dataclasses.fields(cls) if f.name == part)
                node[part] = _from_text(raw, _field_types(cls)[part], key.strip(), _finite(field))
                continue
            sub = _field_types(cls)[part]
            if index is not None:
                item_type = typing.get_args(sub)[0] if typing.get_origin(sub) is list else None
                if item_type is None or not dataclasses.is_dataclass(item_type):
                    raise ConfigError(f"{key!r}: {part!r} is not a list of sections", key=key.strip())
                if index >= len(node[part]):
                    raise ConfigError(f"{key!r}: {part} has {len(node[part])} items (counted from 0)", key=key.strip())
                if depth == len(parts) - 1:
                    raise ConfigError(f"{key!r}: name a setting of {written}, e.g. {written}.{dataclasses.fields(item_type)[0].name}",
                                      key=key.strip())
                node, cls = node[part][index], item_type
            elif not dataclasses.is_dataclass(sub):
                raise ConfigError(f"{key!r}: {part!r} is a value, not a section")
            else:
                node, cls = node[part], sub
    return from_dict(type(cfg), data)


def _indexed(part: str) -> tuple[str, int | None]:
    """``"tasks[2]"`` -> ``("tasks", 2)``; ``"lr"`` -> ``("lr", None)``."""
    found = re.fullmatch(r"(.+)\[(\d+)\]", part)
    return (found.group(1), int(found.group(2))) if found else (part, None)


def override_keys(overrides: Sequence[str]) -> set[str]:
    """The dotted keys that ``key=value`` overrides set (``{"train.steps", …}``)."""
    return {item.split("=", 1)[0].strip() for item in overrides if "=" in item}


def load_typed(cls: type[T], path: str | Path | None, overrides: Sequence[str]) -> T:
    """Config ``cls`` from a YAML/JSON file (optional, None = the defaults) and dotted
    ``key=value`` overrides, type-checked. An error names the file, or the overrides when the
    file alone was valid, so the user knows where the bad value came from."""
    try:
        cfg = from_dict(cls, load_file(path)) if path else cls()
    except ConfigError as err:
        if path is None or str(err).startswith(str(path)):
            raise
        raise in_file(path, err) from err
    return with_overrides(cfg, overrides)


def in_file(path: str | Path, err: ConfigError) -> ConfigError:
    """``err`` as an error of the config file ``path``: prefixed with the file and the line that
    writes ``err.key`` (for a check made after loading, on a setting only the file can set)."""
    line = _key_line(path, err.key)
    return ConfigError(f"{path}{'' if line is None else f':{line}'}: {err}", key=err.key)


def with_overrides(cfg: T, overrides: Sequence[str]) -> T:
    """:func:`apply_overrides` for a command line: an error says it came from the overrides
    (and lists them), so it is not looked for in a config file."""
    try:
        return apply_overrides(cfg, list(overrides))
    except ConfigError as err:
        raise ConfigError(f"{err} (with the overrides {' '.join(overrides)})", key=err.key) from err


def _key_line(path: str | Path, key: str | None) -> int | None:
    """The 1-based line of ``path`` (YAML or JSON) where the setting ``key`` (``train.lr``,
    ``tasks[2].weight``) is written, or of the deepest section of it that is; None if the file
    does not write it (a default at fault) or cannot be read again."""
    if not key:
        return None
    try:
        text = read_utf8(path)
        node = yaml.compose(_json_as_yaml(text) if Path(path).suffix == ".json" else text)
    except (DataError, yaml.YAMLError, RecursionError):
        return None
    line = None
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        if isinstance(node, yaml.MappingNode):
            found = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part]
            if not found:
                break
            key_node, node = found[-1]  # YAML keeps the last of a repeated key
            line = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and part.startswith("["):
            index = int(part[1:-1])
            if index >= len(node.value):
                break
            node = node.value[index]
            line = node.start_mark.line + 1
        else:
            break
    return line


class _Written:
    """A number read from a config file that keeps the text it was written as (``010``, ``1.10``,
    ``12:30``): a ``str`` setting takes that text, not the number YAML (or JSON) made of it."""

    text: str


class _WrittenInt(int, _Written):
    pass


class _WrittenFloat(float, _Written):
    pass


def _written(kind: type, value: Any, text: str) -> Any:
    out = kind(value)
    out.text = text
    return out


def _plain(value: Any) -> Any:
    """``value`` with every :class:`_Written` number in it (keys and items too) a plain one."""
    if isinstance(value, _Written):
        return (int if isinstance(value, int) else float)(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key written twice in one mapping is an error: YAML keeps
    the last silently, so a second ``train:`` section would drop every setting of the first.
    Checked as the file is parsed, before merge keys (``<<: *base``) are applied, which may
    override what they merge as YAML intends."""

    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:
        node = super().compose_mapping_node(anchor)
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.value in seen:
                raise yaml.composer.ComposerError(
                    None, None, f"the key {key_node.value!r} is written twice (first on line {seen[key_node.value]})",
                    key_node.start_mark)
            seen[key_node.value] = key_node.start_mark.line + 1
        return node


class _TextKeepingLoader(_UniqueKeyLoader):
    """The config files' loader: numbers keep their text (:class:`_Written`), so ``run_dir: 010``
    is the directory ``010``, not YAML 1.1's octal 8."""


def _keep_text(kind: type, construct: Callable[[yaml.SafeLoader, yaml.Node], Any]) -> Callable:
    def constructor(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
        return _written(kind, construct(loader, node), node.value)
    return constructor


_TextKeepingLoader.add_constructor("tag:yaml.org,2002:int", _keep_text(_WrittenInt, yaml.SafeLoader.construct_yaml_int))
_TextKeepingLoader.add_constructor("tag:yaml.org,2002:float",
                                   _keep_text(_WrittenFloat, yaml.SafeLoader.construct_yaml_float))


def _json_as_yaml(text: str) -> str:
    """JSON text that YAML's parser reads with the same lines: JSON's tabs between tokens become
    spaces (YAML refuses tabs as indentation; a JSON string cannot hold a raw tab)."""
    return text.replace("\t", " ")


class _RepeatedJsonKey(ValueError):
    """A key written twice in one JSON object."""


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict:
    """``json``'s object hook: a key written twice in one object is an error, as in YAML."""
    data = dict(pairs)
    if len(data) < len(pairs):
        repeated = next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i]))
        raise _RepeatedJsonKey(f"the key {repeated!r} is written twice in one object")
    return data


def _load_json_config(text: str, path: Path) -> Any:
    """``text`` of the JSON config ``path``, refusing a repeated key; an error names the line
    (``json`` does not know where a repeated key is, so YAML's parser finds it)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_json_object,
                          parse_int=lambda t: _written(_WrittenInt, int(t), t),
                          parse_float=lambda t: _written(_WrittenFloat, float(t), t))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}:{err.lineno}: not valid JSON: {err.msg} (column {err.colno})") from None
    except _RepeatedJsonKey as err:
        try:
            yaml.compose(_json_as_yaml(text), Loader=_UniqueKeyLoader)
        except yaml.composer.ComposerError as located:
            raise ConfigError(f"{path}:{located.problem_mark.line + 1}: not valid JSON: {located.problem}") from None
        except (yaml.YAMLError, RecursionError):  # YAML nests less deep than json
            pass
        raise ConfigError(f"{path}: not valid JSON: {err}") from None
    except (RecursionError, ValueError) as err:  # nesting deeper than the recursion limit; a huge integer
        raise ConfigError(f"{path}: not valid JSON: {str(err).split(';')[0]}") from None


def load_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON config file into a dict, naming the file on any error (a key written
    twice in one mapping, undecodable bytes and an empty file included)."""
    path = Path(path)
    try:
        text = read_utf8(path, "config file")
    except DataError as err:
        raise ConfigError(f"{err}; save the config as UTF-8" if err.line else str(err)) from None
    try:
        data = (_load_json_config(text, path) if path.suffix == ".json"
                else yaml.load(text, Loader=_TextKeepingLoader))
    except yaml.MarkedYAMLError as err:  # one line: where, and what (YAML's own text spans four)
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        what = "; ".join(str(x) for x in (err.context, err.problem) if x)
        raise ConfigError(f"{where}: not valid YAML: {what}") from None
    except (yaml.YAMLError, ValueError) as err:  # ValueError: a date like 2001-13-45, a huge integer
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML: nested deeper than Python's recursion limit") from None
    if data is None:
        raise ConfigError(f"{path}: the config file is empty (comments at most); write its settings, or leave the "
                          "file out to use the defaults")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def read_utf8(path: str | Path, what: str = "file") -> str:
    """The UTF-8 text of ``path``, without the byte-order mark some Windows editors write first;
    a :class:`DataError` naming the file (and the byte offset of an undecodable byte) if it
    cannot be read. ``what`` names the file in the message."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DataError(f"cannot read {what} ({err.strerror})", path=path) from err
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise DataError(f"{what} is not valid UTF-8", path=path, line=raw[:err.start].count(b"\n") + 1,
                        position=err.start, value=raw[err.start:err.start + 1]) from None


def parse_json(text: str, path: str | Path | None = None, line: int | None = None) -> Any:
    """``json.loads(text)``, with every way ``text`` can fail a :class:`DataError` naming
    ``path``, the line (``line``: where ``text`` starts, for one record of a JSON-lines file)
    and the text around the error.

    Besides bad syntax, ``json`` fails on nesting deeper than Python's recursion limit
    (``[[[…``: RecursionError) and on an integer of more than 4,300 digits (ValueError).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        hint = " (truncated?)" if not text[err.pos:].strip() else ""
        raise DataError(f"invalid JSON{hint}: {err.msg} at column {err.colno}", path=path,
                        line=(line or 1) + err.lineno - 1,
                        value=text[max(0, err.pos - 20): err.pos + 20]) from None
    except RecursionError:
        raise DataError("invalid JSON: nested deeper than Python's recursion limit", path=path,
                        line=line) from None
    except ValueError as err:  # the only other one: an integer too long to convert
        raise DataError(f"invalid JSON: {str(err).split(';')[0]}", path=path, line=line) from None


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; when the block ends normally it gets the usual
    permissions (mkstemp makes it 0600) and is renamed onto ``path``, so a crash never leaves
    half a file; on an error it is deleted. Its name carries this host and ends in the writer's
    pid (``.a.txt.<8 random>.h<host>.<pid>.tmp``), so what a killed write on this host left is
    removed by the next write of the same file (:func:`remove_stale`); another host's writer,
    whose pid this host cannot see, is left alone.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "a.txt"
    >>> with atomic_path(out) as tmp:
    ...     _ = tmp.write_text("done")
    >>> out.read_text()
    'done'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent, f".{glob.escape(path.name)}.{'[a-z0-9_]' * 8}.h{_HOST_TAG}.*.tmp")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".{writer_tag()}.tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the error that ended the block is the one to see
            Path(tmp).unlink(missing_ok=True)
        raise


# this host, in temporary names: a pid means something on its own host only
_HOST_TAG = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]
_ANY_WRITER = "h" + "[0-9a-f]" * 6 + ".*"  # glob of writer_tag()


def writer_tag() -> str:
    """``h<host>.<pid>``, the end of every temporary's name: :func:`remove_stale` deletes one
    only when it was written on this host by a process that is gone."""
    return f"h{_HOST_TAG}.{os.getpid()}"


def begin_dir(path: str | Path) -> Path:
    """A new, empty temporary directory beside ``path`` (``.tmp-<name>-<writer_tag>``) to fill
    and then :func:`replace_dir` onto ``path``. What killed writes of ``path`` on this host left
    is removed first: their half-written temporaries, and a copy moved aside by
    :func:`replace_dir` unless ``path`` is missing (then that copy is the only one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for kind in ("tmp", "old"):
        prefix = f".{kind}-{path.name}"  # exactly: `.old-model-h…` must not take `model-habcdef.v2`'s
        remove_stale(path.parent, f"{glob.escape(prefix)}-{_ANY_WRITER}",
                     keep=lambda p: p.name.rpartition("-")[0] != prefix or (kind == "old" and not _exists(path)))
    tmp = path.with_name(f".tmp-{path.name}-{writer_tag()}")
    _delete(tmp)  # this process's own, from a write that raised
    tmp.mkdir()
    return tmp


def replace_dir(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; an existing ``final`` is moved aside first
    (``.old-<name>-<writer_tag>``), then deleted, so ``final`` is always whole. If the second
    rename fails, ``final`` is put back. A symbolic link at ``final`` is replaced, its target
    left as it is."""
    old = final.with_name(f".old-{final.name}-{writer_tag()}")
    moved = _exists(final)
    if moved:
        os.rename(final, old)
    try:
        os.rename(tmp, final)
    except BaseException:
        if moved:
            os.rename(old, final)
        raise
    _delete(old)


_TMP_DIR = re.compile(r"\.tmp-(.+)-h[0-9a-f]{6}\.\d+")  # begin_dir's names
_TMP_FILE = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.h[0-9a-f]{6}\.\d+\.tmp")  # atomic_path's


def final_path(path: str | Path) -> Path:
    """The path something written into an atomic temporary will have once renamed: what a log
    line names (the temporary's ``.tmp-best-h5f3a2c.4242`` is gone when anyone reads it).

    >>> final_path("runs/x/.tmp-best-h5f3a2c.4242/vocab.txt").as_posix()
    'runs/x/best/vocab.txt'
    >>> final_path("runs/.log.jsonl.k2j4h5g6.h5f3a2c.42.tmp").as_posix()
    'runs/log.jsonl'
    """
    path = Path(path)
    parts = [m.group(1) if (m := _TMP_DIR.fullmatch(p) or _TMP_FILE.fullmatch(p)) else p for p in path.parts]
    return Path(*parts) if parts else path


def _exists(path: Path) -> bool:
    """Whether anything is at ``path``: a symbolic link counts, even a broken one."""
    return os.path.lexists(path)


def _delete(path: Path) -> bool:
    """Delete the file, link or directory tree at ``path``; whether nothing is there now."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    return not _exists(path)


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """:func:`atomic_path` for a directory: fill the temporary it yields (:func:`begin_dir`);
    when the block ends normally it replaces ``path`` (:func:`replace_dir`), on an error it is
    deleted and ``path`` is as it was.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "model"
    >>> with atomic_dir(out) as tmp:
    ...     _ = (tmp / "config.json").write_text("{}")
    >>> sorted(p.name for p in out.parent.iterdir())
    ['model']
    """
    path = Path(path)
    tmp = begin_dir(path)
    try:
        yield tmp
        replace_dir(tmp, path)
    except BaseException:
        _delete(tmp)
        raise


def remove_stale(parent: Path, pattern: str, keep: Callable[[Path], bool] | None = None) -> list[Path]:
    """Delete what matches ``pattern`` in ``parent`` and was left by a write whose process is
    gone (killed before it could clean up): temporaries whose name ends in :func:`writer_tag`
    (``.tmp-step-00000062-h5f3a2c.4242``, :func:`atomic_path`'s
    ``.latest.x1y2z3w4.h5f3a2c.4242.tmp``). One from another host is left alone (its pid means
    nothing here), and so is any name that does not end so. ``keep(path)`` spares one, e.g. a copy
    moved aside that is the only one left. Returns what it removed."""
    removed = []
    for stale in Path(parent).glob(pattern) if Path(parent).is_dir() else []:
        match = re.search(r"[-.]h([0-9a-f]{6})\.(\d+)(\.tmp)?$", stale.name)
        if match is None or match.group(1) != _HOST_TAG:
            continue
        pid = int(match.group(2))
        if pid == os.getpid() or _alive(pid):
            continue
        if keep is not None and keep(stale):
            continue
        if not _delete(stale):
            logger.warning("could not remove %s, left by a write on this host whose process is gone", stale)
            continue
        logger.info("removed %s, left by a write on this host whose process is gone", stale)
        removed.append(stale)
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except (OverflowError, ValueError):  # not a pid: digits of something else's name; left alone
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON via a temporary file + rename (:func:`atomic_path`)."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=False)
        fh.write("\n")


def save_npy_atomic(path: str | Path, array: Any) -> None:
    """Write ``array`` as ``.npy`` (never pickled) via :func:`atomic_path`; through a file object,
    so ``np.save`` adds no ``.npy`` to the temporary's name."""
    import numpy as np  # here, not at the top: `muppets --help` imports this module

    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        np.save(fh, array, allow_pickle=False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
