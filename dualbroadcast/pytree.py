"""Pytrees: flatten nested containers and callables to leaves, and rebuild them.

Containers are dict, list, tuple, namedtuple and dataclass instances.  A
callable's own state is a container too (closure cells, bound ``self``,
``functools.partial`` arguments, attributes of a callable object), so that
``cut``/``uncut`` and ``broadcast`` see the parameters a model carries.
``cut``/``uncut`` markers are nodes of the tree; rebuilding drops them.
"""

import copy
import dataclasses
import functools
import types

import numpy as np


class Cut:
    """Marker made by ``cut(x)`` outside a gradient: ``x`` is a constant.

    `gradient`, `pullback`, `broadcast` and `sum` read the marker; anywhere else it
    behaves like ``x`` itself, so a function using `cut` also runs undifferentiated.
    """

    __slots__ = ("content",)

    def __init__(self, content):
        self.content = content

    def __repr__(self):
        return f"cut({self.content!r})"

    def __call__(self, *args, **kwargs):
        return without_markers(self.content)(*args, **kwargs)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(without_markers(self.content), dtype=dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return getattr(ufunc, method)(*[without_markers(x) for x in inputs], **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return func(*[without_markers(x) for x in args], **kwargs)

    def __getitem__(self, index):
        return without_markers(self.content)[index]

    def __getattr__(self, name):
        return getattr(without_markers(self.content), name)

    def __len__(self):
        return len(without_markers(self.content))

    def __iter__(self):
        return iter(without_markers(self.content))


def _delegate(ufunc, reflected):
    if reflected:
        return lambda self, other: ufunc(other, without_markers(self.content))
    return lambda self, other: ufunc(without_markers(self.content), other)


for _name, _ufunc in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                      ("truediv", np.divide), ("pow", np.power), ("matmul", np.matmul)]:
    setattr(Cut, f"__{_name}__", _delegate(_ufunc, False))
    setattr(Cut, f"__r{_name}__", _delegate(_ufunc, True))
Cut.__neg__ = lambda self: np.negative(without_markers(self.content))


class Uncut(Cut):
    """Marker made by ``uncut(x)``: inside a ``cut`` container, ``x`` stays a variable."""

    __slots__ = ()

    def __repr__(self):
        return f"uncut({self.content!r})"


# A treedef is (kind, aux, children_treedefs); a leaf is LEAF.
LEAF = None
_PLAIN_LEAVES = {float, int, bool, complex, str, type(None), np.ndarray, np.float64, np.float32, np.int64}
SETTLE = {}  # leaf type -> what a leaf of it is flattened as: `tracked.Pending`'s value computed (`settle_total`)


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _is_callable_object(x):
    return (
        callable(x)
        and _has_attributes(x)
        and not isinstance(x, (type, types.FunctionType, types.BuiltinFunctionType, np.ufunc))
    )


def _has_attributes(obj):
    """Whether ``obj`` holds attributes of its own: a ``__dict__``, or ``__slots__``."""
    return hasattr(obj, "__dict__") or any("__slots__" in vars(cls) for cls in type(obj).__mro__[:-1])


def _attributes(obj):
    """``obj``'s attributes by name: its ``__dict__`` and the slots its classes declare that are set."""
    values = {}
    for cls in type(obj).__mro__[:-1]:
        slots = vars(cls).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{cls.__name__.lstrip('_')}{name}"  # a private slot's mangled name
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                values[name] = getattr(obj, name)
    values.update(getattr(obj, "__dict__", {}))
    return values


def _children(x):
    """Return (kind, aux, children) for a container, or None for a leaf."""
    if isinstance(x, Uncut):
        return "uncut", None, [x.content]
    if isinstance(x, Cut):
        return "cut", None, [x.content]
    if type(x) is list:
        return "list", None, x
    if type(x) is tuple:
        return "tuple", None, x
    if type(x) is dict:
        keys = tuple(x)
        order = _key_order(keys)
        return "dict", (order, keys), [x[k] for k in order]
    if _is_namedtuple(x):
        return "namedtuple", type(x), list(x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        names = tuple(f.name for f in dataclasses.fields(x))
        return "dataclass", (x, names), [getattr(x, n) for n in names]
    if isinstance(x, functools.partial):
        return "partial", None, [x.func, x.args, x.keywords]
    if isinstance(x, types.MethodType):
        owner = x.__self__
        return "method", None, [x.__func__, _Owner(owner) if has_plain_attributes(owner) else owner]
    if type(x) is _Owner:
        return _object_children(x.obj)
    if isinstance(x, types.FunctionType):
        if not x.__closure__:
            return "function", x, []
        return "closure", x, [_cell_value(c) for c in x.__closure__]
    if _is_callable_object(x):
        return _object_children(x)
    return None


def _key_order(keys):
    """A dict's keys in the order its leaves are flattened: sorted, as JAX does, so that two dicts with the same
    keys inserted in another order (a gradient's tangents, cotangents, ``out=``) pair leaf with leaf by key;
    in insertion order where they cannot be sorted (keys of several types).  It is rebuilt in its own order."""
    try:
        return tuple(sorted(keys))
    except TypeError:
        return keys


def _object_children(obj):
    """An object with attributes as a container: its attributes, sorted by name."""
    attributes = _attributes(obj)
    names = tuple(sorted(attributes))
    return "object", (obj, names), [attributes[n] for n in names]


class _Owner:
    """The ``self`` of a bound method whose class is neither a dataclass nor callable: its
    attributes are the method's state too."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


def has_plain_attributes(obj):
    return (
        _has_attributes(obj)
        and not isinstance(obj, (type, types.ModuleType, types.FunctionType))
        and not dataclasses.is_dataclass(obj)
        and not _is_callable_object(obj)
    )


def with_attributes(obj, replace):
    """``obj``, or where ``replace`` changes one of its attributes, a copy of it with each attribute
    ``v`` replaced by ``replace(v)`` (how `cut` reaches the values a plain object holds)."""
    attributes = _attributes(obj)
    replaced = {name: replace(value) for name, value in attributes.items()}
    if all(replaced[name] is value for name, value in attributes.items()):
        return obj
    new = copy.copy(obj)
    for name, value in replaced.items():
        object.__setattr__(new, name, value)
    return new


_EMPTY_CELL = object()


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet assigned (e.g. a recursive inner function)
        return _EMPTY_CELL


def _rebuild(kind, aux, children, strip_markers):
    if kind == "list":
        return list(children)
    if kind == "tuple":
        return tuple(children)
    if kind == "dict":
        order, keys = aux
        built = dict(zip(order, children))
        return built if order == keys else {k: built[k] for k in keys}
    if kind == "namedtuple":
        return aux(*children)
    if kind in ("dataclass", "object"):
        original, names = aux
        new = copy.copy(original)
        for name, value in zip(names, children):
            object.__setattr__(new, name, value)
        return new
    if kind == "partial":
        func, args, keywords = children
        return functools.partial(func, *args, **keywords)
    if kind == "method":
        return types.MethodType(*children)
    if kind == "function":
        return aux
    if kind == "closure":
        cells = tuple(types.CellType() if v is _EMPTY_CELL else types.CellType(v) for v in children)
        new = types.FunctionType(aux.__code__, aux.__globals__, aux.__name__, aux.__defaults__, cells)
        new.__kwdefaults__ = aux.__kwdefaults__
        new.__dict__.update(aux.__dict__)
        return new
    if kind == "uncut":
        return children[0] if strip_markers else Uncut(children[0])
    if kind == "cut":
        return children[0] if strip_markers else Cut(children[0])
    if kind == "static":
        return aux
    raise AssertionError(kind)


def _flat(x):
    """The treedef of a tuple or list of plain leaves (the common argument), else None."""
    if (type(x) is tuple or type(x) is list) and _PLAIN_LEAVES.issuperset(map(type, x)):
        return ("tuple" if type(x) is tuple else "list", None, (LEAF,) * len(x))
    return None


def leaf_type(cls):
    """Flatten the values of ``cls`` (exactly that type) as leaves without the container checks: a tracked or
    dual value, which `_children` would find no container either."""
    _PLAIN_LEAVES.add(cls)


def flatten(tree):
    """Return ``(leaves, treedef)``; functions without state are part of the treedef."""
    if type(tree) in _PLAIN_LEAVES:  # one array, one tracked value: what most calls pass
        return [tree], LEAF
    flat = _flat(tree)
    if flat is not None:
        return list(tree), flat
    leaves = []
    return leaves, _visit(tree, leaves, set())


# The walks are module functions, not nested ones: a nested function that calls itself is a
# reference cycle, left for the garbage collector on every call.
def _visit(x, leaves, in_progress):
    if type(x) in _PLAIN_LEAVES:
        leaves.append(x)
        return LEAF
    if type(x) is tuple or type(x) is list:  # the common containers, without the general dispatch
        flat = _flat(x)
        if flat is not None:  # only leaves: no visit per element
            leaves.extend(x)
            return flat
        return ("tuple" if type(x) is tuple else "list", None, tuple([_visit(c, leaves, in_progress) for c in x]))
    if isinstance(x, (types.FunctionType, types.MethodType)) and id(x) in in_progress:
        return ("static", x, ())  # a function whose closure refers to itself
    node = _children(x)
    if node is None:
        if callable(x) and not isinstance(x, np.ndarray) and not hasattr(x, "__array_ufunc__"):
            return ("static", x, ())  # code, not data: ufuncs, builtins, classes
        settle = SETTLE.get(type(x))
        leaves.append(x if settle is None else settle(x))
        return LEAF
    kind, aux, children = node
    in_progress.add(id(x))
    defs = tuple([_visit(c, leaves, in_progress) for c in children])
    in_progress.discard(id(x))
    return (kind, aux, defs)


def dict_keys(treedef):
    """The keys of every dict of a tree, in flatten order (each in sorted order): two trees whose leaves are
    paired one by one must have the same."""
    found = []
    _dict_keys(treedef, found)
    return found


def _dict_keys(d, found):
    if d is LEAF:
        return
    if d[0] == "dict":
        found.append(d[1][0])
    for c in d[2]:
        _dict_keys(c, found)


def unflatten(treedef, leaves, strip_markers=True):
    """Rebuild the tree of ``treedef`` with ``leaves`` in flatten order."""
    leaves = leaves if type(leaves) is list else list(leaves)
    if treedef is not LEAF and treedef[2].count(LEAF) == len(treedef[2]):  # one level of leaves
        return _rebuild(treedef[0], treedef[1], leaves, strip_markers)
    return _build(treedef, iter(leaves), strip_markers)


def _build(d, leaves, strip_markers):
    if d is LEAF:
        return next(leaves)
    kind, aux, defs = d
    return _rebuild(kind, aux, [_build(c, leaves, strip_markers) for c in defs], strip_markers)


def leaf_activity(treedef, active=True):
    """Per leaf, whether it is a variable: ``cut`` turns its subtree off, ``uncut`` on."""
    if treedef is not LEAF and treedef[0] in ("tuple", "list") and treedef[2].count(LEAF) == len(treedef[2]):
        return [active] * len(treedef[2])
    flags = []
    _activity(treedef, active, flags)
    return flags


def _activity(d, on, flags):
    if d is LEAF:
        flags.append(on)
        return
    kind, _, defs = d
    on = False if kind == "cut" else True if kind == "uncut" else on
    if defs.count(LEAF) == len(defs):
        flags.extend([on] * len(defs))
        return
    for c in defs:
        _activity(c, on, flags)


def has_markers(treedef):
    """True if the tree contains a ``cut`` or ``uncut`` marker."""
    if treedef is LEAF:
        return False
    kind, _, defs = treedef
    return kind in ("cut", "uncut") or any(has_markers(c) for c in defs)


def without_markers(x):
    """``x`` with cut/uncut markers removed (values unchanged)."""
    if isinstance(x, (np.ndarray, float, np.generic)):
        return x
    leaves, treedef = flatten(x)
    return unflatten(treedef, leaves)


def hashable(x):
    """Whether ``x`` can be part of a cache key."""
    try:
        hash(x)
        return True
    except TypeError:
        return False
