"""pretrain.py --resume beyond a crash: the vocabulary options of a resumed run."""

from collections import Counter

from conftest import assert_one_error
from test_pretrain_options import snapshot
from test_pretraining import TRAIN, run_main

TEXT = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--logging-steps", 1, "--seed", 7]


def train(capsys, *arguments) -> str:
    code, out, err = run_main(capsys, *arguments)
    assert code == 0, err
    return out



def test_vocabulary_options_of_a_resume_must_choose_the_checkpoints_vocabulary(tmp_path, capsys):
    """A resumed run predicts its checkpoint's vocabulary: --vocab-file, --vocab-size and --min-count (even
    --min-count 1, the default) were silently ignored there. Now a resume refuses those that would choose another
    vocabulary, naming them, and accepts those that choose the checkpoint's (`make pretrain-default` resumes with its
    --min-count 3)."""
    counts = Counter((TRAIN / "data.txt").read_text().split())
    assert len({sum(count >= least for count in counts.values()) for least in (1, 2, 3)}) == 3  # 3 vocabularies
    folder = tmp_path / "run"
    train(capsys, *TEXT, "--min-count", 3, "--max-steps", 4, "--save-steps", 2, "--output-dir", folder)
    checkpoint, before = folder / "checkpoint-2", snapshot(folder)
    started_with = (checkpoint / "vocab.txt").read_bytes()
    resume = [*TEXT, "--save-steps", 2, "--output-dir", folder, "--resume", "--max-steps"]
    for options, named in [(["--min-count", 2], "--min-count 2"), (["--min-count", 1], "--min-count 1"),
                           (["--vocab-size", 10, "--min-count", 3], "--vocab-size 10 and --min-count 3"),
                           (["--vocab-file", TRAIN / "vocab.txt"], f"--vocab-file {TRAIN / 'vocab.txt'}")]:
        code, _, err = run_main(capsys, *resume, 6, *options)
        assert_one_error(code, err, f"--resume {checkpoint}: {named} would choose another vocabulary than the one the run "
                                    f"was started with ({checkpoint / 'vocab.txt'}), which a resumed run keeps")
        assert snapshot(folder) == before
    # Options that choose the checkpoint's vocabulary are accepted, and none.
    out = train(capsys, *resume, 6, "--min-count", 3, "--vocab-size", 1000)
    assert f"resumed from {checkpoint} at step 2" in out
    out = train(capsys, *resume, 8)
    assert f"resumed from {folder / 'checkpoint-4'} at step 4" in out
    assert (folder / "vocab.txt").read_bytes() == started_with

