"""bilm-tf's initialisation, as `ElmoPreTrainedModel._init_weights` documents it, in every parameter group: for a new
model, for a model built on the meta device, and for what `from_pretrained` finds missing (a new head, or a
checkpoint without any weight); for bilm-tf's form and for ELMoForManyLangs' (word input, forget bias stored in the
weights)."""

import math

import pytest
import torch
from safetensors.torch import load_file

from hf_elmo import ElmoConfig, ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel

# Wide enough layers for the statistics below: every filter, highway and LSTM matrix has hundreds of weights.
CONFIG = dict(
    char_embedding_dim=16, char_cnn_filters=[[1, 32], [2, 32], [3, 64]], num_highway_layers=2, cell_size=128,
    projection_dim=64, num_lstm_layers=2, lm_vocab_size=500, num_labels=5,
)
# The same with ELMoForManyLangs' options: a word embedding in front of the projection, the forget bias in the weights.
FORMS = {
    "bilm-tf": CONFIG,
    "ELMoForManyLangs": dict(CONFIG, word_vocab_size=300, word_embedding_dim=128, bos_word_id=1, eos_word_id=2,
                             forget_bias=0.0),
}


# The share of a normal's draws more than one standard deviation from the mean (a uniform's is 1 - 1 / sqrt(3), 0.42).
NORMAL_SHARE_PAST_ONE_STD = math.erfc(1 / math.sqrt(2))  # 0.317


def assert_normal(tensor, std, name):
    """Drawn from N(0, std): mean, standard deviation and the share of values past one standard deviation within a
    few standard errors (the share tells a normal from a uniform of the same std), no outlier past 6 std."""
    values = tensor.detach().double().flatten()
    error = std / math.sqrt(len(values))
    assert abs(values.mean().item()) < 5 * error, (name, values.mean().item(), std)
    assert abs(values.std().item() - std) < 0.1 * std, (name, values.std().item(), std)
    assert values.abs().max().item() < 6 * std, name
    share, expected = (values.abs() > std).double().mean().item(), NORMAL_SHARE_PAST_ONE_STD
    share_error = math.sqrt(expected * (1 - expected) / len(values))
    assert 4 * share_error < 0.1, (name, len(values))  # (enough values to tell the uniform's 0.42 apart)
    assert abs(share - expected) < 4 * share_error, (name, share, expected)


def assert_uniform(tensor, bound, name):
    """Drawn from U(-bound, bound): within the bound, reaching near it, with the uniform's standard deviation."""
    values = tensor.detach().double().flatten()
    assert values.abs().max().item() <= bound, (name, values.abs().max().item(), bound)
    assert values.abs().max().item() > 0.9 * bound, name
    assert abs(values.std().item() - bound / math.sqrt(3)) < 0.1 * bound / math.sqrt(3), name


def assert_constant(tensor, value, name):
    assert torch.equal(tensor.detach(), torch.full_like(tensor, value)), (name, tensor)


def assert_bilm_tf_initialisation(model, skip=()):
    """Every parameter of `model` (but those whose name starts with one of `skip`) as `_init_weights` documents."""
    config = model.config
    checked = set()
    for name, parameter in model.named_parameters():
        if name.startswith(tuple(skip)):
            checked.add(name)
            continue
        short = name.removeprefix("elmo.")
        if short == "char_encoder.char_embedding.weight":
            assert_constant(parameter[0], 0.0, "padding row")
            assert_uniform(parameter[1:], 1.0, name)
        elif short.startswith("char_encoder.char_cnn.") and short.endswith(".weight"):
            out_channels, in_channels, width = parameter.shape
            if config.char_cnn_activation == "relu":
                assert_normal(parameter, math.sqrt(1.0 / (width * in_channels)), name)
            else:
                assert_uniform(parameter, 0.05, name)
        elif short.startswith("char_encoder.highway.") and short.endswith("carry.bias"):
            assert_constant(parameter, -2.0, name)  # mostly carry the input through
        elif short.startswith("char_encoder.highway.") and short.endswith(".weight"):
            assert_normal(parameter, math.sqrt(1.0 / config.num_char_filters), name)
        elif short == "char_encoder.projection.weight":  # it reads the word vector too, with word input
            assert_normal(parameter, math.sqrt(1.0 / (config.num_char_filters + config.word_embedding_dim)), name)
        elif short == "char_encoder.word_embedding.weight":
            assert_normal(parameter, math.sqrt(1.0 / config.word_embedding_dim), name)
        elif short.startswith("char_encoder.") and short.endswith(".bias"):  # CNN, transform, projection biases
            assert_constant(parameter, 0.0, name)
        elif short.startswith("layers.") and short.endswith(("input_weight", "recurrent_weight")):
            assert_uniform(parameter, math.sqrt(6.0 / (2 * config.projection_dim + 4 * config.cell_size)), name)
        elif short.startswith("layers.") and short.endswith("projection_weight"):
            assert_uniform(parameter, math.sqrt(6.0 / (config.cell_size + config.projection_dim)), name)
        elif short.startswith("layers.") and short.endswith(".bias"):  # the forget block starts the cell at bias 1
            cell = config.cell_size
            assert_constant(parameter[:, cell : 2 * cell], 1.0 - config.forget_bias, name)
            assert_constant(parameter[:, :cell], 0.0, name)
            assert_constant(parameter[:, 2 * cell :], 0.0, name)
        elif short.startswith("scalar_mixes.") and short.endswith("scalar_parameters"):
            assert_constant(parameter, 0.0, name)
        elif short.startswith("scalar_mixes.") and short.endswith("gamma"):
            assert_constant(parameter, 1.0, name)
        elif name == "classifier.weight":
            assert_normal(parameter, config.initializer_range, name)
        elif name == "softmax.weight":
            assert_normal(parameter, 1.0 / math.sqrt(config.projection_dim), name)
        elif name in ("classifier.bias", "softmax.bias"):
            assert_constant(parameter, 0.0, name)
        else:
            raise AssertionError(f"no documented initialisation for {name}")
        checked.add(name)
    assert checked == {name for name, _ in model.named_parameters()}


MODEL_CLASSES = (ElmoModel, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoForPreTraining)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("model_class", MODEL_CLASSES)
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_a_new_model_starts_from_bilm_tfs_initialisation(model_class, activation, form):
    torch.manual_seed(0)
    assert_bilm_tf_initialisation(model_class(ElmoConfig(**FORMS[form], char_cnn_activation=activation)))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("model_class", MODEL_CLASSES)
def test_a_model_built_on_the_meta_device_initialises_every_weight(model_class, form):
    torch.manual_seed(0)
    with torch.device("meta"):
        model = model_class(ElmoConfig(**FORMS[form]))
    model.to_empty(device="cpu")  # uninitialised memory until init_weights
    model.init_weights()
    assert_bilm_tf_initialisation(model)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("model_class", MODEL_CLASSES)
def test_from_pretrained_initialises_every_missing_weight(model_class, form):
    """No checkpoint tensor at all: transformers materialises every weight from the meta device, uninitialised."""
    torch.manual_seed(0)
    model = model_class.from_pretrained(None, config=ElmoConfig(**FORMS[form]), state_dict={})
    assert_bilm_tf_initialisation(model)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("head", [ElmoForTokenClassification, ElmoForSequenceClassification, ElmoForPreTraining])
def test_a_new_head_on_a_saved_body_is_initialised_and_the_body_loaded(head, form, tmp_path):
    """The loaded weights are left as saved: the padding row of the character embedding and, with a stored forget
    bias, the LSTM biases' forget block too."""
    torch.manual_seed(0)
    body = ElmoModel(ElmoConfig(**FORMS[form]))
    with torch.no_grad():  # a trained body looks nothing like a new one
        for parameter in body.parameters():
            parameter.add_(torch.randn_like(parameter))
    body.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    model = head.from_pretrained(tmp_path)
    new_part = "softmax." if head is ElmoForPreTraining else "classifier."
    assert_bilm_tf_initialisation(model, skip=["elmo."])
    loaded = {name.removeprefix("elmo."): p for name, p in model.named_parameters() if not name.startswith(new_part)}
    assert loaded.keys() == saved.keys() - ({"scalar_mixes.0.scalar_parameters", "scalar_mixes.0.gamma"}
                                             if head is ElmoForPreTraining else set())
    for name, parameter in loaded.items():
        assert torch.equal(parameter, saved[name]), name
