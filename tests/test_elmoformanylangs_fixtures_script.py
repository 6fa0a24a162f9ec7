"""conversion/make_elmoformanylangs_fixtures.py's arguments, checked before any work and in any venv (the work needs
elmoformanylangs, which only the peer venv holds; the script imported it first, so every mistake was that traceback).

The audit's defects: OUTPUT is replaced whole, and `.` (a folder of other files) was wiped; OUTPUT under a file was a
mkdir traceback, a missing --training-text a read_text one; --training-text without --published-size and --source
without --check-against were ignored."""

import argparse
import subprocess
import sys

import pytest

from conftest import ELMOFORMANYLANGS, REPO, assert_only_an_error_line
from conversion import make_elmoformanylangs_fixtures as script

SCRIPT = REPO / "conversion" / "make_elmoformanylangs_fixtures.py"


def arguments(output, **options) -> argparse.Namespace:
    values = {"published_size": False, "training_text": None, "check_against": None, "source": None} | options
    return argparse.Namespace(output=str(output), **values)


def test_a_folder_of_other_files_is_refused_and_kept_from_the_command_line(tmp_path):
    """`make_elmoformanylangs_fixtures.py .` in a folder of the user's: one line, exit code 2, the files kept (they
    were deleted), in this venv, which has no elmoformanylangs."""
    (tmp_path / "notes.txt").write_text("keep me\n")
    result = subprocess.run([sys.executable, str(SCRIPT), "."], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert_only_an_error_line(result.returncode, result.stderr, f"OUTPUT {tmp_path}: a folder with other files in it")
    assert (tmp_path / "notes.txt").read_text() == "keep me\n" and result.stdout == ""


@pytest.mark.parametrize("case", ["under a file", "a file", "missing text", "text without published size",
                                  "source without check", "published size with check", "missing npz",
                                  "missing source", "missing folder to check"])
def test_unusable_arguments_are_one_error_line_naming_the_option(case, tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    npz = str(ELMOFORMANYLANGS / "with_words_outputs.npz")
    argv, message = {
        "under a file": ([str(tmp_path / "a-file" / "out")], f"{tmp_path / 'a-file'} is a file"),
        "a file": ([str(tmp_path / "a-file")], "is a file, not a folder"),
        "missing text": ([str(tmp_path / "out"), "--published-size", "--training-text", str(tmp_path / "none.txt")],
                         f"--training-text {tmp_path / 'none.txt'}: no such file"),
        "text without published size": ([str(tmp_path / "out"), "--training-text", str(tmp_path / "a-file")],
                                        "--training-text is read only with --published-size"),
        "source without check": ([str(tmp_path / "out"), "--source", str(ELMOFORMANYLANGS / "with_words")],
                                 "--source is read only with --check-against"),
        "published size with check": ([str(ELMOFORMANYLANGS / "with_words"), "--check-against", npz,
                                       "--published-size"], "--published-size writes a model, --check-against"),
        "missing npz": ([str(ELMOFORMANYLANGS / "with_words"), "--check-against", str(tmp_path / "none.npz")],
                        f"--check-against {tmp_path / 'none.npz'}: no such file"),
        "missing source": ([str(ELMOFORMANYLANGS / "with_words"), "--check-against", npz, "--source",
                            str(tmp_path / "none")], f"--source {tmp_path / 'none'}: no such folder"),
        "missing folder to check": ([str(tmp_path / "none"), "--check-against", npz],
                                    f"OUTPUT {tmp_path / 'none'}: no such folder"),
    }[case]
    assert_only_an_error_line(script.main(argv), capsys.readouterr().err, message)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a-file"]


def test_a_folder_the_script_made_an_empty_one_or_a_new_one_may_be_written(tmp_path):
    """What passes the checks: the committed fixtures (their README.md says the script made them), an empty or a new
    folder; --training-text's text is read then."""
    (tmp_path / "text.txt").write_text("天气 不错\n", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    for output in (ELMOFORMANYLANGS, tmp_path / "empty", tmp_path / "new" / "deeper"):
        assert script.check_arguments(arguments(output)) is None
    assert script.check_arguments(arguments(tmp_path / "new", published_size=True,
                                            training_text=str(tmp_path / "text.txt"))) == "天气 不错\n"
    assert script.made_here(ELMOFORMANYLANGS) and not script.made_here(ELMOFORMANYLANGS / "with_words")
