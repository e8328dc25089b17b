"""Complex numbers in JAX's and autograd's convention: for a real f of z = x + iy the gradient is
∂f/∂x - i ∂f/∂y; the pullback of a holomorphic h is ḡ h'(z), no conjugation.

Checked three ways: finite differences in x and y separately (written out here, not through
check_gradient), `jax.grad`/`jax.vjp` in complex128 (skipped without JAX), and by hand.
The rules' sweep in complex128 is in tests/rules/test_rules.py.
"""

import numpy as np
import pytest

import dualbroadcast as db

Z = np.array([1.0 + 2.0j, -0.5 + 0.3j, 2.0 - 1.5j])
A = np.array([[1.0 + 0.5j, 0.2 - 1.0j], [-0.3 + 0.1j, 1.5 + 0.2j]])


def wirtinger_differences(f, z, h=1e-6):
    """∂f/∂x - i ∂f/∂y of a real ``f`` at every element of ``z``, by central differences in x and y."""
    z = np.asarray(z, dtype=complex)
    g = np.zeros(z.shape, complex)
    for i in np.ndindex(z.shape):
        for direction, weight in ((1.0, 1.0), (1j, -1j)):
            up, down = z.copy(), z.copy()
            up[i] += direction * h
            down[i] -= direction * h
            g[i] += weight * (float(f(up)) - float(f(down))) / (2 * h)
    return g


def jax_numpy():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax, jax.numpy


# --- the user guide's example (docs/guide/complex.md) ----------------------------------------------
def squared_modulus(z):
    return np.abs(z) ** 2


def test_the_readme_example_by_hand_and_by_finite_differences_in_x_and_y():
    g = db.gradient(squared_modulus, 3 + 4j)
    assert type(g) is complex and g == pytest.approx(6 - 8j)  # 2 conj(z): ∂/∂x = 2x, ∂/∂y = 2y
    np.testing.assert_allclose(g, wirtinger_differences(lambda z: squared_modulus(z[()]), 3 + 4j), rtol=1e-7)


def test_the_readme_example_against_jax_grad():
    jax, jnp = jax_numpy()
    expected = jax.grad(lambda z: jnp.abs(z) ** 2)(jnp.complex128(3 + 4j))
    np.testing.assert_allclose(db.gradient(squared_modulus, 3 + 4j), complex(expected), rtol=1e-12)


# --- every complex rule against jax.vjp, with complex cotangents where the result is complex ----------
def cases(jnp):
    """(name, our function, JAX's function, arguments)."""
    B = A.T * (1 - 0.5j)
    return [
        ("real", np.real, jnp.real, (Z,)),
        ("imag", np.imag, jnp.imag, (Z,)),
        ("conj", np.conj, jnp.conj, (Z,)),
        ("conjugate method", lambda z: z.conjugate(), jnp.conjugate, (Z,)),
        ("real attribute", lambda z: z.real * z.imag, lambda z: z.real * z.imag, (Z,)),
        ("abs", np.abs, jnp.abs, (Z,)),
        ("angle", np.angle, jnp.angle, (Z,)),
        ("angle degrees", lambda z: np.angle(z, deg=True), lambda z: jnp.angle(z, deg=True), (Z,)),
        ("vdot", np.vdot, jnp.vdot, (Z, Z[::-1] * 1j)),
        ("vdot of a real and a complex", np.vdot, jnp.vdot, (Z.real, Z)),
        ("norm", np.linalg.norm, jnp.linalg.norm, (Z,)),
        ("norm ord 1", lambda z: np.linalg.norm(z, 1), lambda z: jnp.linalg.norm(z, 1), (Z,)),
        ("norm ord 3", lambda z: np.linalg.norm(z, 3), lambda z: jnp.linalg.norm(z, 3), (Z,)),
        ("matrix norm nuc", lambda a: np.linalg.norm(a, "nuc"), lambda a: jnp.linalg.norm(a, "nuc"), (A,)),
        ("matrix norm 2", lambda a: np.linalg.norm(a, 2), lambda a: jnp.linalg.norm(a, 2), (A,)),
        ("var", np.var, jnp.var, (Z,)),
        ("std", lambda z: np.std(z, ddof=1), lambda z: jnp.std(z, ddof=1), (Z,)),
        ("exp", np.exp, jnp.exp, (Z,)),
        ("log sqrt power", lambda z: np.log(z) * np.sqrt(z) ** 1.5, lambda z: jnp.log(z) * jnp.sqrt(z) ** 1.5, (Z,)),
        ("matmul", np.matmul, jnp.matmul, (A, B)),
        ("einsum", lambda a, b: np.einsum("ij,jk->ik", a, b), lambda a, b: jnp.einsum("ij,jk->ik", a, b), (A, B)),
        ("inv", np.linalg.inv, jnp.linalg.inv, (A,)),
        ("det", np.linalg.det, jnp.linalg.det, (A,)),
        ("solve", np.linalg.solve, jnp.linalg.solve, (A, Z[:2])),
        ("real times complex", lambda x, c: x * c, lambda x, c: x * c, (Z.real, Z)),
        ("real into exp(i x)", lambda x: np.exp(1j * x), lambda x: jnp.exp(1j * x), (Z.real,)),
        ("sum prod cumprod", lambda z: np.cumprod(z) * np.prod(z) + np.sum(z),
         lambda z: jnp.cumprod(z) * jnp.prod(z) + jnp.sum(z), (Z,)),
        ("indexing and stacking", lambda z: np.stack([z[::-1], z[0] * z]).T.reshape(-1),
         lambda z: jnp.stack([z[::-1], z[0] * z]).T.reshape(-1), (Z,)),
        ("concatenate real and complex", lambda x, z: np.concatenate([x, z]),
         lambda x, z: jnp.concatenate([x, z]), (Z.real, Z)),
        ("astype", lambda x: x.astype(complex) * 1j, lambda x: x.astype(complex) * 1j, (Z.real,)),
    ]


def cotangent_like(y, seed=3):
    rng = np.random.default_rng(seed)
    y = np.asarray(y)
    g = rng.standard_normal(y.shape)
    return (g + 1j * rng.standard_normal(y.shape)).astype(y.dtype) if np.iscomplexobj(y) else g.astype(y.dtype)


def assert_pullback_matches_jax(jax, jnp, name, ours, theirs, args):
    """``db.pullback`` of ``ours`` against ``jax.vjp`` of ``theirs``: value, and cotangents for a random complex
    cotangent (a real argument's cotangent must stay real)."""
    y, back = db.pullback(ours, *args)
    expected_y, jax_back = jax.vjp(theirs, *map(jnp.asarray, args))
    np.testing.assert_allclose(y, np.asarray(expected_y), rtol=1e-10, err_msg=name)
    ybar = cotangent_like(y)
    got = back(ybar)
    got = got if isinstance(got, tuple) else (got,)
    for g, e, a in zip(got, jax_back(jnp.asarray(ybar)), args):
        assert np.result_type(g) == np.result_type(a), name
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("index", range(30))
def test_pullback_matches_jax_vjp(index):
    jax, jnp = jax_numpy()
    all_cases = cases(jnp)
    if index >= len(all_cases):
        pytest.skip("no such case")
    assert_pullback_matches_jax(jax, jnp, *all_cases[index])


def test_there_are_no_more_cases_than_the_parametrization_covers():
    _, jnp = jax_numpy()
    assert len(cases(jnp)) <= 30


# --- conventions by hand ----------------------------------------------------------------------------
def test_gradient_of_a_real_function_is_df_dx_minus_i_df_dy():
    f = lambda z: np.sum(np.real(z) ** 3 * np.imag(z))
    expected = 3 * Z.real**2 * Z.imag - 1j * Z.real**3
    np.testing.assert_allclose(db.gradient(f, Z), expected, rtol=1e-12)
    np.testing.assert_allclose(db.gradient(f, Z), wirtinger_differences(f, Z), rtol=1e-6)


def test_pullback_of_a_holomorphic_function_is_the_cotangent_times_its_derivative_unconjugated():
    ybar = np.array([1.0 + 1.0j, -2.0j, 0.5])
    _, back = db.pullback(lambda z: np.sin(z) * z, Z)
    np.testing.assert_allclose(back(ybar), ybar * (np.cos(Z) * Z + np.sin(Z)), rtol=1e-12)


def test_abs_at_zero_is_zero_and_angle_at_zero_is_zero():
    z = np.array([0j, 1 + 1j])
    np.testing.assert_array_equal(db.gradient(lambda z: np.sum(np.abs(z)), z)[0], 0)
    np.testing.assert_array_equal(db.gradient(lambda z: np.sum(np.angle(z)), z)[0], 0)


def test_real_if_close_dropping_tiny_imaginary_parts_pulls_back_as_real():
    z = np.array([1.0 + 1e-20j, 2.0])
    y, back = db.pullback(np.real_if_close, z)
    assert not np.iscomplexobj(y)
    g = back(np.array([3.0, 4.0]))
    assert g.dtype == complex
    np.testing.assert_array_equal(g, [3.0, 4.0])


def test_jacobian_of_a_holomorphic_function_is_its_derivative():
    np.testing.assert_allclose(db.jacobian(lambda z: z**2, Z), np.diag(2 * Z), rtol=1e-12)


# --- dtypes, argument kinds, pytrees --------------------------------------------------------------------
@pytest.mark.parametrize("z", [Z.astype(np.complex64), Z, np.complex64(1 + 2j), np.complex128(1 + 2j), 1 + 2j],
                         ids=["complex64 array", "complex128 array", "complex64", "complex128", "python complex"])
def test_dtype_in_is_dtype_out(z):
    g = db.gradient(lambda z: np.sum(np.abs(z * z)), z)
    assert type(g) is type(z) and np.result_type(g) == np.result_type(z)
    db.check_gradient(lambda z: np.sum(np.abs(z * z)), z)


def test_complex_and_real_leaves_of_a_pytree():
    params = {"z": Z, "x": np.array([0.5, -1.0, 2.0]), "w": 0.5 + 1j, "s": 2.0}

    def f(p):
        return np.sum(np.abs(p["z"] * p["x"] + p["w"]) ** 2) * p["s"]

    g = db.gradient(f, params)
    assert g["z"].dtype == complex and g["x"].dtype == float and type(g["w"]) is complex and type(g["s"]) is float
    db.check_gradient(f, params)


def test_value_and_gradient_and_prepare_gradient_with_complex_arguments():
    f = lambda z, x: np.sum(np.abs(np.exp(z) * x) ** 2)
    x = np.array([1.0, 2.0, 3.0])
    value, (gz, gx) = db.value_and_gradient(f, Z, x)
    assert value == pytest.approx(f(Z, x))
    assert (gz.dtype, gx.dtype) == (Z.dtype, x.dtype)
    prog = db.prepare_gradient(f, Z, x)
    for scale in (1.0, 0.5):  # replayed: the same gradient on new arguments
        expected = db.gradient(f, Z * scale, x)
        got = prog(Z * scale, x)
        for a, b in zip(got, expected):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-12)
    assert prog.recordings == 1 and not prog.unreplayable


# --- errors ------------------------------------------------------------------------------------------------
def test_gradient_of_a_complex_result_is_an_error_naming_pullback():
    with pytest.raises(db.NonScalarOutputError, match=r"real-valued.*db\.pullback"):
        db.gradient(lambda z: np.sum(z**2), Z)


@pytest.mark.parametrize("f", [
    lambda z: np.sum(np.abs(np.maximum(z, 0.5))),
    lambda z: np.sum(np.abs(np.clip(z, 0, 1))),
    lambda z: np.sum(np.real(np.sign(z))),
    lambda z: np.sum(np.linalg.slogdet(np.outer(z, z) + np.eye(3))[1]),
], ids=["maximum", "clip", "sign", "slogdet"])
def test_a_function_without_a_complex_rule_is_an_error_on_complex_values(f):
    with pytest.raises(db.UnsupportedFunctionError, match="complex"):
        db.gradient(f, Z)


Z3 = np.array([0.3 + 0.4j, -0.5 + 1j, 1.1 - 0.2j, 0.7 + 3j, -0.4 + 1.5j])


def selections(np_):
    return {
        "max": lambda z: np_.abs(np_.max(z)) ** 2,
        "amin": lambda z: np_.real(np_.amin(z) * np_.amax(z) ** 2),
        "min axis": lambda z: np_.sum(np_.abs(np_.min(z.reshape(1, 5), axis=1, keepdims=True)) ** 3),
        "ptp": lambda z: np_.abs(np_.ptp(z)) ** 2,
        "nanmax": lambda z: np_.imag(np_.nanmax(z) ** 2),
        "maximum.reduce": lambda z: np_.abs(np_.maximum.reduce(z) * z[0]),
    }


@pytest.mark.parametrize("name", list(selections(np)))
def test_max_and_min_of_complex_values_select_by_numpy_order(name):
    f = selections(np)[name]
    g = db.gradient(f, Z3)
    np.testing.assert_allclose(g, wirtinger_differences(f, Z3), rtol=1e-7, atol=1e-8)
    v = np.array([1.0, -0.5 + 0.25j, 0.3 - 1j, 2j, 0.5])
    assert db.jvp(f, (Z3,), (v,))[1] == pytest.approx(np.real(np.sum(g * v)), rel=1e-12)
    jax, jnp = jax_numpy()
    np.testing.assert_allclose(g, np.asarray(jax.grad(selections(jnp)[name])(jnp.asarray(Z3))), rtol=1e-12)


def test_max_and_min_of_complex_values_with_equal_real_parts_select_by_the_imaginary_part():
    """NumPy's order of complex numbers (JAX's too): the real part, then the imaginary part.  Equal real parts are a
    kink (no finite differences): the gradient is the selected element's."""
    z = np.array([1.1 - 0.2j, 1.1 + 0.5j, -0.5 + 1j, -0.5 + 1.5j])
    assert np.max(z) == z[1] and np.min(z) == z[2]
    f = lambda z: np.abs(np.max(z)) ** 2 + np.real(np.min(z) ** 3)
    want = np.array([0, 2 * np.conjugate(z[1]), 3 * z[2] ** 2, 0])  # |w|²: 2 conj(w); Re h(w), h holomorphic: h'(w)
    np.testing.assert_allclose(db.gradient(f, z), want, rtol=1e-13)
    jax, jnp = jax_numpy()
    theirs = jax.grad(lambda z: jnp.abs(jnp.max(z)) ** 2 + jnp.real(jnp.min(z) ** 3))(jnp.asarray(z))
    np.testing.assert_allclose(db.gradient(f, z), np.asarray(theirs), rtol=1e-13)


def test_a_wrong_complex_rule_is_caught_by_check_gradient():
    """A rule that conjugates where it must not (or forgets to) is off by the convention: the finite
    differences in x and y see it."""
    @db.primitive
    def square(z):
        return z * z

    db.defvjp(square, lambda ans, z: lambda g: g * 2 * np.conj(z))
    with pytest.raises(db.GradientMismatchError):
        db.check_gradient(lambda z: np.sum(np.abs(square(z))), Z)
    db.defvjp(square, lambda ans, z: lambda g: g * 2 * z)
    db.check_gradient(lambda z: np.sum(np.abs(square(z))), Z)


# --- kernels: holomorphic functions of complex numbers (every backend: tests/kernels/test_complex_kernels.py) -----
KERNELS = {
    "polynomial": lambda a: a**3 - 2 * a + 1j,
    "exp sin": lambda a: np.exp(a) * np.sin(a) / (1 + a * a),
    "log sqrt": lambda a: np.log(a) + np.sqrt(a) ** 1.5,
    "tanh arcsinh": lambda a: np.tanh(a) - np.arcsinh(a),
}


@pytest.mark.parametrize("reduce", [False, True], ids=["broadcast", "sum"])
@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("backend", [None, "numexpr", "blocked"])
def test_a_holomorphic_kernel_of_complex_values_pulls_back_like_plain_numpy(name, reduce, backend):
    h = KERNELS[name]
    z = np.random.default_rng(1).uniform(0.5, 2, 40) + 1j * np.random.default_rng(2).uniform(-1, 1, 40)
    kernel = db.sum if reduce else db.broadcast
    real_function = lambda z: np.sum(np.abs(kernel(h, z, backend=backend) * (1 - 0.5j)) ** 2)
    plain = lambda z: np.sum(np.abs((np.sum(h(z)) if reduce else h(z)) * (1 - 0.5j)) ** 2)
    np.testing.assert_allclose(db.gradient(real_function, z), db.gradient(plain, z), rtol=1e-10)
    db.check_gradient(real_function, z)


def test_a_kernel_keeps_complex64_and_a_real_argument_gets_a_real_gradient():
    z = Z.astype(np.complex64)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    f = lambda z, x: np.sum(np.abs(db.broadcast(lambda a, r: a * r + np.exp(1j * r), z, x)) ** 2)
    gz, gx = db.gradient(f, z, x)
    assert (gz.dtype, gx.dtype) == (np.complex64, np.float32)
    db.check_gradient(f, z, x)


def test_a_prepared_gradient_replays_a_complex_kernel():
    f = lambda x: np.sum(np.abs(db.broadcast(lambda r: np.exp(1j * r) * r, x)) ** 3)
    x = np.array([0.5, 1.0, 2.0])
    prog = db.prepare_gradient(f, x)
    for scale in (1.0, 1.5):
        np.testing.assert_allclose(prog(x * scale), db.gradient(f, x * scale), rtol=1e-12)
    assert prog.recordings == 1 and not prog.unreplayable


def test_a_kernel_of_two_complex_arguments_whose_partials_compare_values():
    """x ** y's partial in y holds ``x == 0``: the partials' own comparisons are allowed, the value's are not."""
    w = Z[::-1] * 0.5
    f = lambda z, w: np.abs(db.sum(lambda a, b: a**b, z, w)) ** 2
    expected = db.gradient(lambda z, w: np.abs(np.sum(z**w)) ** 2, Z, w)
    for got, e in zip(db.gradient(f, Z, w), expected):
        np.testing.assert_allclose(got, e, rtol=1e-10)


# --- the derivative table's holomorphic entries across the whole plane -----------------------------------
def holomorphic_table_functions():
    from dualbroadcast.derivatives import DERIVATIVES
    from dualbroadcast.registry import COMPLEX_RULES, SAME_RULE

    return [f for f in DERIVATIVES if COMPLEX_RULES.get(f) is SAME_RULE and f is not np.where]


@pytest.mark.parametrize("func", holomorphic_table_functions(), ids=lambda f: f.__name__)
def test_a_holomorphic_table_entry_is_its_complex_derivative_in_every_quadrant(func):
    from dualbroadcast.derivatives import DERIVATIVES

    """The rule sweep draws values in each function's real domain; here every quadrant, where a formula
    right for reals can pick the wrong branch (arccosh's 1/√(x²-1) did, left of the imaginary axis)."""
    rng = np.random.default_rng(7)
    points = rng.uniform(-3, 3, 16) + 1j * rng.uniform(-3, 3, 16)
    partials = DERIVATIVES[func]
    constants = [0.5, 1.5, 2.5][: func.nin - 1]  # an order or parameters without a partial (jv's v, hyp2f1's a, b, c)
    for z in points:
        values = [z, 0.3 * z + 0.2j][: func.nin] if partials[0] is not None else [*constants, z]

        def f(*a, kernel=False):
            it = iter(a)
            full = [next(it) if d is not None else v for d, v in zip(partials, values)]
            return np.real((db.sum(func, *full) if kernel else func(*full)) * (0.3 - 0.7j))

        args = [v for d, v in zip(partials, values) if d is not None]
        db.check_gradient(f, *args)
        db.check_gradient(lambda *a: f(*a, kernel=True), *args)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_python_complex_times_a_numpy_float_scalar_is_recorded(dtype):
    """``1j * s`` of an np.float64 scalar is a Python complex (Python's complex multiplies it): recorded as
    np.complex128, not an error (found by tests/test_random_programs)."""
    x = np.array([0.3, -1.1], dtype)
    f = lambda x: np.real(np.exp(1j * np.sum(x))) + np.imag(np.sum(x) * 2j)
    g = db.gradient(f, x)
    assert g.dtype == dtype
    np.testing.assert_allclose(g, -np.sin(np.sum(x)) + 2, rtol=1e-5)
    db.check_gradient(f, x)


# --- complex linear algebra and signal functions that conjugate an argument (or are linear in a complex fp) -------
def conjugating_cases(jnp):
    """(name, our function, JAX's function, arguments): each pullback compared with jax.vjp below."""
    rng = np.random.default_rng(11)

    def complex_normal(*shape):
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)

    x1, x2, m = complex_normal(2, 3, 4), complex_normal(3, 4), complex_normal(4, 5)
    xp = np.sort(rng.uniform(0, 5, 6))
    x, fp = rng.uniform(-1, 6, 7), complex_normal(6)
    a, v, w = complex_normal(5), complex_normal(3), complex_normal(7)
    return [
        ("vecdot", np.vecdot, jnp.vecdot, (x1, x2)),
        ("vecdot of a real and a complex", np.vecdot, jnp.vecdot, (x1.real, x2)),
        ("linalg.vecdot axis 0", lambda p, q: np.linalg.vecdot(p, q, axis=0),
         lambda p, q: jnp.linalg.vecdot(p, q, axis=0), (x1, complex_normal(2, 1, 4))),
        ("vecmat", np.vecmat, jnp.vecmat, (x1[:, 0, :], m)),
        ("matvec", np.matvec, jnp.matvec, (m.T, x1[:, 0, :])),
        *[(f"correlate {mode} {len(p)},{len(q)}", lambda p, q, mode=mode: np.correlate(p, q, mode),
           lambda p, q, mode=mode: jnp.correlate(p, q, mode), (p, q))
          for mode in ("valid", "same", "full") for p, q in ((a, v), (v, a), (a.real, w[:5]))],
        ("interp in x, xp and a complex fp", np.interp, jnp.interp, (x, xp, fp)),
        ("interp with complex left and right", lambda x, fp: np.interp(x, xp, fp, left=1j, right=2 - 1j),
         lambda x, fp: jnp.interp(x, xp, fp, left=1j, right=2 - 1j), (x, fp)),
        ("matrix_power", lambda p: np.linalg.matrix_power(p, 3), lambda p: jnp.linalg.matrix_power(p, 3),
         (complex_normal(2, 3, 3),)),
        ("cross", np.cross, jnp.cross, (complex_normal(2, 3), complex_normal(3))),
        ("tensorinv", lambda p: np.linalg.tensorinv(p, ind=1), lambda p: jnp.linalg.tensorinv(p, ind=1),
         (complex_normal(6, 2, 3) + 3 * np.eye(6).reshape(6, 2, 3),)),
    ]


@pytest.mark.parametrize("index", range(20))
def test_conjugating_pullback_matches_jax_vjp(index):
    jax, jnp = jax_numpy()
    all_cases = conjugating_cases(jnp)
    if index >= len(all_cases):
        pytest.skip("no such case")
    assert_pullback_matches_jax(jax, jnp, *all_cases[index])


def test_there_are_no_more_conjugating_cases_than_the_parametrization_covers():
    _, jnp = jax_numpy()
    assert len(conjugating_cases(jnp)) <= 20
