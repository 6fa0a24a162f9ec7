# A package of the test tree, as in the transformers repository.
