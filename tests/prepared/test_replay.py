"""Replay's cotangent bookkeeping (`replay_backward._Cotangents`) on its own, against plain sums.

The backward writer hands it terms in the recorded order and it decides how each is written:
assigned, added into a new array, added in place, added now to a number, or a leaf's kernel
product deferred into ``out=``.  Here random sequences of contributions (the kinds the writer
makes) are written by it, run, and compared with the same contributions summed by NumPy; no
term array, and no cotangent another value still reads, may be changed in place.
"""

import types

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dualbroadcast.replay import Namespace
from dualbroadcast.replay_backward import Folded, _Cotangents

SHAPES = [(), (3,)]


@st.composite
def plans(draw):
    """Values ``0..n-1`` with shapes, and contributions in the order the backward writer makes them: value
    ``n-1``'s first.  A term reads only cotangents of higher values (complete by then) that are not leaves
    a kernel product may be deferred into (their cotangent is read by nothing but the return)."""
    n = draw(st.integers(1, 5))
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(n)]
    deferrable = [bool(shape) and draw(st.booleans()) for shape in shapes]
    has, plan = set(), []
    for j in reversed(range(n)):
        readable = [k for k in range(j + 1, n) if k in has and not deferrable[k]]
        kinds = ["array", "index" if shapes[j] else "folded"]
        kinds += ["cotangent"] * any(shapes[k] == shapes[j] for k in readable)
        kinds += ["kernel"] * (bool(shapes[j]) and bool(readable))
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(kinds))
            c = draw(st.sampled_from([1.0, -1.0, 0.5, 3.0]))
            if kind == "cotangent":
                plan.append((j, kind, draw(st.sampled_from([k for k in readable if shapes[k] == shapes[j]])), c))
            elif kind == "kernel":
                plan.append((j, kind, draw(st.sampled_from(readable)), c))
            elif kind == "index":
                plan.append((j, kind, draw(st.integers(0, 2)), c))
            else:
                plan.append((j, kind, None, c))
            has.add(j)
    return shapes, deferrable, plan


def write(shapes, deferrable, plan):
    """The generated function for ``plan``, the arrays it reads (terms, and partials it may overwrite) and
    the expected cotangents; also checks which cotangents the bookkeeping says exist and are numbers."""
    space = Namespace()
    program = types.SimpleNamespace(meta={i: (s, np.dtype(np.float64)) for i, s in enumerate(shapes)},
                                    active_leaves=list(range(len(shapes))), float_leaves=set())
    cotangents = _Cotangents(program, space)
    expected = {i: np.zeros(s) for i, s in enumerate(shapes)}
    terms, partials, lines = {}, {}, []
    numbers = {}  # value -> whether every term added to it was a number known while writing
    for n, (j, kind, k, c) in enumerate(plan):
        name = f"t{n}"
        known = kind == "folded" or (kind == "cotangent" and cotangents.number(k) is not None)
        numbers[j] = numbers.get(j, True) and known
        if kind == "array":
            terms[name] = np.full(shapes[j], c) + np.arange(np.prod(shapes[j], dtype=int)).reshape(shapes[j])
            lines += cotangents.accumulate(j, name)
            expected[j] = expected[j] + terms[name]
        elif kind == "folded":
            lines += cotangents.accumulate(j, Folded(np.float64(c)))
            expected[j] = expected[j] + c
        elif kind == "index":
            terms[name] = np.float64(c)
            lines += cotangents.owned(j) + [f"    g{j}[{k}] += {name}"]
            expected[j][k] += c
        elif kind == "cotangent":  # as the table's terms: a number now when the cotangent is one
            number = cotangents.number(k)
            term = Folded(number * c) if number is not None else f"g{k}" if c == 1 else f"(-g{k})" if c == -1 \
                else f"(g{k} * {c!r})"  # (a negation as `table_pullback_source` writes it: subtracted)
            lines += cotangents.accumulate(j, term)
            expected[j] = expected[j] + expected[k] * c
        else:  # a kernel's partial at the value's shape, an array of the program's own
            partials[name] = np.linspace(c, 2 * c, 3)
            if not (deferrable[j] and cotangents.defer(j, name, k)):
                lines += cotangents.accumulate(j, f"np.multiply({name}, g{k}, out={name})")
            expected[j] = expected[j] + partials[name] * expected[k]
    for i in range(len(shapes)):
        assert (i in cotangents) == (i in numbers)
        assert (cotangents.number(i) is not None) == numbers.get(i, False)  # folded, and never stale
        if numbers.get(i):
            assert cotangents.number(i) == expected[i]
    source = "\n".join(["def run(out=None):"] + lines + cotangents.gradients("None"))
    return source, space.names, terms, partials, expected


@settings(max_examples=300, deadline=None)
@given(plans())
def test_cotangents_written_by_the_bookkeeping_are_the_sums_of_their_terms(plan):
    shapes, deferrable, contributions = plan
    source, names, terms, partials, expected = write(shapes, deferrable, contributions)
    originals = {name: np.copy(t) for name, t in terms.items()}
    for out in (None, [np.full(s, np.nan) for s in shapes]):
        namespace = {**names, **terms, **{name: p.copy() for name, p in partials.items()}}
        exec(compile(source, "<test>", "exec"), namespace)
        _, grads = namespace["run"](out)
        if out is not None:
            assert grads is out
        for i, g in enumerate(grads):
            assert np.shape(g) == shapes[i], source
            np.testing.assert_allclose(g, expected[i], rtol=1e-12, err_msg=source)
        for name, t in terms.items():
            np.testing.assert_array_equal(t, originals[name], err_msg=f"{name} changed in place:\n{source}")


def test_a_negated_cotangent_is_subtracted_to_the_same_bits(monkeypatch):
    """``g = g + (-h)`` is written ``g = g - h`` (one array less): IEEE's ``x + (-y)`` is ``x - y`` bit for bit, so the
    replay gives what it gave with the negation, signed zeros, infinities and NaN included."""
    import re

    import dualbroadcast as db
    from dualbroadcast import replay_backward
    from dualbroadcast.regions import FUSE_REGIONS

    def f(x):
        y = np.sin(x)
        return np.sum((x - y) ** 2) + np.sum(y * 3.0)  # y's cotangent: 3g, then minus (x - y)'s

    def prepared():
        token = FUSE_REGIONS.set(False)  # its steps written one by one, not fused into a kernel
        try:
            prog = db.prepare_gradient(f, np.ones(7))
            prog(np.zeros(7))  # compiled now
        finally:
            FUSE_REGIONS.reset(token)
        (program,) = {id(p): p for ps in prog.variants.values() for p in ps}.values()
        return prog, program.source

    subtracting, source = prepared()
    assert " - g" in source or " -= g" in source
    monkeypatch.setattr(replay_backward, "_NEGATED", re.compile(r"(?!)"))  # matches nothing: the negation added
    adding, added_source = prepared()
    assert "(-g" in added_source and " - g" not in added_source and " -= g" not in added_source
    x = np.array([0.0, -0.0, 1.5, -2.0, np.inf, np.nan, 3e300])
    with np.errstate(all="ignore"):
        for y in (np.linspace(-1.0, 1.0, 7), x, -x):
            np.testing.assert_array_equal(subtracting(y), adding(y))
            np.testing.assert_allclose(subtracting(y), db.gradient(f, y), rtol=1e-14)
