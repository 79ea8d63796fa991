"""Typed, frozen, validated config sections that are JAX pytrees: the machinery under
:mod:`repr_jax.config`.

A section is a frozen dataclass made by :func:`config`. Fields declared with :func:`hyper` are
numeric hyperparameters the jitted step reads: pytree *leaves* (a stack of configs can be
vmapped). Every other field (:func:`static`) is pytree metadata. Values are coerced and checked on
construction, with one-line :class:`ConfigError` messages that name the full key.

A section can be *chosen by name*, as a method's, a dataset's or an encoder family's is: its base
class names a hook, ``_variants = "module:function"``, that maps a name to the section class
declared beside what reads it (``function(None)`` lists them all); ``Base(name=...)``, a dict
read by :func:`from_dict` and ``--set base.name=...`` give the named class, and switching keeps the
fields the two share. A section can also *gather sections from a registry*: ``_sections =
"module:function"`` returns ``{field: section class}`` (each evaluator's options, declared in
its file), added as fields of the base the first time it is built. Both hooks are imported on
first use only, so this module imports nothing of the package.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib
import math
import types
import typing
from typing import Any, Callable, Iterable, Sequence

import jax

class ConfigError(ValueError):
    """A config problem the user can fix; its message is one line."""


# --------------------------------------------------------------------------------------------------
# Field declarations
# --------------------------------------------------------------------------------------------------

_CHECKS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    ">0": (lambda v, _: v > 0, "must be > 0"),
    ">=0": (lambda v, _: v >= 0, "must be >= 0"),
    "[0,1)": (lambda v, _: 0 <= v < 1, "must be in [0, 1)"),
    "[0,1]": (lambda v, _: 0 <= v <= 1, "must be in [0, 1]"),
    "(0,1]": (lambda v, _: 0 < v <= 1, "must be in (0, 1]"),
    # A preset's overrides: unset (-1, ()) or a value in the op's own domain.
    "p|unset": (lambda v, _: v == -1 or 0 <= v <= 1,
                "must be a probability in [0, 1] (or -1: the preset's)"),
    "count|unset": (lambda v, _: v >= -1, "must be >= 0 (or -1: the preset's)"),
    "fraction range|unset": (lambda v, _: v == () or (len(v) == 2 and 0 < v[0] <= v[1] <= 1),
                             "must be (lo, hi) with 0 < lo <= hi <= 1 (or (): the preset's)"),
    "range|unset": (lambda v, _: v == () or (len(v) == 2 and 0 < v[0] <= v[1]),
                    "must be (lo, hi) with 0 < lo <= hi (or (): the preset's)"),
    "jitter|unset": (lambda v, _: v == () or (len(v) == 4 and min(v) >= 0 and v[3] <= 0.5),
                     "must be 4 numbers >= 0, (brightness, contrast, saturation, hue <= 0.5) "
                     "(or (): the preset's)"),
    "positive counts": (lambda v, _: len(v) > 0 and min(v) > 0,
                        "must be one or more counts > 0"),
}


def hyper(default: float, check: str | None = None, doc: str = "") -> Any:
    """A numeric hyperparameter read by the jitted step: a pytree leaf (vmappable)."""
    return dataclasses.field(default=default, metadata={"hyper": True, "check": check, "doc": doc})


def static(default: Any, check: str | Sequence[Any] | None = None, doc: str = "") -> Any:
    """A structural field: pytree metadata. ``check`` is a rule name or a tuple of allowed values."""
    return dataclasses.field(default=default, metadata={"hyper": False, "check": check, "doc": doc})


def _section(cls: type) -> Any:
    return dataclasses.field(default_factory=cls, metadata={"hyper": True, "check": None, "doc": ""})


def _is_config(x: Any) -> bool:
    """True for config classes and their instances (the decorator sets the class attribute)."""
    return getattr(x, "_is_repr_jax_config", False) is True


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_INT_MAX = 2 ** 31 - 1
_F32_TINY, _F32_MAX = 1.1754944e-38, 3.4028235e38  # float32's smallest normal and largest


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Returns ``value`` converted to annotation ``tp`` or raises ConfigError naming ``key``."""
    origin = typing.get_origin(tp)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        if not math.isfinite(value):  # 1e999 parses as inf
            raise ConfigError(f"{key} must be a finite number, got {value!r}")
        if value and not _F32_TINY <= abs(value) <= _F32_MAX:  # inf or 0 on device
            raise ConfigError(f"{key}={value!r} does not fit float32, which the step computes "
                              f"in: use a magnitude between {_F32_TINY:.1e} and {_F32_MAX:.1e}")
        return float(value)
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        if abs(value) > _INT_MAX:  # steps, seeds and sizes become int32 on device
            raise ConfigError(f"{key} must be at most {_INT_MAX:,} (2^31 - 1), got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be True or False, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            value = (value,)  # `--set encoder.widths=64` means a one-element tuple
        if not isinstance(value, (tuple, list)):
            raise ConfigError(f"{key} must be a tuple, got {value!r}")
        elem = args[0] if args else Any
        if elem is Any:
            return tuple(value)
        return tuple(_coerce(v, elem, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                pass
        raise ConfigError(f"{key} must be one of {typing.get_args(tp)}, got {value!r}")
    return value


def _hook(where: str) -> Callable:
    module, _, function = where.partition(":")
    return getattr(importlib.import_module(module), function)


def _variant_class(cls: type, name: Any) -> type:
    """The section class that ``name`` selects for a section base with variants (``cls`` itself
    otherwise): the base names a function ``"module:function"`` that maps a name to its class
    (e.g. each method declares its own section), imported only when a name must become a class."""
    where = cls.__dict__.get("_variants")
    return cls if where is None else _hook(where)(name)


def choose_section(registry: dict[str, Any], key: str, name: str | None,
                   section: Callable[[Any], type]) -> Any:
    """A ``_variants`` hook over a registry ``{name: entry}``: the section class of ``name``'s
    entry (``section(entry)``); ``None``: ``{name: section class}`` of every entry. An unknown
    name is a one-line ConfigError naming ``key`` and the closest valid name."""
    if name is None:
        return {n: section(entry) for n, entry in registry.items()}
    if name not in registry:
        raise ConfigError(unknown_choice(key, name, registry))
    return section(registry[name])


def _variant_base(cls: type) -> type | None:
    """The base with variants that ``cls`` is (or is a variant of), or None."""
    return next((c for c in cls.__mro__ if "_variants" in c.__dict__), None)


def _with_sections(cls: type) -> type:
    """A base with ``_sections``, extended by one field per section its hook lists (rebuilt when
    the registry changes: a test may add an evaluator)."""
    return _extended(cls, tuple(_hook(cls.__dict__["_sections"])().items()))


@functools.lru_cache(maxsize=None)
def _extended(cls: type, sections: tuple[tuple[str, type], ...]) -> type:
    namespace = {"__annotations__": dict(sections), "__module__": cls.__module__,
                 "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
                 "__reduce__": lambda self: (_rebuilt, (cls, {  # pickled as its base's
                     f.name: getattr(self, f.name) for f in dataclasses.fields(self)}))}
    namespace.update({name: _section(section) for name, section in sections})
    return config(type(cls.__name__, (cls,), namespace))


def _rebuilt(base: type, fields: dict[str, Any]) -> Any:
    """An extended section unpickled: its base builds the class the registry gives now."""
    return base(**fields)


def _variant_default(cls: type) -> Any:
    return next(f.default for f in dataclasses.fields(cls) if f.name == "name")


def _is_python_scalar(x: Any) -> bool:
    return isinstance(x, (int, float, str, bool, tuple, list))


def config(cls: type) -> type:
    """Makes ``cls`` a frozen, validated dataclass registered as a pytree.

    Fields from :func:`hyper` and nested config sections are pytree children; the rest is static.
    Validation (types, value checks, :meth:`_validate`) runs on construction whenever the values are
    plain Python values; tracers and arrays (inside jit/vmap) pass through untouched.
    """
    def __post_init__(self):
        hints = _hints(type(self))
        prefix = getattr(self, "_prefix", "")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            key = f"{prefix}{f.name}"
            if _is_config(value) or not _is_python_scalar(value):
                continue  # nested section, or a traced/array leaf inside a transformation
            coerced = _coerce(value, hints[f.name], key)
            if coerced is not value:
                object.__setattr__(self, f.name, coerced)
            check = f.metadata.get("check")
            if isinstance(check, str):
                fn, msg = _CHECKS[check]
                if not fn(coerced, self):
                    raise ConfigError(f"{key} {msg}, got {coerced!r}")
            elif check is not None and coerced not in check:
                raise ConfigError(unknown_choice(key, coerced, check))
        validate = getattr(self, "_validate", None)
        if validate is not None and all(
                _is_python_scalar(getattr(self, f.name)) or _is_config(getattr(self, f.name))
                for f in dataclasses.fields(self)):
            validate()

    cls.__post_init__ = __post_init__  # before @dataclass, which only calls a hook that exists
    if "_variants" in cls.__dict__ or "_sections" in cls.__dict__:
        def __new__(base, *args, **kwargs):  # noqa: N807 - the base builds the named variant
            if base is cls:
                base = _section_class(cls, kwargs)
            for k in kwargs:  # a ConfigError naming the valid keys, not __init__'s TypeError
                if k not in _hints(base):
                    raise _unknown_key(f"{cls._key}.{k}", base)
            return object.__new__(base)
        cls.__new__ = __new__
    cls = dataclasses.dataclass(frozen=True)(cls)
    cls._is_repr_jax_config = True
    data_fields, meta_fields = [], []
    for f in dataclasses.fields(cls):
        (data_fields if f.metadata.get("hyper", False) else meta_fields).append(f.name)
    jax.tree_util.register_dataclass(cls, data_fields=data_fields, meta_fields=meta_fields)
    return cls


def unknown_choice(key: str, value: Any, valid: Iterable[Any]) -> str:
    valid = list(valid)
    close = difflib.get_close_matches(str(value), [str(v) for v in valid], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{key}={value!r} is not valid{hint}; choose from: {', '.join(map(repr, valid))}"


# --------------------------------------------------------------------------------------------------
# Dict and override round trips
# --------------------------------------------------------------------------------------------------

def to_dict(cfg: Any) -> dict[str, Any]:
    """Nested plain dict (JSON-able) of a config."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out[f.name] = to_dict(v) if _is_config(v) else (list(v) if isinstance(v, tuple) else v)
    return out


def _valid_keys(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _unknown_key(key: str, cls: type) -> ConfigError:
    *parent, leaf = key.split(".")
    valid = _valid_keys(cls)
    close = difflib.get_close_matches(leaf, valid, n=1)
    where = ".".join(parent) + "." if parent else ""
    hint = f"did you mean '{where}{close[0]}'? " if close else ""
    owners = _owners(cls, leaf)
    has = (f" ({key} belongs to {', '.join(owners[:6])}{', ...' if len(owners) > 6 else ''}: "
           f"set {where}name first)" if owners else "")
    return ConfigError(f"unknown config key '{key}'; {hint}valid keys"
                       f"{' in ' + '.'.join(parent) if parent else ''}: {', '.join(valid)}{has}")


def _owners(cls: type, leaf: str) -> list[str]:
    """The names of the other variants of ``cls``'s section that have a field ``leaf``."""
    base = _variant_base(cls)
    if base is None:
        return []
    try:
        every = _hook(base.__dict__["_variants"])(None)
    except Exception:  # noqa: BLE001 - a hint only: never hide the error it decorates
        return []
    return [name for name, section in every.items()
            if section is not cls and leaf in _hints(section)]


def from_dict(d: dict[str, Any], cls: type, _prefix: str = "") -> Any:
    """Inverse of :func:`to_dict`; unknown keys fail naming the valid ones."""
    cls = _section_class(cls, d)
    hints = _hints(cls)
    kwargs = {}
    for k, v in d.items():
        if k not in hints:
            raise _unknown_key(_prefix + k, cls)
        sub = hints[k]
        if _is_config(sub):
            if not isinstance(v, dict):
                raise ConfigError(f"{_prefix + k} is a section; set its keys, e.g. "
                                  f"{_prefix + k}.{_valid_keys(_section_class(sub, {}))[0]}=...")
            v = from_dict(v, sub, _prefix + k + ".")
        kwargs[k] = v
    return _construct(cls, kwargs, _prefix)


def _construct(cls: type, kwargs: dict[str, Any], prefix: str) -> Any:
    # Subclasses read the prefix in __post_init__ so messages name the full key ("optim.lr").
    obj = cls.__new__(cls)
    object.__setattr__(obj, "_prefix", prefix)
    try:
        obj.__init__(**kwargs)
    finally:
        try:
            object.__delattr__(obj, "_prefix")
        except AttributeError:
            pass
    return obj


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """``{"optim.lr": 1e-3, ...}`` for every field."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if _is_config(v):
            out.update(flatten(v, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = v
    return out


ABSENT = "(absent)"  # a key one of two configs lacks: they chose different sections


def diff(a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ between two configs: ``{key: (a_value, b_value)}``; a key only one
    has (another method, dataset or encoder family) shows :data:`ABSENT` on the other side."""
    fa, fb = flatten(a), flatten(b)
    return {k: (fa.get(k, ABSENT), fb.get(k, ABSENT)) for k in {**fa, **fb}
            if fa.get(k, ABSENT) != fb.get(k, ABSENT)}


def _parse_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # bare words are strings: data.name=digits


def _section_class(base: type, node: dict[str, Any]) -> type:
    """The class of a section dict: a section with variants is the one its ``name`` selects, a
    section gathering others is its extended class."""
    if "_variants" in base.__dict__:
        return _variant_class(base, node.get("name", _variant_default(base)))
    if "_sections" in base.__dict__:
        return _with_sections(base)
    return base


def _refusal(cls: type, field: str, value: Any, key: str) -> str | None:
    """Why section class ``cls`` refuses ``value`` for ``field`` on its own (its type and check;
    not the cross-field ``_validate``), or None when it takes it."""
    f = next(f for f in dataclasses.fields(cls) if f.name == field)
    if isinstance(value, dict) or not _is_python_scalar(value):
        return None  # a nested section: its own fields are checked where it is built
    try:
        coerced = _coerce(value, _hints(cls)[field], key)
    except ConfigError as e:
        return str(e)
    check = f.metadata.get("check")
    if isinstance(check, str):
        ok, msg = _CHECKS[check]
        return None if ok(coerced, None) else f"{key} {msg}"
    if check is not None and coerced not in check:
        return unknown_choice(key, coerced, check)
    return None


def _switched(node: dict[str, Any], cls: type, prefix: str) -> dict[str, str]:
    """Fits the section dict ``node`` to the class its new name chose: drops the fields ``cls``
    lacks, and resets to ``cls``'s default a shared field whose value ``cls`` refuses
    (``objective='info_nce'`` kept by ``method.name=cross_encoder``). Returns ``{key: note}``
    for the reset ones. Time O(fields)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in [k for k in node if k not in fields]:
        del node[k]
    reset = {}
    for k in [k for k in node if k != "name"]:
        why = _refusal(cls, k, node[k], prefix + k)
        if why is None:
            continue
        old = node.pop(k)
        f = fields[k]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        reset[prefix + k] = (f"{prefix}name={node['name']!r} does not take {prefix}{k}={old!r} "
                             f"(kept from the previous {prefix}name); reset to its default "
                             f"{default!r}")
    return reset


def override(cfg: Any, assignments: Sequence[str], *, notes: list[str] | None = None) -> Any:
    """Returns a new config with ``"a.b=value"`` assignments applied (values via literal_eval).

    Setting a section's ``name`` where names select sections (``method.name=vicreg``) switches to
    that section, keeping the fields the two share when the new section takes their values (a
    value it refuses is reset to its default, with a line appended to ``notes``); names are
    applied before other keys, and a key set explicitly is never reset."""
    d = to_dict(cfg)
    reset: dict[str, str] = {}
    for item in assignments:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. optim.lr=3e-4")
    items = sorted(assignments, key=lambda item: item.split("=", 1)[0].strip().rsplit(".", 1)[-1]
                   != "name")  # stable: a section's name first, so its own keys exist
    for item in items:
        key, text = item.split("=", 1)
        key = key.strip()
        node, cls, base = d, type(cfg), type(cfg)
        parts = key.split(".")
        for i, part in enumerate(parts):
            hints = _hints(cls)
            if part not in hints:
                raise _unknown_key(".".join(parts[: i + 1]), cls)
            sub = hints[part]
            is_section = _is_config(sub)
            if i == len(parts) - 1:
                if is_section:
                    keys = _valid_keys(_section_class(sub, node.get(part, {})))
                    raise ConfigError(f"{key} is a section; set one of its keys: "
                                      f"{', '.join(key + '.' + k for k in keys)}")
                node[part] = _parse_value(text.strip())
                reset.pop(key, None)  # set explicitly: nothing was reset
                if part == "name" and "_variants" in base.__dict__:
                    reset.update(_switched(node, _section_class(base, node),
                                           key[: -len("name")]))
            else:
                if not is_section:
                    raise ConfigError(f"{'.'.join(parts[:i + 1])} is not a section, so "
                                      f"'{key}' does not exist")
                node, base = node[part], sub
                cls = _section_class(sub, node)
    out = from_dict(d, type(cfg))
    if notes is not None:
        notes.extend(reset.values())
    return out
