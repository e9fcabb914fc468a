"""YAML files validated by pydantic, with errors that name the file, the key path and the line.

Workflow files and cluster files share this: the document is parsed twice from the same
text, once into plain Python objects (for pydantic) and once into YAML nodes (``yaml.compose``),
which remember where each key and item starts. A pydantic error location such as
``("grid", "radius")`` is walked down both trees at once to find the line of the offending
key; location parts that are not keys of the document (union tags, validator names) are
dropped from the path shown to the user.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from .errors import InputError, missing_file

__all__ = [
    "YamlDocument", "load_yaml", "validate_yaml", "Strict", "PositiveInt", "PositiveFloat",
    "FilePath", "schema_error", "is_cluster_file", "is_workflow_file", "WORKFLOW_SECTIONS",
]  # fmt: skip

#: Top-level keys only a workflow has (a misplaced ``cluster:`` does not make it a cluster file).
WORKFLOW_SECTIONS = frozenset({"model", "grid", "sources", "receivers", "outputs", "compute"})


def is_cluster_file(data: Any) -> bool:
    """A YAML file's top level is a cluster file's: a ``cluster`` key and none of a
    workflow's sections."""
    return isinstance(data, dict) and "cluster" in data and not set(data) & WORKFLOW_SECTIONS


def is_workflow_file(data: Any) -> bool:
    """A YAML file's top level is a workflow's: some of its sections and no ``cluster``."""
    return isinstance(data, dict) and "cluster" not in data and bool(set(data) & WORKFLOW_SECTIONS)


PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A path given as text (strict types take only ``Path`` objects); ``~`` is the home folder,
#: as in a shell (kept as a folder named ``~``, raygrid wrote one half of a store there and
#: zarr the other in the home folder).
FilePath = Annotated[Path, Field(strict=False), AfterValidator(Path.expanduser)]


def schema_error(kind: str, message: str) -> PydanticCustomError:
    """An error for a validator of a YAML section to raise: shown as ``message`` at the
    key's line, without the "Value error, " a ``ValueError`` would get."""
    return PydanticCustomError(kind, "{message}", {"message": message})


class Strict(BaseModel):
    """A section of a YAML file: unknown keys are errors (a typo is never ignored), the
    values are read-only once checked, and of their own type: a quoted number, a number
    for a yes/no or a float for a count is refused, not converted (``z: "50"``,
    ``fields: 1``, ``radius: 3.0``); an integer is a number. Paths are text."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


@dataclass(frozen=True)
class YamlDocument:
    """A YAML file: its path, the parsed objects and the node tree with line numbers."""

    path: Path
    data: Any
    node: yaml.Node | None

    def locate(self, location: Sequence[Any]) -> tuple[str, int | None]:
        """The user-facing key path and 1-based line of a pydantic error location.

        Parts of ``location`` that do not index the document (pydantic union tags, function
        validator names) are skipped unless they are the last part (a missing or extra key,
        which is named at the line of its parent).
        """
        data, node = self.data, self.node
        parts: list[str] = []
        line = _line(node)
        for position, part in enumerate(location):
            last = position == len(location) - 1
            # An unknown key (always last) spelled like a union tag ("dashboard-address") is
            # a key of the document: skipped as a tag, it was reported at its parent's line.
            # Elsewhere a tag is a tag, whatever stray key shares its spelling.
            if _is_tag(part) and not last:
                continue
            child = _child(data, node, part)
            if child is None and _is_tag(part):
                continue
            if child is not None:
                data, node, key_line = child
                parts.append(f"[{part}]" if isinstance(part, int) else str(part))
                line = key_line if key_line is not None else line
            elif last and isinstance(data, dict) and not _is_label(part):
                parts.append(str(part))  # a missing or misplaced key
        path = "".join(p if p.startswith("[") else f".{p}" for p in parts).lstrip(".")
        return path or "(top level)", line

    def problem(self, location: Sequence[Any], message: str) -> str:
        """One line: ``file:line: key.path: message``."""
        return self._line_of(self.locate(location), message)

    def _line_of(self, located: tuple[str, int | None], message: str) -> str:
        path, line = located
        where = f"{self.path}:{line}" if line is not None else f"{self.path}"
        return f"{where}: {path}: {message}"


# Location parts pydantic adds for unions and validators (not keys of the document).
# Union tags in raygrid's schemas all contain "-" (no key does), e.g. "points-csv".
_LABELS = {"int", "float", "str", "bool", "list", "dict", "none"}


def _is_label(part: Any) -> bool:
    return not isinstance(part, str) or part in _LABELS or _is_tag(part)


def _is_tag(part: Any) -> bool:
    return isinstance(part, str) and any(c in part for c in "[],-")


def _line(node: yaml.Node | None) -> int | None:
    return None if node is None else node.start_mark.line + 1


def _child(data: Any, node: yaml.Node | None, part: Any):
    """``(child data, child node, line of its key or item)``, or None if ``part`` is no key."""
    if isinstance(data, dict) and not isinstance(part, bool) and part in data:
        child_node, key_line = None, None
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if getattr(key_node, "value", None) == str(part):
                    child_node, key_line = value_node, _line(key_node)
        return data[part], child_node, key_line
    if isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
        child_node = None
        if isinstance(node, yaml.SequenceNode) and part < len(node.value):
            child_node = node.value[part]
        return data[part], child_node, _line(child_node)
    return None


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing a key given twice in one mapping (PyYAML keeps the last
    silently: ``radius: 3`` then ``radius: 7`` would run radius 7 without a word)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`, merged below
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the base class reports it
                break
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# Numbers as YAML 1.2 reads them, not PyYAML's YAML 1.1: an integer with a leading zero
# is decimal (1.1's octal took `x: 0300` for 192 and `shape: {z: 021}` for 17, silently,
# where a CSV file reads 300), and `1:30` is text, not 1.1's base-60 90 (a radius of 90
# nobody wrote). Written 0o17 and 0x1F, octal and hex stay. (Underscores, 1_000, stay as
# 1.1 and Python read them.)
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if not tag.endswith((":int", ":float"))]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# (A digit after 0o, 0x, 0b: `0o_` is text, not int("", 8)'s ValueError.)
_INTEGER = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*|0o_*[0-7][0-7_]*|0x_*[0-9a-fA-F][0-9a-fA-F_]*|0b_*[01][01_]*)$"
)
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INTEGER, list("-+0123456789"))
# Numbers in exponent form (1e3, 2.5e-4) read as numbers too: YAML 1.1 took them for text
# unless they had a dot and a signed exponent ("not a number").
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _integer(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """A YAML 1.2 integer (see the resolvers above): a leading zero is decimal."""
    text = loader.construct_scalar(node).replace("_", "")
    sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
    base = {"0o": 8, "0x": 16, "0b": 2}.get(digits[:2], 10)
    return sign * int(digits[2:] if base != 10 else digits, base)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _integer)


def load_yaml(path: str | Path, what: str) -> YamlDocument:
    """Read a YAML mapping from ``path``.

    Raises
    ------
    InputError
        If the file does not exist, is not text, is not valid YAML (with the line), gives
        a key twice in one mapping, or is not a mapping.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a folder, not a {what} file (a YAML file)")
    if not path.is_file():
        raise missing_file(path, f"{what} file")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (a {what} file is YAML)") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}{line}: not valid YAML: {error.problem}") from None
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a {what} file is a YAML mapping of keys to values")
    return YamlDocument(path=path, data=data, node=node)


def format_problems(document: YamlDocument, problems: Iterable[tuple[Sequence[Any], str]]) -> str:
    """The message of an :class:`InputError` listing several problems, one per line.

    Problems at the same key (the alternatives of a union) are merged into one line.
    """
    merged: dict[tuple[str, int | None], list[str]] = {}
    for loc, message in problems:
        messages = merged.setdefault(document.locate(loc), [])
        if message not in messages:
            messages.append(message)
    return "\n".join(
        f"  {document._line_of(located, '; or '.join(messages))}"
        for located, messages in merged.items()
    )


def validate_yaml(document: YamlDocument, model: Any, what: str) -> Any:
    """Validate a document against a pydantic model (or any type pydantic validates).

    Raises
    ------
    InputError
        Listing every problem as ``file:line: key.path: message``.
    """
    try:
        return TypeAdapter(model).validate_python(document.data)
    except ValidationError as error:
        errors = error.errors(include_url=False)
        where = [document.locate(e["loc"]) for e in errors]
        # A union's alternatives at one key: where the value was of a kind one of them takes
        # (radius: 0 is an integer, not too small a mapping; radius: {z: 0} a mapping), the
        # others' "should be a valid dictionary" (or integer) is noise.
        fitted = [at[0] for e, at in zip(errors, where) if not e["type"].endswith("_type")]

        def noise(error: dict, key: str) -> bool:
            return error["type"].endswith("_type") and any(
                path == key or path.startswith(f"{key}.") for path in fitted
            )

        problems = [
            (e["loc"], _message(e, model)) for e, at in zip(errors, where) if not noise(e, at[0])
        ]
        raise InputError(
            f"{document.path}: invalid {what}\n{format_problems(document, problems)}"
        ) from None


def _message(error: dict, model: Any) -> str:
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        key = error["loc"][-1] if error["loc"] else None
        guess = _did_you_mean(key, _allowed_keys(model, error["loc"][:-1]))
        if isinstance(key, str) and "-" in key:
            return f"{message} (unknown key; raygrid's keys use underscores, not hyphens{guess})"
        return f"{message} (unknown key{guess})"
    if error["type"] == "missing":
        return f"{message} (missing key)"
    if error["type"] == "path_type":
        # pydantic's "Input is not a valid path for <class 'pathlib.Path'>" (a list given).
        return f"must be one file's path, got {error.get('input')!r}"
    given = error.get("input")
    if error["type"] == "string_type" and isinstance(given, int | float) and given is not True:
        # An account or queue of digits (account: 0189) is a number to YAML, its leading
        # zeros dropped: a text field refuses it; said how to keep it as written.
        return (
            f"must be text, got the number {given!r}: put the value in quotes as written "
            "(YAML reads digits as a number, dropping leading zeros)"
        )
    if error["type"] == "model_type":
        # pydantic's "Input should be a valid dictionary or instance of FileModel": a class
        # the file's writer never sees (`model: null`, `model: [1]`).
        return f"must be a mapping of keys to values, got {error.get('input')!r}"
    return message


def _did_you_mean(key: Any, allowed: Sequence[str]) -> str:
    """``"; did you mean 'receivers'?"`` for a key near one of ``allowed``, else ``""``."""
    if not isinstance(key, str):
        return ""
    # Compared with hyphens as underscores: "plot-source" is nearest "plot_source", whatever
    # else is near its spelling.
    close = difflib.get_close_matches(key.replace("-", "_"), allowed, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _allowed_keys(model: Any, location: Sequence[Any]) -> list[str]:
    """The keys of the section at ``location`` (a pydantic error's, less the unknown key):
    the fields of the schema's models that can be there, or none if there are none.

    The location is walked down the type annotations from ``model``: a union's tag (or
    class name) picks its alternative; parts that index nothing (pydantic's labels of
    union members and validators) are skipped, with the alternatives kept.
    """
    candidates = _alternatives(model, None)
    for part in location:
        chosen = [(tag, kind) for tag, kind in candidates if part in (tag, _name(kind))]
        if chosen:
            candidates = [alt for _, kind in chosen for alt in _alternatives(kind, None)]
            continue
        inner = [alt for _, kind in candidates for alt in _inside(kind, part)]
        if inner:
            candidates = inner
    fields = [
        name
        for _, kind in candidates
        if isinstance(kind, type) and issubclass(kind, BaseModel)
        for name in kind.model_fields
    ]
    return list(dict.fromkeys(fields))


def _alternatives(annotation: Any, tag: str | None) -> list[tuple[str | None, Any]]:
    """``(tag, type)`` of each alternative of ``annotation``: ``Annotated`` unwrapped (its
    :class:`~pydantic.Tag` kept), unions and ``None`` split."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        tags = [item.tag for item in metadata if isinstance(item, Tag)]
        return _alternatives(inner, tags[0] if tags else tag)
    if origin in (Union, types.UnionType):
        return [alt for arg in get_args(annotation) for alt in _alternatives(arg, tag)]
    return [(tag, annotation)]


def _inside(kind: Any, part: Any) -> list[tuple[str | None, Any]]:
    """The alternatives of what ``kind`` holds at ``part``: a model's field, a list's item,
    a mapping's value; none if ``part`` indexes nothing of ``kind``."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        field = kind.model_fields.get(part) if isinstance(part, str) else None
        return [] if field is None else _alternatives(field.annotation, None)
    origin, args = get_origin(kind), get_args(kind)
    if origin is list and args and isinstance(part, int):
        return _alternatives(args[0], None)
    if origin is dict and len(args) == 2 and isinstance(part, str):
        return _alternatives(args[1], None)
    return []


def _name(kind: Any) -> str | None:
    return kind.__name__ if isinstance(kind, type) else None
