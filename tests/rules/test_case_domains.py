"""The rule cases draw each differentiated argument from negative values wherever the function has them.

A rule checked on a piece of its domain only passes with a wrong derivative elsewhere (scipy.special.i1e's
derivative with sign(x) dropped passed while its cases drew x from (0.1, 2)).  So a case whose function is
differentiable at negative values (probed here, the other arguments held inside their domains) must draw
some; a domain a pole splits is drawn in pieces (`cases.from_domain`).  A case that leaves them out on
purpose is named in `LEFT_OUT` with its reason.
"""

import numpy as np
import pytest

from ..cases import elementwise, scipy_special

NEGATIVE = (-1.7, -0.6)

# (function name, argument): a case that leaves the negative values out on purpose, and why.
LEFT_OUT = {
    ("power", 0): "a negative base is defined at integer exponents only (test_conventions' cases)",
    ("float_power", 0): "as power",
    ("powm1", 0): "as power",
    ("fmod", 0): "jumps where x / y is an integer (test_conventions.py draws every sign away from them)",
    ("fmod", 1): "as fmod's x",
    ("remainder", 0): "as fmod", ("remainder", 1): "as fmod",
    ("beta", 0): "poles where a, b or a + b is a non-positive integer, which independent draws would cross",
    ("beta", 1): "as beta's a",
    ("betaln", 0): "as beta", ("betaln", 1): "as beta",
    ("poch", 0): "poles of Γ(z) and Γ(z + m) that independent draws would cross", ("poch", 1): "as poch's z",
    ("binom", 0): "poles of Γ(n + 1) and Γ(n - k + 1) that independent draws would cross",
    ("binom", 1): "as binom's n",
    ("inv_boxcox", 0): "(1 + λx)^(1/λ) is defined for 1 + λx > 0 only, λ drawn from (-1, 1)",
    ("inv_boxcox1p", 0): "as inv_boxcox",
    ("xlogy", 1): "log y: defined for y > 0 (x = 0 makes NaN·0 look finite to the probe)",
}


def pieces(domain):
    """The intervals of a domain: one ``(low, high)``, or the tuple of them (`cases.from_domain`)."""
    return domain if type(domain[0]) is tuple else (domain,)


def probe_value(domain):
    """A value inside ``domain`` to hold an argument at while another is probed: inside its last (right-most)
    interval, off its middle (a middle of 0 would hide x · log y's domain)."""
    low, high = pieces(domain)[-1]
    return 0.37 * low + 0.63 * high


def intervals():
    """(name, function, argument, domain, other arguments' values) for every drawn domain."""
    found = []
    for func in elementwise.UNARY + list(elementwise.ARITY):
        arity = elementwise.ARITY.get(func, 1)
        domains = elementwise.DOMAINS.get(func, [(-2, 2)] * arity)
        found += [(func.__name__, func, k, d, [probe_value(e) for e in domains]) for k, d in enumerate(domains)]
    for func, spec in scipy_special.SPECS.items():
        held = [probe_value(s) if type(s) is tuple else 1.0 if s == scipy_special.N else s for s in spec]
        name = getattr(func, "__name__", repr(func))
        found += [(name, func, k, s, held) for k, s in enumerate(spec) if type(s) is tuple]
    return found


def differentiable_at(func, k, point, held):
    """Whether ``func`` is finite around ``point`` in argument ``k`` (its finite difference exists there)."""
    values = []
    for p in (point - 1e-4, point, point + 1e-4):
        args = [np.float64(p) if i == k else np.float64(m) for i, m in enumerate(held)]
        with np.errstate(all="ignore"):
            values.append(np.asarray(func(*args)))
    return all(np.all(np.isfinite(v)) for v in values)


def draws_negatives(domain):
    return any(low < -0.4 for low, _ in pieces(domain))


@pytest.mark.parametrize("name, func, k, domain, held", intervals(), ids=lambda v: v if type(v) is str else "")
def test_each_case_draws_negative_values_where_the_function_has_them(name, func, k, domain, held):
    if (name, k) in LEFT_OUT or draws_negatives(domain):
        return
    defined = [p for p in NEGATIVE if differentiable_at(func, k, p, held)]
    assert not defined, f"{name}'s argument {k} is drawn from {domain}, but {name} is differentiable at {defined}"


def test_domains_with_pieces_draw_from_every_piece():
    """`from_domain` draws each element from one of the pieces, both signs in one array."""
    from hypothesis import given
    from hypothesis import strategies as st

    from ..cases import from_domain

    seen = []

    @given(st.data())
    def draw(data):
        seen.append(from_domain(data.draw, (64,), np.float64, ((-2, -0.5), (0.5, 2))))

    draw()
    values = np.concatenate(seen)
    assert np.all((np.abs(values) >= 0.5) & (np.abs(values) <= 2)) and values.min() < -1 and values.max() > 1
