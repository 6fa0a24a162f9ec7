"""hf_elmo/files.py: text checked in blocks without cutting a character, files written whole or not at all, one run
per output lock, and what is a Hub id."""

import errno
import fcntl
import hashlib
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import unwritable_folder

from hf_elmo import files
from hf_elmo.files import (OutputLock, atomic_file, check_output_location, check_text_file, is_hub_id, read_text_file,
                           sha256_tensors, write_text_atomically)


def test_text_files_are_checked_in_blocks_without_cutting_a_character(tmp_path, monkeypatch):
    """check_text_file reads blocks (here of 5 bytes, shorter than a line) and decodes each up to its last whole
    character: a character across a block's end is read whole, an error names the line and byte of the file, as
    reading it whole does, and one long line is decoded in blocks too, never held whole."""
    monkeypatch.setattr(files, "CHECK_BLOCK_BYTES", 5)
    decoded, decode_utf8 = [], files.decode_utf8  # the length of each piece decoded, then decoded as before
    monkeypatch.setattr(files, "decode_utf8", lambda data, *args: decoded.append(len(data)) or decode_utf8(data, *args))
    good = tmp_path / "good.txt"
    good.write_text("é天\n" * 7 + "no newline at the end: 天", encoding="utf-8")
    check_text_file(good)
    one_line = tmp_path / "one-line.txt"
    one_line.write_text("天气不错！小天你说是吗？ 𝄞 " * 50, encoding="utf-8")
    decoded.clear()
    check_text_file(one_line)
    assert sum(decoded) == one_line.stat().st_size and max(decoded) <= 5 + 3
    bad = tmp_path / "bad.txt"
    bad.write_bytes("é天\n".encode() * 5 + "caf\xe9 au lait\n".encode("latin-1") + "天\n".encode())
    bad_one_line = tmp_path / "bad-one-line.txt"
    bad_one_line.write_bytes("天气不错".encode() * 20 + b"caf\xe9 au lait")
    truncated = tmp_path / "truncated.txt"
    truncated.write_bytes("天气不错\n".encode() * 3 + "天".encode()[:2])
    for read in (check_text_file, read_text_file):
        for path, message in [
            (bad, "line 6 is not UTF-8 text (invalid continuation byte at byte 33)"),
            (bad_one_line, "line 1 is not UTF-8 text (invalid continuation byte at byte 243)"),
            (truncated, "line 4 is not UTF-8 text (unexpected end of data at byte 39)"),
        ]:
            with pytest.raises(ValueError) as raised:
                read(path)
            assert str(raised.value) == f"{path}: {message}", (read, path)


def test_a_file_written_atomically_is_the_old_one_or_the_whole_new_one(tmp_path):
    """atomic_file: while the new file is written, the path reads the old one; a write that fails part way leaves the
    old one and no temporary file; the folder of a new path is made."""
    path = tmp_path / "results.json"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="stopped part way"):
        with atomic_file(path) as out:
            out.write("half of the new")
            raise RuntimeError("stopped part way")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["results.json"]
    with atomic_file(path) as out:
        out.write("new")
        out.flush()
        assert path.read_text() == "old"
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["results.json"]
    with atomic_file(tmp_path / "new" / "folder" / "picture.png", "wb") as out:
        out.write(b"\x89PNG")
    assert (tmp_path / "new" / "folder" / "picture.png").read_bytes() == b"\x89PNG"


def test_a_file_with_the_longest_name_allowed_is_written_atomically(tmp_path):
    """A name of 255 bytes, the most a file system allows, whose first 64 bytes end inside a character: the
    temporary file beside it is named from those bytes only (from the whole name, it could not be made)."""
    name = "x" + "é" * 127
    assert len(name.encode("utf-8")) == 255
    write_text_atomically(tmp_path / name, "whole")
    assert (tmp_path / name).read_text() == "whole" and os.listdir(tmp_path) == [name]


def test_a_file_written_atomically_through_a_link_replaces_its_target_and_keeps_the_link(tmp_path):
    """atomic_file at a link writes what a plain open would: the link's target (through a chain of links, relative
    ones, one whose target is not there yet), atomically, in the target's folder, with the target's mode; the link
    stays a link (it was replaced by a regular file, and the target left as it was). A write that fails leaves the
    target; links in a loop fail as open fails on them."""
    settings, links = tmp_path / "settings", tmp_path / "links"
    settings.mkdir()
    links.mkdir()
    target = settings / "kernels.json"
    target.write_text("old")
    target.chmod(0o600)
    (links / "kernels.json").symlink_to(os.path.relpath(target, links))
    (links / "again.json").symlink_to("kernels.json")
    for link in (links / "kernels.json", links / "again.json"):
        write_text_atomically(link, f"new through {link.name}")
        assert link.read_text() == target.read_text() == f"new through {link.name}"
    assert os.readlink(links / "kernels.json") == "../settings/kernels.json"
    assert os.readlink(links / "again.json") == "kernels.json"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with pytest.raises(RuntimeError, match="stopped part way"):
        with atomic_file(links / "again.json") as out:
            out.write("half")
            raise RuntimeError("stopped part way")
    assert target.read_text() == "new through again.json"
    assert sorted(os.listdir(links)) == ["again.json", "kernels.json"] and os.listdir(settings) == ["kernels.json"]
    (links / "later.json").symlink_to(settings / "sub" / "later.json")  # (its target is not there yet)
    write_text_atomically(links / "later.json", "made")
    assert (settings / "sub" / "later.json").read_text() == "made" and (links / "later.json").is_symlink()
    (links / "loop-a").symlink_to("loop-b")
    (links / "loop-b").symlink_to("loop-a")
    with pytest.raises(OSError) as raised:
        write_text_atomically(links / "loop-a", "never")
    assert raised.value.errno == errno.ELOOP
    assert os.readlink(links / "loop-a") == "loop-b" and os.readlink(links / "loop-b") == "loop-a"


def test_a_lock_whose_file_was_removed_meanwhile_is_taken_on_the_file_now_there(tmp_path, monkeypatch):
    """OutputLock, when the run that held the lock removes its file (its release) between this run's open and flock:
    the lock got on the removed file locks nothing, so the lock of a new file at the path is taken, and a further run
    is refused. (The interleaving is made by removing the file right after the first real flock.)"""
    path = tmp_path / "out.hdf5.lock"
    flock, removed = fcntl.flock, []

    def flock_then_the_holder_removes_the_file(handle, operation):
        flock(handle, operation)
        if not removed:
            removed.append(path)
            path.unlink()

    monkeypatch.setattr(fcntl, "flock", flock_then_the_holder_removes_the_file)
    with OutputLock(path, "out.hdf5"):
        assert removed and path.is_file()
        with pytest.raises(ValueError, match=rf"^out.hdf5: another run is writing it \(it holds {re.escape(str(path))}\)"):
            with OutputLock(path, "out.hdf5"):
                pass
    assert not path.exists()


def test_a_lock_that_fails_to_write_its_holder_is_released_with_the_error(tmp_path, monkeypatch):
    """OutputLock whose writing of the holder's process id fails (a full disk): the error comes through, and the
    descriptor, with the lock it held, and the lock's file go with it (it stayed open and locked, so every later run in the process
    was told that another run was writing the output)."""
    path = tmp_path / "out.hdf5.lock"
    real_ftruncate = os.ftruncate

    def full_disk(handle, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "ftruncate", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        with OutputLock(path, "out.hdf5"):
            pass
    assert not path.exists()  # (its file went with it, as at a release)
    monkeypatch.setattr(os, "ftruncate", real_ftruncate)
    with OutputLock(path, "out.hdf5"):  # (refused while the failed one's descriptor held the lock)
        assert path.read_text() == f"{os.getpid()}\n"
    assert not path.exists()


def test_a_folder_written_into_must_itself_be_writable(tmp_path):
    """check_output_location(writes_inside=True): an existing folder that files go into is the one tried, not the
    folder that holds it; a folder not there yet is made in its parent, which is tried."""
    folder = unwritable_folder(tmp_path)
    with pytest.raises(ValueError, match=f"^{re.escape(str(folder))}: cannot write there, so {re.escape(str(folder))} cannot"):
        check_output_location(folder, "folder", writes_inside=True)
    check_output_location(tmp_path / "new", "folder", writes_inside=True)


def test_a_file_behind_a_link_is_checked_where_the_link_leads(tmp_path, capsys):
    """atomic_file writes a link's target, so check_output_location checks there: a link into a folder that cannot
    be written, or links in a loop, were let through and failed after the work (`hf-elmo demo --plot`, after the
    whole demo, with an error that did not name --plot); the demo now refuses them before the model loads."""
    from hf_elmo.cli import main

    folder = unwritable_folder(tmp_path)
    (tmp_path / "link.png").symlink_to(folder / "picture.png")
    (tmp_path / "loop.png").symlink_to(tmp_path / "loop.png")
    (tmp_path / "fine.png").symlink_to(tmp_path / "elsewhere.png")
    with pytest.raises(ValueError, match=f"^{re.escape(str(folder))}: cannot write there, so "
                                         f"{re.escape(str(folder / 'picture.png'))} cannot be written"):
        check_output_location(tmp_path / "link.png", "file")
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'loop.png'))}: links in a loop"):
        check_output_location(tmp_path / "loop.png", "file")
    check_output_location(tmp_path / "fine.png", "file")
    for link in ("link.png", "loop.png"):  # (the model named does not exist: the plot is refused first)
        assert main(["demo", "--model", str(tmp_path / "no-model"), "--plot", str(tmp_path / link)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "no-model" not in err and len(err.splitlines()) == 1, err


def test_a_folder_here_is_never_a_hub_id(tmp_path, monkeypatch):
    """is_hub_id: a valid repository id names the Hub unless a folder of that name is here, which from_pretrained
    would load instead."""
    monkeypatch.chdir(tmp_path)
    assert is_hub_id("someone/elmo") and is_hub_id("elmo")
    (tmp_path / "someone" / "elmo").mkdir(parents=True)
    assert not is_hub_id("someone/elmo") and is_hub_id("someone/other")


def test_an_atomic_write_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    """atomic_file gives the mode a plain open would: a file it replaces keeps its own (a private file, 0600, was
    made readable by everyone, 0644 under the usual umask), and a new file gets the umask's."""
    private = tmp_path / "token.json"
    private.write_text("old")
    private.chmod(0o600)
    umask = os.umask(0o022)
    try:
        write_text_atomically(private, "new")
        write_text_atomically(tmp_path / "new.json", "new")
    finally:
        os.umask(umask)
    assert private.read_text() == "new" and stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["new.json", "token.json"]


def test_the_umask_is_read_without_being_set(tmp_path, monkeypatch):
    """plain_mode reads the umask from /proc/self/status: setting it to read it (os.umask) would give a file that
    another thread makes at that moment the mode 0666; the value is the one os.umask would give."""
    umask = os.umask(0o027)
    try:
        calls = []
        monkeypatch.setattr(files.os, "umask", lambda value: calls.append(value) or 0o027)
        assert files.plain_mode() == 0o640 and files.plain_mode(folder=True) == 0o750 and calls == []
    finally:
        monkeypatch.undo()
        os.umask(umask)


def test_an_atomic_write_is_on_the_disk_before_its_name_is(tmp_path, monkeypatch):
    """atomic_file flushes the new file to the disk before it takes the name, and the folder's entry after: a power
    cut leaves the old file or the whole new one (without the first, some file systems kept an empty file)."""
    synced, fsync = [], os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or fsync(fd))
    write_text_atomically(tmp_path / "vocab.txt", "new")
    assert len(synced) == 2 and Path(synced[0]).parent == tmp_path and Path(synced[0]).name.startswith(".vocab.txt.")
    assert synced[1] == str(tmp_path) and (tmp_path / "vocab.txt").read_text() == "new"


def test_text_files_and_output_locations_that_cannot_be_used_are_named(tmp_path):
    """check_text_file: a missing, empty (unless allowed) or folder path, by the caller's name for the file and in the
    caller's error class; check_output_location: a file where a folder of the path belongs, a file or a broken link
    where a folder is asked, or an empty path."""

    class InputError(ValueError):
        pass

    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "mark.txt").write_bytes(b"\xef\xbb\xbf")  # a byte-order mark alone: no text either
    (tmp_path / "mark-x.txt").write_bytes(b"\xef\xbb\xbfx")
    check_text_file(tmp_path / "mark-x.txt", "corpus")
    for path, message in [(tmp_path / "missing.txt", "corpus not found"), (tmp_path / "empty.txt", "the corpus is empty"),
                          (tmp_path / "mark.txt", "the corpus is empty"), (tmp_path, "is a folder, not a file")]:
        with pytest.raises(InputError, match=f"^{re.escape(str(path))}: {message}$"):
            check_text_file(path, "corpus", error=InputError)
    check_text_file(tmp_path / "empty.txt", "input file", allow_empty=True)  # (hf-elmo embed: a file of no lines)
    blocker = tmp_path / "empty.txt"
    with pytest.raises(ValueError, match=f"^{re.escape(str(blocker))}: is a file, so {re.escape(str(blocker))}/sub/out.hdf5 "
                                         r"cannot be written \(a folder belongs there\)$"):
        check_output_location(blocker / "sub" / "out.hdf5", "file")
    with pytest.raises(ValueError, match=f"^{re.escape(str(blocker))}: is a file, not a folder$"):
        check_output_location(blocker, "folder")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=f"^{re.escape(str(dangling))}: is a link to {re.escape(str(tmp_path))}/gone, "
                                         "which does not exist$"):
        check_output_location(dangling, "folder")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path))}/pipe: is no regular file \\(a device or a pipe\\), "
                                         "which writing would replace; give the path of a file$"):
        check_output_location(tmp_path / "pipe", "file")
    for kind in ("file", "folder"):  # (it would read as the current folder)
        with pytest.raises(InputError, match=f"^the path of the {kind} to write is empty: give one$"):
            check_output_location("", kind, error=InputError)


def test_sha256_tensors_digests_names_and_bytes_in_order():
    """The digest of (name, tensor) pairs: the names and each tensor's bytes (any dtype and shape, a scalar or a
    non-contiguous view too), in the order given."""
    weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    pairs = [("weight", weight.t()), ("gamma", torch.tensor(2.0)), ("half", torch.ones(2, dtype=torch.bfloat16))]
    expected = hashlib.sha256(b"weight" + np.float32([[0, 3], [1, 4], [2, 5]]).tobytes() + b"gamma" +
                              np.float32(2.0).tobytes() + b"half" + b"\x80\x3f" * 2)  # (bf16 1.0 is 0x3f80)
    assert sha256_tensors(pairs).hexdigest() == expected.hexdigest()
    assert sha256_tensors(reversed(pairs)).hexdigest() != expected.hexdigest()
    assert sha256_tensors([("weight", weight.t().double())]).hexdigest() != sha256_tensors(pairs[:1]).hexdigest()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_lock_refused_because_another_run_holds_it_leaves_no_descriptor_open(tmp_path):
    """OutputLock refused (another run holds it): the descriptor it opened is closed, every time (a process that
    retries, or embeds file after file, would otherwise run out of descriptors)."""
    path = tmp_path / "out.hdf5.lock"
    with OutputLock(path, "out.hdf5"):
        before = _open_descriptors()
        for _ in range(20):
            with pytest.raises(ValueError, match="another run is writing it"):
                with OutputLock(path, "out.hdf5"):
                    pass
        assert _open_descriptors() == before
    assert not path.exists()


def test_a_lock_whose_file_was_replaced_meanwhile_by_a_third_run_is_refused(tmp_path, monkeypatch):
    """Between this run's open and its flock, the holder releases (removes the file) and a third run makes a new
    lock file there and locks it: the lock this run got is on a file no longer at the path, so it must try the new
    one, which the third run holds: refused (not two runs on one output)."""
    path = tmp_path / "out.hdf5.lock"
    flock, third = fcntl.flock, []

    def flock_then_a_third_run_takes_a_new_file(handle, operation):
        flock(handle, operation)
        if not third:
            path.unlink()
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            third.append(descriptor)

    monkeypatch.setattr(fcntl, "flock", flock_then_a_third_run_takes_a_new_file)
    try:
        with pytest.raises(ValueError, match="another run is writing it"):
            with OutputLock(path, "out.hdf5"):
                pass
        assert path.is_file()  # (the third run's file, left to it)
    finally:
        for descriptor in third:
            os.close(descriptor)
