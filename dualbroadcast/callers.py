"""Which SciPy function turned a tracked value into a plain array, and what to call instead.

SciPy's functions call ``np.asarray`` on their arguments, which `guards.Guarded.__array__` refuses.  The
error names the SciPy function the user called (the outermost SciPy frame on the stack, by its public
name: ``scipy.integrate.odeint``, ``scipy.stats.chi2.logpdf``) and its mirror in ``dualbroadcast.scipy``
where one exists (found by the same name there), or says how to get a gradient without one.
"""

import importlib
import sys


def scipy_message(shape):
    """The error naming the SciPy function on the stack and its mirror or the way forward; None if none is."""
    name = _scipy_entry()
    if name is None:
        return None
    start = (f"{name} turned a tracked value (shape {shape}) into a plain NumPy array (np.asarray), which would "
             "drop its gradient")
    mirror = _mirror_of(name)
    if mirror is not None:
        return f"{start}: call its mirror {mirror} instead (SciPy's signature and values, differentiable)"
    return (f"{start}; dualbroadcast.scipy has no mirror of it: write it with NumPy functions, or make it a "
            "db.primitive with its derivative (db.defvjp), or pass db.cut(x) for its value without a gradient")


def _scipy_entry():
    """The public name of the SciPy function that made the conversion: the outermost of the SciPy frames that
    stand right above it (past NumPy's and this package's own); None where the conversion is the user's own
    code (``np.array([x])`` in a function SciPy calls back)."""
    frame = sys._getframe(2)
    while frame is not None and _module(frame).startswith(_LIBRARIES):
        frame = frame.f_back
    found = wrapped = None
    while frame is not None and _module(frame).startswith(("scipy.",) + _LIBRARIES):
        if _module(frame).startswith("scipy.") and not _module(frame).startswith("scipy._lib"):
            found, wrapped = frame, None  # scipy._lib's frames are decorators' wrappers: the function is the one inside
        elif _module(frame).startswith("scipy._lib") and _wrapped_function(frame) is not None:
            found, wrapped = None, _wrapped_function(frame)  # a wrapper converting before calling it (linalg.eigh)
        frame = frame.f_back
    if wrapped is not None:
        return f"{'.'.join(wrapped.__module__.split('.')[:2])}.{wrapped.__name__}"
    if found is None:
        return None
    module = ".".join(_module(found).split(".")[:2])  # SciPy's public subpackage
    owner = found.f_locals.get("self")
    if module == "scipy.stats" and getattr(owner, "name", None):  # a distribution's method: norm.logpdf
        return f"scipy.stats.{owner.name}.{found.f_code.co_name}"
    return f"{module}.{found.f_code.co_name}"


_LIBRARIES = ("numpy", "dualbroadcast")  # frames between a SciPy function and the conversion it asks for


def _wrapped_function(frame):
    """The public SciPy function a scipy._lib decorator's wrapper frame wraps (its ``f``), or None."""
    function = frame.f_locals.get("f")
    module = getattr(function, "__module__", None) or ""
    return function if module.startswith("scipy.") and not module.startswith("scipy._lib") else None


def _module(frame):
    return frame.f_globals.get("__name__", "")


def _mirror_of(name):
    """``dualbroadcast.<name>`` if it exists (``scipy.integrate.odeint``: ``dualbroadcast.scipy.integrate.odeint``)."""
    parts = name.split(".")
    try:
        target = importlib.import_module(f"dualbroadcast.scipy.{parts[1]}")
    except ImportError:
        return None
    for part in parts[2:]:
        target = getattr(target, part, None)
        if target is None:
            return None
    return f"dualbroadcast.{name}"
