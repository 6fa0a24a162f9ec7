# test_pipeline_mixin.py resolves tokenizer classes through `direct_transformers_import("<sdist>/src/transformers")`,
# which executes this file and then returns `sys.modules["transformers"]`: the installed transformers under test.
# The sdist's own source tree is not needed, so this file stays empty.
