"""The `hf-elmo` command."""

import re

from hf_elmo.cli import main


def test_demo_shows_static_layer0_and_contextual_layers(converted, capsys):
    assert main(["demo", "--model", str(converted["allennlp-elmo"])]) == 0
    out = capsys.readouterr().out
    assert "'I eat an apple .': 5 words; hidden_states [5, 32], [5, 32], [5, 32]" in out
    rows = {m.group(1).strip(): [float(x) for x in m.group(2).split()]
            for m in re.finditer(r"^(\S+ / \S+)\s+((?:-?\d\.\d{4}\s*){4})$", out, re.M)}
    assert set(rows) == {"apple / Apple", "bank / bank", "天 / 天"}
    for label in ("bank / bank", "天 / 天"):
        assert rows[label][0] == 1.0  # same spelling: the context-free layer cannot tell the two apart
        assert all(value < 0.999 for value in rows[label][1:])
