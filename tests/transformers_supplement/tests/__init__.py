# The sdist's tests/ has no __init__.py; its modules import each other relatively (`from .utils...`), so it must be
# a package. test_configuration_common.py also runs this file through `direct_transformers_import`, which then
# hands back the installed transformers: keep it empty.
