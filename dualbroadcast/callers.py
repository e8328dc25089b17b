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
    """The public name of the outermost SciPy function on the stack (the one the user's code called)."""
    frame, found = sys._getframe(2), None
    while frame is not None:  # scipy._lib's frames are decorators' wrappers: the function is the one inside
        module = frame.f_globals.get("__name__", "")
        if module.startswith("scipy.") and not module.startswith("scipy._lib"):
            found = frame
        frame = frame.f_back
    if found is None:
        return None
    module = ".".join(found.f_globals["__name__"].split(".")[:2])  # SciPy's public subpackage
    owner = found.f_locals.get("self")
    if module == "scipy.stats" and getattr(owner, "name", None):  # a distribution's method: norm.logpdf
        return f"scipy.stats.{owner.name}.{found.f_code.co_name}"
    return f"{module}.{found.f_code.co_name}"


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
