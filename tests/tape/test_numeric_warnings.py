"""NumPy's numeric warnings raised in this package's code (an overflow in a pullback) are shown at the line of the
user's program and name the operation (`numeric_warnings`), in every mode."""

import inspect
import warnings

import numpy as np

import dualbroadcast as db
from dualbroadcast import numeric_warnings

BIG = np.array([1.0, 356.0])  # exp(356)**2 overflows


def caught(run):
    """The warnings ``run()`` shows, each as (file, line, text)."""
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        run()
    return [(w.filename, w.lineno, str(w.message)) for w in shown]


def line_of(text, f):
    """The line number of the first line of ``f``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(f)
    return start + next(k for k, line in enumerate(lines) if text in line)


def squares_of_exp(x):
    y = np.exp(x)
    return np.sum(y * y)


def test_an_overflow_in_the_backward_sweep_names_the_record_and_the_line_of_the_call():
    shown = caught(lambda: db.gradient(squares_of_exp, BIG))
    this = test_an_overflow_in_the_backward_sweep_names_the_record_and_the_line_of_the_call
    here = (__file__, line_of("db.gradient(squares_of_exp", this))
    sweep = [t for f, n, t in shown if (f, n) == here]
    assert any("in the derivative of np.exp (operation 1 of the tape), in the backward sweep" in t for t in sweep)
    forward = [t for f, n, t in shown if (f, n) == (__file__, line_of("y * y", squares_of_exp))]
    assert forward and "overflow encountered in multiply (in np.multiply" in forward[0]
    assert not any(f.startswith(numeric_warnings.PACKAGE) for f, _, _ in shown)


def cosh_times(x):
    return np.sum(np.cosh(x) * 2.0)


def test_a_derivative_computed_with_the_value_is_named_at_the_users_line_in_every_mode():
    x, line = np.array([1.0, 800.0]), line_of("np.cosh", cosh_times)
    for run in (lambda: db.gradient(cosh_times, x), lambda: db.jvp(cosh_times, (x,), (np.ones(2),)),
                lambda: db.hvp(cosh_times, x, np.ones(2)), lambda: db.prepare_gradient(cosh_times, x)(x)):
        shown = caught(run)
        texts = [t for f, n, t in shown if (f, n) == (__file__, line)]
        assert any(t.startswith("overflow encountered in cosh (in np.cosh;") for t in texts), shown
        assert not any(f.startswith(numeric_warnings.PACKAGE) for f, _, _ in shown), shown


def test_a_warning_in_a_kernel_is_shown_at_the_call():
    shown = caught(lambda: db.gradient(lambda x: db.sum(lambda a: np.exp(a) ** 2, x), BIG))
    assert shown and all(f == __file__ for f, _, _ in shown), shown
    assert all("in the compiled kernel of a db.sum or db.broadcast" in t for _, _, t in shown)


def test_warnings_outside_the_package_are_left_as_they_are():
    def plain():
        return np.exp(np.array([800.0]))

    shown = caught(plain)
    assert shown == [(__file__, line_of("np.exp", plain), "overflow encountered in exp")]


def test_installing_twice_wraps_once():
    before = warnings._showwarnmsg
    numeric_warnings.install()
    assert warnings._showwarnmsg is before
