"""The recorder's specialised path (`prepared.Recorder.record_per_argument`): a step of a rule with one maker per
argument, called without keywords on traced values and plain constants, is recorded as the general path of
`tracked.record_operation` records it (the same steps, shapes, fixed shapes and guards, the same gradient), and
what it does not take (complex values, cut values, packs, nested gradients) goes to the general path."""

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import prepared
from dualbroadcast.program import Const, Guard, Step


def central_differences(f, x, h=1e-6):
    flat = x.ravel()
    return np.array([(f((flat + h * e).reshape(x.shape)) - f((flat - h * e).reshape(x.shape))) / (2 * h)
                     for e in np.eye(flat.size)]).reshape(x.shape)


def mixed(x):
    """Scalars, 0-d arrays, a float32 constant, views (non-contiguous, transposed), basic indices, int and float
    constants on both sides of the operators, a reduction; a length read (no guard where the shape is fixed)."""
    m = x.reshape(3, 4)
    a = m[:, ::2] * np.float32(1.5) + 2 * m.T[::2].T
    b = np.array(0.25) * a[1] - a[0, 1:2] / (1.0 + x[3] ** 2)
    c = np.sin(m[1:, 1]) @ np.arange(2.0) - np.exp(-b[0])
    return np.sum(a**2) + np.sum(b * c) + x[0] * x[5] - 3.0 / (2.0 + x[7]) + len(b) * x[1]


def with_cut_and_complex(x, w):
    """A cut argument times a traced value (its steps mix inactive and active values), a complex constant (its
    result complex: the general path's `_record_complex`), an integer constant array."""
    z = x * (1 + 2j)
    r = np.real(z * np.conj(z))
    return np.sum(r * w) + np.sum(x * np.arange(x.size)) + np.sum(w[1:] * x[:-1])


def _steps(program):
    """A program's recorded steps as comparable facts (constants by value)."""
    facts = []
    for step in program.recorded_steps:
        if type(step) is Guard:
            facts.append(("guard", step.index, step.convert, repr(step.expected)))
            continue
        assert type(step) is Step
        refs = [r if type(r) is int else ("const", repr(r.value)) if type(r) is Const else ("pack", repr(r.value))
                for r in step.refs]
        facts.append((step.func, step.impl, step.kind, refs, step.rest, step.kwargs, list(step.outs), list(step.active),
                      step.makers, repr(step.expected), step.complex))
    return facts


def _program(prog):
    (program,) = {id(p): p for programs in prog.variants.values() for p in programs}.values()
    return program


def _recorded(f, args, fast, monkeypatch):
    """The program of ``f`` on ``args`` recorded with the specialised path (``fast``) or without it."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(prepared.Recorder, "record_per_argument", lambda self, func, rule, args: NotImplemented)
        prog = db.prepare_gradient(f, *args)
        return prog, _program(prog)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_specialised_path_records_what_the_general_path_records(dtype, monkeypatch):
    x = np.linspace(0.3, 1.4, 12).astype(dtype)
    fast_prog, fast = _recorded(mixed, (x,), True, monkeypatch)
    general_prog, general = _recorded(mixed, (x,), False, monkeypatch)
    assert _steps(fast) == _steps(general)
    assert fast.meta == general.meta
    assert fast.recorded_steps and len(fast.tape.records) == len(general.tape.records)
    np.testing.assert_array_equal(fast_prog(x), general_prog(x))  # the recordings' gradients, bit for bit


def test_the_specialised_path_takes_the_common_steps(monkeypatch):
    taken = []
    original = prepared.Recorder.record_per_argument

    def counted(self, func, rule, args):
        t = original(self, func, rule, args)
        taken.append(t is not NotImplemented)
        return t

    monkeypatch.setattr(prepared.Recorder, "record_per_argument", counted)
    db.prepare_gradient(mixed, np.linspace(0.3, 1.4, 12))
    assert sum(taken) >= 0.9 * len(taken) > 20  # (not the reshape: its shape is a tuple of ints)


def test_mixed_dtypes_views_and_scalars_first_call_and_replays():
    x = np.linspace(0.3, 1.4, 12)
    prog = db.prepare_gradient(mixed, x)
    for y in (x, x * 1.1, x[::-1].copy()):
        expected = db.gradient(mixed, y)
        np.testing.assert_allclose(prog(y), expected, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(expected, central_differences(mixed, y), rtol=1e-6, atol=1e-8)
    assert prog.recordings == 1


def test_cut_values_and_complex_results_go_to_the_general_path(monkeypatch):
    x, w = np.linspace(0.5, 1.0, 5), np.linspace(1.0, 2.0, 5)
    fast_prog, fast = _recorded(with_cut_and_complex, (x, db.cut(w)), True, monkeypatch)
    _, general = _recorded(with_cut_and_complex, (x, db.cut(w)), False, monkeypatch)
    assert _steps(fast) == _steps(general)
    assert any(step.complex for step in fast.recorded_steps if type(step) is Step)
    for y, v in ((x, w), (x * 1.3, w[::-1].copy())):
        expected = db.gradient(lambda x: with_cut_and_complex(x, v), y)
        np.testing.assert_allclose(fast_prog(y, db.cut(v))[0], expected, rtol=1e-13)
        np.testing.assert_allclose(expected, central_differences(lambda x: with_cut_and_complex(x, v), y), rtol=1e-6)


def test_an_index_array_changed_after_its_use_replays_its_old_value():
    index = np.array([0, 1])

    def f(x):
        y = np.sum(x[index] ** 2)  # the index used here (copied: no pullback reads it), then changed by f itself
        index[0] = 2
        return y

    prog = db.prepare_gradient(f, np.ones(3))
    for x in (np.ones(3), np.array([3.0, 4.0, 5.0])):
        np.testing.assert_array_equal(prog(x), [2 * x[0], 2 * x[1], 0.0])  # the index as f used it


def test_a_constant_array_a_pullback_reads_is_read_only_while_f_runs():
    c = np.array([1.0, 2.0, 3.0])

    def f(x):
        y = np.sum(np.sin(x) * c)
        c[0] = 10.0  # as db.gradient: an error, not a silently wrong gradient
        return y

    with pytest.raises((ValueError, db.InPlaceMutationError)):
        db.prepare_gradient(f, np.ones(3))
    assert c.flags.writeable
