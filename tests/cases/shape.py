"""Cases for the shape and indexing rules: every function, over drawn shapes, axes and indices."""

import warnings

import numpy as np
from hypothesis import strategies as st

from dualbroadcast import pullbacks
from dualbroadcast.numpy_facts import astype, getitem

from . import Case, X, Y, Z, array_shape, broadcast_shapes, call, uniform


def axis_of(draw, ndim):
    """One axis of an ``ndim``-d array, negative or not."""
    return draw(st.integers(-ndim, ndim - 1))


def permutation(draw, ndim):
    return tuple(draw(st.permutations(range(ndim))))


def indices(draw, n, size_range=(1, 6)):
    """Integer indices into an axis of length ``n``, negative ones and repeats included."""
    return draw(st.lists(st.integers(-n, n - 1), min_size=size_range[0], max_size=size_range[1]))


def mask(draw, shape_):
    """A constant boolean mask of ``shape_`` (may select nothing)."""
    return uniform(draw, shape_, np.float64) > 0


def one_array(fn, min_dims=1, max_dims=3, min_side=1):
    """A build for ``fn(draw, x_shape) -> f`` applied to one drawn array."""

    def build(draw, dtype):
        s = array_shape(draw, min_dims, max_dims, min_side)
        return fn(draw, s), [uniform(draw, s, dtype)]

    return build


def parts_along(draw, dtype, axis_shape, count):
    """``count`` arrays that differ only in the length of ``axis_shape``'s axis marked None."""
    return [
        uniform(draw, tuple(draw(st.integers(1, 3)) if n is None else n for n in axis_shape), dtype)
        for _ in range(count)
    ]


# --- regrouping and permuting axes -------------------------------------------------------
def build_reshape(draw, s):
    target = draw(st.sampled_from([-1, (s[-1], -1), (-1, 1) + s[:1], s[::-1]]))
    return call(draw, np.reshape, X, target)


def build_reshape_fortran(draw, s):
    return call(draw, np.reshape, X, (s[0], -1), order="F")


def build_reshape_method(draw, s):
    return lambda x: x.reshape(*s[::-1])


def build_ravel(draw, s):
    order = draw(st.sampled_from(["C", "F", "A", "K"]))
    return call(draw, np.ravel, X, order=order)


def build_flatten(draw, s):
    return lambda x: x.flatten() * 2


def build_transpose_axes(draw, s):
    axes = tuple(a - len(s) * draw(st.booleans()) for a in permutation(draw, len(s)))
    return call(draw, np.transpose, X, axes)


def build_transpose_method(draw, s):
    axes = permutation(draw, len(s))
    return lambda x: x.transpose(*axes) + x.transpose(axes)


def build_swapaxes(draw, s):
    a, b = axis_of(draw, len(s)), axis_of(draw, len(s))
    return call(draw, np.swapaxes, X, a, b)


def build_moveaxis(draw, s):
    source, destination = permutation(draw, len(s))[:2], permutation(draw, len(s))[:2]
    return call(draw, np.moveaxis, X, source, destination)


def build_expand_dims(draw, s):
    axis = draw(st.sampled_from([0, -1, (0, -1)]))
    return call(draw, np.expand_dims, X, axis)


def build_squeeze(draw, dtype):
    s = array_shape(draw, 1, 3)
    padded = (1,) + s[:1] + (1,) + s[1:]
    axis = draw(st.sampled_from([None, 0, -len(padded) + 2, (0, 2)]))
    return call(draw, np.squeeze, X, axis), [uniform(draw, padded, dtype)]


def build_broadcast_to(draw, dtype):
    xs, other = broadcast_shapes(draw, 2)
    target = np.broadcast_shapes(xs, other)
    return call(draw, np.broadcast_to, X, target), [uniform(draw, xs, dtype)]


# --- joining and splitting ----------------------------------------------------------------
def build_concatenate(draw, dtype):
    s = array_shape(draw, 1, 3)
    axis = axis_of(draw, len(s))
    template = tuple(None if i == axis % len(s) else n for i, n in enumerate(s))
    x, y, c = parts_along(draw, dtype, template, 3)
    return call(draw, np.concatenate, [X, c, Y, X], axis), [x, y]


def build_concatenate_flat(draw, dtype):
    x, y = uniform(draw, array_shape(draw), dtype), uniform(draw, array_shape(draw), dtype)
    return call(draw, np.concatenate, (Y, X), axis=None), [x, y]


def build_concatenate_cast(draw, dtype):
    x, y = uniform(draw, array_shape(draw, 1, 1), dtype), uniform(draw, array_shape(draw, 1, 1), dtype)
    concatenate = call(draw, np.concatenate, [X, Y], dtype=np.float64)
    return (lambda x, y: concatenate(x, y).astype(x.dtype)), [x, y]


def build_stack(draw, dtype):
    s = array_shape(draw, 0, 2)
    axis = axis_of(draw, len(s) + 1)
    x, y = uniform(draw, s, dtype), uniform(draw, s, dtype)
    return call(draw, np.stack, [X, Y, X], axis=axis), [x, y]


def build_hstack_1d(draw, dtype):
    x, y = uniform(draw, array_shape(draw, 1, 1), dtype), uniform(draw, (), dtype)
    return call(draw, np.hstack, [Y, X, Y]), [x, y]


def build_hstack_2d(draw, dtype):
    x, y = parts_along(draw, dtype, (3, None), 2)
    return call(draw, np.hstack, (X, Y)), [x, y]


def build_vstack_1d(draw, dtype):
    n = draw(st.integers(1, 4))
    x, y = uniform(draw, (n,), dtype), uniform(draw, (2, n), dtype)
    return call(draw, np.vstack, [X, Y, X]), [x, y]


def build_vstack_0d(draw, dtype):
    x, y = uniform(draw, (), dtype), uniform(draw, (), dtype)
    return call(draw, np.vstack, (X, Y)), [x, y]


def build_split_sections(draw, dtype):
    s = list(array_shape(draw, 1, 3))
    axis = axis_of(draw, len(s))
    sections = draw(st.integers(1, 3))
    s[axis] = sections * draw(st.integers(1, 2))
    return call(draw, np.split, X, sections, axis=axis), [uniform(draw, tuple(s), dtype)]


def build_split_indices(draw, s):
    cuts = sorted(draw(st.lists(st.integers(0, s[0] + 1), max_size=3)))
    return call(draw, np.split, X, cuts)


# --- copies ---------------------------------------------------------------------------------
def build_tile(draw, s):
    reps = draw(st.sampled_from([2, (2, 1), (1, 2, 1, 3), (3,) + (1,) * len(s)]))
    return call(draw, np.tile, X, reps)


def build_repeat(draw, s):
    count, axis = draw(st.integers(0, 3)), draw(st.sampled_from([None, -1, 0]))
    return call(draw, np.repeat, X, count, axis=axis)


def build_repeat_counts(draw, s):
    axis = axis_of(draw, len(s))
    counts = draw(st.lists(st.integers(0, 3), min_size=s[axis], max_size=s[axis]))
    return lambda x: x.repeat(counts, axis)


def build_repeat_counts_flat(draw, s):
    size = int(np.prod(s))
    counts = np.array(draw(st.lists(st.integers(0, 3), min_size=size, max_size=size)))
    counts = draw(st.sampled_from([counts, counts[:1]]))  # one count per element, or one for all
    return call(draw, np.repeat, X, counts)


# --- reordering -------------------------------------------------------------------------------
def build_flip(draw, s):
    axis = draw(st.sampled_from([None, axis_of(draw, len(s)), (0, -1)]))
    return call(draw, np.flip, X, axis)


def build_roll(draw, s):
    shift, axis = draw(st.sampled_from([(2, None), (-1, 0), ((1, -2), (0, -1)), ((1, 2), (0, 0))]))
    return call(draw, np.roll, X, shift, axis)


# --- diagonals and triangles ------------------------------------------------------------------
def build_diag_vector(draw, s):
    k = draw(st.integers(-2, 2))
    return call(draw, np.diag, X, k)


def build_diag_matrix(draw, s):
    k = draw(st.integers(-s[0], s[1]))  # ±the side: an empty diagonal
    return call(draw, np.diag, X, k)


def build_diagonal(draw, dtype):
    s = array_shape(draw, 2, 3, min_side=2)
    a, b = draw(st.permutations(range(-len(s), 0)))[:2]
    offset = draw(st.integers(-5, 5))  # beyond the array: an empty diagonal
    return call(draw, np.diagonal, X, offset, a, b), [uniform(draw, s, dtype)]


def build_triangle(func):
    def build(draw, s):
        k = draw(st.integers(-5, 5))
        return call(draw, func, X, k)

    return build


# --- indexing ----------------------------------------------------------------------------------
def build_take(draw, s):
    axis = draw(st.sampled_from([None, axis_of(draw, len(s))]))
    n = int(np.prod(s)) if axis is None else s[axis]
    where = draw(st.sampled_from([indices(draw, n), np.array(indices(draw, n)).reshape(-1, 1), -1]))
    return call(draw, np.take, X, where, axis=axis)


def build_take_mode(draw, s):
    mode = draw(st.sampled_from(["clip", "wrap"]))
    where = draw(st.lists(st.integers(-8, 8), min_size=1, max_size=6))
    return lambda x: x.take(where, axis=0, mode=mode)


def basic_index(draw, s):
    """A basic index of a 2- or 3-d array: slices with any steps, ints, Ellipsis, None."""
    n = s[0]
    return draw(st.sampled_from([
        (slice(1, None), slice(None, None, 2)),
        (slice(None, None, -1),),
        (slice(None, None, -2), slice(1, None)),
        (0,),
        (-1, slice(1, None)),
        (Ellipsis, 0),
        (Ellipsis, slice(None, None, -1)),
        (None, slice(None), None),
        (slice(None), None, Ellipsis, -1),
        (slice(n - 1, None, -3), Ellipsis),
    ]))


def build_getitem_basic(draw, s):
    index = basic_index(draw, s)
    return lambda x: x[index]


def build_getitem_integer_arrays(draw, s):
    rows, cols = indices(draw, s[0], (2, 8)), indices(draw, s[1], (2, 8))
    index = draw(st.sampled_from([
        rows,
        np.array(rows),
        np.array(rows * 2).reshape(2, -1),
        (rows, slice(None, None, -1)),
        (Ellipsis, indices(draw, s[-1], (2, 8))),
        (np.array(rows), np.array(cols[:1])),
        (slice(1, None), cols),
    ]))
    return lambda x: x[index] * 1.5


def build_getitem_mask(draw, s):
    index = draw(st.sampled_from([mask(draw, s), (mask(draw, s[:1]),), (slice(None), mask(draw, s[1:2]))]))
    return lambda x: x[index]


def build_getitem_mixed(draw, s):
    rows, last = indices(draw, s[0], (2, 5)), indices(draw, s[-1], (1, 1))
    index = draw(st.sampled_from([
        (None, rows, slice(None, None, -1)),
        (rows, Ellipsis, last),
        (mask(draw, s[:1]), slice(None), last),
        (rows, None, slice(1, None)),
        (-1, Ellipsis, last),
    ]))
    return lambda x: x[index]


def build_getitem_chain(draw, s):
    return lambda x: x[1:][::-1][0] + x[0] * 2 + x[:, -1:][0, 0]


def build_getitem_rows(draw, s):
    return lambda x: np.stack([row * (i + 1) for i, row in enumerate(x)])


def build_getitem_columns(draw, s):
    return lambda x: sum(x[:, j] * (j - 1.5) for j in range(s[1]))


def build_astype(draw, s):
    return lambda x: (x.astype(np.float64) * 3).astype(x.dtype) + x.astype(x.dtype)


def build_copy(draw, s):
    copy = call(draw, np.copy, X, order=draw(st.sampled_from("CFAK")))
    return lambda x: copy(x) * x.copy()


def build_full_like(draw, dtype):
    """A template (its values unused) and a fill value broadcast to its shape, or to ``shape=``."""
    template_shape, value_shape = broadcast_shapes(draw, 2)
    template_shape = np.broadcast_shapes(template_shape, value_shape)
    shape = draw(st.sampled_from([None, (2,) + template_shape]))
    template = uniform(draw, template_shape, dtype)
    fill = call(draw, np.full_like, X, Y) if shape is None else call(draw, np.full_like, X, Y, shape=shape)
    return (lambda a, v: fill(a, v) * a if shape is None else fill(a, v)), [template, uniform(draw, value_shape, dtype)]


# --- promotions, rotations and permutations -------------------------------------------------------------------
def build_atleast(func):
    def build(draw, s):
        return call(draw, func, X)

    return build


def build_fliplr(draw, s):
    return call(draw, np.fliplr, X)


def build_flipud(draw, s):
    return call(draw, np.flipud, X)


def build_rot90(draw, s):
    k = draw(st.integers(-3, 5))
    a, b = draw(st.permutations(range(len(s))))[:2]
    axes = (a - len(s) * draw(st.booleans()), b)
    arguments = draw(st.sampled_from([(k, axes), (k,), ()]))
    return call(draw, np.rot90, X, *arguments)


def build_rollaxis(draw, s):
    axis, start = axis_of(draw, len(s)), draw(st.integers(-len(s), len(s)))
    return call(draw, np.rollaxis, X, axis, start)


def build_permute_dims(draw, s):
    negative = tuple(a - len(s) for a in permutation(draw, len(s)))
    axes = draw(st.sampled_from([None, permutation(draw, len(s)), negative]))
    return call(draw, np.permute_dims, X, axes)


def build_matrix_transpose(draw, s):
    return call(draw, np.matrix_transpose, X)


def build_astype_function(draw, s):
    wide, back = call(draw, np.astype, X, np.float64), call(draw, np.astype, X, np.float32, copy=False)
    return lambda x: np.astype(wide(x) * 3, x.dtype) + (back(x) if x.dtype == np.float32 else x)


# --- more joining and splitting ---------------------------------------------------------------------------------
def build_concat(draw, dtype):
    s = array_shape(draw, 1, 3, min_side=0)
    axis = axis_of(draw, len(s))
    template = tuple(None if i == axis % len(s) else n for i, n in enumerate(s))
    x, y, c = parts_along(draw, dtype, template, 3)
    return call(draw, np.concat, [X, c, Y, X], axis=axis), [x, y]


def build_column_stack(draw, dtype):
    """Columns of 1-d parts beside 2-d ones, or 3-d parts joined along axis 1."""
    n = draw(st.integers(1, 3))
    if draw(st.booleans()):
        x, y = uniform(draw, (n, 2, 2), dtype), uniform(draw, (n, draw(st.integers(1, 3)), 2), dtype)
        return call(draw, np.column_stack, [Y, np.ones((n, 1, 2), dtype), X]), [x, y]
    x, y = uniform(draw, (n,), dtype), uniform(draw, (n, draw(st.integers(1, 3))), dtype)
    return call(draw, np.column_stack, [X, np.ones((n, 1), dtype), Y, X]), [x, y]


def build_column_stack_0d(draw, dtype):
    x, y = uniform(draw, (), dtype), uniform(draw, (1,), dtype)
    return call(draw, np.column_stack, (X, Y, X)), [x, y]


def build_dstack(draw, dtype):
    """2-d parts are one slice deep, 3-d ones their depth; a 1-d part is one row, a 0-d one one element."""
    m, n = draw(st.sampled_from([(1, 1), (1, 3), (2, 3), (3, 1)]))
    y = uniform(draw, (m, n, draw(st.integers(1, 3))), dtype)
    x = uniform(draw, draw(st.sampled_from([(m, n)] + ([(n,)] if m == 1 else []) + ([()] if m == n == 1 else []))),
                dtype)
    return call(draw, np.dstack, [X, Y, np.zeros((m, n, 1), dtype), X]), [x, y]


def build_row_stack(draw, dtype):
    n = draw(st.integers(1, 4))
    x, y = uniform(draw, (n,), dtype), uniform(draw, (2, n), dtype)
    stack = call(draw, np.row_stack, [X, Y, X])

    def row_stack(x, y):  # a deprecated alias of np.vstack
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return stack(x, y)

    return row_stack, [x, y]


def build_block(draw, s):
    """One array, not a list: np.block returns it."""
    return call(draw, np.block, X)


def build_block_nested(draw, dtype):
    """[[x, c], [y]]: a row of x beside a constant block c of fewer axes (promoted), over a row y."""
    rows, left, right = (draw(st.integers(1, 3)) for _ in range(3))
    constant = uniform(draw, (right,) if rows == 1 else (rows, right), dtype)
    x = uniform(draw, (rows, left), dtype)
    if not draw(st.booleans()):  # the flat [x, y] form: one row, joined along the last axis
        return (lambda x, y: np.block([x, y])), [x, uniform(draw, (rows, right), dtype)]
    return (lambda x, y: np.block([[x, constant], [y]])), [x, uniform(draw, (2, left + right), dtype)]


def tracked_pair(draw, f, x, y):
    """``f(x, y)`` as a function of both, of x alone or of y alone; the other a constant cast to the tracked
    one's dtype (np.insert casts to arr's dtype: a float32 constant would take finite differences in float32)."""
    which = draw(st.sampled_from(["both", "first", "second"]))
    if which == "both":
        return f, [x, y]
    if which == "first":
        return (lambda a: f(a, y.astype(a.dtype))), [x]
    return (lambda b: f(x.astype(b.dtype), b)), [y]


def build_append(draw, dtype):
    axis = draw(st.sampled_from([None, 0, -1]))
    if axis is None:
        x, y = uniform(draw, array_shape(draw, 0, 3), dtype), uniform(draw, array_shape(draw, 0, 2, min_side=0), dtype)
        append = call(draw, np.append, X, Y, axis=None) if draw(st.booleans()) else call(draw, np.append, X, Y)
    else:
        s = array_shape(draw, 1, 3)
        template = tuple(None if i == axis % len(s) else n for i, n in enumerate(s))
        x, y = parts_along(draw, dtype, template, 2)
        append = call(draw, np.append, X, Y, axis=axis)
    return tracked_pair(draw, append, x, y)


def build_insert(draw, dtype):
    """A scalar, a sequence (unsorted, repeated) or a slice of positions; values broadcast into the gap."""
    s = array_shape(draw, 1, 3)
    axis = draw(st.sampled_from([None, axis_of(draw, len(s))]))
    n = int(np.prod(s)) if axis is None else s[axis]
    gap = list(s) if axis is not None else [n]
    where = 0 if axis is None else axis % len(s)
    obj = draw(st.sampled_from(["scalar", "sequence", "slice"]))
    if obj == "scalar":
        obj = draw(st.integers(-n, n))
        values = tuple(gap[:where] + gap[where + 1:]) if axis is not None else (draw(st.integers(1, 3)),)
    else:
        obj = draw(st.lists(st.integers(-n, n), min_size=1, max_size=4)) if obj == "sequence" \
            else slice(draw(st.integers(0, n)), None, 2)
        gap[where] = len(range(n)[obj]) if type(obj) is slice else len(obj)
        values = tuple(gap)
    values = draw(st.sampled_from([values, ()]))  # or one value broadcast into the whole gap
    x, y = uniform(draw, s, dtype), uniform(draw, values, dtype)
    return tracked_pair(draw, call(draw, np.insert, X, obj, Y, axis=axis), x, y)


def build_delete(draw, s):
    axis = draw(st.sampled_from([None, axis_of(draw, len(s))])) if s else None
    n = int(np.prod(s)) if axis is None else s[axis]
    obj = draw(st.sampled_from([
        draw(st.integers(-n, n - 1)), sorted(set(indices(draw, n, (0, 3)))), slice(1, None, 2),
        np.arange(n) % 2 == 0,
    ]))
    return call(draw, np.delete, X, obj, axis=axis)


def build_resize(draw, s):
    new_shape = draw(st.sampled_from([(7,), (2, 3), (0,), int(np.prod(s)) + 1, (1,) + s, ()]))
    return call(draw, np.resize, X, new_shape)


def build_take_along_axis(draw, s):
    axis = draw(st.sampled_from([None, axis_of(draw, len(s))]))
    n = int(np.prod(s)) if axis is None else s[axis]
    shape = [draw(st.integers(0, 4))] if axis is None else list(s)
    if axis is not None:
        shape[axis] = draw(st.integers(0, 4))
    where = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                     dtype=int).reshape(shape)
    return call(draw, np.take_along_axis, X, where, axis)


def build_put_along_axis(draw, dtype):
    """np.put_along_axis writes in place: an error naming the spelling checked here, np.where of the values
    taken along axis from where each index put them (repeated indices: the last write wins, as in NumPy)."""
    s = array_shape(draw, 1, 3)
    axis = axis_of(draw, len(s))
    shape = list(s)
    shape[axis] = draw(st.integers(1, 3))
    indices = np.array(draw(st.lists(st.integers(0, s[axis] - 1), min_size=int(np.prod(shape)),
                                     max_size=int(np.prod(shape))))).reshape(shape)
    mask, source = np.zeros(s, bool), np.zeros(s, int)
    np.put_along_axis(mask, indices, True, axis)
    np.put_along_axis(source, indices, np.indices(indices.shape)[axis], axis)
    value_shape = draw(st.sampled_from([tuple(shape), ()]))

    def put(arr, values):
        return np.where(mask, np.take_along_axis(np.broadcast_to(values, indices.shape), source, axis), arr)

    expected = uniform(draw, s, np.float64), uniform(draw, value_shape, np.float64)
    written = expected[0].copy()
    np.put_along_axis(written, indices, expected[1], axis)
    np.testing.assert_array_equal(put(*expected), written)  # the spelling means what np.put_along_axis does
    return put, [uniform(draw, s, dtype), uniform(draw, value_shape, dtype)]


def build_unstack(draw, s):
    if draw(st.booleans()):
        return call(draw, np.unstack, X)
    return call(draw, np.unstack, X, axis=axis_of(draw, len(s)))


def build_array_split(draw, s):
    axis = axis_of(draw, len(s))
    cuts = sorted(draw(st.lists(st.integers(0, s[axis] + 1), max_size=3)))
    sections = draw(st.sampled_from([draw(st.integers(1, 5)), cuts]))
    return call(draw, np.array_split, X, sections, axis=axis)


def build_split_like(func, axis):
    """np.hsplit/vsplit/dsplit into equal sections or at indices along ``axis`` (a function of ndim)."""

    def build(draw, dtype):
        s = list(array_shape(draw, {np.vsplit: 2, np.dsplit: 3}.get(func, 1), 3 if func is not np.hsplit else 2))
        a = axis(len(s))
        sections = draw(st.integers(1, 3))
        s[a] = sections * draw(st.integers(1, 2))
        where = draw(st.sampled_from([sections, sorted(draw(st.lists(st.integers(0, s[a]), max_size=3)))]))
        return call(draw, func, X, where), [uniform(draw, tuple(s), dtype)]

    return build


def build_diagflat(draw, s):
    return call(draw, np.diagflat, X, draw(st.integers(-2, 2)))


# --- padding --------------------------------------------------------------------------------------------------------
def pad_width(draw, ndim):
    """np.pad's forms: n, (n,), (before, after), one pair per axis, {axis: n or pair}."""
    pair = (draw(st.integers(0, 5)), draw(st.integers(0, 5)))
    return draw(st.sampled_from([
        pair[0], (pair[1],), pair, tuple((draw(st.integers(0, 5)), draw(st.integers(0, 5))) for _ in range(ndim)),
        {-1: pair}, {0: pair[1]},
    ]))


def build_pad(mode, min_side=1):
    def build(draw, dtype):
        s = array_shape(draw, 1, 3, min_side=min_side)
        if mode == "constant" and draw(st.booleans()):
            s = ()  # np.pad leaves a 0-d array as it is
        width = pad_width(draw, len(s)) if s else draw(st.sampled_from([0, 2]))
        stat = {"stat_length": draw(st.sampled_from([None, 1, (2, 3), tuple((1, draw(st.integers(1, 6))) for _ in s)]))}
        keywords = {
            "constant": {"constant_values": draw(st.sampled_from([0, 1.5, ((1, 2),) * len(s) or 2]))},
            "linear_ramp": {"end_values": draw(st.sampled_from([0, (1, -2), 3]))},
            "mean": stat, "maximum": stat, "minimum": stat, "median": stat,
            "reflect": {"reflect_type": draw(st.sampled_from(["even", "odd"]))},
            "symmetric": {"reflect_type": draw(st.sampled_from(["even", "odd"]))},
        }.get(mode, {})
        keywords = {k: v for k, v in keywords.items() if draw(st.booleans())}
        mode_given = {"mode": mode} if mode != "constant" or draw(st.booleans()) else {}
        return call(draw, np.pad, X, width, **mode_given, **keywords), [uniform(draw, s, dtype)]

    return build


# --- choosing ---------------------------------------------------------------------------------------------------------
def build_select(draw, dtype):
    """np.select of tracked choices and a tracked or constant default, over broadcasting shapes: where both
    conditions hold the first chooses."""
    x_shape, y_shape, c_shape = broadcast_shapes(draw, 3)
    first, second = mask(draw, c_shape), mask(draw, c_shape)
    if draw(st.booleans()):
        return (lambda x, y: np.select([first, second], [x * 2, np.sin(y)], y)), [
            uniform(draw, x_shape, dtype), uniform(draw, y_shape, dtype)]
    choices = [uniform(draw, x_shape, dtype), uniform(draw, y_shape, dtype)]
    return call(draw, np.select, [first, second], [X, Y], 0.5), choices


def build_broadcast_arrays(draw, dtype):
    """Two arrays broadcast against each other: a tuple of views of one shape."""
    x_shape, y_shape = broadcast_shapes(draw, 2)
    return call(draw, np.broadcast_arrays, X, Y), [uniform(draw, x_shape, dtype), uniform(draw, y_shape, dtype)]


def build_meshgrid(draw, dtype):
    """A grid of two or three vectors (0-d and 2-d ones are raveled), in both indexings, sparse or not."""
    count = draw(st.integers(2, 3))
    shapes = [array_shape(draw, 0, 2) for _ in range(count)]
    grid = call(draw, np.meshgrid, *[X, Y, Z][:count], indexing=draw(st.sampled_from(["xy", "ij"])),
                sparse=draw(st.booleans()))
    return grid, [uniform(draw, s, dtype) for s in shapes]


def build_atleast_several(func):
    """``func(x, y)`` of two arrays: a tuple, one result each."""

    def build(draw, dtype):
        return call(draw, func, X, Y), [uniform(draw, array_shape(draw, 0, 3, 0), dtype),
                                        uniform(draw, array_shape(draw, 0, 3, 1), dtype)]

    return build


def build_piecewise(draw, s):
    """Constant pieces: a piecewise-constant result, times x so the product rule needs its zero gradient."""
    pieces = draw(st.sampled_from([[1.0, -2.0], [1.0, -2.0, 3.0], [0.5]]))
    return lambda x: np.piecewise(x, [x > 0, x < -1][: max(len(pieces) - 1, 1)], pieces) * x


def build_pad_tracked_constants(draw, dtype):
    """np.pad of a tracked array with tracked constant_values: one value, one pair, or a pair per axis."""
    s = array_shape(draw, 0, 3, 0)
    per_axis = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in s] or 1
    widths = draw(st.sampled_from([1, (1, 2), per_axis]))
    values = uniform(draw, draw(st.sampled_from([(), (2,), (1, 2), (len(s), 2) if s else ()])), dtype)
    return call(draw, np.pad, X, widths, "constant", constant_values=Y), [uniform(draw, s, dtype), values]


# --- compositions with the user's functions, selections, and the in-place writers' spellings -------------------
def build_piecewise_functions(draw, s):
    """Functions and constants as pieces, with or without the piece where no condition holds; the functions
    see the tracked slices x[cond] (a piece that meets no element is never called)."""
    pieces = draw(st.sampled_from([[np.sin, lambda v: v**2], [np.sin, 0.5, lambda v: np.exp(v) * 2],
                                   [lambda v: v * 3], [np.cos, np.tanh]]))
    conditions = draw(st.integers(max(len(pieces) - 1, 1), len(pieces)))

    def piecewise(x):
        return np.piecewise(x, [x > 0.5, x < -0.5][:conditions], pieces)

    return piecewise


def build_choose(draw, dtype):
    """Choices as a list of broadcast arrays (a constant among them) or as one array's rows, every mode."""
    mode = draw(st.sampled_from(["raise", "wrap", "clip"]))
    a_shape, x_shape, y_shape = broadcast_shapes(draw, 3)
    a = np.array(draw(st.lists(st.integers(-2 if mode != "raise" else 0, 4 if mode != "raise" else 2),
                               min_size=int(np.prod(a_shape)), max_size=int(np.prod(a_shape)))),
                 dtype=int).reshape(a_shape)
    if draw(st.booleans()):
        rows = uniform(draw, (3,) + x_shape, dtype)
        return call(draw, np.choose, a, X, mode=mode), [rows]
    third = uniform(draw, x_shape, dtype)
    return (lambda x, y: np.choose(a, [x, y, third], mode=mode)), [uniform(draw, x_shape, dtype),
                                                                   uniform(draw, y_shape, dtype)]


def build_compress(draw, s):
    axis = draw(st.sampled_from([None, axis_of(draw, len(s))]))
    n = int(np.prod(s)) if axis is None else s[axis]
    condition = draw(st.lists(st.booleans(), min_size=0, max_size=n))
    return call(draw, np.compress, condition, X, axis)


def build_extract(draw, s):
    condition = np.array(draw(st.lists(st.booleans(), min_size=int(np.prod(s)), max_size=int(np.prod(s))))).reshape(s)
    return call(draw, np.extract, condition, X)


def build_trim_zeros(draw, dtype):
    """Zeros (exact, not drawn) around and inside, trimmed in front, at the back or both, along every axis or some."""
    s = array_shape(draw, 1, 3, 1, 5)
    zeros = np.array(draw(st.lists(st.booleans(), min_size=int(np.prod(s)), max_size=int(np.prod(s))))).reshape(s)
    trim = draw(st.sampled_from(["fb", "f", "b"]))
    axis = draw(st.sampled_from([None, axis_of(draw, len(s))]))
    values = uniform(draw, s, dtype, 0.5, 2.0)
    return (lambda x: np.trim_zeros(np.where(zeros, 0, x), trim, axis)), [values]


def build_apply_along_axis(draw, s):
    """A function of each 1-d slice giving a scalar, a vector or a matrix, with an extra argument."""
    axis = axis_of(draw, len(s))
    func1d = draw(st.sampled_from([lambda v, c: np.sum(v**2) * c, lambda v, c: np.cumsum(v) * c,
                                   lambda v, c: np.outer(v, v) * c]))
    return call(draw, np.apply_along_axis, func1d, axis, X, 1.5)


def build_apply_over_axes(draw, s):
    """A reduction that drops its axis (put back) and one that keeps it, over one axis or several."""
    axes = draw(st.sampled_from([axis_of(draw, len(s)), tuple(draw(st.permutations(range(len(s)))))[:2]]))
    func = draw(st.sampled_from([np.sum, lambda a, axis: np.cumsum(a, axis) * a]))
    return call(draw, np.apply_over_axes, func, X, axes)


def build_put(draw, dtype):
    """np.put writes in place: an error naming the spelling checked here (np.where of the values taken where
    each index put them; cycled values; the last write wins)."""
    s = array_shape(draw, 1, 3)
    ind = np.array(draw(st.lists(st.integers(0, int(np.prod(s)) - 1), min_size=1, max_size=4)))
    mask, source = np.zeros(s, bool), np.zeros(s, int)
    np.put(mask, ind, True)
    np.put(source, ind, np.arange(len(ind)))
    n_values = draw(st.integers(1, 4))

    def put(a, v):
        return np.where(mask, np.take(v, source, mode="wrap"), a)

    expected = uniform(draw, s, np.float64), uniform(draw, (n_values,), np.float64)
    written = expected[0].copy()
    np.put(written, ind, expected[1])
    np.testing.assert_array_equal(put(*expected), written)  # the spelling means what np.put does
    return put, [uniform(draw, s, dtype), uniform(draw, (n_values,), dtype)]


def build_place(draw, dtype):
    """np.place writes in place: the spelling its error names, checked to mean what it does."""
    s = array_shape(draw, 1, 3)
    mask = np.array(draw(st.lists(st.booleans(), min_size=int(np.prod(s)), max_size=int(np.prod(s))))).reshape(s)
    n_values = draw(st.integers(1, 4))

    def place(arr, vals):
        return np.where(mask, np.take(vals, np.cumsum(mask).reshape(mask.shape) - 1, mode="wrap"), arr)

    expected = uniform(draw, s, np.float64), uniform(draw, (n_values,), np.float64)
    written = expected[0].copy()
    np.place(written, mask, expected[1])
    np.testing.assert_array_equal(place(*expected), written)
    return place, [uniform(draw, s, dtype), uniform(draw, (n_values,), dtype)]


def build_fill_diagonal(draw, dtype):
    """np.fill_diagonal writes in place: the spelling its error names, checked to mean what it does."""
    s = draw(st.sampled_from([array_shape(draw, 2, 2), (3, 3, 3)]))
    wrap = draw(st.booleans())
    mask = np.zeros(s, bool)
    np.fill_diagonal(mask, True, wrap)

    def fill(a, val):
        return np.where(mask, val, a)

    expected = uniform(draw, s, np.float64), uniform(draw, (), np.float64)
    written = expected[0].copy()
    np.fill_diagonal(written, expected[1], wrap)
    np.testing.assert_array_equal(fill(*expected), written)
    return fill, [uniform(draw, s, dtype), uniform(draw, (), dtype)]


def build_copyto(draw, dtype):
    """np.copyto writes in place: the spelling its error names, np.where(where, src, dst), checked to mean what
    it does (src broadcast, a mask or none)."""
    dst_shape, src_shape = broadcast_shapes(draw, 2)
    dst_shape = np.broadcast_shapes(dst_shape, src_shape)
    where = np.array(draw(st.lists(st.booleans(), min_size=int(np.prod(dst_shape)),
                                   max_size=int(np.prod(dst_shape))))).reshape(dst_shape)

    def copy(dst, src):
        return np.where(where, src, dst)

    expected = uniform(draw, dst_shape, np.float64), uniform(draw, src_shape, np.float64)
    written = np.array(expected[0], copy=True)
    np.copyto(written, expected[1], where=where)
    np.testing.assert_array_equal(copy(*expected), written)
    return copy, [uniform(draw, dst_shape, dtype), uniform(draw, src_shape, dtype)]


def build_scatter(draw, dtype):
    """The pullback of x[index] as a function (what a gradient of a gradient records): g added at the index
    into zeros, rows that may repeat (np.add.at's semantics) or a basic slice."""
    shape = array_shape(draw)
    if draw(st.booleans()):
        n = draw(st.integers(0, 5))
        index, repeats = np.array(draw(st.lists(st.integers(0, shape[0] - 1), min_size=n, max_size=n)), int), True
        g_shape = (n,) + shape[1:]
    else:
        index, repeats = (slice(None), slice(0, None, 2)) if len(shape) > 1 else slice(1, None), False
        g_shape = np.zeros(shape)[index].shape
    return (lambda g: pullbacks.SCATTER_RECORDED(g, index, shape, g.dtype, repeats)), [uniform(draw, g_shape, dtype)]


CASES = [
    Case(np.reshape, one_array(build_reshape), name="reshape"),
    Case(np.reshape, one_array(build_reshape_fortran, 2), name="reshape_order_F"),
    Case(np.reshape, one_array(build_reshape_method), name="reshape_method"),
    Case(np.ravel, one_array(build_ravel, 0), name="ravel"),
    Case(np.ravel, one_array(build_flatten, 0), name="ravel_flatten_method"),
    Case(np.transpose, one_array(lambda draw, s: np.transpose, 0), name="transpose"),
    Case(np.transpose, one_array(lambda draw, s: lambda x: x.T * 2, 0), name="transpose_T"),
    Case(np.transpose, one_array(build_transpose_axes), name="transpose_axes"),
    Case(np.transpose, one_array(build_transpose_method), name="transpose_method"),
    Case(np.swapaxes, one_array(build_swapaxes), name="swapaxes"),
    Case(np.moveaxis, one_array(build_moveaxis, 2), name="moveaxis"),
    Case(np.expand_dims, one_array(build_expand_dims, 0, 2), name="expand_dims"),
    Case(np.squeeze, build_squeeze, name="squeeze"),
    Case(np.broadcast_to, build_broadcast_to, name="broadcast_to"),
    Case(np.concatenate, build_concatenate, name="concatenate"),
    Case(np.concatenate, build_concatenate_flat, name="concatenate_axis_None"),
    Case(np.concatenate, build_concatenate_cast, name="concatenate_dtype"),
    Case(np.stack, build_stack, name="stack"),
    Case(np.hstack, build_hstack_1d, name="hstack_1d_and_0d"),
    Case(np.hstack, build_hstack_2d, name="hstack_2d"),
    Case(np.vstack, build_vstack_1d, name="vstack_1d_and_2d"),
    Case(np.vstack, build_vstack_0d, name="vstack_0d"),
    Case(np.split, build_split_sections, name="split_sections"),
    Case(np.split, one_array(build_split_indices), name="split_indices"),
    Case(np.tile, one_array(build_tile, 0), name="tile"),
    Case(np.repeat, one_array(build_repeat, 0), name="repeat"),  # 0-d: repeated as 1-d whatever the axis
    Case(np.repeat, one_array(build_repeat_counts), name="repeat_counts_axis"),
    Case(np.repeat, one_array(build_repeat_counts_flat, 0), name="repeat_counts_flat"),
    Case(np.flip, one_array(build_flip, 2), name="flip"),
    Case(np.roll, one_array(build_roll, 2), name="roll"),
    Case(np.diag, one_array(build_diag_vector, 1, 1), name="diag_vector"),
    Case(np.diag, one_array(build_diag_matrix, 2, 2), name="diag_matrix"),
    Case(np.diagonal, build_diagonal, name="diagonal"),
    Case(np.triu, one_array(build_triangle(np.triu), 1, min_side=0), name="triu"),  # 1-D: stacked into rows
    Case(np.tril, one_array(build_triangle(np.tril), 1, min_side=0), name="tril"),
    Case(np.take, one_array(build_take), name="take"),
    Case(np.take, one_array(build_take_mode), name="take_modes"),
    Case(getitem, one_array(build_getitem_basic, 2), name="getitem_basic"),
    Case(getitem, one_array(build_getitem_integer_arrays, 2), name="getitem_integer_arrays"),
    Case(getitem, one_array(build_getitem_mask, 2), name="getitem_mask"),
    Case(getitem, one_array(build_getitem_mixed, 3), name="getitem_mixed"),
    Case(getitem, one_array(build_getitem_chain, 2, min_side=2), name="getitem_chain"),
    Case(getitem, one_array(build_getitem_rows), name="getitem_rows"),
    Case(getitem, one_array(build_getitem_columns, 2, 2), name="getitem_columns"),
    Case(astype, one_array(build_astype, 0), name="astype"),
    Case(np.copy, one_array(build_copy, 0), name="copy"),
    Case(np.full_like, build_full_like, name="full_like"),
    Case(np.atleast_1d, one_array(build_atleast(np.atleast_1d), 0, 2, min_side=0), name="atleast_1d"),
    Case(np.atleast_2d, one_array(build_atleast(np.atleast_2d), 0, 3, min_side=0), name="atleast_2d"),
    Case(np.atleast_3d, one_array(build_atleast(np.atleast_3d), 0, 4, min_side=0), name="atleast_3d"),
    *[Case(f, build_atleast_several(f), name=f"{f.__name__}_of_two")
      for f in (np.atleast_1d, np.atleast_2d, np.atleast_3d)],
    Case(np.fliplr, one_array(build_fliplr, 2, min_side=0), name="fliplr"),
    Case(np.flipud, one_array(build_flipud, 1, min_side=0), name="flipud"),
    Case(np.rot90, one_array(build_rot90, 2), name="rot90"),
    Case(np.rollaxis, one_array(build_rollaxis, 1, 4), name="rollaxis"),
    Case(np.permute_dims, one_array(build_permute_dims, 0), name="permute_dims"),
    Case(np.matrix_transpose, one_array(build_matrix_transpose, 2, min_side=0), name="matrix_transpose"),
    Case(np.astype, one_array(build_astype_function, 0), name="astype_function"),
    Case(np.concat, build_concat, name="concat"),
    Case(np.column_stack, build_column_stack, name="column_stack"),
    Case(np.column_stack, build_column_stack_0d, name="column_stack_0d"),
    Case(np.dstack, build_dstack, name="dstack"),
    Case(np.vstack, build_row_stack, name="row_stack"),
    Case(np.block, one_array(build_block, 0), name="block_of_one_array"),
    Case(np.block, build_block_nested, name="block_nested"),
    Case(np.broadcast_arrays, build_broadcast_arrays, name="broadcast_arrays"),
    Case(np.meshgrid, build_meshgrid, name="meshgrid"),
    Case(np.append, build_append, name="append"),
    Case(np.insert, build_insert, name="insert"),
    Case(np.delete, one_array(build_delete, 0), name="delete"),
    Case(np.resize, one_array(build_resize, 0, min_side=0), name="resize"),
    Case(np.take_along_axis, one_array(build_take_along_axis), name="take_along_axis"),
    Case(np.put_along_axis, build_put_along_axis, name="put_along_axis_as_where"),
    Case(np.unstack, one_array(build_unstack, 1, min_side=0), name="unstack"),
    Case(np.array_split, one_array(build_array_split), name="array_split"),
    Case(np.hsplit, build_split_like(np.hsplit, lambda ndim: 1 if ndim > 1 else 0), name="hsplit"),
    Case(np.vsplit, build_split_like(np.vsplit, lambda ndim: 0), name="vsplit"),
    Case(np.dsplit, build_split_like(np.dsplit, lambda ndim: 2), name="dsplit"),
    Case(np.diagflat, one_array(build_diagflat, 0, 2), name="diagflat"),
    *(Case(np.pad, build_pad(mode, 0 if mode == "constant" else 1), name=f"pad_{mode}")
      for mode in ("constant", "edge", "linear_ramp", "mean", "reflect", "symmetric", "wrap", "maximum", "minimum",
                   "median")),
    Case(np.pad, build_pad_tracked_constants, name="pad_tracked_constant_values"),
    Case(np.select, build_select, name="select"),
    Case(np.piecewise, one_array(build_piecewise, 0), name="piecewise_constants"),
    Case(np.piecewise, one_array(build_piecewise_functions, 0), name="piecewise_functions"),
    Case(np.choose, build_choose, name="choose"),
    Case(np.compress, one_array(build_compress), name="compress"),
    Case(np.extract, one_array(build_extract, 0), name="extract"),
    Case(np.trim_zeros, build_trim_zeros, name="trim_zeros"),
    Case(np.apply_along_axis, one_array(build_apply_along_axis), name="apply_along_axis"),
    Case(np.apply_over_axes, one_array(build_apply_over_axes), name="apply_over_axes"),
    Case(np.put, build_put, name="put_as_where"),
    Case(np.place, build_place, name="place_as_where"),
    Case(np.fill_diagonal, build_fill_diagonal, name="fill_diagonal_as_where"),
    Case(np.copyto, build_copyto, name="copyto_as_where"),
    Case(pullbacks.SCATTER_RECORDED, lambda draw, dtype: build_scatter(draw, dtype), name="scatter"),
]
