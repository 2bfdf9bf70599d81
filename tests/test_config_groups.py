"""LoaderConfig's groups: each YAML config's reading, shuffling and window keys land in ReadOptions,
ShuffleOptions and WindowSpec, defaults where a key is absent; a loader without windows has none."""
from __future__ import annotations

import pytest

from batchloaders import load_config
from batchloaders.core.model import ReadOptions, ShuffleOptions, WindowSpec
from conftest import example, feature, write_manifest, write_records

HEAD = """\
type: {loader}
model: {{inputs: [x]}}
args:
  dataset: {{type: dir, args: {{data_dir: {data}}}}}
  primary_features: [{{from_name: x, to_name: x}}]
  target_batch_size: 2
  drop_remainder: false
  epochs: 1
"""
SHUFFLED = """\
  shuffle: true
  num_shuffle_buffer_elements: 64
  num_filenames_shuffle_buffer: 8
  num_mix_files: 2
"""
BUFFERS = ShuffleOptions(shuffle=True, num_shuffle_buffer_elements=64, num_filenames_shuffle_buffer=8,
                         num_mix_files=2)

# (loader, the args after HEAD, ReadOptions, ShuffleOptions, WindowSpec, multi_load, seed)
CASES = [
    ("independent", "  num_read_buffer_bytes: 0\n  num_prefetch: 0\n",
     ReadOptions(num_read_buffer_bytes=0, num_prefetch=0), ShuffleOptions(), None, False, None),
    ("independent", """\
  num_read_buffer_bytes: 65536
  num_prefetch: -1
  num_parallel_reads: 3
  num_parallel_parses: -1
  sloppy_interleave: true
  num_interleave_out_buffer_elements: 4
  num_interleave_in_buffer_elements: 5
  on_corrupt: skip_file
  multi_load: true
  seed: 7
""" + SHUFFLED,
     ReadOptions(num_read_buffer_bytes=65536, num_prefetch=None, num_parallel_reads=3, num_parallel_parses=None,
                 sloppy_interleave=True, num_interleave_out_buffer_elements=4, num_interleave_in_buffer_elements=5,
                 on_corrupt="skip_file"),
     BUFFERS, None, True, 7),
    ("continuous_sequence", "  num_read_buffer_bytes: 0\n  num_prefetch: 2\n  min_window: 2\n  max_window: 2\n",
     ReadOptions(num_read_buffer_bytes=0, num_prefetch=2), ShuffleOptions(), WindowSpec(2, 2, None), False, None),
    ("continuous_sequence", """\
  num_read_buffer_bytes: 0
  num_prefetch: 0
  num_parallel_parses: 2
  min_window: 2
  max_window: 5
  stride: 3
  padding: true
  seed: 0
""" + SHUFFLED,
     ReadOptions(num_read_buffer_bytes=0, num_prefetch=0, num_parallel_parses=2), BUFFERS, WindowSpec(2, 5, 3),
     False, 0),
    ("discrete_sequence", """\
  num_read_buffer_bytes: 1024
  num_prefetch: 1
  min_window: 1
  max_window: 3
  padding: true
  shuffle: false
""",
     ReadOptions(num_read_buffer_bytes=1024, num_prefetch=1), ShuffleOptions(), WindowSpec(1, 3, None), False,
     None),
]


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    write_manifest(d, [feature("x", "float32", [2], "float")])
    write_records(d / "a.tfrecords", [example(x=("float", [i, i + 0.5])) for i in range(6)])
    return d


def load(tmp_path, data, loader: str, args: str):
    path = tmp_path / f"{loader}.yaml"
    path.write_text(HEAD.format(loader=loader, data=data) + args)
    return load_config(path)


@pytest.mark.parametrize("loader, args, reading, shuffling, window, multi_load, seed", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_group_holds_its_keys_with_defaults_for_the_absent(tmp_path, data, loader, args, reading, shuffling,
                                                               window, multi_load, seed):
    config = load(tmp_path, data, loader, args)
    assert (config.reading, config.shuffling, config.window) == (reading, shuffling, window)
    assert (config.multi_load, config.seed) == (multi_load, seed)


def test_a_window_is_fixed_when_its_lengths_are_equal():
    assert WindowSpec(3, 3).fixed and not WindowSpec(2, 3).fixed


def test_a_fingerprint_names_each_grouped_setting_by_its_config_key(tmp_path, data):
    from batchloaders.runtime import resume

    independent = resume._parts(load(tmp_path, data, *CASES[1][:2]))
    assert not {"reading", "shuffling", "window", "scope"} & set(independent)
    assert {k: independent[k] for k in ("num_parallel_reads", "num_prefetch", "on_corrupt", "shuffle",
                                        "num_mix_files", "shuffle_scope", "min_window", "max_window", "stride")} == {
        "num_parallel_reads": 3, "num_prefetch": None, "on_corrupt": "skip_file", "shuffle": True,
        "num_mix_files": 2, "shuffle_scope": "buffer", "min_window": None, "max_window": None, "stride": None}
    windows = resume._parts(load(tmp_path, data, *CASES[3][:2]))
    assert (windows["min_window"], windows["max_window"], windows["stride"]) == (2, 5, 3)
