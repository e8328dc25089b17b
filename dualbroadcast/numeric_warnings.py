"""Numeric warnings NumPy raises in this package's code (an overflow, a division by zero) shown where they belong:
at the line of the user's program, naming the operation, and whether its value or its derivative produced them.

NumPy attributes a floating-point warning to the Python frame that called the ufunc: a partial of the
derivative table, the tape's recording, a pullback in the backward sweep, where the user sees a line of this
package.  Catching warnings as they fire would cost every gradient an ``np.errstate`` or a
``warnings.catch_warnings`` (3-6 us, where a scalar gradient takes 13 us); instead the one hook every shown or
recorded warning passes, ``warnings._showwarnmsg``, is wrapped once (`install`): a warning from this package's
files gets the file and line of the innermost frame of the user's code, and its text says which operation
produced it (in the backward sweep: which record, swept back from the gradient called at that line).  Nothing
runs while no warning is shown.
"""

import os
import sys
import warnings

from .numpy_facts import qualified_name

PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
GENERATED = "<dualbroadcast"  # the file name of the code this package generates: kernels, prepared programs, loops
_GENERATED_CODE = {
    "<dualbroadcast kernel>": "in the compiled kernel of a db.sum or db.broadcast (its value or partials)",
    "<dualbroadcast prepared program>": "in the replay of a prepared program",
    "<dualbroadcast loop>": "in the compiled loop of a prepared program",
}
_DERIVATIVE_FILES = (os.path.join(PACKAGE, "derivatives.py"), os.path.join(PACKAGE, "pullbacks.py"))
_SWEEPS = ("_sweep", "_sweep_nested", "_sweep_rows")  # the backward sweeps (`tape.backward`, `tape.backward_rows`)


def install():
    """Wrap ``warnings._showwarnmsg`` (once) so that warnings from this package's files are attributed to the
    user's code (`attributed`)."""
    shown = warnings._showwarnmsg
    if getattr(shown, "attributes_dualbroadcast_warnings", False):
        return

    def show(message):
        if message.filename.startswith((PACKAGE, GENERATED)):
            message = attributed(message, sys._getframe(1))
        shown(message)

    show.attributes_dualbroadcast_warnings = True
    warnings._showwarnmsg = show


def attributed(message, frame):
    """``message`` (a `warnings.WarningMessage` raised in ``frame``, a frame of this package) at the innermost
    frame of the user's code, its text naming the operation: unchanged if no user frame is on the stack."""
    operation, record, value = None, None, False
    raised_in = frame
    while frame is not None and _ours(frame):
        if frame.f_code.co_name in _SWEEPS and record is None and "i" in frame.f_locals:
            record = frame.f_locals["i"], frame.f_locals["tape"]
        elif operation is None and callable(frame.f_locals.get("func")):  # record_operation, apply_function, ...
            operation, value = frame.f_locals["func"], frame is raised_in  # there: the value, not a partial
        frame = frame.f_back
    if frame is None:
        return message
    if record is not None:
        i, tape = record
        where = (f"in the derivative of {_name(tape.operation(i))} (operation {i} of the tape), in the backward "
                 "sweep of the gradient taken here")
    elif message.filename in _GENERATED_CODE:
        where = _GENERATED_CODE[message.filename]
    elif operation is None:
        where = "in an operation of the function differentiated here"
    elif value:
        where = f"in {_name(operation)}"
    elif message.filename in _DERIVATIVE_FILES:
        where = f"in the derivative of {_name(operation)}"
    else:
        where = f"in {_name(operation)} or its derivative"
    text = f"{message.message} ({where}; raised at {os.path.basename(message.filename)}:{message.lineno})"
    return warnings.WarningMessage(message.category(text), message.category, frame.f_code.co_filename,
                                   frame.f_lineno, message.file, None, message.source)


def _ours(frame):
    """Whether ``frame`` runs this package's code (or code it generated) or NumPy's (which a rule may call)."""
    name = frame.f_globals.get("__name__", "")
    return frame.f_code.co_filename.startswith((PACKAGE, GENERATED)) or name == "numpy" or name.startswith("numpy.")


def _name(operation):
    try:
        return qualified_name(operation)
    except (AttributeError, TypeError):
        return repr(operation)
