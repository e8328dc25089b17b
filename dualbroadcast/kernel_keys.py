"""The key a `db.broadcast`/`db.sum` call's kernel is cached under: the structure of its arguments and of the
callable's state (`structure_key`, `walk_of`), and whatever the trace reads (globals, the items and attributes of
what they hold, module attributes, default values) held by value (`Reads`), so that a change is a new trace,
never a stale kernel."""

import collections
import collections.abc
import functools
import math
from types import BuiltinFunctionType, CodeType, FunctionType, MethodType, ModuleType

import numpy as np

from . import pytree
from .kernel_cache import CACHE_SIZE
from .numpy_facts import REAL_FLOATS
from .tracked import Tracked

_names = {}  # id of a code object -> (the code, the names it reads: `_names_read`)
_walks = {}  # id of a code object -> the pinned `Reads` of a function of that code (`walk_of`)


def structure_key(d, reads=None, names=()):
    """A hashable description of a treedef: kinds, types, code objects and what they read (`Reads`).

    ``names``: those the code reading this node names (a method's, for its ``self``).
    """
    if d is None:
        return None
    reads = reads or Reads()
    kind, aux, children = d
    if kind in ("dataclass", "object"):
        aux = (reads.key(type(aux[0]), names + ("__call__",)), aux[1])
    elif kind in ("closure", "function"):
        names = _names_read(aux.__code__)
        walk = walk_of(aux)  # its cells are its children
        reads.include(walk)
        aux = walk.result
    elif kind == "method" and children[0] is not None and children[0][0] in ("closure", "function"):
        names = _names_of(children[0][1])
    elif kind == "static":
        aux = reads.key(aux, names)
    return (kind, aux, tuple(structure_key(c, reads, names) for c in children))


def walk_of(function):
    """The `Reads` of ``function`` without its closure cells (a kernel's cells are its flattened
    state), its key in ``result``; not to be changed (it may be shared).

    The walk of a function whose code was walked before, with the same globals and defaults, is
    reused while every binding it read is unchanged and it was pinned (nothing it read can change
    in place): a kernel written as a lambda inside the loss is a new function every call.
    """
    known = _walks.get(id(function.__code__))
    if known is not None and known.functions[0][1] is function.__code__ and known.same_function(function) \
            and known.unchanged():
        return known
    walk = Reads()
    walk.result = walk.function(function, cells=False)
    if walk.pinned:
        if len(_walks) > 4 * CACHE_SIZE:
            _walks.clear()
        _walks[id(function.__code__)] = walk
    return walk


MISSING = object()  # a name not bound
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python, whose attributes may change
_BY_VALUE = {str, bytes, bool, int, complex, type(None), range, type(Ellipsis)}
_CODE = {np.ufunc, BuiltinFunctionType, type(np.sum)}  # written in C, they do not change: keyed by identity


class _Identity:
    """A key part that compares its object by identity, and keeps it alive (its id is not reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Identity and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


class Reads:
    """What a trace reads besides the kernel's arguments, as an exact, hashable key: any change is a new
    trace, so a kernel never runs on stale state.

    Numbers by type and value (a zero with its sign), arrays by their bytes, containers and objects
    written in Python by their contents, functions by code, defaults, attributes, closure and the
    globals they read, modules and classes by the attributes the code names; objects written in C
    (ufuncs, builtins, NumPy functions) by identity.

    For the cached plan it also collects every namespace binding read (a global, a module attribute)
    and every function; ``pinned`` stays True while those alone pin the key (nothing read can change
    in place: no container, array, object, class or closure cell).
    """

    def __init__(self):
        self.seen = {}  # id (and names) -> order of the first visit: a shared or cyclic object is keyed once
        self.names = set()  # every name the functions walked read
        self.bindings = []  # (namespace, name, value or MISSING)
        self.functions = []  # (function, code, defaults)
        self.pinned = True
        self.result = None  # the key of the function walked by `walk_of`

    def include(self, walk):
        """Take in what another walk read."""
        self.names.update(walk.names)
        self.bindings += walk.bindings
        self.functions += walk.functions
        self.pinned = self.pinned and walk.pinned

    def unchanged(self):
        """Whether every binding and function read is as it was: all that can change when ``pinned``."""
        for namespace, name, value in self.bindings:
            if namespace.get(name, MISSING) is not value:
                return False
        for function, code, defaults in self.functions:
            if function.__code__ is not code or function.__defaults__ is not defaults:
                return False
        return True

    def same_function(self, function):
        """Whether ``function`` reads what the first function walked read: a function of the same code
        (checked by the caller), globals and defaults, without keyword defaults or attributes."""
        first = self.functions[0][0]
        return function.__globals__ is first.__globals__ and function.__defaults__ is first.__defaults__ \
            and function.__kwdefaults__ is None and not function.__dict__

    def key(self, value, names):
        """``value`` as read by code that names ``names``."""
        kind = type(value)  # the common kinds by exact type first: isinstance of NumPy types is slow
        if kind in _CODE:
            return value  # their equality is identity
        if kind in REAL_FLOATS:
            return (kind, value, math.copysign(1.0, value))  # 0.0 and -0.0 differ in a kernel (1 / x)
        if kind in _BY_VALUE:
            return (kind, value)
        if kind is slice:  # by its bounds (a slice is not hashable before Python 3.12)
            return (kind, self.key(value.start, names), self.key(value.stop, names), self.key(value.step, names))
        if kind is Tracked:
            return (kind, self.key(value.value, names))  # db.cut(v) bakes its value; its tape is not read
        visit = (id(value), names) if kind is ModuleType or isinstance(value, type) else id(value)  # read by name
        if visit in self.seen:
            return ("seen", self.seen[visit])
        self.seen[visit] = len(self.seen)
        if kind is FunctionType:
            return self.function(value, cells=True)
        if kind is ModuleType:
            attributes = vars(value)
            return (value, self.namespace(attributes, tuple([n for n in names if n in attributes])))
        return self.other(value, names)

    def other(self, value, names):
        """The kinds `key` does not test by exact type."""
        kind = type(value)
        if isinstance(value, (float, np.floating)):
            return (kind, value, math.copysign(1.0, value))
        if isinstance(value, (np.generic, np.dtype)) and kind is not np.void:
            return (kind, value)
        if isinstance(value, type):
            return self.klass(value, names)
        if isinstance(value, tuple):  # namedtuples too
            return (kind, tuple(self.key(v, names) for v in value))
        if kind is frozenset:
            return (kind, frozenset(self.key(v, names) for v in value))
        if isinstance(value, MethodType):
            return (kind, self.key(value.__func__, names), self.key(value.__self__, _names_of(value.__func__)))
        if isinstance(value, functools.partial):
            return (kind, self.key(value.func, names), self.key(value.args, names), self.key(value.keywords, names))
        if isinstance(value, (staticmethod, classmethod)):
            return (kind, self.key(value.__func__, names))
        if isinstance(value, property):
            return (kind, self.key(value.fget, names))
        return self.mutable(value, names)

    def mutable(self, value, names):
        """An object that can change in place, by its contents (a plan cannot pin it); C code by identity."""
        kind = type(value)
        if isinstance(value, (np.ndarray, np.void)):
            # the data as a plain array: a MaskedArray's tobytes fills it, which np.ma.masked refuses
            content = tuple(self.key(v, names) for v in value.flat) if value.dtype.hasobject \
                else np.asarray(value).tobytes()
            state = (value.dtype, value.shape, content)
        elif _is_data(value):
            state = (self.key(kind, names + ("__call__",)), self.attributes(value, names))
        elif callable(value):
            return _Identity(value)  # code written in C: a ufunc, a builtin, a NumPy function
        elif isinstance(value, (dict, collections.abc.Mapping)):
            state = tuple((k, self.key(v, names)) for k, v in value.items())
        elif isinstance(value, (set, collections.abc.Set)):
            state = frozenset(self.key(v, names) for v in value)
        elif isinstance(value, (list, collections.abc.Sequence)):  # list, deque, array.array, bytearray
            state = tuple(self.key(v, names) for v in value)
        else:
            return _Identity(value)  # another object written in C
        self.pinned = False
        return (kind, state)

    def function(self, function, cells):
        """A function: code, defaults, attributes, the globals it reads, and its closure cells if
        ``cells`` (a kernel's own cells are its flattened state instead)."""
        code = function.__code__
        names = _names_read(code)
        self.names.update(names)
        self.functions.append((function, code, function.__defaults__))
        closure = function.__closure__ if cells else None
        if closure:
            self.pinned = False  # a cell can be rebound (nonlocal)
        return (
            code,
            self.key(function.__defaults__, names),
            self.key(function.__kwdefaults__, names),
            self.key(function.__dict__, names) if function.__dict__ else None,
            tuple(self.key(pytree._cell_value(cell), names) for cell in closure or ()),
            () if _is_ours(function) else self.namespace(function.__globals__, names),
        )

    def namespace(self, namespace, names):
        """The values ``names`` have in ``namespace`` (a function's globals, a module's attributes)."""
        found = []
        for name in names:
            value = namespace.get(name, MISSING)
            self.bindings.append((namespace, name, value))
            if value is not MISSING:
                found.append((name, self.key(value, names)))
        return tuple(found)

    def klass(self, cls, names):
        """A class by identity and, if written in Python, by the attributes the code names and those
        its methods so found name in turn."""
        if not cls.__flags__ & _HEAP_TYPE:
            return _Identity(cls)
        self.pinned = False
        found, pending = {}, list(names)
        while pending:
            name = pending.pop()
            if name not in found:
                found[name] = value = _class_attribute(cls, name)
                function = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
                if isinstance(function, FunctionType):
                    pending.extend(_names_read(function.__code__))
        names = tuple(sorted(found))
        return (_Identity(cls), tuple((n, self.key(found[n], names)) for n in names if found[n] is not MISSING))

    def attributes(self, obj, names):
        """An object's instance attributes: its ``__dict__`` and its slots."""
        state = [(n, self.key(v, names)) for n, v in vars(obj).items()] if hasattr(obj, "__dict__") else []
        for cls in type(obj).__mro__:
            slots = vars(cls).get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__"):
                    state.append((slot, self.key(getattr(obj, slot, MISSING), names)))
        return tuple(state)


def _is_data(value):
    """An object written in Python (its attributes are data), not code written in C (a ufunc)."""
    kind = type(value)
    if callable(value) and not isinstance(_class_attribute(kind, "__call__"), FunctionType):
        return False
    return hasattr(value, "__dict__") \
        or (kind.__flags__ & _HEAP_TYPE and any("__slots__" in vars(c) for c in kind.__mro__))


_PACKAGE = __name__.partition(".")[0]


def _is_ours(function):
    """A function of this package (`elementwise`'s wrapper, a mirror): its globals hold the library's rules and
    caches, not the user's state, so they are not keyed (walking them would walk every cached plan)."""
    module = function.__globals__.get("__name__", "")
    return module == _PACKAGE or module.startswith(_PACKAGE + ".")


def _names_of(function):
    return _names_read(function.__code__) if isinstance(function, FunctionType) else ()


def _class_attribute(cls, name):
    for c in cls.__mro__:
        if name in vars(c):
            return vars(c)[name]
    return MISSING


def _names_read(code):
    """The names ``code`` reads as globals or attributes, its nested functions and comprehensions included."""
    known = _names.get(id(code))  # by id: hashing a code object is slow
    if known is not None and known[0] is code:
        return known[1]
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names.update(_names_read(const))
    names = tuple(sorted(names))
    if len(_names) > 4 * CACHE_SIZE:
        _names.clear()
    _names[id(code)] = (code, names)  # the code kept alive, so its id is not reused
    return names
