"""db.explain reports the right modes, widths, active sets and kept bytes on known models."""

import html

import numpy as np
import pytest

import dualbroadcast as db
from benchmarks.models import COEFFICIENTS, eam_dualbroadcast, eam_numpy, poly9_all_uncut, poly9_one_uncut


def test_eam_with_sum_is_one_forward_kernel_keeping_one_partial():
    x = np.random.default_rng(0).random(100)
    report = db.explain(eam_dualbroadcast, x)
    first = report.operations[0]
    assert first.mode == "forward" and first.width == 1 and first.active == 1
    assert first.kept_bytes == x.nbytes  # ∂rho/∂x for every point, nothing else
    assert all(op.mode == "reverse" for op in report.operations[1:])
    assert report.value == pytest.approx(eam_numpy(x))
    scalars = sum(op.kept_bytes for op in report.operations[1:])
    assert scalars < 200 and report.total_kept_bytes == x.nbytes + scalars


def test_eam_as_plain_numpy_keeps_an_array_per_elementwise_step():
    x = np.random.default_rng(0).random(100)
    report = db.explain(eam_numpy, x)
    assert not report.forward_operations
    assert [op.name for op in report.operations[:4]] == ["np.add", "np.multiply", "np.exp", "np.sum"]
    assert report.operations[2].kept_bytes == x.nbytes  # exp keeps its value as its derivative
    assert report.total_kept_bytes > x.nbytes


@pytest.mark.parametrize("n", [1000, 100_000])
def test_poly9_one_uncut_coefficient_keeps_one_number_whatever_n(n):
    xs = np.random.default_rng(1).uniform(-1, 1, n)
    one = db.explain(poly9_one_uncut, COEFFICIENTS[2], db.cut(xs))
    (kernel,) = one.forward_operations
    assert kernel.width == 1 and kernel.kept_bytes == 8
    ten = db.explain(poly9_all_uncut, np.array(COEFFICIENTS), db.cut(xs))
    kernel = ten.forward_operations[0]
    assert kernel.width == 10 and kernel.kept_bytes == 10 * 8
    assert one.arguments[1].active_leaves == 0 and one.arguments[1].cut_leaves == 1


def test_constant_operand_is_kept_and_reported():
    c = np.arange(1000.0)
    report = db.explain(lambda x: np.sum(x * c), np.ones(1000))
    assert [(op.name, op.kept_bytes) for op in report.operations] == [("np.multiply", c.nbytes), ("np.sum", 0)]
    assert report.total_kept_bytes == c.nbytes


def test_text_and_html_views_show_every_operation():
    x = np.random.default_rng(0).random(10)
    report = db.explain(eam_dualbroadcast, x)
    text, page = str(report), report._repr_html_()
    assert text.count("\n") == len(report.operations) + 1
    assert "forward" in text and "reverse" in text and "kept for the backward pass" in text
    assert page.count("<tr>") == len(report.operations) + 1 and "sum(rho)" in page


def test_index_arrays_kept_by_an_indexing_pullback_are_counted():
    idx = np.arange(50)
    report = db.explain(lambda x: np.sum(x[idx]), np.ones(100))
    assert report.operations[0].name == "x[index]" and report.operations[0].kept_bytes == idx.nbytes


def test_pullbacks_held_as_partials_count_what_they_keep():
    """A dot pullback keeps the other operand (a column view here), a scalar one its partial."""
    X = np.random.default_rng(1).random((50, 3))
    report = db.explain(lambda X: np.dot(X[:, 0], X[:, 2]), X)
    assert [op.kept_bytes for op in report.operations] == [2 * 50 * 8]
    report = db.explain(lambda x: np.sin(x) * 3.0, np.float64(0.3))
    assert [op.kept_bytes for op in report.operations] == [8, 8]


def test_explain_of_hvp_and_hessian_names_the_composition_that_ran():
    """EAM's hvp is reverse over forward: one second-order kernel, then reverse mode over the scalars; the
    Hessian reverse over reverse; the value each recording computes."""
    x, v = np.random.default_rng(0).random(50), np.random.default_rng(1).random(50)
    report = db.explain(db.hvp, eam_dualbroadcast, x, v)
    assert report.composition.startswith("db.hvp: reverse over forward")
    first = report.operations[0]
    assert first.mode == "forward" and "second order: 1 second partials" in first.name  # value, tangent: one kernel
    assert report.value == pytest.approx(db.jvp(eam_dualbroadcast, (x,), (v,))[1])
    assert db.explain(db.hvp, eam_dualbroadcast, x, vectors=v).composition == report.composition
    assert report.composition in str(report) and html.escape(report.composition) in report._repr_html_()
    hessian = db.explain(db.hessian, eam_dualbroadcast, x[:5])
    assert hessian.composition.startswith("db.hessian: reverse over reverse")
    np.testing.assert_allclose(hessian.value, db.gradient(eam_dualbroadcast, x[:5]), rtol=1e-14)
    assert db.explain(eam_dualbroadcast, x).composition is None


def test_explain_of_hvp_says_why_forward_mode_refused():
    @db.primitive
    def cube(x):
        return x ** 3

    db.defvjp(cube, lambda ans, x: lambda g: 3 * g * x ** 2)
    db.defjvp(cube, lambda tangents, ans, x: 3 * np.asarray(x) ** 2 * tangents[0])  # not on tracked values
    f = lambda x: np.sum(cube(x) * np.sin(x))
    x, v = np.array([0.3, 1.2, -0.4]), np.array([1.0, -1.0, 0.5])
    report = db.explain(db.hvp, f, x, v)
    assert report.composition.startswith("db.hvp: reverse over reverse (the gradient of ⟨∇f, v⟩) (forward mode "
                                         "refused: the tangent of ")
    assert report.composition.endswith("cube cannot be computed on values a gradient tracks)")
    assert report.value == pytest.approx(np.dot(db.gradient(f, x), v))
    complex_report = db.explain(db.hvp, lambda z: np.sum(np.abs(z) ** 3), x + 1j, v + 0j)
    assert complex_report.composition.startswith("db.hvp: reverse over reverse")
    with pytest.raises(TypeError, match=r"only for db\.hvp"):
        db.explain(f, x, vectors=v)
