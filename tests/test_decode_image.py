"""The decode_image step: encoded images (JPEG, PNG, GIF, BMP) to pixels, and what ``init`` writes for them.

Images are stored as the ecosystem stores them: one encoded image under ``image/encoded`` in a plain
tf.train.Example, beside an int64 ``image/class/label``. Pixels say where they came from: the image of
record r of file f holds pixel(i, j, k) = (40 f + 10 r + 3 i + 5 j + 7 k) mod 256 (see :func:`pixels`) and
its label is 10 f + r, so every decoded batch is compared with the image its label names.
"""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ConfigError, DataError, build_input_fn, load_config
from batchloaders.cli import init
from batchloaders.transform.steps.decode_image import image_shape
from conftest import collect, example, feature, loader_config, write_manifest, write_records

H, W = 6, 7  # the stored images' size


def pixels(f: int, r: int, height: int = H, width: int = W, channels: int = 3) -> np.ndarray:
    """The pixels stored in record r of file f."""
    i, j, k = np.meshgrid(np.arange(height), np.arange(width), np.arange(channels), indexing="ij")
    return ((40 * f + 10 * r + 3 * i + 5 * j + 7 * k) % 256).astype(np.uint8)


def smooth(f: int, r: int) -> np.ndarray:
    """A gradient for JPEG (whose loss grows with sharp edges): values stay within 0..255 without wrapping."""
    i, j, k = np.meshgrid(np.arange(16), np.arange(16), np.arange(3), indexing="ij")
    return (20 * f + 10 * r + 4 * i + 3 * j + 20 * k).astype(np.uint8)


def pil_bytes(array: np.ndarray, fmt: str, mode: str | None = None, **kwargs) -> bytes:
    from PIL import Image

    image = Image.fromarray(array)
    if mode:
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


def png(array: np.ndarray) -> bytes:
    return tf.io.encode_png(array).numpy()


def jpeg(array: np.ndarray) -> bytes:
    return tf.io.encode_jpeg(array, quality=95).numpy()


def write_images(directory, encode=png, make=pixels, files: int = 2, records: int = 3, replace=None) -> str:
    """``files`` files of ``records`` Examples {image/encoded, image/class/label}; ``replace``: {(f, r): bytes}
    stored instead of that record's image."""
    replace = replace or {}
    for f in range(files):
        write_records(directory / f"train-{f:05d}-of-{files:05d}", [
            example(**{"image/encoded": ("bytes", [replace.get((f, r)) or encode(make(f, r))]),
                       "image/class/label": ("int", [10 * f + r])}) for r in range(records)])
    write_manifest(directory, [feature("image/encoded", "string", [], "string"),
                               feature("image/class/label", "int64", [], "int")])
    return str(directory)


def image_config(directory, args: dict, **overrides) -> dict:
    return loader_config(directory, [("image/encoded", "image"), ("image/class/label", "label")], inputs=["image"],
                         targets=["label"], processing_steps=[{"tensor": "image", "type": "decode_image",
                                                               "args": args}], **overrides)


def decoded(config) -> dict[int, np.ndarray]:
    """label -> the decoded image of that record, over one epoch (each record exactly once)."""
    out = {}
    for features, targets in collect(build_input_fn(config)()):
        for image, label in zip(features["image"], targets["label"]):
            assert int(label) not in out
            out[int(label)] = image
    return out


def by_label(make, files: int = 2, records: int = 3) -> dict[int, np.ndarray]:
    return {10 * f + r: make(f, r) for f in range(files) for r in range(records)}


# ================================================================ pixels as stored

def test_png_decodes_to_the_stored_pixels(tmp_path):
    got = decoded(image_config(write_images(tmp_path), {"channels": 3, "size": [H, W]}))
    want = by_label(pixels)
    assert got.keys() == want.keys()
    for label, image in got.items():
        assert image.dtype == np.uint8 and image.shape == (H, W, 3)
        np.testing.assert_array_equal(image, want[label])


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "bfloat16"])
def test_float_dtypes_scale_to_0_1(tmp_path, dtype):
    got = decoded(image_config(write_images(tmp_path), {"channels": 3, "size": [H, W], "dtype": dtype}))
    for label, image in got.items():
        assert image.dtype == np.dtype(tf.as_dtype(dtype).as_numpy_dtype)
        want = (by_label(pixels)[label].astype(np.float32) / np.float32(255)).astype(image.dtype)
        np.testing.assert_array_equal(image, want)  # value / 255, then the dtype's nearest


def test_jpeg_decodes_within_its_loss(tmp_path):
    got = decoded(image_config(write_images(tmp_path, jpeg, smooth), {"channels": 3, "size": [16, 16]}))
    want = by_label(smooth)
    assert got.keys() == want.keys()
    for label, image in got.items():
        assert np.abs(image.astype(int) - want[label].astype(int)).max() <= 4  # quality 95, a smooth gradient


def test_resize_nearest_repeats_each_pixel(tmp_path):
    got = decoded(image_config(write_images(tmp_path), {"channels": 3, "resize": [2 * H, 3 * W],
                                                        "method": "nearest"}))
    for label, image in got.items():
        np.testing.assert_array_equal(image, np.repeat(np.repeat(by_label(pixels)[label], 2, 0), 3, 1))


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_resize_to_the_same_size_keeps_the_pixels(tmp_path, dtype):
    got = decoded(image_config(write_images(tmp_path), {"channels": 3, "resize": [H, W], "dtype": dtype}))
    for label, image in got.items():
        want = by_label(pixels)[label]
        np.testing.assert_array_equal(image, want if dtype == "uint8" else want.astype(np.float32) / np.float32(255))


def test_resize_area_halving_averages_blocks(tmp_path):
    d = write_images(tmp_path, make=lambda f, r: pixels(f, r, 6, 8))
    got = decoded(image_config(d, {"channels": 3, "resize": [3, 4], "method": "area"}))
    for label, image in got.items():
        f, r = divmod(label, 10)
        blocks = pixels(f, r, 6, 8).astype(np.float64).reshape(3, 2, 4, 2, 3).mean(axis=(1, 3))
        np.testing.assert_array_equal(image, np.round(blocks).astype(np.uint8))


def test_jpeg_resized_stays_within_its_loss(tmp_path):
    got = decoded(image_config(write_images(tmp_path, jpeg, smooth), {"channels": 3, "resize": [32, 32],
                                                                      "method": "nearest"}))
    for label, image in got.items():
        want = np.repeat(np.repeat(by_label(smooth)[label], 2, 0), 2, 1)
        assert np.abs(image.astype(int) - want.astype(int)).max() <= 4


def test_crop_keeps_the_centre_and_pads_with_zeros(tmp_path):
    d = write_images(tmp_path)
    got = decoded(image_config(d, {"channels": 3, "crop": [4, 5]}))
    for label, image in got.items():
        np.testing.assert_array_equal(image, by_label(pixels)[label][1:5, 1:6])
    got = decoded(image_config(d, {"channels": 3, "crop": [8, 9]}))
    for label, image in got.items():
        want = np.zeros((8, 9, 3), np.uint8)
        want[1:7, 1:8] = by_label(pixels)[label]
        np.testing.assert_array_equal(image, want)


def test_several_images_per_record(tmp_path):
    """A fixed shape [2] of encoded images: [B, 2, height, width, channels]."""
    write_records(tmp_path / "part-0.tfrecords", [
        example(views=("bytes", [png(pixels(0, r)), png(pixels(1, r))]), label=("int", [r])) for r in range(3)])
    write_manifest(tmp_path, [feature("views", "string", [2], "string"), feature("label", "int64", [], "int")])
    config = loader_config(tmp_path, [("views", "views"), ("label", "label")], inputs=["views"], targets=["label"],
                           target_batch_size=3, processing_steps=[
                               {"tensor": "views", "type": "decode_image", "args": {"channels": 3, "size": [H, W]}}])
    (features, targets), = collect(build_input_fn(config)())
    assert features["views"].shape == (3, 2, H, W, 3)
    for r in range(3):
        np.testing.assert_array_equal(features["views"][r], np.stack([pixels(0, r), pixels(1, r)]))


# ---------------------------------------------------------------- formats and channels

def gray3(f: int, r: int) -> np.ndarray:
    """RGB pixels with R = G = B, so that every gray conversion gives the value itself."""
    return np.repeat(pixels(f, r, channels=1), 3, axis=2)


FORMAT_CASES = {
    # (encode, stored pixels, channels, the decoded pixels of stored ones)
    "png rgb to rgba": (png, pixels, 4, lambda p: np.concatenate([p, np.full(p.shape[:2] + (1,), 255, np.uint8)], 2)),
    "png gray to rgb": (png, lambda f, r: pixels(f, r, channels=1), 3, lambda p: np.repeat(p, 3, 2)),
    "png gray rgb to gray": (png, gray3, 1, lambda p: p[:, :, :1]),
    "bmp rgb": (lambda a: pil_bytes(a, "BMP"), pixels, 3, lambda p: p),
    "bmp to gray": (lambda a: pil_bytes(a, "BMP"), gray3, 1, lambda p: p[:, :, :1]),
    "bmp to rgba": (lambda a: pil_bytes(a, "BMP"), pixels, 4,
                    lambda p: np.concatenate([p, np.full(p.shape[:2] + (1,), 255, np.uint8)], 2)),
    "gif rgb": (lambda a: pil_bytes(a, "GIF"), pixels, 3, lambda p: p),
    "gif to gray": (lambda a: pil_bytes(a, "GIF"), gray3, 1, lambda p: p[:, :, :1]),
    "gif to rgba": (lambda a: pil_bytes(a, "GIF"), pixels, 4,
                    lambda p: np.concatenate([p, np.full(p.shape[:2] + (1,), 255, np.uint8)], 2)),
    "jpeg gray rgb to gray": (jpeg, lambda f, r: np.repeat(smooth(f, r)[:, :, :1], 3, 2), 1, lambda p: p[:, :, :1]),
    "jpeg to rgba": (jpeg, smooth, 4, lambda p: np.concatenate([p, np.full(p.shape[:2] + (1,), 255, np.uint8)], 2)),
}


@pytest.mark.parametrize("case", sorted(FORMAT_CASES))
def test_formats_and_channels(tmp_path, case):
    encode, make, channels, expect = FORMAT_CASES[case]
    height, width = make(0, 0).shape[:2]
    got = decoded(image_config(write_images(tmp_path, encode, make), {"channels": channels,
                                                                      "size": [height, width]}))
    for label, image in got.items():
        want = expect(make(*divmod(label, 10)))
        assert image.shape == (height, width, channels)
        if encode is jpeg:
            assert np.abs(image.astype(int) - want.astype(int)).max() <= 4
            assert (image[:, :, 3:] == 255).all()
        else:
            np.testing.assert_array_equal(image, want)


def test_an_animated_gif_gives_its_first_frame(tmp_path):
    from PIL import Image

    def animated(array):
        out = io.BytesIO()
        Image.fromarray(array).save(out, format="GIF", save_all=True, append_images=[Image.fromarray(255 - array)])
        return out.getvalue()
    got = decoded(image_config(write_images(tmp_path, animated), {"channels": 3, "size": [H, W]}))
    for label, image in got.items():
        np.testing.assert_array_equal(image, by_label(pixels)[label])


IMAGE_SHAPES = {
    # (PIL format, mode or None, save keywords): the header's (height, width, channels) of a 7 x 9 RGB image
    ("PNG", None, ()): (7, 9, 3), ("PNG", "L", ()): (7, 9, 1), ("PNG", "LA", ()): (7, 9, 2),
    ("PNG", "RGBA", ()): (7, 9, 4), ("PNG", "P", ()): (7, 9, 3), ("PNG", "P", (("transparency", 0),)): (7, 9, 4),
    ("JPEG", None, ()): (7, 9, 3), ("JPEG", "L", ()): (7, 9, 1), ("JPEG", None, (("progressive", True),)): (7, 9, 3),
    ("GIF", None, ()): (7, 9, 3), ("BMP", None, ()): (7, 9, 3), ("BMP", "RGBA", ()): (7, 9, 4),
    ("BMP", "L", ()): (7, 9, 1),
}


@pytest.mark.parametrize("case", sorted(IMAGE_SHAPES, key=str), ids=str)
def test_image_shape_reads_the_header_as_the_decoder_sees_it(case):
    fmt, mode, kwargs = case
    data = pil_bytes(pixels(0, 0, 7, 9), fmt, mode, **dict(kwargs))
    assert image_shape(data) == IMAGE_SHAPES[case]
    assert tuple(tf.io.decode_image(data, channels=0, expand_animations=False).shape) == IMAGE_SHAPES[case]
    assert image_shape(data[:5]) is None and image_shape(b"hello") is None


# ================================================================ errors

def located(config) -> tuple[str, str, str]:
    with pytest.raises(DataError) as caught:
        list(build_input_fn(config)().as_numpy_iterator())
    assert isinstance(caught.value, tf.errors.InvalidArgumentError)  # still TensorFlow's error class too
    problem, = caught.value.problems
    return problem.file, problem.path, problem.message


def test_a_damaged_image_names_its_file_record_and_feature(tmp_path):
    damaged = png(pixels(1, 2))[:8] + b"x" * 40  # a PNG signature, then no PNG
    d = write_images(tmp_path, replace={(1, 2): damaged})
    file, record, message = located(image_config(d, {"channels": 3, "size": [H, W]}))
    assert (file, record) == (str(tmp_path / "train-00001-of-00002"), "record 2")
    assert message == ("feature 'image/encoded' (the decode_image step <dict>: $.args.processing_steps[0]): found 48 "
                       "bytes of a PNG image that does not decode (Invalid PNG. Failed to initialize decoder.)")


def test_bytes_that_are_no_image_name_their_record(tmp_path):
    d = write_images(tmp_path, replace={(0, 1): b"hello"})
    file, record, message = located(image_config(d, {"channels": 3, "resize": [4, 4]}))
    assert (file, record) == (str(tmp_path / "train-00000-of-00002"), "record 1")
    assert message.endswith("found bytes beginning 68 65 6C 6C 6F: expected a JPEG (FF D8 FF), PNG (89 50 4E 47), "
                            "GIF (47 49 46 38) or BMP (42 4D) image")


def test_a_truncated_jpeg_names_its_record(tmp_path):
    d = write_images(tmp_path, jpeg, smooth, replace={(1, 0): jpeg(smooth(1, 0))[:300]})
    file, record, message = located(image_config(d, {"channels": 3, "size": [16, 16]}))
    assert (file, record) == (str(tmp_path / "train-00001-of-00002"), "record 0")
    assert "found 300 bytes of a JPEG image that does not decode" in message


def test_an_image_of_another_size_names_its_record(tmp_path):
    d = write_images(tmp_path, replace={(1, 1): png(pixels(1, 1, 5, W))})
    file, record, message = located(image_config(d, {"channels": 3, "size": [H, W]}))
    assert (file, record) == (str(tmp_path / "train-00001-of-00002"), "record 1")
    assert message.endswith("found an image of 5 x 7 pixels: expected 6 x 7 (the step's size; resize or crop makes "
                            "images of other sizes fit)")
    assert len(decoded(image_config(d, {"channels": 3, "resize": [H, W]}))) == 6  # resize takes it


def test_keras_fit_names_the_damaged_record(tmp_path):
    import keras

    d = write_images(tmp_path, replace={(1, 2): b"\x89PNG not really"})
    config = image_config(d, {"channels": 3, "size": [H, W], "dtype": "float32"})
    image = keras.Input((H, W, 3), name="image")
    model = keras.Model(image, keras.layers.Dense(1, name="label")(keras.layers.Flatten()(image)))
    model.compile("sgd", "mse")
    input_fn = build_input_fn(config, model=model)
    with pytest.raises(DataError) as caught:
        model.fit(input_fn(), epochs=1, verbose=0, shuffle=False)
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (str(tmp_path / "train-00001-of-00002"), "record 2")
    assert "found 15 bytes of a PNG image that does not decode" in problem.message


CONFIG_ERRORS = [
    # (tensor, args, JSON path of the problem, what it says)
    ("label", {"channels": 3, "size": [H, W]}, ".tensor", "found dtype int64, shape []: expected dtype string"),
    ("image", {"channels": 3}, ".args", "found none of them: expected exactly one of size"),
    ("image", {"channels": 3, "size": [H, W], "crop": [2, 2]}, ".args", "found size and crop: expected exactly one"),
    ("image", {"channels": 3, "crop": [2, 2], "method": "area"}, ".args.method",
     "found method without resize: expected method only with resize"),
    ("image", {"channels": 2, "size": [H, W]}, ".args.channels", "2"),
    ("image", {"channels": 3, "resize": [H]}, ".args.resize", "expected at least 2 items, found 1"),
    ("image", {"channels": 3, "resize": [H, W], "method": "linear"}, ".args.method", "linear"),
    ("image", {"size": [H, W]}, ".args", "channels"),
]


@pytest.mark.parametrize(("tensor", "args", "path", "says"), CONFIG_ERRORS)
def test_config_errors_name_the_step(tmp_path, tensor, args, path, says):
    config = image_config(write_images(tmp_path, records=1), args)
    config["args"]["processing_steps"][0]["tensor"] = tensor
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert any(p.path == "$.args.processing_steps[0]" + path and says in p.message for p in caught.value.problems), \
        caught.value.problems


def test_the_pipeline_has_no_python_ops(tmp_path):
    dataset = build_input_fn(image_config(write_images(tmp_path), {"channels": 1, "resize": [3, 3]}))()
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    ops = {node.op for node in graph.node} | {node.op for f in graph.library.function for node in f.node_def}
    assert "DecodeImage" in ops
    assert not ops & {"PyFunc", "PyFuncStateless", "EagerPyFunc", "GeneratorDataset"}


# ================================================================ init

def flat(text: str) -> str:
    """``text`` without whitespace: comments wrap at spaces and hyphens."""
    return "".join(text.split())


def init_config(directory, tmp_path, **kwargs) -> tuple[str, str]:
    """(the text ``batchloaders init`` writes for ``directory``, its path)."""
    path = str(tmp_path / "images.yaml")
    assert init.run(str(directory), init.Choices(output=path, targets=["image/class/label"], **kwargs)) == 0
    with open(path, encoding="utf-8") as f:
        return f.read(), path


@pytest.mark.parametrize("encode", [png, jpeg], ids=["png", "jpeg"])
def test_init_writes_the_step_and_the_config_trains(tmp_path, encode):
    import keras

    d = write_images(tmp_path / "data", encode, smooth, files=2, records=4)
    (tmp_path / "data" / "__manifest__.json").unlink()  # init writes it, as for data found as it is
    text, path = init_config(tmp_path / "data", tmp_path, pattern="train-*")
    kind = "PNG" if encode is png else "JPEG"
    assert flat(f"image/encoded holds {kind} images, 16 x 16 pixels with 3 channels in train-00000-of-00002: "
                "record 0: decode_image gives float32 pixels [16, 16, 3] scaled to [0, 1] (dtype uint8 keeps 0 to "
                "255 in a quarter of the memory); every image of the 8 records looked at has that size") in \
        flat(text.replace("    #", ""))
    assert ('    - {tensor: "image_encoded", type: decode_image, args: {channels: 3, size: [16, 16], dtype: '
            'float32}}') in text.splitlines()
    config = load_config(path)
    assert config.tensors["image_encoded"].shape == (16, 16, 3) and config.inputs == ("image_encoded",)
    image = keras.Input((16, 16, 3), name="image_encoded")
    model = keras.Model(image, keras.layers.Dense(1, name="image_class_label")(keras.layers.Flatten()(image)))
    model.compile(keras.optimizers.SGD(1e-3), "mse")
    history = model.fit(build_input_fn(path, model=model)(), epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    batch, _ = next(iter(build_input_fn(path)()))
    assert float(tf.reduce_min(batch["image_encoded"])) >= 0.0 and float(tf.reduce_max(batch["image_encoded"])) <= 1.0


def test_init_resizes_images_of_different_sizes_to_the_first(tmp_path):
    d = write_images(tmp_path / "data", replace={(0, 2): png(pixels(0, 2, 5, 9))})
    text, path = init_config(d, tmp_path)
    assert flat("sizes differ (5 x 9 in train-00000-of-00002: record 2), so every image is resized to the "
                "first's (bilinear; crop keeps the central part instead)") in flat(text.replace("    #", ""))
    assert "args: {channels: 3, resize: [6, 7], dtype: float32}" in text
    assert load_config(path).tensors["image_encoded"].shape == (H, W, 3)


def test_init_takes_gray_images_as_one_channel(tmp_path):
    d = write_images(tmp_path / "data", make=lambda f, r: pixels(f, r, channels=1))
    text, _ = init_config(d, tmp_path)
    assert "args: {channels: 1, size: [6, 7], dtype: float32}" in text


def test_manifest_notes_images_not_raw_tensors(tmp_path, capsys):
    """BMPs of one size are values of one length, which would read as raw tensors: they are images."""
    from batchloaders.cli.main import main

    d = write_images(tmp_path, lambda a: pil_bytes(a, "BMP"))
    (tmp_path / "__manifest__.json").unlink()
    with pytest.raises(SystemExit) as stopped:
        main(["manifest", d])
    assert stopped.value.code == 0
    printed = "".join(capsys.readouterr())
    assert ("image/encoded: every value is an encoded image (BMP): the decode_image step turns it into pixels "
            "(`batchloaders init` writes one)") in printed
    assert "--raw" not in printed
    features = json.loads((tmp_path / "__manifest__.json").read_text())["features"]
    assert {"name": "image/encoded", "dtype": "string", "shape": [], "var_len": False,
            "deserialize_type": "string"} in features


def test_init_leaves_text_alone(tmp_path, capsys):
    """Text that begins as an image format does, but holds no image header, is not taken for images."""
    write_records(tmp_path / "data" / "part-0.tfrecords", [
        example(text=("bytes", [b"\x89PNG is a word here" if r == 1 else b"BMW"]), label=("int", [r]))
        for r in range(3)])
    assert init.run(str(tmp_path / "data"), init.Choices(output=str(tmp_path / "c.yaml"))) == 0
    assert "decode_image" not in (tmp_path / "c.yaml").read_text()
    assert "encoded image" not in "".join(capsys.readouterr())
