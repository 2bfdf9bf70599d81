"""The preparation API raises located problems (an argument by its name, a directory, a data file and its
record, a manifest's JSON path) where the commands print lines naming options; both from one error."""
from __future__ import annotations

import os

import pytest

import batchloaders
from batchloaders.cli.write_manifest import error_lines, is_usage
from batchloaders.errors import ConfigError, DataError, ManifestError, Problem
from batchloaders.prepare.manifest import write_manifest
from batchloaders.prepare.refused import ARGUMENTS, DamagedFiles, InvalidExisting
from conftest import example, write_records


def data(root) -> str:
    write_records(os.path.join(root, "part-0.tfrecords"), [example(id=("int", [i])) for i in range(3)])
    return str(root)


def test_a_bad_pattern_names_the_argument_and_the_command_its_option(tmp_path):
    with pytest.raises(ConfigError) as raised:
        batchloaders.write_manifest(data(tmp_path), pattern="[")
    (problem,) = raised.value.problems
    assert (problem.file, problem.path) == (ARGUMENTS, "pattern") and problem.message.startswith("'[': found '['")
    assert error_lines(raised.value) == [f"--pattern {problem.message}"] and is_usage(raised.value)


def test_a_directory_without_data_files_is_located_at_the_directory(tmp_path):
    with pytest.raises(ManifestError) as raised:
        batchloaders.write_manifest(str(tmp_path))
    (problem,) = raised.value.problems
    assert (problem.file, problem.path) == (str(tmp_path), "directory")
    assert error_lines(raised.value) == [problem.message] and not is_usage(raised.value)


def test_a_damaged_file_is_located_at_its_record(tmp_path):
    root = data(tmp_path)
    path = os.path.join(root, "part-0.tfrecords")
    with open(path, "rb") as f:
        blob = f.read()
    with open(path, "wb") as f:
        f.write(blob[:-3])
    with pytest.raises(DamagedFiles) as raised:
        write_manifest(root)
    assert isinstance(raised.value, DataError)
    (problem,) = raised.value.problems
    assert problem.file.endswith("part-0.tfrecords") and problem.path == "record 2"
    assert error_lines(raised.value)[-1] == ("no manifest written: 1 problem in the data files (see "
                                             "`batchloaders verify`)")


def test_an_invalid_existing_manifest_keeps_its_located_problems(tmp_path):
    root = data(tmp_path)
    with open(os.path.join(root, "__manifest__.json"), "w") as f:
        f.write("{bad")
    with pytest.raises(InvalidExisting) as raised:
        write_manifest(root)
    (problem,) = raised.value.problems
    assert problem.file.endswith("__manifest__.json") and problem.path == "$"
    assert error_lines(raised.value) == [str(problem), "fix or remove the existing manifest first"]


def test_the_api_returns_what_was_written_and_guessed(tmp_path):
    written = write_manifest(data(tmp_path))
    assert (written.files, written.records) == (1, 3) and written.path.endswith("__manifest__.json")
    assert written.lines()[0].startswith("features inferred from 3 records of 1 file")
    assert "id: int64 [] (an int64_list of 1 value in every record looked at)" in written.guessed


def test_other_problems_print_as_they_are():
    error = ManifestError(Problem("m.json", "$.files[0]", "found 1: expected 2"))
    assert error_lines(error) == ["m.json: $.files[0]: found 1: expected 2"]
