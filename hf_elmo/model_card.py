"""Fill `model_card.md`, the card that every saved or converted ELMo folder carries as README.md."""

import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from string import Template

from huggingface_hub.utils import HFValidationError, validate_repo_id
from torch import nn

from .configuration_elmo import ElmoConfig
from .files import is_hub_id

# The base model carries the LSTM state across batches if asked to (`initial_states`, `final_states`); the heads read
# each sentence on its own (their outputs have no `final_states`, and their forward takes no `initial_states`).
_STATEFUL = """Outputs are stateless by default (the same sentence always gets the same vectors). The original model
carried the LSTM state from batch to batch; to do the same, pass the previous output's `final_states` as the
next call's `initial_states` (the next batch has as many sentences, row i continuing row i):

```python
next_batch = tokenizer(["It was red .", "It makes phones ."], padding=True, return_tensors="pt")
next_output = model(**next_batch, initial_states=output.final_states)
```"""
_STATELESS = ("Predictions are stateless: each sentence is read on its own, so the same sentence always gets the same "
              "logits.")

# What each class is for on the Hub: its pipeline tag, the Auto class that loads it, what its output holds and
# whether it can carry the LSTM state. Other classes (ElmoModel, ElmoForPreTraining) get the base card: AutoModel
# loads their biLM as an ElmoModel.
_CLASS_CARDS = {
    "ElmoForSequenceClassification": (
        "text-classification",
        "AutoModelForSequenceClassification",
        "output.logits                 # [batch, {num_labels}]: {labels}",
        _STATELESS,
    ),
    "ElmoForTokenClassification": (
        "token-classification",
        "AutoModelForTokenClassification",
        "output.logits                 # [batch, words, {num_labels}]: {labels}",
        _STATELESS,
    ),
}
_BASE_CARD = (
    "feature-extraction",
    "AutoModel",
    "output.hidden_states          # every layer, each [batch, words, {hidden_size}]\n"
    "output.elmo_representations   # the learned scalar mix(es)",
    _STATEFUL,
)


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """`1 sentence`, `2 sentences`, `0 sentences`; PLURAL where adding an s is wrong (`batch`, `batches`)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def check_language(language: str | Sequence[str]) -> None:
    """Refuse what is not a language code (`en`, `zh`, `pt-BR`, `und`, or the Hub's `multilingual`), or a list of
    them: it goes into the card's YAML header as it is."""
    if not isinstance(language, str) and not (isinstance(language, (list, tuple)) and language):  # (None failed in
        # a TypeError; [] gave a header whose language read null)
        raise ValueError(f"{language!r} is not a language code: give an ISO 639 code such as en, or a list of them")
    for code in [language] if isinstance(language, str) else language:
        if not (isinstance(code, str)
                and (code == "multilingual" or re.fullmatch(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*", code))):
            raise ValueError(f"{code!r} is not a language code: give ISO 639 codes such as en, zh or pt-BR")


# Words that YAML 1.1 (PyYAML, which the Hub's card reader uses) may read as true or false, Norwegian's `no` among
# them: quoted in any case (quoting one that would have read as text does no harm).
YAML_BOOLEANS = {"y", "n", "yes", "no", "on", "off", "true", "false"}


def _yaml_code(code: str) -> str:
    """A language code or license id as the card's YAML header reads it back: quoted where YAML would read a
    boolean."""
    return f'"{code}"' if code.lower() in YAML_BOOLEANS else code


def check_license(license: str | None) -> None:
    """Refuse what is not a license id as the Hub spells them (`apache-2.0`, `mit`, `cc-by-sa-4.0`, `other`): it goes
    into the card's YAML header as it is. None: the card names no license."""
    if license is not None and not (isinstance(license, str) and re.fullmatch(r"[a-z][a-z0-9.+-]*", license)
                                    and license != "null"):  # (YAML reads null, 123 or 1.0 as no string)
        raise ValueError(f"{license!r} is not a license id: give the Hub's, such as apache-2.0, mit or cc-by-4.0 "
                         "(or other)")


def check_pipeline_tag(pipeline_tag: str | None) -> None:
    """Refuse what is not a Hub task name (`feature-extraction`, `token-classification`): it goes into the card's YAML
    header as it is (a line break in it added a key of its own). None: the class's task."""
    if pipeline_tag is not None and not (isinstance(pipeline_tag, str) and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*",
                                                                                          pipeline_tag)):
        raise ValueError(f"{pipeline_tag!r} is not a pipeline tag: give the Hub's task name, such as "
                         "feature-extraction or token-classification")


def check_model_id(model_id: str) -> None:
    """A card's model id, which its usage code passes to `from_pretrained`: a Hub id (`validate_repo_id`), so that
    the card's code runs as written (one with a newline or a quote broke its code block)."""
    try:
        validate_repo_id(model_id)
    except HFValidationError:
        raise ValueError(f"{model_id!r} is not a Hub model id, which the card's from_pretrained(...) names: NAME or "
                         "NAMESPACE/NAME, of letters, digits, '-', '_' and '.' (no '--' or '..', not beginning or "
                         "ending with '-' or '.', at most 96 characters)") from None


def card_option_problem(language=None, license=None, model_id=None) -> str | None:
    """What is wrong with a command line's --language, --license or --model-id (None: not given), named as that
    option, or None where all can go into a card."""
    for option, value, check in (("language", language, check_language), ("license", license, check_license),
                                 ("model-id", model_id, check_model_id)):
        if value is not None:
            try:
                check(value)
            except ValueError as error:
                return f"--{option} {error}"
    return None


def render_model_card(
    model: nn.Module,
    model_id: str,
    source: str,
    results: str = "",
    pipeline_tag: str | None = None,
    license: str | None = None,
    language: str | Sequence[str] = "en",
    base_model: str | None = None,
) -> str:
    """
    The card for `model` (any ELMo class), with its sizes, where it came from and its measured `results`
    (Markdown). `pipeline_tag` defaults to the class's task; `license` is the weights' (a Hub license id; None: the
    card names none, as the code's license says nothing of weights converted or trained with it); `language` is an
    ISO 639 code or a list of them (`und`: not known); `base_model` (a Hub id) is the model a head was fine-tuned
    from.
    """
    check_language(language)
    check_license(license)
    check_pipeline_tag(pipeline_tag)
    config: ElmoConfig = model.config
    class_pipeline_tag, auto_class, outputs, state = _CLASS_CARDS.get(type(model).__name__, _BASE_CARD)
    labels = ", ".join(str(label) for _, label in sorted(config.id2label.items()))
    template = Template(resources.files("hf_elmo").joinpath("model_card.md").read_text(encoding="utf-8"))
    return template.substitute(
        model_name=model_id.rsplit("/", 1)[-1],
        model_id=model_id,
        pipeline_tag=pipeline_tag or class_pipeline_tag,
        license_metadata=f"license: {_yaml_code(license)}\n" if license else "",
        language=(_yaml_code(language) if isinstance(language, str)
                  else "".join(f"\n- {_yaml_code(code)}" for code in language)),
        extra_metadata=f"base_model: {base_model}\n" if base_model else "",
        parameters=f"{sum(p.numel() for p in model.parameters()):,}",
        num_layers=config.num_lstm_layers + 1,
        num_lstm_layers=config.num_lstm_layers,
        lstm_layers=counted(config.num_lstm_layers, "biLSTM layer"),
        hidden_size=config.hidden_size,
        bilstm=_bilstm_description(config),
        num_char_filters=config.num_char_filters,
        char_cnn_activation=config.char_cnn_activation,
        char_embedding_dim=config.char_embedding_dim,
        highway_layers=counted(config.num_highway_layers, "highway layer"),
        max_characters_per_token=config.max_characters_per_token,
        input=_input_description(config),
        source=source,
        results=results.strip(),
        auto_class=auto_class,
        outputs=outputs.format(hidden_size=config.hidden_size, num_labels=config.num_labels, labels=labels),
        state=state,
    )


def _bilstm_description(config: ElmoConfig) -> str:
    """The cell, its projection and clips, and the residual connections, as far as the model has them."""
    clip = lambda value: "none" if value is None else value  # noqa: E731
    if config.has_lstm_projection:
        described = (f"cell {config.cell_size}, projection {config.projection_dim}, cell clip {clip(config.cell_clip)}, "
                     f"projection clip {clip(config.proj_clip)}")
    else:  # (the cell is as wide as the layer: there is nothing for the projection clip to clip)
        described = f"cell {config.cell_size} (no projection), cell clip {clip(config.cell_clip)}"
    if config.num_lstm_layers == 1:  # (a residual connection adds a layer's input, which only a second layer has)
        return described + ", residual connections: none (one layer)"
    return described + f", residual connections: {'yes' if config.use_skip_connections else 'no'}"


def _input_description(config: ElmoConfig) -> str:
    """How the model reads a word: its UTF-8 bytes, or its characters in char.dic (and its id in word.dic)."""
    if config.alphabet == "bytes":
        return "each word's UTF-8 bytes: there are no out-of-vocabulary words"
    described = (f"each word's characters in char.dic: {config.n_characters - 1} entries, the special `<bos>`, `<eos>`, "
                 "`<oov>`, `<pad>`, `<bow>` and `<eow>` among them (other characters read as `<oov>`)")
    if config.word_vocab_size:
        described += (f"; and its id in word.dic: {config.word_vocab_size} entries, the special `<oov>`, `<bos>`, "
                      f"`<eos>` and `<pad>` among them (other words read as `<oov>`), {config.word_embedding_dim}-"
                      "dimensional word vectors")
    return described


def _folder_card_data(name_or_path: str | Path | None):
    """The header of the card (README.md) of a model folder on this machine, or None where there is no path, or it
    is no folder, or its card is missing or unreadable. A card on the Hub is not fetched."""
    from huggingface_hub import ModelCard

    card = Path(name_or_path) / "README.md" if name_or_path else None
    if card is None or not card.is_file():
        return None
    try:
        return ModelCard.load(card).data
    except Exception:  # noqa: BLE001 (an unreadable file, a header that is not YAML: yaml's own errors among them)
        return None


def folder_card_license(name_or_path: str | Path | None) -> str | None:
    """The `license` of the card of a model folder on this machine (a model made from it inherits it), or None
    where there is none, or none that `check_license` accepts."""
    data = _folder_card_data(name_or_path)
    license = getattr(data, "license", None)
    try:
        check_license(license)
    except ValueError:
        return None
    return license


def folder_card_language(name_or_path: str | Path | None) -> str | list[str]:
    """The `language` of the card (README.md) of a model folder on this machine; `und` where its card names no
    language that `check_language` accepts, or there is none (the card of a new model then says `und` rather than
    fail)."""
    data = _folder_card_data(name_or_path)
    if data is None:
        return "und"
    language = data.language
    if isinstance(language, list) and len(language) == 1:
        language = language[0]
    try:
        check_language(language)
    except (TypeError, ValueError):  # (None, a number, an empty list: no language)
        return "und"
    return language if isinstance(language, str) else list(language) or "und"


def default_model_card(model: nn.Module, repo_id: str) -> str:
    """The card `push_to_hub` writes when it is given none: the model's sizes and where it was loaded from, and the
    language and license of the card of the folder it was loaded from (`und` and none where none says)."""
    name_or_path = str(getattr(model, "name_or_path", "") or "")
    # A Hub id names the base model; a local folder means nothing to readers of the Hub.
    from_hub = is_hub_id(name_or_path)
    source = f"`{name_or_path}`" if from_hub else f"hf-elmo `{type(model).__name__}`"
    base_model = name_or_path if from_hub and type(model).__name__ in _CLASS_CARDS else None
    return render_model_card(model, repo_id, source=source, base_model=base_model,
                             language=folder_card_language(name_or_path), license=folder_card_license(name_or_path))
