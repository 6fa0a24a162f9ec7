"""hf_elmo/files.py: what mutations showed no test held. A file here (not only a folder) is never a Hub id, so a
model named by a file is refused as one; input_inside follows links (replacing the folder would delete what a link
leads to); atomic_file's file holds the whole text when it is synced to the disk."""

import os
import stat

import pytest

from hf_elmo import files
from hf_elmo.files import check_model_location, input_inside, is_hub_id, write_text_atomically


def test_a_file_here_is_never_a_hub_id(tmp_path, monkeypatch):
    """`elmo`, a valid repository id, names the file of that name here, as from_pretrained would read it: not a Hub
    id, and refused as a model folder, naming it (it was taken for a Hub id, and the loading failed on the Hub)."""
    monkeypatch.chdir(tmp_path)
    assert is_hub_id("elmo")
    (tmp_path / "elmo").write_text("not a model")
    assert not is_hub_id("elmo")
    with pytest.raises(ValueError, match="^elmo: is a file, not a model folder$"):
        check_model_location("elmo")


def test_an_input_inside_a_folder_is_found_through_links(tmp_path):
    """An input whose path is a link into the folder lies in it (replacing the folder whole would delete what the
    link leads to); inputs elsewhere, and None, are not."""
    output = tmp_path / "output"
    output.mkdir()
    (output / "vocab.txt").write_text("the\n")
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "vocab.txt"
    link.symlink_to(output / "vocab.txt")
    other = tmp_path / "elsewhere" / "sources.json"
    other.write_text("{}")
    assert input_inside(output, [None, other, link]) == link
    assert input_inside(output, [None, other]) is None
    (tmp_path / "output-link").symlink_to(output)
    assert input_inside(tmp_path / "output-link", [output / "vocab.txt"]) == output / "vocab.txt"


def test_an_atomic_write_is_whole_when_it_is_synced(tmp_path, monkeypatch):
    """The new file is flushed before it is synced: the fsync covers the whole text (synced before the flush, it
    covered what Python had not yet written, nothing at all for a short file)."""
    sizes, fsync = [], os.fsync

    def record(descriptor):
        status = os.fstat(descriptor)
        if stat.S_ISREG(status.st_mode):
            sizes.append(status.st_size)
        return fsync(descriptor)

    monkeypatch.setattr(files.os, "fsync", record)
    write_text_atomically(tmp_path / "vocab.txt", "the\nof\n")
    assert sizes == [len("the\nof\n")]


def test_the_hub_is_called_unreachable_only_where_no_proxy_or_offline_mode_would_decide(monkeypatch):
    """Where the Hub's host name does not resolve, loading a Hub id fails at once, saying why; but a proxy may reach
    the Hub without this machine resolving its name, and offline mode fails at once by itself: with either, the Hub
    client decides (a proxy user's every load was refused, the proxy never tried). `.invalid` names never resolve."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "https://hub.invalid")
    for name in files.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert files.unreachable_hub() == "hub.invalid"
    for name in files.PROXY_VARIABLES:
        monkeypatch.setenv(name, "http://proxy.example:3128")
        assert files.unreachable_hub() is None, name
        monkeypatch.delenv(name)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    assert files.unreachable_hub() is None


def test_whole_characters_ends_a_block_between_two_characters():
    """At every cut of text with characters of 1 to 4 UTF-8 bytes, the bytes kept are those of the whole characters
    before the cut (the rest, 1 to 3 bytes of one character, go with the next block); invalid bytes count as whole."""
    text = "a😀b天c é" * 3
    data = text.encode("utf-8")
    starts = {len(text[:i].encode("utf-8")) for i in range(len(text) + 1)}  # where each character begins
    for cut in range(len(data) + 1):
        assert files.whole_characters(data[:cut]) == max(start for start in starts if start <= cut), cut
    assert files.whole_characters(b"\x80\x80\x80\x80") == 4 and files.whole_characters(b"a\xff") == 2
