"""The signatures a recording gives its steps (`prepared.Recorder.signature`, written out on its fast path) are
`loop_finding.step_key` numbered: two steps share one exactly when their keys are equal.  And a dropped prepared
program is freed by reference counting (no cycle through its recorder, tape, loop or compiled functions)."""

import gc
import weakref

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast.loop_finding import step_key
from dualbroadcast.program import Step

from .test_loops import CASES, program_of


def mixed(x, c):
    """Steps of every kind of reference: keywords, slices, constant arrays and numbers, a cut, a guard."""
    y = np.sum(x[1:] * np.arange(3.0), axis=0) + 2 * x[0] - 1.5
    z = np.cumsum(x ** 2) * c
    if float(db.cut(z)[0]) > -1.0:  # a guard
        y = y + np.sum(db.cut(z) * x)
    for k in range(3):
        y = y * 0.5 + np.max(x[k:k + 2], keepdims=True)[0] + k
    return y + np.sum(z[::2])


SIGNATURE_CASES = [(f, x) for f, x, _ in CASES] + [(lambda x: mixed(x, np.array([1.0, 2.0, 3.0, 4.0])),
                                                    np.array([0.3, -0.4, 0.8, 1.1]))]


def _hashable(key):
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key


@pytest.mark.parametrize("f, x", SIGNATURE_CASES)
def test_recorded_signatures_are_the_step_keys_numbered(f, x):
    program = program_of(db.prepare_gradient(f, x))
    steps = [s for s in program.recorded_steps if type(s) is Step]
    assert len(steps) > 10
    by_signature, by_key = {}, {}
    for step in steps:
        key = _hashable(step_key(step, program.meta))
        assert by_signature.setdefault(step.signature, key) == key  # one key per signature ...
        assert by_key.setdefault(key, step.signature) == step.signature  # ... and one signature per key
    assert len(by_key) < len(steps)  # (some steps repeat)


def _freed(make, calls):
    """Whether the programs ``make()`` recorded are freed once the prepared object is dropped, no collection run."""
    gc.collect()
    gc.disable()
    try:
        prog, args = make()
        for _ in range(calls):
            prog(*args)
        holder = getattr(prog, "program", prog)
        programs = [weakref.ref(p) for variants in holder.variants.values() for p in variants]
        tapes = [weakref.ref(p.tape) for variants in holder.variants.values() for p in variants
                 if p.__dict__.get("tape") is not None]
        assert programs
        del prog, holder
        return not any(r() is not None for r in programs + tapes)
    finally:
        gc.enable()


@pytest.mark.parametrize("calls", [0, 1, 3])
@pytest.mark.parametrize("f, x", SIGNATURE_CASES[:1] + SIGNATURE_CASES[-1:])
def test_a_dropped_prepared_gradient_is_freed_without_a_collection(f, x, calls):
    assert _freed(lambda: (db.prepare_gradient(f, x), (x,)), calls)


@pytest.mark.parametrize("calls", [0, 1, 3])
@pytest.mark.parametrize("f, x", SIGNATURE_CASES[:1] + SIGNATURE_CASES[-1:])
def test_a_dropped_prepared_hvp_is_freed_without_a_collection(f, x, calls):
    assert _freed(lambda: (db.prepare_hvp(f, x), (x, np.ones_like(x))), calls)
