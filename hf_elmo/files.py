"""Text input read with one clear error, output locations checked before any work starts, and one run per output.

What every hf-elmo command does with the files it is given (sentences, corpora, vocabularies, model folders, the
folders and files it writes, each written whole or not at all), so that bad input fails at once with a message
naming the file, never after the work or deep inside a library. Messages are `ValueError`s (or the caller's own
subclass, `error=`).
"""

import contextlib
import errno
import hashlib
import json
import os
import socket
import stat
import tempfile
import threading
import urllib.parse
from pathlib import Path

import huggingface_hub.constants
from huggingface_hub.utils import HFValidationError, validate_repo_id

try:  # lexicon.py's atomic writes make this file Hub remote code too, which must import where fcntl does not exist
    import fcntl
except ImportError:  # (Windows: no OutputLock there)
    fcntl = None

_UMASK_GUARD = threading.Lock()  # (where the umask is read by setting it: one thread at a time)
# A byte-order mark that some editors put at the start of UTF-8 files: not part of the first word.
BYTE_ORDER_MARK = "\ufeff"
# Text files are checked in blocks of about this many bytes (cut between characters), so a corpus, even one long
# line, needs no more memory.
CHECK_BLOCK_BYTES = 1 << 22


def decode_utf8(data: bytes, path, first_line: int = 1, first_byte: int = 0) -> str:
    """`data` (the file `path` from line `first_line`, byte `first_byte` on) as text, without a leading byte-order
    mark. An error names the line and the byte of the file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = first_line + data[: error.start].count(b"\n")
        raise ValueError(
            f"{path}: line {line} is not UTF-8 text ({error.reason} at byte {first_byte + error.start})"
        ) from None
    return text.removeprefix(BYTE_ORDER_MARK) if first_line == 1 else text


def whole_characters(data: bytes) -> int:
    """How many bytes at the start of `data` end between two UTF-8 characters: all of them, unless the last 1 to 3
    bytes begin a character that continues beyond `data`. (Invalid bytes count as whole: decoding names them.)"""
    continuation = 0  # (a character cut short has at most 2 of its 3 continuation bytes here)
    while continuation < 2 and continuation < len(data) and data[-1 - continuation] & 0xC0 == 0x80:
        continuation += 1
    if continuation == len(data):
        return len(data)
    lead = data[-1 - continuation]
    length = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
    return len(data) - continuation - 1 if length > continuation + 1 else len(data)


def read_file_bytes(path, what: str = "text file", error: type[ValueError] = ValueError) -> bytes:
    """The bytes of the file `path` (a `what`), read once (a pipe gives them only once), with one clear error."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a file") from None
    except OSError as failure:
        raise error(f"{path}: cannot read the {what} ({failure.strerror})") from None


def read_text_file(path, what: str = "text file", error: type[ValueError] = ValueError) -> str:
    """The whole UTF-8 file `path` (a `what`: "vocabulary file", ...) as text, without a byte-order mark."""
    data = read_file_bytes(path, what, error)
    try:
        return decode_utf8(data, path)
    except ValueError as failure:
        raise error(str(failure)) from None


def check_text_file(path, what: str = "text file", error: type[ValueError] = ValueError,
                    allow_empty: bool = False) -> None:
    """Fail unless `path` is a readable UTF-8 file, non-empty unless `allow_empty`, with the messages of
    `read_text_file`; reads it in blocks, for corpora of any size."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            line, offset, pending, empty = 1, 0, b"", True
            while block := handle.read(CHECK_BLOCK_BYTES):
                data = pending + block
                empty = empty and BYTE_ORDER_MARK.encode().startswith(data)  # (a byte-order mark alone is no text)
                cut = whole_characters(data)  # a character may straddle the block's end
                decode_utf8(data[:cut], path, line, offset)
                line += data.count(b"\n", 0, cut)
                offset += cut
                pending = data[cut:]
            decode_utf8(pending, path, line, offset)
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except IsADirectoryError:  # (learnt from open, as read_text_file does: an is_dir() before it raised a bare
        # PermissionError for a file in a folder that this process may not search)
        raise error(f"{path}: is a folder, not a file") from None
    except OSError as failure:
        raise error(f"{path}: cannot read the {what} ({failure.strerror})") from None
    except ValueError as failure:
        raise error(str(failure)) from None
    if empty and not allow_empty:
        raise error(f"{path}: the {what} is empty")


def is_hub_id(name) -> bool:
    """`name` is a Hub repository id rather than a local path: a valid id (`validate_repo_id`) that names nothing
    on this machine (a folder of that name, where there is one, wins, as it does for `from_pretrained`)."""
    if not name or os.path.exists(name):
        return False
    try:
        validate_repo_id(str(name))
    except HFValidationError:
        return False
    return True


# Where a proxy may reach the Hub although this machine cannot resolve its name.
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def unreachable_hub() -> str | None:
    """The Hub's host name where this machine cannot look it up (no network): loading a Hub id then retries for about
    a minute, printing each try, before it fails; `local_files_only` fails at once, or loads the Hub cache's copy.
    None where the name resolves, where a proxy may reach it anyway, or in offline mode (which is quick already)."""
    if huggingface_hub.constants.HF_HUB_OFFLINE or any(os.environ.get(name) for name in PROXY_VARIABLES):
        return None
    host = urllib.parse.urlparse(huggingface_hub.constants.ENDPOINT).hostname
    try:
        socket.getaddrinfo(host, 443)
    except socket.gaierror:
        return host
    except (OSError, UnicodeError):  # (anything else: let the Hub client try, and say what it finds)
        return None
    return None


def hub_out_of_reach(name) -> str | None:
    """Where `name` is a Hub id and the Hub cannot be looked up from here (`unreachable_hub`), why a load of it that
    fails (with `local_files_only`, so at once) failed: the caller's error names it. None otherwise."""
    host = unreachable_hub() if is_hub_id(str(name)) else None
    return host and (f"no folder of that name here, and the Hub ({host}) cannot be reached from this machine, whose "
                     "Hub cache does not hold it")


# What a JSON value that is not an object is, in JSON's words.
JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false",
              type(None): "null"}


def is_elmoformanylangs_config(settings: dict) -> bool:
    """Whether a config.json's settings are ELMoForManyLangs' own (naming its architecture json), not a converted
    folder's: read as an ElmoConfig, they gave warnings of fields it does not know, and then no weights were found."""
    return "config_path" in settings and "model_type" not in settings


def model_folder_problem(path) -> str | None:
    """Why `path` is not a model folder (a folder with a config.json), in a few words, or None where it is one. A
    config.json or tokenizer_config.json that holds JSON but no object (of settings) is named too: transformers'
    loading failed on it with an AttributeError from deep inside."""
    path = Path(path)
    if (path / "config.json").is_file():
        for name in ("config.json", "tokenizer_config.json"):
            try:
                settings = json.loads((path / name).read_text(encoding="utf-8"))
            except (OSError, ValueError):  # (none, or no JSON: the loading says so, naming the file)
                continue
            if not isinstance(settings, dict):
                return f"its {name} holds {JSON_KINDS[type(settings)]}, not an object of settings"
            if name == "config.json" and is_elmoformanylangs_config(settings):
                return ("an ELMoForManyLangs model folder, not converted: convert it with "
                        "conversion/convert_elmoformanylangs.py first")
        return None
    if not path.exists():
        return "no such folder"
    if not path.is_dir():
        return "is a file, not a model folder"
    return "its config.json is not a file" if (path / "config.json").exists() else "no config.json, not a model folder"


def check_model_location(name, error: type[ValueError] = ValueError) -> None:
    """Fail, naming `name` and why, unless it is a Hub id or a model folder (transformers would take a path that
    names no model folder for a malformed Hub id). An empty name is no location (it read as the current folder)."""
    if not str(name):
        raise error("the model's location is empty: give a model folder or a Hub id")
    problem = None if is_hub_id(str(name)) else model_folder_problem(name)
    if problem:
        raise error(f"{name}: {problem}")


def check_output_location(path, kind: str, error: type[ValueError] = ValueError, writes_inside: bool = False) -> None:
    """Fail unless a `kind` ("file" or "folder") can be written at `path`, before any work is done.

    `path` must not be the other kind, no file may stand where a folder of the path belongs, and the folder where
    the new entry will be made (the nearest one that exists) must be writable; this is tried, as permissions alone
    do not tell (a read-only file system, or root). `writes_inside`: an existing folder `path` is written into
    rather than replaced, so it is the one that must be writable. A file behind links is checked where they lead,
    where `atomic_file` writes it (links in a loop are refused). An empty path is refused: it would read as the
    current folder, which a folder written in its place would replace.
    """
    if not os.fspath(path):
        raise error(f"the path of the {kind} to write is empty: give one")
    path = Path(path).absolute()
    if kind == "file" and path.is_symlink():
        try:
            path = link_target(path)
        except OSError:
            raise error(f"{path}: links in a loop, so it cannot be written") from None
    if path.exists() or path.is_symlink():
        if kind == "file" and path.is_dir():
            raise error(f"{path}: is a folder; give the path of the {kind} to write")
        if kind == "file" and path.exists() and not path.is_file():  # (as root, /dev/null was replaced by the file)
            raise error(f"{path}: is no regular file (a device or a pipe), which writing would replace; give the path "
                        "of a file")
        if kind == "folder" and not path.exists():
            raise error(f"{path}: is a link to {os.readlink(path)}, which does not exist")
        if kind == "folder" and not path.is_dir():
            raise error(f"{path}: is a file, not a folder")
    folder = path if writes_inside and path.is_dir() else path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise error(f"{folder}: is a file, so {path} cannot be written (a folder belongs there)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hf-elmo-write-check-", dir=folder))
    except OSError as failure:
        raise error(f"{folder}: cannot write there, so {path} cannot be written ({failure.strerror})") from None


def input_inside(folder, inputs):
    """The first of `inputs` (paths; None is skipped) that lies in `folder`, links followed, or None: replacing
    `folder` whole would delete it."""
    folder = Path(folder).resolve()
    return next((source for source in inputs
                 if source is not None and Path(source).resolve().is_relative_to(folder)), None)


def plain_mode(folder: bool = False) -> int:
    """The mode that mkdir (`folder`) or open would give a new entry under this process's umask (mkdtemp's and
    mkstemp's are private)."""
    return (0o777 if folder else 0o666) & ~_umask()


def give_plain_modes(folder: Path) -> None:
    """Give `folder` and everything in it the modes that mkdir and open would: mkdtemp makes a folder private
    (0700), and safetensors writes a model.safetensors private (0600), which a model to share is not."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(plain_mode(folder=path.is_dir()))


def _umask() -> int:
    """This process's umask, read without changing it where Linux tells it (/proc/self/status): setting it to read
    it, as elsewhere, gives another thread's new file that moment's mode."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_GUARD:
        umask = os.umask(0)
        os.umask(umask)
    return umask


def _mode_of_existing(path: Path) -> int | None:
    """The permission bits of the file at `path` (of its target, for a link), or None where there is none."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def link_target(path) -> Path:
    """Where a plain open would write `path`: the file at the end of its links (itself where it is none), which a
    file moved into place must replace, not the link. Links in a loop: OSError (ELOOP), as open gives."""
    target = Path(os.path.realpath(path))
    if target.is_symlink():  # (realpath leaves links in a loop as they are)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(target))
    return target


def temporary_prefix(name: str, role: str = "") -> str:
    """`.NAME.ROLE`, the prefix of a temporary entry (mkstemp's, mkdtemp's) beside the file or folder `name`: NAME cut
    to its first 64 bytes, so that with mkstemp's 8 random characters it stays within the 255 bytes a file system
    allows a name whatever the length of `name` (the whole name would not, for one of 240 bytes and more)."""
    return f".{os.fsdecode(os.fsencode(name)[:64])}.{role}"


@contextlib.contextmanager
def atomic_file(path, mode: str = "w"):
    """An open file (`mode` "w" for UTF-8 text, "wb" for bytes) that becomes `path` when the block ends without an
    error, creating its folder: a reader sees the old file or the whole new one, never a part, after a power cut
    too (the file is on the disk before its name is, and its name before this returns, where the folder can be
    synced). A link at `path` is
    written through, as a plain open writes: its target becomes the new file (made beside the target, on its file
    system) and the link stays (replacing the link itself left the target as it was). The file gets the mode a
    plain open would give it: the old file's own (a private file stays private), else the umask's."""
    path = link_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=temporary_prefix(path.name), dir=path.parent)
    try:
        with os.fdopen(handle, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        kept = _mode_of_existing(path)
        os.chmod(temporary, plain_mode() if kept is None else kept)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if os.name != "nt":  # (the new name to the disk too, where a folder can be synced: not on Windows, which
        with contextlib.suppress(OSError):  # opens no folder so, nor on some network file systems)
            fsync_path(path.parent)


def fsync_path(path) -> None:
    """Flush a file, or a folder's entries (a file moved into it), to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_text_atomically(path, text: str) -> None:
    """Write `text` (UTF-8) to `path` through `atomic_file`."""
    with atomic_file(path) as out:
        out.write(text)


def is_write_error(error: BaseException) -> bool:
    """Whether `error` is a write that failed (a full disk, a quota, a file size limit), not a fault of the program:
    the operating system's OSError, safetensors' I/O error, or torch.save's (a plain RuntimeError from its stream
    writer, "[enforce fail at inline_container.cc:...] . unexpected pos ...")."""
    if isinstance(error, OSError):
        return True
    from safetensors import SafetensorError

    text = str(error)
    if isinstance(error, SafetensorError):
        return "I/O error" in text
    return type(error) is RuntimeError and any(mark in text for mark in
                                               ("inline_container", "PytorchStreamWriter", "file write failed"))


def failure_text(error: BaseException) -> str:
    """An error in one line, its kind named (for a message that names the cause)."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def sha256_file(path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_tensors(tensors) -> "hashlib._Hash":
    """The sha256 of (name, tensor) pairs, names and bytes in the order given: a digest of a model's weights."""
    import torch  # (here, not above: the commands check their files before torch is loaded)

    digest = hashlib.sha256()
    for name, tensor in tensors:
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest


class OutputLock:
    """An exclusive lock that one run holds on its output, as the file `path`, for as long as the run lasts.

    The lock is the operating system's (`flock`): it ends with the process however it ends, so a run that crashed
    or was killed leaves nothing stuck. The file is removed when the lock is released (after a kill it stays, unlocked,
    until the next run releases it).
    """

    def __init__(self, path, output, error: type[ValueError] = ValueError):
        self.path, self.output, self.error = Path(path), output, error
        self._handle = None

    def __enter__(self) -> "OutputLock":
        while True:
            handle = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if self._locked(handle):
                    break
            except BaseException:  # (a full disk, say: the descriptor, and with it the lock, go with the error)
                os.close(handle)
                raise
            os.close(handle)
        self._handle = handle
        return self

    def _locked(self, handle: int) -> bool:
        """Lock the open file `handle` and write this process's id into it; False where the file at `path` is no
        longer the one opened (the run that held the lock removed it meanwhile: the caller opens the new one)."""
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self.error(
                f"{self.output}: another run is writing it (it holds {self.path}); wait for that run to end"
            ) from None
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(handle)
        if (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
            return False
        try:
            os.ftruncate(handle, 0)
            os.write(handle, f"{os.getpid()}\n".encode())
        except BaseException:  # (the lock is this run's: its file goes with it, as at release)
            os.unlink(self.path)
            raise
        return True

    def __exit__(self, *exc_info) -> None:
        if self._handle is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self._handle)
            self._handle = None


__all__ = ["OutputLock", "check_model_location", "check_output_location", "check_text_file", "decode_utf8",
           "link_target", "read_file_bytes", "read_text_file", "sha256_file"]
