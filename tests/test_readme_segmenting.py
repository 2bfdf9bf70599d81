"""README's segmenting examples run as written: the Keras model trains with truncated BPTT, the custom loop's
loss falls and its checkpoint holds the lanes' states; the lane diagram is what the scheduler does."""
from __future__ import annotations

from test_readme_plugins import run, section_blocks

HEADING = "### Segmenting (truncated backpropagation through time)"


def test_the_keras_and_custom_loop_examples_run(warm_python):
    blocks = [code for lang, code in section_blocks(HEADING) if lang == "python"]
    assert len(blocks) == 2
    check = ("\nimport math\nfirst, last = history.history['loss'][0], history.history['loss'][-1]\n"
             "assert math.isfinite(last) and last < first, history.history\n"
             "assert np.mean(losses[-10:]) < np.mean(losses[:10]), losses\n"
             "restored = batchloaders.StateSaver({'h': tf.zeros([UNITS]), 'c': tf.zeros([UNITS])}, LANES)\n"
             "tf.train.Checkpoint(states=restored).restore(path).expect_partial()\n"
             "np.testing.assert_array_equal(restored.variables[0].numpy(), model.states.variables[0].numpy())\n"
             "print('ok')\n")
    done = run(warm_python, blocks[0] + "\n" + blocks[1] + check)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok"), done.stdout


def test_the_lane_diagram_is_what_the_scheduler_gives(tmp_path):
    import numpy as np

    from batchloaders import build_input_fn
    from test_segmenting import config, write

    (diagram,) = [code for lang, code in section_blocks(HEADING) if lang == "text"]
    lines = diagram.strip().splitlines()
    d = write(tmp_path / "diagram", [[4, 9, 5, 2, 6]])
    got = {0: [], 1: []}
    for batch in build_input_fn(config(d, {"num_unroll": 3}, target_batch_size=2))().as_numpy_iterator():
        for lane in (0, 1):
            r, k = int(batch["id"][lane]), int(batch["sequence"][lane])
            got[lane].append("-" if not batch["length"][lane] else "abcde"[r] + str(k))
    assert [line.split()[2:] for line in lines[1:]] == [got[0], got[1]]
    assert np.array_equal(lines[0].split()[1:], [str(i) for i in range(len(got[0]))])
