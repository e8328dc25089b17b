"""Every rule sees its arguments exactly as NumPy does, in every calling form.

A vjp maker is called as ``maker(ans, *args, **kwargs)`` with the arguments as the user wrote them,
so a keyword reaches the maker by NumPy's name.  A maker that names a parameter otherwise, or
swallows keywords with ``**kwargs``, computes a gradient for arguments the user did not pass: the
clip rule named its bounds ``lo``/``hi``, so ``np.clip(x, a_min=0.1, a_max=1.1)`` had gradient 1
everywhere.  The signature of each maker is compared with its function's here; ``tests/rules/test_rules.py``
draws every case in the calling forms NumPy accepts.
"""

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.numpy_facts import qualified_name
from dualbroadcast.registry import COMPLEX_RULES, COMPOSITION, OUTPUTS, PER_ARGUMENT, RULES, SAME_RULE
from dualbroadcast.rules import BUILTIN_RULES
from dualbroadcast.tracked import Tracked

from ..cases.elementwise import DOMAINS

P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
# The keywords of a ufunc call, which the tape accepts or rejects itself (a maker never decides).
UFUNC_KEYWORDS = {"out", "where", "casting", "order", "dtype", "subok", "signature"}
# What NumPy does when a parameter whose default is np._NoValue is not given: the maker's default must mean it.
ABSENT = {
    "keepdims": False, "initial": None, "where": True, "mean": None, "correction": None,
    "a_min": None, "a_max": None, "min": None, "max": None,
    "prepend": None, "append": None,  # np.diff: nothing added
}


def makers_of(rule):
    """The vjp makers of ``rule``, each with the number of arguments it takes before NumPy's (ans; or the
    argument, part or output number and ans; none for a composition)."""
    if rule.kind == PER_ARGUMENT:
        return [(m, 1) for m in rule.makers if m is not None]
    if rule.kind == COMPOSITION:  # the function written with NumPy calls: NumPy's own signature
        return [(rule.makers, 0)]
    if rule.kind == OUTPUTS:  # one maker per argument, (j, ans, ...)
        return [(m, 2) for m in rule.makers if m is not None]
    return [(rule.makers, 2)]


def numpy_parameters(func):
    """The parameters of ``func`` a maker must accept as NumPy does: a ufunc's inputs only (the tape
    handles its keywords)."""
    parameters = list(inspect.signature(func).parameters.values())
    if isinstance(func, np.ufunc):
        return [p for p in parameters if p.kind is P.POSITIONAL_ONLY]
    return parameters


def takes_only_vetted_keywords(func):
    """Whether every keyword NumPy accepts for ``func`` is vetted by the tape (a ufunc's own) or there is none."""
    parameters = inspect.signature(func).parameters.values()
    named = {p.name for p in parameters if p.kind is not P.POSITIONAL_ONLY}
    return named <= UFUNC_KEYWORDS if isinstance(func, np.ufunc) else not named


def signature_mismatches(func, maker, leading):
    """How ``maker``'s signature (after ``leading`` arguments) fails to bind every call of ``func`` as NumPy does."""
    theirs = numpy_parameters(func)
    ours = list(inspect.signature(maker).parameters.values())[leading:]
    by_name = {p.name: p for p in ours}
    problems = []
    rest = next((i for i, p in enumerate(ours) if p.kind is P.VAR_POSITIONAL), len(ours))  # ours[rest:] take the rest
    for i, p in enumerate(q for q in theirs if q.kind in POSITIONAL):
        if i >= rest:
            break
        if i >= len(ours) or ours[i].kind not in POSITIONAL:
            problems.append(f"positional argument {i} ({p.name}) is not taken positionally")
        elif p.kind is P.POSITIONAL_OR_KEYWORD and (ours[i].name, ours[i].kind) != (p.name, p.kind):
            problems.append(f"positional argument {i} is {ours[i].name!r}, NumPy's is {p.name!r}")
    for p in theirs:
        mine = by_name.get(p.name)
        if p.kind is P.VAR_POSITIONAL and rest == len(ours):
            problems.append(f"*{p.name} is not taken")
        if p.kind is P.KEYWORD_ONLY and (mine is None or mine.kind is not P.KEYWORD_ONLY):
            problems.append(f"keyword-only {p.name!r} is not taken by that name, keyword-only")
        if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY) and mine is not None and p.default is not P.empty:
            expected = p.default if mine.default is np._NoValue else ABSENT.get(p.name, "?") \
                if p.default is np._NoValue else p.default  # a maker may take NumPy's own np._NoValue
            if mine.default is P.empty or type(mine.default) is not type(expected) or mine.default != expected:
                problems.append(f"{p.name}'s default is {mine.default!r}, NumPy's means {expected!r}")
    if any(p.kind is P.VAR_KEYWORD for p in ours) and not takes_only_vetted_keywords(func) \
            and not any(p.kind is P.VAR_KEYWORD for p in theirs):  # NumPy's own **kwargs, handed on (apply_along_axis)
        problems.append("it takes **kwargs, so keywords it does not know are ignored instead of rejected")
    return problems


def rule_id(func):
    return qualified_name(func)


@pytest.mark.parametrize("func", sorted(BUILTIN_RULES, key=rule_id), ids=rule_id)
def test_every_maker_binds_the_arguments_as_numpy_does(func):
    problems = [
        f"{getattr(maker, '__qualname__', maker)}: {problem}"
        for maker, leading in makers_of(RULES[func])
        for problem in signature_mismatches(func, maker, leading)
    ]
    assert not problems, f"{qualified_name(func)}{inspect.signature(func)}:\n" + "\n".join(problems)


OWN_COMPLEX_RULES = sorted((f for f, rule in COMPLEX_RULES.items() if rule is not SAME_RULE), key=rule_id)


@pytest.mark.parametrize("func", OWN_COMPLEX_RULES, ids=rule_id)
def test_every_complex_rule_maker_binds_the_arguments_as_numpy_does(func):
    problems = [
        f"{getattr(maker, '__qualname__', maker)}: {problem}"
        for maker, leading in makers_of(COMPLEX_RULES[func])
        for problem in signature_mismatches(func, maker, leading)
    ]
    assert not problems, f"{qualified_name(func)}{inspect.signature(func)}:\n" + "\n".join(problems)


def test_the_signature_check_finds_the_clip_rule_that_ignored_keyword_bounds():
    """The check fails on the makers clip had: bounds named lo/hi, and a maker swallowing keywords."""

    def named_otherwise(ans, x, lo=None, hi=None):
        pass

    def swallowing(ans, *args, **kwargs):
        pass

    assert signature_mismatches(np.clip, named_otherwise, 1)
    assert signature_mismatches(np.clip, swallowing, 1)
    assert not signature_mismatches(np.clip, RULES[np.clip].makers[0], 1)


# --- np.clip in every calling form ------------------------------------------------------------------------------
X = np.linspace(-1.0, 2.0, 13)
LOWER, UPPER = 0.1, 1.1

CLIP_FORMS = {
    "positional": lambda x: np.clip(x, LOWER, UPPER),
    "a_min= a_max=": lambda x: np.clip(x, a_min=LOWER, a_max=UPPER),
    "a_min positional, a_max=": lambda x: np.clip(x, LOWER, a_max=UPPER),
    "min= max=": lambda x: np.clip(x, min=LOWER, max=UPPER),
    "out=None": lambda x: np.clip(x, LOWER, UPPER, None),
    "method": lambda x: x.clip(LOWER, UPPER),
    "method min= max=": lambda x: x.clip(min=LOWER, max=UPPER),
}
LOWER_ONLY = {
    "positional None": lambda x: np.clip(x, LOWER, None),
    "a_max=None": lambda x: np.clip(x, a_min=LOWER, a_max=None),
    "min=": lambda x: np.clip(x, min=LOWER),
    "method min=": lambda x: x.clip(min=LOWER),
}
UPPER_ONLY = {
    "positional None": lambda x: np.clip(x, None, UPPER),
    "a_min=None": lambda x: np.clip(x, a_min=None, a_max=UPPER),
    "max=": lambda x: np.clip(x, max=UPPER),
}


def clip_gradient(x, lower, upper):
    """d Σ clip(x) / dx by hand: 1 strictly between the bounds (X has no point on a bound)."""
    return ((x > lower) & (x < upper)).astype(x.dtype)


@pytest.mark.parametrize(
    "form, lower, upper",
    [(f, LOWER, UPPER) for f in CLIP_FORMS.values()]
    + [(f, LOWER, np.inf) for f in LOWER_ONLY.values()]
    + [(f, -np.inf, UPPER) for f in UPPER_ONLY.values()],
    ids=[*CLIP_FORMS, *(f"lower only, {k}" for k in LOWER_ONLY), *(f"upper only, {k}" for k in UPPER_ONLY)],
)
def test_clip_gradient_in_every_calling_form(form, lower, upper):
    np.testing.assert_array_equal(form(X), np.clip(X, lower, upper))  # the form means these bounds
    np.testing.assert_array_equal(db.gradient(lambda x: np.sum(form(x)), X), clip_gradient(X, lower, upper))


@pytest.mark.parametrize("form", [CLIP_FORMS[k] for k in list(CLIP_FORMS)[:4]], ids=list(CLIP_FORMS)[:4])
def test_clip_gradient_in_every_calling_form_in_a_kernel(form):
    np.testing.assert_array_equal(db.sum(form, X), np.sum(np.clip(X, LOWER, UPPER)))
    np.testing.assert_array_equal(db.gradient(lambda x: db.sum(form, x), X), clip_gradient(X, LOWER, UPPER))
    np.testing.assert_array_equal(db.gradient(lambda x: db.sum(form, x), X), clip_gradient(X, LOWER, UPPER))


def test_clip_keywords_it_cannot_honour_are_an_error():
    """np.clip passes other keywords to its ufuncs: ``where=`` leaves elements uninitialised."""
    with pytest.raises(db.DifferentiationError, match="where"):
        db.gradient(lambda x: np.sum(np.clip(x, LOWER, UPPER, where=x > 0)), X)


# --- var and std's keyword-only mean= and correction= ------------------------------------------------------------
M = np.array([[0.3, -1.2, 2.0], [1.5, 0.4, -0.7]])


@pytest.mark.parametrize("func", [np.var, np.std], ids=rule_id)
def test_var_and_std_correction_is_ddof(func):
    expected = db.gradient(lambda m: func(m, axis=1, ddof=1)[0], M)
    np.testing.assert_allclose(db.gradient(lambda m: func(m, axis=1, correction=1)[0], M), expected, rtol=1e-12)


def test_var_with_a_given_mean_treats_it_as_a_constant():
    """NumPy uses ``mean=`` as given: var = Σ (x - mean)² / (n - ddof), so ∂/∂x = 2 (x - mean) / (n - ddof)."""
    mean = np.array([[0.5], [-0.25]])  # not the mean of M's rows: the formula, not a coincidence, is checked
    g = db.gradient(lambda m: np.sum(np.var(m, axis=1, ddof=1, mean=mean)), M)
    np.testing.assert_allclose(g, 2 * (M - mean) / (M.shape[1] - 1), rtol=1e-12)
    db.check_gradient(lambda m: np.sum(np.std(m, axis=1, mean=mean)), M)


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_var_and_std_with_a_differentiated_mean_match_jax(shape, data):
    """``np.var(x, mean=m)`` with ``m`` tracked (NumPy's formula with NumPy calls): the gradients in x and m, with
    the reduced axes, ddof, keepdims and where= drawn, equal JAX's (whose jnp.var takes mean= too)."""
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    x = rng.uniform(-2, 2, shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)), label="axis")
    reduced = np.sum(x, axis=axis, keepdims=True).shape
    m = rng.uniform(-1, 1, reduced)  # keepdims-shaped, as NumPy requires
    ddof, keepdims = data.draw(st.sampled_from([0, 1]), label="ddof"), data.draw(st.booleans(), label="keepdims")
    where = rng.uniform(size=shape) < 0.8 if data.draw(st.booleans(), label="masked") else True
    func = data.draw(st.sampled_from(["var", "std"]), label="func")
    weights = rng.uniform(size=np.sum(x, axis=axis, keepdims=keepdims).shape)

    def loss(n, x, m):
        return n.sum(weights * getattr(n, func)(x, axis=axis, ddof=ddof, keepdims=keepdims, where=where, mean=m))

    with jax.enable_x64(True):
        expected = jax.grad(lambda x, m: loss(jax.numpy, x, m), argnums=(0, 1))(x, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        finite = np.isfinite(loss(np, x, m))
    if not finite:  # a slice with n - ddof = 0 elements: nan in both
        return
    for got, want in zip(db.gradient(lambda x, m: loss(np, x, m), x, m), expected):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-12)


def test_var_with_a_differentiated_mean_in_forward_mode_and_second_order():
    """The composition's calls have jvp rules and are differentiable again: db.jvp and db.hvp agree with the
    formula var = Σ (x - m)² / (n - 1), whose ∂/∂m = -2 Σ (x - m) / (n - 1) and ∂²/∂m² = 2n / (n - 1)."""
    mean = np.array([[0.5], [-0.25]])
    n = M.shape[1]
    _, tangent = db.jvp(lambda m: np.sum(np.var(M, axis=1, ddof=1, mean=m)), (mean,), (np.ones_like(mean),))
    np.testing.assert_allclose(tangent, np.sum(-2 * (M - mean) / (n - 1)), rtol=1e-12)
    curvature = db.hvp(lambda m: np.sum(np.var(M, axis=1, ddof=1, mean=m)), mean, vectors=np.ones_like(mean))
    np.testing.assert_allclose(curvature, np.full_like(mean, 2 * n / (n - 1)), rtol=1e-12)


# --- ufunc keywords: the tape's, never ignored by a maker ------------------------------------------------------
UFUNCS = sorted((f for f in BUILTIN_RULES if isinstance(f, np.ufunc)), key=rule_id)


def ufunc_inputs(ufunc):
    """Arrays inside ``ufunc``'s domain (2 x 2 matrices for matmul)."""
    rng = np.random.default_rng(0)
    if ufunc in (np.matvec, np.vecmat):  # a matrix and a vector
        return [rng.uniform(-2, 2, size=s) for s in ([(2, 3), (3,)] if ufunc is np.matvec else [(2,), (2, 3)])]
    shape = (2, 2) if ufunc is np.matmul else (3,)
    domains = DOMAINS.get(ufunc, [(-2, 2)] * ufunc.nin)
    # a domain a pole or a kink splits is a tuple of intervals (`cases.from_domain`): its last piece here
    return [rng.uniform(*(d[-1] if type(d[0]) is tuple else d), size=shape) for d in domains]


def sum_of(ufunc, inputs, **keywords):
    """``(f, *arrays)``: the sum of ``ufunc``'s (first) output as a function of the inputs it differentiates,
    the others (an order, a divisor of np.divmod) constants."""
    rule = RULES[ufunc]
    active = [m is not None for m in rule.makers] if rule.kind == PER_ARGUMENT else [i == 0 for i in range(ufunc.nin)]

    try:
        ufunc(*inputs)
    except TypeError:  # an integer argument (np.ldexp's exponent, a polynomial's degree)
        inputs = [x if a else np.round(np.abs(x)).astype(np.int64) for a, x in zip(active, inputs)]

    def f(*arrays):
        it = iter(arrays)
        out = ufunc(*[next(it) if a else x for a, x in zip(active, inputs)], **keywords)
        return np.real(np.sum(out[0] if ufunc.nout > 1 else out))  # scipy.special.wofz's is complex

    return f, *[x for a, x in zip(active, inputs) if a]


def ufunc_keywords_at_their_defaults(ufunc):
    parameters = inspect.signature(ufunc).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is P.KEYWORD_ONLY and p.default is not np._NoValue}


@pytest.mark.parametrize("ufunc", UFUNCS, ids=rule_id)
def test_a_ufunc_keyword_gives_the_same_gradient_or_a_clear_error(ufunc):
    inputs = ufunc_inputs(ufunc)
    expected = db.gradient(*sum_of(ufunc, inputs))
    for name, default in ufunc_keywords_at_their_defaults(ufunc).items():
        try:
            got = db.gradient(*sum_of(ufunc, inputs, **{name: default}))
        except db.DifferentiationError:
            continue
        for g, e in zip(got, expected):  # one gradient per input, of its own shape
            np.testing.assert_array_equal(g, e, err_msg=f"{qualified_name(ufunc)}(..., {name}={default!r})")


@pytest.mark.parametrize("ufunc", [f for f in UFUNCS if f.signature is None], ids=rule_id)  # gufuncs take no where=
def test_a_ufunc_where_mask_is_an_error(ufunc):
    inputs = ufunc_inputs(ufunc)
    mask = np.arange(3) > 0
    with pytest.raises(db.DifferentiationError):
        db.gradient(*sum_of(ufunc, inputs, where=mask))


# --- methods of tracked values ------------------------------------------------------------------------------------
def methods_of_ndarray():
    """The methods of Tracked that stand for ndarray's, with a signature to compare."""
    names = {n for cls in Tracked.__mro__[:-1] for n, v in vars(cls).items()  # its own and its bases' (guards)
             if callable(v) and not n.startswith("_") and hasattr(np.ndarray, n)}
    return sorted(n for n in names if _has_signature(getattr(np.ndarray, n)))


def _has_signature(method):
    try:
        inspect.signature(method)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", methods_of_ndarray())
def test_every_method_takes_ndarrays_keywords(name):
    """A method of a tracked value forwards what it does not name (``*args, **kwargs``) or names all ndarray's."""
    ours = inspect.signature(getattr(Tracked, name)).parameters.values()
    if any(p.kind is P.VAR_KEYWORD for p in ours):
        return  # forwarded to the NumPy function, which binds them
    theirs = inspect.signature(getattr(np.ndarray, name)).parameters.values()
    missing = {p.name for p in theirs if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)} - {p.name for p in ours}
    assert not missing, f"x.{name} does not take {sorted(missing)}"


# --- tracked values passed by keyword ----------------------------------------------------------------------------
def test_a_tracked_value_by_keyword_is_differentiated():
    np.testing.assert_array_equal(db.gradient(lambda x: np.sum(a=x), X), np.ones_like(X))


W = np.linspace(0.5, 3.0, 13)


@pytest.mark.parametrize("mode", ["gradient", "prepared", "jvp"])
def test_average_weights_by_keyword_equal_them_by_position(mode):
    """np.average(x, weights=w), the form NumPy users write, in every mode: the same derivatives as
    np.average(x, None, w), which equal the quotient rule's by hand."""
    by_name = lambda x, w: np.average(x, weights=w)
    by_position = lambda x, w: np.average(x, None, w)
    by_hand = (W / np.sum(W), (X - np.sum(W * X) / np.sum(W)) / np.sum(W))
    if mode == "jvp":
        tx, tw = np.cos(X), np.sin(W)
        _, tangent = db.jvp(by_name, (X, W), (tx, tw))
        np.testing.assert_allclose(tangent, by_hand[0] @ tx + by_hand[1] @ tw, rtol=1e-12)
        return
    gradient_of = db.gradient if mode == "gradient" else lambda f, *a: db.prepare_gradient(f, *a)(*a)
    for got, want, hand in zip(gradient_of(by_name, X, W), gradient_of(by_position, X, W), by_hand):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, hand, rtol=1e-12)


def test_bounds_by_keyword_are_differentiated_in_every_spelling():
    """a_min=/a_max= (NumPy's positional-or-keyword names) and NumPy 2's keyword-only min=/max=: the gradient
    in a bound counts the elements it clips."""
    for f in (lambda x, t: np.sum(np.clip(x, a_min=-t, a_max=t)), lambda x, t: np.sum(np.clip(x, max=t, min=-t)),
              lambda x, t: np.sum(np.clip(x, -t, a_max=t))):
        gx, gt = db.gradient(f, X, 0.6)
        np.testing.assert_array_equal(gx, (np.abs(X) < 0.6).astype(float))
        assert gt == np.sum(X >= 0.6) - np.sum(X <= -0.6)


def test_array_keywords_of_interp_and_convolve_are_differentiated():
    xp, fp = np.array([0.0, 1.0, 2.5]), np.array([1.0, 3.0, 2.0])
    for got, want in zip(db.gradient(lambda xp, fp: np.sum(np.interp(x=X, xp=xp, fp=fp)), xp, fp),
                         db.gradient(lambda xp, fp: np.sum(np.interp(X, xp, fp)), xp, fp)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(db.gradient(lambda a, v: np.sum(np.convolve(a=a, v=v) ** 2), X, W[:3]),
                         db.gradient(lambda a, v: np.sum(np.convolve(a, v) ** 2), X, W[:3])):
        np.testing.assert_array_equal(got, want)


def test_a_tracked_keyword_without_a_position_or_rule_is_a_clear_error():
    with pytest.raises(db.UnsupportedFunctionError,
                       match=r"np\.nanvar got a tracked value as its argument 'mean'.*cut"):
        db.gradient(lambda x, m: np.nanvar(x, mean=m), X, 0.5)


def test_a_tracked_out_is_a_clear_error():
    with pytest.raises(db.InPlaceMutationError, match=r"np\.dot with out="):
        db.gradient(lambda a, b: np.sum(np.dot(a, b, out=b)), X, W)


def test_a_sequence_of_tracked_values_by_keyword_is_a_clear_error_or_right():
    try:
        g = db.gradient(lambda x: np.sum(np.stack(arrays=[x, 2 * x])), X)
    except db.DifferentiationError:
        return
    np.testing.assert_array_equal(g, np.full_like(X, 3.0))
