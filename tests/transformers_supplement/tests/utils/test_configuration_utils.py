"""Stands in for tests/utils/test_configuration_utils.py, which the sdist lacks.

`ConfigTester.check_config_arguments_init` builds a config from `config_common_kwargs` and checks that each value
was kept: every field of transformers 5's base `PreTrainedConfig`, each set to a value other than its default.
"""

config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["ElmoModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
