"""Fill `model_card.md`, the card that every saved or converted ELMo folder carries as README.md."""

from importlib import resources
from string import Template

from torch import nn

from .configuration_elmo import ElmoConfig


def render_model_card(
    model: nn.Module,
    model_id: str,
    source: str,
    results: str = "",
    pipeline_tag: str = "feature-extraction",
    license: str = "apache-2.0",
    language: str = "en",
    base_model: str | None = None,
) -> str:
    """The card for `model` (an ELMo model), with its sizes, where it came from and its measured results."""
    config: ElmoConfig = model.config
    template = Template(resources.files("hf_elmo").joinpath("model_card.md").read_text(encoding="utf-8"))
    return template.substitute(
        model_name=model_id.rsplit("/", 1)[-1],
        model_id=model_id,
        pipeline_tag=pipeline_tag,
        license=license,
        language=language,
        extra_metadata=f"base_model: {base_model}\n" if base_model else "",
        parameters=f"{sum(p.numel() for p in model.parameters()):,}",
        num_layers=config.num_lstm_layers + 1,
        num_lstm_layers=config.num_lstm_layers,
        hidden_size=config.hidden_size,
        cell_size=config.cell_size,
        projection_dim=config.projection_dim,
        cell_clip=config.cell_clip if config.cell_clip is not None else "none",
        proj_clip=config.proj_clip if config.proj_clip is not None else "none",
        use_skip_connections="yes" if config.use_skip_connections else "no",
        num_char_filters=config.num_char_filters,
        char_embedding_dim=config.char_embedding_dim,
        num_highway_layers=config.num_highway_layers,
        max_characters_per_token=config.max_characters_per_token,
        source=source,
        results=results.strip(),
    )
