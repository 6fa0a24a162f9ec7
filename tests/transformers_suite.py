"""Where the common tests of the installed transformers are, for test_transformers_modeling.py and
test_transformers_tokenization.py.

`make transformers-tests` unpacks the `tests/` folder of the installed version's source distribution into
build/transformers-tests (with the stand-ins of tests/transformers_supplement for what the sdist lacks); this
module puts it first on `sys.path`, so that `import tests.test_modeling_common` finds it rather than this
repository's tests/ folder (a folder without `__init__.py`, which Python only uses when no package is found).
"""

import sys
from pathlib import Path

import transformers

TRANSFORMERS_TESTS = Path(__file__).resolve().parents[1] / "build" / "transformers-tests"


def use_transformers_tests() -> None:
    """Make transformers' common test modules importable as `tests.*`, or fail saying how to get them."""
    version_file = TRANSFORMERS_TESTS / "VERSION"
    found = version_file.read_text().strip() if version_file.exists() else None
    if found != transformers.__version__:
        raise RuntimeError(
            f"{TRANSFORMERS_TESTS} holds the tests of transformers {found or '(none)'}, and transformers "
            f"{transformers.__version__} is installed: run `make transformers-tests` (make test does it)"
        )
    if str(TRANSFORMERS_TESTS) not in sys.path:
        sys.path.insert(0, str(TRANSFORMERS_TESTS))
