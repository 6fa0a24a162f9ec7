"""embed_pinned_caches.py's own parts on a tiny model (no `make data` needed): the CoNLL reader, `run`, whose
counts of words computed start from empty caches each time and whose pinned batches resume exactly, and the order
of its timed runs."""

import sys

import numpy as np
import pytest
import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import embed_pinned_caches  # noqa: E402

from hf_elmo import ElmoConfig, ElmoEmbedder, ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.embed_file import plan_batches  # noqa: E402


def test_conll_sentences_keeps_the_last_sentence_and_leaves_out_docstart(tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n\nPeter NNP B-NP B-PER\n"
                    "Blackburn NNP I-NP I-PER\n")  # (no blank line after the last sentence)
    assert embed_pinned_caches.conll_sentences(text) == ["EU rejects", "Peter Blackburn"]


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=((1, 8), (2, 8)), num_highway_layers=1, cell_size=32,
                         projection_dim=16)).save_pretrained(folder)
    ElmoTokenizer().save_pretrained(folder)
    return ElmoEmbedder(str(folder))


SENTENCES = [" ".join(f"w{(k * 7 + i) % 23}" for i in range(3 + k % 5)) for k in range(24)]


@pytest.mark.parametrize("pinned", [False, True])
def test_each_run_starts_from_empty_caches_and_counts_its_own_work(embedder, pinned):
    batches = plan_batches(SENTENCES, 4, stateful=False)
    first = embed_pinned_caches.run(embedder, SENTENCES, batches, pinned)
    second = embed_pinned_caches.run(embedder, SENTENCES, batches, pinned)
    assert first[2] == second[2] and first[2][0] > 0, (first[2], second[2])


def test_pinned_batches_resumed_alone_are_the_same_as_after_the_first_half(embedder):
    batches = plan_batches(SENTENCES, 4, stateful=False)
    half = len(batches) // 2
    whole = embed_pinned_caches.run(embedder, SENTENCES, batches, True)[1][half:]
    resumed = embed_pinned_caches.run(embedder, SENTENCES, batches, True, first=half)[1]
    assert len(whole) == len(resumed) == len(batches) - half
    assert all((a == b).all() for x, y in zip(whole, resumed) for a, b in zip(x, y))


def test_the_two_ways_are_timed_in_turns(tmp_path, monkeypatch, capsys, embedder):
    """Each round timed unpinned then pinned, always in that order (the README quotes their time ratios); now in
    turns, as embed_batching.py times its two ways, so that neither always runs first."""
    order = []

    def fake_run(embedder, sentences, batches, pinned, first=0):
        order.append(pinned)
        return 1.0, [[np.zeros(2)]] * len(batches[first:]), (0, 0)

    text = tmp_path / "train.txt"
    text.write_text("EU NNP B-NP B-ORG\n\nPeter NNP B-NP B-PER\n")
    monkeypatch.setattr(embed_pinned_caches, "CONLL_TRAIN", text)
    monkeypatch.setattr(embed_pinned_caches, "run", fake_run)
    monkeypatch.setattr(embed_pinned_caches, "ElmoEmbedder", lambda path: embedder)
    # (main() sets torch's thread count: at this process's own, so that the tests after it keep theirs; at 1, the
    # kernel choices and sums of the processes that later tests start and compare with this one differed)
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", ["embed_pinned_caches.py", "--model", "given", "--rounds", "3",
                                      "--threads", str(threads)])
    embed_pinned_caches.main()
    assert torch.get_num_threads() == threads
    assert order[:6] == [False, True, True, False, False, True]  # (then the resumption checks)
    assert "caches pinned (hf-elmo embed)" in capsys.readouterr().out
