"""The value a tensor of a dtype is filled with by default, and whether a config's value fits a dtype
(padding values, constants, clip bounds): the config checks and the steps share them."""
from __future__ import annotations


def default_value(dtype: str):
    return "" if dtype == "string" else (False if dtype == "bool" else 0)


def check_value(value, dtype: str) -> str | None:
    """Why ``value`` cannot fill a ``dtype`` tensor, or None if it can."""
    if dtype == "string":
        return None if isinstance(value, str) else f"found {value!r}: expected a string for dtype 'string'"
    if dtype == "bool":
        return None if isinstance(value, bool) else f"found {value!r}: expected true or false for dtype 'bool'"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"found {value!r}: expected a number for dtype {dtype!r}"
    import numpy as np  # a dependency of TensorFlow; only its type limits are used here

    if dtype.startswith(("int", "uint")):
        limits = np.iinfo(dtype)
        if not isinstance(value, int):
            return f"found {value!r}: expected an integer (without a decimal point) for dtype {dtype!r}"
    else:
        limits = np.finfo(np.float32 if dtype == "bfloat16" else dtype)
    if isinstance(value, int) and dtype.startswith(("float", "bfloat")) and abs(value) > 2**1024:
        return f"found an integer of {len(str(abs(value)))} digits: expected a value from {limits.min} to {limits.max} for dtype {dtype!r}"
    # Python numbers against Python limits: numpy would cast the value to the dtype first (and warn).
    low, high = (int(limits.min), int(limits.max)) if dtype.startswith(("int", "uint")) else (float(limits.min), float(limits.max))
    if not low <= value <= high:
        return f"found {value!r}: expected a value from {limits.min} to {limits.max} for dtype {dtype!r}"
    return None
