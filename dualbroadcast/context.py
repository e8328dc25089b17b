"""The context a NumPy call on a tracked or dual value is recorded in: the tape of the gradient being evaluated
(`ACTIVE_TAPE`), how many `jvp` calls are running (`JVP_DEPTH`), and the hook through which the tape reaches
forward mode (`FORWARD`, set by `forward`, which sits above the tape)."""

import contextvars

# The tape of the gradient being evaluated in this thread/context, if any.
ACTIVE_TAPE = contextvars.ContextVar("dualbroadcast_active_tape", default=None)
# How many db.jvp calls are running in this context (forward mode's levels; `cut` and pending totals read it).
JVP_DEPTH = contextvars.ContextVar("dualbroadcast_jvp_depth", default=0)


# (forward.Dual, forward.apply_function), set by forward.py, which imports this module.
FORWARD = [None, None]
