"""``dualbroadcast.scipy``: differentiable mirrors of the SciPy functions that are not ufuncs.

The ``scipy.special`` ufuncs (``erf``, ``gammaln``, ...) reach the tape by themselves through NumPy's
ufunc protocol.  ``scipy.special.logsumexp``, ``softmax``, ``log_softmax``, the ``scipy.stats``
distributions and ``scipy.signal.convolve``/``correlate`` do not: they are Python functions that call
``np.asarray`` (or ``xp.asarray``) on their arguments, which turns a tracked value into a plain array
and drops its gradient.  No NumPy protocol reaches the library from inside them, so they are mirrored
here with SciPy's own signatures::

    from dualbroadcast.scipy import integrate, linalg, signal, special, stats
    special.logsumexp(x, axis=1, b=w)      # was scipy.special.logsumexp(...)
    stats.norm.logpdf(x, loc=mu, scale=s)  # was scipy.stats.norm.logpdf(...)
    signal.convolve(x, k, mode="same")     # was scipy.signal.convolve(...)
    linalg.expm(A), linalg.solve_triangular(L, b, lower=True), linalg.cho_solve(linalg.cho_factor(S), b)
    integrate.solve_ivp(f, (0, 10), y0, t_eval=t, args=(p,))  # adjoint or forward-sensitivity gradients

>>> from dualbroadcast.scipy import special, stats
>>> db.gradient(lambda mu: stats.norm.logpdf(1.0, loc=mu), 0.25)
0.75
>>> db.gradient(lambda x: special.logsumexp(x), np.zeros(2))
array([0.5, 0.5])

Each mirror function is one tape operation (a `primitive` with its own reverse rule): on tracked
values it calls the SciPy function on the plain values, so the value is SciPy's to the last bit, and
records one pullback whose formula is written in ``special.py``, ``stats.py`` and ``signal.py``
(evaluated with ``scipy.special`` on plain arrays, so no ufunc derivative is needed).  Called on plain
arrays (no tracked argument) it is the SciPy function itself, and returns exactly what SciPy returns.
A parameter whose derivative SciPy cannot compute (the cdf of ``gamma`` in ``a``: the derivative of the
regularised incomplete gamma function in its parameter) is a clear error naming the arguments that are
differentiable.  The user guide's page on SciPy functions (``docs/guide/scipy.md``) says why this mechanism and not
SciPy's array-API dispatch.

SciPy is not a dependency of dualbroadcast: ``import dualbroadcast`` never imports it, and importing
this package without SciPy installed raises an ImportError that names it.
"""

try:
    import scipy  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised with scipy absent
    raise ImportError(
        "dualbroadcast.scipy mirrors SciPy functions and needs the package 'scipy', which is not "
        "installed; install it (pip install scipy), or use dualbroadcast without dualbroadcast.scipy"
    ) from error

from ..registry import register_lazy_rules

register_lazy_rules()  # the mirrors compute with scipy.special's partials (rules/scipy_special.py)

from . import integrate, linalg, signal, special, stats  # noqa: E402

__all__ = ["integrate", "linalg", "signal", "special", "stats"]
