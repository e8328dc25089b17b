"""What a prepared recording is made of: its steps and the references they hold to values.

`prepared.Recorder` writes these while ``f`` runs and `replay` turns them into
code; a module of their own lets both import them (prepared imports replay),
and each tells a step's kind by its class.
"""


class Const:
    """A constant argument of a step (anything not derived from an argument of f)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Pack:
    """A tuple, list or slice argument holding traced values: per item (a slice's start, stop, step) a value
    index or a `Const`;
    ``value`` is the recorded one (for its shape)."""

    __slots__ = ("kind", "refs", "value")

    def __init__(self, kind, refs, value):
        self.kind = kind
        self.refs = refs
        self.value = value


class Step:
    """One recorded operation: how to recompute its outputs and rebuild their pullbacks."""

    __slots__ = ("func", "impl", "kind", "refs", "rest", "kwargs", "outs", "active", "makers", "expected", "complex",
                 "signature")

    def __init__(self, func, impl, kind, refs, rest, kwargs, outs, active, makers, expected=None, complex=False,
                 signature=None):
        self.func = func
        self.impl = impl
        self.kind = kind
        self.refs = refs  # per argument (or sequence element): a value index, a Const or a Pack
        self.rest = rest  # SEQUENCE: the arguments after the sequence
        self.kwargs = kwargs
        self.outs = outs  # per output: its value index, or None for a plain (guarded) result
        self.active = active  # argument positions whose cotangents are needed
        self.makers = makers
        self.expected = expected  # a plain result, checked on replay ({position: result} of a tuple's)
        self.complex = complex  # recorded with its complex rule: a real argument's cotangent is the real part
        self.signature = signature  # equal for steps that may be the same step of two iterations (`find_loop`)


class KernelStep:
    """A broadcast/sum kernel: rerun with the same backend, pullbacks rebuilt from its partials.  ``region``:
    the `regions.Region` it replaces (elementwise steps, and their sum if ``reduce``, fused when the program was
    compiled; ``backend`` None: chosen when compiled, `region_runners.region_runner`), None for a recorded ``db.sum`` /
    ``db.broadcast``."""

    __slots__ = ("kernel", "refs", "active", "backend", "out", "reduce", "region")

    def __init__(self, kernel, refs, active, backend, out, reduce, region=None):
        self.kernel = kernel
        self.refs = refs
        self.active = active
        self.backend = backend
        self.out = out
        self.reduce = reduce
        self.region = region


class SecondOrderStep:
    """A second-order kernel (a `sum` inside a gradient of a gradient, `broadcast_pullbacks.run_second_order`), rerun
    with the same backend: its results are the value, then a partial per argument in ``slots`` and a second partial per
    pair in ``pairs``.  The recorded tape's values are the sum ``out`` (pullbacks: the partials of the
    arguments in ``outer``) and the inner arguments' partials ``partials`` (position -> value index; pullbacks:
    the second partials)."""

    __slots__ = ("kernel", "refs", "backend", "out", "slots", "pairs", "outer", "partials", "result_shapes")

    def __init__(self, kernel, refs, backend, out, slots, pairs, outer, partials, result_shapes):
        self.kernel = kernel
        self.refs = refs  # per kernel input: the recorded tape's value index, or a Const
        self.backend = backend
        self.out = out
        self.slots = slots  # position -> index of its partial among the results after the value
        self.pairs = pairs  # (position, position) -> index of the second partial, both orders
        self.outer = outer  # the positions of the recorded tape's differentiated arguments
        self.partials = partials
        self.result_shapes = result_shapes  # what `Kernel.run` reduces each partial to


class Guard:
    """A conversion of a traced value (bool, int, float, index) and the result it gave."""

    __slots__ = ("index", "convert", "expected")

    def __init__(self, index, convert, expected):
        self.index = index
        self.convert = convert
        self.expected = expected


def unpacked(refs):
    """The references ``refs`` with each `Pack` replaced by its items, at any depth: value indices and `Const` s."""
    for r in refs:
        if type(r) is Pack:
            yield from unpacked(r.refs)
        else:
            yield r
