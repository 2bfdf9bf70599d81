"""``batchloaders preview CONFIG --record FILE:N`` (or ``--record I``): one record, decoded as the loader decodes it.

FILE is relative to the dataset directory, or absolute; N counts from 0 in that file. A
bare I counts over the whole dataset, its files in the config's order. Each tensor is
printed with its dtype, shape and values (at most SHOWN_VALUES of them)::

    $ batchloaders preview configs/chars_independent.yaml --record chars-1.tfrecords:5
    config: configs/chars_independent.yaml
    record 5 of demo_data/chars/chars-1.tfrecords (read at its offset through the record index)
      context: int32 [16]: [102, 121, 32, 97, 116, 116, 114, 105, 98, 117, 116, 101, 115, 32, 111, 114]
      next_char: int32 []: 32

Without a record index the file is read from its start up to the record, and the output says so.
"""
from __future__ import annotations

from typing import TextIO

import numpy as np

from batchloaders.config.config import load_config
from batchloaders.runtime.record_access import fetch
from batchloaders.read.records import shown

SHOWN_VALUES = 64


class Usage(ValueError):
    """A --record that is neither FILE:N nor I."""


def parse_target(text: str) -> tuple[str | None, int]:
    """'FILE:N' -> (FILE, N); 'I' -> (None, I); Usage otherwise."""
    file, sep, number = text.rpartition(":")
    try:
        n = int(number)
    except ValueError:
        raise Usage(f"--record {text!r}: expected FILE:N (record N of data file FILE, counted from 0) or a record "
                    "number over the whole dataset") from None
    if sep and not file:
        raise Usage(f"--record {text!r}: expected a data file before ':'")
    return (file or None), n


def run(path: str, target: str, out: TextIO, trust_plugins: bool = True) -> int:
    """Print the record ``target`` ('FILE:N' or 'I') names; raise BatchLoaderError (or Usage) when it cannot."""
    file, n = parse_target(target)
    config = load_config(path, trust_plugins=trust_plugins)
    fetched = fetch(config, file, None if file is None else n, index=n if file is None else None)
    how = ("read at its offset through the record index" if fetched.by_index else
           f"read from the start of the file: {fetched.hint}")
    print(f"config: {config.source}", file=out)
    print(f"record {fetched.number} of {shown(fetched.path)} ({how})", file=out)
    for name, value in fetched.values.items():
        print(f"  {name}: {value_text(value)}", file=out)
    return 0


def value_text(value: np.ndarray) -> str:
    """'int32 [16]: [1, 2, ...]', the values flattened when there are more than SHOWN_VALUES."""
    value = np.asarray(value)
    dtype = "string" if value.dtype.kind in "OSU" else str(value.dtype)
    head = f"{dtype} {list(value.shape)}"
    if value.ndim == 0:
        return f"{head}: {_item(value.item())}"
    flat = value.reshape(-1)
    if flat.size <= SHOWN_VALUES:
        return f"{head}: {_nested(value.tolist())}"
    first = ", ".join(_item(v) for v in flat[:SHOWN_VALUES].tolist())
    return f"{head}: [{first}, ...] (first {SHOWN_VALUES} of {flat.size:,} values, flattened)"


def _nested(values) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_nested(v) for v in values) + "]"
    return _item(values)


def _item(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value) if isinstance(value, bytes) else str(value)
