"""``decode_image``: encoded image bytes (JPEG, PNG, GIF, BMP) to pixels ``[height, width, channels]``.

The input is a string tensor of fixed shape (usually one image per example, ``[]``); each string
becomes its image, so the output's shape is the input's plus ``[height, width, channels]``. The
format is told by the bytes' first ones (JPEG ``FF D8 FF``, PNG ``89 50 4E 47``, GIF ``47 49 46 38``,
BMP ``42 4D``); a GIF gives its first frame. ``channels`` is 1 (gray), 3 (RGB) or 4 (RGBA) whatever
the image holds: the format's own decoder converts where it can (PNG always, JPEG to 1 or 3, BMP to 3
or 4); elsewhere gray is ``tf.image.rgb_to_grayscale`` of the RGB pixels and alpha is 255.

The height and width are known when the pipeline is built, from exactly one of:

- ``size: [h, w]``: every image is h x w pixels (another size stops the run, naming its record);
- ``resize: [h, w]``: every image is resized to h x w with ``method`` (``bilinear`` by default;
  the names of ``tf.image.ResizeMethod``), which does not keep the aspect ratio;
- ``crop: [h, w]``: the central h x w pixels; an image smaller on an axis is padded on both
  sides of that axis with zeros (``tf.image.resize_with_crop_or_pad``).

``dtype`` ``uint8`` (the default) keeps the values 0 to 255 (a resized value is rounded to the
nearest); a float dtype scales them to [0, 1] (value / 255; a resize that overshoots is clipped).
Bytes that do not decode (not one of the four formats, or damaged), and an image of the wrong size,
stop the run with a DataError naming the data file, the record and the feature
(:func:`record_problem` says what is wrong with one record's bytes, read again).
"""
from __future__ import annotations

import re

from batchloaders.transform import building
from batchloaders.transform.extend import register_step
from batchloaders.transform.per_example import map_examples
from batchloaders.transform.registry import CheckContext
from batchloaders.core import limits
from batchloaders.core.model import TensorInfo, format_shape

# (name, the bytes it begins with); _kinds numbers the formats in this order.
FORMATS = (("JPEG", b"\xff\xd8\xff"), ("PNG", b"\x89PNG"), ("GIF", b"GIF8"), ("BMP", b"BM"))
METHODS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "gaussian", "mitchellcubic")
FLOATS = ("float16", "bfloat16", "float32", "float64")
SIZES = ("size", "resize", "crop")
_TF_NOISE = re.compile(r"\{\{[^}]*\}\}|\[Op:[^\]]*\]")  # a decode op's own name and device in its message
# What each format's decoder gives itself, for each channel count asked: the rest is converted here.
_NATIVE = {"JPEG": {1: 1, 3: 3, 4: 3}, "PNG": {1: 1, 3: 3, 4: 4}, "GIF": {1: 3, 3: 3, 4: 3}, "BMP": {1: 3, 3: 3, 4: 4}}
# Every op of the step is built in this name scope: the node names TensorFlow's errors carry then tell
# runtime/translate.py that an image failed to decode, which it locates by reading the records again.
SCOPE = "batchloaders_decode_image"


def image_format(data: bytes) -> str | None:
    """'JPEG', 'PNG', 'GIF' or 'BMP' as the bytes' first ones say; None for anything else."""
    return next((name for name, magic in FORMATS if data.startswith(magic)), None)


def image_shape(data: bytes) -> tuple[int, int, int] | None:
    """(height, width, channels) an image's header gives, read without decoding it; None when the bytes are not
    one of the four formats or their header is cut short. Channels are the stored ones (2: gray and alpha).

    Args:
        data: encoded image bytes.

    Returns:
        The shape TensorFlow's decoder gives the image with ``channels=0`` (a GIF's first frame, a palette PNG
        as RGB or RGBA), or None.
    """
    kind = image_format(data)
    if kind == "PNG" and len(data) >= 26 and data[12:16] == b"IHDR":
        color = data[25]  # gray, -, RGB, palette, gray + alpha, -, RGBA
        channels = {0: 1, 2: 3, 3: 4 if b"tRNS" in data[:data.find(b"IDAT")] else 3, 4: 2, 6: 4}.get(color)
        return (int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big"), channels) if channels else None
    if kind == "GIF" and len(data) >= 10:
        return int.from_bytes(data[8:10], "little"), int.from_bytes(data[6:8], "little"), 3
    if kind == "BMP" and len(data) >= 30:
        height, width = int.from_bytes(data[22:26], "little", signed=True), int.from_bytes(data[18:22], "little")
        return abs(height), width, max(int.from_bytes(data[28:30], "little") // 8, 1)
    return _jpeg_shape(data) if kind == "JPEG" else None


def _jpeg_shape(data: bytes) -> tuple[int, int, int] | None:
    """(height, width, components) of a JPEG's frame header (a SOF marker), walking the segments before it."""
    at = 2
    while at + 9 < len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame (not DHT, JPG, DAC)
            height, width = int.from_bytes(data[at + 5:at + 7], "big"), int.from_bytes(data[at + 7:at + 9], "big")
            return height, width, data[at + 9]
        at += 2 + int.from_bytes(data[at + 2:at + 4], "big")
    return None


def _size(args: dict) -> tuple[str, list] | None:
    given = [key for key in SIZES if key in args]
    return (given[0], list(args[given[0]])) if len(given) == 1 else None


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    ok = True
    if info.dtype != "string" or None in info.shape:
        ctx.report(("tensor",), f"found dtype {info.dtype}, shape {format_shape(info.shape)}: expected dtype string "
                                "of a fixed shape (usually [], one encoded image per example)")
        ok = False
    given = [key for key in SIZES if key in args]
    if len(given) != 1:
        found = "none of them" if not given else " and ".join(given)
        ctx.report(("args",), f"found {found}: expected exactly one of size (every image is that size), resize or "
                              "crop, so that the images' shape is known when the pipeline is built")
        ok = False
    if "method" in args and "resize" not in args:
        ctx.report(("args", "method"), "found method without resize: expected method only with resize")
        ok = False
    if not ok:
        return None
    return TensorInfo(args.get("dtype", "uint8"), tuple(info.shape) + tuple(_size(args)[1]) + (args["channels"],))


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Decode a batch ``values`` [B, ...] of encoded images to [B, ..., height, width, channels]."""
    import tensorflow as tf

    height, width, channels = info_out.shape[-3:]
    resized = "resize" in args
    # The channel counts the formats' decoders are asked for: one decode call per image, a cond when two.
    natives = sorted({_NATIVE[name][channels] for name, _ in FORMATS})
    with tf.name_scope(SCOPE):
        flat = tf.reshape(values, [-1])
        which = tf.gather([natives.index(_NATIVE[name][channels]) for name, _ in FORMATS], _kinds(flat))
        pixels = map_examples(lambda pair: _one(pair[0], pair[1], args, natives, channels), (flat, which),
                              tf.TensorSpec([height, width, channels], tf.float32 if resized else tf.uint8))
        pixels = _as_dtype(pixels, tf.as_dtype(info_out.dtype), resized)
        shape = tf.concat([tf.shape(values), [height, width, channels]], 0)
        return tf.reshape(pixels, shape), lengths


def _kinds(flat):
    """The index in FORMATS of each string's format, asserted to be one of them (a readable message where
    TensorFlow's decoders would name formats the step does not take)."""
    import tensorflow as tf

    kinds = tf.fill(tf.shape(flat), len(FORMATS))
    for index, (_, magic) in reversed(list(enumerate(FORMATS))):
        kinds = tf.where(tf.strings.substr(flat, 0, len(magic)) == magic, index, kinds)
    known = tf.reduce_all(kinds < len(FORMATS))
    message = f"{building.place()}: found bytes that are not a JPEG, PNG, GIF or BMP image"
    with tf.control_dependencies([tf.debugging.Assert(known, [message], summarize=1)]):
        return tf.identity(kinds)


def _one(data, which, args: dict, natives: list[int], channels: int):
    """One image's pixels [height, width, channels]: uint8, or float32 in [0, 255] when resized. ``which``: the
    index in ``natives`` of the channel count its format's decoder gives."""
    import tensorflow as tf

    if len(natives) == 1:
        image = _decoder(data, natives[0], channels)()
    else:
        image = tf.cond(tf.equal(which, 0), _decoder(data, natives[0], channels),
                        _decoder(data, natives[1], channels))
    how, (height, width) = _size(args)
    if how == "resize":
        return tf.image.resize(tf.cast(image, tf.float32), [height, width], method=args.get("method", "bilinear"))
    if how == "crop":
        return tf.image.resize_with_crop_or_pad(image, height, width)
    # Fails on another size (its record is found again and named: runtime/translate.py).
    return tf.ensure_shape(image, [height, width, channels])


def _decoder(data, native: int, channels: int):
    """The function decoding ``data`` to ``native`` channels, then converting them to ``channels``."""
    import tensorflow as tf

    def decode():
        image = tf.ensure_shape(tf.io.decode_image(data, channels=native, expand_animations=False),
                                [None, None, native])
        if native == channels:
            return image
        if channels == 1:
            return tf.image.rgb_to_grayscale(image)
        return tf.concat([image, tf.fill(tf.concat([tf.shape(image)[:2], [1]], 0), tf.constant(255, tf.uint8))], -1)
    return decode


def _as_dtype(pixels, dtype, resized: bool):
    """uint8 pixels 0..255 (float32 when resized) as ``dtype``: uint8 rounded, floats scaled to [0, 1]."""
    import tensorflow as tf

    if dtype == tf.uint8:
        return tf.saturate_cast(tf.round(pixels), tf.uint8) if resized else pixels
    scaled = tf.cast(pixels, tf.float32) / 255.0
    if resized:  # bicubic, lanczos and mitchellcubic overshoot near edges
        scaled = tf.clip_by_value(scaled, 0.0, 1.0)
    return tf.cast(scaled, dtype)


def record_problem(args: dict, data: bytes) -> str | None:
    """What stops the step on one encoded image ``data`` (read again from its record), None if nothing does.

    Args:
        args: the step's args.
        data: the stored bytes of one image.

    Returns:
        A sentence saying what was found and what was expected, or None when the image decodes (to the
        step's size, when it has one).
    """
    import tensorflow as tf

    kind = image_format(data)
    if kind is None:
        start = " ".join(f"{b:02X}" for b in data[:8]) or "nothing (0 bytes)"
        return (f"found bytes beginning {start}: expected a JPEG (FF D8 FF), PNG (89 50 4E 47), GIF (47 49 46 38) or "
                "BMP (42 4D) image")
    try:
        image = tf.io.decode_image(data, channels=_NATIVE[kind][args["channels"]], expand_animations=False)
    except tf.errors.OpError as error:
        said = " ".join(_TF_NOISE.sub("", error.message).split())
        return f"found {len(data):,} bytes of a {kind} image that does not decode ({said})"
    given = _size(args)
    if given is not None and given[0] == "size" and list(image.shape[:2]) != given[1]:
        return (f"found an image of {image.shape[0]} x {image.shape[1]} pixels: expected {given[1][0]} x {given[1][1]} "
                "(the step's size; resize or crop makes images of other sizes fit)")
    return None


def decoded_features(config) -> dict[str, list[tuple[str, dict]]]:
    """Stored feature name -> (JSON path, args) of each decode_image step of ``config`` (a LoaderConfig) on a
    tensor read from it: what :func:`record_problems` checks in a record read again.

    Args:
        config: the checked LoaderConfig.

    Returns:
        The steps by the stored feature their tensor is read from; empty when the config decodes no image.
    """
    stored = {primary.to_name: primary.from_name for primary in config.primary_features}
    out: dict[str, list[tuple[str, dict]]] = {}
    for step in config.processing_steps:
        if step.type == "decode_image" and step.tensor in stored:
            out.setdefault(stored[step.tensor], []).append((f"{config.source}: {step.json_path}", dict(step.args)))
    return out


def record_problems(serialized: bytes, features: dict[str, list[tuple[str, dict]]]) -> str | None:
    """What stops the decode_image steps ``features`` (from :func:`decoded_features`) on one serialized record.

    Args:
        serialized: a tf.train.Example or SequenceExample record.
        features: stored feature name -> (JSON path, args) of the steps decoding it.

    Returns:
        The first problem, naming the feature and the step; None when every image decodes, or when the
        record cannot be read as a protobuf (the manifest's checks say so).
    """
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    try:
        context = tf.train.SequenceExample.FromString(serialized).context.feature
    except DecodeError:
        return None
    for name, steps in features.items():
        images = list(context[name].bytes_list.value) if name in context else []
        for path, args in steps:
            for index, data in enumerate(images):
                problem = record_problem(args, data)
                if problem:
                    which = f" (image {index} of {len(images)})" if len(images) > 1 else ""
                    return f"feature {name!r}{which} (the decode_image step {path}): {problem}"
    return None


_PAIR = {
    "type": "array",
    "minItems": 2,
    "maxItems": 2,
    "items": {"type": "integer", "minimum": 1, "maximum": limits.MAX_DIM},
    "examples": [[224, 224]]
}

SCHEMA = {
    "title": "decode_image step arguments",
    "description": "Decode JPEG, PNG, GIF (first frame) or BMP bytes to pixels [height, width, channels]; exactly one "
                   "of size, resize or crop gives the height and width.",
    "type": "object",
    "additionalProperties": False,
    "required": ["channels"],
    "properties": {
        "channels": {
            "description": "Channels of the output: 1 (gray), 3 (RGB) or 4 (RGBA, alpha 255 where the image has none).",
            "type": "integer",
            "enum": [1, 3, 4]
        },
        "dtype": {
            "title": "output dtype",
            "description": "uint8 keeps the values 0 to 255; a float dtype scales them to [0, 1].",
            "type": "string",
            "enum": ["uint8", *FLOATS],
            "default": "uint8"
        },
        "size": {
            "description": "[height, width] of every image; an image of another size stops the run naming its record.",
            **_PAIR
        },
        "resize": {
            "description": "[height, width] every image is resized to, with method (the aspect ratio is not kept).",
            **_PAIR
        },
        "method": {
            "description": "How resize samples (tf.image.ResizeMethod): bilinear (the default), nearest, bicubic, "
                           "area, lanczos3, lanczos5, gaussian or mitchellcubic. Only with resize.",
            "type": "string",
            "enum": list(METHODS),
            "default": "bilinear"
        },
        "crop": {
            "description": "[height, width] of the central part kept; an image smaller on an axis is padded with "
                           "zeros on both sides.",
            **_PAIR
        }
    }
}


register_step("decode_image", schema=SCHEMA, infer=_infer, batched=True)(_build)
