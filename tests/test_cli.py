"""The `hf-elmo` command."""

import re

from hf_elmo.cli import main


def test_demo_shows_static_layer0_and_contextual_layers(converted, capsys, tmp_path):
    assert main(["demo", "--model", str(converted["allennlp-elmo"]), "--plot", str(tmp_path / "senses.png")]) == 0
    out = capsys.readouterr().out
    assert "(3 layers, each 32 wide)" in out
    rows = {m.group(1).strip(): [float(x) for x in m.group(2).split()]
            for m in re.finditer(r"^(\S+ / \S+)\s+((?:-?\d\.\d{4}\s*){4})$", out, re.M)}
    assert set(rows) == {"apple / Apple", "bank / bank", "天 / 天"}
    for label in ("bank / bank", "天 / 天"):
        assert rows[label][0] == 1.0  # same spelling: the context-free layer cannot tell the two apart
        assert all(value < 0.999 for value in rows[label][1:])
    assert (tmp_path / "senses.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_refuses_a_missing_model_or_an_unwritable_picture_in_one_line(tmp_path, capsys):
    """The picture's path is checked before the model loads (the model named here does not exist either)."""
    assert main(["demo", "--model", str(tmp_path / "no-such-model"), "--plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {tmp_path}: is a folder; give the path of the file to write"
    assert main(["demo", "--model", str(tmp_path / "no-such-model"), "--plot", str(tmp_path / "senses.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no-such-model" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == [] and not list(tmp_path.parent.glob(f".{tmp_path.name}.*"))
